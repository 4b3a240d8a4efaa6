# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint burst across nodes (measure.checkpoint, module checkpoint_probe; docs/measure.md).

Per host: the slowest writer's MiB/s, the longest duration, the aggregate and read-back MiB/s and the
reader's rate during the burst against alone. Across hosts: the slowest writer of the whole run (the
MLPerf Storage rule: the checkpoint is done when its slowest rank is) and the longest duration; a host
whose slowest writer is below ``outlier_ratio`` x the median of the hosts' slowest writers (at least 3
hosts) is a ``slow-writer`` finding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .findings import finding
from .results import median


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def rows(hosts: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for host in order:
        c = _m(_m(_m(hosts.get(host)).get("checkpoint")).get("checkpoint"))
        if not c:
            continue
        slowest = _m(c.get("slowest_writer"))
        out.append({"host": host, "ok": bool(c.get("ok")), "error": c.get("error"),
                    "writers": len(c.get("writers") or []),
                    "size": c.get("size"), "slowest_writer": slowest.get("index"),
                    "slowest_writer_mib_s": slowest.get("mib_s"), "longest_seconds": c.get("longest_seconds"),
                    "aggregate_mib_s": c.get("aggregate_mib_s"), "read_back_mib_s": _m(c.get("read_back")).get("mib_s"),
                    "verified": _m(c.get("read_back")).get("verified"), "read_during_mib_s": c.get("read_during_mib_s"),
                    "read_alone_mib_s": c.get("read_alone_mib_s"), "read_ratio": c.get("read_ratio"),
                    "removed": c.get("removed")})
    return out


def summary(table: Sequence[Mapping[str, Any]], ratio: float) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The ``checkpoint`` part of measure.json and the findings."""
    if not table:
        return None, []
    found = []
    for r in table:
        if not r["ok"]:
            found.append(finding("probe-error", r["host"], f"checkpoint burst on {r['host']} failed: {r['error']}",
                                 "read the error; the burst writes only its own directory, bounded by max_free_share",
                                 {"error": r["error"]}, probe="storage"))
    ok = [r for r in table if r["ok"] and r["slowest_writer_mib_s"] is not None]
    slowest = min(ok, key=lambda r: r["slowest_writer_mib_s"]) if ok else None
    longest = max(ok, key=lambda r: r["longest_seconds"] or 0) if ok else None
    mid = median([r["slowest_writer_mib_s"] for r in ok])
    if ratio and mid and len(ok) >= 3:
        for r in ok:
            if r["slowest_writer_mib_s"] < ratio * mid:
                found.append(finding(
                    "slow-writer", r["host"],
                    f"the checkpoint's slowest writer on {r['host']} writes {r['slowest_writer_mib_s']} MiB/s against "
                    f"a median of {round(mid, 2)} MiB/s over the nodes' slowest writers; its burst takes "
                    f"{r['longest_seconds']} s", "check the cache device's write path on this node: health and "
                    "firmware (nvme smart-log), thermal throttling, a cgroup write limit, the filesystem's journal "
                    "and free space", {"slowest_writer_mib_s": r["slowest_writer_mib_s"],
                                       "median_mib_s": round(mid, 2), "longest_seconds": r["longest_seconds"]},
                    probe="storage"))
    part = {"hosts": list(table),
            "slowest": {"host": slowest["host"], "writer": slowest["slowest_writer"],
                        "mib_s": slowest["slowest_writer_mib_s"]} if slowest else None,
            "longest": {"host": longest["host"], "seconds": longest["longest_seconds"]} if longest else None,
            "median_slowest_writer_mib_s": round(mid, 2) if mid else None}
    return part, found


def markdown(part: Mapping[str, Any] | None) -> list[str]:
    if not part:
        return []
    lines = ["## Checkpoint burst", ""]
    if part["slowest"]:
        lines += [f"Slowest writer: {part['slowest']['host']} (writer {part['slowest']['writer']}, "
                  f"{part['slowest']['mib_s']} MiB/s); longest burst: {part['longest']['host']} "
                  f"({part['longest']['seconds']} s).", ""]
    lines += ["| host | writers | slowest writer MiB/s | longest s | aggregate MiB/s | read-back MiB/s | verified | "
              "read during / alone MiB/s | status |", "|---|---|---|---|---|---|---|---|---|"]
    for r in part["hosts"]:
        lines.append(f"| {r['host']} | {r['writers']} | {r['slowest_writer_mib_s']} | {r['longest_seconds']} | "
                     f"{r['aggregate_mib_s']} | {r['read_back_mib_s']} | {r['verified']} | "
                     f"{r['read_during_mib_s']} / {r['read_alone_mib_s']} | "
                     f"{'ok' if r['ok'] else 'error: ' + str(r['error'])} |")
    lines.append("")
    return lines
