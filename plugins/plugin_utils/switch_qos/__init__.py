# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host and switch agree: the fabrics' RoCE settings against their switches' own recorded configuration
(``fabrics[].switch``; docs/network.md "Host and switch agree"). Controller side; no switch login.

* :func:`qos_consistency`: every fabric with ``switch.state`` -> its switches (one parser per OS:
  :mod:`.sonic`, :mod:`.nvue`, :mod:`.onyx`) -> findings (:mod:`.compare`);
* :func:`dcbx_interfaces` and :func:`dcbx_findings` (:mod:`.dcbx`): what each host hears from its switch
  port in LLDP/DCBX (module lldp_dcbx) against its plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .compare import CAPABILITY, check_switch, compare_fabric, describe_ports, expectation
from .dcbx import dcbx_findings, dcbx_interfaces
from .load import load_states, resolve
from .model import StateError

__all__ = ["CAPABILITY", "StateError", "check_switch", "compare_fabric", "dcbx_findings", "dcbx_interfaces",
           "describe_ports", "expectation", "host_mtus", "load_states", "qos_consistency", "resolve"]

_RANK = {"error": 0, "warning": 1, "info": 2}


def host_mtus(plans: Mapping[str, Any] | None, fabric: str) -> dict[str, dict[str, int]]:
    """``{host: {interface: mtu}}`` of the plans' ``link_mtu`` interfaces on ``fabric``."""
    out: dict[str, dict[str, int]] = {}
    for host, plan in (plans or {}).items():
        part = plan.get("link_mtu") if isinstance(plan, Mapping) else None
        for iface in (part or {}).get("interfaces") or [] if isinstance(part, Mapping) else []:
            if isinstance(iface, Mapping) and iface.get("fabric") == fabric and isinstance(iface.get("mtu"), int):
                name = str(iface.get("name") or ",".join(f"{k}={v}" for k, v in (iface.get("match") or {}).items()))
                out.setdefault(str(host), {})[name] = iface["mtu"]
    return out


def qos_consistency(spec: Any, base_dir: str | None = None, plans: Mapping[str, Any] | None = None,
                    states: Mapping[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The check of every fabric with a ``switch.state``: ``{ok, findings, switches, fabrics}``.

    ``spec``: the ``datapath`` value (validated here) or a model; ``base_dir``: the inventory directory
    that relative ``switch.state`` paths are below; ``plans``: ``{host: plan}`` (their MTUs; the fabric
    MTU otherwise); ``states``: ``{fabric: [switch state]}`` already read (tests, callers that cache).
    A state that cannot be read is an error finding naming the file. ``ok``: no finding of severity error.
    """
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import parse_spec

    model = parse_spec(spec)
    findings: list[dict[str, Any]] = []
    switches: list[dict[str, Any]] = []
    fabrics: dict[str, Any] = {}
    for fabric in model.fabrics:
        block = fabric.switch
        if block is None or (block.state is None and not (states or {}).get(fabric.name)):
            continue
        expect = expectation(fabric, host_mtus(plans, fabric.name))
        try:
            found = list((states or {}).get(fabric.name) or load_states(block.os, str(block.state), base_dir))
        except (StateError, OSError) as exc:
            findings.append({"host": None, "switch": None, "fabric": fabric.name, "capability": CAPABILITY,
                             "check": "switch-state", "key": f"{fabric.name}:switch.state", "wanted": block.state,
                             "actual": None, "severity": "error", "kind": "finding",
                             "reason": f"fabric {fabric.name}: the switch state cannot be read: {exc}",
                             "fix": "record the switch's configuration as docs/network.md describes and point "
                                    "switch.state at it (relative to the inventory directory)"})
            fabrics[fabric.name] = {"os": block.os, "switches": [], "errors": 1}
            continue
        mine = compare_fabric(expect, found)
        findings.extend(mine)
        for state in found:
            switches.append({"name": state["name"], "os": state["os"], "fabric": fabric.name,
                             "source": state["source"], "ports": len(state.get("ports") or {}),
                             "findings": sum(1 for f in mine if f["switch"] == state["name"])})
        fabrics[fabric.name] = {"os": block.os, "switches": [s["name"] for s in found],
                                "errors": sum(1 for f in mine if f["severity"] == "error")}
    findings.sort(key=lambda f: (_RANK.get(f["severity"], 3), str(f.get("fabric")), str(f.get("switch")),
                                 f["key"], f["check"]))
    return {"ok": not any(f["severity"] == "error" for f in findings), "findings": findings,
            "switches": switches, "fabrics": fabrics}
