"""path_check per rail: the route check (ip -j route get PEER from SELF) and the ARP check (arping -I), on
outputs recorded in the lab (tests/fixtures/network/rails/README.md), and the verify report's rails section."""

from __future__ import annotations

import json

from ansible_collections.aiinfra.datapath.plugins.filter.network import path_report
from ansible_collections.aiinfra.datapath.plugins.module_utils import _path_check
from ansible_collections.aiinfra.datapath.plugins.modules import path_check
from netfakes import FakeRunner, fixture, use

PING, IP, ARPING = "/usr/bin/ping", "/usr/sbin/ip", "/usr/sbin/arping"
PASSED = ("PING 198.18.1.16 (198.18.1.16) from 198.18.1.15 ens2f0np0: 8972(9000) bytes of data.\n\n"
          "--- 198.18.1.16 ping statistics ---\n3 packets transmitted, 3 received, 0% packet loss, time 405ms\n")


class Node1:
    """node1 of the recorded lab: its links, routes (by the main table: every rail leaves by ens4f0np0, or
    by its own rail's table), and peers whose NICs answer ARP as recorded."""

    def __init__(self, routed: bool, flux: bool) -> None:
        self.routed, self.flux = routed, flux

    def __call__(self, argv: list[str]):
        if argv[0] == PING:
            return 0, PASSED, ""
        if argv[:2] == [IP, "-j"] and argv[2:4] == ["link", "show"]:
            return 0, fixture("rails/node1-link.json"), ""
        if argv[:4] == [IP, "-j", "route", "get"]:
            source = argv[6]
            dev = {"198.18.1.11": "ens1f0np0", "198.18.1.15": "ens2f0np0"}[source] if self.routed else "ens4f0np0"
            return 0, json.dumps([{"dst": argv[4], "from": source, "dev": dev, "flags": [], "uid": 0}]), ""
        if argv[0] == ARPING:
            return 0, fixture("rails/arping-flux.txt" if self.flux else "rails/arping-one-nic.txt"), ""
        return None


def targets() -> list[dict]:
    return [{"fabric": "rdma", "mtu": 9000, "interface": "ens2f0np0", "source": "198.18.1.15", "rail": 1,
             "peers": [{"name": "node2", "address": "198.18.1.16", "rail": 1}],
             "cross_peers": [{"name": "node2", "address": "198.18.1.12", "rail": 0}],
             "subnets": ["198.18.1.0/24"]}]  # the fabric's, as path_targets gives them


def run(run_module, monkeypatch, routed: bool, flux: bool) -> dict:
    use(monkeypatch, FakeRunner([Node1(routed, flux)], which={"ping": PING, "ip": IP, "arping": ARPING}))
    return run_module(path_check.main, {"targets": targets(), "sizes": []})


def test_parse_the_recorded_arping_outputs() -> None:
    macs, error = _path_check.parse_arping(0, fixture("rails/arping-flux.txt"), "", "198.18.1.16")
    assert macs == ["02:dd:3e:31:00:02", "02:dd:3e:21:00:02", "02:dd:3e:11:00:02", "02:dd:3e:01:00:02"]
    assert error is None
    assert _path_check.parse_arping(0, fixture("rails/arping-one-nic.txt"), "", "198.18.1.16") == (
        ["02:dd:3e:11:00:02"], None)
    assert _path_check.parse_arping(2, "", "arping: ens9: No such device\n", "198.18.1.16") == (
        [], "arping: ens9: No such device")
    assert _path_check.arping_argv(ARPING, "ens2f0np0", "198.18.1.16", "198.18.1.15") == [
        ARPING, "-b", "-c", "16", "-w", "1", "-I", "ens2f0np0", "-s", "198.18.1.15", "198.18.1.16"]
    assert _path_check.route_dev(0, fixture("rails/node1-routes.json")) == "ens1f0np0"
    assert _path_check.route_dev(2, "") is None


def test_a_misrouted_rail_and_arp_flux_are_reported(run_module, monkeypatch) -> None:
    result = run(run_module, monkeypatch, routed=False, flux=True)
    [path] = result["paths"]
    assert (path["rail"], path["peer_rail"], path["route_dev"], path["route_ok"]) == (1, 1, "ens4f0np0", False)
    assert len(path["arp"]["macs"]) == 4
    [cross] = result["cross_rails"]
    assert (cross["peer_rail"], cross["route_dev"], cross["route_ok"]) == (0, "ens4f0np0", False)
    assert result["nics"]["ens2f0np0"] == "02:dd:3e:11:00:01"
    assert result["rail_problems"] == [
        "rdma rail1: ip route get 198.18.1.16 from 198.18.1.15 leaves by ens4f0np0, not ens2f0np0",
        "rdma rail1: 4 NICs answer ARP for 198.18.1.16 (02:dd:3e:31:00:02, 02:dd:3e:21:00:02, 02:dd:3e:11:00:02, "
        "02:dd:3e:01:00:02)",
        "rdma rail1: ip route get 198.18.1.12 from 198.18.1.15 leaves by ens4f0np0, not ens2f0np0"]
    assert path["ok"] is True  # the MTU check is its own verdict


def test_the_verify_report_names_host_rail_and_the_nics_that_answer(run_module, monkeypatch) -> None:
    bad = run(run_module, monkeypatch, routed=False, flux=True)
    node2_nics = {f"ens{r + 1}f0np0": f"02:dd:3e:{r}1:00:02" for r in range(4)}
    node2 = {"paths": [dict(bad["paths"][0], interface="ens2f0np0", peer="node1", address="198.18.1.15",
                            route_ok=True, arp=None)], "nics": node2_nics, "cross_rails": []}
    report = path_report({"node1": {"verify_result": bad}, "node2": {"verify_result": node2}}, ["node1", "node2"])
    rails = report["rails"]
    assert rails["ok"] is False and rails["route_checks"] == 3
    assert [(e["host"], e["rail"], e["interface"], e["route_dev"]) for e in rails["wrong_egress"]] == [
        ("node1", 1, "ens2f0np0", "ens4f0np0"), ("node1", 1, "ens2f0np0", "ens4f0np0")]
    [flux] = rails["arp_flux"]
    assert (flux["host"], flux["rail"], flux["interface"], flux["asked_by"]) == ("node2", 1, "ens2f0np0", "node1")
    assert [a["interface"] for a in flux["answered_by"]] == ["ens4f0np0", "ens3f0np0", "ens2f0np0", "ens1f0np0"]
    assert rails["failures"][-1] == ("arp-flux: node2 rdma rail1 (ens2f0np0): 4 NIC(s) answer ARP for 198.18.1.16 "
                                     "(node2 ens4f0np0, node2 ens3f0np0, node2 ens2f0np0, node2 ens1f0np0)")
    assert report["summary"][-1] == "rails: 3 route check(s), 2 leave by another NIC; 1 address(es) with ARP flux"
    good = run(run_module, monkeypatch, routed=True, flux=False)
    report = path_report({"node1": {"verify_result": good}, "node2": {"verify_result": node2}}, ["node1", "node2"])
    assert report["rails"]["ok"] is True and report["rails"]["failures"] == []
