# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pair matrix of one fabric as a Markdown table: the heatmap that renders where the SVG cannot.

GitHub's step summary ($GITHUB_STEP_SUMMARY), pull-request and GitLab merge-request comments render
GitHub-flavoured Markdown: tables and emoji, but no data: URI images, no inline styles and no image
whose file is not served from the same place. So measure.md carries the matrix as a table (rows send,
columns receive, as in the SVG), each cell a coloured square for its Gbit/s against the fabric's
reference rate and the number; measure-FABRIC.svg beside it keeps the full picture (hover titles,
hundreds of hosts). Standard library only; deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_HOSTS = 24
"""Wider tables do not fit a page: above this many hosts the table shows the slowest ones."""
BANDS = ((0.9, "🟩"), (0.5, "🟨"), (0.25, "🟧"), (0.0, "🟥"))
ERROR, FAILING, EMPTY = "⬛", "❗", "·"


def square(fraction: float) -> str:
    """The colour band of ``fraction`` (Gbit/s / reference): green >= 0.9, yellow >= 0.5, orange >= 0.25, red."""
    return next(mark for floor, mark in BANDS if fraction >= floor)


def _fmt(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def _name(host: str) -> str:
    return host.replace("|", "\\|").replace("\n", " ").replace("`", "'")


def heatmap_markdown(fabric: str, hosts: Sequence[str], pairs: Sequence[Mapping[str, Any]],
                     reference: float | None, max_hosts: int = MAX_HOSTS) -> list[str]:
    """Lines of Markdown: a legend and the table (empty when no pair was measured)."""
    members = [h for h in hosts if any(h in (p["client"], p["server"]) for p in pairs)]
    if not members:
        return []
    cells: dict[tuple[str, str], Mapping[str, Any]] = {(p["client"], p["server"]): p for p in pairs}
    note = []
    if len(members) > max_hosts:  # the hosts of the slowest pairs first, then in order
        slow = sorted(pairs, key=lambda p: (p.get("ok") is not False, p.get("status") != "fail",
                                            p.get("gbit_per_s") or 0.0))
        keep: list[str] = []
        for p in slow:
            for host in (p["client"], p["server"]):
                if host not in keep and len(keep) < max_hosts:
                    keep.append(host)
        members = [h for h in members if h in keep]
        note = [f"The {max_hosts} hosts of the slowest pairs; the SVG has all of them.", ""]
    ref = f"{_fmt(reference)} Gbit/s" if reference else "none"
    out = [f"Pair matrix of {fabric} (row sends to column), Gbit/s; reference {ref}: "
           f"{BANDS[0][1]} >= 90 %, {BANDS[1][1]} >= 50 %, {BANDS[2][1]} >= 25 %, {BANDS[3][1]} below, "
           f"{FAILING} fails a gate, {ERROR} did not run, {EMPTY} not measured.", "", *note,
           "| sends \\ receives | " + " | ".join(f"`{_name(h)}`" for h in members) + " |",
           "|---|" + "---|" * len(members)]
    for client in members:
        row = []
        for server in members:
            cell = cells.get((client, server))
            if cell is None:
                row.append(EMPTY)
            elif not cell.get("ok"):
                row.append(ERROR)
            else:
                rate = cell.get("gbit_per_s") or 0.0
                mark = square(rate / reference) if reference else BANDS[0][1]
                row.append(f"{mark} {_fmt(rate)}" + (f" {FAILING}" if cell.get("status") == "fail" else ""))
        out.append(f"| `{_name(client)}` | " + " | ".join(row) + " |")
    return out
