# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nic_affinity capability: completion IRQs, queues, RPS and XPS of the data NICs on their own
NUMA node's CPUs, kept there when links come up (stdlib only; docs/host-stack.md).

``read`` finds each planned interface (name or match, as link_mtu does), its PCI function, NUMA node
and ``local_cpulist``, its completion and control IRQs (``_nic_affinity_apply.interface_irqs``), the
CPUs kubelet reserves (``reservedSystemCPUs``) and TuneD or the kernel isolate, irqbalance, the
link-up unit and the persisted queue settings. ``plan`` takes the reserved and isolated CPUs out of
each NIC's local CPUs and spreads the completion IRQs over what remains, one CPU each, round robin,
continuing across the NICs that share those CPUs (two rails on one NUMA node interleave instead of
stacking queue 0 on one CPU); XPS maps transmit queue k to the CPU of completion IRQ k, RPS spreads
each receive queue over the same CPUs. ``apply`` writes the saved plan and the files, then applies the
plan with the same function the link-up unit runs (``apply_interface``), and reads every IRQ back from
``effective_affinity_list``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import inspect
import os
import sys

from ansible_collections.aiinfra.datapath.plugins.module_utils import _nic_affinity_apply as apply_mod
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import (
    Action,
    Capability,
    apply_file,
    file_action,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import (
    IpLink,
    describe_match,
    device_facts,
    match_interfaces,
    parse_match,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity_apply import (
    CHANNEL_KEYS,
    RING_KEYS,
    STATE_FILE,
    apply_interface,
    ethtool_read,
    format_cpulist,
    interface_irqs,
    irq_affinity,
    parse_cpulist,
    parse_interrupts,
    queue_cpus,
    queues,
    state_document,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity_host import (
    APPLY_SCRIPT,
    IRQBALANCE_FILES,
    KUBELET_CONFIG,
    POLICY_SCRIPT,
    SYSTEMD_RUNNING,
    UNIT_FILE,
    UNIT_LINK,
    UNIT_NAME,
    irqbalance_config,
    kernel_isolated,
    kubelet_cpus,
    policy_script,
    tuned_isolated,
    unit_text,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity_persist import (
    cleanup,
    link_lines,
    plan_links,
)

PERSIST_CHOICES = ["auto", "networkd", "none"]
SECTIONS = {"channels": "queues (ethtool -L)", "rings": "rings (ethtool -G)", "irq": "IRQ affinity",
            "rps": "RPS", "xps": "XPS"}


class NicAffinityError(CapabilityError):
    """A plan the node cannot take (no CPU left, a count above the device's maximum), or a failed apply."""


def _cpus(text, what):
    if text in (None, ""):
        return None
    try:
        return parse_cpulist(str(text))
    except ValueError:
        raise NicAffinityError("nic_affinity: %s %r is not a CPU list (e.g. 8-15,24)" % (what, text))


def script_source():
    """The text the link-up unit runs: this collection's ``_nic_affinity_apply.py``, as it runs here."""
    try:
        text = inspect.getsource(apply_mod)
    except (IOError, OSError, TypeError):
        text = None
    if not text:
        raise NicAffinityError("nic_affinity: cannot read the source of the re-apply script from the module "
                               "payload; set reapply: false, or run the module from an installed collection")
    return "#!/usr/bin/python3\n" + text if not text.startswith("#!") else text


class NicAffinity(Capability):
    """IRQs, queues, RPS and XPS of the planned NICs on their local, unreserved CPUs, in one call."""

    name = "nic_affinity"

    @classmethod
    def options(cls):
        count = dict(type="int")
        return dict(
            interfaces=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str"),
                match=dict(type="dict", options=dict(
                    name=dict(type="str"), mac=dict(type="str"), pci=dict(type="str"), driver=dict(type="str"),
                )),
                fabric=dict(type="str"),
            )),
            irqs=dict(type="bool", default=True),
            cpus=dict(type="str"),
            exclude_cpus=dict(type="str"),
            kubelet_config=dict(type="path", default=KUBELET_CONFIG),
            kubelet_reserved=dict(type="bool", default=True),
            tuned_isolated=dict(type="bool", default=True),
            channels=dict(type="dict", options=dict(combined=count, rx=count, tx=count, other=count)),
            rings=dict(type="dict", options=dict(rx=count, tx=count)),
            rps=dict(type="bool", default=False),
            xps=dict(type="bool", default=False),
            irqbalance=dict(type="str", default="ban", choices=["ban", "ignore"]),
            reapply=dict(type="bool", default=True),
            persist=dict(type="str", default="auto", choices=PERSIST_CHOICES),
            on_misplaced=dict(type="str", default="warn", choices=["warn", "fail"]),
            state=dict(type="str", default="present", choices=["present", "absent"]),
        )

    def validate(self):
        p = self.params
        self.only = _cpus(p.get("cpus"), "cpus")
        self.exclude = _cpus(p.get("exclude_cpus"), "exclude_cpus") or []
        for part, keys in (("channels", CHANNEL_KEYS), ("rings", RING_KEYS)):
            for _label, key in keys:
                value = (p.get(part) or {}).get(key)
                if value is not None and not 1 <= value <= 65536:
                    raise NicAffinityError("nic_affinity: %s.%s %d is out of range (1-65536)" % (part, key, value))
        if p["state"] == "present" and not p["interfaces"]:
            raise NicAffinityError("nic_affinity: interfaces is empty; give the data interfaces (the plan's "
                                   "nic_affinity.interfaces), or state: absent to remove what it installed")

    # ------------------------------------------------------------------ read
    def _file(self, path):
        return self.root.read_raw(path)

    def read(self):
        host = self.root
        state = {"unit": self._file(UNIT_FILE), "script": self._file(APPLY_SCRIPT), "saved": self._file(STATE_FILE),
                 "link": os.readlink(host.path(UNIT_LINK)) if os.path.islink(host.path(UNIT_LINK)) else None,
                 "policy": self._file(POLICY_SCRIPT), "systemd": os.path.isdir(host.path(SYSTEMD_RUNNING)),
                 "systemctl": self.runner.which("systemctl"), "ethtool": self.runner.which("ethtool"),
                 "irqbalance_bin": self.runner.which("irqbalance"), "interfaces": [], "notes": []}
        config = next((path for path in IRQBALANCE_FILES if host.exists(path)), None)
        state["irqbalance_file"] = config
        state["irqbalance_text"] = self._file(config) if config else None
        state["unit_active"] = None
        if state["systemd"] and state["systemctl"] and state["unit"] is not None:
            rc, out, _err = self.runner.run([state["systemctl"], "is-active", UNIT_NAME], check=False)
            state["unit_active"] = (out or "").strip() == "active"
        if self.params["state"] == "absent":
            return state
        ip = IpLink(self.runner, ip=self.runner.which("ip") or "ip")
        state["links"] = links = ip.links()
        online_text = host.read("/sys/devices/system/cpu/online")
        state["online"] = parse_cpulist(online_text) if online_text else []
        state["kubelet"] = kubelet_cpus(host, self.params["kubelet_config"]) if self.params["kubelet_reserved"] \
            else {"file": None, "found": False, "policy": None, "reserved": [], "error": None, "note": None}
        if self.params["tuned_isolated"]:
            state["tuned"], state["kernel_isolated"] = tuned_isolated(host), kernel_isolated(host)
        else:
            state["tuned"], state["kernel_isolated"] = {"isolated": [], "notes": []}, {"cpus": [], "files": []}
        interrupts = parse_interrupts(host.read_raw("/proc/interrupts"))
        errors, seen = [], {}
        for index, item in enumerate(self.params["interfaces"]):
            where = "interfaces[%d]%s" % (index, " (fabric %s)" % item["fabric"] if item.get("fabric") else "")
            match = parse_match(item)
            if not match:
                errors.append("%s: give name or match {name|mac|pci|driver}" % where)
                continue
            names = match_interfaces(links, host, match)
            if not names:
                errors.append("%s: no interface matches %s (present: %s)"
                              % (where, describe_match(match), ", ".join(sorted(links)) or "none"))
                continue
            for name in names:
                if name not in seen:
                    seen[name] = True
                    state["interfaces"].append(self._read_interface(name, item.get("fabric"), interrupts, state))
        if errors:
            raise NicAffinityError("nic_affinity: %d problem(s), nothing changed: %s"
                                   % (len(errors), "; ".join(errors)), errors=errors)
        return state

    def _read_interface(self, name, fabric, interrupts, state):
        host = self.root
        pci = apply_mod.device_pci(str(host.root), name)
        numa = host.read("/sys/class/net/%s/device/numa_node" % name)
        numa = int(numa) if numa not in (None, "") and numa.lstrip("-").isdigit() else None
        local_text = host.read("/sys/class/net/%s/device/local_cpulist" % name)
        source = "local_cpulist"
        if local_text:
            local = parse_cpulist(local_text)
        elif numa is not None and numa >= 0 and host.read("/sys/devices/system/node/node%d/cpulist" % numa):
            local, source = parse_cpulist(host.read("/sys/devices/system/node/node%d/cpulist" % numa)), "numa_node"
        else:
            local, source = list(state["online"]), "online (no NUMA node)"
        completion, other = interface_irqs(str(host.root), name, pci, interrupts)
        for entry in completion + other:
            entry["smp"], entry["effective"] = irq_affinity(str(host.root), entry["irq"])
        row = {"name": name, "fabric": fabric, "pci": pci, "numa_node": numa, "local": local, "local_source": source,
               "completion": completion, "other": other, "channels": None, "rings": None,
               "rx": queues(str(host.root), name, "rx"), "tx": queues(str(host.root), name, "tx")}
        for part, flag, keys in (("channels", "-l", CHANNEL_KEYS), ("rings", "-g", RING_KEYS)):
            wanted = self.params.get(part) or {}
            if any(v is not None for v in wanted.values()):
                if not state["ethtool"]:
                    raise NicAffinityError("nic_affinity: %s are planned but ethtool is not installed on the node "
                                           "(package ethtool)" % part)
                settings, error = ethtool_read(lambda argv: self.runner.run(argv, check=False), state["ethtool"],
                                               name, flag, keys)
                row[part] = settings if settings is not None else {"error": " ".join(error)}
        return row

    # ------------------------------------------------------------------ plan
    def _pool(self, row, state):
        pool = set(row["local"]) & set(state["online"] or row["local"])
        taken = {"reserved by kubelet": set(state["kubelet"]["reserved"]),
                 "isolated": set(state["tuned"]["isolated"]) | set(state["kernel_isolated"]["cpus"]),
                 "excluded": set(self.exclude)}
        for cpus in taken.values():
            pool -= cpus
        if self.only is not None:
            pool &= set(self.only)
        return sorted(pool), taken

    def plan(self, state):
        self.rows, self.entries, self.notes, self.problems = [], {}, list(state["notes"]), []
        actions = []
        if self.params["state"] == "absent":
            return self._cleanup(state)
        for key in ("error", "note"):
            if state["kubelet"].get(key):
                self.notes.append("kubelet: %s" % state["kubelet"][key])
        self.notes.extend(state["tuned"].get("notes") or [])
        cursors, errors = {}, []
        for row in state["interfaces"]:
            pool, taken = self._pool(row, state)
            if not pool:
                errors.append("%s: no CPU is left for its IRQs: its local CPUs %s (%s) minus %s" % (
                    row["name"], format_cpulist(row["local"]), row["local_source"], "; ".join(
                        "%s %s" % (what, format_cpulist(sorted(cpus))) for what, cpus in taken.items() if cpus)
                    or "nothing"))
                continue
            entry = {"pci": row["pci"], "channels": None, "rings": None, "irq_cpus": [], "rps_cpus": None,
                     "xps": None}
            row_actions = []
            for part, setflag in (("channels", "-L"), ("rings", "-G")):
                wanted = dict((k, v) for k, v in (self.params.get(part) or {}).items() if v is not None)
                if not wanted:
                    continue
                settings = row[part] or {}
                if "error" in settings:
                    errors.append("%s: ethtool %s: %s (%s not supported by this device's driver?)"
                                  % (row["name"], "-l" if part == "channels" else "-g", settings["error"], part))
                    continue
                for key, value in sorted(wanted.items()):
                    high = settings["max"].get(key)
                    if high is None:
                        errors.append("%s: the device has no %s %s setting (ethtool %s: n/a)"
                                      % (row["name"], key, part, "-l" if part == "channels" else "-g"))
                    elif value > high:
                        errors.append("%s: %s %s %d is above the device's maximum %d"
                                      % (row["name"], part, key, value, high))
                entry[part] = wanted
                changes = [(k, v) for k, v in sorted(wanted.items()) if settings["current"].get(k) != v]
                if changes:
                    text = "ethtool %s %s %s" % (setflag, row["name"], " ".join("%s %d" % kv for kv in changes))
                    row_actions.append(Action(part, row["name"], text, after=dict(changes), diff=SECTIONS[part],
                                              before=dict((k, settings["current"].get(k)) for k, _v in changes)))
            # one CPU per queue: the completion IRQs there are, the planned channels (a channel change may add
            # IRQs and queues), else the transmit queues the device has now (the count must not follow the
            # channels this very run changes, or a second run would plan again)
            count = max([e["index"] + 1 for e in row["completion"]] + [0])
            planned = entry["channels"] or {}
            planned_count = max(planned.get("combined") or 0, planned.get("rx") or 0, planned.get("tx") or 0)
            count = max(count, planned_count or (len(row["tx"]) if self.params["xps"] else 0))
            key = tuple(pool)
            start = cursors.get(key, 0)
            sequence = [pool[(start + k) % len(pool)] for k in range(max(count, 1))]
            cursors[key] = start + max(count, 1)
            if self.params["irqs"]:
                entry["irq_cpus"] = sequence
                for item in row["completion"]:
                    cpu = sequence[item["index"] % len(sequence)]
                    item["cpu"] = cpu
                    if item["smp"] != [cpu]:
                        row_actions.append(Action("irq", "IRQ %d" % item["irq"], "IRQ %d (%s of %s): CPU %s -> %d" % (
                            item["irq"], item["name"], row["name"], format_cpulist(item["smp"] or []) or "?", cpu),
                            before=format_cpulist(item["smp"] or []), after=str(cpu), diff=SECTIONS["irq"]))
            if self.params["rps"]:
                entry["rps_cpus"] = pool
                row_actions.extend(self._queue_actions(row, "rx", [pool]))
            if self.params["xps"]:
                entry["xps"] = sequence
                row_actions.extend(self._queue_actions(row, "tx", [[cpu] for cpu in sequence]))
            self.entries[row["name"]] = entry
            self.rows.append(dict(row, pool=pool, entry=entry))
            actions.extend(row_actions)
        if errors:
            raise NicAffinityError("nic_affinity: %d problem(s), nothing changed: %s"
                                   % (len(errors), "; ".join(errors)), errors=errors)
        actions.extend(self._files(state))
        return actions

    def _queue_actions(self, row, kind, cpus):
        """RPS (rx) or XPS (tx) actions: queue ``index`` gets ``cpus[index % len(cpus)]``."""
        out = []
        for index in row[kind]:
            want = cpus[index % len(cpus)]
            current = queue_cpus(str(self.root.root), row["name"], kind, index)
            if current is None or sorted(current) != sorted(want):
                what = "rps" if kind == "rx" else "xps"
                out.append(Action(what, "%s %s-%d" % (row["name"], kind, index), "%s of %s %s-%d: %s -> %s" % (
                    what.upper(), row["name"], kind, index, format_cpulist(current or []) or "none",
                    format_cpulist(want)), before=format_cpulist(current or []), after=format_cpulist(want),
                    diff=SECTIONS[what]))
        return out

    # ------------------------------------------------------------------ files
    def _file_action(self, path, before, after, mode=0o644):
        return file_action(path, before, after, mode=mode) if before != after else None

    def _files(self, state):
        out = []
        saved = state_document(self.entries)
        reapply = self.params["reapply"]
        python = "/usr/bin/python3" if self.root.exists("/usr/bin/python3") else sys.executable
        wanted = {STATE_FILE: (saved, 0o644)}
        if reapply:
            wanted[APPLY_SCRIPT] = (script_source(), 0o755)
            wanted[UNIT_FILE] = (unit_text(python), 0o644)
        current = {STATE_FILE: state["saved"], APPLY_SCRIPT: state["script"], UNIT_FILE: state["unit"]}
        for path in (STATE_FILE, APPLY_SCRIPT, UNIT_FILE):
            if path in wanted:
                out.append(self._file_action(path, current[path], wanted[path][0], wanted[path][1]))
            elif current[path] is not None and path != STATE_FILE:
                out.append(file_action(path, current[path], None))
        if reapply and state["link"] != UNIT_FILE:
            out.append(Action("link", UNIT_LINK, "enable %s (link %s)" % (UNIT_NAME, UNIT_LINK),
                              before=state["link"], after=UNIT_FILE, diff=False))
        elif not reapply and state["link"] is not None:
            out.append(Action("link", UNIT_LINK, "disable %s" % UNIT_NAME, before=state["link"], after=None,
                              diff=False))
        unit_changed = any(a is not None and a.target in (APPLY_SCRIPT, UNIT_FILE) for a in out)
        out.extend(self._irqbalance(state))
        out.extend(self._persist(state))
        out = [a for a in out if a is not None]
        if state["systemd"] and state["systemctl"] and reapply and (unit_changed or state["unit_active"] is not True):
            out.append(Action("command", UNIT_NAME, "systemctl daemon-reload; systemctl restart %s" % UNIT_NAME,
                              before="changed" if unit_changed else "inactive", after="active", diff=False,
                              argvs=[[state["systemctl"], "daemon-reload"],
                                     [state["systemctl"], "restart", UNIT_NAME]]))
        elif reapply and not state["systemd"]:
            self.notes.append("systemd is not running here: %s starts at the next boot" % UNIT_NAME)
        return out

    def _irqbalance(self, state):
        pcis = sorted(set(r["pci"] for r in self.rows if r["pci"] and r["completion"]))
        ban = self.params["irqbalance"] == "ban" and bool(pcis) and bool(self.params["irqs"])
        self.irqbalance = {"installed": bool(state["irqbalance_bin"]), "file": state["irqbalance_file"],
                           "banned": False, "devices": []}
        out = []
        if not ban:
            if state["policy"] is not None:
                out.append(file_action(POLICY_SCRIPT, state["policy"], None))
            if state["irqbalance_text"] is not None:
                text, _problem = irqbalance_config(state["irqbalance_text"], False)
                out.append(self._file_action(state["irqbalance_file"], state["irqbalance_text"], text))
            return out
        if not state["irqbalance_bin"] and state["irqbalance_file"] is None:
            self.notes.append("irqbalance is not installed: nothing rebalances the IRQs")
            return out
        out.append(self._file_action(POLICY_SCRIPT, state["policy"], policy_script(pcis), 0o755))
        path = state["irqbalance_file"] or ("/etc/sysconfig/irqbalance" if self.root.exists("/etc/sysconfig")
                                            else IRQBALANCE_FILES[0])
        self.irqbalance["file"] = path
        text, problem = irqbalance_config(state["irqbalance_text"], True)
        if problem:
            self.warn("irqbalance: %s: %s" % (path, problem))
            self.notes.append("irqbalance: %s: %s" % (path, problem))
            return out
        self.irqbalance.update(banned=True, devices=pcis)
        change = self._file_action(path, state["irqbalance_text"], text)
        out.append(change)
        if (change is not None or out[0] is not None) and state["systemd"] and state["systemctl"]:
            out.append(Action("command", "irqbalance.service", "systemctl try-restart irqbalance.service",
                              before=None, after="restarted", diff=False,
                              argvs=[[state["systemctl"], "try-restart", "irqbalance.service"]]))
        return out

    def _persist(self, state):
        mode = self.params["persist"]
        lines = link_lines(self.params.get("channels"), self.params.get("rings"))
        self.persisted = {"backend": None, "files": []}
        if mode == "none":
            return []
        links = state["links"]
        physical = [r for r in self.rows if r["pci"]]
        if mode == "auto" and not (self.root.exists("/etc/systemd/network") or self.root.exists("/lib/systemd/network")
                                   or self.root.exists("/usr/lib/systemd/network")):
            if lines:
                self.notes.append("no systemd .link directory on the node: queue settings are not persisted by udev; "
                                  "the link-up unit sets them at boot")
            return []
        self.persisted["backend"] = "networkd"
        targets = [dict(device_facts(self.root, links, r["name"]), lines=lines) for r in physical] if lines else []
        planned_names = set(r["name"] for r in physical)
        others = [device_facts(self.root, links, n) for n in sorted(links) if n not in planned_names]
        actions, notes, planned = plan_links(self.root, targets, others)
        self.notes.extend(notes)
        virtual = [r["name"] for r in self.rows if not r["pci"]]
        if lines and virtual:
            self.notes.append("%s: virtual interface(s): queue settings are kept by the link-up unit, not by a .link "
                              "file" % ", ".join(virtual))
        self.persisted["files"] = sorted(planned)
        return actions + cleanup(self.root, planned)

    def _cleanup(self, state):
        out = []
        for path, before in ((UNIT_FILE, state["unit"]), (APPLY_SCRIPT, state["script"]), (STATE_FILE, state["saved"]),
                             (POLICY_SCRIPT, state["policy"])):
            if before is not None:
                out.append(file_action(path, before, None))
        if state["link"] is not None:
            out.append(Action("link", UNIT_LINK, "disable %s" % UNIT_NAME, before=state["link"], after=None,
                              diff=False))
        if state["irqbalance_text"] is not None:
            text, _problem = irqbalance_config(state["irqbalance_text"], False)
            if text != state["irqbalance_text"]:
                out.append(file_action(state["irqbalance_file"], state["irqbalance_text"], text))
        out.extend(cleanup(self.root, set()))
        self.irqbalance, self.persisted = {"banned": False}, {"backend": None, "files": []}
        return out

    # ------------------------------------------------------------------ apply
    def _run(self, argv):
        return self.runner.run(argv, check=False, record=len(argv) > 1 and argv[1] in ("-L", "-G"))

    def apply(self, state, actions):
        failed = []
        for action in actions:
            if action.kind == "file":
                apply_file(self.root, action)
            elif action.kind == "link":
                path = self.root.path(action.target)
                if os.path.lexists(path):
                    os.unlink(path)
                if action.after is not None:
                    if not os.path.isdir(os.path.dirname(path)):
                        os.makedirs(os.path.dirname(path), 0o755)
                    os.symlink(action.after, path)
        self.applied = []
        if self.params["state"] == "present":
            for row in self.rows:
                for change in apply_interface(str(self.root.root), self._run, state["ethtool"] or "ethtool",
                                              row["name"], self.entries[row["name"]]):
                    self.applied.append(dict(change, interface=row["name"]))
                    if not change["ok"]:
                        failed.append("%s %s: %s" % (change["kind"], change["target"], change["error"]))
        for action in actions:
            if action.kind == "command":
                for argv in action.data["argvs"]:
                    rc, out, err = self.runner.run(argv, check=False, record=True)
                    if rc != 0:
                        failed.append("%s: %s" % (" ".join(argv), (err or out).strip()))
        if failed:
            raise NicAffinityError("nic_affinity: %d change(s) failed: %s" % (len(failed), "; ".join(failed)),
                                   failures=failed, interfaces=self._rows_out(after=False))

    # ------------------------------------------------------------------ result
    def _rows_out(self, after):
        out, misplaced, placed = [], [], 0
        for row in self.rows:
            irqs = []
            for item in row["completion"]:
                if after:
                    smp, effective = irq_affinity(str(self.root.root), item["irq"])
                else:
                    smp, effective = item["smp"], item["effective"]
                cpu = item.get("cpu")
                ok = cpu is None or (effective if effective is not None else smp) == [cpu]
                if cpu is not None:
                    if ok:
                        placed += 1
                    else:
                        misplaced.append("IRQ %d (%s of %s) runs on CPU %s, planned %d" % (
                            item["irq"], item["name"], row["name"], format_cpulist(effective or smp or []) or "?", cpu))
                irqs.append({"irq": item["irq"], "name": item["name"], "queue": item["index"], "cpu": cpu,
                             "smp_affinity": format_cpulist(smp or []), "effective": format_cpulist(effective or []),
                             "placed": ok})
            out.append({"interface": row["name"], "fabric": row["fabric"], "pci": row["pci"],
                        "numa_node": row["numa_node"], "local_cpus": format_cpulist(row["local"]),
                        "local_source": row["local_source"], "cpus": format_cpulist(row["pool"]), "irqs": irqs,
                        "other_irqs": [{"irq": o["irq"], "name": o["name"]} for o in row["other"]],
                        "channels": row["entry"]["channels"], "rings": row["entry"]["rings"],
                        "rps": format_cpulist(row["entry"]["rps_cpus"]) if row["entry"]["rps_cpus"] else None,
                        "xps": bool(row["entry"]["xps"])})
        self.misplaced, self.placed = misplaced, placed
        return out

    def result(self, state, actions):
        if self.params["state"] == "absent":
            return dict(interfaces=[], placed=0, misplaced=[], irqbalance=self.irqbalance, persist=self.persisted,
                        notes=self.notes)
        rows = self._rows_out(after=not self.check_mode and bool(actions))
        if self.misplaced:
            message = ("%d completion IRQ(s) are not where the plan put them: %s (effective_affinity_list: the "
                       "interrupt controller or the kernel keeps them there; managed IRQs and some virtual "
                       "platforms ignore smp_affinity_list)" % (len(self.misplaced), "; ".join(self.misplaced)))
            if self.params["on_misplaced"] == "fail" and not self.check_mode:
                raise NicAffinityError("nic_affinity: " + message, interfaces=rows, misplaced=self.misplaced)
            if not self.check_mode:
                self.warn(message)
        kubelet = state["kubelet"]
        return dict(interfaces=rows, placed=self.placed, misplaced=self.misplaced if not self.check_mode else [],
                    kubelet={"file": kubelet.get("file"), "found": kubelet.get("found"),
                             "cpu_manager_policy": kubelet.get("policy"),
                             "reserved_cpus": format_cpulist(kubelet.get("reserved") or [])},
                    isolated_cpus=format_cpulist(sorted(set(state["tuned"]["isolated"])
                                                        | set(state["kernel_isolated"]["cpus"]))),
                    irqbalance=self.irqbalance, persist=self.persisted,
                    reapply={"unit": UNIT_NAME if self.params["reapply"] else None, "state_file": STATE_FILE,
                             "systemd": state["systemd"]},
                    applied=getattr(self, "applied", []), notes=self.notes)
