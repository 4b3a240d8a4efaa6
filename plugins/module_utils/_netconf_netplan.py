# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""link_mtu's netplan backend: the MTU goes to the netplan definition that owns the interface.

netplan reads ``/{lib,etc,run}/netplan/*.yaml`` (a name in ``/run`` shadows ``/etc``, which
shadows ``/lib``), in lexical order of file name, and merges definitions of the same ID. So
the drop-in ``/etc/netplan/90-aiinfra-datapath.yaml`` sets ``mtu`` under the **ID of the
definition that configures the interface** — the one whose ID is its name (no ``match``),
whose ``set-name`` is its name, or whose ``match`` (name glob, MAC address, driver) selects it,
the first in the order networkd applies netplan's ``10-netplan-ID.network`` files — never a
new definition, which would take the interface away from its own (see the module notes).

The configuration is read the way netplan reads it: ``netplan get --root-dir`` over a private
copy of the hierarchy without our drop-in (netplan's own parser, merge and shadowing), parsed
with the strict subset reader of ``_netconf_yaml``; without the netplan CLI the files are read
with that reader and merged here, and a file it cannot read stops the backend (a note, no
drop-in). The planned drop-in is then read back the same way: netplan must accept it and the
merged ``mtu`` must be ours (a later file may override it).

An interface netplan does not configure, a definition that also configures devices this run
does not set, and a ``match`` definition without a ``.link`` of netplan's yet (adding ``mtu``
makes netplan write one, which would replace the ``.link`` udev names the device by) are
persisted through the systemd ``.link`` route of ``_netconf_systemd`` instead.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import tempfile

from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf_yaml
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import file_action
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_systemd import (
    LINK_KEYS,
    Backend,
    NetworkdBackend,
    _all,
    _key_result,
    match_file,
    normal_mac,
)

NETPLAN_DIRS = ("/lib/netplan", "/etc/netplan", "/run/netplan")     # later shadows earlier
OWN = "/etc/netplan/90-aiinfra-datapath.yaml"
OWN_RAILS = "/etc/netplan/90-aiinfra-rails.yaml"     # rail_routing's: routes and routing-policy per definition
OWN_FILES = (OWN, OWN_RAILS)
MTU_SECTIONS = ("ethernets", "wifis", "modems", "bonds", "bridges", "vlans", "tunnels")
MATCH_SECTIONS = ("ethernets", "wifis", "modems")
LINK_SECTIONS = ("ethernets", "wifis")      # netplan writes 10-netplan-ID.link for these
TRUE = ("true", "yes", "on", "y")


class NetplanError(Exception):
    """netplan's configuration cannot be read (the message is a note for the user)."""


def netplan_files(host):
    """[(name, path)] netplan reads, in its order (a name in a later directory shadows)."""
    chosen = {}
    for directory in NETPLAN_DIRS:
        for name in host.listdir(directory):
            if name.endswith(".yaml"):
                chosen[name] = os.path.join(directory, name)
    return sorted(chosen.items())


def merge(into, doc):
    for key, value in doc.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into


class NetplanView(object):
    """netplan's merged ``network:`` mapping without our drop-in (or with a planned one)."""

    def __init__(self, host, runner):
        self.host = host
        self.runner = runner
        self.files = [(n, p) for n, p in netplan_files(host) if p not in OWN_FILES]
        self.netplan = runner.which("netplan")

    def load(self, planned=None, path=OWN):
        """The merged ``network:``; ``planned`` is read as our file ``path`` (OWN: link_mtu's)."""
        if self.netplan:
            return self._get(planned, path)
        network = {}
        files = list(self.files) + ([(os.path.basename(path), None)] if planned is not None else [])
        for _name, path in sorted(files, key=lambda entry: entry[0]):
            if path is None:
                merge(network, planned.get("network") or {})
                continue
            try:
                doc = _netconf_yaml.parse(self.host.read_raw(path))
            except _netconf_yaml.YamlSubsetError as exc:
                raise NetplanError("%s, %s: this reader refuses it and netplan's CLI is not installed to read it"
                                   % (path, exc))
            if isinstance(doc, dict) and isinstance(doc.get("network"), dict):
                merge(network, doc["network"])
        return network

    def _get(self, planned, own=OWN):
        tmp = tempfile.mkdtemp(prefix="aiinfra-netplan-")
        try:
            os.chmod(tmp, 0o700)
            copies = [(p, self.host.read_raw(p)) for n, p in self.files]
            if planned is not None:
                copies.append((own, json.dumps(planned)))
            for path, text in copies:
                dest = os.path.join(tmp, path.lstrip("/"))
                if not os.path.isdir(os.path.dirname(dest)):
                    os.makedirs(os.path.dirname(dest), 0o700)
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
                    handle.write(text or "")
            rc, out, err = self.runner.run([self.netplan, "get", "--root-dir", tmp, "all"], check=False)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if rc != 0 and "invalid choice" in (err or ""):
            # netplan before 0.100 (Ubuntu 18.04) has no 'get': read the files as netplan would
            self.netplan = None
            return self.load(planned, own)
        if rc != 0:
            text = (err or out or "").replace(tmp, "")
            found = re.findall(r"(/\S+\.yaml:\d+:\d+: .*)", text)
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            raise NetplanError("netplan cannot read the configuration: %s"
                               % (found or lines or ["'netplan get' failed with rc %d" % rc])[-1])
        try:
            doc = _netconf_yaml.parse(out)
        except _netconf_yaml.YamlSubsetError as exc:
            raise NetplanError("cannot read the output of 'netplan get': %s" % exc)
        network = doc.get("network") if isinstance(doc, dict) else None
        return network if isinstance(network, dict) else {}


def definitions(network):
    """{(section, id): definition} of a merged ``network:`` mapping."""
    found = {}
    for section, entries in (network or {}).items():
        if isinstance(entries, dict):
            for ident, definition in entries.items():
                found[(section, ident)] = definition if isinstance(definition, dict) else {}
    return found


def _as_list(value):
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def selects(section, ident, definition, facts):
    """Does this definition configure the device (netplan's .network [Match])? True/False/None."""
    match = definition.get("match") if section in MATCH_SECTIONS else None
    if not isinstance(match, dict):
        return _key_result("Name", "name", [ident], facts)
    results = []
    if definition.get("set-name"):
        results.append(_key_result("Name", "name", [str(definition["set-name"])], facts))
    elif match.get("name") is not None:
        results.append(_key_result("Name", "name", [str(match["name"])], facts))
    if match.get("macaddress"):
        wanted = normal_mac(str(match["macaddress"]))
        if "permaddr" not in facts:
            results.append(None)
        elif facts["permaddr"] is not None:
            results.append(normal_mac(facts["permaddr"]) == wanted)
        else:                                # netplan >= 0.106 matches PermanentMACAddress=
            results.append(None if normal_mac(facts.get("mac")) == wanted else False)
    if match.get("driver"):
        results.append(_key_result("Driver", "driver", _as_list(match["driver"]), facts))
    return _all(results) if results else False


def candidates(defs, facts):
    """[(section, id, answer)] that may configure the device, up to the first sure one."""
    found = []
    for section, ident in sorted(defs, key=lambda key: "10-netplan-%s.network" % key[1]):
        answer = selects(section, ident, defs[(section, ident)], facts)
        if answer is not False:
            found.append((section, ident, answer))
            if answer:
                break
    return found


def has_link(definition):
    """Does netplan already write a .link for it (so adding mtu only adds MTUBytes= there)?"""
    return bool(definition.get("set-name") or str(definition.get("wakeonlan", "")).lower() in TRUE
                or definition.get("mtu") not in (None, ""))


def link_match(ident, definition):
    """The [Match] lines of the .link netplan (0.106) writes for a definition."""
    match = definition.get("match")
    lines = []
    if isinstance(match, dict):
        if match.get("driver"):
            lines.append("Driver=%s" % " ".join(_as_list(match["driver"])))
        if match.get("macaddress"):
            lines.append("PermanentMACAddress=%s" % match["macaddress"])
        if match.get("name"):
            lines.append("OriginalName=%s" % match["name"])
    else:
        lines.append("OriginalName=%s" % ident)
    return lines


def new_link_applies(ident, definition, facts):
    """Would the .link netplan writes once the definition has an mtu apply to the device?"""
    return match_file("[Match]\n%s\n" % "\n".join(link_match(ident, definition)), LINK_KEYS, facts)


class NetplanBackend(Backend):
    """``mtu`` under the owning definition's ID in our drop-in, else the systemd .link route."""

    name = "netplan"
    label = "netplan"
    path = OWN

    def _owner(self, target, found, notes):
        name = target["name"]
        if not found:
            notes.append("%s: not configured by netplan; MTU persisted by a systemd .link (udev applies it at "
                         "boot, whatever renders the network), not by a new netplan definition" % name)
            return "link"
        section, ident, answer = found[0]
        if answer is None:
            notes.append("%s: netplan's %s.%s may configure it (its match cannot be checked here); MTU not "
                         "persisted: set mtu there" % (name, section, ident))
            return None
        if section not in MTU_SECTIONS:
            notes.append("%s: configured by netplan's %s.%s, which has no mtu key; MTU not persisted"
                         % (name, section, ident))
            return None
        return (section, ident)

    def _problem(self, key, group, defs, owners, others):
        section, ident = key
        reach = sorted(o["name"] for o in others if key in [(s, i) for s, i, a in owners[o["name"]]])
        where = "netplan's %s.%s" % key
        if len(set(t["mtu"] for t in group)) > 1:
            return "%s configures %s, which get different MTUs" % (where, ", ".join(t["name"] for t in group))
        if reach:
            return "%s also configures %s, which this run does not set" % (where, ", ".join(reach))
        definition = defs[key]
        if section in LINK_SECTIONS and not has_link(definition):
            if any(new_link_applies(ident, definition, t) is not False for t in group):
                return ("an mtu in %s makes netplan write 10-netplan-%s.link, which would replace the .link that "
                        "udev applies to %s now (its name and naming policies with it)"
                        % (where, ident, ", ".join(t["name"] for t in group)))
        return None

    def plan(self, targets, others=()):
        current = self.host.read_raw(self.path)
        try:
            old = json.loads(current) if current else {}
        except ValueError:
            return [], ["%s exists but was not written by this module (not JSON); not changed" % self.path]
        view = NetplanView(self.host, self.runner)
        try:
            defs = definitions(view.load())
        except NetplanError as exc:
            return [], ["%s; MTU not persisted through netplan" % exc]
        notes, entries, link_targets = [], {}, []
        owners = dict((d["name"], candidates(defs, d)) for d in list(targets) + list(others))
        for target in targets:
            owner = self._owner(target, owners[target["name"]], notes)
            if owner == "link":
                link_targets.append(target)
            elif owner:
                entries.setdefault(owner, []).append(target)
        for key in sorted(entries):
            problem = self._problem(key, entries[key], defs, owners, others)
            if not problem:
                continue
            group = entries.pop(key)
            for target in group:
                if defs[key].get("mtu") not in (None, ""):
                    notes.append("%s: %s, and it sets mtu %s itself; MTU not persisted"
                                 % (target["name"], problem, defs[key]["mtu"]))
                else:
                    notes.append("%s: %s; MTU persisted by a systemd .link instead (netplan's files set no MTU "
                                 "for it)" % (target["name"], problem))
                    link_targets.append(target)
        change, doc_notes = self._drop_in(view, old, current, defs, entries, owners, targets)
        networkd = NetworkdBackend(self.host, self.runner)
        link_changes, link_notes, planned = networkd.plan_links(link_targets, others)
        cleanup = networkd.cleanup([t["name"] for t in targets], planned)
        return ([change] if change else []) + link_changes + cleanup, notes + doc_notes + link_notes

    def _drop_in(self, view, old, current, defs, entries, owners, targets):
        """The new drop-in: earlier entries that still name a definition, plus this run's."""
        notes, network = [], {"version": 2}
        mine = set((s, i) for t in targets for s, i, a in owners[t["name"]][:1])
        for section, values in sorted((old.get("network") or {}).items()):
            if not isinstance(values, dict):
                continue
            for ident, value in sorted(values.items()):
                if (section, ident) not in defs:
                    notes.append("removed %s.%s from %s: no other netplan file defines it, so it made netplan "
                                 "configure a device of its own (written by an earlier version)"
                                 % (section, ident, self.path))
                elif (section, ident) not in mine:
                    network.setdefault(section, {})[ident] = value
        for (section, ident), group in sorted(entries.items()):
            network.setdefault(section, {})[ident] = {"mtu": group[0]["mtu"]}
        if len(network) > 1:
            try:
                merged = definitions(view.load({"network": network}))
            except NetplanError as exc:
                return None, notes + ["%s with the planned drop-in; %s not changed" % (exc, self.path)]
            for (section, ident), value in sorted(definitions(network).items()):
                got = merged.get((section, ident), {}).get("mtu")
                if str(got) != str(value.get("mtu")):
                    notes.append("netplan's %s.%s gets mtu %s from a file read after %s; MTU %s not persisted: "
                                 "change it there" % (section, ident, got, os.path.basename(self.path),
                                                      value.get("mtu")))
                    del network[section][ident]
            network = dict((k, v) for k, v in network.items() if v)
        if len(network) == 1:
            return (file_action(self.path, current, None) if current is not None else None), notes
        content = json.dumps({"network": network}, indent=2, sort_keys=True) + "\n"
        return self._file_change(self.path, content, mode=0o600), notes

    # -- rail routing (rail_routing) --------------------------------------------------------
    def plan_routing(self, targets, others=()):
        """``routes`` (with ``table``) and ``routing-policy`` under the ID of the definition that configures
        each rail's interface, in our own file ``90-aiinfra-rails.yaml``: netplan appends the lists of one ID
        across files, so the definition's own routes stay."""
        current = self.host.read_raw(OWN_RAILS)
        view = NetplanView(self.host, self.runner)
        try:
            defs = definitions(view.load())
        except NetplanError as exc:
            return [], ["%s; rail routing not persisted through netplan" % exc]
        notes, entries = [], {}
        owners = dict((d["name"], candidates(defs, d)) for d in list(targets) + list(others))
        for target in targets:
            name = target["name"]
            found = owners[name]
            if not found:
                notes.append("%s: not configured by netplan; its rail table and rule are not persisted (a new "
                             "netplan definition would take the interface over)" % name)
                continue
            section, ident, answer = found[0]
            if answer is None:
                notes.append("%s: netplan's %s.%s may configure it (its match cannot be checked here); rail routing "
                             "not persisted" % (name, section, ident))
                continue
            if section not in MTU_SECTIONS:
                notes.append("%s: configured by netplan's %s.%s, which has no routes; rail routing not persisted"
                             % (name, section, ident))
                continue
            reach = sorted(d["name"] for d in list(targets) + list(others) if d["name"] != name
                           and (section, ident) in [(s, i) for s, i, a in owners[d["name"]][:1]])
            if reach:
                notes.append("%s: netplan's %s.%s also configures %s; rail routing not persisted (its table and rule "
                             "would apply to every interface it configures)" % (name, section, ident, ", ".join(reach)))
                continue
            entry = entries.setdefault((section, ident), {"routes": [], "routing-policy": []})
            for rail in target["rails"]:
                entry["routing-policy"].append({"from": rail["address"], "table": rail["table"],
                                                "priority": rail["priority"]})
                entry["routes"].append({"to": rail["subnet"], "scope": "link", "table": rail["table"]})
                entry["routes"].extend({"to": r["to"], "via": r["via"], "table": rail["table"]}
                                       for r in rail.get("routes") or [])
        network = {"version": 2}
        for (section, ident), entry in sorted(entries.items()):
            network.setdefault(section, {})[ident] = entry
        if len(network) == 1:
            return ([file_action(OWN_RAILS, current, None)] if current is not None else []), notes
        try:
            view.load({"network": network}, OWN_RAILS)
        except NetplanError as exc:
            return [], notes + ["%s with the planned %s; rail routing not persisted" % (exc, OWN_RAILS)]
        content = json.dumps({"network": network}, indent=2, sort_keys=True) + "\n"
        change = self._file_change(OWN_RAILS, content, mode=0o600)
        return ([change] if change else []), notes
