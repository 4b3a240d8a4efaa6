# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Baselines per node class (``measure_baseline: record | compare``, docs/measure.md#baselines).

A node's class is its golden-topology class (the spec's ``topology.golden``), else the host itself (a
class of one). Its figures are what measure.json says about it: per fabric its best pair's
Gbit/s (and the saturation knee where a sweep ran), per storage target the sequential MiB/s and the
random-read IOPS at QD1 and QD32 — all "higher is better".

``record`` adds this run to each class's baseline file (``runs``, the last ``runs_kept``): per figure
the median over the class's nodes, with the run's plan hashes, kernels and firmware versions; the
baseline of a figure is the median over the kept runs. ``compare`` fails a node whose figure is below
``baseline x (1 - tolerance)``: finding ``baseline-regression`` naming the figure, the baseline's and
today's value, the change, and what differs since the baseline (plan hash, kernel, firmware).
Controller side, pure functions; files are written by the role.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .findings import finding
from .results import median

FORMAT = "aiinfra.datapath/measure-baseline/1"
DEFAULT_TOLERANCE = 0.1
DEFAULT_RUNS = 3
STORAGE_FIGURES = (("seq_read_mib_s", "MiB/s"), ("iops_qd1", "IOPS"), ("iops_qd32", "IOPS"))
NET_FIGURES = (("best_gbit_s", "Gbit/s"),)  # the best pair: its own port, not its peers'


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def plan_hash(plan: Mapping[str, Any] | None) -> str | None:
    """sha256 (first 16 hex digits) of the host's plan as canonical JSON, without its ``measure`` part (the
    measurement settings are not the node's configuration)."""
    if not isinstance(plan, Mapping):
        return None
    body = {k: v for k, v in plan.items() if k != "measure"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


def parse_versions(stdout: str | None) -> dict[str, Any]:
    """The role's version probe: line 1 the kernel release, then ``IFACE FIRMWARE`` per measured interface
    (an empty firmware: none reported, e.g. a veth)."""
    lines = (stdout or "").splitlines()
    firmware = {}
    for line in lines[1:]:
        name, _sep, version = line.strip().partition(" ")
        if name:
            firmware[name] = version.strip() or None
    return {"kernel": lines[0].strip() if lines and lines[0].strip() else None, "firmware": firmware}


def node_class(plan: Mapping[str, Any] | None, host: str) -> str:
    golden = _m(_m(plan).get("node_topology")).get("golden")
    return str(golden) if golden else host


def node_figures(report: Mapping[str, Any], host: str) -> dict[str, dict[str, Any]]:
    """``{figure: {value, unit}}`` of one host in a measure.json document."""
    out: dict[str, dict[str, Any]] = {}
    for fabric, stats in sorted(_m(report.get("fabrics")).items()):
        node = _m(_m(stats.get("nodes")).get(host))
        for key, unit in NET_FIGURES:
            if node.get(key) is not None:
                out[f"{fabric}.{key}"] = {"value": node[key], "unit": unit}
    for fabric, sweep in sorted(_m(_m(report.get("saturation")).get("fabrics")).items()):
        knee = _m(_m(sweep.get("nodes")).get(host)).get("knee_gbit_s")
        if knee is not None:
            out[f"{fabric}.knee_gbit_s"] = {"value": knee, "unit": "Gbit/s"}
    for row in report.get("storage") or []:
        if row.get("host") != host or not row.get("ok"):
            continue
        for key, unit in STORAGE_FIGURES:
            if row.get(key) is not None:
                out[f"storage.{row['name']}.{key}"] = {"value": row[key], "unit": unit}
    return out


def class_run(report: Mapping[str, Any], members: Sequence[str],
              info: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One run of one class: per figure the median over its nodes; the nodes' plan hashes, kernels, firmware."""
    values: dict[str, list[float]] = {}
    units: dict[str, str] = {}
    for host in members:
        for name, fig in node_figures(report, host).items():
            values.setdefault(name, []).append(float(fig["value"]))
            units[name] = fig["unit"]
    return {"generated_at": report.get("generated_at"), "hosts": sorted(members),
            "figures": {k: {"value": round(median(v) or 0.0, 4), "unit": units[k]} for k, v in sorted(values.items())},
            "plan_hash": sorted({str(_m(info.get(h)).get("plan_hash")) for h in members}),
            "kernel": sorted({str(_m(info.get(h)).get("kernel")) for h in members}),
            "firmware": sorted({f"{i} {v}" for h in members
                                for i, v in sorted(_m(_m(info.get(h)).get("firmware")).items()) if v})}


def classes(info: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for host, data in sorted(info.items()):
        out.setdefault(str(data.get("class") or host), []).append(host)
    return out


def record(report: Mapping[str, Any], info: Mapping[str, Mapping[str, Any]], existing: Mapping[str, Any],
           runs_kept: int = DEFAULT_RUNS) -> dict[str, dict[str, Any]]:
    """The new baseline document of every class measured in ``report`` (``existing``: {class: document})."""
    out = {}
    for cls, members in classes(info).items():
        old = _m(existing.get(cls))
        runs = [r for r in old.get("runs") or [] if isinstance(r, Mapping)] if old.get("format") == FORMAT else []
        runs = [*runs, class_run(report, members, info)][-max(1, runs_kept):]
        names = sorted({n for r in runs for n in _m(r.get("figures"))})
        baseline = {}
        for name in names:
            vals = [float(r["figures"][name]["value"]) for r in runs if name in _m(r.get("figures"))]
            unit = next(r["figures"][name]["unit"] for r in runs if name in _m(r.get("figures")))
            baseline[name] = {"value": round(median(vals) or 0.0, 4), "unit": unit, "runs": len(vals)}
        last = runs[-1]
        out[cls] = {"format": FORMAT, "class": cls, "runs_kept": runs_kept, "figures": baseline,
                    "plan_hash": last["plan_hash"], "kernel": last["kernel"], "firmware": last["firmware"],
                    "runs": runs}
    return out


def _changes(doc: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """What differs on this node from what the baseline recorded."""
    out = {}
    now = {"plan_hash": data.get("plan_hash"), "kernel": data.get("kernel")}
    for key, value in now.items():
        if value is not None and doc.get(key) and str(value) not in doc[key]:
            out[key] = {"baseline": doc[key], "now": value}
    firmware = sorted(f"{i} {v}" for i, v in sorted(_m(data.get("firmware")).items()) if v)
    if sorted(doc.get("firmware") or []) != firmware and (firmware or doc.get("firmware")):
        out["firmware"] = {"baseline": doc.get("firmware") or [], "now": firmware}
    return out


def compare(report: Mapping[str, Any], info: Mapping[str, Mapping[str, Any]], baselines: Mapping[str, Any],
            tolerance: float = DEFAULT_TOLERANCE) -> list[dict[str, Any]]:
    """``baseline-regression`` findings (error) for every node figure below its class baseline beyond
    ``tolerance``; ``baseline-missing`` (warning) for a class with no baseline."""
    out = []
    for cls, members in classes(info).items():
        doc = _m(baselines.get(cls))
        if doc.get("format") != FORMAT:
            for host in members:
                out.append(finding("baseline-missing", host, f"no measure baseline for class {cls}",
                                   "record one on known-good nodes: measure.yml -e measure_baseline=record",
                                   {"class": cls}, severity="warning"))
            continue
        for host in members:
            data = _m(info.get(host))
            changes = _changes(doc, data)
            for name, fig in node_figures(report, host).items():
                base = _m(_m(doc.get("figures")).get(name)).get("value")
                if not base:
                    continue
                value = float(fig["value"])
                if value >= base * (1 - tolerance):
                    continue
                change = round((value - base) / base * 100, 1)
                since = "; since the baseline: " + ", ".join(
                    f"{k} {v['baseline']} -> {v['now']}" for k, v in changes.items()) if changes else \
                    "; plan, kernel and firmware are as recorded"
                fabric, _dot, _rest = name.partition(".")
                out.append(finding(
                    "baseline-regression", host,
                    f"{name} of {host} is {value:g} {fig['unit']} against the class {cls} baseline {base:g} "
                    f"{fig['unit']} ({change:+g} %, tolerance {tolerance * 100:g} %){since}",
                    "find what changed (the evidence lists plan, kernel and firmware differences); if the change is "
                    "intended, record a new baseline (measure_baseline=record)",
                    {"class": cls, "figure": name, "baseline": base, "value": value, "unit": fig["unit"],
                     "change_pct": change, "tolerance": tolerance, "changed": changes},
                    fabric=fabric if fabric != "storage" else None,
                    device=name.split(".")[1] if fabric == "storage" else None,
                    probe="storage" if fabric == "storage" else "network"))
    return out
