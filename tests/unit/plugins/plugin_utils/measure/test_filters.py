"""The filters the role calls (plugins/filter/measurement.py), over hostvars as Ansible hands them over:
the plans' measure parts, registered results (some skipped), hosts that did not reach the end."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter.measurement import (
    FilterModule,
    measure_report,
    measure_schedule,
)

from ._data import Lab


def hostvars(lab: Lab) -> tuple[dict[str, Any], dict[str, Any]]:
    """(hostvars before the rounds, after them) for the lab's nodes."""
    before = {n: {"datapath_plan": {"measure": lab.parts[n], "nvme_layout": {"devices": []},
                                    "roce_qos": {"interfaces": []}}} for n in lab.nodes}
    sched = measure_schedule(before, lab.nodes)
    after: dict[str, Any] = {}
    hosts = lab.hosts(sched)
    for n in lab.nodes:
        after[n] = dict(before[n], measure_net=hosts[n]["net"],
                        measure_storage_result=hosts[n]["storage"],
                        measure_paths_result={"skipped": True, "changed": False},
                        measure_counters_before=hosts[n].get("counters_before"),
                        measure_counters_after=hosts[n].get("counters_after"))
    return sched, after


def test_filters_are_registered() -> None:
    assert set(FilterModule().filters()) == {"measure_schedule", "measure_report"}


def test_schedule_from_hostvars_and_forks() -> None:
    lab = Lab(8, "all-pairs")
    hv = {n: {"datapath_plan": {"measure": lab.parts[n]}} for n in lab.nodes}
    hv["node9"] = {}  # a host without a plan is not scheduled
    sched = measure_schedule(hv, [*lab.nodes, "node9"], forks=4, overrides={"duration": 1.5, "mode": None})
    assert sched["max_pairs"] == 2 and len(sched["rounds"]) == 14 and sched["duration"] == 1.5
    assert sched["fabrics"]["rdma"]["hosts"] == lab.nodes
    with pytest.raises(AnsibleFilterError, match="hosts must be a list"):
        measure_schedule(hv, "node1")
    with pytest.raises(AnsibleFilterError, match="mode must be one of"):
        measure_schedule(hv, lab.nodes, overrides={"mode": "mesh"})


def test_report_from_registered_results() -> None:
    lab = Lab(4)
    lab.props["node3"]["rate"] = 0.2
    sched, hv = hostvars(lab)
    out = measure_report(hv, lab.nodes, sched, lab.nodes, "2026-01-01T00:00:00Z")
    assert out["failed"] is True and out["summary"]["failing_hosts"] == ["node3"]
    assert out["summary"]["bottlenecks"] == ["node-link node3 rdma"]
    assert sorted(out["files"]) == ["measure-rdma.svg", "measure.json", "measure.md", "measure.xml"]
    assert any(line.startswith("node-link: node3 (rdma)") for line in out["failures"])


def test_a_host_that_dropped_out_is_reported_unreachable() -> None:
    lab = Lab(4)
    sched, hv = hostvars(lab)
    hv["node2"] = {"datapath_plan": hv["node2"]["datapath_plan"]}  # nothing registered
    out = measure_report(hv, lab.nodes, sched, ["node1", "node3", "node4"])
    status = {h["name"]: h["status"] for h in out["hosts"]}
    assert status["node2"] == "unreachable" and out["failed"] is True
    assert "node2" in out["summary"]["failing_hosts"]


def test_report_input_errors() -> None:
    with pytest.raises(AnsibleFilterError, match="schedule must be"):
        measure_report({}, ["a"], None)


def test_an_unmounted_cache_is_a_storage_probe_error() -> None:
    lab = Lab(4)
    sched, hv = hostvars(lab)
    hv["node2"]["measure_cache_state"] = {"stdout": "unmounted", "changed": False}
    hv["node2"]["measure_storage_result"]["targets"] = hv["node2"]["measure_storage_result"]["targets"][1:]
    out = measure_report(hv, lab.nodes, sched, lab.nodes)
    assert out["summary"]["failing_hosts"] == ["node2"]
    assert any("node2 is not mounted" in line for line in out["failures"])
