# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each host hears from its switch ports (module lldp_dcbx) against its plan: findings per host,
rail and interface (capability ``roce_qos``, as the audit files them).

* ``dcbx-pfc``: the switch advertises PFC on other priorities than the plan's (error when the RoCE
  priority is not among them: the switch does not pause it; warning otherwise);
* ``dcbx-willing``: the switch's PFC or ETS is willing (willing = 1): it takes its settings from its peer,
  so nothing on the link is the authority (warning);
* ``dcbx-ets``: the switch's ETS recommendation (or configuration) puts the RoCE priority in another
  traffic class, gives the RoCE class another share, or does not schedule the CNP class strict (warning);
* ``dcbx-app``: an Application Priority entry for RoCEv2 (UDP 4791) or for the RoCE/CNP DSCP names
  another priority than the plan (error for RoCE, warning for CNP);
* ``dcbx-not-heard`` / ``dcbx-none``: no LLDP frame, or LLDP without DCBX, on an interface of a fabric
  whose switch is declared to send DCBX (info).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CAPABILITY = "roce_qos"
ROCEV2_UDP_PORT = 4791
Finding = dict[str, Any]


def dcbx_fabrics(spec: Any) -> set[str]:
    """Names of the fabrics whose ``switch.dcbx`` is true (``spec``: the ``datapath`` value or a model)."""
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import parse_spec

    return {f.name for f in parse_spec(spec).fabrics if f.switch is not None and f.switch.dcbx}


def dcbx_interfaces(qos: Sequence[Mapping[str, Any]] | None, spec: Any) -> list[dict[str, Any]]:
    """The lldp_dcbx ``interfaces`` argument: the plan's ``roce_qos`` interfaces on DCBX fabrics."""
    fabrics = dcbx_fabrics(spec)
    out = []
    for item in qos or []:
        if isinstance(item, Mapping) and item.get("fabric") in fabrics:
            out.append({"interface": item.get("interface"), "match": dict(item.get("match") or {}) or None,
                        "fabric": item.get("fabric")})
    return out


def _roce_priority(planned: Mapping[str, Any]) -> int | None:
    tos = planned.get("roce_tos")
    if not isinstance(tos, int):
        return None
    prio = (planned.get("dscp2prio") or {}).get(str(tos >> 2))
    return int(prio) if prio is not None else None


def _where(host: str, row: Mapping[str, Any]) -> str:
    switch = row.get("system_name") or row.get("chassis_id") or "the switch"
    return f"{host} {row.get('interface')} (fabric {row.get('fabric')}; {switch} port {row.get('port_id') or '?'})"


def dcbx_findings(host: str, qos: Sequence[Mapping[str, Any]] | None, result: Mapping[str, Any] | None
                  ) -> list[Finding]:
    """Findings of one host: ``qos`` the plan's ``roce_qos`` interfaces, ``result`` the lldp_dcbx result
    (its ``interfaces`` are paired with ``qos`` by interface name, else by fabric and order)."""
    rows = [r for r in ((result or {}).get("interfaces") or []) if isinstance(r, Mapping)]
    planned = [p for p in (qos or []) if isinstance(p, Mapping)]
    out: list[Finding] = []

    def add(check: str, key: str, wanted: Any, actual: Any, severity: str, reason: str, fix: str) -> None:
        out.append({"host": host, "capability": CAPABILITY, "check": check, "key": key, "wanted": wanted,
                    "actual": actual, "severity": severity, "kind": "finding", "reason": reason, "fix": fix})

    used: set[int] = set()
    for row in rows:
        plan = next((p for i, p in enumerate(planned) if i not in used and p.get("interface")
                     and p.get("interface") == row.get("interface")), None)
        if plan is None:
            plan = next((p for i, p in enumerate(planned) if i not in used and not p.get("interface")
                         and p.get("fabric") == row.get("fabric")), None)
        if plan is None:
            continue
        used.add(planned.index(plan))
        name = str(row.get("interface") or row.get("requested"))
        where = _where(host, row)
        if not row.get("heard"):
            add("dcbx-not-heard", f"{name}.dcbx", "an LLDP frame with DCBX", None, "info",
                f"{host} {name} (fabric {row.get('fabric')}): {row.get('reason')}",
                "enable LLDP with the DCBX TLVs (IEEE) on the switch port, or set switch.dcbx: false for the fabric")
            continue
        dcbx = row.get("dcbx") or {}
        if not any(dcbx.get(k) for k in ("pfc", "ets_config", "ets_recommendation", "app_priority")):
            cee = bool(dcbx.get("cee"))
            add("dcbx-none", f"{name}.dcbx", "DCBX TLVs", "LLDP without DCBX" + (" (CEE only)" if cee else ""),
                "info", f"{where} sends LLDP but no IEEE DCBX TLV"
                + (" (only the pre-standard CEE TLV)" if cee else ""),
                "enable the IEEE DCBX TLVs (PFC, ETS, Application Priority) on the switch port")
            continue
        roce_prio = _roce_priority(plan)
        want_pfc = sorted(int(p) for p in plan.get("pfc_priorities") or [])
        pfc = dcbx.get("pfc")
        if pfc:
            have = sorted(int(p) for p in pfc.get("enabled") or [])
            if have != want_pfc:
                missing = roce_prio is not None and roce_prio not in have
                add("dcbx-pfc", f"{name}.dcbx.pfc", want_pfc, have, "error" if missing else "warning",
                    f"{where}: the switch advertises PFC on priorities {have or 'none'}, the plan on {want_pfc}"
                    + (f": the switch does not pause priority {roce_prio}, which carries RoCE" if missing else ""),
                    f"on the switch: PFC on priority {roce_prio if roce_prio is not None else want_pfc} of this port; "
                    f"or on the host: roce.pfc_priorities: {have} (and the RoCE priority on one of them)")
        for tlv, label in (("pfc", "PFC"), ("ets_config", "ETS")):
            value = dcbx.get(tlv)
            if value and value.get("willing"):
                add("dcbx-willing", f"{name}.dcbx.{tlv}.willing", 0, 1, "warning",
                    f"{where}: the switch's {label} is willing (willing = 1): it adopts what its peer advertises, "
                    "so the link has no authority; a NIC firmware or lldpad that advertises can change the switch",
                    f"on the switch: DCBX {label} willing off (the switch is the authority; hosts do not run a "
                    "DCBX agent)")
        ets = dcbx.get("ets_recommendation") or dcbx.get("ets_config")
        want_ets = plan.get("ets") or {}
        if ets and roce_prio is not None and want_ets.get("prio_tc"):
            source = "ETS Recommendation" if dcbx.get("ets_recommendation") else "ETS Configuration"
            want_tc, have_tc = want_ets["prio_tc"][roce_prio], (ets.get("prio_tc") or [None] * 8)[roce_prio]
            if have_tc is not None and have_tc != want_tc:
                add("dcbx-ets", f"{name}.dcbx.ets.prio_tc{roce_prio}", want_tc, have_tc, "warning",
                    f"{where}: the switch's {source} puts priority {roce_prio} (RoCE) in TC {have_tc}, the plan "
                    f"in TC {want_tc}", "align roce.ets.prio_tc with the switch, or the switch's ETS with the plan")
            elif have_tc is not None:
                want_bw = (want_ets.get("bw") or [None] * 8)[want_tc]
                have_bw = (ets.get("tc_bw") or [None] * 8)[have_tc]
                if want_bw is not None and have_bw is not None and want_bw != have_bw:
                    add("dcbx-ets", f"{name}.dcbx.ets.bw{want_tc}", want_bw, have_bw, "warning",
                        f"{where}: the switch's {source} gives TC {have_tc} (RoCE) {have_bw}%, the plan {want_bw}%",
                        "align roce.ets.bw with the switch, or the switch's ETS with the plan")
            cnp_prio = (plan.get("cnp") or {}).get("priority")
            if isinstance(cnp_prio, int) and 0 <= cnp_prio < 8:
                cnp_tc = (ets.get("prio_tc") or [None] * 8)[cnp_prio]
                tsa = (ets.get("tsa") or [None] * 8)[cnp_tc] if cnp_tc is not None else None
                if tsa is not None and tsa != "strict":
                    add("dcbx-ets", f"{name}.dcbx.ets.tsa{cnp_tc}", "strict", tsa, "warning",
                        f"{where}: the switch's {source} schedules TC {cnp_tc} (CNP priority {cnp_prio}) {tsa}, "
                        "not strict: CNPs wait behind data", "on the switch: the CNP traffic class strict priority")
        apps = dcbx.get("app_priority") or []
        dscp2prio = {int(k): int(v) for k, v in (plan.get("dscp2prio") or {}).items()}
        tos = plan.get("roce_tos")
        roce_dscp = tos >> 2 if isinstance(tos, int) else None
        cnp_dscp = (plan.get("cnp") or {}).get("dscp")
        for app in apps:
            prio, selector, protocol = app.get("priority"), app.get("selector"), app.get("protocol")
            if selector in (3, 4) and protocol == ROCEV2_UDP_PORT and roce_prio is not None and prio != roce_prio:
                add("dcbx-app", f"{name}.dcbx.app.udp{ROCEV2_UDP_PORT}", roce_prio, prio, "error",
                    f"{where}: the switch's Application Priority TLV puts RoCEv2 (UDP {ROCEV2_UDP_PORT}) on priority "
                    f"{prio}, the plan on {roce_prio}",
                    f"on the switch: the RoCE application priority {roce_prio}; or on the host: roce.priority: {prio}")
            if selector == 5 and protocol in dscp2prio and prio != dscp2prio[protocol]:
                is_roce = protocol == roce_dscp
                add("dcbx-app", f"{name}.dcbx.app.dscp{protocol}", dscp2prio[protocol], prio,
                    "error" if is_roce else "warning",
                    f"{where}: the switch maps DSCP {protocol}"
                    + (" (RoCE)" if is_roce else " (CNP)" if protocol == cnp_dscp else "")
                    + f" to priority {prio}, the plan to {dscp2prio[protocol]}",
                    f"on the switch: DSCP {protocol} to priority {dscp2prio[protocol]}; or on the host: roce.dscp2prio")
    return out
