"""Constructed probe results for the measure tests: a small model of a fabric with impairments.

``cluster()`` returns (schedule, hosts) as the measure role would hand them to ``build_report``:
every node reaches ``RATE`` Gbit/s unless its port is rate-limited, lossy, delayed, or its socket
buffers are small; storage targets read at ``READ`` MiB/s unless a device is slow.
"""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.schedule import build_schedule

RATE = 20.0  # Gbit/s of a healthy pair
READ = 2000.0  # MiB/s of a healthy device
SUBNET = "198.18.1.0/24"
GATES = {"fabrics": {"rdma": {"min_gbit_s": None, "max_retransmit_share": 0.002, "max_loss_pct": 1.0,
                              "max_p99_ms": None}},
         "storage": {"min_read_mib_s": None, "max_p99_us_qd1": None, "max_p99_us_qd32": None, "min_iops_qd32": None},
         "outlier_ratio": 0.5}


def part(node: str, index: int, storage: bool = True, address: str | None = "auto",
         gates: dict[str, Any] | None = None, mode: str = "ring") -> dict[str, Any]:
    addr = f"198.18.1.{10 + index}" if address == "auto" else address
    return {"mode": mode, "sample_peers": 3, "seed": 0, "streams": 4, "duration": 5.0, "tool": "builtin",
            "port": 5201,
            "fabrics": [{"name": "rdma", "subnets": [SUBNET], "mtu": 9000, "interface": "ens1f0np0",
                         "address": addr, "address_ok": addr is not None and addr.startswith("198.18.1.")}],
            "storage": {"mount": "/mnt/model-cache", "test_file": "/mnt/model-cache/.aiinfra-measure/probe.bin",
                        "test_file_size": 64 << 20, "raw_device": f"/dev/loop{index}", "model": None}
            if storage else None,
            "gates": copy.deepcopy(gates or GATES)}


def probe(role: str, gbit: float, share: float = 0.0, loss: float = 0.0, rtt: float = 0.05,
          rmem: int = 6291456, wmem: int = 4194304, ok: bool = True, error: str | None = None,
          min_rtt: float | None = None) -> dict[str, Any]:
    segments = int(gbit * 1e9 / 8 * 5 / 8948) or 1
    return {"role": role, "ok": ok, "error": error, "tool": "builtin", "streams": 4, "seconds": 5.0,
            "bytes": int(gbit * 1e9 / 8 * 5), "gbit_per_s": gbit if ok else None,
            "tcp": {"retransmits": int(segments * share), "segments_sent": segments, "retransmit_share": share,
                    "rtt_ms": rtt, "rttvar_ms": rtt / 10, "snd_cwnd": 100,
                    **({"min_rtt_ms": min_rtt} if min_rtt is not None else {})},
            "netstat": {"TcpRetransSegs": int(segments * share), "TcpOutSegs": segments},
            "latency": {"sent": 250, "received": int(250 * (1 - loss / 100)), "loss_pct": loss,
                        "p50_ms": rtt, "p99_ms": rtt * 2},
            "socket_buffers": {"tcp_rmem": f"4096 131072 {rmem}", "tcp_wmem": f"4096 16384 {wmem}",
                               "rmem_max": 212992, "wmem_max": 212992}}


class Lab:
    """Node properties: ``rate`` (port cap, Gbit/s), ``share`` (retransmit share), ``loss`` (%),
    ``delay`` (ms one way added at the port), ``rmem``/``wmem`` (tcp_*mem maximum), ``down`` (no traffic),
    ``queue`` (ms of queueing under load, as behind a capacity limit; the probe then reports min_rtt_ms)."""

    def __init__(self, nodes: int = 4, mode: str = "ring") -> None:
        self.nodes = [f"node{i}" for i in range(1, nodes + 1)]
        self.mode = mode
        self.props: dict[str, dict[str, Any]] = {n: {} for n in self.nodes}
        self.read: dict[str, float] = {n: READ for n in self.nodes}
        self.counters: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self.paths: dict[str, list[dict[str, Any]]] = {}
        self.gates = copy.deepcopy(GATES)
        self.parts = {n: part(n, i, mode=mode) for i, n in enumerate(self.nodes, start=1)}

    def pair(self, client: str, server: str) -> tuple[dict[str, Any], dict[str, Any]]:
        c, s = self.props[client], self.props[server]
        if c.get("down") or s.get("down"):
            err = "connect to 198.18.1.x:5201 timed out" if s.get("down") else "no client connected within 30 s"
            waited = "no client connected within 30 s"
            return probe("client", 0, ok=False, error=err), probe("server", 0, ok=False, error=waited)
        rtt = 0.05 + 2 * (c.get("delay", 0) + s.get("delay", 0))
        rate = min(RATE, c.get("rate", RATE), s.get("rate", RATE))
        window = min(c.get("wmem", 4194304), s.get("rmem", 6291456))
        rate = min(rate, 4 * window * 8 / (rtt / 1000) / 1e9 * 0.6)
        share = max(c.get("share", 0.0), s.get("share", 0.0))
        loss = c.get("loss", 0.0) + s.get("loss", 0.0)
        queue = c.get("queue", 0.0) + s.get("queue", 0.0)
        kw: dict[str, Any] = {"share": share, "loss": loss, "rtt": rtt + queue,
                              "min_rtt": rtt if queue else None}
        return (probe("client", rate, wmem=c.get("wmem", 4194304), rmem=c.get("rmem", 6291456), **kw),
                probe("server", rate, wmem=s.get("wmem", 4194304), rmem=s.get("rmem", 6291456), **kw))

    def schedule(self) -> dict[str, Any]:
        for p in self.parts.values():
            p["gates"] = copy.deepcopy(self.gates)
        return build_schedule(self.parts, self.nodes)

    def hosts(self, schedule: dict[str, Any]) -> dict[str, dict[str, Any]]:
        hosts: dict[str, dict[str, Any]] = {n: {"reached": True, "measure": self.parts[n], "roce": [],
                                                "storage_planned": self.parts[n]["storage"] is not None,
                                                "net": [], "paths": None, "storage": None}
                                            for n in self.nodes}
        for rnd in schedule["rounds"]:
            for pair in rnd["pairs"]:
                c, s = self.pair(pair["client"], pair["server"])
                for host, result, role in ((pair["client"], c, "client"), (pair["server"], s, "server")):
                    hosts[host]["net"].append({"round": rnd["index"], "fabric": "rdma", "pair": pair["id"],
                                               "role": role, "probe": result, "error": None})
        for i, n in enumerate(self.nodes, start=1):
            if self.parts[n]["storage"] is None:
                continue
            read = self.read[n]
            hosts[n]["storage"] = {"targets": [
                {"name": name, "path": path, "kind": kind, "tool": "builtin", "ok": True, "error": None,
                 "seq_read_mib_s": read,
                 "random": {"1": {"iops": read * 10, "p50_us": 80.0, "p99_us": 150.0 * READ / read},
                            "32": {"iops": read * 100, "p50_us": 300.0, "p99_us": 900.0 * READ / read}}}
                for name, path, kind in (("cache", "/mnt/model-cache/.aiinfra-measure/probe.bin", "file"),
                                         ("device", f"/dev/loop{i}", "device"))], "model_load": None}
            before, after = self.counters.get(n, ({}, {}))
            veth = {"ens1f0np0": {"supported": False, "reason": "veth: no RoCE counters"}}
            hosts[n]["counters_before"] = {"counters": before or veth}
            hosts[n]["counters_after"] = {"counters": after or veth}
            if n in self.paths:
                hosts[n]["paths"] = {"paths": self.paths[n]}
        return hosts

    def run(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        schedule = self.schedule()
        return schedule, self.hosts(schedule)
