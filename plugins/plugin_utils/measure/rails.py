# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rails in the measurement: one row per pair and rail, where its bytes actually went, and the rail findings.

A pair of hosts with several rails on a fabric loads rail i of the client to rail i of the server for
every rail both have, at once (:mod:`.schedule`). Each host's ``net_probe`` reports each leg's figures
and the bytes every NIC sent and received over the run (``nic_bytes``): a leg's bytes should leave the
client by its rail's NIC and arrive at the server on the server's NIC of that rail.

Findings (docs/measure.md), each naming host, rail and interface:

* ``wrong-egress``: ``ip route get PEER from SELF`` names another device (path_check), or less than 99 %
  of a leg's bytes left through the rail's NIC (the rest through another);
* ``arp-flux``: a NIC answers ARP for another rail's address (path_check's ``arping``), or a leg's bytes
  arrived at the server on another NIC (the client's neighbour entry points at the wrong one);
* ``rp-filter-drops``: the node's ``IPReversePathFilter`` counter rose while its rails were measured;
* ``slow-rail``: every pair of one host's rail is slow while its other rails and its peers' same rail
  are not.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .findings import by_node, concentrated, finding, slow
from .results import join_pair, num

SHARE_MIN = 0.99         # a leg whose NIC carried less of its bytes left (or arrived) elsewhere
MIN_BYTES = 1 << 20      # legs that moved less than this say nothing about where bytes went
RAIL_KINDS = ("wrong-egress", "arp-flux", "rp-filter-drops", "slow-rail")
Row = dict[str, Any]


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def rail_finding(kind: str, host: str | None, rail: int | None, interface: str | None, reason: str, fix: str,
                 evidence: Mapping[str, Any], *, fabric: str | None, peer: str | None = None,
                 severity: str = "error") -> dict[str, Any]:
    out = finding(kind, host, reason, fix, evidence, fabric=fabric, device=interface, peer=peer, severity=severity)
    out.update(rail=rail, interface=interface)
    return out


def _leg_record(record: Mapping[str, Any] | None, index: int) -> dict[str, Any] | None:
    """The record of one leg: the leg's figures with the node's netstat and socket buffers."""
    if record is None:
        return None
    probe = _m(record.get("probe"))
    legs = probe.get("legs") or []
    leg = dict(legs[index]) if index < len(legs) and isinstance(legs[index], Mapping) else {}
    if not leg and probe:
        leg = {"ok": False, "error": "the probe returned no figures for this rail"}
    for key in ("netstat", "socket_buffers", "tool"):
        leg.setdefault(key, probe.get(key))
    return {"probe": leg if probe else None, "error": record.get("error")}


def _nic(record: Mapping[str, Any] | None, name: str | None, key: str) -> int | None:
    entry = _m(_m(_m(_m(record).get("probe")).get("nic_bytes")).get(str(name)))
    value = num(entry.get(key))
    return None if value is None else int(value)


def _drops(record: Mapping[str, Any] | None) -> int | None:
    value = num(_m(_m(_m(record).get("probe")).get("netstat")).get("TcpExtIPReversePathFilter"))
    return None if value is None else int(value)


def pair_rows(pair: Mapping[str, Any], fabric: str, round_index: int, client: Mapping[str, Any] | None,
              server: Mapping[str, Any] | None, streams: int) -> list[Row]:
    """The rows of one scheduled pair: one per rail it loaded (the pair's own id where it loaded rail0
    alone), each with where its bytes went."""
    legs = [dict(r) for r in pair.get("rails") or []]
    if len(legs) > 1 or (legs and legs[0]["rail"] != 0):
        rows = []
        for index, leg in enumerate(legs):
            leg_pair = {"id": f"{fabric}/rail{leg['rail']}:{pair['client']}->{pair['server']}",
                        "client": pair["client"], "server": pair["server"], "client_address": leg["client_address"],
                        "server_address": leg["server_address"], "port": leg["port"]}
            row = join_pair(leg_pair, fabric, round_index, _leg_record(client, index), _leg_record(server, index),
                            streams)
            row.update(pair=pair["id"], rail=leg["rail"], client_interface=leg.get("client_interface"),
                       server_interface=leg.get("server_interface"))
            rows.append(row)
    else:
        row = join_pair(pair, fabric, round_index, client, server, streams)
        first = legs[0] if legs else {}
        row.update(pair=pair["id"], rail=0, client_interface=first.get("client_interface"),
                   server_interface=first.get("server_interface"))
        rows = [row]
    _traffic(rows, client, server)
    return rows


def _traffic(rows: Sequence[Row], client: Mapping[str, Any] | None, server: Mapping[str, Any] | None) -> None:
    """Each row's ``egress_share`` (of its bytes, the share its client's rail NIC sent), ``ingress_share``
    (the server's rail NIC received), ``left_on`` / ``arrived_on`` (the NIC that carried the rest) and the
    two nodes' reverse-path drops over the run."""
    sides = (("client", client, "tx_bytes", "egress"), ("server", server, "rx_bytes", "ingress"))
    for side, record, key, field in sides:
        nics = _m(_m(_m(record).get("probe")).get("nic_bytes"))
        planned: dict[str, float] = {}
        for row in rows:
            name = row.get(f"{side}_interface")
            if name:
                planned[name] = planned.get(name, 0.0) + float(row.get("bytes") or 0)
        excess = {name: (num(_m(entry).get(key)) or 0) - planned.get(name, 0.0) for name, entry in nics.items()}
        for row in rows:
            name, moved = row.get(f"{side}_interface"), row.get("bytes")
            share, where = None, None
            own = _nic(record, name, key) if name else None
            if name and own is not None and moved and moved >= MIN_BYTES:
                share = round(min(1.0, own / moved), 4)
                where = name
                if share < SHARE_MIN:
                    others = {n: e for n, e in excess.items() if n != name and e > (1 - SHARE_MIN) * moved}
                    where = max(others, key=lambda n: others[n]) if others else None
            row[f"{field}_share"] = share
            row["left_on" if field == "egress" else "arrived_on"] = where
    for row in rows:
        row["client_rp_filter_drops"] = _drops(client)
        row["server_rp_filter_drops"] = _drops(server)


# --------------------------------------------------------------------------- findings
def _fix_routing(host: str) -> str:
    return (f"apply rail_routing on {host} (site.yml --tags rail_routing): a table and a rule "
            "'from ADDRESS lookup TABLE' per rail, arp_ignore=1, arp_announce=2 and rp_filter=2 on each rail "
            "(docs/network.md, \"Several NICs on one fabric\")")


def wrong_egress(fabric: str, rows: Sequence[Row], paths: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """wrong-egress per (host, rail): the route check or the bytes say the rail's traffic left elsewhere."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for path in paths:
        if path.get("fabric") != fabric or not path.get("route_dev") or not path.get("interface"):
            continue
        if path["route_dev"] != path["interface"]:
            key = (str(path["source"]), int(path.get("rail") or 0))
            entry = found.setdefault(key, {"interface": path["interface"], "routes": [], "pairs": []})
            entry["routes"].append({"peer": path.get("peer"), "peer_rail": path.get("peer_rail", path.get("rail")),
                                    "address": path.get("address"), "route_dev": path["route_dev"]})
    for row in rows:
        if row.get("egress_share") is not None and row["egress_share"] < SHARE_MIN:
            key = (str(row["client"]), int(row.get("rail") or 0))
            entry = found.setdefault(key, {"interface": row.get("client_interface"), "routes": [], "pairs": []})
            entry["pairs"].append({"pair": row["id"], "egress_share": row["egress_share"], "left_on": row["left_on"],
                                   "bytes": row.get("bytes")})
    out = []
    for (host, rail), entry in sorted(found.items()):
        via = sorted({r["route_dev"] for r in entry["routes"]} | {p["left_on"] for p in entry["pairs"] if p["left_on"]})
        what = []
        if entry["routes"]:
            what.append(f"ip route get PEER from its address names {', '.join(via)} for "
                        f"{len(entry['routes'])} peer address(es)")
        if entry["pairs"]:
            worst = min(entry["pairs"], key=lambda p: p["egress_share"])
            what.append(f"only {round(100 * worst['egress_share'], 1)} % of a pair's bytes left through "
                        f"{entry['interface']}"
                        + (f" (the rest through {worst['left_on']})" if worst["left_on"] else ""))
        out.append(rail_finding("wrong-egress", host, rail, entry["interface"],
                                f"rail{rail} of {host} on {fabric} ({entry['interface']}) does not send by its own "
                                "NIC: " + "; ".join(what), _fix_routing(host), entry, fabric=fabric))
    return out


def _owner_of_mac(nics: Mapping[str, Mapping[str, str]], mac: str) -> tuple[str | None, str | None]:
    for host, table in nics.items():
        for name, value in _m(table).items():
            if str(value).lower() == mac.lower():
                return host, name
    return None, None


def arp_flux(fabric: str, rows: Sequence[Row], paths: Sequence[Mapping[str, Any]],
             nics: Mapping[str, Mapping[str, str]], rail_nics: Mapping[tuple[str, int], str]) -> list[dict[str, Any]]:
    """arp-flux per (host, rail): NICs of the host answer ARP for the rail's address (path_check's arping),
    or the rail's bytes arrived on another NIC of the host. ``nics``: each host's {interface: MAC};
    ``rail_nics``: {(host, rail): interface}."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for path in paths:
        arp = _m(path.get("arp"))
        macs = [str(m) for m in arp.get("macs") or []]
        if path.get("fabric") != fabric or not macs:
            continue
        peer, rail = str(path.get("peer")), int(path.get("peer_rail", path.get("rail")) or 0)
        own = rail_nics.get((peer, rail))
        answering = []
        for mac in macs:
            host, name = _owner_of_mac(nics, mac)
            answering.append({"mac": mac, "host": host, "interface": name})
        wrong = [a for a in answering if a["interface"] is not None and (a["host"] != peer or a["interface"] != own)]
        if len(macs) > 1 or wrong:
            entry = found.setdefault((peer, rail), {"interface": own, "answered_by": [], "asked_by": [], "pairs": []})
            entry["asked_by"].append({"host": path.get("source"), "interface": path.get("interface"),
                                      "address": path.get("address")})
            for a in answering:
                if a not in entry["answered_by"]:
                    entry["answered_by"].append(a)
    for row in rows:
        if row.get("ingress_share") is not None and row["ingress_share"] < SHARE_MIN:
            key = (str(row["server"]), int(row.get("rail") or 0))
            entry = found.setdefault(key, {"interface": row.get("server_interface"), "answered_by": [], "asked_by": [],
                                           "pairs": []})
            entry["pairs"].append({"pair": row["id"], "ingress_share": row["ingress_share"],
                                   "arrived_on": row["arrived_on"], "bytes": row.get("bytes")})
    out = []
    for (host, rail), entry in sorted(found.items()):
        others = sorted({a["interface"] for a in entry["answered_by"] if a["host"] == host and a["interface"]
                         and a["interface"] != entry["interface"]} |
                        {p["arrived_on"] for p in entry["pairs"] if p["arrived_on"]})
        what = []
        if entry["answered_by"]:
            what.append(f"{len(entry['answered_by'])} NIC(s) answer ARP for its address"
                        + (f" ({', '.join(others)} besides {entry['interface']})" if others else ""))
        if entry["pairs"]:
            worst = min(entry["pairs"], key=lambda p: p["ingress_share"])
            what.append(f"only {round(100 * worst['ingress_share'], 1)} % of a pair's bytes arrived on "
                        f"{entry['interface']}"
                        + (f" (the rest on {worst['arrived_on']})" if worst["arrived_on"] else ""))
        interface = others[0] if others else entry["interface"]
        out.append(rail_finding("arp-flux", host, rail, interface,
                                f"ARP flux on {host} {fabric} rail{rail} ({entry['interface']}): " + "; ".join(what)
                                + "; peers send that rail's traffic to the wrong NIC", _fix_routing(host), entry,
                                fabric=fabric))
    return out


def rp_filter_drops(fabric: str, rows: Sequence[Row]) -> list[dict[str, Any]]:
    """rp-filter-drops: the host's IPReversePathFilter rose while its rails ran; named per rail whose
    pairs failed or arrived elsewhere (every rail of those pairs when none stands out)."""
    per_host: dict[str, list[tuple[Row, str, int]]] = {}
    for row in rows:
        for side in ("client", "server"):
            drops = row.get(f"{side}_rp_filter_drops")
            if drops:
                per_host.setdefault(str(row[side]), []).append((row, side, int(drops)))
    out = []
    for host, items in sorted(per_host.items()):
        hurt = [(r, s, d) for r, s, d in items if not r["ok"] or slow(r)
                or (s == "server" and (r.get("ingress_share") or 1) < SHARE_MIN)]
        chosen = hurt or items
        rails: dict[int, dict[str, Any]] = {}
        for row, side, drops in chosen:
            entry = rails.setdefault(int(row.get("rail") or 0), {"interface": row.get(f"{side}_interface"),
                                                                 "drops": drops, "pairs": []})
            entry["pairs"].append({"pair": row["id"], "ok": row["ok"], "gbit_per_s": row.get("gbit_per_s"),
                                   "error": row.get("error")})
        for rail, entry in sorted(rails.items()):
            out.append(rail_finding(
                "rp-filter-drops", host, rail, entry["interface"],
                f"the reverse-path filter of {host} dropped {entry['drops']} packet(s) (IPReversePathFilter) while "
                f"{fabric} rail{rail} ({entry['interface']}) was measured: strict rp_filter drops traffic that "
                "arrives on another rail than the route back would take",
                f"set rp_filter=2 (loose) on {host}'s rails, or route each rail by its own table: apply "
                "rail_routing (site.yml --tags rail_routing), which does both", entry, fabric=fabric))
    return out


def slow_rails(fabric: str, rows: Sequence[Row]) -> list[dict[str, Any]]:
    """slow-rail: every pair of one host's rail is slow while its peers' pairs on that rail with other
    hosts are not, and the host's other rails are not all slow (that is node-link)."""
    out: list[dict[str, Any]] = []
    rails = sorted({int(r.get("rail") or 0) for r in rows})
    if len(rails) < 2:
        return out
    for rail in rails:
        mine = [r for r in rows if int(r.get("rail") or 0) == rail and r["ok"]]
        nodes = by_node(mine)
        for host in concentrated(nodes, lambda p: slow(p) and not p["attributed_to"]):
            others = [r for r in rows if int(r.get("rail") or 0) != rail and r["ok"] and host in (r["client"],
                                                                                                  r["server"])]
            if others and all(slow(r) for r in others):
                continue
            pairs = nodes[host]
            side = "client" if pairs[0]["client"] == host else "server"
            interface = pairs[0].get(f"{side}_interface")
            best = max((r["gbit_per_s"] for r in others if r["gbit_per_s"] is not None), default=None)
            worst = max(r["gbit_per_s"] for r in pairs if r["gbit_per_s"] is not None)
            for r in pairs:
                r["attributed_to"] = host
            out.append(rail_finding(
                "slow-rail", host, rail, interface,
                f"every pair of {host}'s {fabric} rail{rail} ({interface}) is slow (best {round(worst, 3)} Gbit/s) "
                f"while its other rails reach {round(best, 3) if best is not None else '?'} Gbit/s and the peers' "
                f"rail{rail} is fine with other hosts: that NIC, its cable or its switch port limits it",
                f"check {host} {interface}: negotiated speed and width (ethtool, lspci), errors (ethtool -S), a "
                "shaper or policer on its switch port, the cable or optic",
                {"pairs": [{"pair": r["id"], "gbit_per_s": r["gbit_per_s"], "failed_gates": r["failed_gates"]}
                           for r in pairs], "other_rails_best_gbit_s": best}, fabric=fabric))
    return out


def rail_findings(fabric: str, rows: Sequence[Row], paths: Sequence[Mapping[str, Any]],
                  nics: Mapping[str, Mapping[str, str]],
                  rail_nics: Mapping[tuple[str, int], str]) -> list[dict[str, Any]]:
    return (wrong_egress(fabric, rows, paths) + arp_flux(fabric, rows, paths, nics, rail_nics)
            + rp_filter_drops(fabric, rows) + slow_rails(fabric, rows))
