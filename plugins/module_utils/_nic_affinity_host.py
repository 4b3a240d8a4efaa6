# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``nic_affinity`` reads of the node's other CPU owners, and the files it installs (stdlib only).

* kubelet: ``reservedSystemCPUs`` and ``cpuManagerPolicy`` of its configuration file, YAML (the subset
  kubeadm and distributions write: top-level ``key: value`` lines) or JSON (EKS, OpenShift's
  ``kubelet.conf``); no YAML library on the node;
* TuneD: ``isolated_cores`` of the active profile's ``[variables]`` (``cpu-partitioning``, ``realtime``:
  the value sits in ``/etc/tuned/<profile>-variables.conf``), and the kernel's own view of isolated CPUs
  (``/sys/devices/system/cpu/isolated``, ``nohz_full``);
* irqbalance: the policy script that bans the planned NICs' IRQs from rebalancing (keyed by PCI
  device, so IRQ numbers that change at a driver reload need no new configuration) and the one line of
  its configuration file we own;
* the link-up unit: ``aiinfra-datapath-nic-affinity.service`` running the re-apply script.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity_apply import (
    STATE_FILE,
    parse_cpulist,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned import (
    DEFAULT_DIRS,
    MAIN_CONF,
    active_names,
    main_config,
    parse_profile,
    unquote,
)

KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
APPLY_SCRIPT = "/usr/local/libexec/aiinfra-datapath/nic-affinity-apply"
POLICY_SCRIPT = "/usr/local/libexec/aiinfra-datapath/irqbalance-policy"
UNIT_NAME = "aiinfra-datapath-nic-affinity.service"
UNIT_FILE = "/etc/systemd/system/" + UNIT_NAME
UNIT_LINK = "/etc/systemd/system/multi-user.target.wants/" + UNIT_NAME
IRQBALANCE_FILES = ("/etc/default/irqbalance", "/etc/sysconfig/irqbalance")
IRQBALANCE_MARK = "# aiinfra.datapath nic_affinity: irqbalance leaves the planned NICs' IRQs alone (docs/host-stack.md)"
SYSTEMD_RUNNING = "/run/systemd/system"  # sd_booted(): systemd is PID 1 and manages this boot
ISOLATED_FILES = ("/sys/devices/system/cpu/isolated", "/sys/devices/system/cpu/nohz_full")


# --------------------------------------------------------------------------- kubelet
_YAML_LINE = re.compile(r"^([A-Za-z0-9_.-]+)\s*:(?:\s+(.*))?\Z")


def _yaml_scalar(text):
    text = (text or "").strip()
    if text[:1] in ("'", '"'):
        quote = text[0]
        end = text.find(quote, 1)
        return text[1:end] if end > 0 else text[1:]
    return re.split(r"\s+#", text, maxsplit=1)[0].strip()


def parse_kubelet_config(text):
    """The top-level settings of a KubeletConfiguration file: ``{key: text}`` (JSON, or the YAML of
    ``key: value`` lines; nested blocks, lists and flow values other than scalars are skipped)."""
    stripped = (text or "").lstrip()
    if stripped.startswith("{"):
        data = json.loads(stripped)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return dict((str(k), v if isinstance(v, (dict, list)) else ("" if v is None else str(v)))
                    for k, v in data.items())
    out = {}
    for raw in (text or "").splitlines():
        if not raw.strip() or raw.lstrip().startswith("#") or raw[:1] in (" ", "\t", "-"):
            continue
        if raw.strip() in ("---", "..."):
            continue
        match = _YAML_LINE.match(raw.rstrip())
        if not match:
            continue
        value = match.group(2)
        if value is None or value.strip()[:1] in ("{", "[", "|", ">", "&", "*", "!"):
            out.setdefault(match.group(1), None)
            continue
        out[match.group(1)] = _yaml_scalar(value)
    return out


def kubelet_cpus(host, path):
    """``{file, found, policy, reserved: [cpus], reserved_text, error, note}`` of the kubelet config."""
    out = {"file": path, "found": False, "policy": None, "reserved": [], "reserved_text": None,
           "error": None, "note": None}
    text = host.read_raw(path) if path else None
    if text is None:
        return out
    out["found"] = True
    try:
        settings = parse_kubelet_config(text)
    except ValueError as exc:
        out["error"] = "%s: %s" % (path, exc)
        return out
    out["policy"] = settings.get("cpuManagerPolicy") or "none"
    reserved = settings.get("reservedSystemCPUs")
    if reserved not in (None, ""):
        out["reserved_text"] = reserved
        try:
            out["reserved"] = parse_cpulist(reserved)
        except ValueError:
            out["error"] = "%s: reservedSystemCPUs %r is not a CPU list" % (path, reserved)
    elif out["policy"] == "static" and (settings.get("kubeReserved") is not None
                                        or settings.get("systemReserved") is not None):
        out["note"] = ("kubelet's static CPU manager reserves CPUs by count (kubeReserved/systemReserved) and "
                       "chooses them itself; set reservedSystemCPUs so that the IRQs can keep off them")
    return out


# --------------------------------------------------------------------------- TuneD
def _variables_file(text):
    found = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        found[key.strip()] = unquote(value.strip())
    return found


def tuned_isolated(host):
    """``{profiles, isolated: [cpus], source, notes}``: ``isolated_cores`` of the active TuneD profile."""
    names = active_names(host)
    out = {"profiles": names, "isolated": [], "source": None, "notes": []}
    if not names:
        return out
    main = main_config(host.read_raw(MAIN_CONF))
    dirs = [d.strip() for d in re.split(r"[,;]", main["profile_dirs"]) if d.strip()] \
        if main.get("profile_dirs") else list(DEFAULT_DIRS)
    variables, seen = {}, set()

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        path = next(("%s/%s/tuned.conf" % (d.rstrip("/"), name) for d in reversed(dirs)
                     if host.exists("%s/%s/tuned.conf" % (d.rstrip("/"), name))), None)
        if path is None:
            return
        try:
            sections = parse_profile(host.read_raw(path) or "", path)
        except ValueError as exc:
            out["notes"].append("TuneD profile: %s" % exc)
            return
        for section, options in sections:
            if section == "main" and options.get("include") and "${" not in options["include"]:
                for child in re.split(r"\s*[,;]\s*", options["include"].strip()):
                    if child:
                        visit(child)
        for section, options in sections:
            if section != "variables":
                continue
            include = unquote(options.get("include", ""))
            if include.startswith("/") and "${" not in include:
                for key, value in _variables_file(host.read_raw(include)).items():
                    variables[key] = (value, include)
            for key, value in options.items():
                if key != "include":
                    value = unquote(value)
                    if value != "${%s}" % key:  # `isolated_cores = ${isolated_cores}` keeps the included one
                        variables[key] = (value, path)

    for name in names:
        visit(name)
    value, source = variables.get("isolated_cores", (None, None))
    if value is None:
        return out
    if "${" in value:
        out["notes"].append("TuneD: isolated_cores=%s in %s is computed by TuneD; not read" % (value, source))
        return out
    try:
        out["isolated"] = parse_cpulist(value)
        out["source"] = source
    except ValueError:
        out["notes"].append("TuneD: isolated_cores=%r in %s is not a CPU list" % (value, source))
    return out


def kernel_isolated(host):
    """CPUs the running kernel isolates (``isolcpus=``, ``nohz_full=``): ``{cpus, files}``."""
    cpus, files = set(), []
    for path in ISOLATED_FILES:
        text = host.read(path)
        if not text or text == "(null)":
            continue
        try:
            found = parse_cpulist(text)
        except ValueError:
            continue
        if found:
            cpus.update(found)
            files.append(path)
    return {"cpus": sorted(cpus), "files": files}


# --------------------------------------------------------------------------- irqbalance
def policy_script(pcis):
    """irqbalance's ``--policyscript``: ``ban=true`` for every IRQ of the planned PCI functions. irqbalance
    runs it once per IRQ with the device's sysfs path and the IRQ number (irqbalance(1))."""
    pattern = "|".join(sorted(pcis))
    return ("#!/bin/sh\n"
            "# Installed by aiinfra.datapath.nic_affinity; changes here are overwritten.\n"
            "# irqbalance runs this once per IRQ with the sysfs path of the IRQ's device and the IRQ number:\n"
            "# the IRQs of these NICs are placed by nic_affinity and its link-up unit, not by irqbalance.\n"
            "case \"${1##*/}\" in\n"
            "%s) echo ban=true ;;\n"
            "esac\n"
            "exit 0\n" % pattern)


def irqbalance_line():
    return 'IRQBALANCE_ARGS="--policyscript=%s"' % POLICY_SCRIPT


_ARGS = re.compile(r"^\s*(export\s+)?IRQBALANCE_ARGS\s*=")


def irqbalance_config(text, ban):
    """``(new text, problem)`` of irqbalance's environment file: our marked ``IRQBALANCE_ARGS`` line in
    place (``ban``) or gone (not ``ban``); every other line byte-identical. ``problem``: the admin sets
    IRQBALANCE_ARGS elsewhere (a line we do not own), so ours is not written."""
    lines = (text or "").splitlines(True)
    keep, ours_at, skip_next = [], None, False
    for raw in lines:
        if skip_next:
            skip_next = False
            if _ARGS.match(raw):
                continue
        if raw.rstrip("\r\n") == IRQBALANCE_MARK:
            ours_at = len(keep) if ours_at is None else ours_at
            skip_next = True
            continue
        keep.append(raw)
    theirs = [i + 1 for i, raw in enumerate(keep) if _ARGS.match(raw)]
    if ban and theirs:
        current = "".join(keep[i - 1] for i in theirs)
        if "--policyscript=%s" % POLICY_SCRIPT in current:
            return "".join(keep), None
        return text, ("IRQBALANCE_ARGS is set on a line of its own there (line %s); add --policyscript=%s to "
                      "it, or remove it so that nic_affinity can set it"
                      % (", ".join(str(i) for i in theirs), POLICY_SCRIPT))
    if ban:
        block = [IRQBALANCE_MARK + "\n", irqbalance_line() + "\n"]
        if keep and not keep[-1].endswith("\n"):
            keep[-1] += "\n"
        at = len(keep) if ours_at is None else ours_at
        keep[at:at] = block
    return "".join(keep), None


# --------------------------------------------------------------------------- the unit
def unit_text(python):
    """The link-up unit. A long-running service: it applies the saved plan when it starts (boot) and
    again for each planned link that comes up. Ordered before network-pre.target so that it listens
    before the network service brings links up; Type=simple counts as started once forked, so it
    delays nothing."""
    return """# Installed by aiinfra.datapath.nic_affinity; changes here are overwritten.
[Unit]
Description=Re-apply NIC IRQ affinity, queues, RPS and XPS when a link comes up (aiinfra.datapath)
Documentation=https://github.com/aiinfra/datapath/blob/main/docs/host-stack.md
After=systemd-udevd.service
Wants=network-pre.target
Before=network-pre.target
ConditionPathExists=%(state)s

[Service]
Type=simple
ExecStart=%(python)s %(script)s --watch %(state)s
Restart=on-failure
RestartSec=2

[Install]
WantedBy=multi-user.target
""" % {"python": python, "script": APPLY_SCRIPT, "state": STATE_FILE}
