# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backend of ``datapath_facts``: the live data-path state of a node, read-only (stdlib only).

Every section is read through a ``HostRoot`` (so unit tests point it at a fake tree) and with
the parsers the configuring modules use, so that the audit compares what they compare.
A section that cannot be read is ``None`` with the reason in ``unavailable``; nothing here
raises for a missing subsystem. Tools (``ethtool``, ``devlink``, ``dcb``) run only for the
``firmware`` and ``qos`` sections and only for netdevs backed by a device
(``/sys/class/net/IF/device``): virtual NICs are answered from sysfs alone. The ``topology``
section is ``node_topology``'s read (``lspci`` and ``nvidia-smi`` when installed).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._cmdline import split_cmdline
from ansible_collections.aiinfra.datapath.plugins.module_utils._dcb import DcbBackend, DcbError
from ansible_collections.aiinfra.datapath.plugins.module_utils._hugepages import (
    NODE_ROOT,
    THP_CHOICES,
    THP_DIR,
    Pool,
    parse_meminfo,
    parse_mounts,
    size_label,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import SYS_NET, sysfs_device
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config import PCI_DEVICES as NIC_PCI_DEVICES
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config import STATE_FILE as NIC_STATE_FILE
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config import facts as nic_config_facts
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_firmware import collect as collect_firmware
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_firmware import (
    DevlinkOutputError,
    parse_devlink_info,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology import NodeTopology
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._rail_facts import routing_facts
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import (
    boot_values_with_tuned,
    canonical_name,
    key_error,
    read_key,
)

FACTS_VERSION = 1
SECTIONS = ("sysctl", "hugepages", "thp", "cmdline", "memory", "interfaces", "firmware", "qos",
            "storage", "nfd", "topology", "last_run", "nic_config", "nic_affinity", "ebpf", "routing")
# gathered unless ``gather`` says otherwise; ``routing`` (the rails' rules and tables) is asked for by the audit
DEFAULT_SECTIONS = SECTIONS[:-1]
LAST_RUN_FILE = "/var/lib/aiinfra-datapath/last-run.json"  # written by playbooks/local.yml (pull mode)
LAST_RUN_KEYS = ("node", "result", "error", "finished", "revision", "check_mode", "reboot_required")
NFD_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
HUGEPAGES_ROOT = "/sys/kernel/mm/hugepages"
NPRIO = 8


def parse_fstab(text):
    """``/etc/fstab`` -> ``{mount point: {source, fstype, options}}`` (last entry wins)."""
    entries = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        entries[point.rstrip("/") or "/"] = {
            "source": fields[0], "fstype": fields[2],
            "options": fields[3].split(",") if len(fields) > 3 else ["defaults"],
        }
    return entries


def parse_features(text):
    """An NFD features.d file -> ``{label: value}`` (``key=value`` lines; ``key`` alone is "true")."""
    labels = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if key.startswith("-"):
            # "-key" removes a label in NFD's format
            labels.pop(key[1:], None)
            continue
        labels[key] = value.strip() if sep else "true"
    return labels


def _read_int(host, path):
    try:
        text = host.read(path)
    except (IOError, OSError):
        # /sys/class/net/IF/speed gives EINVAL on a link that is down
        return None
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _read_text(host, path):
    try:
        return host.read(path)
    except (IOError, OSError):
        return None


class DatapathFacts(Capability):
    """Collect the sections asked for into the fact ``datapath_facts`` (read-only)."""

    name = "datapath_facts"
    read_only = True  # never waits for a run that changes the node

    @classmethod
    def options(cls):
        return dict(
            gather=dict(type="list", elements="str", choices=list(SECTIONS), default=list(DEFAULT_SECTIONS)),
            sysctl_keys=dict(type="list", elements="str", default=[], no_log=False),
            interfaces=dict(type="list", elements="str"),
            storage_devices=dict(type="list", elements="str", default=[]),
            mount_paths=dict(type="list", elements="str", default=[]),
            last_run_file=dict(type="path", default=LAST_RUN_FILE),
            nic_config_pci_dir=dict(type="path", default=NIC_PCI_DEVICES),
            nic_config_tool=dict(type="str", choices=["auto", "mlxconfig", "mstconfig"], default="auto"),
            nic_config_arrays=dict(type="list", elements="str", default=[]),
            nic_config_state_file=dict(type="path", default=NIC_STATE_FILE),
            nic_affinity=dict(type="dict"),
            ebpf=dict(type="dict"),
        )

    def __init__(self, params, node):
        Capability.__init__(self, params, node)
        self.host = node.root
        self.gather = list(params.get("gather") or DEFAULT_SECTIONS)
        self.unavailable = {}
        self.notes = []
        self._tools = {}

    def validate(self):
        # a key that resolves outside /proc/sys is refused before anything is read (never "unavailable")
        errors = [why for why in (key_error(name) for name in self.params.get("sysctl_keys") or []) if why]
        if errors:
            raise CapabilityError("datapath_facts: sysctl_keys: %s" % "; ".join(errors), errors=errors)

    def read(self):
        return self.collect()

    def result(self, state, actions):
        return dict(ansible_facts={"datapath_facts": state})

    # -- helpers ------------------------------------------------------------------------
    def _tool(self, name):
        if name not in self._tools:
            self._tools[name] = self.runner.which(name) if self.runner is not None else None
        return self._tools[name]

    def _section(self, name, reader):
        if name not in self.gather:
            return None
        try:
            return reader()
        except (IOError, OSError, ValueError, DcbError) as exc:
            # A subsystem that cannot be read is reported, never fatal.
            self.unavailable[name] = "%s: %s" % (type(exc).__name__, exc)
            return None

    # -- sections -----------------------------------------------------------------------
    def sysctl(self):
        out = {}
        names = [canonical_name(str(name)) for name in self.params.get("sysctl_keys") or []]
        names = [name for name in names if name]
        at_boot = boot_values_with_tuned(self.host, names)
        for canon in names:
            state, value = read_key(self.host, canon)
            boot_value, boot_file = at_boot[canon]
            out[canon] = {"value": value if state in ("ok", "read_only") else None, "state": state,
                          "boot": boot_value, "boot_file": boot_file}
        return out

    def hugepages(self):
        meminfo = parse_meminfo(self.host.read_raw("/proc/meminfo"))
        default_kb = meminfo.get("Hugepagesize")
        pools = {}
        for entry in self.host.listdir(HUGEPAGES_ROOT):
            match = re.match(r"^hugepages-(\d+)kB\Z", entry)
            if not match:
                continue
            kb = int(match.group(1))
            pool = Pool(self.host, kb)
            if not pool.supported:
                continue
            pool.read()
            pools[size_label(kb)] = {
                "size_kb": kb,
                "total": pool.nr,
                "free": pool.free,
                "resv": pool.resv,
                "surplus": pool.surplus,
                "per_node": dict((node, {"total": pool.nodes[node]["nr"], "free": pool.nodes[node]["free"]})
                                 for node in sorted(pool.nodes, key=int)),
            }
        if not pools and not self.host.exists(HUGEPAGES_ROOT):
            self.unavailable["hugepages"] = "%s does not exist (kernel without HugeTLB)" % HUGEPAGES_ROOT
            return None
        return {"default_size": size_label(default_kb) if default_kb else None, "pools": pools}

    def thp(self):
        out = {}
        for name in sorted(THP_CHOICES):
            text = _read_text(self.host, THP_DIR + "/" + name)
            if text is None:
                out[name] = None
                continue
            match = re.search(r"\[([^\]]+)\]", text)
            out[name] = match.group(1) if match else text.strip()
        if all(value is None for value in out.values()):
            self.unavailable["thp"] = "%s does not exist" % THP_DIR
            return None
        return out

    def cmdline(self):
        text = self.host.read_raw("/proc/cmdline")
        if text is None:
            self.unavailable["cmdline"] = "/proc/cmdline does not exist"
            return None
        return split_cmdline(text.strip())

    def memory(self):
        meminfo = parse_meminfo(self.host.read_raw("/proc/meminfo"))
        total = meminfo.get("MemTotal")
        nodes = [e for e in self.host.listdir(NODE_ROOT) if re.match(r"^node\d+\Z", e)]
        return (total * 1024 if total is not None else None), (len(nodes) or None)

    def _names(self):
        present = [n for n in self.host.listdir(SYS_NET) if n != "lo"]
        wanted = self.params.get("interfaces")
        if wanted:
            missing = [n for n in wanted if n not in present]
            note = "interfaces not found on the node: %s" % ", ".join(missing)
            if missing and note not in self.notes:
                self.notes.append(note)
            return [n for n in present if n in wanted]
        return present

    def interfaces(self):
        if not self.host.exists(SYS_NET):
            self.unavailable["interfaces"] = "%s does not exist" % SYS_NET
            return None
        firmware = "firmware" in self.gather
        ethtool = self._tool("ethtool") if firmware else None
        devlink_info = None
        out = {}
        for name in self._names():
            base = "%s/%s" % (SYS_NET, name)
            bus, driver = sysfs_device(self.host, name)
            physical = self.host.exists(base + "/device")
            entry = {
                "mtu": _read_int(self.host, base + "/mtu"),
                "operstate": _read_text(self.host, base + "/operstate"),
                "mac": _read_text(self.host, base + "/address"),
                "driver": driver,
                "bus_info": bus,
                "physical": physical,
                "speed_mbps": None,
                "firmware": None,
            }
            speed = _read_int(self.host, base + "/speed")
            # -1 / 4294967295: no link or speed unknown (virtio, down)
            if speed is not None and 0 < speed < 4294967295:
                entry["speed_mbps"] = speed
            if firmware and physical:
                if devlink_info is None:
                    devlink_info = self._devlink_info()
                nic = collect_firmware(self.host, self.runner, name, ethtool, devlink_info)
                entry["firmware"] = {
                    "version": nic.get("firmware_version"),
                    "stored": nic.get("firmware_stored"),
                    "psid": nic.get("psid"),
                    "driver_version": nic.get("driver_version"),
                    "sources": nic.get("sources") or [],
                    "notes": nic.get("notes") or [],
                }
                entry["driver"] = entry["driver"] or nic.get("driver")
                entry["bus_info"] = entry["bus_info"] or nic.get("bus_info")
            out[name] = entry
        return out

    def _devlink_info(self):
        devlink = self._tool("devlink")
        if not devlink:
            return None
        rc, out, err = self.runner.run([devlink, "-j", "dev", "info"], check=False)
        if rc != 0:
            self.notes.append("devlink -j dev info failed: %s" % (err or out).strip())
            return None
        try:
            return parse_devlink_info(out)
        except DevlinkOutputError as exc:
            self.notes.append("devlink -j dev info printed output that cannot be read, so devlink was not "
                              "used: %s" % exc)
            return None

    def qos(self):
        if not self.host.exists(SYS_NET):
            self.unavailable["qos"] = "%s does not exist" % SYS_NET
            return None
        out = {}
        dcb = None
        for name in self._names():
            base = "%s/%s" % (SYS_NET, name)
            if not self.host.exists(base + "/device"):
                out[name] = {"supported": False,
                             "reason": "virtual interface (no %s/device): no DCB/QoS hardware" % base}
                continue
            if dcb is None:
                dcb = self._tool("dcb") or ""
            if not dcb:
                out[name] = {"supported": False, "reason": "iproute2 dcb is not installed"}
                continue
            backend = DcbBackend(self.runner, dcb)
            reason = backend.probe(name)
            if reason:
                out[name] = {"supported": False, "reason": reason}
                continue
            state = backend.read(name)
            pfc = state.get("pfc") or [False] * NPRIO
            out[name] = {
                "supported": True,
                "backend": "dcb",
                "trust": state.get("trust"),
                "pfc_priorities": [p for p in range(NPRIO) if p < len(pfc) and pfc[p]],
                "dscp2prio": dict((str(d), p) for d, p in sorted((state.get("dscp2prio") or {}).items())),
                "ets": state.get("ets"),
                "ecn": self._ecn(base),
                "notes": state.get("notes") or [],
            }
        return out

    def _ecn(self, base):
        """Priorities with ECN on for the reaction (rp) and notification (np) points (mlx5 sysfs)."""
        if not self.host.exists(base + "/ecn"):
            return None
        ecn = {}
        for point in ("rp", "np"):
            ecn[point] = [p for p in range(NPRIO)
                          if _read_text(self.host, "%s/ecn/roce_%s/enable/%d" % (base, point, p)) == "1"]
        return ecn

    def storage(self):
        mounts = parse_mounts(self.host.read_raw("/proc/self/mounts"))
        fstab = parse_fstab(self.host.read_raw("/etc/fstab"))
        devices = {}
        for path in self.params.get("storage_devices") or []:
            devices[path] = self._device(path)
        out_mounts = {}
        out_fstab = {}
        for raw in self.params.get("mount_paths") or []:
            path = raw.rstrip("/") or "/"
            live = mounts.get(path)
            out_mounts[path] = ({"mounted": True, "source": live["source"], "fstype": live["fstype"],
                                 "options": live["options"]} if live else
                                {"mounted": False, "source": None, "fstype": None, "options": []})
            entry = fstab.get(path)
            out_fstab[path] = ({"present": True, "source": entry["source"], "fstype": entry["fstype"],
                                "options": entry["options"]} if entry else
                               {"present": False, "source": None, "fstype": None, "options": []})
        return {"devices": devices, "mounts": out_mounts, "fstab": out_fstab}

    def _device(self, path):
        real = os.path.realpath(self.host.path(path))
        if not os.path.exists(real):
            return {"exists": False, "resolved": None, "size_bytes": None, "model": None, "serial": None}
        name = os.path.basename(real)
        block = "/sys/class/block/%s" % name
        sectors = _read_int(self.host, block + "/size")
        return {
            "exists": True,
            "resolved": "/dev/" + name,
            "size_bytes": sectors * 512 if sectors is not None else None,
            "model": _read_text(self.host, block + "/device/model"),
            "serial": _read_text(self.host, block + "/device/serial"),
        }

    def nfd(self):
        files = {}
        labels = {}
        for entry in self.host.listdir(NFD_DIR):
            if entry.startswith("."):
                continue  # NFD skips dot-files (atomic writers' temp files)
            path = "%s/%s" % (NFD_DIR, entry)
            if not os.path.isfile(self.host.path(path)):
                continue
            try:
                parsed = parse_features(self.host.read_raw(path))
            except (IOError, OSError) as exc:
                if exc.errno == errno.EACCES:
                    self.notes.append("%s: %s" % (path, exc))
                    continue
                raise
            files[entry] = parsed
            labels.update(parsed)
        return {"directory": NFD_DIR, "files": files, "labels": labels}

    def topology(self):
        """``node_topology``'s ``topology`` (the same engine, default options); its notes go to ``notes``."""
        state = NodeTopology({"lspci": True, "nvidia_smi": True}, self.node).read()
        self.notes.extend("topology: %s" % note for note in state["notes"])
        return state["topology"]

    def nic_config(self):
        """The NV configuration of the node's NVIDIA/Mellanox NICs (Default, Current, Next Boot per
        parameter), the boot id and nic_config's record: what the audit compares with the plan."""
        section = nic_config_facts(self.host, self.runner, self.params.get("nic_config_pci_dir") or NIC_PCI_DEVICES,
                                   self.params.get("nic_config_tool") or "auto",
                                   self.params.get("nic_config_arrays") or [],
                                   self.params.get("nic_config_state_file") or NIC_STATE_FILE)
        if section.get("reason"):
            self.notes.append("nic_config: %s" % section["reason"])
        return section

    def last_run(self):
        """The node's own last pull run (last-run.json of playbooks/local.yml): when it last
        converged, at which revision, with which result; ``{"present": false}`` on a pushed node."""
        path = self.params.get("last_run_file") or LAST_RUN_FILE
        text = self.host.read_raw(path)
        if text is None:
            return {"present": False, "file": path}
        try:
            record = json.loads(text)
        except ValueError as exc:
            return {"present": True, "file": path, "result": "unreadable", "error": "%s: %s" % (path, exc)}
        if not isinstance(record, dict):
            return {"present": True, "file": path, "result": "unreadable", "error": "%s: not a JSON object" % path}
        out = {"present": True, "file": path}
        out.update((key, record.get(key)) for key in LAST_RUN_KEYS)
        for key in ("changed", "failed"):
            value = record.get(key)
            out[key] = [str(item) for item in value] if isinstance(value, list) else []
        return out

    def routing(self):
        """Policy rules, the routes of the other tables, addresses and the rails' ARP/rp_filter keys
        (``_rail_facts``): what the audit compares with the plan's rail_routing."""
        if self.runner is None:
            self.unavailable["routing"] = "no command runner"
            return None
        return routing_facts(self.host, self.runner, self._names())

    def _engine_params(self, cls, wanted):
        params = dict((key, spec.get("default")) for key, spec in cls.options().items())
        params.update((key, value) for key, value in wanted.items() if key in params and value is not None)
        params["root"] = self.params.get("root") or "/"
        return params

    def nic_affinity(self):
        """``nic_affinity``'s read and plan of the plan part given (the same engine, nothing changed): what a run
        would change (``actions``: the drift), each interface's IRQs and CPUs, notes; None without the part."""
        wanted = self.params.get("nic_affinity")
        if not wanted:
            return None
        from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
        from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity import NicAffinity

        engine = NicAffinity(self._engine_params(NicAffinity, wanted), self.node)
        try:
            engine.validate()
            state = engine.read()
            actions = engine.plan(state)
        except CapabilityError as exc:
            return {"error": exc.msg, "actions": [], "interfaces": [], "misplaced": [], "irqbalance": None}
        rows = engine._rows_out(after=False)
        return {"error": None, "actions": [a.public() for a in actions], "interfaces": rows,
                "misplaced": engine.misplaced, "irqbalance": engine.irqbalance, "notes": engine.notes}

    def ebpf(self):
        """``ebpf_readiness``'s findings for the plan part given (the same checks); None without the part."""
        wanted = self.params.get("ebpf")
        if not wanted:
            return None
        from ansible_collections.aiinfra.datapath.plugins.module_utils._ebpf_readiness import (
            EbpfReadiness,
            ready_features,
        )

        params = self._engine_params(EbpfReadiness, wanted)
        params["persist_bpffs"] = False
        engine = EbpfReadiness(params, self.node)
        findings = engine.evaluate(engine.read())
        return {"findings": findings, "features": ready_features(list(params["features"] or []), findings),
                "ready": not any(f["severity"] == "error" for f in findings)}

    # -- all ----------------------------------------------------------------------------
    def collect(self):
        facts = {"version": FACTS_VERSION, "gathered": [s for s in SECTIONS if s in self.gather]}
        facts["sysctl"] = self._section("sysctl", self.sysctl)
        facts["hugepages"] = self._section("hugepages", self.hugepages)
        facts["thp"] = self._section("thp", self.thp)
        facts["cmdline"] = self._section("cmdline", self.cmdline)
        memory = self._section("memory", self.memory)
        facts["memory_bytes"], facts["numa_nodes"] = memory if memory else (None, None)
        if "interfaces" in self.gather or "firmware" in self.gather:
            facts["interfaces"] = self._section("interfaces", self.interfaces) \
                if "interfaces" in self.gather else self._section("firmware", self.interfaces)
        else:
            facts["interfaces"] = None
        facts["qos"] = self._section("qos", self.qos)
        facts["storage"] = self._section("storage", self.storage)
        facts["nfd"] = self._section("nfd", self.nfd)
        facts["topology"] = self._section("topology", self.topology)
        facts["last_run"] = self._section("last_run", self.last_run)
        facts["nic_config"] = self._section("nic_config", self.nic_config)
        facts["routing"] = self._section("routing", self.routing)
        facts["nic_affinity"] = self._section("nic_affinity", self.nic_affinity)
        facts["ebpf"] = self._section("ebpf", self.ebpf)
        facts["unavailable"] = dict(sorted(self.unavailable.items()))
        facts["notes"] = self.notes
        return facts
