"""Rails in the measurement: a pair loads every common rail at once, one row per rail, where its bytes went,
and the findings wrong-egress, arp-flux, rp-filter-drops and slow-rail (plugin_utils/measure/rails.py).

``RailLab`` is a model of 4 nodes with 4 rails each on one shared subnet: every rail reaches RATE unless its
port is rate-limited; a misrouted node sends every rail's bytes by its last NIC; a node with ARP flux takes
a rail's bytes on another NIC; a node with strict rp_filter drops packets (IPReversePathFilter)."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import jsonschema
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.report import build_report, reports
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.schedule import build_schedule

from ._data import GATES, probe

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5))
SCHEMA = os.path.join(REPO, "docs", "schema", "measure.schema.json")
NODES = ["node1", "node2", "node3", "node4"]
NICS = ["ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0"]
RATE = 4.0


def address(node: int, rail: int) -> str:
    return f"198.18.1.{10 + node + 4 * rail}"


def part(index: int) -> dict[str, Any]:
    rails = [{"rail": r, "name": f"rail{r}", "interface": NICS[r], "address": address(index, r), "address_ok": True}
             for r in range(4)]
    return {"mode": "ring", "sample_peers": 3, "seed": 0, "streams": 2, "duration": 2.0, "tool": "builtin",
            "port": 5201, "storage": None, "gates": copy.deepcopy(GATES),
            "fabrics": [{"name": "rdma", "subnets": ["198.18.1.0/24"], "mtu": 9000, "interface": NICS[0],
                         "address": address(index, 0), "address_ok": True, "rails": rails}]}


class RailLab:
    def __init__(self) -> None:
        self.parts = {n: part(i) for i, n in enumerate(NODES, start=1)}
        self.slow: dict[tuple[str, int], float] = {}
        self.misrouted: set[str] = set()
        self.flux: dict[str, dict[int, str]] = {}
        self.rp_drops: dict[str, int] = {}
        self.paths: dict[str, dict[str, Any]] = {}

    def side(self, host: str, role: str, legs: list[dict[str, Any]], peer: str) -> dict[str, Any]:
        out = []
        nic = {name: {"tx_bytes": 1000, "rx_bytes": 1000} for name in NICS}
        for leg in legs:
            rate = min(self.slow.get((host, leg["rail"]), RATE), self.slow.get((peer, leg["rail"]), RATE))
            p = probe(role, rate)
            p.update(rail=leg["rail"], interface=NICS[leg["rail"]])
            out.append(p)
            if role == "client":
                leaves = NICS[-1] if host in self.misrouted else NICS[leg["rail"]]
                nic[leaves]["tx_bytes"] += int(p["bytes"] * 1.01)
            else:
                arrives = self.flux.get(host, {}).get(leg["rail"], NICS[leg["rail"]])
                nic[arrives]["rx_bytes"] += int(p["bytes"] * 1.01)
        top = dict(out[0], legs=out, nic_bytes=nic)
        top["netstat"] = dict(top["netstat"], TcpExtIPReversePathFilter=self.rp_drops.get(host, 0))
        return top

    def run(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        schedule = build_schedule(self.parts, NODES)
        hosts: dict[str, dict[str, Any]] = {n: {"reached": True, "measure": self.parts[n], "roce": [], "net": [],
                                                "storage_planned": False, "paths": self.paths.get(n)}
                                            for n in NODES}
        for rnd in schedule["rounds"]:
            for pair in rnd["pairs"]:
                for host, role, peer in ((pair["client"], "client", pair["server"]),
                                         (pair["server"], "server", pair["client"])):
                    legs = rnd["hosts"][host]["args"]["legs"]
                    hosts[host]["net"].append({"round": rnd["index"], "fabric": "rdma", "pair": pair["id"],
                                               "role": role, "probe": self.side(host, role, legs, peer),
                                               "error": None})
        return schedule, hosts


def kinds(report: dict[str, Any]) -> list[tuple[str, str, int | None, str | None]]:
    return [(f["kind"], f["host"], f.get("rail"), f.get("interface")) for f in report["findings"]
            if f["kind"] != "gate"]


def test_a_pair_loads_every_rail_at_once_on_ports_of_its_own() -> None:
    schedule = build_schedule(RailLab().parts, NODES)
    assert len(schedule["rounds"]) == 2  # ring: the rounds do not grow with the rails
    first = schedule["rounds"][0]
    pair = first["pairs"][0]
    assert [(r["rail"], r["client_address"], r["server_address"], r["port"]) for r in pair["rails"]] == [
        (r, address(1, r), address(2, r), 5201 + 2 * r) for r in range(4)]
    client = first["hosts"]["node1"]["args"]
    assert client["legs"][3] == {"rail": 3, "address": address(2, 3), "port": 5207, "source": address(1, 3),
                                 "interface": "ens4f0np0"}
    assert (client["address"], client["source"], client["port"]) == (address(2, 0), address(1, 0), 5201)
    assert "legs" in first["hosts"]["node2"]["args"] and "source" not in first["hosts"]["node2"]["args"]["legs"][0]


def test_healthy_rails_one_row_each_every_byte_on_its_nic_and_the_report_validates() -> None:
    report = build_report(*RailLab().run())
    assert len(report["pairs"]) == 16 and report["findings"] == [] and not report["failed"]
    assert {p["id"] for p in report["pairs"] if p["pair"] == "rdma:node1->node2"} == {
        f"rdma/rail{r}:node1->node2" for r in range(4)}
    assert {(p["egress_share"], p["ingress_share"]) for p in report["pairs"]} == {(1.0, 1.0)}
    with open(SCHEMA) as handle:
        jsonschema.Draft202012Validator(json.load(handle)).validate(report)


def test_misrouted_egress_arp_flux_and_reverse_path_drops_name_host_rail_and_interface() -> None:
    lab = RailLab()
    lab.misrouted.add("node1")
    lab.flux["node3"] = {2: "ens1f0np0"}
    lab.rp_drops["node4"] = 37
    lab.paths["node2"] = {"paths": [{"fabric": "rdma", "peer": "node3", "address": address(3, 1), "mtu": 9000,
                                     "interface": "ens2f0np0", "rail": 1, "peer_rail": 1, "route_dev": "ens4f0np0",
                                     "route_ok": False, "ok": True, "largest_mtu": 9000, "probes": [],
                                     "arp": {"macs": ["02:dd:00:01:00:03", "02:dd:00:11:00:03"], "error": None}}],
                          "cross_rails": [], "nics": {}}
    lab.paths["node3"] = {"paths": [], "cross_rails": [],
                          "nics": {"ens1f0np0": "02:dd:00:01:00:03", "ens2f0np0": "02:dd:00:11:00:03"}}
    schedule, hosts = lab.run()
    report = build_report(schedule, hosts)
    found = kinds(report)
    assert [f for f in found if f[0] == "wrong-egress"] == [
        ("wrong-egress", "node1", 0, "ens1f0np0"), ("wrong-egress", "node1", 1, "ens2f0np0"),
        ("wrong-egress", "node1", 2, "ens3f0np0"), ("wrong-egress", "node2", 1, "ens2f0np0")]
    assert [f for f in found if f[0] == "arp-flux"] == [
        ("arp-flux", "node3", 1, "ens1f0np0"), ("arp-flux", "node3", 2, "ens1f0np0")]
    drops = {("rp-filter-drops", "node4", r, NICS[r]) for r in range(4)}
    assert {f for f in found if f[0] == "rp-filter-drops"} == drops
    egress = next(f for f in report["findings"] if f["kind"] == "wrong-egress" and f["host"] == "node1")
    assert "only 0.0 % of a pair's bytes left through ens1f0np0 (the rest through ens4f0np0)" in egress["reason"]
    assert "rail0 of node1 on rdma" in egress["reason"] and "rail_routing" in egress["fix"]
    assert "wrong-egress node1 rdma rail0 ens1f0np0" in report["summary"]["bottlenecks"]
    rows = {p["id"]: p for p in report["pairs"]}
    assert rows["rdma/rail1:node1->node2"]["left_on"] == "ens4f0np0"
    assert rows["rdma/rail2:node2->node3"]["arrived_on"] == "ens1f0np0"


def test_one_slow_rail_is_named_alone_and_the_other_rails_pass() -> None:
    lab = RailLab()
    lab.slow[("node2", 3)] = 0.2
    out = reports(*lab.run())
    report = json.loads(out["files"]["measure.json"])
    assert kinds(report) == [("slow-rail", "node2", 3, "ens4f0np0")]
    assert report["summary"]["bottlenecks"] == ["slow-rail node2 rdma rail3 ens4f0np0"]
    failing = [p["id"] for p in report["pairs"] if p["status"] != "pass"]
    assert failing == ["rdma/rail3:node1->node2", "rdma/rail3:node2->node3"]
    gates = [f for f in report["findings"] if f["kind"] == "gate"]
    assert {f["host"] for f in gates} == {"node2"} and all(" on rdma rail3 fails " in f["reason"] for f in gates)
    assert "| error | slow-rail | node2 | rdma rail3 ens4f0np0 |" in out["files"]["measure.md"]
