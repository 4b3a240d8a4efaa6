# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roce_qos capability: RoCE lossless QoS on one node, desired state, paths, plan, apply.

Each interface's changes are actions of the capability contract: ``command`` actions run
``dcb`` or ``mlnx_qos`` (one setting each), ``sysfs`` actions write (or, for an rdma_cm group,
create) a sysfs/configfs node; with ``persist`` come the ``file`` actions of the boot-time
re-apply (``_roce_qos_boot``) and the ``link`` action that enables its unit. Every interface
action carries its *step*, plain data that the boot-time unit replays:
``{"op": "run", "argv": [...]}``, ``{"op": "write", "path": P, "value": V}`` and
``{"op": "mkdir", "path": P}`` (paths are node paths, resolved under ``HostRoot``).

Paths (NVIDIA MLNX_OFED/DOCA ECN page; kernel configfs-rdma_cm ABI):

* ``/sys/class/net/IF/ecn/roce_rp/enable/N`` and ``.../roce_np/enable/N`` (N = priority)
* ``/sys/class/net/IF/ecn/roce_np/cnp_dscp`` and ``.../roce_np/cnp_802p_prio``
* ``/sys/class/net/IF/device/infiniband/HCA`` -- the RDMA device behind the netdev
* ``CONFIGFS/rdma_cm/HCA/ports/N/default_roce_mode`` ("RoCE v2") and ``default_roce_tos``
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
from ansible_collections.aiinfra.datapath.plugins.module_utils._dcb import DcbBackend, DcbError
from ansible_collections.aiinfra.datapath.plugins.module_utils._derived import ROCE_MIN_LINK_MTU, roce_mtu
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import (
    describe_match,
    match_interfaces,
    parse_match,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._mlnx_qos import MlnxQosBackend, MlnxQosError
from ansible_collections.aiinfra.datapath.plugins.module_utils._roce_qos_boot import (
    APPLY_SCRIPT,
    APPLY_SCRIPT_TEXT,
    STATE_FILE,
    UNIT_FILE,
    UNIT_LINK,
    UNIT_TEXT,
    state_document,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError

NPRIO = 8
SYS_NET = "/sys/class/net"
ROCE_MODES = {"v2": "RoCE v2", "v1": "IB/RoCE v1"}
TSA_VALUES = ("strict", "ets", "vendor", "cbs")
SETTINGS_SECTION = "RoCE QoS settings"
SYSFS_SECTION = "sysfs and configfs"
LINK_SECTION = "systemd unit links"


class RoceQosError(CapabilityError):
    """A plan item the node cannot take, a failed read or apply, or a setting the device refused."""


def dscp_from_tos(tos):
    return int(tos) >> 2


def normalize(item, where):
    """Validate one ``qos`` item; return (want, errors). Only given settings are managed."""
    errors = []
    want = {"trust": item.get("trust"), "pfc": None, "dscp2prio": None, "ets": None, "ecn": None,
            "cnp": None, "roce_tos": item.get("roce_tos"), "roce_mode": item.get("roce_mode"),
            "roce_mtu": item.get("roce_mtu")}

    def prios(values, field):
        bad = [v for v in values if not 0 <= v < NPRIO]
        if bad:
            errors.append("%s.%s: priorities must be 0-7, got %s" % (where, field, bad))
        return [v in values for v in range(NPRIO)]

    if item.get("pfc_priorities") is not None:
        want["pfc"] = prios(item["pfc_priorities"], "pfc_priorities")
    if item.get("dscp2prio"):
        mapping = {}
        for key, prio in item["dscp2prio"].items():
            try:
                dscp, prio = int(key), int(prio)
            except (TypeError, ValueError, OverflowError):
                errors.append("%s.dscp2prio: %r: %r is not a number" % (where, key, prio))
                continue
            if not 0 <= dscp <= 63 or not 0 <= prio < NPRIO:
                errors.append("%s.dscp2prio: %s -> %s: DSCP must be 0-63 and priority 0-7"
                              % (where, key, prio))
            mapping[dscp] = prio
        want["dscp2prio"] = mapping
    ets = item.get("ets")
    if ets:
        prio_tc, tsa, bw = ets.get("prio_tc"), ets.get("tsa"), ets.get("bw")
        if not all(isinstance(x, list) and len(x) == NPRIO for x in (prio_tc, tsa, bw)):
            errors.append("%s.ets: prio_tc, tsa and bw need 8 values each" % where)
        else:
            tsa = [str(t).lower() for t in tsa]
            if any(not 0 <= t < NPRIO for t in prio_tc):
                errors.append("%s.ets.prio_tc: traffic classes must be 0-7" % where)
            if any(t not in TSA_VALUES for t in tsa):
                errors.append("%s.ets.tsa: each must be one of %s" % (where, ", ".join(TSA_VALUES)))
            if any(not 0 <= b <= 100 for b in bw):
                errors.append("%s.ets.bw: each must be 0-100" % where)
            elif "ets" in tsa and sum(bw[i] for i in range(NPRIO) if tsa[i] == "ets") != 100:
                errors.append("%s.ets.bw: bandwidths of the ets classes must sum to 100, got %d"
                              % (where, sum(bw[i] for i in range(NPRIO) if tsa[i] == "ets")))
            want["ets"] = {"prio_tc": list(prio_tc), "tsa": tsa, "bw": list(bw)}
    ecn = item.get("ecn")
    if ecn:
        want["ecn"] = {}
        for point in ("rp", "np"):
            if ecn.get(point) is not None:
                want["ecn"][point] = prios(ecn[point], "ecn.%s" % point)
    cnp = item.get("cnp")
    if cnp:
        if cnp.get("dscp") is not None and not 0 <= cnp["dscp"] <= 63:
            errors.append("%s.cnp.dscp: must be 0-63" % where)
        if cnp.get("priority") is not None and not 0 <= cnp["priority"] < NPRIO:
            errors.append("%s.cnp.priority: must be 0-7" % where)
        want["cnp"] = {"dscp": cnp.get("dscp"), "priority": cnp.get("priority")}
    if want["roce_tos"] is not None and not 0 <= want["roce_tos"] <= 255:
        errors.append("%s.roce_tos: must be 0-255" % where)
    return want, errors


def consistency_warnings(name, want):
    """Plans that apply cleanly but leave RoCE lossy or unmarked."""
    warnings = []
    tos = want.get("roce_tos")
    if tos is None:
        return warnings
    dscp = dscp_from_tos(tos)
    mapping = want.get("dscp2prio") or {}
    if want.get("dscp2prio") is not None and dscp not in mapping:
        warnings.append("%s: RoCE ToS %d carries DSCP %d, which dscp2prio does not map" % (name, tos, dscp))
    elif dscp in mapping and want.get("pfc") is not None and not want["pfc"][mapping[dscp]]:
        warnings.append("%s: RoCE ToS %d (DSCP %d) maps to priority %d, which has no PFC: RoCE is lossy"
                        % (name, tos, dscp, mapping[dscp]))
    return warnings


class RoceDevice(object):
    """Sysfs and configfs of one netdev and the RDMA device behind it."""

    def __init__(self, host, ifname, configfs_root="/sys/kernel/config"):
        self.host = host
        self.ifname = ifname
        self.configfs = configfs_root.rstrip("/") or "/"
        self.net = "%s/%s" % (SYS_NET, ifname)

    def exists(self):
        return self.host.exists(self.net)

    def has_device(self):
        return self.host.exists(self.net + "/device")

    def has_vendor_qos(self):
        return self.host.exists(self.net + "/qos")

    def rdma_device(self):
        hcas = self.host.listdir(self.net + "/device/infiniband")
        return hcas[0] if hcas else None

    def rdma_port(self, hca):
        ports = self.host.listdir("%s/device/infiniband/%s/ports" % (self.net, hca))
        if len(ports) == 1:
            return ports[0]
        dev_port = self.host.read(self.net + "/dev_port", "0")
        return str(int(dev_port) + 1) if re.match(r"^[0-9]{1,6}\Z", dev_port) else "1"

    def ecn_path(self, point, prio):
        return "%s/ecn/roce_%s/enable/%d" % (self.net, point, prio)

    def has_ecn(self):
        return self.host.exists(self.net + "/ecn")

    def cnp_paths(self):
        return {"dscp": self.net + "/ecn/roce_np/cnp_dscp",
                "priority": self.net + "/ecn/roce_np/cnp_802p_prio"}

    def rdma_cm_dir(self, hca):
        return "%s/rdma_cm/%s" % (self.configfs, hca)

    def rdma_cm_available(self):
        return self.host.exists("%s/rdma_cm" % self.configfs)


def sysfs_steps(dev, want, notes):
    """(before, after, actions, full) for ECN, CNP and rdma_cm.

    ``actions`` (``sysfs``) hold only what differs; ``full`` every step, for the boot-time replay.
    """
    host = dev.host
    before, after, actions, full = {}, {}, [], []

    def converge(key, path, value):
        current = host.read(path)
        before[key] = current
        after[key] = value
        step = {"op": "write", "path": path, "value": value}
        full.append(step)
        if current != value:
            actions.append(step_action(step, before=current, after=value))

    if want.get("ecn") or (want.get("cnp") and any(v is not None for v in want["cnp"].values())):
        if not dev.has_ecn():
            notes.append("ECN/CNP: %s/ecn is absent (inbox driver: the vendor driver's ECN sysfs is "
                         "missing); left to firmware defaults" % dev.net)
        else:
            for point, enabled in sorted((want.get("ecn") or {}).items()):
                for prio in range(NPRIO):
                    path = dev.ecn_path(point, prio)
                    if host.exists(path):
                        converge("ecn.%s.%d" % (point, prio), path, "1" if enabled[prio] else "0")
            for field, path in sorted(dev.cnp_paths().items()):
                value = (want.get("cnp") or {}).get(field)
                if value is not None:
                    if host.exists(path):
                        converge("cnp.%s" % field, path, str(value))
                    else:
                        notes.append("CNP %s: %s is absent; not set" % (field, path))
    if want.get("roce_tos") is not None or want.get("roce_mode"):
        hca = dev.rdma_device()
        if not hca:
            notes.append("roce_tos/roce_mode: no RDMA device behind %s (%s/device/infiniband is empty)"
                         % (dev.ifname, dev.net))
        elif not dev.rdma_cm_available():
            notes.append("roce_tos/roce_mode: %s/rdma_cm is absent (configfs not mounted or rdma_cm "
                         "not loaded); not set" % dev.configfs)
        else:
            port = dev.rdma_port(hca)
            group = dev.rdma_cm_dir(hca)
            full.append({"op": "mkdir", "path": group})
            if not host.exists(group):
                actions.append(step_action(full[-1], after="directory"))
            port_dir = "%s/ports/%s" % (group, port)
            if want.get("roce_mode"):
                converge("rdma_cm.%s.%s.default_roce_mode" % (hca, port), port_dir + "/default_roce_mode",
                         ROCE_MODES[want["roce_mode"]])
            if want.get("roce_tos") is not None:
                converge("rdma_cm.%s.%s.default_roce_tos" % (hca, port), port_dir + "/default_roce_tos",
                         str(want["roce_tos"]))
    return before, after, actions, full


_mkdir = os.mkdir  # configfs populates a group on mkdir; tests stand in for the kernel here


def run_step(step, host, runner):
    if step["op"] == "run":
        runner.run(step["argv"], record=True)
    elif step["op"] == "mkdir":
        path = host.path(step["path"])
        if not os.path.isdir(path):
            _mkdir(path)
    elif step["op"] == "write":
        host.write(step["path"], step["value"])
    else:
        raise ValueError("unknown step %r" % step)


def describe_step(step):
    if step["op"] == "run":
        return " ".join(step["argv"])
    if step["op"] == "mkdir":
        return "mkdir %s" % step["path"]
    return "write %s = %s" % (step["path"], step["value"])


def step_action(step, target=None, before=None, after=None, diff=None):
    """The action of one step: ``command`` for a run (``target`` the setting), else ``sysfs``."""
    if step["op"] == "run":
        return Action("command", target, describe_step(step), before=before, after=after,
                      diff=SETTINGS_SECTION if diff is None else diff, step=step)
    return Action("sysfs", step["path"], describe_step(step), before=before, after=after,
                  diff=(SYSFS_SECTION if step["op"] == "write" else False) if diff is None else diff, step=step)


def running_lldpad(host):
    """PIDs of a running lldpad (``/proc/PID/comm``), which would override host DCB settings."""
    pids = []
    for pid in host.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = host.read("/proc/%s/comm" % pid, "")
        except (IOError, OSError):
            # the process exited between the listing and the read (ESRCH, ENOENT), or is not
            # ours to read: it is not a running lldpad either way
            continue
        if comm == "lldpad":
            pids.append(int(pid))
    return sorted(pids)


def sysfs_links(host):
    links = {}
    for name in host.listdir(SYS_NET):
        links[name] = {"address": host.read("%s/%s/address" % (SYS_NET, name), "")}
    return links


def pick_backend(choice, dev, tools, runner):
    """(backend object, None) or (None, reason)."""
    if choice == "auto":
        if tools.get("mlnx_qos") and dev.has_vendor_qos():
            choice = "mlnx_qos"
        elif tools.get("dcb"):
            choice = "dcb"
        elif tools.get("mlnx_qos"):
            choice = "mlnx_qos"
        else:
            return None, "neither iproute2 dcb nor mlnx_qos is installed"
    if not tools.get(choice):
        return None, "%s is not installed" % choice
    cls = MlnxQosBackend if choice == "mlnx_qos" else DcbBackend
    return cls(runner, tools[choice]), None


def roce_mtu_note(name, link_mtu, wanted):
    """A note when the link MTU gives a smaller RoCE MTU than the plan expects (None: fine)."""
    have = roce_mtu(int(link_mtu))
    if have is None:
        return ("roce_mtu: MTU %s of %s is below %d, where the kernel has no RoCE at all, plan expects %d; "
                "set the link MTU first" % (link_mtu, name, ROCE_MIN_LINK_MTU, wanted))
    if have < wanted:
        return ("roce_mtu: MTU %s of %s gives RoCE MTU %s, plan expects %d; set the link MTU first"
                % (link_mtu, name, have, wanted))
    return None


class RoceQos(Capability):
    """Every planned RoCE interface in one call: read, change what differs, read back, persist."""

    name = "roce_qos"

    @classmethod
    def options(cls):
        match = dict(name=dict(type="str"), mac=dict(type="str"), pci=dict(type="str"), driver=dict(type="str"))
        return dict(
            interfaces=dict(type="list", elements="dict", required=True, options=dict(
                interface=dict(type="str"),
                match=dict(type="dict", options=match),
                fabric=dict(type="str"),
                trust=dict(type="str", choices=["dscp", "pcp"]),
                pfc_priorities=dict(type="list", elements="int"),
                dscp2prio=dict(type="dict"),
                ets=dict(type="dict", options=dict(prio_tc=dict(type="list", elements="int"),
                                                   tsa=dict(type="list", elements="str"),
                                                   bw=dict(type="list", elements="int"))),
                ecn=dict(type="dict", options=dict(rp=dict(type="list", elements="int"),
                                                   np=dict(type="list", elements="int"))),
                cnp=dict(type="dict", options=dict(dscp=dict(type="int"), priority=dict(type="int"))),
                roce_tos=dict(type="int"),
                roce_mode=dict(type="str", choices=["v2", "v1"]),
                roce_mtu=dict(type="int"),
            )),
            backend=dict(type="str", default="auto", choices=["auto", "dcb", "mlnx_qos"]),
            persist=dict(type="bool", default=True),
            configfs_root=dict(type="path", default="/sys/kernel/config"),
        )

    def read(self):
        return {"links": sysfs_links(self.root),
                "tools": {"dcb": self.runner.which("dcb"), "mlnx_qos": self.runner.which("mlnx_qos"),
                          "lldpad_pids": running_lldpad(self.root)}}

    def resolve(self, links):
        """[(interface, want)] of the items; raise with every problem before anything changes."""
        errors, resolved = [], []
        for index, item in enumerate(self.params["interfaces"]):
            where = "interfaces[%d]" % index
            match = parse_match({"name": item.get("interface"), "match": item.get("match")})
            if not match:
                errors.append("%s: give interface or match" % where)
                continue
            names = match_interfaces(links, self.root, match)
            if len(names) != 1:
                errors.append("%s: %s matches %s interfaces (%s); it must match exactly one"
                              % (where, describe_match(match), len(names), ", ".join(names) or "none present"))
                continue
            want, errs = normalize(item, where)
            errors.extend(errs)
            resolved.append((names[0], want))
        if len(set(n for n, w in resolved)) != len(resolved):
            errors.append("an interface appears more than once in interfaces")
        if errors:
            raise RoceQosError("roce_qos: %d problem(s), nothing changed: %s" % (len(errors), "; ".join(errors)),
                               errors=errors)
        return resolved

    def plan_interface(self, tools, name, want, notes, quiet=False):
        """Read one interface; return its result row, its actions and the full replay steps."""
        dev = RoceDevice(self.root, name, self.params["configfs_root"])
        row = {"interface": name, "supported": True, "reason": None, "backend": None, "rdma_device": None,
               "dcbx_owner": None, "before": {}, "after": {}, "actions": [], "notes": notes, "changed": False}
        if not dev.has_device():
            row.update(supported=False, reason="no /sys/class/net/%s/device: virtual interface without a "
                                               "NIC driver, DCB not supported" % name)
            return row, [], []
        backend, reason = pick_backend(self.params["backend"], dev, tools, self.runner)
        if backend is None:
            row.update(supported=False, reason=reason)
            return row, [], []
        row["backend"] = backend.name
        reason = backend.probe(name)
        if reason:
            row.update(supported=False, reason="%s: %s" % (backend.name, reason))
            return row, [], []
        have = backend.read(name)
        row["rdma_device"] = dev.rdma_device()
        bwant = dict(want)
        if want.get("trust") and have.get("apptrust_error"):
            notes.append("trust: dcb cannot set it here (%s); needs iproute2 >= 6.2 or mlnx_qos"
                         % have["apptrust_error"])
            bwant["trust"] = None
        if want.get("trust") == "pcp" and want.get("dscp2prio"):
            notes.append("dscp2prio is set but trust is pcp: the DSCP map has no effect")
        full = [{"op": "run", "argv": c} for c in backend.full_commands(name, bwant)]
        for key in ("trust", "pfc", "dscp2prio", "ets"):
            if bwant.get(key) is not None:
                value = have.get(key)
                if key == "dscp2prio":
                    value = dict((str(d), have.get(key, {}).get(d)) for d in sorted(bwant[key]))
                    row["after"][key] = dict((str(d), v) for d, v in sorted(bwant[key].items()))
                else:
                    row["after"][key] = bwant[key]
                row["before"][key] = value
        actions = []
        for argv in backend.commands(name, bwant, have):
            key = backend.setting(argv)
            actions.append(step_action({"op": "run", "argv": argv}, target="%s %s" % (name, key),
                                       before=row["before"].get(key), after=row["after"].get(key)))
        before, after, sys_actions, sys_full = sysfs_steps(dev, want, notes)
        row["before"].update(before)
        row["after"].update(after)
        self._dcbx_owner(row, have, tools, quiet)
        if want.get("roce_mtu"):
            mtu = self.root.read("%s/%s/mtu" % (SYS_NET, name), "")
            note = roce_mtu_note(name, mtu, want["roce_mtu"]) if re.match(r"^[0-9]{1,7}\Z", mtu) else None
            if note:
                notes.append(note)
        actions += sys_actions
        row["actions"] = [a.text for a in actions]
        row["changed"] = bool(actions)
        return row, actions, full + sys_full

    def _dcbx_owner(self, row, have, tools, quiet):
        owners = []
        if have.get("dcbx") == "firmware":
            owners.append("firmware")
        elif have.get("dcbx") and "lld_managed" in have["dcbx"]:
            owners.append("lld_managed")
        if tools.get("lldpad_pids"):
            owners.append("lldpad")
        name = row["interface"]
        if owners:
            row["dcbx_owner"] = owners[0]
            if not quiet:
                self.warn("%s: DCBX is owned by %s, which may override these host settings "
                          "(mlnx_qos -i %s -d os, or stop lldpad)" % (name, " and ".join(owners), name))
        elif have.get("dcbx") in ("os",) or (have.get("dcbx") and "host" in have["dcbx"]):
            row["dcbx_owner"] = "os"

    def plan(self, state):
        self.resolved = self.resolve(state["links"])
        self.rows, actions, replay = [], [], {}
        try:
            for name, want in self.resolved:
                for warning in consistency_warnings(name, want):
                    self.warn(warning)
                row, row_actions, full = self.plan_interface(state["tools"], name, want, [])
                for note in row["notes"]:
                    self.warn("%s: %s" % (name, note))
                self.rows.append(row)
                actions.extend(row_actions)
                if row["supported"]:
                    replay[name] = {"backend": row["backend"], "steps": full}
        except (DcbError, MlnxQosError, CommandError) as exc:
            raise RoceQosError("reading QoS state failed: %s" % exc)
        persist = self.persist_actions(replay) if self.params["persist"] and replay else []
        self.persist = {"enabled": self.params["persist"], "changes": [a.text for a in persist]}
        return actions + persist

    def persist_actions(self, replay):
        """Files of the boot-time re-apply that differ, and the unit's enable link if missing."""
        actions = []
        for path, text, mode in ((STATE_FILE, state_document(replay), 0o644),
                                 (APPLY_SCRIPT, APPLY_SCRIPT_TEXT, 0o755), (UNIT_FILE, UNIT_TEXT, 0o644)):
            before = self.root.read_raw(path)
            if before != text:
                actions.append(file_action(path, before, text, mode=mode))
        link = self.root.path(UNIT_LINK)
        current = os.readlink(link) if os.path.islink(link) else None
        if current != UNIT_FILE:
            actions.append(Action("link", UNIT_LINK, "enable %s (link %s)" % (os.path.basename(UNIT_FILE), UNIT_LINK),
                                  before=current, after=UNIT_FILE, diff=LINK_SECTION))
        return actions

    def _enable_unit(self, action):
        link = self.root.path(action.target)
        if not os.path.isdir(os.path.dirname(link)):
            os.makedirs(os.path.dirname(link), 0o755)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(action.after, link)

    def apply(self, state, actions):
        """Steps in order, then the persistence files and link; then a second plan must be empty."""
        fields = dict(self.result(state, actions), changed=True, actions=[a.public() for a in actions])
        try:
            for action in actions:
                if action.kind in ("command", "sysfs"):
                    run_step(action.data["step"], self.root, self.runner)
                elif action.kind == "file":
                    apply_file(self.root, action)
                elif action.kind == "link":
                    self._enable_unit(action)
        except (CommandError, OSError, IOError) as exc:
            # not a re-wrap: the failure keeps the interfaces and the actions of this run
            raise RoceQosError("applying RoCE QoS failed: %s" % exc, **fields)
        left = []
        for name, want in self.resolved:
            _row, again, _full = self.plan_interface(state["tools"], name, want, [], quiet=True)
            left.extend("%s: %s" % (name, a.text) for a in again)
        if left:
            raise RoceQosError("read back differs after applying, the device did not take: %s"
                               % "; ".join(left), **fields)

    def result(self, state, actions):
        return dict(interfaces=self.rows, persist=self.persist)
