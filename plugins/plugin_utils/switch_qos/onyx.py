# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA Onyx: the text of ``show dcb priority-flow-control``, as the switch prints it::

    PFC: enabled
    Priority Enabled List: 3
    Priority Disabled List: 0 1 2 4 5 6 7
    -------------------------------------------------
    Interface        PFC admin        PFC oper
    -------------------------------------------------
    Eth1/1           Auto             Enabled

(format of the published sample in tests/fixtures/switch_qos/onyx/SOURCE.md). It gives the switch
priorities with PFC and each port's operational PFC state; the Onyx state records no DSCP map, trust,
scheduling or MTU, so those are reported as not compared. A prompt line (``switch (config) # show dcb
priority-flow-control``) may precede the output; other commands in the file are noted and skipped.
"""

from __future__ import annotations

import re

from .model import Port, State, StateError, port, switch

OS = "onyx"
_PROMPT = re.compile(r"^\S.*[#>]\s*(show\s+.*?)\s*$")


def parse(text: str, name: str, source: str) -> State:
    notes: list[str] = []
    command = "show dcb priority-flow-control"
    enabled_state: str | None = None
    priorities: list[int] | None = None
    ports: dict[str, Port] = {}
    skipping = False
    for raw in text.splitlines():
        line = raw.strip()
        match = _PROMPT.match(line)
        if match:
            words = match.group(1).split()
            skipping = words[:3] != ["show", "dcb", "priority-flow-control"]
            if skipping:
                notes.append(f"{' '.join(words)}: not read")
            continue
        if skipping or not line:
            continue
        key, sep, value = line.partition(":")
        if sep and key.strip() == "PFC":
            enabled_state = value.strip().lower()
        elif sep and key.strip() == "Priority Enabled List":
            priorities = sorted({int(p) for p in value.split() if p.isdigit()})
        else:
            fields = line.split()
            if len(fields) >= 3 and re.match(r"^Eth[0-9/]+$", fields[0]):
                oper = fields[-1].lower()
                ports[fields[0]] = {"admin": fields[1], "oper": oper}
    if enabled_state is None and priorities is None:
        raise StateError(f"{source}: no `show dcb priority-flow-control` output (lines `PFC: enabled` and "
                         "`Priority Enabled List: 3`)")
    classes = [] if enabled_state == "disabled" else (priorities or [])
    pfc = {"classes": classes, "source": f"{command}: PFC {enabled_state or '?'}, Priority Enabled List "
                                         + (" ".join(str(p) for p in priorities) if priorities else "(none)")}
    records: dict[str, Port] = {}
    for port_name, info in (ports.items() or [("*", {"oper": None})]):
        records[port_name] = port(class_word="switch priority", pfc=pfc, bound=True,
                                  pfc_oper=None if info.get("oper") is None else info["oper"] == "enabled")
    return switch(name, OS, source, records, notes)
