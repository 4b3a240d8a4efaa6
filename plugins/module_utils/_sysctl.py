# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sysctl profile backend (stdlib only): read every key, plan, apply, verify, persist.

The backend answers the two questions of every module in this collection: *what is the
state now?* (``read``) and *what has to change?* (``plan``); ``apply`` executes the plan,
reads every written key back and rolls back this call's changes when the kernel rejects
or clamps a value.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re
import stat

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import (
    Action,
    Capability,
    apply_file,
    file_action,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._derived import (
    canonical_sysctl_name as canonical_name,
    sysctl_scope,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned import MAIN_CONF as TUNED_MAIN_CONF
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned import load as load_tuned
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned import sysctl_conflicts

DEFAULT_FILE = "/etc/sysctl.d/90-aiinfra-datapath.conf"

# systemd-sysctl(8) / sysctl.d(5): directories in priority order. A file name found in an
# earlier directory masks files of the same name in later ones; the surviving files are
# applied in lexical order of their names, so a later name overrides an earlier one.
SYSCTL_DIRS = (
    "/etc/sysctl.d",
    "/run/sysctl.d",
    "/usr/local/lib/sysctl.d",
    "/usr/lib/sysctl.d",
    "/lib/sysctl.d",
)
SYSCTL_CONF = "/etc/sysctl.conf"

MANAGED_HEADER = (
    "# Managed by aiinfra.datapath.{module}; changes here are overwritten.\n"
    "# Generated from the node plan; one key per line, applied by systemd-sysctl at boot.\n"
)


class SysctlError(CapabilityError):
    """A sysctl key the kernel refuses, or a profile that cannot be applied as asked."""


# One component of a key's path below /proc/sys (after the dotted name's '/' became '.'): no
# whitespace, '=' (sysctl.d's separator) or control character; '.' and '..' are refused apart.
_KEY_COMPONENT = re.compile(r"\A[^\s=/\x00-\x1f\x7f]{1,255}\Z")


def key_error(name):
    """Why ``name`` does not name a file below /proc/sys (None when it does): empty components,
    '.' or '..' (also written with slashes, ``net/../../etc``), whitespace, '=' or control characters."""
    canon = canonical_name(str(name))
    parts = [part.replace("/", ".") for part in canon.split(".")]
    if len(parts) < 2 or len(canon) > 512:
        return "%r is not a sysctl name (at least two components, at most 512 characters)" % (name,)
    for part in parts:
        if part in (".", "..") or not _KEY_COMPONENT.match(part):
            return ("%r does not name a file below /proc/sys (component %r: empty, '.', '..', whitespace, '=' "
                    "or a control character); refused" % (name, part))
    return None


def proc_path(name):
    """``net.ipv4.conf.eth0/100.rp_filter`` -> ``/proc/sys/net/ipv4/conf/eth0.100/rp_filter``.

    Raises SysctlError for a name that would resolve outside /proc/sys (:func:`key_error`): every
    read and write of a key goes through here."""
    why = key_error(name)
    if why:
        raise SysctlError("sysctl key %s" % why, key=str(name))
    parts = [part.replace("/", ".") for part in canonical_name(name).split(".")]
    return "/proc/sys/" + "/".join(parts)


def split_value(value):
    """Compare values by their fields: ``"4096\\t131072  16777216"`` -> ('4096', ...)."""
    return tuple(str(value).split())


def join_value(fields):
    return " ".join(fields)


def _as_ints(fields):
    try:
        return [int(field) for field in fields]
    except ValueError:
        return None


def effective_value(wanted, live, mode):
    """The value the key must hold: ``wanted`` (exact) or the field-wise max (minimum).

    ``minimum`` only raises: each field of the live value below the floor is raised to it,
    fields already higher stay as they are.
    """
    wanted_f = split_value(wanted)
    if mode == "exact" or live is None:
        return wanted_f
    live_f = split_value(live)
    floor = _as_ints(wanted_f)
    current = _as_ints(live_f)
    if current is None or len(current) != len(floor):
        # validated before; keep the wanted value so the caller can report it
        return wanted_f
    return tuple(str(max(current[i], floor[i])) for i in range(len(floor)))


def parse_conf(text):
    """Parse a sysctl.d file: ``[(name, value)]`` in order (``-`` prefix and comments dropped)."""
    entries = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        name, value = line.split("=", 1)
        entries.append((canonical_name(name), value.strip()))
    return entries


def render_conf(values, module="sysctl_profile"):
    """Render ``{name: value}`` as the managed file (sorted, one ``name = value`` a line)."""
    lines = [MANAGED_HEADER.format(module=module)]
    for name in sorted(values):
        lines.append("%s = %s\n" % (name, values[name]))
    return "".join(lines)


def boot_order(host, managed_file=None):
    """Return the node paths systemd-sysctl applies, in order (masked names resolved).

    ``managed_file`` is placed as if it existed already, so that a first run (file not
    written yet) still knows which files come after it.
    """
    chosen = {}
    for directory in SYSCTL_DIRS:
        entries = host.listdir(directory)
        if managed_file and os.path.dirname(managed_file) == directory:
            entries = sorted(set(entries) | set([os.path.basename(managed_file)]))
        for entry in entries:
            if not entry.endswith(".conf") or entry.startswith("."):
                continue
            if entry not in chosen:
                chosen[entry] = directory + "/" + entry
    ordered = [chosen[name] for name in sorted(chosen)]
    ordered.append(SYSCTL_CONF)
    return ordered


def boot_values(host, names):
    """What systemd-sysctl sets at the next boot for each of ``names``: ``{name: (value, file)}``,
    ``(None, None)`` where no file sets it. Files in ``boot_order``, the last assignment wins (a glob
    name counts for the keys it matches); a file linked to /dev/null masks, a file reached twice
    (99-sysctl.conf -> ../sysctl.conf) is read once."""
    found = dict((name, (None, None)) for name in names)
    seen = set()
    for path in boot_order(host):
        real = os.path.realpath(host.path(path))
        if real in seen or real == "/dev/null":
            continue
        seen.add(real)
        for name, value in parse_conf(host.read_raw(path)):
            for key in found:
                if name == key or ("*" in name and fnmatch.fnmatchcase(key, name)):
                    found[key] = (" ".join(split_value(value)), path)
    return found


def boot_values_with_tuned(host, names):
    """:func:`boot_values`, then the active TuneD profile on top: TuneD sets its ``[sysctl]`` values when it
    starts, after systemd-sysctl, and with ``reapply_sysctl = 1`` (the default) re-applies the sysctl.d
    files after them, so a key a sysctl.d file sets keeps that file's value. ``(value, file)`` per key."""
    found = boot_values(host, names)
    try:
        tuned = load_tuned(host)
    except (IOError, OSError):
        tuned = None
    if not tuned:
        return found
    for key in names:
        theirs = tuned["sysctl"].get(key)
        if theirs is None or (tuned["reapply_sysctl"] and found[key][1] is not None):
            continue
        found[key] = (" ".join(split_value(theirs["value"])), theirs["file"])
    return found


def _same_file(host, left, right):
    try:
        return os.path.samefile(host.path(left), host.path(right))
    except OSError:
        return False


def find_overrides(host, managed_file, values):
    """Files applied after ``managed_file`` at boot that set one of ``values`` differently.

    Returns ``[{key, file, value, wanted}]``. A file of the same name in a directory of
    higher priority masks ours completely: then every key is reported against it.
    """
    order = boot_order(host, managed_file)
    overrides = []
    base = os.path.basename(managed_file)
    masking = None
    position = None
    seen = set()
    for index, path in enumerate(order):
        if path == managed_file:
            position = index
            break
        if os.path.basename(path) == base:
            masking = path
    if masking is not None:
        for name in sorted(values):
            overrides.append({"key": name, "file": masking, "value": None,
                              "wanted": values[name], "reason": "masks the managed file"})
        return overrides
    later = order if position is None else order[position + 1:]
    for path in later:
        if path == managed_file or _same_file(host, path, managed_file):
            continue
        real = host.path(path)
        if os.path.realpath(real) in seen:
            # /etc/sysctl.d/99-sysctl.conf -> ../sysctl.conf: report it once
            continue
        seen.add(os.path.realpath(real))
        if os.path.realpath(real) == "/dev/null":
            continue
        for name, value in parse_conf(host.read_raw(path)):
            for key in sorted(values):
                if name == key or ("*" in name and fnmatch.fnmatchcase(key, name)):
                    if split_value(value) != split_value(values[key]):
                        overrides.append({"key": key, "file": path, "value": value,
                                          "wanted": values[key],
                                          "reason": "applied after the managed file at boot"})
    return overrides


def normalise_keys(raw_keys):
    """Accept ``{name: scalar}`` or ``{name: {value, mode, ignore_missing, scope}}``.

    Returns ``{canonical name: spec}``; raises SysctlError naming every bad entry.
    """
    keys = {}
    errors = []
    for name in sorted(raw_keys or {}):
        spec = raw_keys[name]
        canon = canonical_name(str(name))
        if (not canon or canon.startswith(".") or ".." in canon or " " in canon
                or any(ord(c) < 32 or ord(c) == 127 for c in canon)):
            errors.append("%s: not a valid sysctl name" % name)
            continue
        why = key_error(name)
        if why:
            errors.append("%s: not a valid sysctl name: %s" % (name, why))
            continue
        if not isinstance(spec, dict):
            spec = {"value": spec}
        unknown = set(spec) - set(("value", "mode", "ignore_missing", "scope"))
        if unknown:
            errors.append("%s: unknown option(s) %s (allowed: value, mode, ignore_missing, scope)"
                          % (name, ", ".join(sorted(unknown))))
            continue
        value = spec.get("value")
        if value is None or isinstance(value, (dict, list)) or str(value).strip() == "":
            errors.append("%s: value must be a non-empty string or number" % name)
            continue
        if isinstance(value, bool):
            value = int(value)
        mode = spec.get("mode") or "exact"
        if mode not in ("exact", "minimum"):
            errors.append("%s: mode must be exact or minimum, got %r" % (name, mode))
            continue
        if mode == "minimum" and _as_ints(split_value(value)) is None:
            errors.append("%s: mode minimum needs integer field(s), got %r" % (name, str(value)))
            continue
        scope = spec.get("scope")
        if scope is not None and scope not in ("netns", "global"):
            errors.append("%s: scope must be netns or global, got %r" % (name, scope))
            continue
        ignore = spec.get("ignore_missing", False)
        if not isinstance(ignore, bool):
            if str(ignore).lower() in ("true", "yes", "1"):
                ignore = True
            elif str(ignore).lower() in ("false", "no", "0"):
                ignore = False
            else:
                errors.append("%s: ignore_missing must be a boolean" % name)
                continue
        if canon in keys:
            errors.append("%s: given twice (as %s)" % (name, canon))
            continue
        keys[canon] = {
            "value": join_value(split_value(value)),
            "mode": mode,
            "ignore_missing": ignore,
            "scope": scope or sysctl_scope(canon),
        }
    if errors:
        raise SysctlError("invalid keys: " + "; ".join(errors), errors=errors)
    return keys


def read_key(host, name):
    """(state, value) of one key: ok, read_only (0444 in procfs), missing or unreadable."""
    path = host.path(proc_path(name))
    try:
        st = os.stat(path)
    except OSError:
        return "missing", None
    if not stat.S_ISREG(st.st_mode):
        return "missing", None
    try:
        # a value the kernel holds as bytes (kernel.hostname, core_pattern) may not be UTF-8
        with open(path, "r", encoding="utf-8", errors="surrogateescape") as handle:
            value = handle.read()
    except (IOError, OSError) as exc:
        return "unreadable", str(exc)
    # procfs shows 0444 for keys this namespace may not write (checked on the mode,
    # not with access(): root passes access() even where the kernel refuses writes)
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        return "read_only", join_value(split_value(value))
    return "ok", join_value(split_value(value))


def write_key(host, name, value):
    host.write(proc_path(name), value + "\n")


class SysctlProfile(Capability):
    """All keys of one profile in one call: read -> plan -> apply (verified) -> persist."""

    name = "sysctl_profile"
    owner = "sysctl_profile"  # the module named in the managed file's header (rail_routing reuses this class)

    @classmethod
    def options(cls):
        return dict(
            keys=dict(type="dict", required=True, no_log=False),
            file=dict(type="path", default=DEFAULT_FILE),
            persist=dict(type="bool", default=True),
            apply=dict(type="bool", default=True),
            on_override=dict(type="str", choices=["warn", "fail"], default="warn"),
        )

    def validate(self):
        if not self.params["file"].startswith("/"):
            raise SysctlError("file must be an absolute path, got %r" % self.params["file"])
        self.keys = normalise_keys(self.params["keys"])
        for name in sorted(self.keys):
            if self.keys[name]["scope"] != sysctl_scope(name):
                self.warn("%s: the plan says scope %s, this module classifies it as %s; reported as "
                          "given" % (name, self.keys[name]["scope"], sysctl_scope(name)))

    def read(self):
        try:
            tuned = load_tuned(self.root)
        except (IOError, OSError) as exc:
            tuned = None
            self.warn("the active TuneD profile could not be read: %s" % exc)
        return {"keys": dict((name, read_key(self.root, name)) for name in self.keys),
                "file": self.root.read_raw(self.params["file"]), "tuned": tuned}

    def plan(self, state):
        """Per-key report in ``self.report``; actions: the live writes, then the file."""
        problems = []
        report = {}
        actions = []
        for name in sorted(self.keys):
            spec = self.keys[name]
            status, live = state["keys"][name]
            entry = {"wanted": spec["value"], "mode": spec["mode"], "scope": spec["scope"],
                     "before": live if status in ("ok", "read_only") else None}
            if status != "ok":
                reason = {"missing": "does not exist on this kernel",
                          "read_only": "is read-only here (value %s)" % live,
                          "unreadable": "cannot be read (%s)" % live}[status]
                if spec["ignore_missing"]:
                    entry.update(after=entry["before"], action="skipped_" + status)
                    report[name] = entry
                    continue
                problems.append("%s %s" % (name, reason))
                continue
            if spec["mode"] == "minimum":
                floor = _as_ints(split_value(spec["value"]))
                current = _as_ints(split_value(live))
                if current is None or len(current) != len(floor):
                    problems.append("%s: minimum %r cannot be compared with the live value %r"
                                    % (name, spec["value"], live))
                    continue
            target = join_value(effective_value(spec["value"], live, spec["mode"]))
            entry["target"] = target
            if split_value(target) == split_value(live):
                entry.update(after=live, action="unchanged")
            elif self.params["apply"]:
                entry.update(after=target, action="set")
                actions.append(Action("sysctl", name, "set %s: %s -> %s" % (name, live, target),
                                      before=live, after=target, diff="live kernel values"))
            else:
                entry.update(after=live, action="persist_only")
            report[name] = entry
        if problems:
            raise SysctlError(
                "nothing was changed; fix or set ignore_missing for: " + "; ".join(problems),
                problems=problems)
        self.report = report
        values = dict((name, entry["target"]) for name, entry in report.items() if "target" in entry)
        if not self.params["persist"]:
            # another backend persists the keys (the TuneD profile): no file of ours may set them at boot
            self.overrides = []
            self.tuned = self._tuned_report(state.get("tuned"), values)
            if state["file"] is not None:
                actions.append(file_action(self.params["file"], state["file"], None,
                                           "remove %s (persist: false)" % self.params["file"]))
            return actions
        self.overrides = find_overrides(self.root, self.params["file"], values)
        if self.overrides and self.params["on_override"] == "fail":
            raise SysctlError(
                "nothing was changed; files applied after %s at boot override: %s"
                % (self.params["file"], "; ".join("%s=%s in %s" % (o["key"], o["value"], o["file"])
                                                  for o in self.overrides)),
                overrides=self.overrides, keys=report)
        for item in self.overrides:
            self.warn("%s: %s (%s) overrides the profile; the boot value will be %r, not %r"
                      % (item["key"], item["file"], item["reason"], item["value"], item["wanted"]))
        self.tuned = self._tuned_report(state.get("tuned"), values)
        content = render_conf(values, module=self.owner)
        if content != state["file"]:
            actions.append(file_action(self.params["file"], state["file"], content, mode=0o644))
        return actions

    def _tuned_report(self, tuned, values):
        """The active TuneD profile's sysctl values that differ from ours, and who ends with the key."""
        if not tuned:
            return None
        conflicts = sysctl_conflicts(tuned, values, lambda ours, theirs: split_value(ours) == split_value(theirs))
        for item in conflicts:
            if item["wins"] == "tuned":
                self.warn("%s: the active TuneD profile %s sets %s in %s, and with reapply_sysctl = 0 in %s "
                          "TuneD's value replaces %r whenever TuneD starts or reloads; remove it from the "
                          "profile or set reapply_sysctl = 1" % (item["key"], item["profile"], item["value"],
                                                                 item["file"], TUNED_MAIN_CONF, item["wanted"]))
        for text in tuned["errors"] + ["profile %s not found" % name for name in tuned["missing"]]:
            self.warn("TuneD: %s" % text)
        return {"profiles": tuned["profiles"], "files": tuned["files"], "reapply_sysctl": tuned["reapply_sysctl"],
                "conflicts": conflicts}

    def apply(self, state, actions):
        """Write, read back; on rejection or clamping roll back and raise SysctlError."""
        done = []
        for action in actions:
            if action.kind == "file":
                apply_file(self.root, action)
                continue
            name, before, target = action.target, action.before, action.after
            error = None
            try:
                write_key(self.root, name, target)
            except (IOError, OSError) as exc:
                error = "rejected by the kernel (%s)" % (exc.strerror or exc)
            actual = read_key(self.root, name)[1]
            if error is None and split_value(actual) != split_value(target):
                error = "clamped by the kernel"
            if error is None:
                done.append((name, before))
                continue
            # the failing key itself may hold a changed (clamped) value: restore it too
            undo = list(done)
            if actual is None or split_value(actual) != split_value(before):
                undo.append((name, before))
            rollback = self.rollback(undo)
            own = [r for r in rollback if r["key"] == name]
            if not own:
                outcome = "%s left unchanged at %r" % (name, before)
            elif own[0]["ok"]:
                outcome = "%s restored to %r" % (name, before)
            else:
                outcome = "%s could not be restored to %r" % (name, before)
            raise SysctlError(
                "%s: %s: wanted %r, kernel holds %r; %s; rolled back %d other key(s) changed in "
                "this run" % (name, error, target, actual, outcome,
                              len([r for r in rollback if r["ok"] and r["key"] != name])),
                key=name, wanted=target, actual=actual, rollback=rollback)

    def rollback(self, done):
        results = []
        for name, before in reversed(done):
            try:
                write_key(self.root, name, before)
                ok = split_value(read_key(self.root, name)[1]) == split_value(before)
                results.append({"key": name, "restored": before, "ok": ok})
            except (IOError, OSError) as exc:
                results.append({"key": name, "restored": before, "ok": False, "error": str(exc)})
        return results

    def result(self, state, actions):
        file_changed = any(a.kind == "file" for a in actions)
        return dict(keys=self.report, file=self.params["file"], file_changed=file_changed,
                    overrides=self.overrides, tuned=self.tuned)


def live_text(values):
    return "".join("%s = %s\n" % (name, values[name]) for name in sorted(values)
                   if values[name] is not None)
