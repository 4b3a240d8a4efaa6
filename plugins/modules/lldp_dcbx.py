#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lldp_dcbx
short_description: Decode what each RoCE interface hears from its switch port in LLDP/DCBX, without lldpad
version_added: "0.4.0"
description:
  - For each interface, one bounded capture of one inbound LLDP frame
    (C(timeout T tcpdump -c 1 -Q in -nn -e -xx -i IF ether proto 0x88cc)); every interface at the same
    time, so one call waits at most O(timeout) seconds however many rails the node has.
  - The frame's bytes are decoded with the standard library (IEEE 802.1AB LLDP, IEEE 802.1Qaz DCBX TLVs
    of OUI 00-80-C2) - the switch's system name and port, and what it advertises - ETS Configuration
    (willing, CBS, priority to traffic class, bandwidth, TSA), ETS Recommendation, PFC Configuration
    (willing, MBC, capability, the enable bit of each priority) and Application Priority entries (priority,
    selector, protocol - UDP 4791 for RoCEv2, DSCP code points).
  - Nothing changes on the node and no DCBX agent runs (lldpad would also apply the switch's settings to
    the NIC). The controller compares the result with the plan (C(aiinfra.datapath.dcbx_findings) in
    C(playbooks/verify.yml) and C(playbooks/audit.yml)).
  - An interface on which no frame arrives within O(timeout) is returned with C(heard=false) and the
    reason; that is not an error.
requirements:
  - "Python 3 on the node (standard library only)"
  - "tcpdump and coreutils timeout; root or CAP_NET_RAW to capture"
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Read-only; captures the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux; needs C(tcpdump), coreutils C(timeout) and the privilege to capture (root or CAP_NET_RAW).
options:
  interfaces:
    description:
      - The interfaces to listen on, as the plan's C(roce_qos) part lists them (name or match).
    type: list
    elements: dict
    required: true
    suboptions:
      interface:
        description: The interface name.
        type: str
      match:
        description: Find the interface by exactly one of name, mac, pci, driver (as in M(aiinfra.datapath.roce_qos)).
        type: dict
        suboptions:
          name:
            description: Interface name.
            type: str
          mac:
            description: MAC address.
            type: str
          pci:
            description: PCI address of the NIC.
            type: str
          driver:
            description: Kernel driver.
            type: str
      fabric:
        description: The fabric the interface is on (returned with the result).
        type: str
  timeout:
    description:
      - Seconds to wait for a frame on each interface (1 to 300). Switches send LLDP every 30 s by default,
        so the default waits one interval and a little more.
    type: int
    default: 35
  promiscuous:
    description:
      - Let tcpdump put the NIC in promiscuous mode while it listens (its default), so that a NIC that
        filters the LLDP multicast address still passes the frame. V(false) adds C(-p).
    type: bool
    default: true
extends_documentation_fragment:
  - aiinfra.datapath.node
notes:
  - On NVIDIA ConnectX NICs whose firmware runs its own LLDP/DCBX agent (mlxconfig C(LLDP_NB_DCBX_P1)), the
    firmware may consume the frames before the host sees them; such an interface reports nothing heard.
seealso:
  - module: aiinfra.datapath.roce_qos
"""

EXAMPLES = r"""
- name: What each RoCE interface hears from its switch port
  aiinfra.datapath.lldp_dcbx:
    interfaces: "{{ datapath_plan.roce_qos.interfaces | aiinfra.datapath.dcbx_interfaces(datapath) }}"
  become: true
  register: lldp

- name: One interface, a short wait
  aiinfra.datapath.lldp_dcbx:
    interfaces: [{interface: ens1f0np0, fabric: rail0}]
    timeout: 5
"""

RETURN = r"""
interfaces:
  description: One entry per requested interface, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: Position in O(interfaces).
      type: int
    requested:
      description: The name or match it was asked for.
      type: str
    interface:
      description: The interface it resolved to (V(null) when the match found none or several).
      type: str
    fabric:
      description: The fabric passed in.
      type: str
    heard:
      description: Whether an LLDP frame arrived and decoded.
      type: bool
    reason:
      description: Why nothing was heard, or V(null).
      type: str
    system_name:
      description: The switch's System Name TLV.
      type: str
    port_id:
      description: The switch port's Port ID (an interface name, or a MAC address).
      type: str
    chassis_id:
      description: The switch's Chassis ID.
      type: str
    dcbx:
      description: >-
        C(pfc) (C(willing), C(mbc), C(cap), C(enabled) priorities), C(ets_config) (C(willing), C(cbs),
        C(max_tcs), C(prio_tc), C(tc_bw), C(tsa)), C(ets_recommendation), C(app_priority) (list of
        C(priority), C(selector), C(selector_name), C(protocol)), C(cee) (a CEE DCBX TLV was present);
        V(null) for a TLV the switch did not send.
      type: dict
    frame:
      description: The captured frame as hex.
      type: str
  sample:
    - {index: 0, requested: "name=ens1f0np0", interface: ens1f0np0, fabric: rail0, heard: true, reason: null,
       system_name: leaf01, port_id: swp1, chassis_id: "44:38:39:00:00:01", ttl: 120,
       dcbx: {pfc: {willing: false, mbc: false, cap: 8, enabled: [3]}, ets_config: null, ets_recommendation: null,
              app_priority: [{priority: 3, selector: 3, selector_name: udp, protocol: 4791}], cee: false}}
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._lldp_dcbx import LldpDcbx


def main():
    module_main(LldpDcbx)


if __name__ == "__main__":
    main()
