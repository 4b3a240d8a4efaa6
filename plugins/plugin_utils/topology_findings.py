# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Findings over one host's ``node_topology`` result (docs/topology.md), a pure function.

Each finding is an audit finding (the ``findings[]`` items of docs/schema/audit.schema.json)::

    {host, capability: "node_topology", check, key, wanted, actual, severity, kind: "finding", reason, fix}

``check`` is one of :data:`CHECKS`:

* ``link-trained-down``: a GPU, NIC or NVMe link narrower than both ends can do (warning), or slower
  (a NIC or NVMe: warning; a GPU: not reported, GPUs lower their link speed when idle);
* ``nic-numa``: a GPU whose nearest RDMA NIC is across the socket interconnect (SYS);
* ``acs-redirect``: ACS request/completion redirect on a bridge between a GPU and its nearest
  RDMA NIC or NVMe device (peer-to-peer goes up to the root complex: GPUDirect slow or off);
* ``max-payload``: MaxPayload set below what the device and every bridge above it can do;
* ``max-read-request``: a NIC's MaxReadReq below ``min_max_read_req`` (4096 by default);
* ``gpudirect-rdma`` / ``gpudirect-storage``: a GPUDirect piece missing where it is expected;
* ``iommu-translated``: DMA remapping (not passthrough) on a node that expects GPUDirect;

and, from the spec's ``topology`` section (``expect``):

* ``gpu-count`` / ``rdma-nic-count``: fewer or more GPUs or RDMA NICs than the spec says;
* ``gpu-nic-distance``: a GPU's nearest RDMA NIC farther than ``max_gpu_nic_relation`` (SYS is
  reported as ``nic-numa``);
* ``link-below-spec``: a GPU or RDMA NIC narrower than ``min_link_width``, an RDMA NIC slower than
  ``min_link_gen``.

Where the module could not tell (``pcie.known`` false, an unknown link), nothing is reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

CHECKS = ("link-trained-down", "nic-numa", "acs-redirect", "max-payload", "max-read-request", "gpudirect-rdma",
          "gpudirect-storage", "iommu-translated", "gpu-count", "rdma-nic-count", "gpu-nic-distance",
          "link-below-spec")
RELATIONS = ("PIX", "PXB", "PHB", "NODE", "SYS")
GEN_SPEED = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
GPUDIRECT = ("rdma", "storage")
DEFAULT_MIN_MAX_READ_REQ = 4096

Finding = dict[str, Any]


def _finding(host: str | None, check: str, key: str, wanted: Any, actual: Any, severity: str, reason: str,
             fix: str) -> Finding:
    return {"host": host, "capability": "node_topology", "check": check, "key": key, "wanted": wanted,
            "actual": actual, "severity": severity, "kind": "finding", "reason": reason, "fix": fix}


def _devices(topology: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for kind in ("gpus", "nics", "nvme"):
        for device in topology.get(kind) or []:
            yield kind[:-1] if kind != "nvme" else "nvme", device


def _label(kind: str, device: Mapping[str, Any]) -> str:
    if kind == "gpu":
        return "GPU%s (%s)" % (device.get("index"), device.get("pci"))
    return "%s (%s)" % (device.get("name") or device.get("pci"), device.get("pci"))


def _link(device: Mapping[str, Any]) -> dict[str, Any]:
    """Current and capable speed/width: sysfs first, lspci LnkSta/LnkCap where sysfs had none."""
    link = dict(device.get("link") or {})
    pcie = device.get("pcie") or {}
    if pcie.get("known"):
        sta, cap = pcie.get("link_sta") or {}, pcie.get("link_cap") or {}
        for key, source, field in (("speed", sta, "speed"), ("width", sta, "width"),
                                   ("max_speed", cap, "speed"), ("max_width", cap, "width")):
            if link.get(key) is None and source.get(field) is not None:
                link[key] = source[field]
    return link


def _parent_cap(device: Mapping[str, Any], bridges: Mapping[str, Any]) -> tuple[float | None, int | None]:
    chain = device.get("bridges") or []
    if not chain:
        return None, None
    parent = bridges.get(chain[-1]) or {}
    link = parent.get("link") or {}
    return link.get("max_speed"), link.get("max_width")


def link_findings(host: str | None, topology: Mapping[str, Any]) -> list[Finding]:
    out = []
    bridges = topology.get("bridges") or {}
    for kind, device in _devices(topology):
        link = _link(device)
        width, max_width = link.get("width"), link.get("max_width")
        speed, max_speed = link.get("speed"), link.get("max_speed")
        port_speed, port_width = _parent_cap(device, bridges)
        if max_width and port_width:
            max_width = min(max_width, port_width)
        if max_speed and port_speed:
            max_speed = min(max_speed, port_speed)
        short_width = bool(width and max_width and width < max_width)
        short_speed = bool(kind != "gpu" and speed and max_speed and speed < max_speed)
        if not (short_width or short_speed):
            continue
        out.append(_finding(
            host, "link-trained-down", device.get("pci") or "?", "x%s %s GT/s" % (max_width, max_speed),
            "x%s %s GT/s" % (width, speed), "warning",
            "%s: PCIe link trained to x%s at %s GT/s; the device and its port can do x%s at %s GT/s"
            % (_label(kind, device), width, speed, max_width, max_speed),
            "reseat the card or move it to a slot wired for the full width; check risers, retimers and the "
            "BIOS lane bifurcation; `lspci -vvv -s %s` LnkSta must match LnkCap after the fix"
            % device.get("pci")))
    return out


def numa_findings(host: str | None, topology: Mapping[str, Any]) -> list[Finding]:
    out = []
    for gpu in topology.get("gpus") or []:
        rdma = [pair for pair in gpu.get("nics") or [] if pair.get("rdma")]
        if not rdma:
            continue
        best = rdma[0]
        if best.get("relation") != "SYS":
            continue
        out.append(_finding(
            host, "nic-numa", "GPU%s" % gpu.get("index"), "an RDMA NIC on NUMA node %s" % gpu.get("numa_node"),
            "%s on NUMA node %s (SYS)" % (best.get("name"), best.get("numa_node")), "warning",
            "%s is on NUMA node %s but its nearest RDMA NIC %s is on NUMA node %s: every GPUDirect transfer "
            "crosses the socket interconnect"
            % (_label("gpu", gpu), gpu.get("numa_node"), best.get("name"), best.get("numa_node")),
            "put a NIC in a slot of the GPU's socket (one NIC per GPU pair, same PCIe switch), or schedule the "
            "GPU with a NIC of its own NUMA node; pin the process to the GPU's local_cpulist"))
    return out


def acs_findings(host: str | None, topology: Mapping[str, Any]) -> list[Finding]:
    out = []
    for gpu in topology.get("gpus") or []:
        for group, nearest in (("nics", gpu.get("nearest_nics") or []), ("nvme", gpu.get("nearest_nvme") or [])):
            for pair in gpu.get(group) or []:
                if pair.get("name") not in nearest or not pair.get("acs_redirect"):
                    continue
                out.append(_finding(
                    host, "acs-redirect", "GPU%s/%s" % (gpu.get("index"), pair.get("name")),
                    "ACS redirect off", "ReqRedir/CmpltRedir on %s" % ", ".join(pair["acs_redirect"]), "error",
                    "ACS redirects peer-to-peer requests between %s and %s (%s) to the root complex: GPUDirect "
                    "RDMA/Storage through that path is slow or refused (NVIDIA/nccl #1537)"
                    % (_label("gpu", gpu), pair.get("name"), pair.get("relation")),
                    "turn ACS off for those bridges: the BIOS option (PCIe ACS / ACS control), or at every boot "
                    "`setpci -s BDF ECAP_ACS+0x6.w=0000` for each of %s (no IOMMU isolation is needed between a "
                    "GPU and its NIC)" % ", ".join(pair["acs_redirect"])))
    return out


def _path_payload_cap(device: Mapping[str, Any], bridges: Mapping[str, Any]) -> int | None:
    caps = [(device.get("pcie") or {}).get("max_payload_cap")]
    for bdf in device.get("bridges") or []:
        pcie = (bridges.get(bdf) or {}).get("pcie") or {}
        caps.append(pcie.get("max_payload_cap") if pcie.get("known") else None)
    if any(cap is None for cap in caps):
        return None
    return min(int(cap) for cap in caps if cap is not None)


def payload_findings(host: str | None, topology: Mapping[str, Any],
                     min_max_read_req: int = DEFAULT_MIN_MAX_READ_REQ) -> list[Finding]:
    out = []
    bridges = topology.get("bridges") or {}
    for kind, device in _devices(topology):
        pcie = device.get("pcie") or {}
        if not pcie.get("known"):
            continue
        payload, cap = pcie.get("max_payload"), _path_payload_cap(device, bridges)
        if payload and cap and payload < cap:
            out.append(_finding(
                host, "max-payload", device.get("pci") or "?", cap, payload, "warning",
                "%s: MaxPayload %d bytes, the device and every bridge above it can do %d"
                % (_label(kind, device), payload, cap),
                "boot with `pci=pcie_bus_perf` (the kernel sets the largest MaxPayload the hierarchy allows) "
                "or raise Max Payload Size in the BIOS"))
        read_req = pcie.get("max_read_req")
        if kind == "nic" and read_req and read_req < min_max_read_req:
            out.append(_finding(
                host, "max-read-request", device.get("pci") or "?", min_max_read_req, read_req, "warning",
                "%s: MaxReadReq %d bytes; RDMA reads from host or GPU memory go in requests of at most that "
                "size (%d recommended for high-bandwidth NICs)" % (_label(kind, device), read_req, min_max_read_req),
                "set MaxReadReq to 4096 at every boot (`setpci -s %s CAP_EXP+0x8.w=5000:7000`), or on ConnectX with "
                "mlxconfig; `pci=pcie_bus_perf` caps MaxReadReq at MaxPayload, leave it off if the NIC needs 4096"
                % device.get("pci")))
    return out


def expected_gpudirect(topology: Mapping[str, Any], expect: Sequence[str] | None) -> list[str]:
    """What GPUDirect the node is expected to have: ``expect`` if given, else ``rdma`` on a node with
    GPUs and an RDMA NIC."""
    if expect is not None:
        return [item for item in GPUDIRECT if item in expect]
    has_rdma = any(nic.get("rdma") for nic in topology.get("nics") or [])
    return ["rdma"] if topology.get("gpus") and has_rdma else []


def gpudirect_findings(host: str | None, topology: Mapping[str, Any], expect: Sequence[str] | None = None
                       ) -> list[Finding]:
    out = []
    wanted = expected_gpudirect(topology, expect)
    pieces = topology.get("gpudirect") or {}
    modules = pieces.get("modules") or {}
    cufile = pieces.get("cufile_json") or {}
    if "rdma" in wanted and not pieces.get("rdma"):
        out.append(_finding(
            host, "gpudirect-rdma", "nvidia_peermem", "loaded", "not loaded", "error",
            "GPUDirect RDMA is expected but no peer-memory module is loaded (nvidia_peermem, or the older "
            "nv_peer_mem): NICs cannot DMA to GPU memory unless the stack uses DMA-BUF",
            "`modprobe nvidia-peermem` and list it in /etc/modules-load.d/ (it ships with the NVIDIA driver); "
            "or use DMA-BUF (open kernel modules, kernel 5.12 or later, NCCL 2.13 or later)"))
    if "storage" in wanted:
        missing = [name for name, present in (("nvidia_fs", modules.get("nvidia_fs")),
                                              ("/etc/cufile.json", cufile.get("present"))) if not present]
        if cufile.get("present") and cufile.get("valid") is False:
            missing.append("/etc/cufile.json (not valid JSON)")
        if missing:
            out.append(_finding(
                host, "gpudirect-storage", "nvidia_fs", "nvidia_fs loaded and /etc/cufile.json",
                "missing: %s" % ", ".join(missing), "error",
                "GPUDirect Storage is expected but %s is missing: cuFile reads fall back to a bounce buffer in "
                "host memory" % ", ".join(missing),
                "install the nvidia-fs (GDS) package, load nvidia_fs, and write /etc/cufile.json (gdscheck -p "
                "shows what cuFile sees)"))
    mode = (topology.get("iommu") or {}).get("mode")
    if wanted and mode == "translated":
        out.append(_finding(
            host, "iommu-translated", "iommu", "passthrough or off", "translated", "warning",
            "the IOMMU translates DMA for the GPUs and NICs: GPUDirect peer-to-peer needs ATS or fails, and "
            "every DMA pays an IOTLB lookup",
            "boot with `iommu=pt` (keeps the IOMMU for VFIO, identity-maps host devices) or turn the IOMMU off "
            "on GPUDirect nodes"))
    return out


def _rdma_nics(topology: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [nic for nic in topology.get("nics") or [] if nic.get("rdma")]


def spec_findings(host: str | None, topology: Mapping[str, Any], expect: Mapping[str, Any]) -> list[Finding]:
    """The checks the spec's ``topology`` section asks for (counts, distance, minimum links)."""
    out = []
    gpus = topology.get("gpus") or []
    wanted_gpus, wanted_nics = expect.get("gpus"), expect.get("rdma_nics")
    if wanted_gpus is not None and wanted_gpus != len(gpus):
        out.append(_finding(
            host, "gpu-count", "gpus", wanted_gpus, len(gpus), "error",
            "the node has %d GPU(s), the spec says %d" % (len(gpus), wanted_gpus),
            "check that every GPU is seated and powered and shows in `lspci -d 10de:`; a GPU that fell off the "
            "bus (Xid 79) needs a reset or a reboot; else correct topology.gpus"))
    rdma = _rdma_nics(topology)
    if wanted_nics is not None and wanted_nics != len(rdma):
        out.append(_finding(
            host, "rdma-nic-count", "rdma_nics", wanted_nics, len(rdma), "error",
            "the node has %d NIC(s) with an RDMA device (%s), the spec says %d"
            % (len(rdma), ", ".join(str(n.get("name")) for n in rdma) or "none", wanted_nics),
            "load the RDMA driver (mlx5_ib, irdma, bnxt_re) and check `rdma link`; a missing card shows in "
            "`lspci`; else correct topology.rdma_nics"))
    limit = expect.get("max_gpu_nic_relation") or "NODE"
    if limit in RELATIONS:
        for gpu in gpus:
            pairs = [pair for pair in gpu.get("nics") or [] if pair.get("rdma")]
            if not pairs or pairs[0].get("relation") not in RELATIONS or pairs[0]["relation"] == "SYS":
                continue  # SYS is nic-numa's
            best = pairs[0]
            if RELATIONS.index(best["relation"]) > RELATIONS.index(limit):
                out.append(_finding(
                    host, "gpu-nic-distance", "GPU%s" % gpu.get("index"), limit, best["relation"], "warning",
                    "%s: nearest RDMA NIC %s is %s, the spec allows at most %s"
                    % (_label("gpu", gpu), best.get("name"), best["relation"], limit),
                    "move the NIC (or the GPU) into a slot under the same PCIe switch, or relax "
                    "topology.max_gpu_nic_relation for this node class"))
    min_width, min_gen = expect.get("min_link_width"), expect.get("min_link_gen")
    for kind, device in _devices(topology):
        if kind == "nvme" or (kind == "nic" and not device.get("rdma")):
            continue
        link = _link(device)
        if min_width and link.get("width") and link["width"] < min_width:
            out.append(_finding(
                host, "link-below-spec", "%s/width" % device.get("pci"), "x%d" % min_width, "x%d" % link["width"],
                "warning", "%s: PCIe link x%d, the spec asks for at least x%d"
                % (_label(kind, device), link["width"], min_width),
                "move the card to a slot wired for x%d (check risers and BIOS bifurcation)" % min_width))
        speed = GEN_SPEED.get(int(min_gen)) if min_gen else None
        if kind == "nic" and speed and link.get("speed") and link["speed"] < speed:
            out.append(_finding(
                host, "link-below-spec", "%s/speed" % device.get("pci"), "%s GT/s" % speed,
                "%s GT/s" % link["speed"], "warning",
                "%s: PCIe link at %s GT/s, the spec asks for at least Gen%s (%s GT/s)"
                % (_label(kind, device), link["speed"], min_gen, speed),
                "use a slot of that generation (and a riser that carries it); check the BIOS link speed setting"))
    return out


def topology_findings(host: str | None, topology: Mapping[str, Any] | None,
                      expect: Mapping[str, Any] | None = None) -> list[Finding]:
    """Every finding of one host's ``node_topology`` ``topology`` result.

    ``expect`` is the spec's ``topology`` section (docs/spec.md, ``Topology``): ``gpus``,
    ``rdma_nics``, ``max_gpu_nic_relation`` (default NODE), ``min_link_width``, ``min_link_gen``,
    ``acs_off`` (default true), ``gpudirect`` (a list of ``rdma``/``storage``; default ``rdma`` where
    the node has GPUs and an RDMA NIC) and ``min_max_read_req`` (bytes, default 4096). ``None``
    topology (not gathered): no findings.
    """
    if not topology:
        return []
    expect = expect or {}
    read_req = int(expect.get("min_max_read_req") or DEFAULT_MIN_MAX_READ_REQ)
    acs = acs_findings(host, topology) if expect.get("acs_off", True) else []
    return (link_findings(host, topology) + numa_findings(host, topology) + acs
            + payload_findings(host, topology, read_req)
            + gpudirect_findings(host, topology, expect.get("gpudirect"))
            + spec_findings(host, topology, expect))
