#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: path_check
short_description: Check the path MTU to peers with don't-fragment pings, concurrently
version_added: "0.1.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "ping from iputils (don't-fragment pings)"
description:
  - For every fabric target, pings every peer with the don't-fragment bit set
    (C(ping -M do)) at the fabric MTU and at each size of O(sizes) below it, bound to the
    fabric's interface (C(ping -I)). The ICMP payload is MTU - 28 for IPv4 and MTU - 48 for
    IPv6, so a probe of size 9000 is an IP packet of exactly 9000 bytes.
  - Every (peer, size) probe runs on a pool of O(workers) threads, so a node checks all its
    peers on all fabrics in about the time of one probe.
  - Returns, per peer, the loss at every probed size and the largest probed MTU that passes.
    A path is V(ok) when it passes at the fabric MTU. The module never fails because a path
    fails; the C(verify) role decides that after every node has reported.
  - A switch port with a smaller MTU drops oversized frames silently (100% loss at that
    size); a local interface with a smaller MTU makes ping report C(message too long, mtu=N),
    returned as the probe's C(local_mtu).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Read-only; the pings run in check mode as well.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux with iputils C(ping) (C(-M do) for don't-fragment).
options:
  targets:
    description:
      - One entry per fabric this node is on.
    type: list
    elements: dict
    required: true
    suboptions:
      fabric:
        description: Fabric name, reported back.
        type: str
        required: true
      mtu:
        description: MTU of the fabric (the size every path must pass), 68 to 9216.
        type: int
        required: true
      interface:
        description: Interface to send from (C(ping -I IF)). Without it, O(targets[].source) is used.
        type: str
      source:
        description: Source address to send from when O(targets[].interface) is not given.
        type: str
      peers:
        description: The nodes to ping on this fabric.
        type: list
        elements: dict
        default: []
        suboptions:
          name:
            description: Peer name (its inventory hostname), reported back.
            type: str
            required: true
          address:
            description: Peer address on this fabric (IPv4 or IPv6 literal, or a name the node resolves).
            type: str
            required: true
  sizes:
    description:
      - Further MTUs to probe below each fabric MTU (sizes above a fabric's MTU are skipped
        for that fabric). The largest passing size tells how far a broken path gets.
    type: list
    elements: int
    default: [1500]
  count:
    description: Echo requests per probe.
    type: int
    default: 3
  interval:
    description: Seconds between echo requests of one probe (below 0.2 needs root).
    type: float
    default: 0.2
  timeout:
    description: Seconds to wait for each reply (C(ping -W)).
    type: int
    default: 1
  max_loss:
    description: Highest loss in percent at which a probe still passes.
    type: int
    default: 0
  workers:
    description: Probes run at the same time.
    type: int
    default: 16
notes:
  - Probes only; nothing on the node changes. Binding to the interface makes the check
    follow the fabric even where the routing table would pick another interface.
seealso:
  - module: aiinfra.datapath.link_mtu
"""

EXAMPLES = r"""
- name: Jumbo frames end to end on the RoCE fabric, and the 1500 fallback
  aiinfra.datapath.path_check:
    targets:
      - fabric: rdma
        mtu: 9000
        interface: ens1f0np0
        peers:
          - {name: node2, address: 198.18.1.12}
          - {name: node3, address: 198.18.1.13}
    sizes: [1500]
  register: paths

- name: Targets built by the verify role's filter from the plan and the inventory
  aiinfra.datapath.path_check:
    targets: >-
      {{ datapath_plan.link_mtu.interfaces
         | aiinfra.datapath.path_targets(hostvars, ansible_play_hosts, inventory_hostname) }}
"""

RETURN = r"""
paths:
  description: One entry per (fabric, peer).
  returned: always
  type: list
  elements: dict
  contains:
    fabric:
      description: Fabric name.
      type: str
    interface:
      description: Interface the pings were bound to (or the source address).
      type: str
    peer:
      description: Peer name.
      type: str
    address:
      description: Peer address.
      type: str
    mtu:
      description: Fabric MTU the path must pass.
      type: int
    largest_mtu:
      description: Largest probed MTU that passed; V(null) when none did.
      type: int
    ok:
      description: Whether the path passes at the fabric MTU.
      type: bool
    probes:
      description: >-
        One per probed size, largest first: C(mtu), C(payload), C(sent), C(received),
        C(loss) (percent), C(ok), C(local_mtu) (from a local "message too long"), C(error)
        (ping could not run, for example an unknown interface).
      type: list
      elements: dict
  sample:
    - {fabric: rdma, interface: ens1f0np0, peer: node2, address: 198.18.1.12, mtu: 9000, largest_mtu: 1500,
       ok: false, probes: [{mtu: 9000, payload: 8972, sent: 3, received: 0, loss: 100, ok: false,
                            local_mtu: null, error: null},
                           {mtu: 1500, payload: 1472, sent: 3, received: 3, loss: 0, ok: true,
                            local_mtu: null, error: null}]}
summary:
  description: Per fabric, C(mtu), C(pairs), C(passed), C(failed) (peer names) and C(ok).
  returned: always
  type: dict
  sample: {rdma: {mtu: 9000, pairs: 3, passed: 2, failed: [node2], ok: false}}
failing:
  description: The failing paths, one line each, for messages.
  returned: always
  type: list
  elements: str
  sample: ["rdma: node2 (largest passing MTU 1500, 100% loss at 9000)"]
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._path_check import PathCheck


def main():
    module_main(PathCheck)


if __name__ == "__main__":
    main()
