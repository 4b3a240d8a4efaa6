# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's active TuneD profile, read as TuneD reads it (stdlib only), and what it sets that
the collection also manages.

TuneD (tuned/profiles/loader.py, locator.py, merger.py; tuned-main.conf):

* the active profile is ``/etc/tuned/active_profile``: one or more names, split on whitespace;
* a profile is ``DIR/NAME/tuned.conf`` in the ``profile_dirs`` of ``tuned-main.conf`` (TuneD 2.20,
  Debian bookworm's, has no such option and uses ``/usr/lib/tuned,/etc/tuned``; 2.23+ also
  ``…/profiles``); a later directory wins, and a
  profile may include a profile of the same name from an earlier one;
* ``[main] include=`` (split on ``,`` or ``;``) loads those profiles first; the including profile's
  sections then override theirs option by option (``replace=true`` replaces the whole section);
* a section's plugin is its ``type=``, else its name: ``[sysctl]`` (sysctl values), ``[vm]``
  (``transparent_hugepages``); values may be quoted; ``${…}`` is expanded by TuneD at runtime;
* a unit with ``uname_regex`` / ``cpuinfo_regex`` applies only where they match this machine
  (Debian's throughput-performance has ThunderX-only units);
* ``reapply_sysctl`` (default 1): after its own sysctl values TuneD re-applies ``/run/sysctl.d``,
  ``/etc/sysctl.d`` and ``/etc/sysctl.conf`` (not ``/usr/lib/sysctl.d``), so a key our sysctl.d file
  sets ends with our value;
  with ``reapply_sysctl = 0`` TuneD's value replaces ours each time TuneD starts or reloads. The
  vm plugin's THP setting has no such step: TuneD writes it after the boot's tmpfiles.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import configparser

ACTIVE_PROFILE = "/etc/tuned/active_profile"
MAIN_CONF = "/etc/tuned/tuned-main.conf"
DEFAULT_DIRS = ("/usr/lib/tuned", "/usr/lib/tuned/profiles", "/etc/tuned", "/etc/tuned/profiles")
SAFE_NAME = re.compile(r"^[a-zA-Z0-9_.-]+\Z")
# options of a section that configure the plugin instance, not values it sets
UNIT_OPTIONS = ("devices", "enabled", "priority", "devices_udev_regex", "script_pre", "script_post", "drop",
                "uname_regex", "cpuinfo_regex")


def _bool(text, default):
    value = (text or "").strip().lower()
    if value in ("1", "true", "yes", "y", "on"):
        return True
    if value in ("0", "false", "no", "n", "off"):
        return False
    return default


def unquote(value):
    value = (value or "").strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def main_config(text):
    """tuned-main.conf (``key = value`` lines, ``#`` comments) -> {key: value}."""
    found = {}
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            found[key.strip()] = value.strip()
    return found


def parse_profile(text, path):
    """One tuned.conf -> [(section, {option: value})] in file order (TuneD's ConfigParser settings)."""
    parser = configparser.ConfigParser(delimiters=("=",), inline_comment_prefixes=("#",), strict=False,
                                       interpolation=None)
    parser.optionxform = str
    try:
        parser.read_string(text, path)
    except configparser.Error as exc:
        error = "%s: %s" % (path, str(exc).splitlines()[0])
    else:
        return [(section, dict(parser.items(section, raw=True))) for section in parser.sections()]
    raise ValueError(error)


def active_names(host):
    """The names in /etc/tuned/active_profile (unsafe names dropped)."""
    return [name for name in (host.read_raw(ACTIVE_PROFILE) or "").split() if SAFE_NAME.match(name)]


def load(host, names=None):
    """The active profile of the node (or the profiles ``names``), merged as TuneD merges it; None
    when TuneD has none.

    ``{profiles, files, missing, errors, reapply_sysctl, sysctl: {key: {value, file}},
    vm: {option: {value, file}}}``."""
    names = active_names(host) if names is None else [name for name in names if SAFE_NAME.match(name)]
    if not names:
        return None
    main = main_config(host.read_raw(MAIN_CONF))
    dirs = [d.strip() for d in re.split(r"[,;]", main["profile_dirs"]) if d.strip()] \
        if main.get("profile_dirs") else list(DEFAULT_DIRS)
    out = {"profiles": names, "files": [], "missing": [], "errors": [],
           "reapply_sysctl": _bool(main.get("reapply_sysctl"), True), "sysctl": {}, "vm": {}}
    units = {}  # section -> {"type": plugin, "options": {option: (value, file)}}
    order = []

    def locate(name):
        for directory in reversed(dirs):
            path = "%s/%s/tuned.conf" % (directory.rstrip("/"), name)
            if path not in out["files"] and host.exists(path):
                return path
        return None

    def visit(name):
        path = locate(name)
        if path is None:
            out["missing"].append(name)
            return
        out["files"].append(path)
        try:
            sections = parse_profile(host.read_raw(path) or "", path)
        except ValueError as exc:
            out["errors"].append(str(exc))
            return
        for section, options in sections:
            if section == "main" and options.get("include"):
                include = options["include"]
                if "${" in include:
                    out["errors"].append("%s: include=%s is expanded by TuneD at runtime; not followed"
                                         % (path, include))
                    continue
                for child in re.split(r"\s*[,;]\s*", include.strip()):
                    if child:
                        visit(child)
        for section, options in sections:
            if section in ("main", "variables"):
                continue
            unit = units.get(section)
            if unit is None or _bool(options.get("replace"), False):
                unit = {"type": options.get("type", section), "options": {}}
                units[section] = unit
                if section not in order:
                    order.append(section)
            elif options.get("type"):
                unit["type"] = options["type"]
            for option, value in options.items():
                if option not in ("type", "replace"):
                    unit["options"][option] = (unquote(value), path)

    for name in names:
        visit(name)
    for section in order:
        unit = units[section]
        if not _bool(unit["options"].get("enabled", ("true", None))[0], True):
            continue
        if not _unit_matches(host, unit["options"]):
            continue  # TuneD's unit manager skips it on this machine (units/manager.py)
        target = {"sysctl": out["sysctl"], "vm": out["vm"]}.get(unit["type"])
        if target is None:
            continue
        for option, (value, path) in unit["options"].items():
            if option not in UNIT_OPTIONS:
                target[option] = {"value": value, "file": path}
    return out


def _unit_matches(host, options):
    """A unit's ``uname_regex`` / ``cpuinfo_regex`` against this machine, as TuneD's unit manager
    matches them (``re.search``, MULTILINE; uname is ``" ".join(os.uname())``)."""
    for option, text in (("uname_regex", lambda: " ".join(os.uname())),
                         ("cpuinfo_regex", lambda: host.read_raw("/proc/cpuinfo") or "")):
        pattern = options.get(option)
        if pattern is None:
            continue
        try:
            if re.search(pattern[0], text(), re.MULTILINE) is None:
                return False
        except re.error:
            return False
    return True


def sysctl_conflicts(tuned, wanted, same):
    """Keys we set that the profile sets otherwise: ``[{key, value, wanted, file, profile, wins}]``.

    ``wanted``: {key: value}; ``same(ours, theirs)``: whether two values are equal. A TuneD value
    with ``${…}`` (runtime expansion) or a ``>``/``<`` modifier is compared as written."""
    if not tuned:
        return []
    found = []
    for key in sorted(wanted):
        theirs = tuned["sysctl"].get(key)
        if theirs is None or same(wanted[key], theirs["value"]):
            continue
        found.append({"key": key, "value": theirs["value"], "wanted": wanted[key], "file": theirs["file"],
                      "profile": " ".join(tuned["profiles"]),
                      "wins": "sysctl.d" if tuned["reapply_sysctl"] else "tuned"})
    return found
