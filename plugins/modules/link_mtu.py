# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: link_mtu
short_description: Set and persist the MTU of data-path interfaces
version_added: "0.1.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "ip from iproute2"
  - "for persistence, what the node uses: systemd-networkd, NetworkManager (nmcli), netplan or ifupdown"
  - "ping (verify_after; optional)"
description:
  - Sets the MTU of the interfaces the plan names, matched by name, MAC address, PCI
    address or driver, live with C(ip link set dev IF mtu N), and persists it through the
    network configuration backend the node uses (systemd-networkd, NetworkManager, netplan
    or ifupdown).
  - Validates every MTU against the device's C(min_mtu)/C(max_mtu) from C(ip -j -d link)
    before changing anything. A VLAN may not exceed its parent's MTU (after this run); a
    bond may not exceed the smallest maximum of its slaves.
  - Refuses to change the interface that carries the Ansible connection (found from
    O(connection_address) and C(SSH_CONNECTION)), its lower devices and its bond, unless
    O(allow_connection_interface=true). When allowed, pings O(verify_after) after the change
    and reverts the live MTU if a peer stops answering.
  - Persistence files are written atomically and take effect at the next boot or
    reconfiguration; the module never restarts the network service.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Computes the same actions a real run would take and changes nothing.
  diff_mode:
    support: full
    description: Shows the live MTUs (section C(live MTU)), the persistence files and the
      NetworkManager connection properties before and after.
  platform:
    support: full
    platforms: posix
    description: Linux with iproute2 (C(ip -j)).
options:
  interfaces:
    description:
      - The interfaces to configure, in the shape of the plan's C(interfaces) part.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - Expected interface name. Used as the match when O(interfaces[].match) is empty.
        type: str
      match:
        description:
          - Selector; every given key must match. V(driver) may select several interfaces.
        type: dict
        suboptions:
          name:
            description: Interface name.
            type: str
          mac:
            description: MAC address (current or permanent), case-insensitive.
            type: str
          pci:
            description: PCI address of the device behind the netdev, for example V(0000:e6:00.0).
            type: str
          driver:
            description: Kernel driver of the device, for example V(mlx5_core).
            type: str
      fabric:
        description: Fabric name, reported back only.
        type: str
      mtu:
        description:
          - MTU in bytes, 68 to 9216 (the cluster spec's range). The device's own range
            (C(min_mtu)/C(max_mtu)), a VLAN's parent and a bond's slaves are checked too, and a
            refusal says whose limit it is.
        type: int
        required: true
  persist:
    description:
      - Backend used to persist the MTU. V(auto) uses what the node has, in the order netplan
        (C(/etc/netplan/*.yaml) present), NetworkManager (active), systemd-networkd (active; where
        no service manager answers C(systemctl), its state file C(/run/systemd/netif/state)),
        ifupdown (C(/etc/network/interfaces) present); if none is found the result says so
        and nothing is persisted. V(none) only sets the live MTU.
      - V(networkd) writes a drop-in C(/etc/systemd/network/NAME.network.d/90-aiinfra-mtu.conf)
        for the C(.network) file networkd applies to the interface (the first whose C([Match])
        selects it, in systemd's search path and order). When no C(.network) matches, or the one
        that does also matches interfaces this run does not set (or gives them other MTUs), the
        MTU goes the C(.link) route (below) instead.
      - The C(.link) route (V(networkd), and V(netplan) for what netplan does not own) - udev
        applies the first C(.link) whose C([Match]) selects the device. When that is a file of the
        node other than C(99-default.link), the module writes the drop-in
        C(/etc/systemd/network/NAME.link.d/90-aiinfra-mtu.conf) (C([Link] MTUBytes=N)) for it, so
        its C(Name=) and policies still apply; otherwise it writes
        C(/etc/systemd/network/10-aiinfra-IF.link) (C(Path=pci-BDF) or C(OriginalName=IF)), which
        repeats the C([Link]) settings of the node's C(99-default.link) whose place it takes. A
        C(.link) that also matches interfaces this run does not set is not extended (a note says so).
      - C([Match]) conditions the node's facts cannot settle (C(Host=), C(KernelCommandLine=), the
        kernel name of a renamed device ...) count as "may match"; such a file gets the drop-in
        too, and the result's notes name it.
      - V(networkmanager) runs C(nmcli connection modify UUID 802-3-ethernet.mtu N) on the
        connection active on the device (not re-activated).
      - V(netplan) writes C(/etc/netplan/90-aiinfra-datapath.yaml) (mode 0600, JSON, which is
        YAML) with C(mtu) under the ID of the netplan definition that configures the interface -
        its ID is the interface name (no C(match)), its C(set-name) is the interface name, or its
        C(match) (name glob, MAC address, driver) selects it - in C(ethernets), C(bonds),
        C(vlans), C(bridges), C(tunnels), C(wifis) or C(modems); netplan merges it into that
        definition. It never adds a definition of its own; entries an earlier version wrote
        under an ID no other netplan file defines are removed.
      - netplan's configuration is read by netplan itself (C(netplan get --root-dir) over a
        private copy of C(/lib), C(/etc) and C(/run/netplan) without the drop-in), and the
        planned drop-in is read back the same way; it is not written when netplan refuses it or
        a file read after it sets another C(mtu) for the same ID. Without netplan's CLI the
        files are read by a strict reader of netplan's YAML subset, which refuses (a note, no
        drop-in) what it cannot read.
      - An interface netplan does not configure is persisted by the C(.link) route, not made
        netplan-managed. So is one whose definition also configures interfaces this run does
        not set, and one whose definition has a C(match) (or its kernel name as ID) but no
        C(.link) of netplan's yet - an C(mtu) makes netplan write C(10-netplan-ID.link), which
        would replace the C(.link) that names the device. C(netplan apply) is not run.
      - V(ifupdown) writes C(/etc/network/interfaces.d/aiinfra-IF) only when
        C(/etc/network/interfaces) sources that directory and no other stanza defines the interface.
    type: str
    choices: [auto, networkd, networkmanager, netplan, ifupdown, none]
    default: auto
  allow_connection_interface:
    description:
      - Allow changing the MTU of the interface that carries the Ansible connection.
      - A wrong MTU on it can cut the node off. Use with O(verify_after).
    type: bool
    default: false
  connection_address:
    description:
      - The address Ansible connects to (usually C(ansible_host); a name is resolved on the node).
        The interface holding it
        (C(ip -j addr)) or routing to it (C(ip -j route get)) is the connection interface.
      - C(SSH_CONNECTION) of the module's environment is used as well when present.
    type: str
  verify_after:
    description:
      - Peer addresses pinged before and after live changes. A peer silent before the change
        fails the run before anything changes; a peer that stops answering after it reverts every
        live change of this run and fails the module (nothing is persisted).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - aiinfra.datapath.node
  - aiinfra.datapath.node.lock
notes:
  - Changing the MTU of a bond changes its slaves; a VLAN cannot exceed its parent's MTU, so
    parents are raised before and lowered after their VLANs.
  - Every persistence file is checked by the program that reads it in tests/interop -
    C(netplan generate), C(udevadm test-builtin net_setup_link), systemd-networkd and
    C(ifquery); see docs/interop.md.
  - Interfaces of the plan that are not found fail the run before anything is changed.
seealso:
  - module: aiinfra.datapath.roce_qos
"""

EXAMPLES = r"""
- name: Jumbo frames on the RoCE rails, persisted by whatever the node uses
  aiinfra.datapath.link_mtu:
    interfaces:
      - {name: ens1f0np0, match: {name: ens1f0np0}, fabric: rail0, mtu: 9000}
      - {name: null, match: {pci: "0000:e6:00.0"}, fabric: rail1, mtu: 9000}
    connection_address: "{{ ansible_host }}"

- name: Change the management interface too, reverting if the gateway stops answering
  aiinfra.datapath.link_mtu:
    interfaces: "{{ datapath_plan.link_mtu.interfaces }}"
    persist: networkd
    allow_connection_interface: true
    verify_after: [198.18.0.1]
"""

RETURN = r"""
interfaces:
  description: One entry per matched interface.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: ens1f0np0, fabric: rail0, match: "name=ens1f0np0", kind: physical, mtu_before: 1500,
       mtu: 9000, min_mtu: 68, max_mtu: 9978, limit: device, connection: false, changed: true}
actions:
  description:
    - What the module did, or would do in check mode, in order (see docs/architecture.md).
      V(mtu) actions set a live MTU (target the interface, before/after the MTU), in the order
      they run (lowered top-down, raised bottom-up); V(file) actions write a persistence file
      (before/after its content); V(command) actions run C(nmcli connection modify)
      (target C(UUID PROPERTY), before/after the property's value).
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive) (data is lost),
      C(reboot) (takes effect at the next boot) and C(text) (the line a person reads); see docs/architecture.md.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: mtu, target: ens1f0np0, before: 1500, after: 9000, destructive: false, reboot: false,
       text: "ip link set dev ens1f0np0 mtu 9000"}
    - {kind: file, target: /etc/systemd/network/10-aiinfra-ens1f0np0.link, before: null,
       after: "# Managed by aiinfra.datapath.link_mtu; ...", destructive: false, reboot: false,
       text: "write /etc/systemd/network/10-aiinfra-ens1f0np0.link"}
persist:
  description: Persistence backend, how it was chosen, files and notes.
  returned: always
  type: dict
  contains:
    backend:
      description: Backend used (V(none) when none was requested or found).
      type: str
    detected:
      description: Backends found on the node with the evidence.
      type: dict
    changes:
      description: Files written or removed, connections modified (or that would be).
      type: list
      elements: str
    notes:
      description:
        - Interfaces that could not be persisted and why, and those persisted another way than
          the backend's own file (for example by a C(.link) because netplan does not configure
          them), with the reason.
      type: list
      elements: str
connection_interfaces:
  description: Interfaces considered to carry the Ansible connection.
  returned: always
  type: list
  elements: str
verified:
  description: Peers pinged after the change and whether they answered.
  returned: when verify_after ran
  type: dict
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._link_mtu import LinkMtu


def main():
    module_main(LinkMtu)


if __name__ == "__main__":
    main()
