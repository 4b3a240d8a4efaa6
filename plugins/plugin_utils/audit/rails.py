# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit of the plan's rails (capability rail_routing): per rail, its rule, its table's route and its
interface's ARP/rp_filter keys against ``datapath_facts.routing`` (plugins/module_utils/_rail_facts.py).

Drift per rail: ``rail-interface`` (no interface matches the rail), ``rail-address`` (no address inside
its subnets, or not the plan's), ``rail-rule`` (no ``from ADDRESS lookup TABLE`` at its priority),
``rail-table`` (its table lacks a planned route), ``rail-sysctl`` (arp_ignore, arp_announce, rp_filter).
The key of each names fabric, rail and interface (``rdma rail1 ens2f0np0``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

CAPABILITY = "rail_routing"
FIX = "run site.yml (--tags rail_routing) to route every rail by its own table and persist it"


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _net(text: Any) -> Any:
    try:
        return ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        return None


def _address(rail: Mapping[str, Any], live: list[str]) -> str | None:
    """The rail's address: the plan's when the interface holds it, else its own inside the rail's subnets."""
    nets = [n for n in (_net(t) for t in list(rail.get("subnets") or []) + [rail.get("subnet")]) if n is not None]
    held = [str(ipaddress.ip_interface(a).ip) for a in live]
    if rail.get("address"):
        return str(rail["address"]) if str(rail["address"]) in held else None
    for text in held:
        ip = ipaddress.ip_address(text)
        if not nets or any(n.version == ip.version and ip in n for n in nets):
            return text
    return None


def rail_drift(drift: Callable[..., None], plan: Mapping[str, Any], facts: Mapping[str, Any],
               resolve: Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]) -> None:
    """Report through ``drift(capability, check, key, wanted, actual, reason, fix)`` what differs."""
    part = _m(plan.get(CAPABILITY))
    rails = [r for r in part.get("rails") or [] if isinstance(r, Mapping)]
    routing = facts.get("routing")
    if not rails or not isinstance(routing, Mapping):
        return
    ifaces = _m(facts.get("interfaces"))
    for rail in rails:
        where = f"{rail.get('fabric')} {rail.get('name') or 'rail%s' % rail.get('rail')}"
        planned = {"name": rail.get("interface"), "match": rail.get("match")}
        name = resolve(planned, ifaces) if ifaces else rail.get("interface")
        if name is None:
            drift(CAPABILITY, "rail-interface", where, rail.get("interface") or rail.get("match"), None,
                  f"no interface matches {where} ({rail.get('interface') or rail.get('match')})",
                  "check the NIC, its driver and the interface match in the spec")
            continue
        key = f"{where} {name}"
        address = _address(rail, list(_m(routing.get("addresses")).get(name) or []))
        if address is None:
            drift(CAPABILITY, "rail-address", key, rail.get("address") or rail.get("subnets"),
                  list(_m(routing.get("addresses")).get(name) or []),
                  f"{key} has no address " + (f"{rail['address']}" if rail.get("address")
                                              else f"inside {', '.join(rail.get('subnets') or [])}"),
                  "configure the rail's address (the node's network configuration) or fix datapath_addresses")
            continue
        table, priority = rail.get("table"), rail.get("priority")
        host = 128 if ":" in address else 32
        rules = [r for r in routing.get("rules") or [] if isinstance(r, Mapping) and r.get("priority") == priority]
        if not any(r.get("src") == address and r.get("srclen") in (None, host) and r.get("table_id") == table
                   for r in rules):
            drift(CAPABILITY, "rail-rule", key, f"{priority}: from {address} lookup {table}",
                  [f"{r.get('priority')}: from {r.get('src')} lookup {r.get('table')}" for r in rules] or None,
                  f"{key}: no rule 'from {address} lookup {table}' at priority {priority}: its traffic leaves by "
                  "whatever the main table picks", FIX)
        routes = [r for r in _m(routing.get("tables")).get(str(table)) or [] if isinstance(r, Mapping)]
        wanted = [(str(_net(rail.get("subnet"))), None)]
        wanted += [(str(_net(r.get("to"))), r.get("via")) for r in rail.get("routes") or []]
        have = [(str(_net(r.get("dst"))), r.get("gateway")) for r in routes if r.get("dev") == name]
        missing = [w for w in wanted if w[0] != "None" and w not in have]
        if missing:
            drift(CAPABILITY, "rail-table", key, [f"{d}" + (f" via {g}" if g else "") + f" dev {name}"
                                                  for d, g in wanted],
                  [f"{r.get('dst')}" + (f" via {r['gateway']}" if r.get("gateway") else "") + f" dev {r.get('dev')}"
                   for r in routes] or None,
                  f"{key}: table {table} lacks " + ", ".join(d + (f" via {g}" if g else "") for d, g in missing), FIX)
        live = _m(_m(routing.get("sysctl")).get(name))
        for sysctl in ("arp_ignore", "arp_announce", "rp_filter"):
            want = part.get(sysctl)
            if want is None or live.get(sysctl) is None:
                continue
            if str(live[sysctl]) != str(want):
                drift(CAPABILITY, "rail-sysctl", f"{key} {sysctl}", str(want), str(live[sysctl]),
                      f"{key}: net.ipv4.conf.{name}.{sysctl} is {live[sysctl]}, the plan {want}", FIX)
