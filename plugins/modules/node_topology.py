#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_topology
short_description: GPU, NIC, NVMe and NUMA topology of a node, PCIe link health and GPUDirect readiness
version_added: "0.4.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "lspci from pciutils (optional; sysfs otherwise)"
  - "nvidia-smi (optional)"
  - "nvme from nvme-cli (optional)"
  - "rdma from iproute2 (optional)"
description:
  - Reads the node's PCI tree from sysfs (C(/sys/bus/pci/devices), the resolved device path gives the
    host bridge, the root port and every switch port on the way) and lists the GPUs, the NICs (with
    their netdevs and RDMA devices, through C(/sys/class/net) and C(/sys/class/infiniband)) and the
    NVMe controllers (C(/sys/class/nvme)), each with its NUMA node, C(local_cpulist), PCI path and
    link speed and width, current against capable.
  - Pairs every GPU with every NIC and NVMe device and ranks each pair the way
    C(nvidia-smi topo -m) does; V(PIX) at most one PCIe switch between them, V(PXB) several switches
    below one root port, V(PHB) the same host bridge through different root ports, V(NODE) different
    host bridges on one NUMA node, V(SYS) across NUMA nodes. C(nearest_nics) and C(nearest_nvme)
    name the devices at the best rank; C(nearest_nics) counts only NICs with an RDMA device when the
    node has any (those are the ones GPUDirect RDMA and NCCL use).
  - With C(lspci) installed (and run as root, which can read config space), adds MaxPayload
    (control and capability), MaxReadReq, ACS control of every bridge between a GPU and a NIC or
    NVMe device (C(acs_redirect) names the bridges that redirect peer-to-peer traffic) and ATS.
  - With C(nvidia-smi), takes the GPU index order from C(nvidia-smi -q -x) and compares its own
    GPU to NIC ranks with C(nvidia-smi topo -m) (C(vendor.agrees), C(vendor.differences)).
  - Reports the IOMMU mode (V(off), V(passthrough), V(translated)) from C(/sys/class/iommu), the
    devices' IOMMU group types and the kernel command line, and the GPUDirect pieces (the
    C(nvidia_peermem) or C(nv_peer_mem) module for GPUDirect RDMA; C(nvidia_fs) and
    C(/etc/cufile.json) for GPUDirect Storage).
  - A tool that is missing or fails, or config space that cannot be read, leaves those fields
    unknown with the reason in C(notes); it is not an error. A node without GPUs (the lab) is
    reported as such and still lists its NICs and NVMe devices with their NUMA nodes.
  - Findings (a link trained down, a NIC on another NUMA node than its GPUs, ACS redirect on a
    GPU to NIC path, MaxReadReq or MaxPayload below capability, GPUDirect pieces missing) are
    computed on the controller from this result by C(topology_findings) in this collection's
    C(plugin_utils/topology_findings.py); see C(docs/topology.md).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Read-only; reads the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux sysfs; C(lspci) (pciutils) and C(nvidia-smi) when present.
options:
  lspci:
    description:
      - Run C(lspci -vvv -D) for MaxPayload, MaxReadReq, ACS and ATS. V(false) leaves them unknown.
    type: bool
    default: true
  nvidia_smi:
    description:
      - Run C(nvidia-smi -q -x) and C(nvidia-smi topo -m) when C(nvidia-smi) is installed, for the GPU
        index order and the vendor's matrix. V(false) orders GPUs by PCI address (nvidia-smi's default
        order) and compares with nothing.
    type: bool
    default: true
extends_documentation_fragment:
  - aiinfra.datapath.node
notes:
  - A GPU lowers its link speed while idle to save power, so C(trained_down) containing V(speed) on an
    idle GPU is expected; a width below capability is not.
  - Sysfs C(/sys/class/net) is per network namespace; the PCI tree is not. In a container or a lab node
    the NICs are still listed, without the netdevs of other namespaces.
seealso:
  - module: aiinfra.datapath.rdma_counters
  - module: aiinfra.datapath.datapath_facts
"""

EXAMPLES = r"""
- name: Topology of the node
  aiinfra.datapath.node_topology:
  become: true
  register: topo

- name: Each GPU's nearest NICs
  ansible.builtin.debug:
    msg: "{{ topo.topology.gpus | map(attribute='nearest_nics') | list }}"

- name: Without tools (sysfs only)
  aiinfra.datapath.node_topology:
    lspci: false
    nvidia_smi: false
"""

RETURN = r"""
topology:
  description: The node's topology.
  returned: always
  type: dict
  contains:
    gpus:
      description: >-
        GPUs in nvidia-smi index order (PCI order without nvidia-smi). Each has C(index), C(pci), C(name)
        (from nvidia-smi or null), C(vendor), C(device), C(driver), C(numa_node), C(local_cpulist),
        C(host_bridge), C(root_port), C(bridges) (root port down to the parent), C(link) (C(speed) and
        C(max_speed) in GT/s, C(width), C(max_width), C(trained_down)), C(pcie) (from lspci: C(known),
        C(max_payload), C(max_payload_cap), C(max_read_req), C(acs_ctl), C(ats), or C(reason)),
        C(nics) and C(nvme) (every device, nearest first, each with C(name), C(pci), C(relation),
        C(numa_node), C(rdma), C(bridges) crossed, C(acs_redirect), C(acs_unknown)), C(nearest_nics),
        C(nearest_nvme).
      type: list
      elements: dict
    nics:
      description: >-
        Physical NIC functions with C(name) (RDMA device, else netdev), C(netdevs), C(rdma) and the
        fields of a GPU.
      type: list
      elements: dict
    nvme:
      description: NVMe functions with C(name) (first controller), C(controllers) and the fields of a GPU.
      type: list
      elements: dict
    virtual_interfaces:
      description: Network interfaces without a PCI device (veth, bridge, bond, VLAN; V(lo) left out).
      type: list
      elements: str
    bridges:
      description: >-
        Per bridge above a GPU, NIC or NVMe device (root ports and switch ports), its C(pcie) fields
        (C(acs_ctl), C(max_payload_cap)) and C(link).
      type: dict
    numa_nodes:
      description: Per NUMA node, its C(cpulist).
      type: dict
    iommu:
      description: >-
        C(mode) (V(off), V(passthrough), V(translated), V(unknown)), C(units), C(cmdline) (the IOMMU
        arguments), C(group_types).
      type: dict
    gpudirect:
      description: >-
        C(modules) (V(nvidia), V(nvidia_peermem), V(nv_peer_mem), V(nvidia_fs): loaded or not),
        C(cufile_json) (C(present), C(valid)), C(rdma) (a peer-memory module is loaded), C(storage)
        (nvidia_fs loaded and cufile.json present).
      type: dict
    vendor:
      description: >-
        C(tool), C(matrix) (nvidia-smi's GPU x NIC relations), C(agrees) (null without nvidia-smi),
        C(differences).
      type: dict
    tools:
      description: Whether C(lspci) and C(nvidia_smi) were V(read), V(unknown) (missing or failed) or V(not used).
      type: dict
  sample:
    gpus:
      - {index: 0, pci: "0000:01:00.0", numa_node: 0, host_bridge: "pci0000:00", root_port: "0000:00:01.1",
         link: {speed: 2.5, max_speed: 16.0, width: 16, max_width: 16, trained_down: [speed]},
         nearest_nics: [mlx5_0, mlx5_1],
         nics: [{name: mlx5_0, pci: "0000:21:00.0", relation: NODE, numa_node: 0, rdma: true, bridges: [],
                 acs_redirect: [], acs_unknown: []}]}
    nics: [{name: mlx5_0, pci: "0000:21:00.0", netdevs: [enp33s0f0np0], rdma: [mlx5_0], numa_node: 0}]
    iommu: {mode: passthrough, units: [ivhd0], cmdline: {iommu: pt}, group_types: {}}
    gpudirect: {modules: {nvidia: true, nvidia_peermem: true, nv_peer_mem: false, nvidia_fs: false},
                cufile_json: {present: false, valid: null}, rdma: true, storage: false}
    vendor: {tool: "nvidia-smi topo -m", agrees: true, differences: []}
notes:
  description: What could not be read or was left out (a missing tool, unreadable config space, no GPU).
  returned: always
  type: list
  elements: str
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology import NodeTopology


def main():
    module_main(NodeTopology)


if __name__ == "__main__":
    main()
