"""The schedule: each node in at most one test per round, the round counts of every mode, coverage,
determinism, exclusions and the net_probe arguments of each host."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.schedule import (
    build_schedule,
    circle_rounds,
    estimate_seconds,
    ring_rounds,
    round_count,
    rounds_for,
    sample_rounds,
)

from ._data import part

NODES = [f"n{i:02d}" for i in range(1, 40)]


def _one_test_per_node(rounds: list[list[tuple[str, str]]]) -> None:
    for pairs in rounds:
        seen = [h for pair in pairs for h in pair]
        assert len(seen) == len(set(seen)), pairs
        assert all(a != b for a, b in pairs)


@pytest.mark.parametrize("n", range(1, 21))
def test_all_pairs_is_a_round_robin_tournament(n: int) -> None:
    nodes = NODES[:n]
    rounds = circle_rounds(nodes)
    _one_test_per_node(rounds)
    assert len(rounds) == round_count("all-pairs", n) == (0 if n < 2 else n - 1 if n % 2 == 0 else n)
    pairs = [frozenset(p) for r in rounds for p in r]
    assert len(pairs) == len(set(pairs)) == n * (n - 1) // 2  # every unordered pair exactly once
    assert all(len(r) == n // 2 for r in rounds)  # N/2 pairs, one node idle for odd N
    sends = Counter(c for r in rounds for c, _server in r)
    assert n < 2 or max(sends.values()) - min(sends.get(h, 0) for h in nodes) <= 1  # each sends in half its pairs


@pytest.mark.parametrize("n", range(1, 21))
def test_ring_sends_from_each_node_to_the_next(n: int) -> None:
    nodes = NODES[:n]
    rounds = ring_rounds(nodes)
    _one_test_per_node(rounds)
    assert len(rounds) == round_count("ring", n) == (0 if n < 2 else 1 if n == 2 else 2 if n % 2 == 0 else 3)
    edges = sorted(p for r in rounds for p in r)
    want = [(nodes[0], nodes[1])] if n == 2 else [(nodes[k], nodes[(k + 1) % n]) for k in range(n)] if n > 2 else []
    assert edges == sorted(want)


@pytest.mark.parametrize(("n", "k"), [(4, 1), (4, 3), (4, 5), (7, 3), (8, 3), (16, 3), (17, 5), (33, 4)])
def test_sample_is_k_matchings_with_distinct_peers_and_deterministic(n: int, k: int) -> None:
    nodes = NODES[:n]
    rounds = sample_rounds(nodes, k, 7, "rail0")
    _one_test_per_node(rounds)
    assert len(rounds) == round_count("sample", n, k) == min(k, n - 1 if n % 2 == 0 else n)
    pairs = [frozenset(p) for r in rounds for p in r]
    assert len(pairs) == len(set(pairs))  # peers never repeat
    if n % 2 == 0:
        assert all(len(r) == n // 2 for r in rounds)  # perfect matchings
    assert rounds == sample_rounds(list(nodes), k, 7, "rail0")  # deterministic
    assert sample_rounds(nodes, k, 8, "rail0") != rounds or n <= 4  # another seed, other pairs
    peers = Counter(h for r in rounds for p in r for h in p)
    assert all(peers[h] >= min(k, n - 1) - 1 for h in nodes)


def test_unknown_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        rounds_for("mesh", NODES[:4])


@pytest.mark.parametrize(("mode", "n", "rounds"), [
    ("all-pairs", 16, 15), ("all-pairs", 256, 255), ("all-pairs", 4096, 4095),
    ("ring", 16, 2), ("ring", 256, 2), ("ring", 4096, 2), ("sample", 16, 3), ("sample", 256, 3), ("sample", 4096, 3)])
def test_round_counts_at_scale(mode: str, n: int, rounds: int) -> None:
    assert round_count(mode, n, 3) == rounds
    assert estimate_seconds(mode, n, 3, 5.0, overhead=3.0) == rounds * 8.0
    # With 512 forks (256 pairs at once), 4,096 nodes need 8 sub-rounds per matching.
    assert estimate_seconds(mode, n, 3, 5.0, overhead=3.0, max_pairs=256) == rounds * 8.0 * -(-(n // 2) // 256)


def parts(n: int, **changes: Any) -> dict[str, dict[str, Any]]:
    out = {f"node{i}": part(f"node{i}", i) for i in range(1, n + 1)}
    for p in out.values():
        p.update(changes)
    return out


def test_build_schedule_gives_each_host_its_role_and_arguments() -> None:
    sched = build_schedule(parts(4), [f"node{i}" for i in range(1, 5)])
    assert sched["mode"] == "ring" and len(sched["rounds"]) == 2 and sched["fabrics"]["rdma"]["pairs"] == 4
    first = sched["rounds"][0]
    assert [p["id"] for p in first["pairs"]] == ["rdma:node1->node2", "rdma:node3->node4"]
    client, server = first["hosts"]["node1"], first["hosts"]["node2"]
    assert client["role"] == "client" and client["peer"] == "node2"
    token = client["args"]["token"]
    assert client["args"] == {"role": "client", "address": "198.18.1.12", "source": "198.18.1.11", "port": 5201,
                              "streams": 4, "duration": 5.0, "tool": "builtin", "wait": 30.0,
                              "latency_interval": 0.02, "allowed_networks": ["198.18.1.0/24"], "token": token}
    assert server["args"]["role"] == "server" and server["args"]["address"] == "198.18.1.12"
    # the server serves only its planned client, with the pair's own per-run token
    assert server["args"]["peer"] == "198.18.1.11" and server["args"]["token"] == token
    assert len(token) == 32 and int(token, 16) >= 0
    tokens = [h["args"]["token"] for r in sched["rounds"] for h in r["hosts"].values() if h["role"] == "server"]
    assert len(set(tokens)) == len(tokens) == 4, "one token per pair and round"
    assert "source" not in server["args"]
    assert sched["estimate_s"] == 2 * (5.0 + sched["overhead_s"])


def test_overrides_and_splitting_by_forks() -> None:
    sched = build_schedule(parts(8), [f"node{i}" for i in range(1, 9)], max_pairs=2,
                           overrides={"mode": "all-pairs", "duration": 2.0, "port": 6000, "tool": None})
    assert sched["mode"] == "all-pairs" and sched["tool"] == "builtin"
    assert len(sched["rounds"]) == 7 * 2 and all(len(r["pairs"]) <= 2 for r in sched["rounds"])
    assert {p["port"] for r in sched["rounds"] for p in r["pairs"]} == {6000}
    pairs = [frozenset((p["client"], p["server"])) for r in sched["rounds"] for p in r["pairs"]]
    assert len(set(pairs)) == len(pairs) == 28
    with pytest.raises(ValueError, match="max_pairs"):
        build_schedule(parts(2), ["node1", "node2"], max_pairs=0)


def test_hosts_without_a_usable_address_are_left_out_with_the_reason() -> None:
    p = parts(4)
    p["node2"]["fabrics"][0].update(address=None, address_ok=False)
    p["node3"]["fabrics"][0].update(address="10.0.0.3", address_ok=False)
    sched = build_schedule(p, [f"node{i}" for i in range(1, 5)])
    assert sched["fabrics"]["rdma"]["hosts"] == ["node1", "node4"]
    assert all(h not in r["hosts"] for r in sched["rounds"] for h in ("node2", "node3"))
    reasons = {e["host"]: e["reason"] for e in sched["excluded"]}
    assert "no address on fabric rdma" in reasons["node2"]
    assert "10.0.0.3 is outside the subnets" in reasons["node3"] and "refused" in reasons["node3"]


def test_every_host_is_in_at_most_one_pair_per_round_over_fabrics() -> None:
    p = parts(6, mode="all-pairs")
    for i, host in enumerate(p, start=1):
        p[host]["fabrics"].append({"name": "rail1", "subnets": ["10.1.0.0/24"], "mtu": 9000, "interface": "r1",
                                   "address": f"10.1.0.{i}", "address_ok": True})
    sched = build_schedule(p, list(p))
    assert [r["fabric"] for r in sched["rounds"]] == ["rdma"] * 5 + ["rail1"] * 5  # fabrics one after the other
    for rnd in sched["rounds"]:
        hosts = [h for pair in rnd["pairs"] for h in (pair["client"], pair["server"])]
        assert len(hosts) == len(set(hosts)) == len(rnd["hosts"])
        for role in rnd["hosts"].values():
            assert role["args"]["allowed_networks"] == sched["fabrics"][rnd["fabric"]]["subnets"]
    assert [r["index"] for r in sched["rounds"]] == list(range(1, 11))
    assert list(itertools.chain.from_iterable(r["pairs"] for r in sched["rounds"]))
