# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""systemd's ``.link`` and ``.network`` files as udev and systemd-networkd 252 read them.

* the search path (``/etc``, ``/run``, ``/usr/local/lib``, ``/usr/lib``, ``/lib``
  ``/systemd/network``): a name in an earlier directory masks the same name in a later one
  (a link to ``/dev/null`` masks it for good), files apply in lexical order of their names;
* ``[Match]`` of a file against a device's facts (``_iplink.device_facts``), with three
  answers: it matches, it does not, or it *may* (a condition the node's facts cannot settle,
  such as ``Host=`` or an ``OriginalName=`` of a renamed device). Keys a file type does not
  know are ignored as systemd ignores them; a file with no known condition is ignored;
* udev applies the **first** ``.link`` that matches (``99-default.link`` matches all) and
  networkd the **first** ``.network``; a drop-in ``NAME.d/*.conf`` extends that one file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import file_action

HEADER = "Managed by aiinfra.datapath.link_mtu; changes here are overwritten."
RAIL_HEADER = "Managed by aiinfra.datapath.rail_routing; changes here are overwritten."
RAIL_DROPIN = "90-aiinfra-rails.conf"
RAIL_OWNERS = re.compile(r"^# Rail routing of (\S+) ", re.M)
SEARCH_DIRS = ("/etc/systemd/network", "/run/systemd/network", "/usr/local/lib/systemd/network",
               "/usr/lib/systemd/network", "/lib/systemd/network")
OWN_DIR = "/etc/systemd/network"
DROPIN = "90-aiinfra-mtu.conf"
DEFAULT_LINK = "99-default.link"
OWN_LINK = re.compile(r"^10-aiinfra-(.+)\.link\Z")
DEFAULT_POLICIES = ("NamePolicy=keep kernel database onboard slot path",
                    "AlternativeNamesPolicy=database onboard slot path", "MACAddressPolicy=persistent")
# [Match] keys per file type -> the device fact they test (systemd 252, link-config-gperf.gperf
# and networkd-network-gperf.gperf); "cond" keys test the host, not the device: never settled here
LINK_KEYS = {"MACAddress": "mac_at_add", "PermanentMACAddress": "permaddr", "OriginalName": "original_name",
             "Path": "path", "Driver": "driver", "Type": "type", "Kind": "devkind", "Property": "property"}
NETWORK_KEYS = {"MACAddress": "mac", "PermanentMACAddress": "permaddr", "Name": "name", "Path": "path",
                "Driver": "driver", "Type": "type", "Kind": "devkind", "Property": "property",
                "WLANInterfaceType": "wlan", "SSID": "wlan", "BSSID": "wlan"}
CONDITION_KEYS = ("Host", "Virtualization", "KernelCommandLine", "KernelVersion", "Credential",
                  "Architecture", "Firmware")
MAC_KEYS = ("MACAddress", "PermanentMACAddress", "BSSID")
GLOB = re.compile(r"[*?\[]")


class Backend(object):
    """A persistence backend: ``plan(targets, others)`` -> (actions, notes)."""

    name = None
    label = None

    def __init__(self, host, runner):
        self.host = host
        self.runner = runner

    def plan(self, targets, others=()):
        """Return (actions, notes) for ``targets`` (device facts plus ``mtu``); ``others`` are
        the node's other devices, which no file written here may reach."""
        raise NotImplementedError

    def plan_routing(self, targets, others=()):
        """Return (actions, notes) persisting the rail tables and rules of ``targets`` (device facts
        plus ``rails``: [{fabric, rail, name, address, subnet, routes, table, priority}]); rail_routing."""
        return [], ["%s cannot persist rail routing" % (self.label or self.name)]

    def _file_change(self, path, content, mode=0o644):
        before = self.host.read_raw(path)
        if before == content:
            return None
        return file_action(path, before, content, mode=mode)


# -- reading ---------------------------------------------------------------------------
def parse_unit(text):
    """``{section: [(key, value), ...]}`` of a systemd unit-style file (continuations joined)."""
    sections, section, pending = {}, None, ""
    for raw in (text or "").splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            sections.setdefault(section, [])
        elif section is not None and "=" in line:
            key, value = line.split("=", 1)
            sections[section].append((key.strip(), value.strip()))
    return sections


def _masked(host, path):
    full = host.path(path)
    return os.path.islink(full) and os.readlink(full) == "/dev/null"


def unit_files(host, suffix):
    """Effective files ending in ``suffix``: [(name, path)] in the order systemd applies them."""
    chosen = {}
    for directory in SEARCH_DIRS:
        for name in host.listdir(directory):
            if name.endswith(suffix) and name not in chosen:
                chosen[name] = os.path.join(directory, name)
    return [(name, chosen[name]) for name in sorted(chosen) if not _masked(host, chosen[name])]


def dropins(host, name):
    """Effective drop-ins ``NAME.d/*.conf`` of unit file ``name`` in the order they apply."""
    chosen = {}
    for directory in SEARCH_DIRS:
        for conf in host.listdir(os.path.join(directory, name + ".d")):
            if conf.endswith(".conf") and conf not in chosen:
                chosen[conf] = os.path.join(directory, name + ".d", conf)
    return [chosen[c] for c in sorted(chosen) if not _masked(host, chosen[c])]


def match_conditions(text, keys):
    """``{key: [patterns]}`` of the known [Match] keys (an empty assignment resets a list)."""
    match = {}
    for key, value in parse_unit(text).get("Match", []):
        if key not in keys and key not in CONDITION_KEYS:
            continue                         # systemd: "Unknown key ..., ignoring"
        if key in CONDITION_KEYS:
            match.setdefault(key, []).append(value)
        elif not value:
            match.pop(key, None)
        else:
            match.setdefault(key, []).extend(value.split())
    return match


# -- matching --------------------------------------------------------------------------
def _all(results):
    """Three-valued AND: False wins, then None (may), else True."""
    results = list(results)
    if any(r is False for r in results):
        return False
    return None if any(r is None for r in results) else True


def _any(results):
    results = list(results)
    if any(r is True for r in results):
        return True
    return None if any(r is None for r in results) else False


def test_patterns(patterns, test):
    """systemd's net_condition_test_strv with a three-valued ``test(pattern)``: any negated
    pattern that matches fails it; else a positive one must match (when there is one)."""
    negative = [test(p[1:]) for p in patterns if p.startswith("!")]
    positive = [test(p) for p in patterns if not p.startswith("!")]
    if any(r is True for r in negative):
        return False
    result = _any(positive) if positive else True
    if result is False:
        return False
    return None if (result is None or any(r is None for r in negative)) else True


def _glob_test(value):
    def test(pattern):
        return value is not None and fnmatch.fnmatchcase(value, pattern)
    return test


def normal_mac(text):
    digits = re.sub(r"[:.\-]", "", (text or "").lower())
    return digits if re.match(r"^[0-9a-f]{12}\Z", digits) else None


def _key_result(key, fact, patterns, facts):
    if key in CONDITION_KEYS:
        return None                          # host conditions: not settled from the device's facts
    if fact == "wlan":
        return None if facts.get("type") == "wlan" else test_patterns(patterns, lambda p: False)
    if fact == "property":
        return _property(patterns, facts)
    if fact == "mac_at_add":                 # udev sees the MAC a device is born with: a NIC's own;
        if not facts.get("bus"):             # a virtual device's is random until .link sets one
            return None
        fact = "permaddr"
    if fact == "name":
        values = [facts["name"]] + list(facts.get("altnames") or [])
        return _any(test_patterns(patterns, _glob_test(v)) for v in values)
    if fact == "original_name" and "original_name" not in facts:
        if not facts.get("renamed"):
            return None
        # renamed: the kernel's name is unknown, but it is not the name the device has now

        def renamed(pattern):
            return False if (not GLOB.search(pattern) and pattern == facts["name"]) else None
        return test_patterns(patterns, renamed)
    if fact not in facts:
        return None
    if key in MAC_KEYS:
        wanted = set(normal_mac(p) for p in patterns)
        value = normal_mac(facts[fact])
        return value is not None and value in wanted
    return test_patterns(patterns, _glob_test(facts[fact]))


def _property(patterns, facts):
    results = []
    for pattern in patterns:
        invert = pattern.startswith("!")
        key, sep, value = pattern.lstrip("!").partition("=")
        if not sep or key != "ID_BUS" or "id_bus" not in facts or '"' in pattern:
            results.append(None)
            continue
        hit = facts["id_bus"] is not None and fnmatch.fnmatchcase(facts["id_bus"], value)
        results.append(not hit if invert else hit)
    return _all(results)


def match_file(text, keys, facts):
    """Does the file's [Match] select the device? True, False or None (may)."""
    match = match_conditions(text, keys)
    if not match:
        return False                         # "No valid settings found in the [Match] section"
    return _all(_key_result(key, keys.get(key), patterns, facts) for key, patterns in match.items())


def chain(host, files, keys, facts, stop=None):
    """The files that may apply to a device, in order: every 'may' up to the first sure match.

    ``stop`` is a file name at which the walk ends (``99-default.link``); returns
    ``(paths_with_answers, reached_stop)``."""
    found = []
    for name, path in files:
        if name == stop:
            return found, True
        answer = match_file(host.read_raw(path), keys, facts)
        if answer is False:
            continue
        found.append((path, answer))
        if answer:
            return found, False
    return found, False


def sets_mtu(host, path):
    """The MTUBytes= a .network (or its drop-ins other than ours) sets in [Link], or None."""
    value = None
    for source in [path] + dropins(host, os.path.basename(path)):
        if os.path.basename(source) == DROPIN and source.startswith(OWN_DIR + "/"):
            continue
        for key, val in parse_unit(host.read_raw(source)).get("Link", []):
            if key == "MTUBytes":
                value = val or None
    return value


# -- writing ---------------------------------------------------------------------------
OWNERS = re.compile(r"^# MTU of ([^(;]+)", re.M)


def _names(group):
    return ", ".join(t["name"] for t in group)


def _settles(facts, path, host, keys):
    """The [Match] keys of ``path`` that cannot be settled for ``facts`` (for notes)."""
    match = match_conditions(host.read_raw(path), keys)
    return sorted(k for k, patterns in match.items() if _key_result(k, keys.get(k), patterns, facts) is None)


class NetworkdBackend(Backend):
    """A drop-in for the ``.network`` that networkd applies to the interface, else the ``.link``
    route: a drop-in for the admin's ``.link`` that udev applies to it, else our own ``.link``."""

    name = "networkd"
    label = "systemd-networkd"
    link_pattern = OWN_DIR + "/10-aiinfra-%s.link"

    def dropin_path(self, path):
        return "%s/%s.d/%s" % (OWN_DIR, os.path.basename(path), DROPIN)

    def _dropin(self, path, group, what):
        content = "# %s\n# MTU of %s (%s %s).\n[Link]\nMTUBytes=%d\n" % (
            HEADER, _names(group), what, path, group[0]["mtu"])
        return self.dropin_path(path), content

    def _shared(self, by_file, chains, others):
        """{target name: why} for files that would also reach other devices or mix MTUs."""
        blocked = {}
        for path, group in by_file.items():
            reach = sorted(o["name"] for o in others if path in chains.get(o["name"], ()))
            if len(set(t["mtu"] for t in group)) > 1:
                why = "%s matches %s, which get different MTUs" % (path, _names(group))
            elif reach:
                why = "%s also matches %s, which this run does not set" % (path, ", ".join(reach))
            else:
                continue
            for target in group:
                blocked.setdefault(target["name"], why)
        return blocked

    def plan(self, targets, others=()):
        files = unit_files(self.host, ".network")
        chains = dict((d["name"], [p for p, a in chain(self.host, files, NETWORK_KEYS, d)[0]])
                      for d in list(targets) + list(others))
        by_file, notes, link_targets = {}, [], []
        for target in targets:
            for path in chains[target["name"]]:
                by_file.setdefault(path, []).append(target)
        blocked = self._shared(by_file, chains, others)
        for target in targets:
            name = target["name"]
            if not chains[name]:
                link_targets.append(target)
            elif name in blocked:
                fixed = [(p, sets_mtu(self.host, p)) for p in chains[name] if sets_mtu(self.host, p)]
                if fixed:
                    notes.append("%s: %s, and it sets MTUBytes=%s itself; MTU not persisted (give %s a .network "
                                 "of its own)" % (name, blocked[name], fixed[0][1], name))
                else:
                    notes.append("%s: %s; MTU persisted by a .link file instead (the .network sets no MTU)"
                                 % (name, blocked[name]))
                    link_targets.append(target)
        changes, planned = [], set()
        for path in sorted(by_file):
            group = [t for t in by_file[path] if t["name"] not in blocked]
            if not group:
                continue
            for target in group:
                unsettled = _settles(target, path, self.host, NETWORK_KEYS)
                if unsettled:
                    notes.append("%s: %s may configure it (%s= cannot be checked here); its drop-in sets the MTU "
                                 "only if it does" % (target["name"], path, "=, ".join(unsettled)))
            dropin, content = self._dropin(path, group, "first matching .network:")
            planned.add(dropin)
            changes.append(self._file_change(dropin, content))
        link_changes, link_notes, link_planned = self.plan_links(link_targets, others)
        planned |= link_planned
        changes = [c for c in changes if c] + link_changes
        changes += self.cleanup([t["name"] for t in targets], planned)
        return changes, notes + link_notes

    def plan_routing(self, targets, others=()):
        """networkd: a drop-in ``NAME.network.d/90-aiinfra-rails.conf`` for the .network networkd applies
        to the rail's interface, when that .network matches this interface alone."""
        files = unit_files(self.host, ".network")
        devices = list(targets) + list(others)
        chains = dict((d["name"], chain(self.host, files, NETWORK_KEYS, d)[0]) for d in devices)
        changes, notes, planned = [], [], set()
        for target in targets:
            name = target["name"]
            found = chains[name]
            if not found:
                notes.append("%s: no .network of systemd-networkd configures it; its rail table and rule are not "
                             "persisted (give it a .network, which sets its address too)" % name)
                continue
            path, answer = found[0]
            if answer is not True:
                notes.append("%s: %s may configure it (%s= cannot be checked here); rail routing not persisted"
                             % (name, path, "=, ".join(_settles(target, path, self.host, NETWORK_KEYS))))
                continue
            reach = sorted(d["name"] for d in devices
                           if d["name"] != name and path in [p for p, a in chains[d["name"]]])
            if reach:
                notes.append("%s: %s also matches %s; rail routing not persisted (a table and rule in it would apply "
                             "to every interface it matches: give %s a .network of its own)" % (
                                 name, path, ", ".join(reach), name))
                continue
            dropin = "%s/%s.d/%s" % (OWN_DIR, os.path.basename(path), RAIL_DROPIN)
            planned.add(dropin)
            change = self._file_change(dropin, rail_dropin(target, path))
            if change:
                changes.append(change)
        for entry in self.host.listdir(OWN_DIR):
            path = "%s/%s/%s" % (OWN_DIR, entry, RAIL_DROPIN)
            if not entry.endswith(".d") or path in planned:
                continue
            before = self.host.read_raw(path)
            if before and RAIL_HEADER in before:
                changes.append(file_action(path, before, None))
        return changes, notes

    # -- the .link route ------------------------------------------------------------------
    def default_link_lines(self, files):
        """[Link] lines of the node's effective 99-default.link and its drop-ins (else systemd's)."""
        path = dict(files).get(DEFAULT_LINK)
        if not path:
            return list(DEFAULT_POLICIES)
        lines = []
        for source in [path] + dropins(self.host, DEFAULT_LINK):
            lines.extend("%s=%s" % kv for kv in parse_unit(self.host.read_raw(source)).get("Link", [])
                         if kv[0] != "MTUBytes")
        return lines or list(DEFAULT_POLICIES)

    def own_link(self, target, files):
        match = "Path=%s" % target["path"] if target.get("path") else "OriginalName=%s" % target["name"]
        return ("# %s\n# MTU of %s; applied by udev when the device appears. udev applies one .link per device,\n"
                "# so this one repeats the [Link] settings of 99-default.link, whose place it takes for %s.\n"
                "[Match]\n%s\n\n[Link]\n%s\nMTUBytes=%d\n"
                % (HEADER, target["name"], target["name"], match, "\n".join(self.default_link_lines(files)),
                   target["mtu"]))

    def plan_links(self, targets, others=()):
        """(actions, notes, planned paths) persisting ``targets`` through .link files."""
        if not targets:
            return [], [], set()
        files = [(n, p) for n, p in unit_files(self.host, ".link") if not OWN_LINK.match(n)]
        chains = dict((d["name"], chain(self.host, files, LINK_KEYS, d, stop=DEFAULT_LINK)[0])
                      for d in list(targets) + list(others))
        paths = dict((k, [p for p, a in v]) for k, v in chains.items())
        notes, own, by_file = [], [], {}
        for target in targets:
            found = chains[target["name"]]
            for path, answer in found:
                by_file.setdefault(path, []).append(target)
                if answer is None:
                    notes.append("%s: %s may apply to it (%s= cannot be checked here); MTU written as its drop-in "
                                 "too" % (target["name"], path, "=, ".join(_settles(target, path, self.host,
                                                                                    LINK_KEYS))))
            if found and found[-1][1] is True:
                continue
            own_name = os.path.basename(self.link_pattern % target["name"])
            hidden = [p for p, a in found if os.path.basename(p) > own_name]
            if hidden:
                notes.append("%s: %s may apply to it and sorts after %s, which would hide it; no .link of our own "
                             "written" % (target["name"], ", ".join(hidden), own_name))
            else:
                own.append(target)
        blocked = self._shared(by_file, paths, others)
        changes, planned = [], set()
        for name, why in sorted(blocked.items()):
            notes.append("%s: %s; MTU not persisted by .link: add MTUBytes= for it to a .link that matches it alone"
                         % (name, why))
        for path in sorted(by_file):
            group = by_file[path]
            if any(t["name"] in blocked for t in group):
                continue
            dropin, content = self._dropin(path, group, ".link udev applies:")
            planned.add(dropin)
            changes.append(self._file_change(dropin, content))
        for target in own:
            if target["name"] in blocked:
                continue
            path = self.link_pattern % target["name"]
            planned.add(path)
            changes.append(self._file_change(path, self.own_link(target, files)))
        return [c for c in changes if c], notes, planned

    def cleanup(self, names, planned):
        """Remove our own files for ``names`` that this plan no longer writes."""
        removals, names = [], set(names)
        for name in sorted(names):
            path = self.link_pattern % name
            before = self.host.read_raw(path)
            if path not in planned and before is not None and HEADER in before:
                removals.append(file_action(path, before, None))
        for entry in self.host.listdir(OWN_DIR):
            path = "%s/%s/%s" % (OWN_DIR, entry, DROPIN)
            if not entry.endswith(".d") or path in planned:
                continue
            before = self.host.read_raw(path)
            owners = OWNERS.search(before or "")
            if before and HEADER in before and owners:
                if set(n.strip() for n in owners.group(1).split(",")) <= names:
                    removals.append(file_action(path, before, None))
        return removals


# -- rail routing (rail_routing) ------------------------------------------------------------
def rail_lines(rail):
    """The [RoutingPolicyRule] and [Route] sections of one rail (systemd.network(5), networkd 252)."""
    host = 32 if ":" not in rail["address"] else 128
    out = ["[RoutingPolicyRule]", "From=%s/%d" % (rail["address"], host), "Table=%d" % rail["table"],
           "Priority=%d" % rail["priority"], "", "[Route]", "Destination=%s" % rail["subnet"], "Scope=link",
           "Table=%d" % rail["table"]]
    for route in rail.get("routes") or []:
        out += ["", "[Route]", "Destination=%s" % route["to"], "Gateway=%s" % route["via"], "Table=%d" % rail["table"]]
    return out


def rail_dropin(target, path):
    rails = target["rails"]
    what = ", ".join("%s %s" % (r["fabric"], r["name"]) for r in rails)
    lines = ["# %s" % RAIL_HEADER,
             "# Rail routing of %s (%s; first matching .network: %s)." % (target["name"], what, path)]
    for rail in rails:
        lines += [""] + rail_lines(rail)
    return "\n".join(lines) + "\n"
