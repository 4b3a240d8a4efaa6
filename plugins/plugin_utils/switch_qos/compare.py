# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``qos_consistency``: a fabric's RoCE settings (what every host on it is planned to do) against the
recorded state of its switches (:mod:`.model`), as findings of the audit's shape plus ``switch``.

For each switch, the ports in scope (``switch.ports``, or every port with a QoS binding) are grouped by
identical QoS settings, so a map shared by 48 ports is one finding naming the map and its ports:

* ``switch-trust``: the switch classifies by another header field than the hosts mark (error);
* ``switch-dscp-lossy``: the RoCE DSCP lands in a class without PFC (or without lossless buffers), e.g.
  SONiC's default ``DSCP_TO_TC_MAP|AZURE``: DSCP 26 -> TC 1 (lossy) (error);
* ``switch-pfc-off``: PFC is off on a priority the hosts treat as lossless (error);
* ``switch-dscp-priority``: the RoCE DSCP lands in a lossless class other than the hosts' RoCE priority:
  the switch's pause frames name a priority the hosts do not pause (error);
* ``switch-cnp-class``, ``switch-cnp-lossless``, ``switch-cnp-not-strict``: the CNP DSCP on another class
  than the hosts' CNP priority, on a lossless class, or scheduled by weight instead of strict priority
  (warning);
* ``switch-ets-share``: the switch gives the RoCE class a smaller DWRR share than the hosts' ETS (info);
* ``switch-mtu``: a port's MTU below the MTU of the hosts' interfaces on the fabric (error);
* ``switch-pfc-oper``: PFC operationally off on a port (Onyx ``PFC oper``) (error);
* ``switch-not-recorded``: what the state does not record and so was not compared (info);
* ``switch-ports``: ``switch.ports`` names no port of a switch (error).

Each finding names the switch, the map or port, the host value (``wanted``) and the switch value
(``actual``), and a fix on either side. Pure functions of their arguments.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .model import State, port_sort_key

CAPABILITY = "qos_consistency"
Finding = dict[str, Any]
OS_LABEL = {"sonic": "SONiC", "cumulus-nvue": "Cumulus NVUE", "onyx": "Onyx"}


def _finding(switch: str, check: str, key: str, wanted: Any, actual: Any, severity: str, reason: str, fix: str,
             host: str | None = None) -> Finding:
    return {"host": host, "switch": switch, "capability": CAPABILITY, "check": check, "key": key,
            "wanted": wanted, "actual": actual, "severity": severity, "kind": "finding", "reason": reason,
            "fix": fix}


def _list(values: Sequence[int]) -> str:
    items = [str(v) for v in sorted(values)]
    if not items:
        return "none"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def describe_ports(ports: Sequence[str]) -> str:
    names = sorted(ports, key=port_sort_key)
    if names == ["*"]:
        return "all ports"
    if len(names) == 1:
        return f"port {names[0]}"
    shown = ", ".join(names[:3]) + (f", ... {names[-1]}" if len(names) > 4 else
                                    f", {names[3]}" if len(names) == 4 else "")
    return f"{len(names)} ports ({shown})"


def in_scope(state: State, patterns: Sequence[str] | None) -> list[str]:
    ports = state.get("ports") or {}
    if patterns:
        return [name for name in ports if name == "*" or any(fnmatch.fnmatchcase(name, p) for p in patterns)]
    return [name for name, rec in ports.items() if rec.get("bound") is not False]


def _without_sources(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_sources(v) for k, v in value.items() if k != "source"}
    if isinstance(value, list):
        return [_without_sources(v) for v in value]
    return value


CLASSIFICATION = ("trust", "dscp_map", "class_word", "class_tc", "tc_queue", "pfc", "lossless")
SCHEDULING = ("dscp_map", "class_word", "class_tc", "tc_queue", "scheduler")


def _signature(record: Mapping[str, Any], fields: Sequence[str]) -> str:
    """What makes two ports the same for one set of checks (where each value was read aside)."""
    return json.dumps(_without_sources({k: record.get(k) for k in fields}), sort_keys=True, default=str)


def _table(entry: Mapping[str, Any] | None) -> dict[int, int]:
    table = (entry or {}).get("table") or {}
    return {int(k): int(v) for k, v in table.items()}


def _fixes(os_name: str) -> dict[str, str]:
    if os_name == "cumulus-nvue":
        return {"map": "nv set qos mapping default-global dscp {dscp} switch-priority {cls}",
                "pfc": "nv set qos pfc default-global switch-priority {cls}",
                "trust": "nv set qos mapping default-global trust both",
                "mtu": "nv set interface {port} link mtu {mtu}"}
    if os_name == "onyx":
        return {"map": "interface ethernet {port} qos map dscp {dscp} to switch-priority {cls}",
                "pfc": "dcb priority-flow-control priority {cls} enable",
                "trust": "interface ethernet {port} qos trust L3",
                "mtu": "interface ethernet {port} mtu {mtu} force",
                "oper": "interface ethernet {port} dcb priority-flow-control mode on force"}
    return {"map": "set \"{dscp}\": \"{cls}\" in {map} (config_db.json)",
            "pfc": "add {cls} to pfc_enable of PORT_QOS_MAP|{port} (config_db.json)",
            "trust": "bind a dscp_to_tc_map in PORT_QOS_MAP|{port}",
            "mtu": "config interface mtu {port} {mtu}"}


class _Check:
    """The comparisons of one switch against one fabric's expectation."""

    def __init__(self, expect: Mapping[str, Any], state: State) -> None:
        self.expect = expect
        self.state = state
        self.name = str(state.get("name"))
        self.os = str(state.get("os"))
        self.label = OS_LABEL.get(self.os, self.os)
        self.fix = _fixes(self.os)
        self.out: list[Finding] = []
        self.roce = expect.get("roce")

    def add(self, check: str, key: str, wanted: Any, actual: Any, severity: str, reason: str, fix: str,
            host: str | None = None) -> None:
        self.out.append(_finding(self.name, check, f"{self.name}:{key}", wanted, actual, severity, reason, fix,
                                 host))

    # ------------------------------------------------------------------ the QoS of a group of ports
    def group(self, ports: list[str], rec: Mapping[str, Any]) -> bool:
        """Trust, the RoCE DSCP's class and PFC, the hosts' lossless priorities, the CNP's class; True when
        RoCE lands in the right lossless class (the scheduling checks then compare its share)."""
        roce = self.roce
        if not roce:
            return False
        where = f"{self.name} {describe_ports(ports)}"
        first = sorted(ports, key=port_sort_key)[0]
        word = rec.get("class_word") or "class"
        dscp, prio = int(roce["dscp"]), int(roce["priority"])
        trust = rec.get("trust")
        if trust is not None:
            wanted = roce.get("trust", "dscp")
            ok = trust == "both" or trust == wanted
            if not ok:
                self.add("switch-trust", f"{first}:trust", wanted, trust, "error",
                         f"{where} trusts {trust}, the hosts mark RoCE by {wanted} (DSCP {dscp}, priority {prio}): "
                         f"the switch classifies RoCE by its {trust} default and does not keep it lossless",
                         f"on the switch: {self.fix['trust'].format(port=first)}; or on the hosts: roce.trust: "
                         f"{trust if trust in ('dscp', 'pcp') else 'dscp'}")
                return False
        table = _table(rec.get("dscp_map"))
        pfc = rec.get("pfc")
        pfc_classes = [int(c) for c in (pfc or {}).get("classes") or []]
        reported: set[int] = set()
        fine = False
        if roce.get("trust", "dscp") == "dscp" and table:
            map_name = (rec.get("dscp_map") or {}).get("name") or "the DSCP map"
            cls = table.get(dscp)
            tc = _table(rec.get("class_tc")).get(cls, cls) if cls is not None else None
            queue = _table(rec.get("tc_queue")).get(tc, tc) if tc is not None else None
            lossy_why = self._lossy(cls, queue, pfc, rec.get("lossless"), word)
            shown = f"{word} {cls}" if cls is not None else f"no {word} (DSCP {dscp} is not in the map)"
            if pfc is None and lossy_why is None:
                self.not_recorded(f"{where}: PFC", "the state does not say which classes have PFC: whether DSCP "
                                  f"{dscp} -> {shown} is lossless was not compared")
            elif lossy_why and cls == prio:
                reported.add(prio)
                self.add("switch-pfc-off", f"{first}:priority{prio}", f"PFC on priority {prio}",
                         f"PFC on {_list(pfc_classes)}", "error",
                         f"{where}: PFC is off on priority {prio} ({lossy_why}): DSCP {dscp} -> {word} {cls} is "
                         "lossy, so RoCE traffic from the hosts is dropped, not paused",
                         f"on the switch: {self.fix['pfc'].format(cls=prio, port=first)}")
            elif lossy_why:
                self.add("switch-dscp-lossy", f"{map_name}:dscp{dscp}", f"{word} {prio} (lossless)",
                         f"{shown} (lossy)", "error",
                         f"{where}, {map_name}: DSCP {dscp} -> {shown} (lossy): {lossy_why}, so RoCE traffic "
                         f"from the hosts is dropped instead of paused",
                         f"on the switch: {self.fix['map'].format(dscp=dscp, cls=prio, map=map_name, port=first)}; "
                         f"or on the hosts: {self._host_fix(table, pfc_classes)}")
            elif cls != prio:
                reported.add(prio)
                self.add("switch-dscp-priority", f"{map_name}:dscp{dscp}", f"{word} {prio}", f"{word} {cls}",
                         "error",
                         f"{where}, {map_name}: DSCP {dscp} -> {word} {cls}, lossless, but the hosts' RoCE "
                         f"priority is {prio}: the switch pauses priority {cls}, which does not stop the hosts' "
                         "RoCE traffic",
                         f"on the switch: {self.fix['map'].format(dscp=dscp, cls=prio, map=map_name, port=first)}; "
                         f"or on the hosts: roce.priority: {cls} and pfc_priorities: [{cls}]")
            else:
                fine = True
            self.cnp(where, first, rec, table, pfc_classes, roce, word)
        elif roce.get("trust", "dscp") == "dscp" and rec.get("dscp_map") is None:
            self.not_recorded(f"{where}: DSCP map", f"the state records no DSCP map: DSCP {dscp} -> {word} was not "
                              "compared")
        if pfc is not None:
            for want in sorted(int(p) for p in roce.get("pfc_priorities") or []):
                if want in reported or want in pfc_classes:
                    continue
                self.add("switch-pfc-off", f"{first}:priority{want}", f"PFC on priority {want}",
                         f"PFC on {_list(pfc_classes)}", "error",
                         f"{where}: PFC is off on priority {want} ({pfc.get('source')}), which the hosts treat as "
                         "lossless: the switch drops that priority instead of pausing it",
                         f"on the switch: {self.fix['pfc'].format(cls=want, port=first)}; or on the hosts: take "
                         f"{want} out of roce.pfc_priorities")
        return fine

    def schedule(self, ports: list[str], rec: Mapping[str, Any], fine: bool) -> None:
        """The CNP class's scheduling and, where RoCE lands in the right class, its share."""
        roce = self.roce
        table = _table(rec.get("dscp_map"))
        if not roce or not table or roce.get("trust", "dscp") != "dscp":
            return
        where = f"{self.name} {describe_ports(ports)}"
        first = sorted(ports, key=port_sort_key)[0]
        word = rec.get("class_word") or "class"
        self.cnp_strict(where, first, rec, table, roce, word)
        if fine:
            cls = table.get(int(roce["dscp"]))
            tc = _table(rec.get("class_tc")).get(cls, cls) if cls is not None else None
            queue = _table(rec.get("tc_queue")).get(tc, tc) if tc is not None else None
            self.ets(where, first, rec, queue, roce)

    @staticmethod
    def _lossy(klass: int | None, queue: int | None, pfc: Mapping[str, Any] | None,
               lossless: Mapping[str, Any] | None, word: str) -> str | None:
        """Why class ``klass`` is lossy (with where the state says so), or None when it is lossless (or the state
        does not say)."""
        if klass is None:
            return "an unmapped DSCP goes to the default class"
        if pfc is None:
            return None
        classes = [int(c) for c in pfc.get("classes") or []]
        if klass not in classes:
            if not classes:
                return f"no {word} has PFC ({pfc.get('source')})"
            return f"only {word} {_list(classes)} {'has' if len(classes) == 1 else 'have'} PFC: {pfc.get('source')}"
        if lossless is not None and queue is not None and queue not in (lossless.get("classes") or []):
            return f"queue {queue} has no lossless buffer: {lossless.get('source')}"
        return None

    def _host_fix(self, table: Mapping[int, int], pfc_classes: Sequence[int]) -> str:
        if self.os == "sonic":
            lossless_dscps = [d for d, c in sorted(table.items()) if c in pfc_classes]
            if 3 in lossless_dscps and table.get(3) == 3:
                return "roce.preset: sonic (DSCP 3 -> TC 3, lossless in SONiC's default maps)"
            if lossless_dscps:
                d = lossless_dscps[0]
                return f"roce.dscp: {d} and roce.priority: {table[d]} (lossless on this switch)"
        lossless = [d for d, c in sorted(table.items()) if c in pfc_classes]
        return (f"roce.dscp: {lossless[0]} and roce.priority: {table[lossless[0]]} (lossless on this switch)"
                if lossless else "nothing: no DSCP is lossless on this switch")

    def cnp(self, where: str, first: str, rec: Mapping[str, Any], table: Mapping[int, int],
            pfc_classes: Sequence[int], roce: Mapping[str, Any], word: str) -> None:
        cnp = roce.get("cnp") or {}
        if cnp.get("dscp") is None:
            return
        cdscp, cprio = int(cnp["dscp"]), int(cnp.get("priority", 6))
        ccls = table.get(cdscp)
        if ccls is None:
            return
        map_name = (rec.get("dscp_map") or {}).get("name") or "the DSCP map"
        if ccls != cprio:
            self.add("switch-cnp-class", f"{map_name}:dscp{cdscp}", f"{word} {cprio}", f"{word} {ccls}", "warning",
                     f"{where}, {map_name}: CNP DSCP {cdscp} -> {word} {ccls}, the hosts send CNPs on priority "
                     f"{cprio}: congestion notifications share a class the hosts do not give them",
                     f"on the switch: {self.fix['map'].format(dscp=cdscp, cls=cprio, map=map_name, port=first)}; "
                     f"or on the hosts: roce.cnp.priority: {ccls}")
        if ccls in pfc_classes:
            self.add("switch-cnp-lossless", f"{map_name}:dscp{cdscp}:pfc", f"{word} {ccls} without PFC",
                     f"PFC on {word} {ccls}", "warning",
                     f"{where}: CNP DSCP {cdscp} -> {word} {ccls}, which has PFC: CNPs can be paused behind the "
                     "very traffic they are meant to slow down",
                     f"on the switch: give CNPs a class without PFC (map DSCP {cdscp} to {word} {cprio}); or on the "
                     "hosts: a CNP DSCP the switch maps to such a class")

    def cnp_strict(self, where: str, first: str, rec: Mapping[str, Any], table: Mapping[int, int],
                   roce: Mapping[str, Any], word: str) -> None:
        cnp = roce.get("cnp") or {}
        if cnp.get("dscp") is None or table.get(int(cnp["dscp"])) is None:
            return
        cdscp = int(cnp["dscp"])
        ccls = table[cdscp]
        tc = _table(rec.get("class_tc")).get(ccls, ccls)
        queue = _table(rec.get("tc_queue")).get(tc, tc)
        sched = (rec.get("scheduler") or {}).get(queue) if rec.get("scheduler") else None
        if sched is None and rec.get("scheduler"):
            sched = (rec.get("scheduler") or {}).get(str(queue))
        if sched is not None and sched.get("mode") != "strict":
            weight = sched.get("weight")
            self.add("switch-cnp-not-strict", f"{first}:queue{queue}", "strict priority",
                     "DWRR" + (f" weight {weight}" if weight is not None else ""), "warning",
                     f"{where}: CNPs (DSCP {cdscp} -> {word} {ccls}, queue {queue}) are scheduled by weight, not "
                     f"strict priority ({sched.get('source')}); the hosts schedule them strict (ETS tsa): under load "
                     "CNPs wait behind data and DCQCN slows the senders late",
                     "on the switch: make the CNP queue strict priority (SONiC: a SCHEDULER of type STRICT for "
                     f"queue {queue}; Cumulus: the RoCE default; Onyx: traffic-class {tc} dcb ets strict)")

    def ets(self, where: str, first: str, rec: Mapping[str, Any], queue: int | None,
            roce: Mapping[str, Any]) -> None:
        scheduler = rec.get("scheduler") or {}
        ets = roce.get("ets") or {}
        if not scheduler or queue is None or not ets:
            return
        sched = scheduler.get(queue)
        prio_tc = ets.get("prio_tc") or list(range(8))
        host_tc = prio_tc[int(roce["priority"])] if int(roce["priority"]) < len(prio_tc) else None
        if sched is None or host_tc is None or (ets.get("tsa") or ["ets"] * 8)[host_tc] != "ets":
            return
        host_share = int((ets.get("bw") or [0] * 8)[host_tc])
        weights = {q: s.get("weight") for q, s in scheduler.items() if s.get("mode") == "dwrr"}
        if sched.get("mode") != "dwrr" or not isinstance(sched.get("weight"), int):
            return
        total = sum(w for w in weights.values() if isinstance(w, int)) or 0
        if not total:
            return
        share = round(100.0 * sched["weight"] / total, 1)
        if share + 0.5 < host_share:
            self.add("switch-ets-share", f"{first}:queue{queue}:share", f"{host_share}%", f"{share:g}%", "info",
                     f"{where}: under contention the switch gives the RoCE queue {queue} {share:g}% (DWRR weight "
                     f"{sched['weight']} of {total}, {sched.get('source')}), the hosts' ETS gives TC {host_tc} "
                     f"{host_share}%",
                     "on the switch: raise the RoCE queue's DWRR weight; or on the hosts: lower roce.ets.bw of the "
                     "RoCE TC to what the switch gives")

    def not_recorded(self, what: str, reason: str) -> None:
        key = what.split(":")[-1].strip().replace(" ", "-").lower()
        if any(f["check"] == "switch-not-recorded" and f["key"].endswith(key) for f in self.out):
            return
        self.add("switch-not-recorded", key, None, None, "info", f"{self.name}: {reason}",
                 "record the command that shows it in the switch state (docs/network.md lists what each parser "
                 "reads)")

    # ------------------------------------------------------------------ per port
    def ports(self, ports: list[str]) -> None:
        records = self.state.get("ports") or {}
        mtus = self.expect.get("host_mtus") or {}
        fabric_mtu = self.expect.get("mtu")
        for name in ports:
            rec = records[name]
            neighbor = rec.get("neighbor") or {}
            host = neighbor.get("host") if neighbor.get("host") in mtus else None
            want = max(mtus[host].values()) if host and mtus.get(host) else fabric_mtu
            mtu = rec.get("mtu")
            if isinstance(mtu, int) and isinstance(want, int) and mtu < want:
                who = (f"{host} {neighbor.get('port') or ''}".strip() if host
                       else f"the hosts on {self.expect['fabric']}")
                target = max(want, 9216) if want > 1500 else want
                self.add("switch-mtu", f"{name}:mtu", want, mtu, "error",
                         f"{self.name} port {name} has MTU {mtu}, {who} send frames of up to {want} bytes: larger "
                         "frames are dropped at the switch",
                         f"on the switch: {self.fix['mtu'].format(port=name, mtu=target)}"
                         f"; or on the hosts: an MTU of at most {mtu} on fabric {self.expect['fabric']}", host=host)
            if rec.get("pfc_oper") is False and self.roce:
                self.add("switch-pfc-oper", f"{name}:pfc-oper", "PFC operational", "PFC oper disabled", "error",
                         f"{self.name} port {name}: PFC is operationally off (the switch reports PFC oper Disabled): "
                         "the port drops instead of pausing",
                         "on the switch: " + self.fix.get("oper", "enable PFC on the port").format(port=name),
                         host=host)


def check_switch(expect: Mapping[str, Any], state: State) -> list[Finding]:
    """The findings of one switch against one fabric's expectation (:func:`expectation`)."""
    check = _Check(expect, state)
    patterns = (expect.get("switch") or {}).get("ports")
    ports = in_scope(state, patterns)
    if not ports:
        if patterns:
            check.add("switch-ports", "ports", ", ".join(patterns), ", ".join(list(state.get("ports") or {})[:8])
                      or None, "error", f"switch.ports of fabric {expect['fabric']} ({', '.join(patterns)}) names no "
                      f"port of {check.name} ({state.get('source')})", "list the ports the fabric's nodes use, as the "
                      "switch names them (Ethernet0, swp1, Eth1/1) or as patterns (swp*)")
        else:
            check.not_recorded("ports", f"the state lists no port with a QoS binding ({state.get('source')}): nothing "
                               "was compared")
        return check.out
    records = state["ports"]
    groups: dict[str, list[str]] = {}
    for name in ports:
        groups.setdefault(_signature(records[name], CLASSIFICATION), []).append(name)
    fine: dict[str, bool] = {}
    for names in groups.values():
        ok = check.group(names, records[names[0]])
        fine.update(dict.fromkeys(names, ok))
    schedules: dict[str, list[str]] = {}
    for name in ports:
        schedules.setdefault(_signature(records[name], SCHEDULING) + str(fine[name]), []).append(name)
    for names in schedules.values():
        check.schedule(names, records[names[0]], fine[names[0]])
    check.ports(ports)
    for note in state.get("notes") or []:
        check.add("switch-not-recorded", "note:" + note.split(":")[0][:60], None, None, "info",
                  f"{check.name}: {note}", "record the command that shows it in the switch state")
    return check.out


def expectation(fabric: Any, host_mtus: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, Any]:
    """What the hosts on a fabric are planned to do, from the validated spec's Fabric model: RoCE
    classification (None on a fabric that is not RoCE), MTU, the switch block; ``host_mtus``:
    ``{host: {interface: mtu}}`` of the hosts' plans (the fabric MTU otherwise)."""
    roce = None
    if getattr(fabric, "kind", None) == "roce":
        from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.models import Roce

        model = fabric.roce or Roce()
        roce = {"trust": model.trust, "dscp": model.dscp, "priority": model.priority,
                "pfc_priorities": sorted(set(model.pfc_priorities)),
                "cnp": {"dscp": model.cnp.dscp, "priority": model.cnp.priority},
                "ets": {"prio_tc": list(model.ets.prio_tc), "tsa": list(model.ets.tsa), "bw": list(model.ets.bw)},
                "preset": model.preset}
    switch = fabric.switch.model_dump(mode="json") if getattr(fabric, "switch", None) is not None else None
    return {"fabric": fabric.name, "mtu": fabric.mtu, "roce": roce, "switch": switch,
            "host_mtus": {h: dict(m) for h, m in (host_mtus or {}).items()}}


def compare_fabric(expect: Mapping[str, Any], states: Sequence[State]) -> list[Finding]:
    out: list[Finding] = []
    for state in states:
        for finding in check_switch(expect, state):
            finding["fabric"] = expect["fabric"]
            out.append(finding)
    return out
