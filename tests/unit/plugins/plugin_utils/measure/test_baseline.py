"""Baselines (issue 41 point 2) on constructed runs: record, then unchanged compare runs find nothing;
a node whose port lost 20 % is named with the figure, the baseline's and today's value, and what changed
since the baseline (plan hash, kernel, firmware)."""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure import baseline as B
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.report import reports

from ._data import RATE, READ, Lab

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5))
SCHEMA = os.path.join(REPO, "docs", "schema", "measure.schema.json")
VERSIONS = "6.1.0-18-amd64\nens1f0np0 28.39.1002\n"


def info(lab: Lab, versions: str = VERSIONS, plan: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    return {h: {"class": "dgx-h100" if h != "node4" else "node4", "plan_hash": B.plan_hash(plan or {"sysctl": 1}),
                **B.parse_versions(versions)} for h in lab.nodes}


def run(lab: Lab, mode: str, existing: dict[str, Any], **kw: Any) -> dict[str, Any]:
    out = reports(*lab.run(), generated_at="2026-01-01T00:00:00Z",
                  baseline={"mode": mode, "info": kw.pop("info", None) or info(lab), "existing": existing,
                            "tolerance": kw.pop("tolerance", 0.1), "runs": 3})
    return {"out": out, "doc": json.loads(out["files"]["measure.json"])}


def recorded(lab: Lab, runs: int = 1) -> dict[str, Any]:
    existing: dict[str, Any] = {}
    for _run in range(runs):
        out = run(lab, "record", existing)["out"]
        existing = {name[:-5]: json.loads(text) for name, text in out["baseline_files"].items()}
    return existing


def test_record_writes_one_document_per_class_with_the_median_of_its_nodes() -> None:
    lab = Lab(4)
    base = recorded(lab, runs=4)
    assert sorted(base) == ["dgx-h100", "node4"]
    doc = base["dgx-h100"]
    assert doc["format"] == B.FORMAT and len(doc["runs"]) == 3  # the last runs_kept runs
    assert doc["figures"]["rdma.best_gbit_s"] == {"value": RATE, "unit": "Gbit/s", "runs": 3}
    assert doc["figures"]["storage.device.seq_read_mib_s"]["value"] == READ
    assert doc["kernel"] == ["6.1.0-18-amd64"] and doc["firmware"] == ["ens1f0np0 28.39.1002"]
    assert doc["runs"][0]["hosts"] == ["node1", "node2", "node3"]


def test_five_unchanged_compare_runs_find_nothing() -> None:
    lab = Lab(4)
    base = recorded(lab)
    with open(SCHEMA) as handle:
        validator = jsonschema.Draft202012Validator(json.load(handle))
    for _run in range(5):
        result = run(lab, "compare", base)
        validator.validate(result["doc"])
        assert result["doc"]["findings"] == [] and result["doc"]["failed"] is False
        assert result["doc"]["baseline"]["mode"] == "compare"


def test_a_port_20_percent_slower_is_named_with_its_figure_and_both_values() -> None:
    lab = Lab(4)
    base = recorded(lab)
    lab.props["node3"]["rate"] = RATE * 0.8
    result = run(lab, "compare", base)
    regressions = [f for f in result["doc"]["findings"] if f["kind"] == "baseline-regression"]
    assert [(f["host"], f["evidence"]["figure"]) for f in regressions] == [("node3", "rdma.best_gbit_s")]
    ev = regressions[0]["evidence"]
    assert (ev["baseline"], ev["value"], ev["change_pct"], ev["changed"]) == (RATE, 16.0, -20.0, {})
    assert regressions[0]["fabric"] == "rdma" and regressions[0]["severity"] == "error"
    assert "plan, kernel and firmware are as recorded" in regressions[0]["reason"]
    assert result["doc"]["failed"] is True and "node3" in result["doc"]["summary"]["failing_hosts"]
    assert "## Baseline" in result["out"]["files"]["measure.md"]
    assert "1 regression(s)" in result["out"]["files"]["measure.md"]


def test_what_changed_since_the_baseline_is_named() -> None:
    lab = Lab(4)
    base = recorded(lab)
    lab.read["node2"] = READ / 2
    now = info(lab, "6.8.0-1-amd64\nens1f0np0 28.40.1000\n", plan={"sysctl": 2})
    result = run(lab, "compare", base, info=now)
    [f] = [f for f in result["doc"]["findings"] if f["kind"] == "baseline-regression"
           and f["evidence"]["figure"] == "storage.device.seq_read_mib_s"]
    assert f["host"] == "node2" and f["device"] == "device" and f["probe"] == "storage"
    changed = f["evidence"]["changed"]
    assert changed["kernel"] == {"baseline": ["6.1.0-18-amd64"], "now": "6.8.0-1-amd64"}
    assert changed["firmware"]["now"] == ["ens1f0np0 28.40.1000"] and "plan_hash" in changed
    assert "kernel ['6.1.0-18-amd64'] -> 6.8.0-1-amd64" in f["reason"]


def test_a_class_without_baseline_is_a_warning_and_within_tolerance_passes() -> None:
    lab = Lab(4)
    result = run(lab, "compare", {})
    kinds = {(f["kind"], f["severity"]) for f in result["doc"]["findings"]}
    assert kinds == {("baseline-missing", "warning")} and result["doc"]["failed"] is False
    base = recorded(lab)
    lab.props["node3"]["rate"] = RATE * 0.95
    assert run(lab, "compare", base)["doc"]["findings"] == []


def test_parse_versions_and_plan_hash() -> None:
    firmware = {"veth0": None, "ens1": "1.2"}
    assert B.parse_versions("6.1.0\nveth0 \nens1 1.2\n") == {"kernel": "6.1.0", "firmware": firmware}
    assert B.parse_versions(None) == {"kernel": None, "firmware": {}}
    assert B.plan_hash({"a": 1, "measure": {"x": 1}}) == B.plan_hash({"a": 1, "measure": {"x": 2}})
    assert B.plan_hash({"a": 1}) != B.plan_hash({"a": 2}) and B.plan_hash(None) is None
    assert B.node_class({"node_topology": {"golden": "dgx"}}, "h1") == "dgx" and B.node_class({}, "h1") == "h1"
