# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The TuneD backend (stdlib only; the ``tuned_profile`` module, docs/pull.md "TuneD backend").

With ``datapath_backend: tuned`` the node's boot-time sysctls, THP and kernel arguments live in one
TuneD profile instead of the sysctl.d, tmpfiles.d and grub.d files: ``/etc/tuned/NAME/tuned.conf``
with ``[sysctl]``, ``[vm]`` and ``[bootloader]``, including the site's base profile (the one active
before ours) so that nothing the site tuned is lost. The other capabilities still set the live
values (and verify them) in the same run; they only leave persistence to TuneD.

A ``minimum`` key takes the base profile's value where that is higher (element-wise): our profile
overrides the base one key by key, and must not lower what the site raised.

Activation (TuneD 2.20, tests/interop/test_sys_tuned.py): ``tuned-adm profile NAME`` when the daemon
answers ``tuned-adm active`` with "Current active profile:" (without a daemon tuned-adm still exits 0,
and its ``profile`` only writes the files and tries ``service tuned restart``). Otherwise the module
writes ``/etc/tuned/active_profile`` and ``/etc/tuned/profile_mode`` (``manual``), which TuneD reads when
it starts; with ``daemon = 0`` in tuned-main.conf it then runs ``tuned`` once, which applies the active
profile and exits. Kernel arguments take effect at the next boot (TuneD's bootloader plugin hands them
to the boot loader): ``reboot_required`` says so while the running kernel lacks them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import (
    Action,
    Capability,
    apply_file,
    file_action,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned import (
    ACTIVE_PROFILE,
    MAIN_CONF,
    SAFE_NAME,
    active_names,
    load,
    main_config,
    parse_profile,
)

PROFILE_MODE = "/etc/tuned/profile_mode"
DEFAULT_NAME = "aiinfra-datapath"
HEADER = (
    "# Managed by aiinfra.datapath.tuned_profile; changes here are overwritten.\n"
    "# The node plan's boot-time sysctls, THP and kernel arguments (datapath_backend: tuned).\n"
)
CMDLINE_OPTION = "cmdline_aiinfra_datapath"
SYSCTL_KEY = re.compile(r"^[a-z0-9_-]+(\.[A-Za-z0-9_*-]+){1,8}\Z")
THP_ENABLED = ("always", "madvise", "never")
THP_DEFRAG = ("always", "defer", "defer+madvise", "madvise", "never")


class TunedProfileError(CapabilityError):
    """A profile this module cannot render or activate."""


def _ints(text):
    """The integers of a value; TuneD's ``>N`` / ``<N`` modifiers (single values) count as ``N``."""
    try:
        return [int(field) for field in str(text).lstrip("<>").split()]
    except ValueError:
        return None


def at_least(ours, theirs):
    """The value of a ``minimum`` key: theirs where it is higher element-wise, else ours."""
    mine, base = _ints(ours), _ints(theirs)
    if mine is None or base is None or len(mine) != len(base):
        return ours
    return " ".join(str(max(mine[i], base[i])) for i in range(len(mine)))


def render(include, sysctl, thp, kernel_args):
    """The tuned.conf text. ``sysctl``: {key: value} (final values); ``thp``: {enabled, defrag}."""
    lines = [HEADER, "\n[main]\n", "summary=aiinfra.datapath node plan (sysctls, THP, kernel arguments)\n"]
    if include:
        lines.append("include=%s\n" % include)
    if sysctl:
        lines.append("\n[sysctl]\n")
        lines.extend("%s=%s\n" % (key, sysctl[key]) for key in sorted(sysctl))
    thp = thp or {}
    if thp.get("enabled") or thp.get("defrag"):
        lines.append("\n[vm]\n")
        if thp.get("enabled"):
            lines.append("transparent_hugepages=%s\n" % thp["enabled"])
        if thp.get("defrag"):
            lines.append("transparent_hugepage.defrag=%s\n" % thp["defrag"])
    if kernel_args:
        lines.append("\n[bootloader]\n%s=%s\n" % (CMDLINE_OPTION, " ".join(kernel_args)))
    return "".join(lines)


class TunedProfile(Capability):
    """One TuneD profile with the plan's boot-time kernel state, included over the site's base profile."""

    name = "tuned_profile"

    @classmethod
    def options(cls):
        return dict(
            name=dict(type="str", default=DEFAULT_NAME),
            include=dict(type="str"),
            sysctl=dict(type="dict", default={}),
            thp=dict(type="dict", default={}),
            kernel_args=dict(type="list", elements="str", default=[]),
            profile_dir=dict(type="path", default="/etc/tuned"),
            activate=dict(type="bool", default=True),
        )

    def validate(self):
        if not os.path.isabs(self.params["profile_dir"] or ""):
            raise TunedProfileError("profile_dir must be an absolute path, got %r" % (self.params["profile_dir"],))
        name = self.params["name"]
        if not SAFE_NAME.match(name or ""):
            raise TunedProfileError("name must be letters, digits, '.', '_' or '-', got %r" % name)
        include = self.params.get("include")
        names = [part.strip() for part in re.split(r"[,;]", include or "") if part.strip()]
        if include and not all(SAFE_NAME.match(part) for part in names):
            raise TunedProfileError("include must be profile names separated by ',', got %r" % include)
        self.keys = {}
        for key, entry in sorted((self.params["sysctl"] or {}).items()):
            entry = entry if isinstance(entry, dict) else {"value": entry}
            value = " ".join(str(entry.get("value", "")).split())
            if not SYSCTL_KEY.match(key) or not value:
                raise TunedProfileError("sysctl %s=%r cannot go into a TuneD profile" % (key, entry.get("value")))
            self.keys[key] = {"value": value, "mode": entry.get("mode") or "exact"}
        thp = self.params["thp"] or {}
        for option, allowed in (("enabled", THP_ENABLED), ("defrag", THP_DEFRAG)):
            if thp.get(option) is not None and thp[option] not in allowed:
                raise TunedProfileError("thp.%s must be one of %s, got %r" % (option, ", ".join(allowed), thp[option]))
        for arg in self.params["kernel_args"]:
            if not arg or any(c.isspace() for c in arg):
                raise TunedProfileError("kernel argument %r: one argument, no spaces" % arg)

    def _path(self):
        return "%s/%s/tuned.conf" % (self.params["profile_dir"].rstrip("/"), self.params["name"])

    def read(self):
        name = self.params["name"]
        active = active_names(self.root)
        current = self.root.read_raw(self._path())
        include = self.params.get("include")
        if include is None:  # the site's base: whatever was active before ours
            include = ",".join(p for p in active if p != name) or None
            if include is None and current is not None and active == [name]:
                include = self._included(current)  # ours is active: keep the base it includes
        elif include == "":
            include = None
        base = load(self.root, re.split(r"\s*[,;]\s*", include)) if include else None
        if include and base and base["missing"]:
            raise TunedProfileError("the base profile %s is not installed here (looked for %s in TuneD's "
                                    "profile_dirs); set include to an installed profile"
                                    % (", ".join(base["missing"]), include))
        tuned_adm = self.runner.which("tuned-adm")
        answers = False
        if tuned_adm and self.params["activate"]:
            # without a daemon tuned-adm still exits 0 ("Preset profile: ..."): only a daemon that
            # answers says "Current active profile:"
            rc, out, _err = self.runner.run([tuned_adm, "active"], check=False)
            answers = rc == 0 and out.startswith("Current active profile:")
        tuned = self.runner.which("tuned") if self.params["activate"] and not answers else None
        one_shot = bool(tuned) and main_config(self.root.read_raw(MAIN_CONF)).get("daemon", "1").strip() == "0"
        return {"file": current, "active": active, "include": include,
                "base": base, "tuned_adm": tuned_adm if answers else None, "tuned": tuned if one_shot else None,
                "mode": (self.root.read_raw(PROFILE_MODE) or "").strip(),
                "running": (self.root.read("/proc/cmdline", default="") or "").split()}

    def _included(self, text):
        try:
            sections = dict(parse_profile(text, self._path()))
        except ValueError:
            return None
        return (sections.get("main") or {}).get("include") or None

    def values(self, state):
        """The sysctl values the profile sets: the plan's, a ``minimum`` raised to the base profile's."""
        base = (state["base"] or {}).get("sysctl") or {}
        out, raised = {}, {}
        for key, entry in self.keys.items():
            value = entry["value"]
            theirs = base.get(key)
            if entry["mode"] == "minimum" and theirs is not None:
                kept = at_least(value, theirs["value"])
                if kept != value:
                    raised[key] = {"value": kept, "file": theirs["file"]}
                value = kept
            out[key] = value
        return out, raised

    def plan(self, state):
        values, self.raised = self.values(state)
        text = render(state["include"], values, self.params["thp"], self.params["kernel_args"])
        actions = []
        changed_file = state["file"] != text
        if changed_file:
            actions.append(file_action(self._path(), state["file"], text, mode=0o644))
        name = self.params["name"]
        if self.params["activate"]:
            if state["tuned_adm"]:
                if changed_file or state["active"] != [name]:
                    actions.append(Action("activate", name, "tuned-adm profile %s" % name,
                                          before=" ".join(state["active"]) or None, after=name,
                                          diff="TuneD active profile"))
            else:
                if state["active"] != [name]:
                    actions.append(file_action(ACTIVE_PROFILE, self.root.read_raw(ACTIVE_PROFILE), name + "\n",
                                               mode=0o644))
                if state["mode"] != "manual":
                    actions.append(file_action(PROFILE_MODE, self.root.read_raw(PROFILE_MODE), "manual\n",
                                               mode=0o644))
                if state["tuned"] and actions:
                    # daemon = 0: tuned applies the active profile once and exits (tuned.service's command)
                    actions.append(Action("apply", name, "tuned (one-shot, daemon = 0) applies %s" % name,
                                          before=None, after=name, diff=False))
        self.missing = [arg for arg in self.params["kernel_args"] if arg not in state["running"]]
        return actions

    def apply(self, state, actions):
        for action in actions:
            if action.kind == "file":
                apply_file(self.root, action)
            elif action.kind == "apply":
                try:
                    self.runner.run([state["tuned"]], record=True)
                except CommandError as exc:
                    raise TunedProfileError("tuned (one-shot) could not apply %s: %s (the profile is active for "
                                            "TuneD's next start)" % (action.target, exc), profile_file=self._path())
            elif action.kind == "activate":
                try:
                    self.runner.run([state["tuned_adm"], "profile", action.target], record=True)
                except CommandError as exc:
                    raise TunedProfileError("tuned-adm could not activate %s: %s (the profile file is written)"
                                            % (action.target, exc), profile_file=self._path())

    def result(self, state, actions):
        how = "tuned-adm" if state["tuned_adm"] else "tuned one-shot" if state["tuned"] else "files"
        out = dict(profile=self.params["name"], profile_file=self._path(), include=state["include"],
                   active_before=state["active"], activated_with=how,
                   sysctl_raised=self.raised, missing_args=self.missing, reboot_required=bool(self.missing))
        if not self.params["activate"]:
            out["activated_with"] = None
        return out
