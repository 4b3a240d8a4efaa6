# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pair matrix of one fabric as an SVG heatmap: rows send (client), columns receive (server).

A cell's colour is its Gbit/s against the fabric's reference rate (red at 0, yellow at half, green
at the reference and above); a failing pair has a thick black border and a dot, a pair that could
not run is grey with a cross; pairs not measured are empty. Standard library only; deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

MAX_CELLS = 50000
_LABELS_UP_TO = 64


def colour(fraction: float) -> str:
    """red (0) -> yellow (0.5) -> green (1) in RGB hex."""
    f = min(max(fraction, 0.0), 1.0)
    if f < 0.5:
        r, g = 220, int(60 + (200 - 60) * f * 2)
    else:
        r, g = int(220 - (220 - 40) * (f - 0.5) * 2), int(200 - (200 - 160) * (f - 0.5) * 2)
    return f"#{r:02x}{g:02x}{40:02x}"


def _fmt(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def heatmap(fabric: str, hosts: Sequence[str], pairs: Sequence[Mapping[str, Any]], reference: float | None) -> str:
    members = [h for h in hosts if any(h in (p["client"], p["server"]) for p in pairs)]
    index = {h: i for i, h in enumerate(members)}
    n = len(members)
    cell = 36 if n <= 16 else 18 if n <= _LABELS_UP_TO else max(2, 1024 // max(n, 1))
    labels = n <= _LABELS_UP_TO
    left = 8 + (max((len(h) for h in members), default=4) * 7 if labels else 40)
    top = left + 24
    width, height = left + n * cell + 200, top + n * cell + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f"<title>{escape(fabric)}: Gbit/s per pair (rows send, columns receive)</title>",
           f'<text x="8" y="16" font-size="13" font-weight="bold">{escape(fabric)}: Gbit/s per pair '
           f'(row sends to column); reference {_fmt(reference)} Gbit/s</text>',
           f'<rect x="{left}" y="{top}" width="{n * cell}" height="{n * cell}" fill="#f4f4f4" stroke="#999"/>']
    if labels:
        for h, i in index.items():
            y = top + i * cell + cell / 2 + 4
            x = left + i * cell + cell / 2
            out.append(f'<text x="{left - 4}" y="{y:.1f}" text-anchor="end">{escape(h)}</text>')
            out.append(f'<text x="{x:.1f}" y="{top - 6}" text-anchor="start" '
                       f'transform="rotate(-60 {x:.1f} {top - 6})">{escape(h)}</text>')
    drawn = 0
    for p in pairs:
        if drawn >= MAX_CELLS:
            out.append(f'<text x="8" y="{height - 8}">… {len(pairs) - drawn} more pairs not drawn</text>')
            break
        drawn += 1
        x, y = left + index[p["server"]] * cell, top + index[p["client"]] * cell
        value = f"{_fmt(p.get('gbit_per_s'))} Gbit/s" if p.get("ok") else f"error: {p.get('error')}"
        tip = escape(f"{p['client']} -> {p['server']}: {value}")
        if not p.get("ok"):
            out.append(f'<g><title>{tip}</title><rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="#9e9e9e" '
                       f'stroke="#555"/><path d="M{x + 3} {y + 3}L{x + cell - 3} {y + cell - 3}M{x + cell - 3} {y + 3}'
                       f'L{x + 3} {y + cell - 3}" stroke="#222" stroke-width="1.5"/></g>')
            continue
        fraction = (p["gbit_per_s"] / reference) if reference else 1.0
        failing = p.get("status") == "fail"
        stroke = ' stroke="#000" stroke-width="3"' if failing else ' stroke="#fff" stroke-width="0.5"'
        body = f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{colour(fraction)}"{stroke}/>'
        if failing:
            body += f'<circle cx="{x + cell - 5}" cy="{y + 5}" r="2.5" fill="#000"/>'
        if labels and cell >= 30:
            body += (f'<text x="{x + cell / 2:.1f}" y="{y + cell / 2 + 4:.1f}" text-anchor="middle">'
                     f"{_fmt(p['gbit_per_s'])}</text>")
        out.append(f"<g><title>{tip}</title>{body}</g>")
    lx = left + n * cell + 24
    out.append(f'<text x="{lx}" y="{top + 10}">Gbit/s / reference</text>')
    for k in range(11):
        out.append(f'<rect x="{lx}" y="{top + 18 + k * 12}" width="16" height="12" fill="{colour(1 - k / 10)}"/>')
    for k, text in ((0, f"≥ 1.0 ({_fmt(reference)})"), (5, "0.5"), (10, "0")):
        out.append(f'<text x="{lx + 22}" y="{top + 28 + k * 12}">{escape(text)}</text>')
    ly = top + 18 + 11 * 12 + 16
    out.append(f'<rect x="{lx}" y="{ly}" width="16" height="12" fill="#fff" stroke="#000" stroke-width="3"/>'
               f'<text x="{lx + 22}" y="{ly + 10}">fails a gate</text>')
    out.append(f'<rect x="{lx}" y="{ly + 18}" width="16" height="12" fill="#9e9e9e"/>'
               f'<text x="{lx + 22}" y="{ly + 28}">did not run</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
