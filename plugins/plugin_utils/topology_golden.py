# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Golden topology per node class (docs/topology.md "Golden topology"), pure functions.

:func:`fingerprint` reduces one host's ``node_topology`` result to what every node of one class (the
same server model, the same cards in the same slots) has in common: each GPU, NIC and NVMe device by
PCI address with its vendor and device id, NUMA node, root port and link capability, and each GPU's
nearest RDMA NICs and NVMe devices with their class. What varies between healthy nodes of a class is
left out: serial numbers, the current link speed (GPUs lower it when idle), a link that trained down
(``link-trained-down`` reports it), netdev names.

The audit writes a fingerprint per host (``reports/topology/<host>.json``); an operator copies the one of
a known-good node to ``<inventory>/topology-golden/<class>.json`` and names the class in the spec
(``topology.golden``). :func:`golden_findings` then names every element in which a node differs from its
class's golden one (check ``golden-topology``): a device missing or extra (error), or placed, linked or
paired differently (warning).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FORMAT = "aiinfra.datapath/topology-golden/1"
CHECK = "golden-topology"
KINDS = (("gpus", "GPU"), ("nics", "NIC"), ("nvme", "NVMe"))

Finding = dict[str, Any]


def _link_cap(device: Mapping[str, Any]) -> str | None:
    link = device.get("link") or {}
    pcie = device.get("pcie") or {}
    cap = (pcie.get("link_cap") or {}) if pcie.get("known") else {}
    width = link.get("max_width") or cap.get("width")
    speed = link.get("max_speed") or cap.get("speed")
    if not width and not speed:
        return None
    return "x%s %s GT/s" % (width if width else "?", speed if speed else "?")


def _nearest(gpu: Mapping[str, Any], group: str, names: list[str]) -> dict[str, Any]:
    pairs = [pair for pair in gpu.get(group) or [] if pair.get("name") in names]
    return {"pci": sorted(str(pair.get("pci")) for pair in pairs),
            "relation": pairs[0].get("relation") if pairs else None}


def fingerprint(topology: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The comparable part of one host's topology; None when the host has no PCI GPU, NIC or NVMe
    device (nothing to compare: a lab node, a VM with virtio only)."""
    if not topology or not any(topology.get(kind) for kind, _label in KINDS):
        return None
    out: dict[str, Any] = {"format": FORMAT,
                           "numa_nodes": sorted(str(node) for node in topology.get("numa_nodes") or {}),
                           "iommu": (topology.get("iommu") or {}).get("mode")}
    for kind, _label in KINDS:
        items = []
        for device in sorted(topology.get(kind) or [], key=lambda d: str(d.get("pci"))):
            item: dict[str, Any] = {
                "pci": device.get("pci"), "vendor": device.get("vendor"), "device": device.get("device"),
                "numa_node": device.get("numa_node"), "root_port": device.get("root_port"),
                "link_cap": _link_cap(device), "name": device.get("name")}
            if kind == "gpus":
                item["index"] = device.get("index")
                item["nearest_nics"] = _nearest(device, "nics", list(device.get("nearest_nics") or []))
                item["nearest_nvme"] = _nearest(device, "nvme", list(device.get("nearest_nvme") or []))
            if kind == "nics":
                item["rdma"] = sorted(device.get("rdma") or [])
            items.append(item)
        out[kind] = items
    return out


def _finding(host: str | None, key: str, wanted: Any, actual: Any, severity: str, reason: str, fix: str
             ) -> Finding:
    return {"host": host, "capability": "node_topology", "check": CHECK, "key": key, "wanted": wanted,
            "actual": actual, "severity": severity, "kind": "finding", "reason": reason, "fix": fix}


def _what(label: str, item: Mapping[str, Any]) -> str:
    if label == "GPU":
        index = item.get("index")
        return "GPU%s (%s)" % (index, item.get("pci")) if index is not None else "GPU %s" % item.get("pci")
    name = item.get("name")
    return "%s %s (%s)" % (label, name, item.get("pci")) if name else "%s %s" % (label, item.get("pci"))


FIELDS = (
    ("vendor", "vendor:device", "a different card in that slot"),
    ("device", "vendor:device", "a different card in that slot"),
    ("numa_node", "NUMA node", "the slot is wired to another socket, or the BIOS NUMA setting (NPS/SNC) differs"),
    ("root_port", "root port", "the card sits below another root port: a different slot or riser"),
    ("link_cap", "link capability", "a slot, riser or card of another width or generation"),
)


def _compare_item(host: str | None, golden_name: str, label: str, want: Mapping[str, Any],
                  have: Mapping[str, Any]) -> list[Finding]:
    out = []
    what = _what(label, have)
    seen: set[str] = set()
    wanted: Any
    actual: Any
    for field, words, cause in FIELDS:
        if words in seen or want.get(field) == have.get(field):
            continue
        if field in ("vendor", "device"):
            seen.add(words)
            wanted = "%s:%s" % (want.get("vendor"), want.get("device"))
            actual = "%s:%s" % (have.get("vendor"), have.get("device"))
        else:
            wanted, actual = want.get(field), have.get(field)
        out.append(_finding(
            host, "%s/%s" % (have.get("pci"), field.replace("_", "-") if field not in ("vendor", "device")
                             else "id"), wanted, actual, "warning",
            "%s: %s %s, the golden topology %s has %s" % (what, words, actual, golden_name, wanted),
            "%s; compare `lspci -vvv -s %s` with a good node of the class" % (cause, have.get("pci"))))
    if label == "GPU":
        for group, words in (("nearest_nics", "nearest RDMA NICs"), ("nearest_nvme", "nearest NVMe devices")):
            w, h = want.get(group) or {}, have.get(group) or {}
            if w == h:
                continue
            out.append(_finding(
                host, "%s/%s" % (have.get("pci"), group.replace("_", "-")),
                "%s %s" % (",".join(w.get("pci") or []) or "none", w.get("relation") or ""),
                "%s %s" % (",".join(h.get("pci") or []) or "none", h.get("relation") or ""), "warning",
                "%s: %s %s (%s), the golden topology %s has %s (%s)"
                % (what, words, ", ".join(h.get("pci") or []) or "none", h.get("relation"), golden_name,
                   ", ".join(w.get("pci") or []) or "none", w.get("relation")),
                "a card in another slot changes which GPU shares a PCIe switch with which NIC (NCCL rails cross "
                "switches); put the cards back in the golden slots"))
    return out


def golden_findings(host: str | None, topology: Mapping[str, Any] | None, golden: Mapping[str, Any] | None,
                    golden_name: str) -> list[Finding]:
    """Every element in which ``topology`` (a ``node_topology`` result) differs from ``golden`` (a
    :func:`fingerprint`). ``golden`` None: the class has no golden file yet (one error naming the
    file to create)."""
    if golden is None:
        return [_finding(
            host, "golden", "topology-golden/%s.json" % golden_name, None, "error",
            "the spec names the golden topology %s but the audit found no topology-golden/%s.json"
            % (golden_name, golden_name),
            "copy the audit's reports/topology/<host>.json of a known-good node of the class to "
            "<inventory>/topology-golden/%s.json (or set audit_topology_golden_dir)" % golden_name)]
    if golden.get("format") != FORMAT:
        return [_finding(
            host, "golden", FORMAT, golden.get("format"), "error",
            "topology-golden/%s.json is not a golden topology (format %r)" % (golden_name, golden.get("format")),
            "write it from the audit's reports/topology/<host>.json of a known-good node")]
    live = fingerprint(topology) or {"format": FORMAT, "numa_nodes": [], "iommu": None}
    out: list[Finding] = []
    if live.get("numa_nodes") != golden.get("numa_nodes"):
        out.append(_finding(
            host, "numa-nodes", len(golden.get("numa_nodes") or []), len(live.get("numa_nodes") or []), "warning",
            "the node has NUMA nodes %s, the golden topology %s has %s"
            % (",".join(live.get("numa_nodes") or []) or "none", golden_name,
               ",".join(golden.get("numa_nodes") or []) or "none"),
            "the BIOS NUMA setting (NPS on AMD, SNC on Intel) or the memory population differs from the class"))
    if live.get("iommu") != golden.get("iommu"):
        out.append(_finding(
            host, "iommu", golden.get("iommu"), live.get("iommu"), "warning",
            "IOMMU mode %s, the golden topology %s has %s" % (live.get("iommu"), golden_name, golden.get("iommu")),
            "the kernel command line (iommu=pt, intel_iommu=, amd_iommu=) or the BIOS differs from the class"))
    for kind, label in KINDS:
        want = {str(item.get("pci")): item for item in golden.get(kind) or []}
        have = {str(item.get("pci")): item for item in live.get(kind) or []}
        for pci in sorted(set(want) - set(have)):
            out.append(_finding(
                host, pci, _what(label, want[pci]), "missing", "error",
                "%s of the golden topology %s is missing" % (_what(label, want[pci]), golden_name),
                "check that the card is seated and powered and shows in `lspci -s %s`; a device that fell off "
                "the bus needs a reset or a reboot" % pci))
        for pci in sorted(set(have) - set(want)):
            out.append(_finding(
                host, pci, "absent", _what(label, have[pci]), "error",
                "%s is not in the golden topology %s" % (_what(label, have[pci]), golden_name),
                "a card the class does not have, or one in another slot (then its golden slot is missing too)"))
        for pci in sorted(set(want) & set(have)):
            out.extend(_compare_item(host, golden_name, label, want[pci], have[pci]))
    return out
