"""The metric catalogue and the families per source (controller side; promtool reads the files they
become in tests/interop/test_telemetry.py)."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter.metrics import datapath_metrics
from ansible_collections.aiinfra.datapath.plugins.module_utils import _metrics_textfile as mt
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import telemetry as t

UNITS = ("_seconds", "_bytes", "_bytes_per_second", "_ratio", "_pages", "_info", "_findings",
         "_required", "_success", "_changed", "_failed", "_compliant", "_passed", "_mounted")


def test_catalogue_names_follow_the_conventions() -> None:
    assert len(t.BY_NAME) == len(t.CATALOGUE)
    for metric in t.CATALOGUE:
        assert re.fullmatch(r"aiinfra_datapath_[a-z0-9_]+", metric.name) and metric.source in t.SOURCES
        assert metric.name.endswith(UNITS), metric.name
        assert metric.type == "gauge" and metric.help.endswith(".") and "\n" not in metric.help
        assert all(re.fullmatch(r"[a-z_]+", label) for label in metric.labels)
        assert not metric.name.endswith("_info") or "value 1" in metric.help
    for source, heartbeat in t.HEARTBEATS.items():
        assert t.BY_NAME[heartbeat].source == source and heartbeat.endswith("_timestamp_seconds")


def test_every_source_renders_and_checks() -> None:
    for source in t.SOURCES:
        args = datapath_metrics({}, source)
        assert args["source"] == source and args["heartbeat"] == t.HEARTBEATS[source]
        mt.normalise(args["metrics"], args["heartbeat"])


def test_families_refuse_foreign_names_and_labels() -> None:
    families = t._Families("site")
    with pytest.raises(ValueError, match="belongs to source audit"):
        families.add("aiinfra_datapath_audit_drift_findings", 1, capability="x")
    with pytest.raises(ValueError, match="takes labels"):
        families.add("aiinfra_datapath_converge_capability_failed", 1)


def test_a_failed_converge_is_recorded() -> None:
    args = datapath_metrics({"result": {"failed": True, "msg": "x"}}, "site")
    assert args["metrics"] == [{"name": "aiinfra_datapath_converge_success", "help": t.BY_NAME[
        "aiinfra_datapath_converge_success"].help, "type": "gauge", "samples": [{"labels": {}, "value": 0}]}]


def test_unknown_source_and_bad_report() -> None:
    with pytest.raises(AnsibleFilterError, match="source must be one of"):
        datapath_metrics({}, "verify")
    with pytest.raises(AnsibleFilterError, match="not measure.json"):
        datapath_metrics({"report": "{", "host": "a"}, "measure")
    with pytest.raises(AnsibleFilterError, match="must be a dict"):
        datapath_metrics([], "site")


def test_cache_filesystems_from_the_plan() -> None:
    plan = {"nvme_layout": {"mount": {"path": "/mnt/c"}, "reserve_bytes": 5}, "model_cache": None}
    assert t.cache_filesystems(plan) == [{"path": "/mnt/c", "reserve_bytes": 5}]
    plan["model_cache"] = {"reserve_bytes": 7}
    assert t.cache_filesystems(plan) == [{"path": "/mnt/c", "reserve_bytes": 7}]
    assert t.cache_filesystems({"nvme_layout": None}) == []


def test_irq_placement_and_ebpf_readiness_of_a_converge() -> None:
    irqs = [{"irq": 28, "cpu": 0, "placed": True}, {"irq": 29, "cpu": 1, "placed": False},
            {"irq": 30, "cpu": 2, "placed": False}, {"irq": 31, "cpu": 3, "placed": False}]
    result = {"failed": False, "results": {
        "nic_affinity": {"changed": True, "interfaces": [
            {"interface": "enP35702p0s2f0np0", "irqs": irqs},
            {"interface": "ens1f0np0", "irqs": [{"irq": 99, "cpu": 1, "placed": True}]},
            {"interface": "veth0", "irqs": []}]},  # no IRQs (a veth): no sample
        "ebpf_readiness": {"ready": False, "features": {"native-routing": True, "netkit": False}}}}
    samples = {f["name"]: [(s["labels"], s["value"]) for s in f["samples"]]
               for f in datapath_metrics({"result": result}, "site")["metrics"]}
    assert samples["aiinfra_datapath_nic_affinity_compliant"] == [
        ({"interface": "enP35702p0s2f0np0"}, 0), ({"interface": "ens1f0np0"}, 1)]
    assert samples["aiinfra_datapath_nic_affinity_misplaced_ratio"] == [
        ({"interface": "enP35702p0s2f0np0"}, 0.75), ({"interface": "ens1f0np0"}, 0.0)]
    assert samples["aiinfra_datapath_ebpf_readiness_passed"] == [({}, 0)]
    assert samples["aiinfra_datapath_ebpf_feature_passed"] == [({"feature": "native-routing"}, 1),
                                                               ({"feature": "netkit"}, 0)]
    assert ({"capability": "nic_affinity"}, 0) in samples["aiinfra_datapath_converge_capability_failed"]
