# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small files and metadata across nodes (measure.small_files, module metadata_probe; docs/measure.md).

Per host, set and operation (create, stat, read, unlink): operations per second and p50/p99 latency.
A host whose rate of an operation is below ``outlier_ratio`` x the median of the same set and operation
on the other hosts (at least 3), in at least two operations, is a ``slow-metadata`` finding (one slow
figure is a neighbour's burst, as for slow-device).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .findings import finding
from .results import median

OPS = ("create", "stat", "read", "unlink")


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def rows(hosts: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for host in order:
        m = _m(_m(_m(hosts.get(host)).get("metadata")).get("metadata"))
        if not m:
            continue
        if not m.get("sets"):
            out.append({"host": host, "set": None, "ok": False, "error": m.get("error"), "files": None, "size": None,
                        "ops": {}})
        for s in m.get("sets") or []:
            out.append({"host": host, "set": s.get("name"), "ok": bool(s.get("ok")), "error": s.get("error"),
                        "files": s.get("files"), "size": s.get("size"), "ops": dict(_m(s.get("ops")))})
    return out


Part = list[Mapping[str, Any]]


def summary(table: Sequence[Mapping[str, Any]], ratio: float) -> tuple[Part | None, list[dict[str, Any]]]:
    if not table:
        return None, []
    found = [finding("probe-error", r["host"], f"small-file probe on {r['host']} failed: {r['error']}",
                     "read the error; the probe writes only its own directory, bounded by max_free_share",
                     {"set": r["set"], "error": r["error"]}, probe="storage") for r in table if not r["ok"]]
    slow: dict[str, list[dict[str, Any]]] = {}
    for name in sorted({str(r["set"]) for r in table if r["ok"]}):
        same = [r for r in table if r["ok"] and r["set"] == name]
        if not ratio or len(same) < 3:
            continue
        for op in OPS:
            mid = median([float(_m(r["ops"].get(op))["ops_s"]) for r in same if _m(r["ops"].get(op)).get("ops_s")])
            if not mid:
                continue
            for r in same:
                value = _m(r["ops"].get(op)).get("ops_s")
                if value is not None and value < ratio * mid:
                    slow.setdefault(f"{r['host']}\0{name}", []).append(
                        {"set": name, "op": op, "ops_s": value, "median_ops_s": round(mid, 1)})
    for key, items in sorted(slow.items()):
        host = key.split("\0")[0]
        if len(items) < 2:
            continue
        text = "; ".join(f"{i['set']} {i['op']} {i['ops_s']}/s vs median {i['median_ops_s']}/s" for i in items)
        found.append(finding("slow-metadata", host, f"small files on {host} are far slower than on its peers: {text}",
                             "check the cache filesystem on this node: its mount options and journal, free inodes, "
                             "the device's health (nvme smart-log), a cgroup I/O limit",
                             {"figures": items}, probe="storage"))
    return list(table), found


def markdown(part: Sequence[Mapping[str, Any]] | None) -> list[str]:
    if not part:
        return []
    lines = ["## Small files and metadata", "",
             "| host | set | files x bytes | " + " | ".join(f"{op} /s (p50/p99 µs)" for op in OPS) + " |",
             "|---|---|---|" + "---|" * len(OPS)]
    for r in part:
        if not r["ok"]:
            lines.append(f"| {r['host']} | {r['set']} | - | error: {r['error']} |" + " - |" * (len(OPS) - 1))
            continue
        cells = []
        for op in OPS:
            o = _m(r["ops"].get(op))
            cells.append(f"{o.get('ops_s')} ({o.get('p50_us')}/{o.get('p99_us')})")
        lines.append(f"| {r['host']} | {r['set']} | {r['files']} x {r['size']} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines
