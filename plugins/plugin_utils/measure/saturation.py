# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Saturation sweeps: one figure measured at a doubling load, the curve and its knee.

Per fabric, every pair of the schedule is run again with 1, 2, 4 … N TCP streams (Gbit/s); per
storage target, 4 KiB random reads at queue depth 1, 2 … 256 (IOPS) and sequential reads with
blocks of 4 KiB … 4 MiB (MiB/s). The **knee** of a curve is the load before the first doubling
that gains less than ``knee_share`` (default 5 %) of the figure: more load no longer buys more,
the path is saturated there, at that figure. A curve still gaining at its last point has no knee
(``saturated: false``): the sweep's top is too low to find it.

Input: per host what the role registered (``sweep_net``: records like the schedule's rounds, each
with ``streams``; ``sweep_storage``: a storage_probe result whose targets carry ``random`` per queue
depth and ``sequential_by_block`` per block size in KiB). Output: :func:`sweeps` (the ``saturation``
part of measure.json), :func:`markdown` (its section of measure.md), :func:`curve_svg` (one SVG per
fabric and per storage figure). Deterministic for the same input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

from .results import join_pair, median, num

DEFAULT_KNEE_SHARE = 0.05
Point = dict[str, Any]


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def doublings(low: int, high: int) -> list[int]:
    """low, 2 low, 4 low … up to high (high itself included when it is not a doubling of low)."""
    if low < 1 or high < low:
        raise ValueError(f"a sweep needs 1 <= low <= high, got {low}..{high}")
    out = [low]
    while out[-1] * 2 <= high:
        out.append(out[-1] * 2)
    if out[-1] != high:
        out.append(high)
    return out


def knee(points: Sequence[Mapping[str, Any]], share: float = DEFAULT_KNEE_SHARE) -> dict[str, Any]:
    """The knee of a curve ``[{x, value}]`` (sorted by x; points without a value are skipped).

    ``gains`` lists each step's relative gain; the knee is the x before the first step gaining less
    than ``share``, with its value; ``peak`` is the best value of the curve."""
    pts = [p for p in points if p.get("value") is not None]
    gains = []
    found = None
    for before, after in zip(pts, pts[1:], strict=False):
        gain = (after["value"] - before["value"]) / before["value"] if before["value"] > 0 else math.inf
        gains.append({"from": before["x"], "to": after["x"], "gain": None if math.isinf(gain) else round(gain, 4)})
        if found is None and gain < share:
            found = before
    peak = max((p["value"] for p in pts), default=None)
    if not pts:
        return {"knee_x": None, "knee_value": None, "peak": None, "saturated": False, "gains": [], "share": share}
    at = found or pts[-1]
    return {"knee_x": at["x"], "knee_value": round(at["value"], 4),
            "peak": round(peak, 4) if peak is not None else None, "saturated": found is not None,
            "gains": gains, "share": share}


def _curve(points: Sequence[Point], share: float) -> dict[str, Any]:
    return {"points": [{"x": p["x"], "value": None if p["value"] is None else round(p["value"], 4),
                        **({"error": p["error"]} if p.get("error") else {})} for p in points], **knee(points, share)}


# --------------------------------------------------------------------------- network
def network_sweeps(schedule: Mapping[str, Any], hosts: Mapping[str, Mapping[str, Any]],
                   share: float) -> dict[str, Any]:
    """Per fabric: each pair's curve (Gbit/s over streams) with its knee, and the fabric's curve (the
    median over the pairs at each stream count) with its knee."""
    records: dict[tuple[str, int, int], Mapping[str, Any]] = {}
    counts: set[int] = set()
    for host, data in hosts.items():
        for rec in data.get("sweep_net") or []:
            if isinstance(rec, Mapping) and rec.get("round") is not None and rec.get("streams") is not None:
                records[(host, int(rec["round"]), int(rec["streams"]))] = rec
                counts.add(int(rec["streams"]))
    if not records:
        return {}
    out: dict[str, Any] = {}
    for rnd in schedule.get("rounds") or []:
        fab = out.setdefault(rnd["fabric"], {"figure": "gbit_per_s", "load": "streams", "pairs": []})
        for pair in rnd["pairs"]:
            points = []
            for n in sorted(counts):
                client = records.get((pair["client"], int(rnd["index"]), n))
                server = records.get((pair["server"], int(rnd["index"]), n))
                if client is None and server is None:
                    continue
                row = join_pair(pair, rnd["fabric"], int(rnd["index"]), client, server, n)
                points.append({"x": n, "value": row["gbit_per_s"] if row["ok"] else None, "error": row["error"]})
            if points:
                fab["pairs"].append({"id": pair["id"], "client": pair["client"], "server": pair["server"],
                                     **_curve(points, share)})
    for fab in out.values():
        per_x: dict[int, list[float]] = {}
        for p in fab["pairs"]:
            for pt in p["points"]:
                if pt["value"] is not None:
                    per_x.setdefault(pt["x"], []).append(pt["value"])
        fab.update(_curve([{"x": x, "value": median(v)} for x, v in sorted(per_x.items())], share))
        nodes: dict[str, list[dict[str, Any]]] = {}
        for p in fab["pairs"]:
            for end in (p["client"], p["server"]):
                nodes.setdefault(end, []).append(p)
        # each node's knee: its best pair's (what its own port reaches; a pair with a slow peer is the
        # peer's knee, as the node's best pair is the reference rate of fabric_stats)
        fab["nodes"] = {}
        for h, rows in sorted(nodes.items()):
            best = max(rows, key=lambda p: -math.inf if p["knee_value"] is None else p["knee_value"])
            fab["nodes"][h] = {"knee_gbit_s": best["knee_value"], "knee_streams": best["knee_x"]}
    return out


# --------------------------------------------------------------------------- storage
def storage_sweeps(hosts: Mapping[str, Mapping[str, Any]], order: Sequence[str], share: float) -> list[dict[str, Any]]:
    """Per host and storage target: the queue-depth curve (4 KiB random-read IOPS) and the block-size
    curve (sequential MiB/s), each with its knee."""
    out = []
    for host in order:
        result = _m(_m(hosts.get(host)).get("sweep_storage"))
        for target in result.get("targets") or []:
            t = _m(target)
            if t.get("error"):
                out.append({"host": host, "name": t.get("name"), "path": t.get("path"), "error": str(t["error"]),
                            "queue_depth": None, "block_size": None})
                continue
            qd = sorted(((int(k), num(_m(v).get("iops"))) for k, v in _m(t.get("random")).items()),
                        key=lambda kv: kv[0])
            bs = sorted(((int(k), num(v)) for k, v in _m(t.get("sequential_by_block")).items()), key=lambda kv: kv[0])
            out.append({"host": host, "name": t.get("name"), "path": t.get("path"), "error": None,
                        "queue_depth": {"figure": "iops", "load": "queue depth",
                                        **_curve([{"x": x, "value": v} for x, v in qd], share)} if qd else None,
                        "block_size": {"figure": "mib_s", "load": "block KiB",
                                       **_curve([{"x": x, "value": v} for x, v in bs], share)} if bs else None})
    return out


def sweeps(schedule: Mapping[str, Any], hosts: Mapping[str, Mapping[str, Any]], order: Sequence[str],
           share: float | None) -> dict[str, Any] | None:
    """The ``saturation`` part of measure.json, or None when no sweep ran."""
    share = DEFAULT_KNEE_SHARE if share is None else float(share)
    net = network_sweeps(schedule, hosts, share)
    storage = storage_sweeps(hosts, order, share)
    if not net and not storage:
        return None
    return {"knee_share": share, "fabrics": net, "storage": storage,
            "svgs": [svg_name(f"fabric-{name}") for name in net]
            + ([svg_name("storage-qd"), svg_name("storage-bs")] if storage else [])}


# --------------------------------------------------------------------------- renderers
def svg_name(what: str) -> str:
    return "measure-saturation-" + re.sub(r"[^A-Za-z0-9_-]", "_", what) + ".svg"


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"


def curve_svg(title: str, load: str, unit: str, curves: Sequence[Mapping[str, Any]], max_curves: int = 32) -> str:
    """Curves ``[{label, points: [{x, value}], knee_x, knee_value, saturated}]`` on a log2 x axis; the knee
    of each curve is a ring with its value. Standard library only; deterministic."""
    width, height, left, right, top, bottom = 640, 360, 64, 150, 36, 44
    shown = list(curves)[:max_curves]
    xs = [p["x"] for c in shown for p in c["points"] if p["value"] is not None]
    ys = [p["value"] for c in shown for p in c["points"] if p["value"] is not None]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<title>{escape(title)}</title>',
           f'<text x="{left}" y="20" font-size="13">{escape(title)}</text>']
    if not xs:
        out += [f'<text x="{left}" y="{height // 2}">no points</text>', "</svg>"]
        return "\n".join(out) + "\n"
    lx0, lx1 = math.log2(min(xs)), math.log2(max(xs))
    ymax = max(ys) * 1.1 or 1.0
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (0 if lx1 == lx0 else (math.log2(x) - lx0) / (lx1 - lx0) * pw)

    def py(y: float) -> float:
        return top + ph - y / ymax * ph

    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for x in sorted(set(xs)):
        out.append(f'<text x="{px(x):.1f}" y="{top + ph + 14}" text-anchor="middle">{x}</text>')
    for i in range(5):
        y = ymax * i / 4
        out.append(f'<text x="{left - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{_fmt(y)}</text>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{height - 8}" text-anchor="middle">{escape(load)}</text>')
    out.append(f'<text x="12" y="{top + ph / 2:.0f}" transform="rotate(-90 12 {top + ph / 2:.0f})" '
               f'text-anchor="middle">{escape(unit)}</text>')
    palette = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
    for i, c in enumerate(shown):
        colour = palette[i % len(palette)]
        pts = [p for p in c["points"] if p["value"] is not None]
        path = " ".join(f"{px(p['x']):.1f},{py(p['value']):.1f}" for p in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        if c.get("knee_x") is not None and c.get("saturated"):
            kx, ky = px(c["knee_x"]), py(c["knee_value"])
            out.append(f'<circle cx="{kx:.1f}" cy="{ky:.1f}" r="5" fill="none" stroke="{colour}" stroke-width="2"/>')
        knee_text = f"knee {c['knee_x']}: {_fmt(c['knee_value'])}" if c.get("saturated") else "no knee"
        out.append(f'<text x="{left + pw + 8}" y="{top + 12 + i * 14}" fill="{colour}">'
                   f'{escape(str(c["label"]))[:20]} ({knee_text})</text>')
    if len(curves) > max_curves:
        out.append(f'<text x="{left + pw + 8}" y="{height - 8}">+{len(curves) - max_curves} more</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def svgs(sat: Mapping[str, Any] | None) -> dict[str, str]:
    """The SVG files of the saturation part: one per fabric (its pairs' curves and the fabric's median),
    one for the storage queue-depth curves, one for the block-size curves."""
    if not sat:
        return {}
    files = {}
    for name, fab in _m(sat.get("fabrics")).items():
        curves = [{"label": "median", **fab}] + [{"label": p["id"], **p} for p in fab["pairs"]]
        files[svg_name(f"fabric-{name}")] = curve_svg(f"{name}: Gbit/s per pair over TCP streams", "streams",
                                                      "Gbit/s", curves)
    storage = sat.get("storage") or []
    if storage:
        for key, what, unit, load in (("queue_depth", "qd", "IOPS", "queue depth"),
                                      ("block_size", "bs", "MiB/s", "block KiB")):
            curves = [{"label": f"{r['host']} {r['name']}", **r[key]} for r in storage if r.get(key)]
            files[svg_name(f"storage-{what}")] = curve_svg(f"storage: {unit} over {load}", load, unit, curves)
    return files


def markdown(sat: Mapping[str, Any] | None, max_rows: int = 200) -> list[str]:
    """The saturation section of measure.md (empty when no sweep ran)."""
    if not sat:
        return []
    share = sat["knee_share"]
    lines = ["## Saturation", "",
             f"The knee is the load before the first doubling that gains less than {share * 100:g} %; "
             "'no knee': still gaining at the sweep's top.", ""]

    def knee_cell(c: Mapping[str, Any], unit: str) -> str:
        if c.get("knee_x") is None:
            return "-"
        return f"{c['knee_x']}: {_fmt(c['knee_value'])} {unit}" if c["saturated"] else \
            f"no knee (peak {_fmt(c['peak'])} {unit})"

    for name, fab in _m(sat.get("fabrics")).items():
        xs = sorted({pt["x"] for p in fab["pairs"] for pt in p["points"]})
        lines += [f"### Fabric {name}: Gbit/s over streams", "",
                  f"Fabric (median of the pairs): knee at {knee_cell(fab, 'Gbit/s')}.", "",
                  f"![{name} saturation]({svg_name('fabric-' + name)})", "",
                  "| pair | " + " | ".join(f"{x} stream(s)" for x in xs) + " | knee |",
                  "|---|" + "---|" * len(xs) + "---|"]
        for p in fab["pairs"][:max_rows]:
            by_x = {pt["x"]: pt["value"] for pt in p["points"]}
            lines.append(f"| {p['id']} | " + " | ".join(_fmt(by_x.get(x)) for x in xs) +
                         f" | {knee_cell(p, 'Gbit/s')} |")
        lines.append("")
    storage = sat.get("storage") or []
    if storage:
        lines += ["### Storage: IOPS over queue depth, MiB/s over block size", "",
                  f"![queue depth]({svg_name('storage-qd')}) ![block size]({svg_name('storage-bs')})", "",
                  "| host | target | QD curve (IOPS) | QD knee | block curve (MiB/s) | block knee |",
                  "|---|---|---|---|---|---|"]
        for r in storage[:max_rows]:
            if r.get("error"):
                lines.append(f"| {r['host']} | {r['name']} | error: {r['error']} | - | - | - |")
                continue
            cells = []
            for key, unit in (("queue_depth", "IOPS"), ("block_size", "MiB/s")):
                c = r.get(key)
                cells += ([", ".join(f"{pt['x']}: {_fmt(pt['value'])}" for pt in c["points"]), knee_cell(c, unit)]
                          if c else ["-", "-"])
            lines.append(f"| {r['host']} | {r['name']} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines
