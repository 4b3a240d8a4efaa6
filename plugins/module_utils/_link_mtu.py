# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The link_mtu capability: live MTU of data-path interfaces, persisted by the node's backend.

``read`` takes the link table (``ip -j -d link show``); ``plan`` maps the plan's items to
interfaces, checks every MTU against the spec's range and the device's limits, guards the
interface carrying the Ansible connection, orders the live changes (lowered top-down, raised
bottom-up) and asks the node's network configuration backend (``_netconf``) for the files or
commands that persist them; ``apply`` pings ``verify_after`` peers before and after the live
changes (reverting on a lost peer), persists, and reads the MTUs back.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import os
import socket

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Action, Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._derived import MTU_MAX, MTU_MIN
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import (
    IpLink,
    depth,
    describe_match,
    device_facts,
    link_kind,
    match_interfaces,
    mtu_limits,
    parse_match,
    ssh_connection_addresses,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf import BACKENDS, apply_change, choose, detect
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError

PERSIST_CHOICES = ["auto", "networkd", "networkmanager", "netplan", "ifupdown", "none"]
LIVE_SECTION = "live MTU"


class LinkMtuError(CapabilityError):
    """A plan the node cannot take, a refused change, or a change the node did not keep."""


def resolve(items, links, host):
    """Map plan items to interfaces; return (targets, rows, errors)."""
    errors, rows, targets = [], [], {}
    for index, item in enumerate(items):
        where = "interfaces[%d]%s" % (index, " (fabric %s)" % item["fabric"] if item.get("fabric") else "")
        mtu = item["mtu"]
        if not MTU_MIN <= mtu <= MTU_MAX:
            errors.append("%s: mtu %d is outside %d-%d (the spec's range; the device may allow more)"
                          % (where, mtu, MTU_MIN, MTU_MAX))
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


def live_order(rows, links):
    """Rows that change, in the order to set them: lowered top-down (VLAN before parent),
    then raised bottom-up (parent before VLAN)."""
    changed = [r for r in rows if r["changed"]]
    lowers = sorted((r for r in changed if r["mtu"] < (r["mtu_before"] or 0)),
                    key=lambda r: (-depth(links, r["name"]), r["name"]))
    raises = sorted((r for r in changed if r["mtu"] >= (r["mtu_before"] or 0)),
                    key=lambda r: (depth(links, r["name"]), r["name"]))
    return lowers + raises


def limit_problem(where, name, mtu, low, high, why):
    """Why ``mtu`` is refused for ``name``, naming whose limit it is (None when it fits)."""
    if mtu < low:
        return ("%s: MTU %d for %s is below %d, the smallest MTU the device accepts (its min_mtu); "
                "raise the plan's MTU for this fabric" % (where, mtu, name, low))
    if high is None or mtu <= high:
        return None
    if why == "device":
        return ("%s: MTU %d for %s is outside %d-%d, the range the device accepts (its max_mtu in "
                "'ip -d link'; the spec allows up to %d); lower the plan's MTU for this fabric"
                % (where, mtu, name, low, high, MTU_MAX))
    if why.startswith("MTU of parent "):
        return ("%s: MTU %d for %s is above %d, the %s (a VLAN cannot exceed it); raise the parent's MTU "
                "in the plan too, or lower this one" % (where, mtu, name, high, why))
    return ("%s: MTU %d for %s is above %d, the %s; lower the plan's MTU for this fabric"
            % (where, mtu, name, high, why))


def bond_of(links, name):
    """The bond ``name`` is enslaved to (None when it is not a bond member)."""
    master = links.get(links[name].get("master") or "")
    if master is not None and (master.get("linkinfo") or {}).get("info_kind") == "bond":
        return master["ifname"] if isinstance(master.get("ifname"), str) else links[name]["master"]
    return None


def member_problem(where, name, bond, mtu, bond_mtu):
    """Why an MTU asked for on a member of ``bond`` is refused: the kernel gives every member the
    bond's MTU when it enslaves it, so a member's own MTU is undone or leaves the members mismatched."""
    now = ("this run does not set %s" % bond if bond_mtu is None
           else "this run sets %s to %d" % (bond, bond_mtu))
    return ("%s: MTU %d asked for on %s, a member of bond %s: the kernel gives members the bond's MTU "
            "at every enslave, so it would be undone or leave the members mismatched (%s); set it on %s: "
            "its members follow it" % (where, mtu, name, bond, now, bond))


def live_rows(rows):
    """Rows that need an ``ip link set`` of their own: a bond member whose bond changes in this
    run follows it (the kernel sets each member's MTU when the bond's changes)."""
    changing = set(r["name"] for r in rows if r["changed"])
    return [r for r in rows if not (r["follows"] and r["follows"] in changing)]


def mtu_action(name, before, after):
    return Action("mtu", name, "ip link set dev %s mtu %d" % (name, after), before=before, after=after,
                  diff=LIVE_SECTION)


class LinkMtu(Capability):
    """The MTU of every planned interface in one call: check, guard, set, verify, persist."""

    name = "link_mtu"

    @classmethod
    def options(cls):
        return dict(
            interfaces=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str"),
                match=dict(type="dict", options=dict(
                    name=dict(type="str"), mac=dict(type="str"), pci=dict(type="str"), driver=dict(type="str"),
                )),
                fabric=dict(type="str"),
                mtu=dict(type="int", required=True),
            )),
            persist=dict(type="str", default="auto", choices=PERSIST_CHOICES),
            allow_connection_interface=dict(type="bool", default=False),
            connection_address=dict(type="str"),
            verify_after=dict(type="list", elements="str", default=[]),
        )

    def read(self):
        self.ip = IpLink(self.runner, ip=self.runner.which("ip") or "ip")
        return {"links": self.ip.links()}

    # -- plan -------------------------------------------------------------------------
    def plan(self, state):
        links = state["links"]
        self.rows = self._check(links)
        self.conn = self._guard(links, self.rows)
        self.ping = None
        if self.params["verify_after"]:
            self.ping = self.runner.which("ping")
            if not self.ping:
                raise LinkMtuError("verify_after needs ping on the node; none found, nothing changed")
        self.verified = None
        actions = [mtu_action(r["name"], r["mtu_before"], r["mtu"])
                   for r in live_order(live_rows(self.rows), links)]
        changes = self._persist_plan(links, self.rows)
        self.persist["changes"] = [c.text for c in changes]
        return actions + changes

    def _check(self, links):
        """Result rows of the matched interfaces; raise with every problem before any change."""
        targets, rows, errors = resolve(self.params["interfaces"], links, self.root)
        result_rows = []
        for row in rows:
            name = row["name"]
            link = links[name]
            low, high, why = mtu_limits(links, name, targets)
            mtu = targets[name]
            problem = limit_problem(row["where"], name, mtu, low, high, why)
            if problem:
                errors.append(problem)
            bond = bond_of(links, name)
            if bond is not None and targets.get(bond) != mtu:
                errors.append(member_problem(row["where"], name, bond, mtu, targets.get(bond)))
            result_rows.append({"name": name, "fabric": row["fabric"], "match": row["match"],
                                "kind": link_kind(link), "mtu_before": link.get("mtu"), "mtu": mtu,
                                "min_mtu": low, "max_mtu": high, "limit": why, "connection": False,
                                "changed": link.get("mtu") != mtu, "follows": bond})
        if errors:
            raise LinkMtuError("link_mtu: %d problem(s), nothing changed: %s" % (len(errors), "; ".join(errors)),
                               errors=errors)
        return result_rows

    def _guard(self, links, rows):
        """The connection interfaces; refuse to change one unless allow_connection_interface."""
        client, server = ssh_connection_addresses(os.environ)
        conn = self.ip.connection_interfaces(links, [self._address(self.params["connection_address"]), server],
                                             client)
        if not conn and any(r["changed"] for r in rows):
            self.warn("could not identify the interface carrying the Ansible connection (no connection_address, "
                      "no SSH_CONNECTION); the lockout guard cannot protect it")
        blocked = []
        for row in rows:
            row["connection"] = row["name"] in conn
            if row["connection"] and row["changed"]:
                blocked.append("%s (%s -> %s)" % (row["name"], row["mtu_before"], row["mtu"]))
        if blocked and not self.params["allow_connection_interface"]:
            raise LinkMtuError(
                "refusing to change the MTU of the interface carrying the Ansible connection: %s. "
                "A wrong MTU there can cut the node off; set allow_connection_interface: true "
                "(with verify_after: [peer addresses]) to change it." % ", ".join(blocked),
                connection_interfaces=conn, interfaces=rows)
        if blocked and not self.params["verify_after"]:
            self.warn("changing the connection interface without verify_after: no automatic revert")
        return conn

    def _address(self, name):
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
        except (socket.error, IndexError, UnicodeError, ValueError):
            self.warn("connection_address %s does not resolve on the node; lockout guard uses SSH_CONNECTION only"
                      % name)
            return None

    def _persist_plan(self, links, rows):
        """Persistence actions of the chosen backend; fills ``self.persist``."""
        choice = self.params["persist"]
        self.persist = {"backend": "none", "detected": {}, "changes": [], "notes": []}
        if choice == "none":
            return []
        found = detect(self.root, self.runner, self.runner.which("systemctl"))
        self.persist["detected"] = found
        backend = choose(found) if choice == "auto" else choice
        if backend is None:
            self.persist["notes"].append("no network configuration backend found (netplan, NetworkManager, "
                                         "systemd-networkd, ifupdown); MTU not persisted")
            self.warn(self.persist["notes"][-1])
            return []
        self.persist["backend"] = backend
        if choice != "auto" and backend not in found:
            self.warn("persist=%s requested but not detected on the node; writing its files anyway" % backend)
        targets = {}
        for row in rows:
            # a member of a bond is persisted through the bond (it takes the bond's MTU at enslave)
            if row["name"] not in targets and not row["follows"]:
                targets[row["name"]] = dict(device_facts(self.root, links, row["name"]), mtu=row["mtu"])
        others = [device_facts(self.root, links, name) for name in sorted(links) if name not in targets]
        changes, notes = BACKENDS[backend](self.root, self.runner).plan(
            [targets[name] for name in sorted(targets)], others)
        self.persist["notes"].extend(notes)
        for note in notes:
            self.warn(note)
        return changes

    # -- apply ------------------------------------------------------------------------
    def _ping_all(self):
        return dict((peer, self.runner.run([self.ping, "-c", "3", "-W", "2", "-q", peer], check=False)[0] == 0)
                    for peer in self.params["verify_after"])

    def _revert(self, done):
        reverted = []
        for action in reversed(done):
            try:
                self.ip.set_mtu(action.target, action.before)
                reverted.append("%s->%s" % (action.target, action.before))
            except CommandError:
                reverted.append("%s (revert FAILED)" % action.target)
        return reverted

    def apply(self, state, actions):
        """Live MTUs (verified, reverted on a lost peer), then persistence, then read back."""
        live = [a for a in actions if a.kind == "mtu"]
        verify = bool(live and self.params["verify_after"])
        public = [a.public() for a in actions]
        done = []
        try:
            if verify:
                silent = sorted(k for k, ok in self._ping_all().items() if not ok)
                if silent:
                    raise LinkMtuError("verify_after peers %s do not answer before the change, so they cannot "
                                       "judge it; nothing changed" % ", ".join(silent), actions=public)
            for action in live:
                self.ip.set_mtu(action.target, action.after)
                done.append(action)
            if verify:
                self.verified = self._ping_all()
                lost = sorted(k for k, ok in self.verified.items() if not ok)
                if lost:
                    reverted = self._revert(done)
                    raise LinkMtuError("peers %s stopped answering after the MTU change; reverted %s, "
                                       "nothing persisted" % (", ".join(lost), ", ".join(reverted)),
                                       verified=self.verified, actions=public, interfaces=self.rows)
            for action in actions:
                if action.kind != "mtu":
                    apply_change(self.root, self.runner, action)
        except (CommandError, OSError, IOError) as exc:
            # not a re-wrap: the live MTUs set so far are reverted first, and the message says so
            reverted = self._revert(done)
            raise LinkMtuError("applying MTU failed: %s; reverted live MTU of %s"
                               % (exc, ", ".join(reverted) or "nothing"), actions=public, interfaces=self.rows)
        after = self.ip.links()
        wrong = ["%s is %s, expected %s" % (r["name"], after.get(r["name"], {}).get("mtu"), r["mtu"])
                 for r in self.rows if after.get(r["name"], {}).get("mtu") != r["mtu"]]
        if wrong:
            result = self.result(state, actions)
            result.update(changed=True, actions=public)
            raise LinkMtuError("MTU read back differs: %s" % "; ".join(wrong), **result)

    def result(self, state, actions):
        result = dict(interfaces=self.rows, persist=self.persist, connection_interfaces=self.conn)
        if self.verified is not None:
            result["verified"] = self.verified
        return result
