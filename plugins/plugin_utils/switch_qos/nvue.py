# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA Cumulus Linux (NVUE): the text of ``nv show`` commands, as the switch prints them.

One file holds one or more command outputs; a prompt line (``cumulus@leaf01:mgmt:~$ nv show qos roce``)
starts each, and a file without prompts is the output of ``nv show qos roce`` alone. Read (formats of
NVIDIA's Cumulus Linux 5.12 user guide, CumulusNetworks/docs content/cumulus-linux-512/):

* ``nv show qos roce``: ``mode`` (lossless, lossless-single-ipool, lossy), ``pfc-priority``,
  ``trust-mode`` (pcp, dscp or pcp,dscp), the "RoCE PCP/DSCP->SP mapping" table (DSCP -> switch
  priority) and the "RoCE SP->TC mapping and ETS configurations" table (switch priority -> traffic
  class, DWRR-N% or strict-priority) -- the switch's settings for every port;
* ``nv show interface SWP qos roce status``: the same for one port (rows ``roce`` and ``cnp``), which
  then replace the switch-wide values on that port;
* ``nv show interface``: each port's MTU, type and LLDP neighbour (Remote Host, Remote Port); ports of
  type swp and bond are the switch ports. Columns are found by the header (their order differs
  between releases).

A class here is a switch priority: PFC is on switch priorities, and a pause frame's priority is the
switch priority it protects.
"""

from __future__ import annotations

import re
from typing import Any

from .model import Port, State, StateError, port, switch

OS = "cumulus-nvue"
_PROMPT = re.compile(r"^\S*[$#]\s*(nv\s+show\s+.*?)\s*$")
_DSCP_TABLE = "RoCE PCP/DSCP->SP mapping"
_SP_TABLE = "RoCE SP->TC mapping"
PORT_TYPES = ("swp", "bond")


def sections(text: str) -> list[tuple[str, list[str]]]:
    """[(command, output lines)] of a capture; a text without prompt lines is one section, its command
    guessed from what it shows."""
    out: list[tuple[str, list[str]]] = []
    current: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        match = _PROMPT.match(line)
        if match:
            current = (" ".join(match.group(1).split()), [])
            out.append(current)
        elif current is not None:
            current[1].append(line)
    if out:
        return out
    lines = text.splitlines()
    if any(_DSCP_TABLE in line for line in lines):
        return [("nv show qos roce", lines)]
    if lines and lines[0].split()[:1] == ["Interface"] and "MTU" in lines[0]:
        return [("nv show interface", lines)]
    return []


def _attributes(lines: list[str]) -> dict[str, str]:
    """The ``key  operational  applied`` block above the tables: {dotted.key: operational or applied}."""
    out: dict[str, str] = {}
    header = next((i for i, line in enumerate(lines) if "operational" in line and "applied" in line), None)
    if header is None:
        return out
    head = lines[header]
    op_col, ap_col = head.index("operational"), head.index("applied")
    desc_col = head.index("description") if "description" in head else None
    stack: list[tuple[int, str]] = []
    for line in lines[header + 1:]:
        if not line.strip() or set(line.strip()) <= {"-", " "}:
            continue
        if _DSCP_TABLE in line or _SP_TABLE in line or line.startswith("RoCE "):
            break
        indent = len(line) - len(line.lstrip())
        key = line.split()[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        operational = line[op_col:ap_col].strip() if len(line) > op_col else ""
        applied = line[ap_col:desc_col].strip() if len(line) > ap_col else ""
        value = operational or applied
        if value:
            out[".".join(k for _i, k in stack)] = value
    return out


def _table(lines: list[str], title: str) -> list[list[str]]:
    """The rows (split into fields) of the table under ``title``: after its ``===`` underline, header and
    ``---`` line, up to a blank line."""
    start = next((i for i, line in enumerate(lines) if title in line), None)
    if start is None:
        return []
    rows: list[list[str]] = []
    seen_rule = False
    for line in lines[start + 1:]:
        stripped = line.strip()
        if not stripped:
            if seen_rule and rows:
                break
            continue
        if set(stripped) <= {"=", " "}:
            continue
        if set(stripped) <= {"-", " "}:
            seen_rule = True
            continue
        if not seen_rule:
            continue  # the header
        rows.append(stripped.split())
    return rows


def _ints(text: str) -> list[int]:
    return sorted({int(p) for p in re.split(r"[,\s]+", text.strip()) if p.isdigit()})


def _weight(fields: list[str]) -> dict[str, Any]:
    text = " ".join(fields).lower()
    if text.startswith("strict"):
        return {"mode": "strict", "weight": None}
    match = re.match(r"dwrr-?\s*([0-9]+)%?", text)
    return {"mode": "dwrr", "weight": int(match.group(1)) if match else None}


def _roce(lines: list[str], command: str) -> dict[str, Any]:
    attrs = _attributes(lines)
    trust_text = attrs.get("trust.trust-mode", "")
    parts = {p.strip() for p in trust_text.split(",") if p.strip()}
    trust = "both" if {"pcp", "dscp"} <= parts else "dscp" if "dscp" in parts else "pcp" if "pcp" in parts \
        else "port" if "port" in parts else None
    mode = attrs.get("mode", "")
    dscp_table: dict[int, int] = {}
    for row in _table(lines, _DSCP_TABLE):
        if len(row) >= 4 and row[-1].isdigit():
            for dscp in _ints(row[2]):
                dscp_table[dscp] = int(row[-1])
    class_tc: dict[int, int] = {}
    scheduler: dict[int, dict[str, Any]] = {}
    for row in _table(lines, _SP_TABLE):
        if len(row) >= 4 and row[1].isdigit() and row[2].isdigit():
            sp, tc = int(row[1]), int(row[2])
            class_tc[sp] = tc
            scheduler[tc] = dict(_weight(row[3:]), source=f"{command}: SP {sp} -> TC {tc} {' '.join(row[3:])}")
    pfc: dict[str, Any] | None = None
    if mode:
        lossy = mode.startswith("lossy")
        pfc = {"classes": [] if lossy else _ints(attrs.get("pfc.pfc-priority", "")),
               "source": f"{command}: mode {mode}" + ("" if lossy else
                                                      f", pfc-priority {attrs.get('pfc.pfc-priority', '(none)')}")}
    return {"trust": trust, "mode": mode, "dscp": dscp_table, "class_tc": class_tc, "scheduler": scheduler,
            "pfc": pfc, "enable": attrs.get("enable")}


def _interfaces(lines: list[str]) -> dict[str, dict[str, Any]]:
    """``nv show interface``: {name: {mtu, type, host, port}} of every row with a name."""
    header_at = next((i for i, line in enumerate(lines) if line.lstrip("+ ").startswith("Interface")), None)
    if header_at is None:
        return {}
    head = lines[header_at]
    names = ("Interface", "MTU", "Speed", "State", "Remote Host", "Remote Port", "Type", "Summary")
    cols = sorted((head.index(n), n) for n in names if n in head)
    out: dict[str, dict[str, Any]] = {}
    for line in lines[header_at + 1:]:
        if not line.strip() or set(line.strip()) <= {"-", " "} or line.strip() == "...":
            continue
        cells = {}
        for i, (start, title) in enumerate(cols):
            end = cols[i + 1][0] if i + 1 < len(cols) else len(line)
            cells[title] = line[start:end].strip() if len(line) > start else ""
        name = cells.get("Interface", "").lstrip("+").strip()
        if not name:
            continue  # a continuation line (another address, another neighbour)
        mtu = cells.get("MTU", "")
        out[name.split()[0]] = {"mtu": int(mtu) if mtu.isdigit() else None, "type": cells.get("Type") or None,
                                "host": cells.get("Remote Host") or None, "port": cells.get("Remote Port") or None}
    return out


def parse(text: str, name: str, source: str) -> State:
    found = sections(text)
    if not found:
        raise StateError(f"{source}: neither `nv show qos roce` nor `nv show interface` output (start each "
                         "command's output with its prompt line, e.g. `cumulus@leaf01:mgmt:~$ nv show qos roce`)")
    notes: list[str] = []
    global_roce: dict[str, Any] | None = None
    per_port: dict[str, dict[str, Any]] = {}
    interfaces: dict[str, dict[str, Any]] = {}
    for command, lines in found:
        words = command.split()
        if words[:4] == ["nv", "show", "qos", "roce"] and len(words) == 4:
            global_roce = _roce(lines, command)
        elif words[:3] == ["nv", "show", "interface"] and len(words) == 3:
            interfaces.update(_interfaces(lines))
        elif len(words) >= 6 and words[:3] == ["nv", "show", "interface"] and words[4:6] == ["qos", "roce"]:
            per_port[words[3]] = _roce(lines, command)
        else:
            notes.append(f"{command}: not read")
    if global_roce is None and not per_port:
        notes.append("no `nv show qos roce` in the state: RoCE classification is not compared")
    ports: dict[str, Port] = {}
    names = [n for n, i in interfaces.items() if (i.get("type") or "") in PORT_TYPES]
    if not names and global_roce:
        names = ["*"]
    for port_name in sorted(set(names) | set(per_port)):
        roce = per_port.get(port_name) or global_roce
        info = interfaces.get(port_name, {})
        record: dict[str, Any] = {"class_word": "switch priority", "mtu": info.get("mtu"),
                                  "neighbor": {"host": info["host"], "port": info.get("port")}
                                  if info.get("host") else None, "bound": True}
        if roce is not None:
            # an interface's status lists only its RoCE and CNP rows: the switch-wide tables fill the rest
            base = global_roce or {}
            dscp = {**(base.get("dscp") or {}), **(roce.get("dscp") or {})}
            class_tc = {**(base.get("class_tc") or {}), **(roce.get("class_tc") or {})}
            scheduler = {**(base.get("scheduler") or {}), **(roce.get("scheduler") or {})}
            origin = "nv show qos roce" if roce is global_roce else f"nv show interface {port_name} qos roce status"
            record.update(
                trust=roce.get("trust") or base.get("trust"),
                dscp_map={"name": f"{origin} (DSCP->SP)", "table": dscp} if dscp else None,
                class_tc={"name": f"{origin} (SP->TC)", "table": class_tc} if class_tc else None,
                pfc=roce.get("pfc") or base.get("pfc"),
                scheduler=scheduler or None)
        ports[port_name] = port(**record)
    return switch(name, OS, source, ports, notes)
