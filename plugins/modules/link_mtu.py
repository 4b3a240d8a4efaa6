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
    description: Shows MTUs and persistence files before and after.
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
        description: MTU in bytes (68 to 9216).
        type: int
        required: true
  persist:
    description:
      - Backend used to persist the MTU. V(auto) uses what the node has, in the order netplan
        (C(/etc/netplan/*.yaml) present), NetworkManager (active), systemd-networkd (active),
        ifupdown (C(/etc/network/interfaces) present); if none is found the result says so
        and nothing is persisted. V(none) only sets the live MTU.
      - V(networkd) writes a drop-in C(90-aiinfra-mtu.conf) for the C(.network) file that
        matches the interface (by C(Name=)/C(MACAddress=)), else
        C(/etc/systemd/network/10-aiinfra-IF.link) matching C(Path=pci-BDF) or
        C(OriginalName=IF). That C(.link) file repeats the default naming policies because
        the first matching C(.link) file replaces C(99-default.link).
      - V(networkmanager) runs C(nmcli connection modify UUID 802-3-ethernet.mtu N) on the
        connection active on the device (not re-activated).
      - V(netplan) writes C(/etc/netplan/90-aiinfra-datapath.yaml) (mode 0600) with
        C(ethernets.IF.mtu); bonds, VLANs and bridges only when defined in another netplan file.
        The id must equal the interface name. C(netplan apply) is not run.
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
  root:
    description: Root of the node's filesystem (for tests). Commands still run on the node.
    type: path
    default: /
notes:
  - Changing the MTU of a bond changes its slaves; a VLAN cannot exceed its parent's MTU, so
    parents are raised before and lowered after their VLANs.
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
    interfaces: "{{ plan.interfaces }}"
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
  description: What the module did, or would do in check mode, in order.
  returned: always
  type: list
  elements: str
  sample: ["ip link set dev ens1f0np0 mtu 9000", "write /etc/systemd/network/10-aiinfra-ens1f0np0.link"]
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
      description: Files written or connections modified (or that would be).
      type: list
      elements: str
    notes:
      description: Interfaces that could not be persisted and why.
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

import ipaddress
import os
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import (
    LockTimeout, host_root, lock_path, no_lock, node_lock,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import (
    IpLink, LinkError, depth, describe_match, link_kind, match_interfaces, mtu_limits,
    parse_match, sysfs_device, ssh_connection_addresses,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf import BACKENDS, choose, detect
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError, Runner

MTU_MIN = 68
MTU_MAX = 9216


def argument_spec():
    return dict(
        interfaces=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str"),
            match=dict(type="dict", options=dict(
                name=dict(type="str"), mac=dict(type="str"), pci=dict(type="str"), driver=dict(type="str"),
            )),
            fabric=dict(type="str"),
            mtu=dict(type="int", required=True),
        )),
        persist=dict(type="str", default="auto",
                     choices=["auto", "networkd", "networkmanager", "netplan", "ifupdown", "none"]),
        allow_connection_interface=dict(type="bool", default=False),
        connection_address=dict(type="str"),
        verify_after=dict(type="list", elements="str", default=[]),
        root=dict(type="path", default="/"),
    )


def resolve(items, links, host):
    """Map plan items to interfaces; return (targets, rows, errors)."""
    errors, rows, targets = [], [], {}
    for index, item in enumerate(items):
        where = "interfaces[%d]%s" % (index, " (fabric %s)" % item["fabric"] if item.get("fabric") else "")
        mtu = item["mtu"]
        if not MTU_MIN <= mtu <= MTU_MAX:
            errors.append("%s: mtu %d is outside %d-%d" % (where, mtu, MTU_MIN, MTU_MAX))
            continue
        match = parse_match(item)
        if not match:
            errors.append("%s: give name or match {name|mac|pci|driver}" % where)
            continue
        names = match_interfaces(links, host, match)
        if not names:
            errors.append("%s: no interface matches %s (present: %s)"
                          % (where, describe_match(match), ", ".join(sorted(links)) or "none"))
            continue
        if item.get("name") and match.get("name") is None and names != [item["name"]]:
            errors.append("%s: %s selects %s, but name says %s"
                          % (where, describe_match(match), ", ".join(names), item["name"]))
            continue
        for name in names:
            if name in targets and targets[name] != mtu:
                errors.append("%s: %s already gets MTU %d from another entry, not %d"
                              % (where, name, targets[name], mtu))
                continue
            targets[name] = mtu
            rows.append({"name": name, "fabric": item.get("fabric"), "match": describe_match(match),
                         "index": index, "where": where})
    return targets, rows, errors


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    host = host_root(module)
    try:
        # one lock around read -> plan -> apply -> persist, so that a run never plans against a
        # state that another run is changing (none in check mode: nothing changes)
        with node_lock(lock_path(host)) if not module.check_mode else no_lock():
            run(module, host)
    except LockTimeout as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="link_mtu: %s" % exc)


def run(module, host):
    """Read, plan, apply and persist; ends in exit_json or fail_json."""
    p = module.params
    runner = Runner(module)
    ip = IpLink(runner, ip=runner.which("ip") or "ip")

    try:
        links = ip.links()
    except LinkError as exc:
        module.fail_json(msg=str(exc))
    targets, rows, errors = resolve(p["interfaces"], links, host)

    result_rows = []
    for row in rows:
        name = row["name"]
        link = links[name]
        low, high, why = mtu_limits(links, name, targets)
        mtu = targets[name]
        if mtu < low or (high is not None and mtu > high):
            errors.append("%s: MTU %d for %s is outside %s-%s (%s); lower the plan's MTU for this fabric"
                          % (row["where"], mtu, name, low, high, why))
        master = links.get(link.get("master") or "", {})
        if (master.get("linkinfo") or {}).get("info_kind") == "bond":
            module.warn("%s is a slave of bond %s; set the MTU on the bond, its slaves follow"
                        % (name, link["master"]))
        result_rows.append({"name": name, "fabric": row["fabric"], "match": row["match"],
                            "kind": link_kind(link), "mtu_before": link.get("mtu"), "mtu": mtu,
                            "min_mtu": low, "max_mtu": high, "limit": why, "connection": False,
                            "changed": link.get("mtu") != mtu})
    if errors:
        module.fail_json(msg="link_mtu: %d problem(s), nothing changed: %s"
                         % (len(errors), "; ".join(errors)), errors=errors)

    client, server = ssh_connection_addresses(os.environ)
    conn = ip.connection_interfaces(links, [_address(module, p["connection_address"]), server], client)
    if not conn and any(r["changed"] for r in result_rows):
        module.warn("could not identify the interface carrying the Ansible connection (no connection_address, "
                    "no SSH_CONNECTION); the lockout guard cannot protect it")
    blocked = []
    for row in result_rows:
        row["connection"] = row["name"] in conn
        if row["connection"] and row["changed"]:
            blocked.append("%s (%s -> %s)" % (row["name"], row["mtu_before"], row["mtu"]))
    if blocked and not p["allow_connection_interface"]:
        module.fail_json(
            msg="refusing to change the MTU of the interface carrying the Ansible connection: %s. "
                "A wrong MTU there can cut the node off; set allow_connection_interface: true "
                "(with verify_after: [peer addresses]) to change it." % ", ".join(blocked),
            connection_interfaces=conn, interfaces=result_rows)
    if blocked and not p["verify_after"]:
        module.warn("changing the connection interface without verify_after: no automatic revert")
    ping = None
    if p["verify_after"]:
        ping = runner.which("ping")
        if not ping:
            module.fail_json(msg="verify_after needs ping on the node; none found, nothing changed")

    # Lower MTUs top-down (VLAN before parent), raise bottom-up (parent before VLAN).
    changed_rows = [r for r in result_rows if r["changed"]]
    lowers = sorted((r for r in changed_rows if r["mtu"] < (r["mtu_before"] or 0)),
                    key=lambda r: (-depth(links, r["name"]), r["name"]))
    raises = sorted((r for r in changed_rows if r["mtu"] >= (r["mtu_before"] or 0)),
                    key=lambda r: (depth(links, r["name"]), r["name"]))
    live = lowers + raises

    persist = {"backend": "none", "detected": {}, "changes": [], "notes": []}
    changes = []
    if p["persist"] != "none":
        found = detect(host, runner, runner.which("systemctl"))
        persist["detected"] = found
        backend = choose(found) if p["persist"] == "auto" else p["persist"]
        if backend is None:
            persist["notes"].append("no network configuration backend found (netplan, NetworkManager, "
                                    "systemd-networkd, ifupdown); MTU not persisted")
            module.warn(persist["notes"][-1])
        else:
            persist["backend"] = backend
            if p["persist"] != "auto" and backend not in found:
                module.warn("persist=%s requested but not detected on the node; writing its files anyway"
                            % backend)
            plan_targets = []
            for row in result_rows:
                bus, dummy = sysfs_device(host, row["name"])
                link = links[row["name"]]
                plan_targets.append({"name": row["name"], "mtu": row["mtu"], "kind": link_kind(link),
                                     "bus": bus, "mac": link.get("permaddr") or link.get("address")})
            changes, notes = BACKENDS[backend](host, runner).plan(plan_targets)
            persist["notes"].extend(notes)
            for note in notes:
                module.warn(note)
    persist["changes"] = [c.description for c in changes]

    actions = ["ip link set dev %s mtu %d" % (r["name"], r["mtu"]) for r in live]
    actions += persist["changes"]
    diff = {"before": {"mtu": {}, "files": {}}, "after": {"mtu": {}, "files": {}}}
    for row in live:
        diff["before"]["mtu"][row["name"]] = row["mtu_before"]
        diff["after"]["mtu"][row["name"]] = row["mtu"]
    for change in changes:
        diff["before"]["files"][change.path] = change.before
        diff["after"]["files"][change.path] = change.after
    for row in result_rows:
        row.pop("index", None)
    result = dict(changed=bool(actions), interfaces=result_rows, actions=actions, persist=persist,
                  connection_interfaces=conn, diff=diff)
    if module.check_mode or not actions:
        module.exit_json(**result)

    done = []
    try:
        if live and p["verify_after"]:
            silent = sorted(k for k, ok in _ping_all(runner, ping, p["verify_after"]).items() if not ok)
            if silent:
                module.fail_json(msg="verify_after peers %s do not answer before the change, so they cannot "
                                     "judge it; nothing changed" % ", ".join(silent), actions=actions)
        for row in live:
            ip.set_mtu(row["name"], row["mtu"])
            done.append(row)
        if live and p["verify_after"]:
            verified = _ping_all(runner, ping, p["verify_after"])
            result["verified"] = verified
            lost = sorted(k for k, ok in verified.items() if not ok)
            if lost:
                reverted = _revert(ip, done)
                module.fail_json(msg="peers %s stopped answering after the MTU change; reverted %s, "
                                     "nothing persisted" % (", ".join(lost), ", ".join(reverted)),
                                 verified=verified, actions=actions, interfaces=result_rows)
        for change in changes:
            change.apply(host, runner)
    except (CommandError, OSError, IOError) as exc:
        reverted = _revert(ip, done)
        module.fail_json(msg="applying MTU failed: %s; reverted live MTU of %s"
                         % (exc, ", ".join(reverted) or "nothing"),
                         actions=actions, interfaces=result_rows)

    after = ip.links()
    wrong = ["%s is %s, expected %s" % (r["name"], after.get(r["name"], {}).get("mtu"), r["mtu"])
             for r in result_rows if after.get(r["name"], {}).get("mtu") != r["mtu"]]
    if wrong:
        module.fail_json(msg="MTU read back differs: %s" % "; ".join(wrong), **result)
    module.exit_json(**result)


def _address(module, name):
    """An IP literal for ``connection_address`` (a host name is resolved on the node)."""
    if not name:
        return None
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(name, None)[0][4][0]
    except (socket.error, IndexError):
        module.warn("connection_address %s does not resolve on the node; lockout guard uses SSH_CONNECTION only"
                    % name)
        return None


def _ping_all(runner, ping, peers):
    return dict((peer, runner.run([ping, "-c", "3", "-W", "2", "-q", peer], check=False)[0] == 0)
                for peer in peers)


def _revert(ip, done):
    reverted = []
    for row in reversed(done):
        try:
            ip.set_mtu(row["name"], row["mtu_before"])
            reverted.append("%s->%s" % (row["name"], row["mtu_before"]))
        except CommandError:
            reverted.append("%s (revert FAILED)" % row["name"])
    return reverted


if __name__ == "__main__":
    main()
