# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: roce_qos
short_description: Configure RoCE lossless QoS (trust, PFC, DSCP map, ETS, ECN, CNP, RoCE ToS/mode)
version_added: "0.1.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "dcb from iproute2, or mlnx_qos from NVIDIA's mlnx-tools (backend: mlnx_qos)"
  - "systemd and modprobe (the boot-time re-apply unit)"
description:
  - Configures, per RoCE interface, the trust mode, PFC per priority, the DSCP to priority
    map (APP table), ETS (priority to traffic class, TSA, bandwidths), ECN enable per
    priority for the reaction (C(roce_rp)) and notification (C(roce_np)) points, the CNP
    DSCP and 802.1p priority, and the default RoCE ToS and RoCE mode of the RDMA device behind
    the netdev (rdma_cm configfs).
  - Reads the current state, changes only what differs, then reads it back and fails if the
    device did not take a setting.
  - Backends, chosen per interface with O(backend=auto) V(mlnx_qos) when the vendor tool is
    installed and the vendor driver's C(/sys/class/net/IF/qos) exists, else iproute2 V(dcb).
    ECN and CNP use C(/sys/class/net/IF/ecn/...) when present (vendor driver only); rdma_cm
    uses C(CONFIGFS/rdma_cm/HCA/ports/N/default_roce_mode|default_roce_tos).
  - On a device without DCB support (virtual interfaces such as veth, or a driver that answers
    "Operation not supported") the interface is reported with RV(interfaces[].supported=false)
    and its reason; nothing is changed.
  - Warns when firmware DCBX (C(mlnx_qos) "DCBX mode - Firmware controlled", dcb C(lld_managed))
    or a running lldpad may override the host settings; RV(interfaces[].dcbx_owner) names it.
  - These NIC settings are runtime-only. With O(persist=true) the module saves the full list of
    steps to C(/etc/aiinfra-datapath/roce_qos.json) and installs and enables
    C(aiinfra-roce-qos.service), a oneshot unit running
    C(/usr/local/libexec/aiinfra-datapath/roce-qos-apply) (Python 3 stdlib) at boot.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Reads everything, reports the commands and writes it would run, changes nothing.
  diff_mode:
    support: full
    description: Before/after of every managed setting (sections C(RoCE QoS settings) for
      trust, PFC, DSCP map and ETS, C(sysfs and configfs) for ECN, CNP and rdma_cm), of the
      persistence files and of the unit's enable link.
  platform:
    support: full
    platforms: posix
    description: Linux with iproute2 C(dcb) or Mellanox C(mlnx_qos).
options:
  interfaces:
    description:
      - The RoCE interfaces, in the shape of the plan's C(qos) items.
      - Omitted settings are left alone.
    type: list
    elements: dict
    required: true
    suboptions:
      interface:
        description: Interface name. Either this or O(interfaces[].match).
        type: str
      match:
        description: Selector (every key must match exactly one interface).
        type: dict
        suboptions:
          name:
            description: Interface name.
            type: str
          mac:
            description: MAC address.
            type: str
          pci:
            description: PCI address of the device.
            type: str
          driver:
            description: Kernel driver of the device.
            type: str
      fabric:
        description: Fabric name, reported back only.
        type: str
      trust:
        description: Which header classifies traffic. dcb sets C(apptrust order dscp pcp) or C(order pcp).
        type: str
        choices: [dscp, pcp]
      pfc_priorities:
        description: Priorities with PFC enabled; every other priority is set to no PFC.
        type: list
        elements: int
      dscp2prio:
        description:
          - DSCP (0-63, keys may be strings) to priority (0-7).
          - DSCP values not listed are left as they are.
        type: dict
      ets:
        description: Enhanced transmission selection.
        type: dict
        suboptions:
          prio_tc:
            description: Traffic class of each priority 0-7 (8 values).
            type: list
            elements: int
          tsa:
            description: Scheduler of each traffic class (8 values, V(strict), V(ets), V(vendor) or V(cbs)).
            type: list
            elements: str
          bw:
            description: Bandwidth percent of each traffic class (8 values); the ets classes sum to 100.
            type: list
            elements: int
      ecn:
        description: ECN enabled per priority; priorities not listed are disabled.
        type: dict
        suboptions:
          rp:
            description: Priorities with the reaction point (sender rate limiting) enabled.
            type: list
            elements: int
          np:
            description: Priorities with the notification point (CNP generation) enabled.
            type: list
            elements: int
      cnp:
        description: Marking of congestion notification packets.
        type: dict
        suboptions:
          dscp:
            description: DSCP of CNPs (0-63).
            type: int
          priority:
            description: 802.1p priority of CNPs (0-7).
            type: int
      roce_tos:
        description:
          - Default ToS byte of RDMA-CM connections (0-255). DSCP 26 with ECT(0) is 106 (26 << 2 | 2).
        type: int
      roce_mode:
        description: Default RoCE mode of RDMA-CM connections.
        type: str
        choices: [v2, v1]
      roce_mtu:
        description:
          - RoCE path MTU the plan expects (derived from the netdev MTU). Only checked; a warning
            says when the interface's MTU gives a smaller RoCE MTU, or none at all (below a link
            MTU of 352 the kernel has no RoCE).
        type: int
  backend:
    description: Tool used for trust, PFC, DSCP map and ETS.
    type: str
    choices: [auto, dcb, mlnx_qos]
    default: auto
  persist:
    description: Install the boot-time unit and state file that re-apply the settings.
    type: bool
    default: true
  configfs_root:
    description: Where configfs is mounted on the node.
    type: path
    default: /sys/kernel/config
extends_documentation_fragment:
  - aiinfra.datapath.node
  - aiinfra.datapath.node.lock
notes:
  - Firmware defaults (mlxconfig) and LLDP DCBX on the switch side are not changed; if the
    firmware owns DCBX, run C(mlnx_qos -i IF -d os) or configure the firmware first.
  - ECN sysfs exists only with the vendor (MLNX_OFED/DOCA) driver; with the inbox driver the
    ECN settings are reported as not set.
seealso:
  - module: aiinfra.datapath.link_mtu
"""

EXAMPLES = r"""
- name: Lossless RoCE on priority 3, CNPs on 6 (the usual AI-fabric values)
  aiinfra.datapath.roce_qos:
    interfaces:
      - interface: ens1f0np0
        trust: dscp
        pfc_priorities: [3]
        dscp2prio: {"26": 3, "48": 6}
        ets:
          prio_tc: [0, 1, 2, 3, 4, 5, 6, 7]
          tsa: [ets, ets, ets, ets, ets, ets, strict, ets]
          bw: [10, 10, 10, 50, 10, 0, 0, 10]
        ecn: {rp: [3], np: [3]}
        cnp: {dscp: 48, priority: 6}
        roce_tos: 106
        roce_mode: v2

- name: From the plan, vendor tool forced
  aiinfra.datapath.roce_qos:
    interfaces: "{{ datapath_plan.roce_qos.interfaces }}"
    backend: mlnx_qos
"""

RETURN = r"""
interfaces:
  description: One entry per interface.
  returned: always
  type: list
  elements: dict
  contains:
    interface:
      description: Interface name.
      type: str
    supported:
      description: Whether the device supports DCB; V(false) means nothing was changed.
      type: bool
    reason:
      description: Why the interface is not supported.
      type: str
    backend:
      description: Backend used (V(dcb) or V(mlnx_qos)).
      type: str
    rdma_device:
      description: RDMA device behind the netdev.
      type: str
    dcbx_owner:
      description: Who owns DCBX when known (V(os), V(firmware), V(lld_managed), V(lldpad)).
      type: str
    before:
      description: Managed settings as read.
      type: dict
    after:
      description: Managed settings as wanted.
      type: dict
    actions:
      description: Commands and writes for this interface.
      type: list
      elements: str
    notes:
      description: Settings that could not be applied on this device and why.
      type: list
      elements: str
    changed:
      description: Whether this interface changed.
      type: bool
  sample:
    - {interface: veth0, supported: false, reason: "no /sys/class/net/veth0/device: virtual interface",
       changed: false, actions: [], notes: []}
actions:
  description:
    - Every change, in order, including persistence (see docs/architecture.md).
      V(command) actions run C(dcb) or C(mlnx_qos) for one setting (target C(IF SETTING),
      before/after the setting's value, text the command line); V(sysfs) actions write a
      sysfs/configfs node (target its path, before/after the value) or create an rdma_cm group
      (text C(mkdir PATH)); V(file) actions write the state file, the re-apply script and the
      unit (before/after the content); a V(link) action enables the unit (target the link,
      after the unit file).
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive) (data is lost),
      C(reboot) (takes effect at the next boot) and C(text) (the line a person reads); see docs/architecture.md.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: command, target: ens1f0np0 pfc, before: [false, false, false, false, false, false, false, false],
       after: [false, false, false, true, false, false, false, false], destructive: false, reboot: false,
       text: "/usr/sbin/dcb pfc set dev ens1f0np0 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off"}
    - {kind: sysfs, target: /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos, before: "0",
       after: "106", destructive: false, reboot: false,
       text: "write /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos = 106"}
    - {kind: file, target: /etc/aiinfra-datapath/roce_qos.json, before: null, after: "{...}",
       destructive: false, reboot: false, text: "write /etc/aiinfra-datapath/roce_qos.json"}
persist:
  description: Boot-time re-apply files and whether they changed.
  returned: always
  type: dict
  contains:
    enabled:
      description: Value of O(persist).
      type: bool
    changes:
      description: Files written and the unit's enable link (or that would be), as the actions' texts.
      type: list
      elements: str
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._roce_qos import RoceQos


def main():
    module_main(RoceQos)


if __name__ == "__main__":
    main()
