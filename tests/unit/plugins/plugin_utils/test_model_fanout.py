"""The controller's wave plan of peer fan-out (plugin_utils/model_fanout.py, issue 42): pure functions."""

from __future__ import annotations

import math

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.model_fanout import (
    FanoutError,
    host_rack,
    plan_waves,
    predict_seconds,
    waves_needed,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def racks_of(sizes: dict[str, int]) -> dict[str, str]:
    return {f"{rack}-n{i:02d}": rack for rack, n in sizes.items() for i in range(n)}


def test_one_seed_per_rack_from_the_origin_in_the_first_wave() -> None:
    plan = plan_waves(racks_of({"a": 4, "b": 4}))
    assert plan["seeds"] == ["a-n00", "b-n00"] and plan["waves"][0] == ["a-n00", "b-n00"]
    assert all(plan["hosts"][s]["peers"] == [] and plan["hosts"][s]["wave"] == 0 for s in plan["seeds"])
    assert all(h["peers"] for name, h in plan["hosts"].items() if name not in plan["seeds"])


def test_holders_double_per_wave_rack_local_first() -> None:
    plan = plan_waves(racks_of({"a": 4, "b": 4}))
    assert [len(w) for w in plan["waves"]] == [2, 2, 4]  # 2 holders, 4, 8
    for name, host in plan["hosts"].items():
        if host["peers"]:
            assert host["peers"][0].split("-")[0] == host["rack"], name  # the planned peer is in its rack
            assert plan["hosts"][host["peers"][0]]["wave"] < host["wave"]  # and holds the version already


def test_every_holder_serves_at_most_one_new_host_per_wave() -> None:
    plan = plan_waves(racks_of({"a": 16, "b": 3, "c": 9}))
    for number, wave in enumerate(plan["waves"][1:], start=1):
        primaries = [plan["hosts"][h]["peers"][0] for h in wave]
        assert len(primaries) == len(set(primaries)), number


def test_spare_holders_help_the_rack_still_filling() -> None:
    plan = plan_waves(racks_of({"a": 16, "b": 2}))
    # wave 1: a's seed serves a, b's seed serves b's last host; wave 2: b's two holders are spare and serve a
    wave2 = plan["waves"][2]
    helpers = {plan["hosts"][h]["peers"][0] for h in wave2} & {"b-n00", "b-n01"}
    assert helpers == {"b-n00", "b-n01"}
    assert len(plan["waves"]) - 1 == waves_needed([16, 2]) == 4  # 2, 4, 8, 16 holders in a, helped by b


def test_fallbacks_rack_local_then_remote_and_serve_to_is_exactly_who_may_ask() -> None:
    plan = plan_waves(racks_of({"a": 4, "b": 4}), fallbacks=2)
    host = plan["hosts"]["a-n03"]  # wave 2: a has two holders, b has two
    assert host["wave"] == 2 and len(host["peers"]) == 3
    assert host["peers"][1].startswith("a-") and host["peers"][2].startswith("b-")
    for name, entry in plan["hosts"].items():
        for peer in entry["peers"]:
            assert name in plan["hosts"][peer]["serve_to"]
    asked = {(p, n) for n, e in plan["hosts"].items() for p in e["peers"]}
    assert asked == {(p, n) for p, e in plan["hosts"].items() for n in e["serve_to"]}


def test_the_plan_is_the_same_on_every_run() -> None:
    racks = racks_of({"x": 5, "y": 7})
    assert plan_waves(racks) == plan_waves(dict(reversed(list(racks.items()))))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=8))
def test_every_host_gets_it_once_and_origin_load_is_one_per_rack(sizes: list[int]) -> None:
    racks = racks_of({f"r{i}": n for i, n in enumerate(sizes)})
    plan = plan_waves(racks)
    flat = [h for wave in plan["waves"] for h in wave]
    assert sorted(flat) == sorted(racks)
    assert sum(1 for h in plan["hosts"].values() if not h["peers"]) == len(sizes)  # origin fetches = racks
    # doubling: no wave more than doubles the holders, and the largest rack needs at most ceil(log2(n)) waves
    held = len(sizes)
    for wave in plan["waves"][1:]:
        assert len(wave) <= held
        held += len(wave)
    assert len(plan["waves"]) - 1 <= math.ceil(math.log2(max(sizes))) if max(sizes) > 1 else True


def test_rack_from_the_host_variable_or_one_rack_group() -> None:
    assert host_rack("n1", {"rack": "r12"}, ["gpu", "rack_r3"]) == "r12"
    assert host_rack("n1", {}, ["gpu", "rack_r3"]) == "r3"
    with pytest.raises(FanoutError, match="n1 has no rack: set the host variable rack"):
        host_rack("n1", {}, ["gpu"])
    with pytest.raises(FanoutError, match="several rack groups"):
        host_rack("n1", {}, ["rack_a", "rack_b"])


def test_the_time_model() -> None:
    gib = 1 << 30
    # 2 racks of 4, 1 GiB, origin 100 MiB/s, nodes 100 MiB/s: the seeds share the origin (50 MiB/s each),
    # then 2 peer waves of 1 GiB at 100 MiB/s
    got = predict_seconds([4, 4], gib, 100 << 20, 100 << 20)
    assert got["origin_seconds"] == pytest.approx(gib / (50 << 20))
    assert got["peer_waves"] == 2 and got["peer_seconds"] == pytest.approx(2 * gib / (100 << 20))
    # 32 racks of 8, C = 8: four origin waves at min(b, B/C)
    got = predict_seconds([8] * 32, 16 * 10 ** 9, 12.5e9, 1e9, concurrency=8)
    assert got["origin_seconds"] == pytest.approx(4 * 16) and got["peer_waves"] == 3
    with pytest.raises(FanoutError):
        predict_seconds([], 1, 1, 1)


def test_bytes_per_source_follow_the_takeovers() -> None:
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.model_fanout import file_bytes_by_source
    assert file_bytes_by_source([{"from": "n4", "at": 0}, {"from": "n2", "at": 1000}], 5000) == {"n4": 1000, "n2": 4000}
    assert file_bytes_by_source([{"from": "origin", "at": 0}], 10) == {"origin": 10}
    assert file_bytes_by_source([], 10) == {}


def test_the_rollout_report_names_sources_origin_bytes_and_the_prediction() -> None:
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.model_fanout import rollout_report
    size = 100 << 20

    def result(started: float, finished: float, parts: list[dict], excluded: list[str] | None = None) -> dict:
        return {"started": started, "finished": finished, "models": [{
            "name": "m", "version": "v1", "bytes_moved": size, "files": [{"path": "w", "size": size}],
            "sources": {"w": parts}, "excluded_peers": excluded or []}]}

    racks = {"a1": "a", "a2": "a", "b1": "b", "b2": "b"}
    results = {"a1": result(0, 2, [{"from": "origin", "at": 0}]), "b1": result(0, 2, [{"from": "origin", "at": 0}]),
               "a2": result(2, 3, [{"from": "a1", "at": 0}]),
               "b2": result(2, 3.5, [{"from": "b3", "at": 0}, {"from": "b1", "at": 10}], excluded=["b9"])}
    report = rollout_report(results, racks, size, origin_rate=100 << 20, node_rate=100 << 20)
    cluster = report["cluster"]
    assert cluster["origin_bytes"] == 2 * size == cluster["origin_bytes_limit"]  # racks x S
    assert cluster["wall_seconds"] == 3.5 and cluster["last_node_seconds"] == 3.5
    assert cluster["predicted_seconds"] == pytest.approx(2 + 1)  # seeds share the origin, then one peer wave
    assert cluster["excluded_peers"] == {"b9": ["b2"]}
    timed = rollout_report(results, racks, size, 100 << 20, 100 << 20, run_started=-0.5, run_finished=4.0)
    assert timed["cluster"]["wall_seconds"] == 4.5 and timed["cluster"]["last_node_seconds"] == 4.0
    assert report["nodes"]["b2"]["files"] == [{"model": "m@v1", "path": "w", "from": ["b3", "b1"],
                                               "bytes": {"b3": 10, "b1": size - 10}}]
    assert report["nodes"]["a2"]["seconds"] == 1.0 and report["nodes"]["a2"]["rack"] == "a"
