"""The filter plugins: thin wrappers with Ansible errors."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter import datapath as filters

from ._specs import base


def test_filter_names() -> None:
    names = {"validate", "node_plan", "plan_summary", "roce_tos", "roce_mtu", "controller_path"}
    assert set(filters.FilterModule().filters()) == names


def test_validate_returns_input_or_raises_everything() -> None:
    spec = base()
    assert filters.validate(spec) is spec
    spec["fabrics"][0]["mtu"] = 1
    spec["fabrics"][1]["roce"].update(pfc_priorities=[], ecn=False)
    with pytest.raises(AnsibleFilterError) as info:
        filters.validate(spec)
    text = str(info.value)
    assert "2 error(s)" in text
    assert "datapath.fabrics[0].mtu" in text and "datapath.fabrics[1].roce.pfc_priorities" in text


def test_validate_with_hosts_runs_node_checks() -> None:
    hosts = {"n1": {"groups": ["gpu"], "vars": {"datapath_memory_bytes": 2**30}}}
    with pytest.raises(AnsibleFilterError, match="host n1"):
        filters.validate(base(), hosts)


def test_node_plan_and_summary() -> None:
    plan = filters.node_plan(base(), "h1", ["gpu"], {"datapath_numa_nodes": 2})
    assert plan["host"] == "h1" and plan["roce_qos"]["interfaces"][0]["roce_tos"] == 106
    summary = filters.plan_summary(base(), {"all": ["h1", "h2"], "gpu": ["h1"], "ungrouped": []}, {})
    assert summary["gpu"]["hosts"] == 1 and len(summary["all"]["plans"]) == 2
    with pytest.raises(AnsibleFilterError):
        filters.node_plan({"version": 2}, "h1")


def test_derivations() -> None:
    assert filters.roce_tos(26) == 106 and filters.roce_tos("26", ecn=False) == 104
    assert filters.roce_mtu(9000) == 4096 and filters.roce_mtu(1500) == 1024
    for bad in (64, -1, "x", True, None):
        with pytest.raises(AnsibleFilterError):
            filters.roce_tos(bad)
    with pytest.raises(AnsibleFilterError):
        filters.roce_mtu(10)
