# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers of the tools ``node_topology`` reads besides sysfs (stdlib only).

* :func:`parse_lspci_vvv`: ``lspci -vvv [-D]`` -> per PCI function the PCI Express fields the
  findings need: DevCap/DevCtl MaxPayload, MaxReadReq, LnkCap/LnkSta, ACSCtl (bridges), ATS, NUMA
  node, and whether the capabilities could be read at all (``<access denied>`` without root).
* :func:`parse_topo_matrix`: ``nvidia-smi topo -m``, old (``mlx5_0`` columns) and new (``NIC0``
  columns with a ``NIC Legend``) formats -> GPU x NIC relation, CPU and NUMA affinity.
* :func:`parse_nvidia_smi_xml`: ``nvidia-smi -q -x`` -> GPUs in index order with bus id and
  PCIe generation/width current vs max.

Every parser takes text and returns plain data; nothing here reads the node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# nvidia-smi's path classes, nearest first (nvidia-smi topo -m legend).
RELATIONS = ("PIX", "PXB", "PHB", "NODE", "SYS")

# More CPUs than any kernel supports (NR_CPUS is at most 8192): a cpulist beyond it is garbage.
MAX_CPUS = 65536

# PCIe generation -> GT/s, for nvidia-smi's "max_link_gen".
GEN_SPEED = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}

_BDF = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s")
ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")


def normalize_bdf(text):
    """``01:00.0`` / ``0000:01:00.0`` / ``00000000:01:00.0`` -> ``0000:01:00.0`` (lower case), or None."""
    match = re.match(r"^\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s*\Z", text or "")
    if not match:
        return None
    domain = int(match.group(1) or "0", 16)
    return "%04x:%s:%s.%s" % (domain, match.group(2).lower(), match.group(3).lower(), match.group(4))


def parse_speed(text):
    """``16GT/s`` / ``16.0 GT/s PCIe`` / ``8 GT/s`` / ``2.5GT/s (downgraded)`` -> float GT/s, or None."""
    match = re.search(r"([0-9]+(?:\.[0-9]+)?)\s*GT/s", text or "")
    return float(match.group(1)) if match else None


def parse_width(text):
    """``x16`` / ``16`` / ``16x`` -> int, or None."""
    match = re.search(r"(?:^|\bx)\s*([0-9]{1,6})\b|^\s*([0-9]{1,6})x", (text or "").strip())
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def _bytes(text):
    match = re.match(r"\s*([0-9]{1,12})\s*bytes", text or "")
    return int(match.group(1)) if match else None


def parse_lspci_vvv(text):
    """``lspci -vvv`` (with or without ``-D``) -> ``{bdf: fields}``.

    ``fields``: ``description`` (the first line after the address), ``numa_node`` (int or None),
    ``config_access`` (False where lspci printed ``<access denied>``: not root, nothing below is
    known), ``express`` (the port type, for example ``Root Port``, ``Endpoint``, or None),
    ``max_payload_cap``, ``max_payload``, ``max_read_req`` (bytes), ``link_cap`` and ``link_sta``
    (``{"speed": GT/s, "width": lanes}``), ``acs_ctl`` (``{flag: bool}``, only where the function
    has an ACS capability), ``ats`` (``{"supported": bool, "enabled": bool or None}``) and
    ``driver``. Lines lspci did not print stay None.
    """
    devices = {}
    current = None
    section = None
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        match = _BDF.match(line)
        if match:
            bdf = normalize_bdf(line.split()[0])
            current = {"description": line[len(line.split()[0]):].strip(), "numa_node": None,
                       "config_access": True, "express": None, "max_payload_cap": None, "max_payload": None,
                       "max_read_req": None, "link_cap": None, "link_sta": None, "acs_ctl": None,
                       "ats": None, "driver": None}
            devices[bdf] = current
            section = None
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("NUMA node:"):
            value = stripped.split(":", 1)[1].strip()
            current["numa_node"] = int(value) if re.match(r"^-?[0-9]{1,6}\Z", value) else None
        elif stripped.startswith("Capabilities:") and "<access denied>" in stripped:
            current["config_access"] = False
        elif stripped.startswith("Capabilities:"):
            section = None
            express = re.search(r"Express \(v\d\) (.+?)(?:, MSI|, IntMsgNum|$)", stripped)
            if express:
                current["express"] = express.group(1).strip()
            if "Address Translation Service (ATS)" in stripped:
                current["ats"] = {"supported": True, "enabled": None}
                section = "ats"
            if "Access Control Services" in stripped:
                section = "acs"
        elif stripped.startswith("DevCap:"):
            if "MaxPayload" in stripped:
                current["max_payload_cap"] = _bytes(stripped.split("MaxPayload", 1)[1])
        elif stripped.startswith("MaxPayload") and "MaxReadReq" in stripped:
            # the second line of DevCtl: "MaxPayload 256 bytes, MaxReadReq 512 bytes"
            payload, _sep, read_req = stripped.partition(",")
            current["max_payload"] = _bytes(payload.replace("MaxPayload", "", 1))
            current["max_read_req"] = _bytes(read_req.strip().replace("MaxReadReq", "", 1))
        elif stripped.startswith("LnkCap:"):
            current["link_cap"] = {"speed": parse_speed(stripped), "width": _lnk_width(stripped)}
        elif stripped.startswith("LnkSta:"):
            current["link_sta"] = {"speed": parse_speed(stripped), "width": _lnk_width(stripped)}
        elif stripped.startswith("ACSCtl:"):
            current["acs_ctl"] = dict((flag, ("%s+" % flag) in stripped) for flag in ACS_FLAGS
                                      if ("%s+" % flag) in stripped or ("%s-" % flag) in stripped)
        elif stripped.startswith("ATSCtl:") or (section == "ats" and stripped.startswith("ATSCtl")):
            current["ats"] = {"supported": True, "enabled": "Enable+" in stripped}
        elif stripped.startswith("Kernel driver in use:"):
            current["driver"] = stripped.split(":", 1)[1].strip()
    return devices


def _lnk_width(line):
    match = re.search(r"Width x([0-9]{1,4})\b", line)
    return int(match.group(1)) if match else None


def parse_topo_matrix(text):
    """``nvidia-smi topo -m`` -> ``{"gpus": [index...], "nics": [name...], "gpu_nic": {index: {nic:
    relation}}, "cpu_affinity": {index: text}, "numa_affinity": {index: text}}``.

    NIC columns are named by their RDMA device: the new format's ``NICn`` columns are translated
    through the ``NIC Legend``; the old format has the device names (``mlx5_0``) as columns. ANSI
    underline escapes in the header are removed. Returns None when there is no matrix header.
    """
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in (text or "").splitlines()]
    legend = {}
    for line in lines:
        match = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*\Z", line)
        if match:
            legend[match.group(1)] = match.group(2)
    header = None
    for index, line in enumerate(lines):
        fields = line.split()
        if fields and fields[0] == "GPU0":
            header = index
            break
    if header is None:
        return None
    head = lines[header].replace("CPU Affinity", "CPU_Affinity").replace("NUMA Affinity", "NUMA_Affinity")
    head = head.replace("GPU NUMA ID", "GPU_NUMA_ID")
    columns = head.split()
    device_columns = [c for c in columns if c not in ("CPU_Affinity", "NUMA_Affinity", "GPU_NUMA_ID")]
    result = {"gpus": [], "nics": [], "gpu_nic": {}, "cpu_affinity": {}, "numa_affinity": {}}
    for column in device_columns:
        if re.match(r"^GPU[0-9]{1,6}\Z", column):
            result["gpus"].append(int(column[3:]))
        else:
            result["nics"].append(legend.get(column, column))
    for line in lines[header + 1:]:
        fields = line.split()
        if not fields or not re.match(r"^GPU[0-9]{1,6}\Z", fields[0]):
            if fields and fields[0] == "Legend:":
                break
            continue
        gpu = int(fields[0][3:])
        values = fields[1:]
        relations = {}
        for position, column in enumerate(device_columns):
            if position >= len(values):
                break
            if not re.match(r"^GPU[0-9]{1,6}\Z", column):
                relations[legend.get(column, column)] = values[position]
        result["gpu_nic"][gpu] = relations
        extra = values[len(device_columns):]
        if extra:
            result["cpu_affinity"][gpu] = extra[0]
        if len(extra) > 1:
            result["numa_affinity"][gpu] = extra[1]
    return result


def _xml_text(element, path):
    found = element.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return None if text in ("", "N/A") else text


def parse_nvidia_smi_xml(text):
    """``nvidia-smi -q -x`` -> ``[{"index", "pci", "name", "link": {"speed", "width", "max_speed",
    "max_width"}}]`` in the order nvidia-smi lists the GPUs (its index order).

    ``max_*`` is what both ends can do (``max_link_gen``, ``max_link_width``); the current values
    drop while a GPU idles (power saving), which is why a speed below max is not a fault by itself.
    Raises ValueError on text that is not XML.
    """
    from xml.etree import ElementTree

    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:  # a SyntaxError subclass: callers catch ValueError
        raise ValueError("not nvidia-smi XML: %s" % exc)
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        bus = normalize_bdf(gpu.get("id") or "") or normalize_bdf(_xml_text(gpu, "pci/pci_bus_id") or "")
        gen = _xml_text(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")
        max_gen = _xml_text(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")
        width = _xml_text(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width")
        max_width = _xml_text(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width")
        gpus.append({
            "index": index,
            "pci": bus,
            "name": _xml_text(gpu, "product_name"),
            "link": {
                "speed": GEN_SPEED.get(int(gen)) if gen and re.match(r"^[0-9]{1,2}\Z", gen) else None,
                "width": parse_width(width) if width else None,
                "max_speed": GEN_SPEED.get(int(max_gen)) if max_gen and re.match(r"^[0-9]{1,2}\Z", max_gen) else None,
                "max_width": parse_width(max_width) if max_width else None,
            },
        })
    return gpus


def parse_cpulist(text):
    """``0-3,8,10-11`` -> [0, 1, 2, 3, 8, 10, 11]; empty or bad text -> [] (also a list of more
    than MAX_CPUS CPUs, which no kernel has: garbage that would otherwise fill the memory)."""
    cpus = []
    for part in (text or "").strip().split(","):
        part = part.strip()
        if not part:
            continue
        match = re.match(r"^([0-9]{1,7})(?:-([0-9]{1,7}))?\Z", part)
        if not match:
            return []
        start = int(match.group(1))
        end = int(match.group(2) or start)
        if end - start + 1 + len(cpus) > MAX_CPUS:
            return []
        cpus.extend(range(start, end + 1))
    return cpus


def parse_cmdline(text):
    """``/proc/cmdline`` -> {key: value} (a bare flag maps to True; the last occurrence wins)."""
    args = {}
    for token in (text or "").split():
        key, sep, value = token.partition("=")
        args[key] = value if sep else True
    return args
