# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers of the network probe (stdlib only): Linux ``struct tcp_info``, /proc/net/snmp and
/proc/net/netstat and their deltas, the node's socket-buffer sysctls, iperf3's JSON and the
latency percentiles. Pure functions: no sockets, no processes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import struct

# Offsets in Linux ``struct tcp_info`` (include/uapi/linux/tcp.h); each field is present when
# the kernel returns at least offset + size bytes (getsockopt returns the kernel's length).
#   u8 state (0) ... u32 rto (8), ato (12), snd_mss (16), rcv_mss (20), ... pmtu (60),
#   rcv_ssthresh (64), rtt (68, us), rttvar (72, us), snd_ssthresh (76), snd_cwnd (80,
#   segments), ... total_retrans (100), u64 pacing_rate (104), max_pacing_rate (112),
#   bytes_acked (120), bytes_received (128), u32 segs_out (136, Linux 4.2), segs_in (140),
#   notsent_bytes (144), min_rtt (148), data_segs_in (152), data_segs_out (156, Linux 4.6),
#   u64 delivery_rate (160) ... u64 bytes_sent (200, Linux 4.19), bytes_retrans (208),
#   u32 dsack_dups (216, Linux 4.19: retransmissions the receiver reported as duplicates with
#   DSACK), reord_seen (220, reordering events seen).
TCP_INFO_FIELDS = (
    ("state", 0, "B"),
    ("snd_mss", 16, "I"),
    ("pmtu", 60, "I"),
    ("rtt_us", 68, "I"),
    ("rttvar_us", 72, "I"),
    ("snd_ssthresh", 76, "I"),
    ("snd_cwnd", 80, "I"),
    ("total_retrans", 100, "I"),
    ("bytes_acked", 120, "Q"),
    ("bytes_received", 128, "Q"),
    ("segs_out", 136, "I"),
    ("segs_in", 140, "I"),
    ("data_segs_out", 156, "I"),
    ("bytes_sent", 200, "Q"),
    ("bytes_retrans", 208, "Q"),
    ("dsack_dups", 216, "I"),
    ("reord_seen", 220, "I"),
)
TCP_INFO_LEN = 256  # asked of getsockopt; the kernel returns min(this, its struct size)

NETSTAT_KEYS = ("TcpRetransSegs", "TcpExtTCPLostRetransmit", "TcpExtTCPTimeouts", "TcpOutSegs",
                "TcpExtTCPDSACKRecvSegs",
                # packets the reverse-path filter dropped (LINUX_MIB_IPRPFILTER): rails, docs/network.md
                "TcpExtIPReversePathFilter")
SOCKET_BUFFER_SYSCTLS = (
    ("tcp_rmem", "/proc/sys/net/ipv4/tcp_rmem"),
    ("tcp_wmem", "/proc/sys/net/ipv4/tcp_wmem"),
    ("rmem_max", "/proc/sys/net/core/rmem_max"),
    ("wmem_max", "/proc/sys/net/core/wmem_max"),
)


def parse_tcp_info(raw):
    """The fields of ``TCP_INFO_FIELDS`` that ``raw`` (bytes from getsockopt) holds; a field
    past the end of what the kernel returned is None."""
    info = {}
    for name, offset, fmt in TCP_INFO_FIELDS:
        size = struct.calcsize("<" + fmt)
        info[name] = struct.unpack_from("<" + fmt, raw, offset)[0] if len(raw) >= offset + size else None
    return info


def _mean(values):
    values = [v for v in values if v is not None]
    return (float(sum(values)) / len(values)) if values else None


def _total(values):
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def share(part, whole):
    """part / whole, None when either is unknown or whole is 0."""
    if part is None or not whole:
        return None
    return round(float(part) / whole, 6)


def summarise_tcp_info(infos):
    """The probe's ``tcp`` dict from the per-stream tcp_info dicts: retransmits, the spurious
    ones among them (DSACK) and data segments sent summed, RTT and RTT variance averaged (ms),
    congestion window averaged (bytes: snd_cwnd x snd_mss), reordering events summed."""
    infos = [i for i in infos if i]
    retrans = _total(i["total_retrans"] for i in infos)
    segments = _total(i["data_segs_out"] if i["data_segs_out"] is not None else i["segs_out"] for i in infos)
    rtt = _mean(i["rtt_us"] for i in infos)
    rttvar = _mean(i["rttvar_us"] for i in infos)
    cwnd = _mean(i["snd_cwnd"] * i["snd_mss"] for i in infos
                 if i["snd_cwnd"] is not None and i["snd_mss"] is not None)
    return tcp_result(retrans, segments, None if rtt is None else rtt / 1000.0,
                      None if rttvar is None else rttvar / 1000.0, None if cwnd is None else int(round(cwnd)),
                      spurious_retransmits=_total(i.get("dsack_dups") for i in infos),
                      reorderings=_total(i.get("reord_seen") for i in infos))


def lost_segments(retransmits, spurious_retransmits):
    """The retransmissions that repaired a loss: all of them less those the receiver reported
    as duplicates (DSACK: the first copy had arrived, late, so the network reordered it or the
    sender's timer fired early; nothing was lost). None when the retransmits are unknown; all of
    them when the spurious ones are unknown (iperf3, a kernel before 4.19)."""
    if retransmits is None:
        return None
    return retransmits - min(spurious_retransmits or 0, retransmits)


def tcp_result(retransmits=None, segments_sent=None, rtt_ms=None, rttvar_ms=None, snd_cwnd=None,
               spurious_retransmits=None, reorderings=None):
    """``retransmit_share`` counts the retransmissions that repaired a loss (lost_segments)."""
    return {"retransmits": retransmits, "spurious_retransmits": spurious_retransmits,
            "segments_sent": segments_sent,
            "retransmit_share": share(lost_segments(retransmits, spurious_retransmits), segments_sent),
            "reorderings": reorderings,
            "rtt_ms": None if rtt_ms is None else round(rtt_ms, 3),
            "rttvar_ms": None if rttvar_ms is None else round(rttvar_ms, 3),
            "snd_cwnd": snd_cwnd}


def parse_proc_net(text):
    """Counters of /proc/net/snmp or /proc/net/netstat as nstat names them: the header line
    ``Tcp: RtoAlgorithm ... RetransSegs`` and the value line after it give ``TcpRetransSegs``."""
    counters = {}
    header = None
    for line in (text or "").splitlines():
        prefix, _sep, rest = line.partition(":")
        if not _sep:
            continue
        fields = rest.split()
        if header is not None and header[0] == prefix:
            for index, name in enumerate(header[1][:len(fields)]):
                try:
                    counters[prefix + name] = int(fields[index])
                except ValueError:
                    pass
            header = None
        else:
            header = (prefix, fields)
    return counters


def netstat_delta(before, after, keys=NETSTAT_KEYS):
    """``after - before`` of each key; None where a side lacks it or the counter went back."""
    delta = {}
    for key in keys:
        old, new = before.get(key), after.get(key)
        delta[key] = new - old if old is not None and new is not None and new >= old else None
    return delta


def normalise_sysctl(text):
    """A sysctl value as one line with single spaces (tcp_rmem is tab separated)."""
    return None if text is None else " ".join(text.split())


def percentile(values, pct):
    """Nearest-rank percentile of ``values`` (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = int(-(-pct * len(ordered) // 100))  # ceil(pct/100 * n)
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def latency_result(sent=None, received=None, rtts_ms=None):
    """The probe's ``latency`` dict from the datagrams sent, answered and their RTTs."""
    loss = None
    if sent:
        loss = round(100.0 * (sent - received) / sent, 3)
    p50 = percentile(rtts_ms or [], 50)
    p99 = percentile(rtts_ms or [], 99)
    return {"sent": sent, "received": received, "loss_pct": loss,
            "p50_ms": None if p50 is None else round(p50, 3), "p99_ms": None if p99 is None else round(p99, 3)}


# ------------------------------------------------------------------------------- iperf3 JSON
def load_iperf3(text):
    """iperf3 -J output as a dict; None when it is not JSON (a crash, a kill before output)."""
    try:
        data = json.loads(text or "")
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _obj(value):
    """``value`` when it is a JSON object, else {} (a field of another type reads as absent)."""
    return value if isinstance(value, dict) else {}


def _objects(value):
    """The objects of a JSON list (anything else reads as an empty list)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _num(value):
    """A JSON number (not a boolean), else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def iperf3_summary(data, role):
    """What the probe reports from one iperf3 -J document: dict(ok, error, bytes, seconds,
    gbit_per_s, tcp, connected). The client reports what the server received (``sum_received``)
    and the sender's retransmits, RTT and window per stream; the server what it received.
    A field of an unexpected JSON type reads as absent (iperf3 printed something else)."""
    out = {"ok": False, "error": None, "bytes": None, "seconds": None, "gbit_per_s": None,
           "tcp": tcp_result(), "connected": 0, "remotes": []}
    if data is None:
        out["error"] = "iperf3 printed no JSON"
        return out
    connected = _obj(data.get("start")).get("connected")
    out["connected"] = len(connected) if isinstance(connected, list) else 0
    # who the streams were with (the server: its clients; the probe compares them with the planned peer)
    out["remotes"] = sorted(set(str(c.get("remote_host")) for c in _objects(connected) if c.get("remote_host")))
    end = _obj(data.get("end"))
    received = _obj(end.get("sum_received"))
    if data.get("error"):
        out["error"] = "iperf3: %s" % (data["error"],)
    elif not received:
        out["error"] = "iperf3 reported no result"
    if received:
        out["bytes"] = _num(received.get("bytes"))
        out["seconds"] = _num(received.get("seconds"))
        bps = _num(received.get("bits_per_second"))
        try:
            out["gbit_per_s"] = None if bps is None else round(bps / 1e9, 4)
        except (OverflowError, ValueError):  # 1e400, inf or nan in a garbled document
            out["gbit_per_s"] = None
    if role == "client":
        out["tcp"] = _iperf3_sender_tcp(data)
    out["ok"] = out["error"] is None
    return out


def _iperf3_sender_tcp(data):
    end = _obj(data.get("end"))
    senders = [_obj(s.get("sender")) for s in _objects(end.get("streams"))]
    retrans = _num(_obj(end.get("sum_sent")).get("retransmits"))
    last = {}
    for interval in _objects(data.get("intervals")):
        for stream in _objects(interval.get("streams")):
            last[str(stream.get("socket"))] = stream
    try:
        rtt = _mean(_num(s.get("mean_rtt")) for s in senders)
        rttvar = _mean(_num(s.get("rttvar")) for s in last.values())
        cwnd = _mean(_num(s.get("snd_cwnd")) for s in last.values())
        return tcp_result(retrans, None, None if rtt is None else rtt / 1000.0,
                          None if rttvar is None else rttvar / 1000.0, None if cwnd is None else int(round(cwnd)))
    except (OverflowError, ValueError):  # 1e400, inf or nan in a garbled document
        return tcp_result(retrans)


def iperf3_connect_failed(data):
    """True when iperf3 -c found no server to talk to (refused, unreachable): worth a retry."""
    return bool(data) and str(data.get("error") or "").startswith("unable to connect to server")
