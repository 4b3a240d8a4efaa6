# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rules that name the bottleneck, each a function over the rows of :mod:`.results`.

A finding is ``{kind, severity, probe, host, fabric | device, peer, evidence, reason, fix}``. The
rules name only what fails, and blame a node only when the failure is concentrated on it: a node
is named when *every* pair it is in fails a check while each of its peers has a pair that passes
(or is named itself). A slow pair is then attributed to that node, so one rate-limited port does
not make its peers look bad; a failing pair with no such node is named as a pair. docs/measure.md
lists every kind with its evidence and fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .results import delta, lost, matching, median

BOTTLENECKS = ("mtu", "socket-buffers", "lossy-port", "node-link", "qos", "slow-device",
               # rails (plugin_utils/measure/rails.py): each names host, rail and interface
               "wrong-egress", "arp-flux", "rp-filter-drops", "slow-rail")
KINDS = (*BOTTLENECKS, "gate", "probe-error")
# How a window-limited pair looks: throughput between these multiples of streams x window / RTT.
WINDOW_LOW, WINDOW_HIGH = 0.2, 1.5
STORAGE_METRICS = (("seq_read_mib_s", "sequential read MiB/s"), ("iops_qd32", "4 KiB random-read IOPS at QD32"),
                   ("iops_qd1", "4 KiB random-read IOPS at QD1"))
Row = dict[str, Any]


def finding(kind: str, host: str | None, reason: str, fix: str, evidence: Mapping[str, Any], *,
            fabric: str | None = None, device: str | None = None, peer: str | None = None,
            probe: str = "network", severity: str = "error") -> dict[str, Any]:
    return {"kind": kind, "severity": severity, "probe": probe, "host": host, "fabric": fabric, "device": device,
            "peer": peer, "evidence": dict(evidence), "reason": reason, "fix": fix}


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _other(pair: Mapping[str, Any], host: str) -> str:
    return str(pair["server"] if pair["client"] == host else pair["client"])


def by_node(pairs: Iterable[Row]) -> dict[str, list[Row]]:
    nodes: dict[str, list[Row]] = {}
    for pair in pairs:
        nodes.setdefault(pair["client"], []).append(pair)
        nodes.setdefault(pair["server"], []).append(pair)
    return nodes


def concentrated(nodes: Mapping[str, Sequence[Row]], flagged: Callable[[Row], bool]) -> list[str]:
    """Nodes in at least two pairs, every one flagged, whose peers each have an unflagged pair (or are
    such nodes themselves). When every node qualifies, none does: the problem is not one node's."""
    candidates = {h for h, rows in nodes.items() if len(rows) >= 2 and all(flagged(p) for p in rows)}
    named = [h for h in nodes if h in candidates
             and all(peer in candidates or not all(flagged(q) for q in nodes[peer])
                     for peer in {_other(p, h) for p in nodes[h]})]
    return [] if len(named) == len(nodes) else named


# --------------------------------------------------------------------------- network
def fabric_stats(pairs: Sequence[Row]) -> dict[str, Any]:
    """Per node: pairs, best and median Gbit/s; the fabric's reference rate is the median of the nodes'
    best pairs (what a healthy node reaches; one slow node moves it little)."""
    ok = [p for p in pairs if p["ok"]]
    nodes = {}
    for host, rows in by_node(pairs).items():
        good = [p["gbit_per_s"] for p in rows if p["ok"]]
        segs = sum(p["segments_sent"] or 0 for p in rows if p["ok"])
        retr = sum(lost(p["retransmits"] or 0, p.get("spurious_retransmits")) for p in rows if p["ok"])
        losses = [p["loss_pct"] for p in rows if p["ok"] and p["loss_pct"] is not None]
        nodes[host] = {"pairs": len(rows), "ok": len(good), "best_gbit_s": _r(max(good)) if good else None,
                       "median_gbit_s": _r(median(good)), "retransmit_share": _r(retr / segs, 6) if segs else None,
                       "max_loss_pct": _r(max(losses)) if losses else None}
    bests = [n["best_gbit_s"] for n in nodes.values() if n["best_gbit_s"] is not None]
    rates = [p["gbit_per_s"] for p in ok]
    return {"pairs": len(pairs), "ok": len(ok), "errors": len(pairs) - len(ok),
            "reference_gbit_s": _r(median(bests)), "median_gbit_s": _r(median(rates)),
            "min_gbit_s": _r(min(rates)) if rates else None, "max_gbit_s": _r(max(rates)) if rates else None,
            "nodes": nodes}


def apply_gates(pairs: Sequence[Row], gate: Mapping[str, Any], ratio: float, reference: float | None) -> None:
    """Fill each ok pair's ``failed_gates`` ({gate, limit, value}) and status."""
    for p in pairs:
        if not p["ok"]:
            continue
        checks = (("min_gbit_s", gate.get("min_gbit_s"), p["gbit_per_s"], "below"),
                  ("outlier_ratio", ratio * reference if ratio and reference else None, p["gbit_per_s"], "below"),
                  ("max_retransmit_share", gate.get("max_retransmit_share"), p["retransmit_share"], "above"),
                  ("max_loss_pct", gate.get("max_loss_pct"), p["loss_pct"], "above"),
                  ("max_p99_ms", gate.get("max_p99_ms"), p["p99_ms"], "above"))
        for name, limit, value, side in checks:
            if limit is None or value is None:
                continue
            if (value < limit) if side == "below" else (value > limit):
                p["failed_gates"].append({"gate": name, "limit": _r(limit, 6), "value": _r(value, 6)})
        p["status"] = "fail" if p["failed_gates"] else "pass"


def _gates(p: Row) -> set[str]:
    return {g["gate"] for g in p["failed_gates"]}


def slow(p: Row) -> bool:
    return p["ok"] and bool(_gates(p) & {"min_gbit_s", "outlier_ratio"})


def lossy_tcp(p: Row) -> bool:
    return p["ok"] and "max_retransmit_share" in _gates(p)


def lossy_any(p: Row) -> bool:
    return p["ok"] and bool(_gates(p) & {"max_retransmit_share", "max_loss_pct"})


def _pair_evidence(p: Row) -> dict[str, Any]:
    return {"pair": p["id"], "gbit_per_s": _r(p["gbit_per_s"]), "retransmit_share": _r(p["retransmit_share"], 6),
            "loss_pct": _r(p["loss_pct"]), "rtt_ms": _r(p["rtt_ms"]), "min_rtt_ms": _r(p["min_rtt_ms"]),
            "p99_ms": _r(p["p99_ms"])}


def probe_errors(fabric: str, pairs: Sequence[Row]) -> list[dict[str, Any]]:
    """probe-error: a node none of whose pairs ran (its peers' other pairs did), else each failed pair."""
    nodes = by_node(pairs)
    named = concentrated(nodes, lambda p: not p["ok"])
    out = []
    for host in named:
        rows = nodes[host]
        out.append(finding("probe-error", host, f"no pair with {host} on {fabric} could run, while its peers' "
                           f"other pairs did: {rows[0]['error']}",
                           f"check that {host} has its address on {fabric} and the link is up (ip -br addr), that "
                           "nothing blocks the probe's port, and that the probe tool exists on it",
                           {"pairs": [{"pair": p["id"], "error": p["error"]} for p in rows]}, fabric=fabric))
        for p in rows:
            p["attributed_to"] = host
    for p in pairs:
        if p["ok"] or p["attributed_to"]:
            continue
        missing = [side for side in ("client", "server") if f"{side} {p[side]}: no result" in (p["error"] or "")]
        host = p[missing[0]] if len(missing) == 1 else p["client"]
        p["attributed_to"] = host
        out.append(finding("probe-error", host, f"pair {p['client']} -> {p['server']} on {fabric} did not run: "
                           f"{p['error']}", "read the error; the other pairs ran, so the cause is one of these two "
                           "nodes or the path between them", {"pair": p["id"], "error": p["error"]},
                           fabric=fabric, peer=_other(p, host)))
    return out


def socket_buffer_findings(fabric: str, pairs: Sequence[Row], expected: float | None) -> list[dict[str, Any]]:
    """socket-buffers: slow pairs whose rate is about streams x window / RTT while the window (the
    receiver's tcp_rmem or the sender's tcp_wmem maximum) is below the bandwidth-delay product of the
    fabric's expected rate; named per node whose buffer is the limit."""
    if not expected:
        return []
    blamed: dict[str, list[dict[str, Any]]] = {}
    for p in pairs:
        # the unloaded RTT when the probe reports it (TCP_INFO min_rtt): behind a queue the smoothed RTT
        # grows until any window looks like the limit
        rtt = p["min_rtt_ms"] or p["rtt_ms"] or p["p50_ms"]
        sizes = [s for s in (p["client_wmem_max"], p["server_rmem_max"]) if s]
        if not slow(p) or not rtt or not sizes:
            continue
        window = min(sizes)
        bound = p["streams"] * window * 8 / (rtt / 1000) / 1e9
        bdp = expected * 1e9 / 8 * (rtt / 1000)
        if not (WINDOW_LOW * bound <= p["gbit_per_s"] <= WINDOW_HIGH * bound and p["streams"] * window < bdp):
            continue
        if p["server_rmem_max"] and p["server_rmem_max"] == window:
            host, key = p["server"], "net.ipv4.tcp_rmem"
        else:
            host, key = p["client"], "net.ipv4.tcp_wmem"
        blamed.setdefault(host, []).append(
            {**_pair_evidence(p), "key": key, "window_bytes": window, "window_bound_gbit_s": _r(bound),
             "bdp_bytes": int(bdp)})
        p["attributed_to"] = p["attributed_to"] or host
    out = []
    for host, rows in sorted(blamed.items()):
        top = max(rows, key=lambda r: r["bdp_bytes"])
        need = top["bdp_bytes"]
        want = 1 << max(need - 1, 1).bit_length()
        keys = sorted({r["key"] for r in rows})
        worst = min(rows, key=lambda r: r["window_bytes"])
        out.append(finding(
            "socket-buffers", host,
            f"{len(rows)} pair(s) of {host} on {fabric} run at about streams x window / RTT: the {' and '.join(keys)} "
            f"maximum ({worst['window_bytes']} bytes) is below the bandwidth-delay product ({need} bytes at "
            f"{_r(expected)} Gbit/s and an RTT of {top['rtt_ms'] or top['p99_ms']} ms)",
            f"raise the maximum (third value) of net.ipv4.tcp_rmem and net.ipv4.tcp_wmem to at least {want} in the "
            f"spec's sysctl (profiles[].sysctl, e.g. net.ipv4.tcp_rmem: \"4096 131072 {want}\"; net.core.rmem_max/"
            "wmem_max for applications that set SO_RCVBUF/SO_SNDBUF) and apply it with site.yml",
            {"keys": keys, "expected_gbit_s": _r(expected), "needed_bytes": want, "pairs": rows}, fabric=fabric))
    return out


def mtu_findings(fabric: str, paths: Sequence[Row]) -> list[dict[str, Any]]:
    """mtu: don't-fragment pings at the fabric MTU fail while a smaller size passes — on every path of
    one node (its port or switch port), else per path."""
    def mtu_bad(p: Row) -> bool:
        return not p.get("ok") and bool(p.get("largest_mtu")) and int(p["largest_mtu"]) < int(p.get("mtu") or 0)

    rows = [{"client": str(p["source"]), "server": str(p["peer"]), **p} for p in paths if p.get("fabric") == fabric]
    nodes = by_node(rows)
    named = concentrated(nodes, mtu_bad)
    out = []
    for host in named:
        mine = nodes[host]
        out.append(finding("mtu", host, f"don't-fragment pings at MTU {mine[0].get('mtu')} fail on every path of "
                           f"{host} on {fabric} while smaller packets pass (largest passing "
                           f"{min(int(p['largest_mtu']) for p in mine)}); the other nodes' paths pass",
                           f"set the MTU of {host}'s {fabric} interface and its switch port to {mine[0].get('mtu')} "
                           "(link_mtu applies the interface; the switch port is configured on the switch)",
                           {"paths": [{"source": p["client"], "peer": p["server"], "mtu": p.get("mtu"),
                                       "largest_mtu": p.get("largest_mtu")} for p in mine]}, fabric=fabric))
    for p in rows:
        if mtu_bad(p) and p["client"] not in named and p["server"] not in named:
            out.append(finding("mtu", p["client"], f"don't-fragment pings from {p['client']} to {p['server']} on "
                               f"{fabric} fail at MTU {p.get('mtu')}; largest passing {p.get('largest_mtu')}",
                               "find the hop with the smaller MTU on this path (interfaces and switch ports) and set "
                               f"it to {p.get('mtu')}",
                               {"source": p["client"], "peer": p["server"], "mtu": p.get("mtu"),
                                "largest_mtu": p.get("largest_mtu")},
                               fabric=fabric, peer=p["server"]))
    return out


def node_findings(fabric: str, pairs: Sequence[Row], stats: Mapping[str, Any],
                  excluded: set[str]) -> list[dict[str, Any]]:
    """lossy-port (retransmits or probe loss concentrated on one node) and node-link (all of one node's
    pairs slow while its peers' other pairs are fine), for nodes not already explained."""
    nodes = by_node(p for p in pairs if p["ok"])
    ref = stats.get("reference_gbit_s")
    out = []
    lossy = [h for h in concentrated(nodes, lossy_tcp) if h not in excluded]
    # Two faults at once: a pair with a lossy node, or with a shaped node (all of whose pairs are slow: its
    # queue drops probes), carries that peer's fault. A node is lossy by probe loss only when a pair with a
    # peer of neither kind loses too, never by its peers' faults alone.
    shaped = set(concentrated(nodes, slow))

    def own_fault(host: str) -> bool:
        return any(_other(p, host) not in lossy and _other(p, host) not in shaped for p in nodes[host])

    lossy += [h for h in concentrated(nodes, lossy_any)
              if h not in excluded and h not in lossy and not all(slow(p) for p in nodes[h]) and own_fault(h)]
    for host in lossy:
        node = stats["nodes"][host]
        out.append(finding(
            "lossy-port", host,
            f"retransmits or probe loss on {fabric} are concentrated on {host}: every pair with it exceeds the gate "
            f"(retransmit share {node['retransmit_share']}, probe loss up to {node['max_loss_pct']} %), the other "
            "nodes' pairs do not",
            f"check {host}'s {fabric} port and cable: error counters on the NIC and the switch port (ethtool -S, "
            "symbol/FEC errors), reseat or replace the cable or optic",
            {"node": node, "pairs": [_pair_evidence(p) for p in nodes[host]]}, fabric=fabric))
    # pairs already explained (socket buffers, MTU) do not make a node slow
    for host in concentrated(nodes, lambda p: slow(p) and not p["attributed_to"]):
        if host in excluded or host in lossy:
            continue
        node = stats["nodes"][host]
        out.append(finding(
            "node-link", host,
            f"every pair of {host} on {fabric} is slow (best {node['best_gbit_s']} Gbit/s against the fabric's "
            f"{ref} Gbit/s) while its peers reach full rate with other nodes: {host}'s link or switch port limits it",
            f"check {host}'s {fabric} link: negotiated speed and width (ethtool, lspci), errors, a shaper or policer "
            "on the switch port, and the switch port's configuration",
            {"node": node, "reference_gbit_s": ref, "pairs": [_pair_evidence(p) for p in nodes[host]]},
            fabric=fabric))
    return out


def attribute(pairs: Sequence[Row], named: Iterable[str]) -> None:
    """Attribute each failing pair to the named node among its two ends."""
    names = set(named)
    for p in pairs:
        if p["status"] == "fail" and not p["attributed_to"]:
            ends = [h for h in (p["client"], p["server"]) if h in names]
            if ends:
                p["attributed_to"] = ends[0]


# gate -> (unit, comparison that failed)
GATE_UNITS = {"min_gbit_s": (" Gbit/s", "<"), "outlier_ratio": (" Gbit/s", "<"), "max_retransmit_share": ("", ">"),
              "max_loss_pct": (" %", ">"), "max_p99_ms": (" ms", ">"), "min_read_mib_s": (" MiB/s", "<"),
              "max_p99_us_qd1": (" µs", ">"), "max_p99_us_qd32": (" µs", ">"), "min_iops_qd32": (" IOPS", "<")}


def gate_text(gates: Sequence[Mapping[str, Any]]) -> str:
    """'min_gbit_s 0.199 Gbit/s < 1.0 Gbit/s, outlier_ratio 0.199 Gbit/s < 2.264 Gbit/s': value, then the limit
    it missed (for outlier_ratio the limit is the ratio times the reference, in the metric's unit)."""
    out = []
    for g in gates:
        unit, side = GATE_UNITS.get(g["gate"], ("", "vs"))
        out.append(f"{g['gate']} {g['value']}{unit} {side} {g['limit']}{unit}")
    return ", ".join(out)


def gate_findings(fabric: str, pairs: Sequence[Row]) -> list[dict[str, Any]]:
    out = []
    for p in pairs:
        if p["status"] != "fail":
            continue
        host = p["attributed_to"] or p["client"]
        text = gate_text(p["failed_gates"])
        blamed = f"; attributed to {host}" if p["attributed_to"] else ""
        on = f"{fabric} rail{p['rail']}" if "/rail" in str(p["id"]) else fabric  # one row of several rails
        out.append(finding("gate", host, f"pair {p['client']} -> {p['server']} on {on} fails {text}{blamed}",
                           "see the bottleneck finding of the same host and fabric; without one, the path between "
                           "these two nodes (cables, switch ports, routes) is the suspect",
                           {**_pair_evidence(p), "gates": p["failed_gates"]}, fabric=fabric, peer=_other(p, host)))
    return out


# --------------------------------------------------------------------------- counters
def qos_findings(host: str, ifname: str, fabric: str | None, row: Mapping[str, Any],
                 pfc_priorities: Sequence[int]) -> list[dict[str, Any]]:
    """qos: pause frames without ECN marks or CNPs (congestion handled by pausing alone), or discards
    on the lossless priority (PFC not honoured)."""
    if not row.get("supported"):
        return []
    prios = "|".join(str(p) for p in (pfc_priorities or range(8)))
    pause = matching(row, rf"(rx|tx)_prio({prios})_pause") + delta(row, "rx_pause_ctrl_phy", "tx_pause_ctrl_phy")
    ecn = delta(row, "np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled")
    discards = matching(row, rf"rx_prio({prios})_discards") + delta(row, "rx_discards_phy")
    seq = delta(row, "out_of_sequence", "packet_seq_err")
    evidence = {"interface": ifname, "pause_frames": pause, "ecn_marked_and_cnp": ecn, "lossless_discards": discards,
                "out_of_sequence_and_seq_err": seq, "out_of_buffer": delta(row, "rx_out_of_buffer", "out_of_buffer"),
                "pfc_priorities": list(pfc_priorities)}
    out = []
    where = f"{host} {ifname}" + (f" ({fabric})" if fabric else "")
    if pause and not ecn:
        out.append(finding("qos", host, f"{where} sent or received {pause} pause frames over the run with no ECN "
                           "marks and no CNPs: congestion is handled by PFC pausing alone (DCQCN is not working)",
                           "enable ECN for the RoCE priority (the fabric's roce.ecn: true, applied by roce_qos) and "
                           "ECN marking on the switch's lossless queue", evidence, fabric=fabric, device=ifname,
                           probe="counters"))
    if discards:
        out.append(finding("qos", host, f"{where} discarded {discards} packets on the lossless priority "
                           f"{'/'.join(str(p) for p in pfc_priorities) or '?'} (rx_prioN_discards, rx_discards_phy): "
                           "PFC is not protecting it", "turn PFC on for the RoCE priority on the NIC (the fabric's "
                           "roce.pfc_priorities, applied by roce_qos) and on the switch port; check the receive "
                           "buffer configuration", evidence, fabric=fabric, device=ifname, probe="counters"))
    return out


# --------------------------------------------------------------------------- storage
def storage_findings(rows: Sequence[Row], gates: Mapping[str, Any], ratio: float) -> list[dict[str, Any]]:
    """slow-device (a target below outlier_ratio x the median of the same target on the other nodes in at
    least two of sequential MiB/s, IOPS at QD1 and QD32), storage gates, probe errors."""
    out = []
    limits = (("min_read_mib_s", "seq_read_mib_s", "below"), ("min_iops_qd32", "iops_qd32", "below"),
              ("max_p99_us_qd1", "p99_us_qd1", "above"), ("max_p99_us_qd32", "p99_us_qd32", "above"))
    for row in rows:
        if not row["ok"]:
            out.append(finding("probe-error", row["host"], f"storage probe {row['name']} ({row['path']}) failed: "
                               f"{row['error']}", "read the error; the probe only reads (and creates its own test "
                               "file when missing)",
                               {"target": row["name"], "path": row["path"], "error": row["error"]},
                               device=row["path"], probe="storage"))
            continue
        for gate, metric, side in limits:
            limit, value = gates.get(gate), row.get(metric)
            if limit is None or value is None or row["kind"] == "model" and metric != "seq_read_mib_s":
                continue
            if (value < limit) if side == "below" else (value > limit):
                row["failed_gates"].append({"gate": gate, "limit": limit, "value": _r(value)})
    slow_rows: dict[str, list[dict[str, Any]]] = {}
    if ratio:
        names = sorted({r["name"] for r in rows})
        for name in names:
            same = [r for r in rows if r["name"] == name and r["ok"]]
            if len(same) < 3:
                continue
            for metric, label in STORAGE_METRICS:
                values = [r[metric] for r in same if r.get(metric) is not None]
                mid = median(values)
                if not mid or len(values) < 3:
                    continue
                for r in same:
                    if r.get(metric) is not None and r[metric] < ratio * mid:
                        r.setdefault("_slow", []).append(
                            ({"gate": "outlier_ratio", "metric": metric, "limit": _r(ratio * mid),
                              "value": _r(r[metric])},
                             {"target": name, "path": r["path"], "metric": label, "value": _r(r[metric]),
                              "median_of_nodes": _r(mid)}))
            # One slow figure is noise (a neighbour's burst); a slow device is slow in two of them
            # (the only one there is for a model load).
            for r in same:
                slow_figures = r.pop("_slow", [])
                measured = sum(1 for metric, _label in STORAGE_METRICS if r.get(metric) is not None)
                if slow_figures and len(slow_figures) >= min(2, measured):
                    r["failed_gates"].extend(gate for gate, _item in slow_figures)
                    slow_rows.setdefault(r["host"], []).extend(item for _gate, item in slow_figures)
    for host, items in sorted(slow_rows.items()):
        devices = [r["path"] for r in rows
                   if r["host"] == host and (r["name"] == "device" or r["kind"] in ("device", "block"))]
        device = devices[0] if devices else items[0]["path"]
        text = "; ".join(f"{i['target']} {i['metric']} {i['value']} vs median {i['median_of_nodes']}" for i in items)
        out.append(finding("slow-device", host, f"storage on {host} is far below its peers: {text}",
                           f"check {device}: its health and firmware (nvme smart-log), thermal throttling, PCIe link "
                           "width and speed, a cgroup I/O limit, and the RAID members",
                           {"targets": items}, device=device, probe="storage"))
    for row in rows:
        absolute = [g for g in row["failed_gates"] if g["gate"] != "outlier_ratio"]
        if row["failed_gates"]:
            row["status"] = "fail"
        if absolute:
            text = gate_text(absolute)
            out.append(finding("gate", row["host"], f"storage {row['name']} ({row['path']}) fails {text}",
                               "see slow-device for the same host; else compare with the device's datasheet",
                               {"target": row["name"], "gates": absolute}, device=row["path"], probe="storage"))
    return out
