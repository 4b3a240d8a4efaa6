# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Persistence of interface MTUs through the node's network configuration backend.

One class per backend: systemd-networkd (``_netconf_systemd``), netplan
(``_netconf_netplan``), NetworkManager and ifupdown (here). Each turns a list of targets —
the device facts of ``_iplink.device_facts`` plus ``mtu`` — into actions of the capability
contract (``file`` actions for files to write or remove, ``command`` actions for ``nmcli``)
plus ``notes`` for what it cannot persist or persists another way; ``others`` are the node's
other devices, which no file written here may reach. Nothing here changes the live link:
``ip link set`` does that; these files take effect at the next boot or reconfiguration,
never by restarting the network stack from here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Action, apply_file, file_action
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_netplan import OWN_FILES as NETPLAN_OWN
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_netplan import (
    NETPLAN_DIRS,
    NetplanBackend,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_systemd import (
    HEADER,
    RAIL_HEADER,
    Backend,
    NetworkdBackend,
)

NM_SECTION = "NetworkManager connections"
NETWORKD_STATE = "/run/systemd/netif/state"


def apply_change(root, runner, action):
    """Do one persistence action: write the file below ``root`` or run the command."""
    if action.kind == "command":
        runner.run(action.data["argv"], record=True)
    else:
        apply_file(root, action)


class NetworkManagerBackend(Backend):
    """``nmcli connection modify`` on the connection active on the device."""

    name = "networkmanager"
    label = "NetworkManager"
    mtu_property = {"infiniband": "infiniband.mtu"}
    default_property = "802-3-ethernet.mtu"

    def _get(self, argv):
        rc, out, err = self.runner.run(argv, check=False)
        return (out or "").strip() if rc == 0 else None

    def plan(self, targets, others=()):
        changes, notes = [], []
        if not self.runner.which("nmcli"):
            return [], ["nmcli is not installed; MTU not persisted through NetworkManager"]
        for target in targets:
            uuid = self._get(["nmcli", "-g", "GENERAL.CON-UUID", "device", "show", target["name"]])
            if not uuid:
                notes.append("%s: no NetworkManager connection is active on it; MTU not persisted"
                             % target["name"])
                continue
            ctype = self._get(["nmcli", "-g", "connection.type", "connection", "show", uuid]) or ""
            prop = self.mtu_property.get(ctype, self.default_property)
            current = self._get(["nmcli", "-g", prop, "connection", "show", uuid])
            if current == str(target["mtu"]):
                continue
            argv = ["nmcli", "-t", "connection", "modify", uuid, prop, str(target["mtu"])]
            what = "nmcli connection modify %s %s %d (%s)" % (uuid, prop, target["mtu"], target["name"])
            changes.append(Action("command", "%s %s" % (uuid, prop), what, before=current,
                                  after=str(target["mtu"]), diff=NM_SECTION, argv=argv))
        return changes, notes

    def plan_routing(self, targets, others=()):
        """``+ipv4.routes`` (``table=T``) and ``+ipv4.routing-rules`` on the connection active on each rail's
        interface (nm-settings-nmcli(5)); entries of ours at a planned priority that changed are replaced.
        The connection is not re-activated: the rules and routes apply from its next activation (the live
        ones are set by rail_routing itself)."""
        changes, notes = [], []
        if not self.runner.which("nmcli"):
            return [], ["nmcli is not installed; rail routing not persisted through NetworkManager"]
        for target in targets:
            uuid = self._get(["nmcli", "-g", "GENERAL.CON-UUID", "device", "show", target["name"]])
            if not uuid:
                notes.append("%s: no NetworkManager connection is active on it; rail routing not persisted"
                             % target["name"])
                continue
            for rail in target["rails"]:
                family = "ipv6" if ":" in rail["address"] else "ipv4"
                host = 128 if family == "ipv6" else 32
                rule = "priority %d from %s/%d table %d" % (rail["priority"], rail["address"], host, rail["table"])
                routes = ["%s table=%d" % (rail["subnet"], rail["table"])] + [
                    "%s %s table=%d" % (r["to"], r["via"], rail["table"]) for r in rail.get("routes") or []]
                for prop, wanted, same in (("%s.routing-rules" % family, [rule], _same_rule),
                                           ("%s.routes" % family, routes, _same_route)):
                    current = nm_list(self._get(["nmcli", "-g", prop, "connection", "show", uuid]))
                    argv = ["nmcli", "-t", "connection", "modify", uuid]
                    stale = [c for c in current if prop.endswith("routing-rules") and _rule_priority(c) == rail[
                        "priority"] and not any(same(c, w) for w in wanted)]
                    missing = [w for w in wanted if not any(same(c, w) for c in current)]
                    if not stale and not missing:
                        continue
                    for item in stale:
                        argv += ["-" + prop, item]
                    for item in missing:
                        argv += ["+" + prop, item]
                    what = "nmcli connection modify %s %s (%s %s, %s)" % (
                        uuid, " ".join("%s%s '%s'" % (argv[i][0], prop, argv[i + 1]) for i in range(5, len(argv), 2)),
                        rail["fabric"], rail["name"], target["name"])
                    changes.append(Action("command", "%s %s %s" % (uuid, prop, rail["table"]), what,
                                          before=", ".join(current) or None,
                                          after=", ".join([c for c in current if c not in stale] + missing),
                                          diff=NM_SECTION, argv=argv))
        return changes, notes


def nm_list(text):
    """A list property as ``nmcli -g`` prints it: items separated by ', ' (a ',' inside one is escaped)."""
    items, current, escape = [], "", False
    for char in (text or ""):
        if escape:
            current += char
            escape = False
        elif char == "\\":
            escape = True
        elif char == ",":
            items.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        items.append(current.strip())
    return [item for item in items if item]


def _tokens(text):
    return text.replace("=", " ").split()


def _rule_priority(text):
    words = text.split()
    try:
        return int(words[words.index("priority") + 1])
    except (ValueError, IndexError):
        return None


def _same_rule(have, want):
    """Routing rules compared by their words ('from 10.0.0.1' is 'from 10.0.0.1/32')."""
    def norm(text):
        words = text.split()
        out = []
        for index, word in enumerate(words):
            if index and words[index - 1] == "from" and "/" not in word:
                word += "/128" if ":" in word else "/32"
            out.append(word)
        return sorted(out)
    return norm(have) == norm(want)


def _same_route(have, want):
    """Routes compared by destination, next hop and table (other attributes are NetworkManager's)."""
    def key(text):
        words = _tokens(text)
        table = words[words.index("table") + 1] if "table" in words else None
        hop = words[1] if len(words) > 1 and words[1] not in ("table", "metric") and "." in words[1] + ":" else None
        return (words[0] if words else None, None if hop in (None, "0.0.0.0", "::") else hop, table)
    return key(have) == key(want)


class IfupdownBackend(Backend):
    """/etc/network/interfaces.d/aiinfra-IF, only when /etc/network/interfaces sources it."""

    name = "ifupdown"
    label = "ifupdown"
    main = "/etc/network/interfaces"
    directory = "/etc/network/interfaces.d"
    source_re = re.compile(r"^\s*(source\s+(/etc/network/)?interfaces\.d/\*|"
                           r"source-directory\s+(/etc/network/)?interfaces\.d/?)\s*$", re.M)

    def file_for(self, name):
        return "%s/aiinfra-%s" % (self.directory, name)

    def sources_directory(self):
        return bool(self.source_re.search(self.host.read_raw(self.main) or ""))

    def stanza_elsewhere(self, name):
        iface = re.compile(r"^\s*iface\s+%s\s" % re.escape(name), re.M)
        paths = [self.main] + [os.path.join(self.directory, f) for f in self.host.listdir(self.directory)]
        for path in paths:
            if path != self.file_for(name) and iface.search(self.host.read_raw(path) or ""):
                return path
        return None

    def own_parts(self, name):
        """(mtu line, rail lines) of our stanza for ``name`` (link_mtu and rail_routing share the file)."""
        text = self.host.read_raw(self.file_for(name)) or ""
        if HEADER not in text and RAIL_HEADER not in text:
            return None, []
        mtu = None
        rails = []
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["mtu"]:
                mtu = line
            elif words[:1] in (["post-up"], ["pre-down"]) or line.strip().startswith("# rail_routing:"):
                rails.append(line)
        return mtu, rails

    def render(self, name, mtu_line, rail_lines):
        """Our stanza for ``name``: the MTU of link_mtu and the rail lines of rail_routing (None: no file)."""
        if mtu_line is None and not rail_lines:
            return None
        header = HEADER if mtu_line is not None else RAIL_HEADER
        lines = ["# %s" % header, "auto %s" % name, "iface %s inet manual" % name]
        lines += ([mtu_line] if mtu_line is not None else []) + list(rail_lines)
        return "\n".join(lines) + "\n"

    def _stanza_change(self, name, content):
        path = self.file_for(name)
        before = self.host.read_raw(path)
        if content is None:
            return file_action(path, before, None) if before is not None else None
        return self._file_change(path, content)

    def plan(self, targets, others=()):
        changes, notes = [], []
        if not self.sources_directory():
            return [], ["%s does not source %s/*; MTU not persisted (add 'source %s/*')"
                        % (self.main, self.directory, self.directory)]
        for target in targets:
            other = self.stanza_elsewhere(target["name"])
            if other:
                notes.append("%s: defined in %s; add 'mtu %d' to that stanza (not edited automatically)"
                             % (target["name"], other, target["mtu"]))
                continue
            rails = self.own_parts(target["name"])[1]
            change = self._stanza_change(target["name"], self.render(target["name"], "    mtu %d" % target["mtu"],
                                                                     rails))
            if change:
                changes.append(change)
        return changes, notes

    def plan_routing(self, targets, others=()):
        """``post-up``/``pre-down`` lines in our stanza ``interfaces.d/aiinfra-IF`` (kept with link_mtu's MTU),
        only where no other stanza defines the interface (else the lines to add are in a note)."""
        changes, notes = [], []
        if not self.sources_directory():
            return [], ["%s does not source %s/*; rail routing not persisted (add 'source %s/*')"
                        % (self.main, self.directory, self.directory)]
        names = set(t["name"] for t in targets)
        for target in targets:
            lines = []
            for rail in target["rails"]:
                family = "-6" if ":" in rail["address"] else "-4"
                src = "%s/%d" % (rail["address"], 128 if family == "-6" else 32)
                lines.append("    # rail_routing: %s %s (table %d)" % (rail["fabric"], rail["name"], rail["table"]))
                lines.append("    post-up ip %s route replace %s dev %s scope link table %d" % (
                    family, rail["subnet"], target["name"], rail["table"]))
                lines += ["    post-up ip %s route replace %s via %s dev %s table %d" % (
                    family, r["to"], r["via"], target["name"], rail["table"]) for r in rail.get("routes") or []]
                lines.append("    post-up ip %s rule add priority %d from %s lookup %d || true" % (
                    family, rail["priority"], src, rail["table"]))
                lines.append("    pre-down ip %s rule del priority %d from %s lookup %d || true" % (
                    family, rail["priority"], src, rail["table"]))
            other = self.stanza_elsewhere(target["name"])
            if other:
                wanted = [line.strip() for line in lines if "#" not in line.split()[0]]
                notes.append("%s: defined in %s; rail routing not persisted: add to that stanza (not edited "
                             "automatically): %s" % (target["name"], other, "; ".join(wanted)))
                continue
            mtu = self.own_parts(target["name"])[0]
            change = self._stanza_change(target["name"], self.render(target["name"], mtu, lines))
            if change:
                changes.append(change)
        for entry in self.host.listdir(self.directory):
            name = entry[len("aiinfra-"):] if entry.startswith("aiinfra-") else None
            if name and name not in names:
                mtu, rails = self.own_parts(name)
                if rails:
                    change = self._stanza_change(name, self.render(name, mtu, []))
                    if change:
                        changes.append(change)
        return changes, notes


BACKENDS = dict((cls.name, cls)
                for cls in (NetplanBackend, NetworkManagerBackend, NetworkdBackend, IfupdownBackend))
DETECT_ORDER = ("netplan", "networkmanager", "networkd", "ifupdown")


def detect(host, runner, systemctl=None):
    """Return ``{backend: evidence}`` for each backend the node has (nothing is guessed)."""
    found = {}
    yaml = [os.path.join(d, f) for d in NETPLAN_DIRS for f in host.listdir(d)
            if f.endswith(".yaml") and os.path.join(d, f) not in NETPLAN_OWN]
    if yaml:
        etc = [p for p in yaml if p.startswith("/etc/")]
        found["netplan"] = "/etc/netplan/*.yaml present" if etc else "%s present" % yaml[0]
    answered = False
    if systemctl:
        # one call for both units: systemctl prints one state per unit, in the order given
        units = (("networkmanager", "NetworkManager"), ("networkd", "systemd-networkd"))
        rc, out, err = runner.run([systemctl, "is-active"] + [pair[1] for pair in units], check=False)
        states = [line.strip() for line in (out or "").splitlines()]
        answered = any(states)
        if len(states) == len(units):
            for index, (backend, unit) in enumerate(units):
                if states[index] == "active":
                    found[backend] = "%s is active" % unit
    if not answered and host.exists(NETWORKD_STATE):
        # No service manager answers (a container, a node without systemd as PID 1): networkd
        # running on its own keeps its state file in /run (a tmpfs: gone with the boot that wrote it).
        found["networkd"] = "no service manager answers; %s present" % NETWORKD_STATE
    if host.exists(IfupdownBackend.main):
        found["ifupdown"] = "%s present" % IfupdownBackend.main
    return found


def choose(found):
    for name in DETECT_ORDER:
        if name in found:
            return name
    return None
