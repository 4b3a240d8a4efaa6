# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Persistence of interface MTUs through the node's network configuration backend.

One small class per backend (systemd-networkd, NetworkManager, netplan, ifupdown). Each
turns a list of targets ``{name, mtu, kind, bus}`` into actions of the capability contract
(``file`` actions for files to write, ``command`` actions for ``nmcli``) plus ``notes`` for
interfaces it cannot persist. Nothing here changes the live link: ``ip link set`` does that;
these files take effect at the next boot or reconfiguration, never by restarting the network
stack from here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import json
import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Action, apply_file, file_action

HEADER = "Managed by aiinfra.datapath.link_mtu; changes here are overwritten."
NM_SECTION = "NetworkManager connections"


def apply_change(root, runner, action):
    """Do one persistence action: write the file below ``root`` or run the command."""
    if action.kind == "command":
        runner.run(action.data["argv"], record=True)
    else:
        apply_file(root, action)


class Backend(object):
    name = None
    label = None

    def __init__(self, host, runner):
        self.host = host
        self.runner = runner

    def plan(self, targets):
        """Return (actions, notes) for ``targets`` (list of dicts name/mtu/kind/bus)."""
        raise NotImplementedError

    def _file_change(self, path, content, mode=0o644):
        before = self.host.read_raw(path)
        if before == content:
            return None
        return file_action(path, before, content, mode=mode)


class NetworkdBackend(Backend):
    """A drop-in for the .network file that already matches the interface, else a .link file."""

    name = "networkd"
    label = "systemd-networkd"
    search_dirs = ("/etc/systemd/network", "/run/systemd/network", "/usr/local/lib/systemd/network",
                   "/usr/lib/systemd/network", "/lib/systemd/network")
    dropin_name = "90-aiinfra-mtu.conf"
    link_pattern = "/etc/systemd/network/10-aiinfra-%s.link"

    def network_files(self):
        """Effective .network files in systemd's order (same name: the earlier dir wins)."""
        chosen = {}
        for directory in self.search_dirs:
            for fname in self.host.listdir(directory):
                if fname.endswith(".network") and fname not in chosen:
                    chosen[fname] = os.path.join(directory, fname)
        return [chosen[k] for k in sorted(chosen)]

    @staticmethod
    def parse_match(text):
        match, section = {}, None
        for raw in (text or "").splitlines():
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                continue
            if section == "Match" and "=" in line:
                key, value = line.split("=", 1)
                match.setdefault(key.strip(), []).extend(value.split())
        return match

    @staticmethod
    def matches(match, target):
        if not match:
            return False
        for key, patterns in match.items():
            if key == "Name":
                value = target["name"]
            elif key in ("MACAddress", "PermanentMACAddress"):
                value = (target.get("mac") or "").lower()
                patterns = [p.lower() for p in patterns]
            else:
                return False  # Driver=, Path=, Type=...: not evaluated, do not guess
            positive = [p for p in patterns if not p.startswith("!")]
            negative = [p[1:] for p in patterns if p.startswith("!")]
            if any(fnmatch.fnmatchcase(value, p) for p in negative):
                return False
            if positive and not any(fnmatch.fnmatchcase(value, p) for p in positive):
                return False
        return True

    def network_file_for(self, target):
        for path in self.network_files():
            if self.matches(self.parse_match(self.host.read_raw(path)), target):
                return path
        return None

    def link_file(self, target):
        if target.get("bus"):
            match = "Path=pci-%s" % target["bus"]
        else:
            match = "OriginalName=%s" % target["name"]
        # A .link file that matches replaces 99-default.link entirely (first match wins), so
        # it repeats the default naming policies to keep the interface's predictable name.
        return ("# %s\n# MTU of %s; applied by udev when the device appears.\n"
                "[Match]\n%s\n\n[Link]\nNamePolicy=keep kernel database onboard slot path\n"
                "AlternativeNamesPolicy=database onboard slot path\nMACAddressPolicy=persistent\n"
                "MTUBytes=%d\n" % (HEADER, target["name"], match, target["mtu"]))

    def plan(self, targets):
        changes, notes, by_file = [], [], {}
        for target in targets:
            by_file.setdefault(self.network_file_for(target), []).append(target)
        for network, group in sorted(by_file.items(), key=lambda kv: kv[0] or ""):
            mtus = set(t["mtu"] for t in group)
            if network and len(mtus) == 1:
                path = "/etc/systemd/network/%s.d/%s" % (os.path.basename(network), self.dropin_name)
                content = "# %s\n# MTU of %s (matched by %s).\n[Link]\nMTUBytes=%d\n" % (
                    HEADER, ", ".join(t["name"] for t in group), network, group[0]["mtu"])
                change = self._file_change(path, content)
            else:
                change = None
                if network:
                    notes.append("%s matches %s with different MTUs; using .link files"
                                 % (network, ", ".join(t["name"] for t in group)))
                for target in group:
                    change = self._file_change(self.link_pattern % target["name"], self.link_file(target))
                    if change:
                        changes.append(change)
                continue
            if change:
                changes.append(change)
        return changes, notes


class NetworkManagerBackend(Backend):
    """``nmcli connection modify`` on the connection active on the device."""

    name = "networkmanager"
    label = "NetworkManager"
    mtu_property = {"infiniband": "infiniband.mtu"}
    default_property = "802-3-ethernet.mtu"

    def _get(self, argv):
        rc, out, err = self.runner.run(argv, check=False)
        return (out or "").strip() if rc == 0 else None

    def plan(self, targets):
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


class NetplanBackend(Backend):
    """One drop-in YAML file (written as JSON, which is YAML) merged by netplan by id."""

    name = "netplan"
    label = "netplan"
    path = "/etc/netplan/90-aiinfra-datapath.yaml"
    sections = {"bond": "bonds", "vlan": "vlans", "bridge": "bridges"}

    def other_files(self):
        return [os.path.join("/etc/netplan", f) for f in self.host.listdir("/etc/netplan")
                if f.endswith(".yaml") and os.path.join("/etc/netplan", f) != self.path]

    def defined_elsewhere(self, name):
        key = re.compile(r"^\s+[\"']?%s[\"']?\s*:\s*$" % re.escape(name), re.M)
        return any(key.search(self.host.read_raw(p) or "") for p in self.other_files())

    def plan(self, targets):
        notes = []
        current = self.host.read_raw(self.path)
        try:
            doc = json.loads(current) if current else {}
        except ValueError:
            return [], ["%s exists but was not written by this module (not JSON); not changed" % self.path]
        network = doc.setdefault("network", {})
        network["version"] = 2
        for target in targets:
            section = self.sections.get(target.get("kind"), "ethernets")
            if section != "ethernets" and not self.defined_elsewhere(target["name"]):
                # netplan rejects a bond/VLAN definition without its members/id: do not write one.
                notes.append("%s: %s is not defined in /etc/netplan; MTU not persisted"
                             % (target["name"], section))
                continue
            network.setdefault(section, {}).setdefault(target["name"], {})["mtu"] = target["mtu"]
        content = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        if not any(network.get(s) for s in ("ethernets", "bonds", "vlans", "bridges")):
            return [], notes
        change = self._file_change(self.path, content, mode=0o600)
        return ([change] if change else []), notes


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

    def plan(self, targets):
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
            content = "# %s\nauto %s\niface %s inet manual\n    mtu %d\n" % (
                HEADER, target["name"], target["name"], target["mtu"])
            change = self._file_change(self.file_for(target["name"]), content)
            if change:
                changes.append(change)
        return changes, notes


BACKENDS = dict((cls.name, cls)
                for cls in (NetplanBackend, NetworkManagerBackend, NetworkdBackend, IfupdownBackend))
DETECT_ORDER = ("netplan", "networkmanager", "networkd", "ifupdown")


def detect(host, runner, systemctl=None):
    """Return ``{backend: evidence}`` for each backend the node has (nothing is guessed)."""
    found = {}
    if any(f.endswith(".yaml") and f != os.path.basename(NetplanBackend.path)
           for f in host.listdir("/etc/netplan")):
        found["netplan"] = "/etc/netplan/*.yaml present"
    if systemctl:
        for backend, unit in (("networkmanager", "NetworkManager"), ("networkd", "systemd-networkd")):
            rc, out, err = runner.run([systemctl, "is-active", unit], check=False)
            if (out or "").strip() == "active":
                found[backend] = "%s is active" % unit
    if host.exists(IfupdownBackend.main):
        found["ifupdown"] = "%s present" % IfupdownBackend.main
    return found


def choose(found):
    for name in DETECT_ORDER:
        if name in found:
            return name
    return None
