# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RoCE lossless QoS on one node: desired state, sysfs/configfs paths, plan and apply.

A plan is a list of *steps*, plain data so that the boot-time unit can replay them:
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

import json
import os

NPRIO = 8
SYS_NET = "/sys/class/net"
ROCE_MODES = {"v2": "RoCE v2", "v1": "IB/RoCE v1"}
TSA_VALUES = ("strict", "ets", "vendor", "cbs")
ECN_ECT0 = 2  # ECN field 0b10: ECN-capable transport ECT(0)

STATE_FILE = "/etc/aiinfra-datapath/roce_qos.json"
APPLY_SCRIPT = "/usr/local/libexec/aiinfra-datapath/roce-qos-apply"
UNIT_FILE = "/etc/systemd/system/aiinfra-roce-qos.service"
UNIT_LINK = "/etc/systemd/system/multi-user.target.wants/aiinfra-roce-qos.service"


def tos_from_dscp(dscp, ecn=True):
    """IP ToS byte of RoCE traffic: DSCP in the upper six bits, ECT(0) in the lower two.

    DSCP 26 with ECN gives 106 (26 << 2 = 104, + 2); 104 is the same DSCP without ECT.
    """
    return (int(dscp) << 2) | (ECN_ECT0 if ecn else 0)


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
        return str(int(dev_port) + 1) if dev_port.isdigit() else "1"

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
    """(before, after, steps, full) for ECN, CNP and rdma_cm.

    ``steps`` holds only what differs; ``full`` every step, for the boot-time replay.
    """
    host = dev.host
    before, after, steps, full = {}, {}, [], []

    def converge(key, path, value):
        current = host.read(path)
        before[key] = current
        after[key] = value
        step = {"op": "write", "path": path, "value": value}
        full.append(step)
        if current != value:
            steps.append(step)

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
                steps.append(full[-1])
            port_dir = "%s/ports/%s" % (group, port)
            if want.get("roce_mode"):
                converge("rdma_cm.%s.%s.default_roce_mode" % (hca, port), port_dir + "/default_roce_mode",
                         ROCE_MODES[want["roce_mode"]])
            if want.get("roce_tos") is not None:
                converge("rdma_cm.%s.%s.default_roce_tos" % (hca, port), port_dir + "/default_roce_tos",
                         str(want["roce_tos"]))
    return before, after, steps, full


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


def iboe_mtu(netdev_mtu):
    """RoCE path MTU the kernel derives from a netdev MTU (include/rdma/ib_addr.h iboe_get_mtu)."""
    room = int(netdev_mtu) - 96  # GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4
    for size in (4096, 2048, 1024, 512, 256):
        if room >= size:
            return size
    return None


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


# The boot-time re-apply: a small stdlib script replaying the saved steps in order.
APPLY_SCRIPT_TEXT = r'''#!/usr/bin/env python3
# Installed by aiinfra.datapath.roce_qos. Re-applies RoCE QoS at boot: the NIC settings
# (PFC, trust, DSCP map, ETS, ECN, rdma_cm defaults) do not survive a reboot or driver reload.
# Reads the steps saved by the module and runs them in order; logs to the journal via stderr.
import json
import os
import subprocess
import sys
import time

STATE = sys.argv[1] if len(sys.argv) > 1 else "/etc/aiinfra-datapath/roce_qos.json"


def main():
    with open(STATE) as handle:
        state = json.load(handle)
    failed = 0
    for ifname, entry in sorted(state.get("interfaces", {}).items()):
        deadline = time.time() + 60
        while not os.path.exists("/sys/class/net/" + ifname) and time.time() < deadline:
            time.sleep(1)
        for step in entry.get("steps", []):
            try:
                if step["op"] == "run":
                    subprocess.check_call(step["argv"], stdout=subprocess.DEVNULL)
                elif step["op"] == "mkdir":
                    parent = os.path.dirname(step["path"])
                    if os.path.basename(parent) == "rdma_cm" and not os.path.isdir(parent):
                        subprocess.call(["modprobe", "rdma_cm"])  # at boot it may not be loaded yet
                    if not os.path.isdir(step["path"]):
                        os.mkdir(step["path"])
                elif step["op"] == "write":
                    with open(step["path"], "w") as handle:
                        handle.write(step["value"])
            except (OSError, subprocess.CalledProcessError) as exc:
                failed += 1
                sys.stderr.write("%s: %s failed: %s\n" % (ifname, json.dumps(step), exc))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
'''

UNIT_TEXT = """# Installed by aiinfra.datapath.roce_qos: re-apply RoCE QoS (runtime-only settings) at boot.
[Unit]
Description=Re-apply RoCE lossless QoS (aiinfra.datapath)
After=systemd-udev-settle.service network-pre.target
Wants=network-pre.target
ConditionPathExists=%(state)s

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=%(script)s %(state)s

[Install]
WantedBy=multi-user.target
""" % {"state": STATE_FILE, "script": APPLY_SCRIPT}


def state_document(entries):
    """JSON text of the saved steps; deterministic."""
    return json.dumps({"version": 1, "interfaces": entries}, indent=2, sort_keys=True) + "\n"
