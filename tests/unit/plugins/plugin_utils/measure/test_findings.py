"""Every rule that names a bottleneck, on constructed results (tests/.../measure/_data.py): the right
kind, host and fabric or device, and nothing else failing — no impairment, no finding."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure import findings as F
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.report import build_report

from ._data import RATE, Lab

MODES = ("ring", "all-pairs", "sample")


def report(lab: Lab) -> dict[str, Any]:
    return build_report(*lab.run())


def named(rep: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """(kind, host, fabric or device) of every failing finding."""
    return sorted({(f["kind"], f["host"], f["fabric"] or f["device"]) for f in rep["findings"]
                   if f["severity"] == "error"})


def hosts(rep: dict[str, Any]) -> set[str]:
    return {f["host"] for f in rep["findings"] if f["severity"] == "error"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 8])
def test_no_impairment_no_bottleneck(mode: str, nodes: int) -> None:
    rep = report(Lab(nodes, mode))
    assert rep["findings"] == [] and rep["failed"] is False
    assert {p["status"] for p in rep["pairs"]} == {"pass"}
    assert rep["summary"]["bottlenecks"] == [] and rep["fabrics"]["rdma"]["reference_gbit_s"] == RATE


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nodes", [3, 4, 8])
def test_a_rate_limited_port_is_named_node_link_and_its_peers_stay_clean(mode: str, nodes: int) -> None:
    lab = Lab(nodes, mode)
    lab.props["node3"]["rate"] = 0.2
    rep = report(lab)
    assert ("node-link", "node3", "rdma") in named(rep)
    assert hosts(rep) == {"node3"}  # the slow pairs are attributed to node3, not to its peers
    assert {f["kind"] for f in rep["findings"]} == {"node-link", "gate"}
    slow = [p for p in rep["pairs"] if "node3" in (p["client"], p["server"])]
    assert all(p["status"] == "fail" and p["attributed_to"] == "node3" for p in slow)
    assert all(p["status"] == "pass" for p in rep["pairs"] if p not in slow)
    node_link = next(f for f in rep["findings"] if f["kind"] == "node-link")
    assert node_link["evidence"]["node"]["best_gbit_s"] == 0.2 and node_link["evidence"]["reference_gbit_s"] == RATE
    assert "link or switch port" in node_link["reason"] and node_link["fix"]


@pytest.mark.parametrize("mode", MODES)
def test_retransmits_concentrated_on_one_node_are_a_lossy_port(mode: str) -> None:
    lab = Lab(4, mode)
    lab.props["node2"].update(share=0.01, loss=1.5)
    rep = report(lab)
    assert ("lossy-port", "node2", "rdma") in named(rep) and hosts(rep) == {"node2"}
    assert "node-link" not in {f["kind"] for f in rep["findings"]}
    lossy = next(f for f in rep["findings"] if f["kind"] == "lossy-port")
    assert lossy["evidence"]["node"]["retransmit_share"] == 0.01 and "cable" in lossy["fix"]


def test_a_lossy_port_that_is_also_slow_is_named_by_its_retransmits() -> None:
    lab = Lab(4)
    lab.props["node2"].update(share=0.02, rate=2.0)
    assert {k for k, _h, _f in named(report(lab))} == {"lossy-port", "gate"}


def test_probe_loss_alone_on_a_slow_node_is_a_shaper_not_a_lossy_port() -> None:
    """A rate limit with a queue drops a few small probes but retransmits little: node-link."""
    lab = Lab(4)
    lab.props["node3"].update(rate=0.2, loss=3.0)
    kinds = {k for k, h, _f in named(report(lab)) if h == "node3"}
    assert "node-link" in kinds and "lossy-port" not in kinds


@pytest.mark.parametrize("mode", MODES)
def test_delay_with_small_buffers_is_named_socket_buffers_with_the_sysctl_fix(mode: str) -> None:
    lab = Lab(4, mode)
    lab.props["node2"].update(delay=10, rmem=131072, wmem=131072)
    rep = report(lab)
    assert ("socket-buffers", "node2", "rdma") in named(rep) and hosts(rep) == {"node2"}
    assert "node-link" not in {f["kind"] for f in rep["findings"]}
    sb = next(f for f in rep["findings"] if f["kind"] == "socket-buffers")
    assert "net.ipv4.tcp_rmem" in sb["fix"] and "site.yml" in sb["fix"]
    assert sb["evidence"]["needed_bytes"] >= max(p["bdp_bytes"] for p in sb["evidence"]["pairs"])
    # The fix, on every node (site.yml applies the spec's sysctls): the window is not the limit any more.
    for node in lab.nodes:
        lab.props[node].update(rmem=1 << 28, wmem=1 << 28)
    assert report(lab)["findings"] == []


def test_buffers_too_small_for_the_delay_are_named_where_they_limit() -> None:
    """Default buffers (4 MiB send, 6 MiB receive) over 20 ms cannot carry 20 Gbit/s: node1's tcp_wmem
    limits node1 -> node2, node3's tcp_rmem limits node2 -> node3; node2's own large buffers are not named."""
    lab = Lab(4)
    lab.props["node2"].update(delay=10, rmem=1 << 28, wmem=1 << 28)
    rep = report(lab)
    sb = [f for f in rep["findings"] if f["kind"] == "socket-buffers"]
    want = [("node1", ["net.ipv4.tcp_wmem"]), ("node3", ["net.ipv4.tcp_rmem"])]
    assert [(f["host"], f["evidence"]["keys"]) for f in sb] == want
    assert hosts(rep) == {"node1", "node3"}


def test_a_queue_behind_a_capacity_limit_is_not_mistaken_for_small_buffers() -> None:
    """Through a slow relay with a queue the smoothed RTT grows until window / RTT equals the rate; the
    unloaded RTT (TCP_INFO min_rtt) shows the window is not the limit: node-link, not socket-buffers."""
    lab = Lab(4)
    lab.props["node2"].update(delay=10, rate=6.0, queue=30)
    for node in lab.nodes:
        lab.props[node].update(rmem=16 << 20, wmem=16 << 20)
    rep = report(lab)
    assert {k for k, _h, _f in named(rep)} == {"node-link", "gate"} and hosts(rep) == {"node2"}


def test_small_buffers_without_delay_are_not_a_bottleneck() -> None:
    lab = Lab(4)
    lab.props["node2"].update(rmem=131072, wmem=131072)
    assert report(lab)["findings"] == []


def test_an_mtu_mismatch_on_one_node_is_named_mtu_and_explains_its_slow_pairs() -> None:
    lab = Lab(4, "all-pairs")
    lab.props["node4"]["rate"] = 0.5  # a black-holed MSS: its TCP crawls
    for src in lab.nodes:
        lab.paths[src] = [{"fabric": "rdma", "peer": peer, "address": "x", "interface": "ens1f0np0", "mtu": 9000,
                           "largest_mtu": 1500 if "node4" in (src, peer) else 9000,
                           "ok": "node4" not in (src, peer), "probes": []}
                          for peer in lab.nodes if peer != src]
    rep = report(lab)
    assert named(rep) == [("gate", "node4", "rdma"), ("mtu", "node4", "rdma")]
    mtu = next(f for f in rep["findings"] if f["kind"] == "mtu")
    assert "1500" in mtu["reason"] and "9000" in mtu["fix"]


def test_an_mtu_failure_on_one_path_is_named_as_that_path() -> None:
    paths = [{"source": "a", "fabric": "f", "peer": "b", "mtu": 9000, "largest_mtu": 4000, "ok": False},
             {"source": "b", "fabric": "f", "peer": "c", "mtu": 9000, "largest_mtu": 9000, "ok": True},
             {"source": "c", "fabric": "f", "peer": "a", "mtu": 9000, "largest_mtu": 9000, "ok": True},
             {"source": "a", "fabric": "f", "peer": "c", "mtu": 9000, "largest_mtu": None, "ok": False}]
    out = F.mtu_findings("f", paths)
    assert [(f["host"], f["peer"]) for f in out] == [("a", "b")]  # unreachable (no size passes) is not MTU


@pytest.mark.parametrize("mode", MODES)
def test_an_unreachable_peer_is_a_probe_error_of_that_node_only(mode: str) -> None:
    lab = Lab(4, mode)
    lab.props["node4"]["down"] = True
    rep = report(lab)
    assert named(rep) == [("probe-error", "node4", "rdma")]
    err = rep["findings"][0]
    assert "timed out" in err["reason"] or "no client" in err["reason"]
    assert all(p["status"] == "error" for p in rep["pairs"] if "node4" in (p["client"], p["server"]))
    assert all(p["status"] == "pass" for p in rep["pairs"] if "node4" not in (p["client"], p["server"]))


def test_a_single_failed_pair_is_named_as_that_pair() -> None:
    lab = Lab(2)
    lab.props["node2"]["down"] = True
    rep = report(lab)
    assert [(f["kind"], f["host"], f["peer"]) for f in rep["findings"]] == [("probe-error", "node1", "node2")]


def test_a_missing_side_names_the_host_without_a_result() -> None:
    lab = Lab(4)
    sched, hosts_ = lab.run()
    hosts_["node3"]["net"] = [r for r in hosts_["node3"]["net"] if r["round"] != 1]
    rep = build_report(sched, hosts_)
    (f,) = rep["findings"]
    assert f["kind"] == "probe-error" and f["host"] == "node3" and "no result" in f["reason"]


def test_excluded_and_unreachable_hosts_are_probe_errors() -> None:
    lab = Lab(4)
    lab.parts["node2"]["fabrics"][0].update(address="10.9.9.9", address_ok=False)
    sched, hosts_ = lab.run()
    hosts_["node4"]["reached"] = False
    hosts_["node4"]["storage"] = None
    rep = build_report(sched, hosts_)
    kinds = {(f["kind"], f["host"]) for f in rep["findings"]}
    assert ("probe-error", "node2") in kinds and ("probe-error", "node4") in kinds
    assert any("outside the subnets" in f["reason"] for f in rep["findings"] if f["host"] == "node2")
    assert {h["name"]: h["status"] for h in rep["hosts"]}["node4"] == "unreachable"


def test_a_fabric_wide_problem_names_no_node() -> None:
    """Every pair below an absolute gate: gate findings per pair, no node blamed."""
    lab = Lab(4, "all-pairs")
    lab.gates["fabrics"]["rdma"]["min_gbit_s"] = 40.0
    rep = report(lab)
    kinds = {f["kind"] for f in rep["findings"]}
    assert kinds == {"gate"} and len(rep["findings"]) == 6
    assert all("min_gbit_s" in f["reason"] for f in rep["findings"])


def test_two_slow_neighbours_are_both_named() -> None:
    lab = Lab(6, "all-pairs")
    lab.props["node2"]["rate"] = 1.0
    lab.props["node3"]["rate"] = 1.0
    rep = report(lab)
    assert {(k, h) for k, h, _f in named(rep) if k != "gate"} == {("node-link", "node2"), ("node-link", "node3")}
    assert hosts(rep) == {"node2", "node3"}


def test_absolute_gates_name_pairs_with_the_numbers() -> None:
    lab = Lab(4)
    lab.gates["fabrics"]["rdma"].update(max_p99_ms=0.05)
    rep = report(lab)
    assert {f["kind"] for f in rep["findings"]} == {"gate"}
    gate = rep["findings"][0]["evidence"]["gates"][0]
    assert gate == {"gate": "max_p99_ms", "limit": 0.05, "value": 0.1}


# --------------------------------------------------------------------------- storage
def test_a_slow_device_is_named_and_nothing_else() -> None:
    lab = Lab(4)
    lab.read["node3"] = 100.0
    rep = report(lab)
    assert named(rep) == [("slow-device", "node3", "/dev/loop3")]
    f = rep["findings"][0]
    assert f["probe"] == "storage" and {t["target"] for t in f["evidence"]["targets"]} == {"cache", "device"}
    assert all(s["status"] == ("fail" if s["host"] == "node3" else "pass") for s in rep["storage"])


def test_storage_gates_and_errors() -> None:
    lab = Lab(4)
    lab.gates["storage"].update(min_read_mib_s=3000.0, max_p99_us_qd32=1000.0)
    sched, hosts_ = lab.run()
    hosts_["node1"]["storage"]["targets"][1].update(ok=False, error="open /dev/loop1: Permission denied")
    rep = build_report(sched, hosts_)
    gates = [f for f in rep["findings"] if f["kind"] == "gate"]
    assert {f["host"] for f in gates} == {"node1", "node2", "node3", "node4"}
    assert all("min_read_mib_s 2000.0 MiB/s < 3000.0 MiB/s" in f["reason"] for f in gates)
    errors = [f for f in rep["findings"] if f["kind"] == "probe-error"]
    assert [(f["host"], f["device"]) for f in errors] == [("node1", "/dev/loop1")]


def test_storage_with_two_nodes_has_no_relative_gate() -> None:
    lab = Lab(2)
    lab.read["node2"] = 100.0
    assert report(lab)["findings"] == []


# --------------------------------------------------------------------------- counters
def _snap(**ethtool: int) -> dict[str, Any]:
    return {"ens1f0np0": {"supported": True, "reason": None, "ethtool": dict(ethtool),
                          "rdma": {"device": "mlx5_0", "port": 1, "counters": {}, "hw_counters": {}}}}


ZERO = {"rx_prio3_pause": 0, "tx_prio3_pause": 0, "np_ecn_marked_roce_packets": 0, "np_cnp_sent": 0,
        "rp_cnp_handled": 0, "rx_prio3_discards": 0, "rx_discards_phy": 0, "rx_prio0_pause": 0}


@pytest.mark.parametrize(("after", "kinds"), [
    ({"rx_prio3_pause": 5000}, ["pause frames"]),
    ({"rx_prio3_pause": 5000, "np_ecn_marked_roce_packets": 900, "np_cnp_sent": 300}, []),
    ({"rx_prio3_discards": 12}, ["discarded 12"]),
    ({"rx_discards_phy": 3, "np_ecn_marked_roce_packets": 10}, ["discarded 3"]),
    ({"rx_prio0_pause": 100}, []),  # pauses on a priority that is not lossless: not this rule
    ({}, []),
])
def test_qos_rules_read_the_counter_deltas(after: dict[str, int], kinds: list[str]) -> None:
    lab = Lab(4)
    lab.counters["node2"] = (_snap(**ZERO), _snap(**{**ZERO, **after}))
    sched, hosts_ = lab.run()
    hosts_["node2"]["roce"] = [{"interface": "ens1f0np0", "fabric": "rdma", "pfc_priorities": [3]}]
    rep = build_report(sched, hosts_)
    qos = [f for f in rep["findings"] if f["kind"] == "qos"]
    assert len(qos) == len(kinds)
    for f, text in zip(qos, kinds, strict=True):
        assert f["host"] == "node2" and f["device"] == "ens1f0np0" and f["fabric"] == "rdma" and text in f["reason"]
        assert f["probe"] == "counters"
    assert rep["counters"]["node2"]["ens1f0np0"]["supported"] is True


def test_a_counter_that_went_down_is_a_reset_not_a_negative_delta() -> None:
    lab = Lab(4)
    lab.counters["node2"] = (_snap(**{**ZERO, "rx_prio3_pause": 900}), _snap(**ZERO))
    sched, hosts_ = lab.run()
    rep = build_report(sched, hosts_)
    row = rep["counters"]["node2"]["ens1f0np0"]
    assert row["reset"] == ["ethtool:rx_prio3_pause"] and not row["deltas"]["ethtool"]
    assert rep["findings"] == []


def test_veth_counters_are_unsupported_not_an_error() -> None:
    rep = report(Lab(4))
    assert rep["findings"] == []
    assert all(not r["supported"] for rows in rep["counters"].values() for r in rows.values())
    assert any("counters unsupported" in n for n in rep["notes"])


def test_concentrated_needs_two_pairs_and_unflagged_peers() -> None:
    pairs = [{"client": "a", "server": "b", "bad": True}, {"client": "b", "server": "c", "bad": False},
             {"client": "c", "server": "a", "bad": True}]
    nodes = F.by_node(pairs)
    assert F.concentrated(nodes, lambda p: p["bad"]) == ["a"]
    assert F.concentrated(nodes, lambda p: True) == []  # everyone: not one node's problem
    assert F.concentrated(F.by_node(pairs[:1]), lambda p: p["bad"]) == []  # one pair names no node


def test_one_slow_storage_figure_is_noise_not_a_slow_device() -> None:
    lab = Lab(4)
    sched, hosts_ = lab.run()
    hosts_["node1"]["storage"]["targets"][1]["seq_read_mib_s"] = 100.0  # IOPS fine: a neighbour's burst
    assert build_report(sched, hosts_)["findings"] == []
    hosts_["node1"]["storage"]["targets"][1]["random"]["32"]["iops"] = 100.0
    rep = build_report(sched, hosts_)
    assert named(rep) == [("slow-device", "node1", "/dev/loop1")]


def test_long_errors_are_one_short_line() -> None:
    lab = Lab(2)
    sched, hosts_ = lab.run()
    hosts_["node1"]["net"][0]["probe"].update(ok=False, error="refused\n" + "x" * 1000)
    (f,) = build_report(sched, hosts_)["findings"]
    assert "\n" not in f["reason"] and len(f["evidence"]["error"]) < 700


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nodes", [4, 5, 8])
@pytest.mark.parametrize(("shaped", "lossy"), [("node2", "node3"), ("node3", "node2"), ("node1", "node3")])
def test_two_faults_at_once_each_named_with_its_own_kind(mode: str, nodes: int, shaped: str, lossy: str) -> None:
    """Issue 41 point 7: a rate limit on one node (its queue drops a few probes) and a lossy port on
    another at the same time. Before the fix, ring 5 / 8 with node1 shaped and node3 lossy named node2
    (between them) a lossy-port: every pair of node2 lost probes, but each by one of its peers' faults."""
    lab = Lab(nodes, mode)
    lab.props[shaped].update(rate=2.0, loss=3.0)
    lab.props[lossy].update(share=0.01, loss=1.5)
    rep = report(lab)
    expected = sorted([("lossy-port", lossy, "rdma"), ("node-link", shaped, "rdma")])
    assert [x for x in named(rep) if x[0] != "gate"] == expected
    assert hosts(rep) == {shaped, lossy}  # no third node named
