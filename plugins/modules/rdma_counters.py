#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rdma_counters
short_description: Read NIC (ethtool -S) and RDMA port counters, for deltas over a measurement
version_added: "0.4.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "ethtool (netdev counters; optional)"
  - "rdma from iproute2 (optional)"
description:
  - For each interface, every numeric counter of C(ethtool -S IF) (all of them, not only the
    RoCE ones) and, when the NIC has an RDMA device, every file of
    C(/sys/class/infiniband/DEV/ports/P/counters) and C(hw_counters), read through the netdev's
    PCI device (C(/sys/class/net/IF/device/infiniband/DEV)). The port is the one whose GID 0
    belongs to the interface (C(gid_attrs/ndevs/0)), else the first.
  - An interface without C(/sys/class/net/IF/device) (veth, bridge, bond, VLAN) has no NIC
    counters. It is returned with C(supported=false) and the reason; that is not an error.
  - Take one snapshot before and one after a run; the controller subtracts them with
    C(counter_deltas) from this collection's C(module_utils/_rdma_counters.py), which reports a
    counter that went down (reset or wrap) as C(reset), never as a negative delta, and names the
    RoCE counters the findings read (C(ROCE_COUNTERS), each with a one-line meaning).
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
    description: Linux sysfs; C(ethtool) for the netdev counters (without it only RDMA sysfs is read).
options:
  interfaces:
    description:
      - Interfaces to read. Default, every interface with C(/sys/class/net/IF/device) (a NIC).
      - A name that is not an interface on the node is returned unsupported with the reason.
    type: list
    elements: str
extends_documentation_fragment:
  - aiinfra.datapath.node
notes:
  - Counters are cumulative since the driver loaded; one snapshot says little, the delta over a
    run says what happened during it.
seealso:
  - module: aiinfra.datapath.roce_qos
  - module: aiinfra.datapath.nic_firmware
"""

EXAMPLES = r"""
- name: Counters of the RDMA interface before the load
  aiinfra.datapath.rdma_counters:
    interfaces: [ens1f0np0]
  register: before

- name: Every NIC of the node
  aiinfra.datapath.rdma_counters:
  register: nics
"""

RETURN = r"""
counters:
  description: Per interface name, the snapshot.
  returned: always
  type: dict
  contains:
    supported:
      description: Whether the interface has NIC counters (a PCI device and any counter).
      type: bool
    reason:
      description: Why not, or V(null).
      type: str
    ethtool:
      description: Every numeric counter of C(ethtool -S IF), by name.
      type: dict
    rdma:
      description: >-
        C(device) (for example V(mlx5_0), or V(null)), C(port) (V(1), or V(null)), C(counters) and
        C(hw_counters) (by file name, integers; files that do not hold a number are skipped).
      type: dict
  sample:
    ens1f0np0: {supported: true, reason: null, ethtool: {rx_prio3_pause: 41927, rx_discards_phy: 0},
                rdma: {device: mlx5_0, port: 1, counters: {port_rcv_data: 81408901908},
                       hw_counters: {np_cnp_sent: 7, out_of_sequence: 0}}}
    eno1: {supported: false, reason: "no /sys/class/net/eno1/device: virtual interface, no NIC counters",
           ethtool: {}, rdma: {device: null, port: null, counters: {}, hw_counters: {}}}
notes:
  description: What could not be read (ethtool missing or failing, an unreadable counter file).
  returned: always
  type: list
  elements: str
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._rdma_counters import RdmaCounters


def main():
    module_main(RdmaCounters)


if __name__ == "__main__":
    main()
