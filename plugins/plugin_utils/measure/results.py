# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The probes' results as flat rows: one per pair (server and client joined), per storage target,
per interface's counter deltas. Robust to missing sides and missing fields (a probe that never
ran, an older module); standard library only."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.aiinfra.datapath.plugins.module_utils import _rdma_counters as _rdma
from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe_parse import lost_segments as lost

_INT = re.compile(r"-?[0-9]+")


def num(value: Any) -> float | None:
    """A finite number or None (bools and text are not numbers)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        try:
            number = float(str(value))
        except ValueError:
            return None
    return number if math.isfinite(number) else None


def buffer_max(value: Any) -> int | None:
    """The maximum of a tcp_rmem/tcp_wmem triple ("4096 131072 6291456" or a list), or a single value."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, (list, tuple)):
        ints = [int(v) for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return ints[-1] if ints else None
    found = _INT.findall(str(value))
    return int(found[-1]) if found else None


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _first(*values: Any) -> float | None:
    for value in values:
        number = num(value)
        if number is not None:
            return number
    return None


MAX_ERROR = 300


def short(text: Any) -> str:
    """An error on one line, at most MAX_ERROR characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MAX_ERROR else flat[:MAX_ERROR - 1] + "…"


def _side_error(record: Mapping[str, Any] | None, side: str) -> str | None:
    if record is None:
        return f"{side}: no result (the host failed or was unreachable before this round)"
    if record.get("error"):
        return f"{side}: {short(record['error'])}"
    probe = _m(record.get("probe"))
    if not probe:
        return f"{side}: the probe returned nothing"
    if probe.get("ok") is False:
        return f"{side}: {short(probe.get('error') or 'failed without a reason')}"
    return None


def join_pair(pair: Mapping[str, Any], fabric: str, round_index: int, client: Mapping[str, Any] | None,
              server: Mapping[str, Any] | None, streams: int) -> dict[str, Any]:
    """One pair's row from the client's and the server's records (``{probe, error}``, or None)."""
    cp, sp = _m(_m(client).get("probe")), _m(_m(server).get("probe"))
    errors = [e for e in (_side_error(client, "client " + pair["client"]),
                          _side_error(server, "server " + pair["server"])) if e]
    ctcp, stcp = _m(cp.get("tcp")), _m(sp.get("tcp"))
    cnet = _m(cp.get("netstat"))
    lat = _m(cp.get("latency")) or _m(sp.get("latency"))
    retrans = _first(ctcp.get("retransmits"), cnet.get("TcpRetransSegs"), stcp.get("retransmits"))
    spurious = _first(ctcp.get("spurious_retransmits"), cnet.get("TcpExtTCPDSACKRecvSegs"),
                      stcp.get("spurious_retransmits"))
    segments = _first(ctcp.get("segments_sent"), cnet.get("TcpOutSegs"), stcp.get("segments_sent"))
    share = _first(ctcp.get("retransmit_share"), stcp.get("retransmit_share"))
    if share is None and retrans is not None and segments:
        share = lost(retrans, spurious) / segments
    gbit = _first(cp.get("gbit_per_s") or None, sp.get("gbit_per_s"))
    cbuf, sbuf = _m(cp.get("socket_buffers")), _m(sp.get("socket_buffers"))
    wmem, rmem = buffer_max(cbuf.get("tcp_wmem")), buffer_max(sbuf.get("tcp_rmem"))
    ok = not errors and gbit is not None
    if not errors and gbit is None:
        errors.append("no throughput in the result")
    return {
        "id": pair["id"], "fabric": fabric, "round": round_index,
        "client": pair["client"], "server": pair["server"],
        "client_address": pair.get("client_address"), "server_address": pair.get("server_address"),
        "port": pair.get("port"), "tool": cp.get("tool") or sp.get("tool"),
        "ok": ok, "error": "; ".join(errors) or None,
        "gbit_per_s": gbit, "streams": int(num(cp.get("streams")) or streams),
        "seconds": _first(cp.get("seconds"), sp.get("seconds")),
        "bytes": _first(cp.get("bytes"), sp.get("bytes")),
        "retransmits": retrans, "spurious_retransmits": spurious, "segments_sent": segments,
        "retransmit_share": share,
        "rtt_ms": _first(ctcp.get("rtt_ms"), stcp.get("rtt_ms")),
        "min_rtt_ms": _first(ctcp.get("min_rtt_ms"), stcp.get("min_rtt_ms")),
        "loss_pct": num(lat.get("loss_pct")), "p50_ms": num(lat.get("p50_ms")), "p99_ms": num(lat.get("p99_ms")),
        "client_wmem_max": wmem, "server_rmem_max": rmem,
        "status": "pass" if ok else "error", "failed_gates": [], "attributed_to": None,
    }


def storage_rows(host: str, result: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per storage target of a host's storage_probe result, plus the model load."""
    rows: list[dict[str, Any]] = []
    for target in _m(result).get("targets") or []:
        t = _m(target)
        rnd = _m(t.get("random"))
        q1, q32 = _m(rnd.get("1")), _m(rnd.get("32"))
        rows.append({"host": host, "name": str(t.get("name") or t.get("path")), "path": t.get("path"),
                     "kind": t.get("kind"), "tool": t.get("tool"),
                     "ok": t.get("ok") is not False and not t.get("error"),
                     "error": short(t["error"]) if t.get("error") else None,
                     "seq_read_mib_s": num(t.get("seq_read_mib_s")),
                     "iops_qd1": num(q1.get("iops")), "p50_us_qd1": num(q1.get("p50_us")),
                     "p99_us_qd1": num(q1.get("p99_us")), "iops_qd32": num(q32.get("iops")),
                     "p50_us_qd32": num(q32.get("p50_us")), "p99_us_qd32": num(q32.get("p99_us")),
                     "status": "pass", "failed_gates": []})
    model = _m(result).get("model_load")
    if isinstance(model, Mapping):
        rows.append({"host": host, "name": "model", "path": model.get("path"), "kind": "model", "tool": "builtin",
                     "ok": model.get("ok") is not False and not model.get("error"),
                     "error": short(model["error"]) if model.get("error") else None,
                     "seq_read_mib_s": num(model.get("mib_s")), "files": model.get("files"),
                     "bytes": model.get("bytes"), "seconds": num(model.get("seconds")),
                     "iops_qd1": None, "p50_us_qd1": None, "p99_us_qd1": None, "iops_qd32": None,
                     "p50_us_qd32": None, "p99_us_qd32": None, "status": "pass", "failed_gates": []})
    for row in rows:
        if not row["ok"]:
            row["status"] = "error"
    return rows


def counter_deltas(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per interface of two registered rdma_counters results: supported, reason, the RDMA device, the
    increase of every counter (``deltas``: ethtool, counters, hw_counters) and ``reset`` (counters that went
    down and have no delta), by the module_utils rule ``_rdma_counters.counter_deltas``."""
    b_all, a_all = _m(_m(before).get("counters")), _m(_m(after).get("counters"))
    out: dict[str, dict[str, Any]] = {}
    for ifname, entry in _rdma.counter_deltas(dict(b_all), dict(a_all)).items():
        out[str(ifname)] = {"supported": bool(entry["supported"]), "reason": entry["reason"],
                            "device": _m(_m(a_all.get(ifname)).get("rdma")).get("device"),
                            "deltas": {src: dict(entry[src]) for src in ("ethtool", "counters", "hw_counters")},
                            "reset": list(entry["reset"])}
    return out


def delta(row: Mapping[str, Any], *names: str) -> int:
    """Sum of the named counters' deltas, each looked up in ethtool, then hw_counters, then counters."""
    total = 0
    deltas = _m(row.get("deltas"))
    for name in names:
        for group in ("ethtool", "hw_counters", "counters"):
            value = _m(deltas.get(group)).get(name)
            if value is not None:
                total += int(value)
                break
    return total


def matching(row: Mapping[str, Any], pattern: str) -> int:
    """Sum of the deltas of every ethtool counter whose name matches ``pattern`` (a regular expression)."""
    rx = re.compile(pattern)
    return sum(int(v) for k, v in _m(_m(row.get("deltas")).get("ethtool")).items() if rx.fullmatch(k))


def median(values: Sequence[float]) -> float | None:
    items = sorted(values)
    if not items:
        return None
    mid = len(items) // 2
    return items[mid] if len(items) % 2 else (items[mid - 1] + items[mid]) / 2
