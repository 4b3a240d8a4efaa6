#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: datapath_facts
short_description: Collect the live data-path state of a node in one call
version_added: "0.1.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "ethtool (driver and firmware; optional)"
  - "devlink from iproute2 (firmware; optional)"
  - "dcb from iproute2 (DCB state; optional)"
  - "lspci from pciutils (the topology section; optional)"
description:
  - Reads, in one call and without changing anything, what the collection's other modules
    manage - sysctl values, HugePage pools per size and NUMA node, transparent HugePages,
    the running kernel command line, memory and NUMA nodes, network interfaces (MTU, state,
    MAC, driver, speed, firmware), DCB/QoS state, storage (devices, mounts, fstab), the
    node-feature-discovery labels written on the node and the GPU, NIC, NVMe and PCIe topology
    (what M(aiinfra.datapath.node_topology) returns).
  - Returns them as the fact C(datapath_facts). The spec planner reads
    C(datapath_facts.memory_bytes) and C(datapath_facts.numa_nodes) from hostvars.
  - Never fails on a missing subsystem; such a section is V(null) and the reason is in
    C(datapath_facts.unavailable).
  - Runs no command for the sysfs/procfs sections. C(ethtool)/C(devlink) (firmware) and
    C(dcb) (qos) run only for netdevs backed by a device (C(/sys/class/net/IF/device));
    virtual NICs such as veth are reported from sysfs, QoS as not supported. The topology section
    runs C(lspci -vvv -D) and C(nvidia-smi) when they are installed, as M(aiinfra.datapath.node_topology) does.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  facts:
    support: full
    description: Returns C(ansible_facts.datapath_facts).
  platform:
    support: full
    platforms: posix
    description: Linux (procfs and sysfs).
options:
  gather:
    description:
      - Sections to collect. Sections not listed are V(null) in the result.
      - V(memory) fills C(memory_bytes) and C(numa_nodes); V(firmware) adds the firmware of
        device-backed NICs to C(interfaces); V(topology) fills C(topology); V(nic_config) the NV
        configuration of the NVIDIA/Mellanox NICs (C(mlxconfig -e query), read only).
      - V(routing) (not gathered unless listed; the audit lists it) fills C(routing) - the policy rules
        (IPv4 and IPv6), the routes of every table but local, main and default by table id, each interface's
        global addresses and its C(arp_ignore), C(arp_announce) and C(rp_filter) (and C(all)'s); the audit
        compares them with the plan's rails (rail_routing).
    type: list
    elements: str
    choices: [sysctl, hugepages, thp, cmdline, memory, interfaces, firmware, qos, storage, nfd, topology, last_run,
              nic_config, nic_affinity, ebpf, routing]
    default: [sysctl, hugepages, thp, cmdline, memory, interfaces, firmware, qos, storage, nfd, topology, last_run,
              nic_config, nic_affinity, ebpf]
  sysctl_keys:
    description:
      - Sysctl keys to read, dotted (V(net.ipv4.tcp_rmem)) or slashed (V(net/ipv4/tcp_rmem)).
      - Values are normalised as M(aiinfra.datapath.sysctl_profile) compares them (fields
        separated by one space).
    type: list
    elements: str
    default: []
  interfaces:
    description: Interfaces to report (interfaces and qos sections). Default is every netdev except C(lo).
    type: list
    elements: str
  storage_devices:
    description: Block devices to report, for example the plan's C(storage.devices).
    type: list
    elements: str
    default: []
  mount_paths:
    description: Mount points to report from C(/proc/self/mounts) and C(/etc/fstab).
    type: list
    elements: str
    default: []
  last_run_file:
    description:
      - The record a node in pull mode writes after each run (C(playbooks/local.yml), docs/pull.md);
        the C(last_run) section reads it, so the audit shows when a pulled node last converged and at which
        revision.
    type: path
    default: /var/lib/aiinfra-datapath/last-run.json
  nic_config_pci_dir:
    description:
      - Where the node lists its PCI functions (as O(aiinfra.datapath.nic_config#module:pci_dir) of
        M(aiinfra.datapath.nic_config)).
    type: path
    default: /sys/bus/pci/devices
  nic_config_tool:
    description: C(mlxconfig) or C(mstconfig); V(auto) takes the first found.
    type: str
    choices: [auto, mlxconfig, mstconfig]
    default: auto
  nic_config_arrays:
    description: Array parameters (V(NAME) or V(NAME[i])) to query per index, such as those the plan's C(raw) names.
    type: list
    elements: str
    default: []
  nic_config_state_file:
    description: M(aiinfra.datapath.nic_config)'s record (what it set, with the boot id).
    type: path
    default: /var/lib/aiinfra-datapath/nic_config.json
  nic_affinity:
    description:
      - The plan's C(nic_affinity) part. The C(nic_affinity) section is what M(aiinfra.datapath.nic_affinity) reads
        and would change with it (the same code, nothing changed); without it the section is V(null).
    type: dict
  ebpf:
    description:
      - The plan's C(ebpf_readiness) part (with C(interfaces), the plan's C(link_mtu.interfaces)). The C(ebpf)
        section is the findings of M(aiinfra.datapath.ebpf_readiness) (the same checks); without it V(null).
    type: dict
extends_documentation_fragment:
  - aiinfra.datapath.node
seealso:
  - module: aiinfra.datapath.sysctl_profile
  - module: aiinfra.datapath.hugepages
  - module: aiinfra.datapath.nic_firmware
  - module: aiinfra.datapath.node_topology
"""

EXAMPLES = r"""
- name: Everything, for the audit
  aiinfra.datapath.datapath_facts:
    sysctl_keys: "{{ datapath_plan.sysctl_profile['keys'] | list }}"
    storage_devices: "{{ datapath_plan.nvme_layout.devices | default([], true) }}"
    mount_paths: ["{{ datapath_plan.nvme_layout.mount.path }}"]

- name: Only memory and NUMA nodes (what the planner reads)
  aiinfra.datapath.datapath_facts:
    gather: [memory]

- name: Use the facts
  ansible.builtin.debug:
    msg: "{{ datapath_facts.memory_bytes }} bytes on {{ datapath_facts.numa_nodes }} NUMA node(s)"
"""

RETURN = r"""
ansible_facts:
  description: The facts.
  returned: always
  type: dict
  contains:
    datapath_facts:
      description: The live data-path state; sections not gathered or not readable are V(null).
      type: dict
      contains:
        version:
          description: Version of this shape (1).
          type: int
        gathered:
          description: The sections collected.
          type: list
          elements: str
        sysctl:
          description: Per key (dotted name) its normalised C(value) (V(null) when missing), C(state)
            (V(ok), V(read_only), V(missing), V(unreadable)), and what the next boot sets - C(boot), the value
            systemd-sysctl applies from the sysctl.d files in its order, the last assignment winning, and
            C(boot_file), the file it comes from (both V(null) when no file sets the key).
          type: dict
          sample: {"net.ipv4.tcp_rmem": {"value": "4096 131072 16777216", "state": "ok",
                   "boot": "4096 131072 16777216", "boot_file": "/etc/sysctl.d/90-aiinfra-datapath.conf"}}
        hugepages:
          description: C(default_size) and C(pools) per size (V(2M), V(1G)) with C(size_kb), C(total),
            C(free), C(resv), C(surplus) and C(per_node) (NUMA node -> C(total), C(free)).
          type: dict
          sample: {"default_size": "2M", "pools": {"2M": {"size_kb": 2048, "total": 64, "free": 64, "resv": 0,
                   "surplus": 0, "per_node": {"0": {"total": 64, "free": 64}}}}}
        thp:
          description: Selected transparent HugePage C(enabled) and C(defrag) values.
          type: dict
          sample: {"enabled": "madvise", "defrag": "madvise"}
        cmdline:
          description: The running kernel's command line (C(/proc/cmdline)) as a list of arguments.
          type: list
          elements: str
        memory_bytes:
          description: MemTotal in bytes.
          type: int
        numa_nodes:
          description: Number of NUMA nodes (C(/sys/devices/system/node/node*)); V(null) when unknown.
          type: int
        interfaces:
          description:
            - Per netdev (except C(lo)) C(mtu), C(operstate), C(mac), C(driver), C(bus_info), C(physical),
              C(speed_mbps) (V(null) when unknown) and C(firmware) (C(version), C(stored), C(psid),
              C(driver_version), C(sources), C(notes); V(null) for virtual NICs).
          type: dict
          sample: {"ens1f0np0": {"mtu": 9000, "operstate": "up", "mac": "02:dd:00:01:01:01", "driver": null,
                   "bus_info": null, "physical": false, "speed_mbps": 10000, "firmware": null}}
        qos:
          description:
            - Per netdev C(supported); when true C(backend), C(trust), C(pfc_priorities), C(dscp2prio),
              C(ets), C(ecn) (C(rp)/C(np) priority lists or V(null)), C(notes); when false the C(reason).
          type: dict
          sample: {"ens1f0np0": {"supported": false, "reason": "virtual interface (no device)"}}
        storage:
          description:
            - C(devices) (per given device C(exists), C(resolved), C(size_bytes), C(model), C(serial)),
              C(mounts) (per mount path C(mounted), C(source), C(fstype), C(options)) and C(fstab)
              (per mount path C(present), C(source), C(fstype), C(options)).
          type: dict
        nfd:
          description: C(directory), C(files) (file name -> labels) and C(labels) (all files merged).
          type: dict
          sample: {"directory": "/etc/kubernetes/node-feature-discovery/features.d",
                   "labels": {"aiinfra.io/nvme-cache": "true"}}
        topology:
          description:
            - The C(topology) of M(aiinfra.datapath.node_topology) (GPUs, NICs and NVMe devices with their
              NUMA nodes, PCIe paths and links, GPU to NIC and NVMe pairing, IOMMU, GPUDirect pieces); its
              notes (no GPU, a missing tool) go to C(notes), prefixed C(topology:).
            - The audit turns it into findings (docs/topology.md).
          type: dict
          sample: {"gpus": [], "nics": [{"name": "eth0", "pci": "0000:00:03.0", "numa_node": 0, "rdma": []}],
                   "nvme": [], "iommu": {"mode": "off"}}
        last_run:
          description:
            - The node's last pull run, from O(last_run_file) - C(present) (V(false) on a node that is pushed to),
              C(file), C(node), C(result) (V(succeeded), V(failed), or V(unreadable) when the file is not a JSON
              object), C(error), C(finished) (UTC, ISO 8601), C(revision) (the spec's git revision),
              C(check_mode), C(reboot_required), C(changed) and C(failed) (capabilities).
            - The audit report shows it per host (C(hosts[].last_run) of audit.json).
          type: dict
          sample: {"present": true, "file": "/var/lib/aiinfra-datapath/last-run.json", "node": "node1",
                   "result": "succeeded", "error": null, "finished": "2026-12-03T18:00:00Z",
                   "revision": "3f1c2e0", "check_mode": false, "reboot_required": false,
                   "changed": ["sysctl_profile"], "failed": []}
        nic_config:
          description:
            - The NV configuration of the node's NVIDIA/Mellanox NICs as C(mlxconfig -d BDF -e query) prints it, per
              device (its first physical function) - C(psid), C(part_number), C(driver), C(functions), C(columns),
              C(params) (per parameter the C(default), C(current), C(next_boot) text), C(max_read_request) per
              function, C(error) - plus C(tool), C(boot_id) and M(aiinfra.datapath.nic_config)'s C(record).
            - The audit compares C(current) with the plan's C(nic_config) (docs/network.md).
          type: dict
          sample: {"tool": "mlxconfig", "boot_id": "8d3f...", "record": {"version": 1, "devices": {}},
                   "devices": {"0000:3b:00.0": {"psid": "MT_0000000834", "part_number": "MCX755106AS-HEAT_Ax",
                                                "columns": ["default", "current", "next_boot"],
                                                "params": {"SRIOV_EN": {"default": "False(0)", "current": "True(1)",
                                                                        "next_boot": "True(1)", "read_only": false}},
                                                "max_read_request": {"0000:3b:00.0": 512}}}}
        routing:
          description:
            - C(rules) (C(ip -j rule show) entries with C(table_id) and C(family)), C(tables) (table id -> its
              routes, C(dst), C(gateway), C(dev)), C(addresses) (interface -> global addresses with prefix) and
              C(sysctl) (interface, and C(all) -> C(arp_ignore), C(arp_announce), C(rp_filter)).
            - The audit compares them with the plan's C(rail_routing) rails (docs/audit.md).
          type: dict
          sample: {"rules": [{"priority": 3101, "src": "198.18.1.15", "table": "3101", "table_id": 3101,
                              "family": "-4"}],
                   "tables": {"3101": [{"dst": "198.18.1.0/24", "dev": "ens2f0np0", "scope": "link"}]},
                   "addresses": {"ens2f0np0": ["198.18.1.15/24"]},
                   "sysctl": {"ens2f0np0": {"arp_ignore": "1", "arp_announce": "2", "rp_filter": "2"}}}
        nic_affinity:
          description:
            - What nic_affinity would change now (C(actions), the drift), each planned interface with its CPUs and
              completion IRQs (C(interfaces)), the IRQs off their planned CPU (C(misplaced)), irqbalance, notes;
              C(error) when the plan cannot be taken (an interface missing, no CPU left).
          type: dict
        ebpf:
          description: The eBPF datapath findings (C(findings)), per feature whether it is ready, and C(ready).
          type: dict
        unavailable:
          description: Section -> why it could not be read.
          type: dict
        notes:
          description: Remarks (interfaces asked for but absent, tool failures).
          type: list
          elements: str
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._datapath_facts import DatapathFacts


def main():
    module_main(DatapathFacts)


if __name__ == "__main__":
    main()
