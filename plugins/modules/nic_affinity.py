#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nic_affinity
short_description: Data NICs' completion IRQs, queues, RPS and XPS on their NUMA node's free CPUs, kept on link up
version_added: "0.4.0"
description:
  - For every interface in O(interfaces) (the plan's data NICs, several per fabric), in one call.
  - "Finds its completion IRQs the way the vendor tools do: the C(msi_irqs) of its PCI function and of
    its RDMA device, and the C(/proc/interrupts) names that carry its PCI address (C(mlx5_comp3@pci:0000:01:00.0))
    or its name (C(ens1f0-TxRx-3)). Control IRQs (C(mlx5_async0), C(mlx5_cmd_eq), C(-misc)) are left
    where the driver put them."
  - The CPUs for them are the NIC's C(local_cpulist) (else its NUMA node's CPUs, else all online CPUs),
    minus the CPUs kubelet reserves (C(reservedSystemCPUs) of O(kubelet_config)), minus the CPUs TuneD
    (C(isolated_cores) of the active profile) or the kernel (C(isolcpus=), C(nohz_full=)) isolate,
    minus O(exclude_cpus), within O(cpus). Completion IRQ C(k) of an interface gets one CPU of them, round
    robin, continuing across the interfaces that share those CPUs, so two rails on one NUMA node
    interleave instead of stacking their queue 0 on one CPU.
  - Writes C(smp_affinity_list) and reads every IRQ back from C(effective_affinity_list); an IRQ the
    interrupt controller keeps elsewhere is reported (O(on_misplaced)).
  - With O(channels) and O(rings) sets the queue counts and ring sizes (C(ethtool -L), C(ethtool -G)) first,
    and persists them in a drop-in of the C(.link) file udev applies to the NIC (O(persist)). With O(rps)
    each receive queue's C(rps_cpus) is those CPUs; with O(xps) transmit queue C(k) sends from the CPU of
    completion IRQ C(k).
  - irqbalance (O(irqbalance=ban)) is told to leave the planned NICs' IRQs alone by its C(--policyscript)
    (keyed by PCI device, so new IRQ numbers after a driver reload need no new configuration), in the one
    C(IRQBALANCE_ARGS) line of its configuration file that this module owns.
  - The kernel and the drivers undo a one-time pinning (a link that comes up, a driver reload, a channel
    change, XPS reset by the driver's open). With O(reapply) the saved plan
    (C(/etc/aiinfra-datapath/nic_affinity.json)) is applied again by C(aiinfra-datapath-nic-affinity.service),
    which runs this module's own re-apply code, C(/usr/local/libexec/aiinfra-datapath/nic-affinity-apply),
    once at boot, then for every planned link that comes up, within milliseconds of the netlink event.
requirements:
  - "Python 3 on the node (standard library only)"
  - "ethtool, for channels and rings"
  - "systemd, for the link-up unit that re-applies the queues"
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Reads the same and returns every IRQ, queue and file it would change.
  diff_mode:
    support: full
    description: Queue counts, ring sizes, IRQ affinities, RPS and XPS masks, and every file it writes.
  platform:
    support: full
    platforms: posix
    description: Linux procfs and sysfs, C(ethtool) for queues and rings, systemd for the link-up unit.
options:
  interfaces:
    description: The data interfaces, as the plan's C(nic_affinity.interfaces) lists them.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Interface name (shorthand for O(interfaces[].match.name)).
        type: str
      match:
        description: Select by exactly one of name, MAC, PCI address or driver (every matching interface).
        type: dict
        suboptions:
          name:
            description: Interface name.
            type: str
          mac:
            description: MAC address.
            type: str
          pci:
            description: PCI address of the NIC, e.g. V(0000:1a:00.0).
            type: str
          driver:
            description: Kernel driver, e.g. V(mlx5_core).
            type: str
      fabric:
        description: The fabric it carries (for messages).
        type: str
  irqs:
    description: Place the completion IRQs (false - queues, RPS and XPS only).
    type: bool
    default: true
  cpus:
    description: Restrict the CPUs to this list (C(8-31,72-95)); intersected with each NIC's local CPUs.
    type: str
  exclude_cpus:
    description: CPUs never to use, besides the reserved and isolated ones.
    type: str
  kubelet_config:
    description:
      - kubelet's configuration file (YAML or JSON KubeletConfiguration); its C(reservedSystemCPUs) are taken out.
    type: path
    default: /var/lib/kubelet/config.yaml
  kubelet_reserved:
    description: Take kubelet's C(reservedSystemCPUs) out.
    type: bool
    default: true
  tuned_isolated:
    description:
      - Take out the CPUs that TuneD's active profile (C(isolated_cores)) and the kernel (C(isolcpus=),
        C(nohz_full=)) isolate.
    type: bool
    default: true
  channels:
    description: Queue counts (C(ethtool -L)); a key left out or null is not changed.
    type: dict
    suboptions:
      combined:
        description: Combined channels (mlx5, ice).
        type: int
      rx:
        description: Receive-only channels.
        type: int
      tx:
        description: Transmit-only channels.
        type: int
      other:
        description: Other channels.
        type: int
  rings:
    description: Ring sizes (C(ethtool -G)); a key left out or null is not changed.
    type: dict
    suboptions:
      rx:
        description: Receive ring entries.
        type: int
      tx:
        description: Transmit ring entries.
        type: int
  rps:
    description: Receive packet steering - each receive queue's C(rps_cpus) is the interface's CPUs.
    type: bool
    default: false
  xps:
    description: Transmit packet steering - transmit queue C(k) sends from the CPU of completion IRQ C(k).
    type: bool
    default: false
  irqbalance:
    description:
      - V(ban) - irqbalance leaves the planned NICs' IRQs alone (its C(--policyscript), in C(IRQBALANCE_ARGS)
        of C(/etc/default/irqbalance) or C(/etc/sysconfig/irqbalance)); irqbalance is restarted when that changes.
      - V(ignore) - irqbalance is not configured (and what an earlier run wrote is removed).
    type: str
    choices: [ban, ignore]
    default: ban
  reapply:
    description:
      - Install and enable the link-up unit C(aiinfra-datapath-nic-affinity.service) (started now when systemd runs).
    type: bool
    default: true
  persist:
    description:
      - Where O(channels) and O(rings) are persisted. V(auto) and V(networkd) - a drop-in of the C(.link) file udev
        applies to the NIC (the NIC's own C(10-aiinfra-IF.link) where only C(99-default.link) matches).
      - V(none) - only the link-up unit sets them (at boot too).
    type: str
    choices: [auto, networkd, none]
    default: auto
  on_misplaced:
    description: What to do when an IRQ's C(effective_affinity_list) is not its planned CPU after the run.
    type: str
    choices: [warn, fail]
    default: warn
  state:
    description: V(absent) removes the unit, the re-apply script, the saved plan, the irqbalance line and the
      C(.link) drop-ins this module wrote (the live affinities stay until the next link up or reboot).
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - aiinfra.datapath.node
  - aiinfra.datapath.node.LOCK
notes:
  - With kubelet's static CPU manager, guaranteed pods get exclusive CPUs out of the same shared pool the
    IRQs use; kubelet does not move IRQs off them. Keep latency-critical pods on TuneD-isolated CPUs.
  - Virtual interfaces (veth, as in the lab) have no IRQs; their queues, RPS and XPS are placed and re-applied
    the same way.
  - A channel change can add completion IRQs that a check run cannot see yet; the real run places them too.
seealso:
  - module: aiinfra.datapath.node_topology
  - module: aiinfra.datapath.link_mtu
"""

EXAMPLES = r"""
- name: Completion IRQs of the rails on their NUMA node, outside kubelet's reserved CPUs, kept there on link up
  aiinfra.datapath.nic_affinity:
    interfaces:
      - {match: {pci: "0000:1a:00.0"}, fabric: rail0}
      - {match: {pci: "0000:3c:00.0"}, fabric: rail1}
    channels: {combined: 16}
    xps: true
  become: true

- name: What would change, and where each IRQ would go
  aiinfra.datapath.nic_affinity:
    interfaces: "{{ datapath_plan.nic_affinity.interfaces }}"
  check_mode: true
  diff: true
"""

RETURN = r"""
interfaces:
  description: Per interface its PCI function, NUMA node, local CPUs, the CPUs its IRQs use and each completion IRQ.
  returned: always
  type: list
  elements: dict
  sample:
    - interface: enp1s0f0np0
      pci: "0000:01:00.0"
      numa_node: 0
      local_cpus: "0-11"
      cpus: "2-11"
      irqs: [{irq: 99, name: "mlx5_comp0@pci:0000:01:00.0", queue: 0, cpu: 2, smp_affinity: "2", effective: "2",
              placed: true}]
      other_irqs: [{irq: 98, name: "mlx5_async0@pci:0000:01:00.0"}]
      channels: {combined: 8}
      rings: null
      rps: null
      xps: true
placed:
  description: Completion IRQs on their planned CPU (from C(effective_affinity_list)).
  returned: always
  type: int
misplaced:
  description: Completion IRQs the kernel keeps elsewhere after the run, each with where it runs.
  returned: always
  type: list
  elements: str
kubelet:
  description: kubelet's configuration file, CPU manager policy and reserved CPUs.
  returned: when present
  type: dict
  sample: {file: /var/lib/kubelet/config.yaml, found: true, cpu_manager_policy: static, reserved_cpus: "0-1"}
isolated_cpus:
  description: The isolated CPUs taken out (TuneD and kernel).
  returned: when present
  type: str
irqbalance:
  description: Whether irqbalance is installed, its configuration file and whether the NICs' IRQs are banned.
  returned: always
  type: dict
persist:
  description: The backend persisting channels and rings and its files.
  returned: always
  type: dict
reapply:
  description: The link-up unit, the saved plan and whether systemd runs here.
  returned: when present
  type: dict
applied:
  description: What the run changed live, value by value (from the shared re-apply code).
  returned: when present
  type: list
  elements: dict
actions:
  description: The structured actions (queues, IRQs, RPS, XPS, files, link, commands).
  returned: always
  type: list
  elements: dict
notes:
  description:
    - What was not done and why (a backend that cannot persist, systemd not running, an admin's irqbalance line).
  returned: always
  type: list
  elements: str
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity import NicAffinity


def main():
    module_main(NicAffinity)


if __name__ == "__main__":
    main()
