# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rail_routing
short_description: Per-rail routing tables, policy rules and ARP settings for several NICs on one fabric
version_added: "0.4.0"
description:
  - A node with several NICs on one fabric (rails) sends all of their traffic out of one NIC, answers
    ARP for every address on every NIC and, with strict reverse-path filtering, drops traffic that
    arrives on another rail. This module gives every rail of the plan (C(rail_routing.rails)) its
    own routing.
  - Per rail - a routing table O(rails[].table) with the rail's subnet route
    (C(ip route replace SUBNET dev IF scope link table T)) and, for a routed rail, the fabric's
    subnets through its gateway; a policy rule C(ip rule add priority P from ADDRESS/32 lookup T);
    C(arp_ignore), C(arp_announce) and C(rp_filter) of the rail's interface, set through
    sysctl_profile's engine (read back, rolled back on refusal) and persisted in O(sysctl_file).
  - A rail's address is O(rails[].address), which the interface must hold, else the interface's own
    address inside O(rails[].subnets); a rail without one is skipped with a warning.
  - The planned priorities and tables are checked against the node's live C(ip rule) and routing
    tables first - a rule or route of someone else there fails the module before any change and
    names it (and the software known to use that range). Rules and routes of ours that the plan
    no longer has (inside O(table_range)) are removed.
  - The interface carrying the Ansible connection (O(connection_address), C(SSH_CONNECTION)) is never
    touched, even when the plan lists it as a rail; nor is anything outside the listed rails.
  - Tables and rules are persisted through the node's network configuration backend, the backends
    M(aiinfra.datapath.link_mtu) writes to; the network service is never restarted.
requirements:
  - "Python 3 on the node (standard library only)"
  - "ip from iproute2 with JSON output (ip -j)"
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Computes the same actions a real run would take and changes nothing.
  diff_mode:
    support: full
    description: Shows the policy rules (section C(policy rules)), the tables' routes (section
      C(rail routing tables)), the interface sysctls (section C(live kernel values)), the files and the
      NetworkManager properties before and after.
  platform:
    support: full
    platforms: posix
    description: Linux with iproute2 (C(ip -j)).
options:
  rails:
    description:
      - The rails, in the shape of the plan's C(rail_routing.rails) (docs/plan.md).
    type: list
    elements: dict
    required: true
    suboptions:
      fabric:
        description: The fabric of the rail.
        type: str
        required: true
      rail:
        description: The rail's index on its fabric (rail0 is 0), in the host's interface order.
        type: int
        required: true
      name:
        description: The rail's name (C(rail0), C(rail1), ...).
        type: str
      interface:
        description: Expected interface name; used as the match when O(rails[].match) is empty.
        type: str
      match:
        description: Selector of the rail's NIC; every given key must match, and exactly one interface.
        type: dict
        suboptions:
          name:
            description: Interface name.
            type: str
          mac:
            description: MAC address (current or permanent), case-insensitive.
            type: str
          pci:
            description: PCI address of the device behind the netdev.
            type: str
          driver:
            description: Kernel driver of the device.
            type: str
      address:
        description:
          - The rail's address (the plan's, from the host variable C(datapath_addresses) or the spec).
            The interface must hold it. Null - the interface's own address inside O(rails[].subnets).
        type: str
      address_ok:
        description: The plan's verdict on O(rails[].address); the module checks the address itself.
        type: bool
      subnets:
        description: Networks the rail's address lies in (the rail's subnet, or the fabric's subnets).
        type: list
        elements: str
        default: []
      subnet:
        description: The network of the rail's table route; null - the one of O(rails[].subnets) holding the address.
        type: str
      gateway:
        description: The rail's router (a routed per-rail subnet), reported back.
        type: str
      addressing:
        description: V(shared-subnet) or V(per-rail-subnet), reported back.
        type: str
      routes:
        description: Further routes of the rail's table, C({to, via}) (the fabric's subnets through the gateway).
        type: list
        elements: dict
        default: []
        suboptions:
          to:
            description: Destination network.
            type: str
            required: true
          via:
            description: Next hop.
            type: str
            required: true
      table:
        description: The rail's routing table id, inside O(table_range).
        type: int
        required: true
      priority:
        description: The priority of the rail's rule, inside O(table_range).
        type: int
        required: true
      gpu:
        description: The GPU the rail serves (index), reported back.
        type: raw
  table_range:
    description:
      - "C([first, last]): the table ids and rule priorities this module owns (the spec's
        C(rail_routing.table_base) range). Its rules there that the plan does not list, and the routes
        of their tables, are removed."
    type: list
    elements: int
    required: true
  arp_ignore:
    description: C(net.ipv4.conf.IF.arp_ignore) of each rail (1 - answer ARP only for the interface's own addresses).
    type: int
    default: 1
  arp_announce:
    description: C(net.ipv4.conf.IF.arp_announce) of each rail (2 - announce the interface's own address).
    type: int
    default: 2
  rp_filter:
    description:
      - C(net.ipv4.conf.IF.rp_filter) of each rail (2 - loose; the largest value, so C(conf/all) cannot make it
        strict).
    type: int
    default: 2
  persist:
    description:
      - Backend used to persist the tables and rules; V(auto) detects it as M(aiinfra.datapath.link_mtu) does.
      - V(networkd) - a drop-in C(/etc/systemd/network/NAME.network.d/90-aiinfra-rails.conf)
        (C([RoutingPolicyRule]), C([Route] Table=)) for the C(.network) networkd applies to the rail's
        interface, when that file matches no other interface.
      - V(netplan) - C(/etc/netplan/90-aiinfra-rails.yaml) (mode 0600) with C(routes) (C(table)) and
        C(routing-policy) under the ID of the definition that configures the interface; netplan
        appends them to that definition's own lists.
      - V(networkmanager) - C(nmcli connection modify UUID +ipv4.routes ... +ipv4.routing-rules ...) on
        the active connection (not re-activated).
      - V(ifupdown) - C(post-up)/C(pre-down) lines in C(/etc/network/interfaces.d/aiinfra-IF) (shared
        with link_mtu's C(mtu)), only where no other stanza defines the interface.
      - V(none) - live only; also O(sysctl_file) is not written.
    type: str
    choices: [auto, networkd, networkmanager, netplan, ifupdown, none]
    default: auto
  sysctl_file:
    description: The sysctl.d file of the rails' interface keys (systemd applies it when each interface appears).
    type: path
    default: /etc/sysctl.d/90-aiinfra-datapath-rails.conf
  connection_address:
    description: The address Ansible connects to (an IP address); the interface holding or routing to it is left alone.
    type: str
extends_documentation_fragment:
  - aiinfra.datapath.node
  - aiinfra.datapath.node.lock
notes:
  - The management fabric is never in the plan's rails. Every file written here is read by its real
    reader in tests/interop (C(netplan generate), systemd-networkd, C(ifquery)); see docs/interop.md.
  - After the changes, C(ip route get PEER from ADDRESS) must name each rail's interface, else the module fails.
seealso:
  - module: aiinfra.datapath.link_mtu
  - module: aiinfra.datapath.path_check
"""

EXAMPLES = r"""
- name: Route every rail of the plan through its own NIC
  aiinfra.datapath.rail_routing:
    rails: "{{ datapath_plan.rail_routing.rails }}"
    table_range: "{{ datapath_plan.rail_routing.table_range }}"
    connection_address: "{{ ansible_host }}"

- name: Two rails in one subnet, live only
  aiinfra.datapath.rail_routing:
    rails:
      - {fabric: rdma, rail: 0, interface: ens1f0np0, subnets: [10.100.0.0/24], table: 3100, priority: 3100}
      - {fabric: rdma, rail: 1, interface: ens2f0np0, subnets: [10.100.0.0/24], table: 3101, priority: 3101}
    table_range: [3100, 3115]
    persist: none
"""

RETURN = r"""
rails:
  description: One entry per rail of the plan, with what was found and done.
  returned: always
  type: list
  elements: dict
  sample:
    - {fabric: rdma, rail: 1, name: rail1, interface: ens2f0np0, address: 198.18.1.15, subnet: 198.18.1.0/24,
       gateway: null, routes: [], table: 3101, priority: 3101, gpu: null, status: configured, reason: null,
       route_get: {peer: 198.18.1.1, dev: ens2f0np0}}
connection_interfaces:
  description: The interfaces found carrying the Ansible connection (never touched).
  returned: success
  type: list
  elements: str
persist:
  description: The persistence backend, what was detected, the changes and notes.
  returned: success
  type: dict
sysctl:
  description: The interface keys, as M(aiinfra.datapath.sysctl_profile) reports keys (null without rails).
  returned: success
  type: dict
table_range:
  description: The table ids and priorities owned.
  returned: success
  type: list
  elements: int
actions:
  description:
    - What the module did, or would do in check mode, in order. V(sysctl) sets an interface key; V(route)
      replaces or deletes a route of a rail table (target C(table T DST)); V(rule) adds or deletes a policy
      rule (target C(priority P)); V(file) writes a persistence file; V(command) runs C(nmcli).
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive), C(reboot) and C(text).
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._rail_routing import RailRouting


def main():
    module_main(RailRouting)


if __name__ == "__main__":
    main()
