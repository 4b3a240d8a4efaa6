# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU / NIC / NVMe / NUMA topology of a node and its direct-path readiness (stdlib only).

Read-only capability ``node_topology``. The source of truth is sysfs below ``root``:

* every PCI function (``/sys/bus/pci/devices``): class, vendor, ``numa_node``, ``local_cpulist``,
  ``current_link_speed``/``width`` and ``max_link_speed``/``width``, and its PCI path, the
  resolved ``/sys/devices/pciDDDD:BB/<root port>/<switch ports>.../<function>``: the host bridge
  and every bridge between it and the device;
* NICs through ``/sys/class/net/*/device`` and ``/sys/class/infiniband/*/device`` as well (a
  virtio NIC's netdev hangs below a virtio device, the PCI function is its first PCI ancestor);
  NVMe through ``/sys/class/nvme/*/device``;
* NUMA nodes from ``/sys/devices/system/node``; the IOMMU from ``/sys/class/iommu``, the group
  types and ``/proc/cmdline``; GPUDirect pieces from ``/sys/module`` and ``/etc/cufile.json``.

``lspci -vvv -D`` adds what only config space says (MaxPayload and MaxReadReq control vs
capability, ACS control on bridges, ATS); ``nvidia-smi -q -x`` gives the GPU index order and
``nvidia-smi topo -m`` the vendor's own matrix, which the result compares with its own pairing.
A tool that is missing or fails, or config space that cannot be read (not root), makes those
fields ``unknown`` with the reason in ``notes``; it is never an error.

Pairing ranks every GPU against every NIC and NVMe device the way ``nvidia-smi topo -m`` does
(:func:`relation`): PIX (at most one PCIe switch between them), PXB (several switches, below one
root port), PHB (same host bridge, different root ports), NODE (different host bridges, same
NUMA node), SYS (across NUMA nodes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology_parse import (
    RELATIONS,
    parse_cmdline,
    parse_lspci_vvv,
    parse_nvidia_smi_xml,
    parse_speed,
    parse_topo_matrix,
    parse_width,
)

PCI_DEVICES = "/sys/bus/pci/devices"
NODE_DIR = "/sys/devices/system/node"
RANK = dict((name, index) for index, name in enumerate(RELATIONS))
UNKNOWN = "unknown"

_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}\Z")

# Vendors whose display-class functions (VGA 0x0300, other 0x0380) are accelerators; any vendor's
# 3D controller (0x0302) is one. A BMC's VGA (ASPEED) is not.
GPU_VENDORS = ("0x10de", "0x1002")
IOMMU_KEYS = ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough", "iommu.strict")
PEER_MODULES = ("nvidia_peermem", "nv_peer_mem")
CUFILE = "/etc/cufile.json"


def rank(relation):
    """Sort key of a relation: PIX first, ``unknown`` last."""
    return RANK.get(relation, len(RELATIONS))


def relation(first, second, single_numa=False):
    """nvidia-smi's path class between two PCI functions described by :func:`Device`-like dicts.

    Each dict has ``host_bridge`` (``pci0000:00``), ``bridges`` (the PCI bridges from the root
    port down to the function's parent) and ``numa_node`` (int or None). Same host bridge: no
    common bridge -> PHB; else the bridges on the way up to the lowest common one and down again
    (the common one counted once): at most 3 (one switch: downstream, upstream, downstream port;
    or both on one port) -> PIX, more -> PXB. Different host bridges: NODE on one NUMA node, SYS
    across; an unknown NUMA node (``-1``) counts as the same only on a single-node machine.
    """
    if not first.get("host_bridge") or not second.get("host_bridge"):
        return UNKNOWN
    if first["host_bridge"] != second["host_bridge"]:
        one, two = first.get("numa_node"), second.get("numa_node")
        if one is None or two is None:
            return "NODE" if single_numa else UNKNOWN
        return "NODE" if one == two else "SYS"
    chain_one, chain_two = first.get("bridges") or [], second.get("bridges") or []
    common = 0
    while common < min(len(chain_one), len(chain_two)) and chain_one[common] == chain_two[common]:
        common += 1
    if common == 0:
        return "PHB"
    hops = (len(chain_one) - common) + (len(chain_two) - common) + 1
    return "PIX" if hops <= 3 else "PXB"


def path_bridges(first, second):
    """The bridges a transfer between two functions crosses below the host bridge (for ACS)."""
    chain_one, chain_two = first.get("bridges") or [], second.get("bridges") or []
    if first.get("host_bridge") != second.get("host_bridge"):
        return []
    common = 0
    while common < min(len(chain_one), len(chain_two)) and chain_one[common] == chain_two[common]:
        common += 1
    start = max(common - 1, 0)
    seen = []
    for bridge in chain_one[start:] + chain_two[start:]:
        if bridge not in seen:
            seen.append(bridge)
    return seen


def _int(text):
    try:
        return int(text, 0)
    except (TypeError, ValueError):
        return None


def classify(pci_class, vendor):
    """``gpu``, ``nic``, ``nvme``, ``bridge`` or None from the sysfs class and vendor strings."""
    value = _int(pci_class)
    if value is None:
        return None
    base, sub = value >> 16, (value >> 8) & 0xFF
    if base == 0x03 and (sub == 0x02 or (vendor in GPU_VENDORS and sub in (0x00, 0x80))):
        return "gpu"
    if base == 0x02 and sub in (0x00, 0x07, 0x80):
        return "nic"
    if value >> 8 == 0x0108:
        return "nvme"
    if base == 0x06 and sub == 0x04:
        return "bridge"
    return None


class NodeTopology(Capability):
    """GPUs, NICs, NVMe, NUMA, PCIe paths and link state, IOMMU and GPUDirect pieces (read-only)."""

    name = "node_topology"
    read_only = True

    @classmethod
    def options(cls):
        return dict(
            lspci=dict(type="bool", default=True),
            nvidia_smi=dict(type="bool", default=True),
        )

    # --- sysfs -----------------------------------------------------------------------------

    def _read(self, path, notes):
        """A sysfs attribute's text, None when absent; an unreadable one is noted, not raised."""
        try:
            return self.root.read(path)
        except (IOError, OSError) as exc:
            notes.append("cannot read %s: %s" % (path, exc.strerror or exc))
            return None

    def _node_path(self, real):
        """A resolved host path back to a node path (``/sys/devices/...``) below ``root``."""
        base = os.path.realpath(self.root.path("/"))
        if base == "/":
            return real
        rel = os.path.relpath(real, base)
        return None if rel.startswith("..") else "/" + rel

    def _resolve(self, path):
        return self._node_path(os.path.realpath(self.root.path(path)))

    @staticmethod
    def _pci_parts(path):
        """(host bridge, [BDF from the root port down to the function]) of a /sys/devices path."""
        host, chain = None, []
        for part in (path or "").split("/"):
            if _HOST_BRIDGE.match(part):
                host, chain = part, []
            elif host and _BDF.match(part):
                chain.append(part)
        return host, chain

    def _function(self, bdf, notes):
        base = "%s/%s" % (PCI_DEVICES, bdf)
        path = self._resolve(base)
        host, chain = self._pci_parts(path)
        if not chain or chain[-1] != bdf:
            host, chain = None, [bdf]
            notes.append("%s: no PCI path below a host bridge in %s" % (bdf, path))
        numa = _int(self._read(base + "/numa_node", notes))
        link = {
            "speed": parse_speed(self._read(base + "/current_link_speed", notes) or ""),
            "width": parse_width(self._read(base + "/current_link_width", notes) or ""),
            "max_speed": parse_speed(self._read(base + "/max_link_speed", notes) or ""),
            "max_width": parse_width(self._read(base + "/max_link_width", notes) or ""),
        }
        driver = self.root.path(base + "/driver")
        return {
            "pci": bdf,
            "class": self._read(base + "/class", notes),
            "vendor": self._read(base + "/vendor", notes),
            "device": self._read(base + "/device", notes),
            "driver": os.path.basename(os.readlink(driver)) if os.path.islink(driver) else None,
            "numa_node": numa if numa is not None and numa >= 0 else None,
            "local_cpulist": self._read(base + "/local_cpulist", notes),
            "host_bridge": host,
            "bridges": chain[:-1],
            "link": link,
            "virtual_function": self.root.exists(base + "/physfn"),
        }

    def _pci_of(self, class_path):
        """The PCI function (BDF) a class device (``/sys/class/net/eth0``) sits on, or None."""
        if not self.root.exists(class_path + "/device"):
            return None
        path = self._resolve(class_path + "/device")
        _host, chain = self._pci_parts(path)
        return chain[-1] if chain else None

    def _numa_nodes(self, notes):
        nodes = {}
        for entry in self.root.listdir(NODE_DIR):
            if re.match(r"^node\d+\Z", entry):
                cpulist = self._read("%s/%s/cpulist" % (NODE_DIR, entry), notes)
                nodes[int(entry[4:])] = cpulist or ""
        return dict((key, nodes[key]) for key in sorted(nodes))

    # --- read -------------------------------------------------------------------------------

    def read(self):
        notes = []
        functions = {}
        for bdf in self.root.listdir(PCI_DEVICES):
            if _BDF.match(bdf):
                functions[bdf] = self._function(bdf, notes)
        for entry in functions.values():
            entry["kind"] = classify(entry["class"], entry["vendor"])
            entry["netdevs"], entry["rdma"], entry["nvme"] = [], [], []
        self._attach("/sys/class/net", "netdevs", "nic", functions)
        self._attach("/sys/class/infiniband", "rdma", "nic", functions)
        self._attach("/sys/class/nvme", "nvme", "nvme", functions)
        numa_nodes = self._numa_nodes(notes)
        single_numa = len(numa_nodes) <= 1

        lspci = self._lspci(notes)
        smi_gpus, vendor_matrix = self._nvidia_smi(notes)

        gpus = sorted((f for f in functions.values() if f["kind"] == "gpu"), key=lambda f: f["pci"])
        nics = sorted((f for f in functions.values() if f["kind"] == "nic" and not f["virtual_function"]),
                      key=lambda f: f["pci"])
        vfs = [f["pci"] for f in functions.values() if f["kind"] == "nic" and f["virtual_function"]]
        nvmes = sorted((f for f in functions.values() if f["kind"] == "nvme"), key=lambda f: f["pci"])
        order = dict((gpu["pci"], gpu["index"]) for gpu in smi_gpus or [] if gpu.get("pci"))
        if gpus and order and not all(gpu["pci"] in order for gpu in gpus):
            notes.append("nvidia-smi -q -x does not list every GPU sysfs has: GPU index = PCI order")
            order = {}
        if not order:
            order = dict((gpu["pci"], index) for index, gpu in enumerate(gpus))
        gpus.sort(key=lambda gpu: order[gpu["pci"]])

        if gpus and smi_gpus is None and vendor_matrix is None and self.params.get("nvidia_smi", True) \
                and not self._which("nvidia-smi"):
            notes.append("nvidia-smi is not installed: GPUs are indexed in PCI order, no vendor matrix to compare")
        if not gpus:
            notes.append("no GPU on this node (no PCI function of class 3D controller, nor an NVIDIA/AMD "
                         "display function): nothing to pair")
        if vfs:
            notes.append("%d NIC virtual function(s) left out of the pairing" % len(vfs))

        bridges = {}
        out_gpus = []
        for gpu in gpus:
            entry = self._public(gpu, lspci, numa_nodes, single_numa)
            entry["index"] = order[gpu["pci"]]
            entry["name"] = self._gpu_name(gpu, smi_gpus)
            entry["nics"] = self._pairs(gpu, nics, "nic", lspci, bridges, single_numa)
            entry["nvme"] = self._pairs(gpu, nvmes, "nvme", lspci, bridges, single_numa)
            entry["nearest_nics"] = self._nearest(entry["nics"])
            entry["nearest_nvme"] = self._nearest(entry["nvme"])
            out_gpus.append(entry)
        out_nics = []
        for nic in nics:
            entry = self._public(nic, lspci, numa_nodes, single_numa)
            entry["name"] = (nic["rdma"] or nic["netdevs"] or [nic["pci"]])[0]
            entry["netdevs"], entry["rdma"] = nic["netdevs"], nic["rdma"]
            out_nics.append(entry)
        out_nvme = []
        for nvme in nvmes:
            entry = self._public(nvme, lspci, numa_nodes, single_numa)
            entry["name"] = (nvme["nvme"] or [nvme["pci"]])[0]
            entry["controllers"] = nvme["nvme"]
            out_nvme.append(entry)
        for function in gpus + nics + nvmes:
            for bdf in function["bridges"]:
                bridges.setdefault(bdf, None)
        for bdf in list(bridges):
            bridge = functions.get(bdf)
            bridges[bdf] = {"pci": bdf, "pcie": self._pcie(bdf, lspci),
                            "link": bridge["link"] if bridge else None}
        if gpus and not out_nics:
            notes.append("no NIC (PCI function of class network) on this node")
        if not nvmes:
            notes.append("no NVMe controller on this node (/sys/class/nvme lists none on a PCI function)")
        virtual = [name for name in self.root.listdir("/sys/class/net")
                   if name != "lo" and not self._pci_of("/sys/class/net/%s" % name)]
        topology = {
            "gpus": out_gpus,
            "nics": out_nics,
            "nvme": out_nvme,
            "virtual_interfaces": virtual,
            "bridges": dict((key, bridges[key]) for key in sorted(bridges)),
            "numa_nodes": dict((str(key), {"cpulist": value}) for key, value in numa_nodes.items()),
            "iommu": self._iommu(gpus + nics, notes),
            "gpudirect": self._gpudirect(notes),
            "vendor": self._compare(out_gpus, vendor_matrix),
            "tools": {"lspci": lspci["state"], "nvidia_smi": "read" if vendor_matrix or smi_gpus else
                      ("not used" if not self.params.get("nvidia_smi") else UNKNOWN)},
        }
        return {"topology": topology, "notes": notes}

    def _attach(self, class_dir, key, kind, functions):
        for name in self.root.listdir(class_dir):
            bdf = self._pci_of("%s/%s" % (class_dir, name))
            if bdf and bdf in functions:
                functions[bdf][key].append(name)
                if functions[bdf]["kind"] is None:
                    functions[bdf]["kind"] = kind

    def _public(self, function, lspci, numa_nodes, single_numa):
        numa = function["numa_node"]
        if numa is None and single_numa and numa_nodes:
            numa_value = list(numa_nodes)[0]
        else:
            numa_value = numa
        link = dict(function["link"])
        link["trained_down"] = self._trained_down(link)
        return {
            "pci": function["pci"],
            "vendor": function["vendor"],
            "device": function["device"],
            "driver": function["driver"],
            "numa_node": numa_value,
            "local_cpulist": function["local_cpulist"],
            "host_bridge": function["host_bridge"],
            "bridges": list(function["bridges"]),
            "root_port": function["bridges"][0] if function["bridges"] else None,
            "link": link,
            "pcie": self._pcie(function["pci"], lspci),
        }

    @staticmethod
    def _trained_down(link):
        """Width below capability (a fault), speed below (GPUs also do that when idle); None: unknown."""
        down = []
        if link.get("width") and link.get("max_width") and link["width"] < link["max_width"]:
            down.append("width")
        if link.get("speed") and link.get("max_speed") and link["speed"] < link["max_speed"]:
            down.append("speed")
        if not (link.get("width") and link.get("max_width")) and not (link.get("speed") and link.get("max_speed")):
            return None
        return down

    def _pcie(self, bdf, lspci):
        if lspci["state"] != "read":
            return {"known": False, "reason": lspci["reason"]}
        fields = lspci["devices"].get(bdf)
        if fields is None:
            return {"known": False, "reason": "lspci -vvv does not list %s" % bdf}
        if not fields["config_access"]:
            return {"known": False, "reason": "config space of %s not readable (lspci: <access denied>; "
                                              "run as root)" % bdf}
        return {"known": True, "express": fields["express"], "max_payload_cap": fields["max_payload_cap"],
                "max_payload": fields["max_payload"], "max_read_req": fields["max_read_req"],
                "acs_ctl": fields["acs_ctl"], "ats": fields["ats"],
                "link_cap": fields["link_cap"], "link_sta": fields["link_sta"]}

    def _pairs(self, gpu, devices, kind, lspci, bridges, single_numa):
        pairs = []
        for device in devices:
            rel = relation(gpu, device, single_numa)
            crossed = path_bridges(gpu, device)
            redirect, unknown = [], []
            for bdf in crossed:
                bridges.setdefault(bdf, None)
                pcie = self._pcie(bdf, lspci)
                if not pcie["known"]:
                    unknown.append(bdf)
                elif pcie["acs_ctl"] and (pcie["acs_ctl"].get("ReqRedir") or pcie["acs_ctl"].get("CmpltRedir")
                                          or pcie["acs_ctl"].get("EgressCtrl")):
                    redirect.append(bdf)
            if kind == "nic":
                name = (device["rdma"] or device["netdevs"] or [device["pci"]])[0]
            else:
                name = (device["nvme"] or [device["pci"]])[0]
            pairs.append({"name": name, "pci": device["pci"], "relation": rel, "numa_node": device["numa_node"],
                          "rdma": bool(device["rdma"]), "bridges": crossed, "acs_redirect": redirect,
                          "acs_unknown": unknown})
        pairs.sort(key=lambda pair: (rank(pair["relation"]), pair["pci"]))
        return pairs

    @staticmethod
    def _nearest(pairs):
        """Names at the best relation; among NICs only RDMA ones when the node has any (GPUDirect, NCCL)."""
        candidates = [pair for pair in pairs if pair["rdma"]] or pairs
        if not candidates or candidates[0]["relation"] == UNKNOWN:
            return []
        best = candidates[0]["relation"]
        return [pair["name"] for pair in candidates if pair["relation"] == best]

    @staticmethod
    def _gpu_name(gpu, smi_gpus):
        for entry in smi_gpus or []:
            if entry.get("pci") == gpu["pci"]:
                return entry.get("name")
        return None

    # --- tools ------------------------------------------------------------------------------

    def _which(self, name):
        """The tool's path; None when it is missing or the node gives no command runner (a reader of a
        recorded tree: sysfs only)."""
        return self.runner.which(name) if self.runner is not None else None

    def _lspci(self, notes):
        if not self.params.get("lspci", True):
            return {"state": "not used", "reason": "lspci: false", "devices": {}}
        binary = self._which("lspci")
        if not binary:
            reason = "lspci is not installed (pciutils): MaxPayload, MaxReadReq, ACS and ATS are unknown"
            notes.append(reason)
            return {"state": UNKNOWN, "reason": reason, "devices": {}}
        rc, out, err = self.runner.run([binary, "-vvv", "-D"], check=False)
        if rc != 0:
            reason = "lspci -vvv -D failed (rc=%s): %s" % (rc, (err or out or "").strip())
            notes.append(reason)
            return {"state": UNKNOWN, "reason": reason, "devices": {}}
        devices = parse_lspci_vvv(out)
        denied = sorted(bdf for bdf, fields in devices.items() if not fields["config_access"])
        if denied:
            notes.append("lspci could not read the config space of %d function(s) (not root): their "
                         "MaxPayload, MaxReadReq, ACS and ATS are unknown" % len(denied))
        return {"state": "read", "reason": None, "devices": devices}

    def _nvidia_smi(self, notes):
        if not self.params.get("nvidia_smi", True):
            return None, None
        binary = self._which("nvidia-smi")
        if not binary:
            return None, None
        gpus, matrix = None, None
        rc, out, err = self.runner.run([binary, "-q", "-x"], check=False)
        if rc == 0:
            try:
                gpus = parse_nvidia_smi_xml(out)
            except ValueError as exc:
                notes.append("nvidia-smi -q -x: not XML (%s): GPU index = PCI order" % exc)
        else:
            notes.append("nvidia-smi -q -x failed (rc=%s): %s" % (rc, (err or out or "").strip()))
        rc, out, err = self.runner.run([binary, "topo", "-m"], check=False)
        if rc == 0:
            matrix = parse_topo_matrix(out)
            if matrix is None:
                notes.append("nvidia-smi topo -m printed no matrix")
        else:
            notes.append("nvidia-smi topo -m failed (rc=%s): %s" % (rc, (err or out or "").strip()))
        return gpus, matrix

    @staticmethod
    def _compare(gpus, matrix):
        """The vendor matrix next to ours: every GPU x NIC cell both name, and where they differ."""
        if not matrix:
            return {"tool": None, "matrix": None, "agrees": None, "differences": []}
        ours = dict((gpu["index"], dict((pair["name"], pair["relation"]) for pair in gpu["nics"])) for gpu in gpus)
        differences = []
        compared = 0
        for index, cells in sorted(matrix["gpu_nic"].items()):
            for nic, theirs in sorted(cells.items()):
                mine = ours.get(index, {}).get(nic)
                if mine is None:
                    differences.append("GPU%d %s: nvidia-smi %s, not found in sysfs" % (index, nic, theirs))
                    continue
                compared += 1
                if mine != theirs:
                    differences.append("GPU%d %s: nvidia-smi %s, sysfs %s" % (index, nic, theirs, mine))
        return {"tool": "nvidia-smi topo -m", "matrix": dict((str(k), v) for k, v in matrix["gpu_nic"].items()),
                "agrees": not differences and compared > 0, "differences": differences}

    # --- IOMMU and GPUDirect ------------------------------------------------------------------

    def _iommu(self, functions, notes):
        units = self.root.listdir("/sys/class/iommu")
        cmdline = parse_cmdline(self._read("/proc/cmdline", notes) or "")
        args = dict((key, cmdline[key]) for key in IOMMU_KEYS if key in cmdline)
        types = {}
        for function in functions:
            value = self._read("%s/%s/iommu_group/type" % (PCI_DEVICES, function["pci"]), []) \
                if self.root.exists("%s/%s/iommu_group" % (PCI_DEVICES, function["pci"])) else None
            if value:
                types[function["pci"]] = value
        kinds = set(types.values())
        if not units:
            mode = "off"
        elif kinds & set(["DMA", "DMA-FQ"]):
            mode = "translated"
        elif kinds and kinds <= set(["identity"]):
            mode = "passthrough"
        elif args.get("iommu") == "pt" or args.get("iommu.passthrough") in ("1", "on"):
            mode = "passthrough"
        else:
            mode = UNKNOWN
            notes.append("IOMMU units present but no iommu_group/type and no iommu=pt: IOMMU mode unknown")
        return {"mode": mode, "units": units, "cmdline": args, "group_types": types}

    def _gpudirect(self, notes):
        modules = dict((name, self.root.exists("/sys/module/%s" % name))
                       for name in ("nvidia",) + PEER_MODULES + ("nvidia_fs",))
        cufile = {"present": False, "valid": None}
        text = None
        try:
            text = self.root.read_raw(CUFILE)
        except (IOError, OSError) as exc:
            notes.append("cannot read %s: %s" % (CUFILE, exc))
        if text is not None:
            cufile["present"] = True
            try:
                json.loads(re.sub(r"(?m)^\s*//.*$", "", text))
                cufile["valid"] = True
            except ValueError as exc:
                cufile["valid"] = False
                notes.append("%s is not valid JSON (after // comments): %s" % (CUFILE, exc))
        return {
            "modules": modules,
            "cufile_json": cufile,
            "rdma": any(modules[name] for name in PEER_MODULES),
            "storage": bool(modules["nvidia_fs"] and cufile["present"]),
        }

    def result(self, state, actions):
        return dict(topology=state["topology"], notes=state["notes"], changed=False)
