# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ebpf_readiness capability: is this node ready for an eBPF datapath (Cilium) with the features the
spec names? Read only, plus one opt-in write: the bpffs line of ``/etc/fstab`` (stdlib only;
docs/host-stack.md).

The requirements are Cilium's own (Documentation/operations/system_requirements.rst and
performance/tuning.rst of cilium/cilium): kernel >= 5.10 (4.18 on RHEL 8.10) with the eBPF options of
BASE_CONFIG; BPF host routing >= 5.10; IPv6 BIG TCP >= 5.19 and IPv4 BIG TCP >= 6.3 with a driver that
takes packets above 64 KiB (mlx4, mlx5, ice); netkit >= 6.8 with ``CONFIG_NETKIT=y``; native routing
needs policy routing (``CONFIG_FIB_RULES``). Cilium pins its maps in bpffs at ``/sys/fs/bpf``: not
mounted there, it mounts one inside its pod that goes with every restart of the agent (and the
datapath with it). Its own routing tables are 200 (IPsec), 202 (VTEP), 2004 and 2005 (L7 proxy)
(pkg/datapath/linux/linux_defaults). The MTU Cilium gives pods follows the device it uses (the
interface of the default route unless configured): below the fabric's MTU, jumbo frames never reach
the pods.

Each check is a finding ``{check, feature, severity, message, fix}``; a feature is ready when no error
finding names it or the base. ``labels()`` turns that into node-feature-discovery labels
(``<prefix>/ebpf-ready``, ``<prefix>/ebpf-<feature>``), which ``nfd_labels`` publishes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gzip
import json
import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import (
    Action,
    Capability,
    apply_file,
    file_action,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import DEFAULT_LOCK_PATH
from ansible_collections.aiinfra.datapath.plugins.module_utils._fstab import fstab_entry, fstab_fields, replace_owned

FEATURES = ("native-routing", "bpf-host-routing", "big-tcp", "netkit")
BASE_KERNEL = (5, 10)
RHEL8_KERNEL = (4, 18)  # "or equivalent (e.g., 4.18 on RHEL 8.10)": RHEL 8 backports the eBPF of 5.10
BASE_CONFIG = ("BPF", "BPF_SYSCALL", "NET_CLS_BPF", "BPF_JIT", "NET_CLS_ACT", "NET_SCH_INGRESS", "CRYPTO_SHA1",
               "CRYPTO_USER_API_HASH", "CGROUPS", "CGROUP_BPF", "PERF_EVENTS", "SCHEDSTATS")
# feature -> (minimum kernel, kernel options: (name, accepted values)); big-tcp's kernel depends on the families
FEATURE_NEEDS = {
    "native-routing": (None, (("FIB_RULES", ("y",)),)),
    "bpf-host-routing": ((5, 10), ()),
    "big-tcp": (None, ()),
    "netkit": ((6, 8), (("NETKIT", ("y",)),)),
}
BIG_TCP_KERNEL = {"ipv4": (6, 3), "ipv6": (5, 19)}
GSO_LIMIT = 65536  # the largest GSO/TSO packet without BIG TCP
DATAPATH_TABLES = {"cilium": (200, 202, 2004, 2005)}
BPFFS = "/sys/fs/bpf"
FSTAB = "/etc/fstab"
BPFFS_OPTIONS = ["rw", "nosuid", "nodev", "noexec", "relatime", "mode=700"]
RT_TABLES = ("/etc/iproute2/rt_tables", "/usr/share/iproute2/rt_tables", "/usr/lib/iproute2/rt_tables")
CONTAINER_MARKS = ("/run/.containerenv", "/.dockerenv")


class EbpfError(CapabilityError):
    """A problem reading the node (not a finding: findings are data)."""


def kernel_version(release):
    """``"6.8.0-45-generic"`` -> ``(6, 8)``; None when it does not start with numbers."""
    match = re.match(r"^(\d+)\.(\d+)", release or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_kernel_config(text):
    """A kernel ``.config`` -> ``{NAME: value}`` without the ``CONFIG_`` prefix; ``# CONFIG_X is not set``
    is ``"n"``."""
    out = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        match = re.match(r"^CONFIG_([A-Za-z0-9_]+)=(.*)\Z", line)
        if match:
            out[match.group(1)] = match.group(2).strip('"')
            continue
        match = re.match(r"^# CONFIG_([A-Za-z0-9_]+) is not set\Z", line)
        if match:
            out[match.group(1)] = "n"
    return out


def parse_mountinfo(text):
    """``/proc/self/mountinfo`` -> ``[(mount point, fstype, source)]``."""
    out = []
    for line in (text or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and tail:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            out.append((point, tail[0], tail[1] if len(tail) > 1 else ""))
    return out


def table_names(texts):
    """rt_tables files -> ``{name: id}``."""
    names = {}
    for text in texts:
        for raw in (text or "").splitlines():
            fields = raw.split("#", 1)[0].split()
            if len(fields) >= 2 and fields[0].isdigit():
                names[fields[1]] = int(fields[0])
    return names


def used_tables(rules, routes, names):
    """``{table id: [what uses it]}`` from ``ip -j rule show`` and ``ip -j route show table all``."""
    used = {}

    def table_id(value):
        if isinstance(value, int):
            return value
        text = str(value or "")
        return int(text) if text.isdigit() else names.get(text)

    for rule in rules or []:
        if isinstance(rule, dict) and rule.get("table") is not None:
            number = table_id(rule["table"])
            if number is not None:
                used.setdefault(number, []).append("rule %s" % rule.get("priority", "?"))
    for route in routes or []:
        if isinstance(route, dict) and route.get("table") is not None:
            number = table_id(route["table"])
            if number is not None:
                entry = used.setdefault(number, [])
                if "routes" not in entry:
                    entry.append("routes")
    return used


def _json(runner, argv):
    rc, out, _err = runner.run(argv, check=False)
    if rc != 0:
        return None
    try:
        data = json.loads(out or "[]")
    except ValueError:
        return None
    return data if isinstance(data, list) else None


def finding(check, severity, message, fix, feature=None):
    return {"check": check, "feature": feature, "severity": severity, "message": message, "fix": fix}


def ready_features(features, findings):
    """``{feature: ready}``: no error finding names the feature or the base (feature None)."""
    base = any(f["severity"] == "error" and f["feature"] is None for f in findings)
    return dict((name, not base and not any(f["severity"] == "error" and f["feature"] == name for f in findings))
                for name in features)


def labels(prefix, datapath, features, findings):
    """The node-feature-discovery labels of a readiness result (values ``true`` / ``false``)."""
    ready = ready_features(features, findings)
    out = {"%s/ebpf-ready" % prefix: "true" if all(ready.values()) and not any(
        f["severity"] == "error" for f in findings) else "false"}
    out["%s/ebpf-datapath" % prefix] = datapath
    for name, value in sorted(ready.items()):
        out["%s/ebpf-%s" % (prefix, name)] = "true" if value else "false"
    return out


class EbpfReadiness(Capability):
    """Kernel, bpffs, cgroup2, JIT, MTU and routing tables against the eBPF datapath the spec names."""

    name = "ebpf_readiness"
    read_only = True  # reads only; the opt-in bpffs line takes the node lock (lock_file) and returns its actions

    @classmethod
    def options(cls):
        return dict(
            datapath=dict(type="str", default="cilium", choices=sorted(DATAPATH_TABLES)),
            features=dict(type="list", elements="str", default=[], choices=list(FEATURES)),
            ip_families=dict(type="list", elements="str", default=["ipv4"], choices=["ipv4", "ipv6"]),
            device=dict(type="str"),
            fabric=dict(type="str"),
            fabric_mtu=dict(type="int"),
            interfaces=dict(type="list", elements="dict", default=[]),
            route_tables=dict(type="list", elements="int"),
            kernel_config=dict(type="path"),
            persist_bpffs=dict(type="bool", default=False),
            fstab=dict(type="path", default=FSTAB),
        )

    def lock_file(self):
        """The node lock only where the run may write (the opt-in bpffs line)."""
        return self.root.path(DEFAULT_LOCK_PATH) if self.params.get("persist_bpffs") else None

    # ------------------------------------------------------------------ read
    def read(self):
        host = self.root
        release = host.read("/proc/sys/kernel/osrelease") or ""
        config, config_file = None, self.params.get("kernel_config")
        candidates = [config_file] if config_file else ["/proc/config.gz", "/boot/config-%s" % release]
        for path in candidates:
            text = self._config_text(path)
            if text is not None:
                config, config_file = parse_kernel_config(text), path
                break
        jit = host.read("/proc/sys/net/core/bpf_jit_enable")
        mounts = parse_mountinfo(host.read_raw("/proc/self/mountinfo"))
        ip = self.runner.which("ip") or "ip"
        shown = _json(self.runner, [ip, "-j", "-d", "link", "show"]) or []
        links = dict((entry.get("ifname"), entry) for entry in shown if isinstance(entry, dict))
        default_dev = None
        for family in ("-4", "-6"):
            for route in _json(self.runner, [ip, family, "-j", "route", "show", "default"]) or []:
                if isinstance(route, dict) and route.get("dev") and default_dev is None:
                    default_dev = route["dev"]
        names = table_names([host.read_raw(p) for p in RT_TABLES]
                            + [host.read_raw("/etc/iproute2/rt_tables.d/" + f)
                               for f in host.listdir("/etc/iproute2/rt_tables.d") if f.endswith(".conf")])
        rules = (_json(self.runner, [ip, "-j", "rule", "show"]) or []) + \
            (_json(self.runner, [ip, "-6", "-j", "rule", "show"]) or [])
        routes = (_json(self.runner, [ip, "-j", "route", "show", "table", "all"]) or []) + \
            (_json(self.runner, [ip, "-6", "-j", "route", "show", "table", "all"]) or [])
        return {"release": release, "config": config, "config_file": config_file if config is not None else None,
                "candidates": candidates, "jit": jit, "mounts": mounts, "fstab": host.read_raw(self.params["fstab"]),
                "pid1": host.read("/proc/1/comm"), "container": any(host.exists(p) for p in CONTAINER_MARKS),
                "mount_unit": any(host.exists(d + "/sys-fs-bpf.mount") for d in (
                    "/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")),
                "links": links, "default_dev": default_dev, "tables": used_tables(rules, routes, names)}

    def _config_text(self, path):
        full = self.root.path(path)
        if not os.path.isfile(full):
            return None
        try:
            if path.endswith(".gz"):
                with gzip.open(full, "rt", encoding="utf-8", errors="replace") as handle:
                    return handle.read()
            with open(full, "r", encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except (IOError, OSError, EOFError) as exc:
            self.warn("%s: %s" % (path, exc))
            return None

    # ------------------------------------------------------------------ checks
    def evaluate(self, state):
        """The findings for the planned features (a pure function of the read state)."""
        p = self.params
        features = [f for f in FEATURES if f in (p.get("features") or [])]
        found = []
        version = kernel_version(state["release"])
        rhel8 = bool(re.search(r"\.el8", state["release"]))
        if version is None:
            found.append(finding("kernel", "warning", "kernel release %r cannot be read" % state["release"],
                                 "check /proc/sys/kernel/osrelease"))
        elif version < BASE_KERNEL and not (rhel8 and version >= RHEL8_KERNEL):
            found.append(finding("kernel", "error", "kernel %s is older than %d.%d, the oldest Cilium supports"
                                 % (state["release"], BASE_KERNEL[0], BASE_KERNEL[1]),
                                 "upgrade the kernel to 5.10 or later (4.18 on RHEL 8.10)"))
        for feature in features:
            need, _options = FEATURE_NEEDS[feature]
            if feature == "big-tcp":
                families = p.get("ip_families") or ["ipv4"]
                need = max(BIG_TCP_KERNEL[f] for f in families)
            if need and version is not None and version < need:
                found.append(finding("kernel", "error", "%s needs kernel %d.%d or later; this node runs %s"
                                     % (feature, need[0], need[1], state["release"]),
                                     "upgrade the kernel to %d.%d or later, or leave %s out of ebpf.features"
                                     % (need[0], need[1], feature), feature))
        found.extend(self._config_findings(state, features))
        jit = state["jit"]
        if jit is not None and jit.strip() == "0":
            found.append(finding("bpf_jit", "error", "net.core.bpf_jit_enable is 0: BPF programs run in the "
                                 "interpreter, several times slower on every packet",
                                 "set net.core.bpf_jit_enable = 1 (sysctl), or build with CONFIG_BPF_JIT_ALWAYS_ON"))
        found.extend(self._mount_findings(state))
        found.extend(self._device_findings(state, features))
        tables = p.get("route_tables")
        tables = tables if tables is not None else DATAPATH_TABLES[p["datapath"]]
        for table in sorted(set(tables)):
            users = state["tables"].get(table)
            if users:
                found.append(finding("route_tables", "error", "routing table %d is in use on the node (%s); %s uses "
                                     "table %d for its own routes" % (table, ", ".join(users), p["datapath"], table),
                                     "give the node's own policy routing (rails, VRFs) other table ids; %s's are %s"
                                     % (p["datapath"], ", ".join(str(t) for t in sorted(set(tables))))))
        return found

    def _config_findings(self, state, features):
        config = state["config"]
        if config is None:
            return [finding("kernel_config", "warning", "the kernel's configuration is not readable (%s)"
                            % ", ".join(state["candidates"]),
                            "load the configs module (modprobe configs: /proc/config.gz) or install the kernel's "
                            "config file under /boot, so that the options can be checked")]
        out = []
        missing = [name for name in BASE_CONFIG if config.get(name) not in ("y", "m")]
        if missing:
            out.append(finding("kernel_config", "error", "the kernel lacks %s (%s)" % (
                ", ".join("CONFIG_" + m for m in missing), state["config_file"]),
                "use a kernel built with them (=y or =m), as distribution kernels are"))
        for feature in features:
            for name, accepted in FEATURE_NEEDS[feature][1]:
                value = config.get(name)
                if value not in accepted:
                    out.append(finding("kernel_config", "error", "%s needs CONFIG_%s=%s; %s %s" % (
                        feature, name, "|".join(accepted), state["config_file"],
                        "does not have it" if value is None else "has CONFIG_%s=%s" % (name, value)),
                        "use a kernel built with CONFIG_%s=%s, or leave %s out of ebpf.features"
                        % (name, accepted[0], feature), feature))
        return out

    def _mount_findings(self, state):
        out = []
        bpf = [point for point, fstype, _source in state["mounts"] if fstype == "bpf"]
        self.bpffs_mounted = BPFFS in bpf
        if not self.bpffs_mounted:
            elsewhere = " (a bpffs is mounted at %s)" % ", ".join(bpf) if bpf else ""
            out.append(finding("bpffs", "error", "no bpffs is mounted at %s%s: Cilium then mounts one inside its pod, "
                               "and every restart of the agent loses its pinned maps and breaks connectivity"
                               % (BPFFS, elsewhere), "mount -t bpf bpffs /sys/fs/bpf, and persist it (persist_bpffs: "
                               "true writes the fstab line)"))
        self.bpffs_persisted = self._persisted(state)
        if not self.bpffs_persisted:
            out.append(finding("bpffs_persist", "warning", "nothing mounts bpffs at %s at boot (no fstab line, no "
                               "sys-fs-bpf.mount, PID 1 is %s)" % (BPFFS, state["pid1"] or "unknown"),
                               "set ebpf.persist_bpffs: true (an fstab line), or add a sys-fs-bpf.mount unit"))
        if not any(fstype == "cgroup2" for _point, fstype, _source in state["mounts"]):
            out.append(finding("cgroup2", "warning", "no cgroup2 (unified hierarchy) is mounted: Cilium's socket-level "
                               "load balancing attaches to it and mounts its own at /run/cilium/cgroupv2",
                               "boot with the unified cgroup hierarchy (systemd.unified_cgroup_hierarchy=1)"))
        return out

    def _persisted(self, state):
        if self.fstab_line(state["fstab"]) is not None or state["mount_unit"]:
            return True
        # systemd as PID 1 mounts bpffs at /sys/fs/bpf itself (src/shared/mount-setup.c), outside containers
        return state["pid1"] == "systemd" and not state["container"]

    @staticmethod
    def fstab_line(text):
        for raw in (text or "").splitlines():
            fields = fstab_fields(raw)
            if fields and len(fields) >= 3 and fields[1].rstrip("/") == BPFFS and fields[2] == "bpf":
                return raw
        return None

    def _device_findings(self, state, features):
        p = self.params
        device = p.get("device") or state["default_dev"]
        self.device = device
        out = []
        if device is None:
            return [finding("device", "warning", "no device to check: the node has no default route and the spec "
                            "names no ebpf.device", "set ebpf.device (the interface the datapath uses)")]
        link = state["links"].get(device)
        if link is None:
            return [finding("device", "error", "device %s is not on the node" % device,
                            "set ebpf.device to an interface of the node")]
        wanted, fabric = p.get("fabric_mtu"), p.get("fabric")
        for item in p.get("interfaces") or []:
            if isinstance(item, dict) and item.get("name") == device:
                fabric = fabric or item.get("fabric")
                wanted = wanted if wanted is not None else item.get("mtu")
        mtu = link.get("mtu")
        self.mtu = {"device": device, "mtu": mtu, "fabric": fabric, "fabric_mtu": wanted}
        if wanted is not None and mtu is not None and mtu < wanted:
            out.append(finding("mtu", "error", "device %s has MTU %d, below %s's MTU %d: %s takes the pods' MTU from "
                               "it, so they get %d and jumbo frames never reach them" % (
                                   device, mtu, "fabric " + fabric if fabric else "the fabric", wanted, p["datapath"],
                                   mtu), "set the MTU of %s to %d (link_mtu), or point the datapath at the fabric's "
                               "interface" % (device, wanted)))
        if "big-tcp" in features:
            tso = link.get("tso_max_size")
            if tso is None:
                out.append(finding("big_tcp", "warning", "device %s reports no tso_max_size (kernel before 5.19): BIG "
                                   "TCP support of its driver cannot be checked" % device,
                                   "upgrade the kernel; BIG TCP needs mlx4, mlx5 or ice", "big-tcp"))
            elif tso <= GSO_LIMIT:
                out.append(finding("big_tcp", "error", "device %s takes no packet above %d bytes (tso_max_size %d): "
                                   "its driver does not do BIG TCP" % (device, GSO_LIMIT, tso),
                                   "use a NIC whose driver supports BIG TCP (mlx4, mlx5, ice), or leave big-tcp out",
                                   "big-tcp"))
            gso = link.get("gso_ipv4_max_size", link.get("gso_max_size")) if "ipv4" in (p.get("ip_families") or []) \
                else link.get("gso_max_size")
            self.mtu["gso_max_size"] = gso
            if gso is not None and tso is not None and tso > GSO_LIMIT and gso <= GSO_LIMIT:
                out.append(finding("big_tcp", "info", "device %s: gso_max_size is %d; %s raises it to 192 KiB when BIG "
                                   "TCP is enabled" % (device, gso, p["datapath"]), "nothing to do", "big-tcp"))
        return out

    # ------------------------------------------------------------------ plan
    def plan(self, state):
        self.findings = self.evaluate(state)
        actions = []
        if not self.params["persist_bpffs"]:
            return actions
        fstab = self.params["fstab"]
        if self.fstab_line(state["fstab"]) is None:
            line = fstab_entry("bpffs", BPFFS, "bpf", BPFFS_OPTIONS)
            after = replace_owned(state["fstab"], line, lambda raw: False)
            actions.append(file_action(fstab, state["fstab"], after, "add the bpffs line to %s" % fstab))
        if not self.bpffs_mounted:
            actions.append(Action("command", BPFFS, "mount %s (its fstab line)" % BPFFS, before="not mounted",
                                  after="bpf", diff=False))
        return actions

    def apply(self, state, actions):
        for action in actions:
            if action.kind == "file":
                apply_file(self.root, action)
            elif action.kind == "command":
                mount = self.runner.which("mount") or "mount"
                argv = [mount, "-t", "bpf", "-o", ",".join(BPFFS_OPTIONS), "bpffs", self.root.path(BPFFS)]
                rc, out, err = self.runner.run(argv, check=False, record=True)
                if rc != 0:
                    raise EbpfError("ebpf_readiness: %s failed: %s (the fstab line is written; it mounts at the next "
                                    "boot)" % (" ".join(argv), (err or out).strip()), findings=self.findings)
        if any(a.kind == "command" for a in actions):
            self.bpffs_mounted = True
            self.findings = [f for f in self.findings if f["check"] != "bpffs"]
        if any(a.kind == "file" for a in actions):
            self.bpffs_persisted = True
            self.findings = [f for f in self.findings if f["check"] != "bpffs_persist"]

    def result(self, state, actions):
        features = [f for f in FEATURES if f in (self.params.get("features") or [])]
        ready = ready_features(features, self.findings)
        errors = [f for f in self.findings if f["severity"] == "error"]
        return dict(ready=not errors, features=ready, findings=self.findings, kernel=state["release"],
                    actions=[action.public() for action in actions],
                    kernel_config=state["config_file"], bpffs={"mounted": self.bpffs_mounted,
                                                               "persisted": self.bpffs_persisted},
                    device=getattr(self, "mtu", {"device": self.device}),
                    counts=dict((severity, len([f for f in self.findings if f["severity"] == severity]))
                                for severity in ("error", "warning", "info")),
                    reboot_required=False)
