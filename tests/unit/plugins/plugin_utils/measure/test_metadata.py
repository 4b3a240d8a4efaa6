"""The small-files part of the report (issue 41 point 4) on constructed results: rows per host and set,
a node slow in two operations is slow-metadata, one slow figure is not; measure.json validates."""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.report import reports

from ._data import Lab

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5))
SCHEMA = os.path.join(REPO, "docs", "schema", "measure.schema.json")


def probe(rates: dict[str, float]) -> dict[str, Any]:
    ops = {op: {"ops_s": rates.get(op, 20000.0), "p50_us": 30.0, "p99_us": 90.0, "ops": 2000}
           for op in ("create", "stat", "read", "unlink")}
    return {"metadata": {"ok": True, "error": None, "removed": True,
                         "sets": [{"name": "dataset", "files": 2000, "size": 4096, "ok": True, "error": None,
                                   "ops": ops}]}}


def run(slow: dict[str, float]) -> dict[str, Any]:
    schedule, hosts = Lab(4).run()
    for host in hosts:
        hosts[host]["metadata"] = probe(slow if host == "node4" else {})
    out = reports(schedule, hosts)
    doc = json.loads(out["files"]["measure.json"])
    with open(SCHEMA) as handle:
        jsonschema.Draft202012Validator(json.load(handle)).validate(doc)
    return {"doc": doc, "md": out["files"]["measure.md"]}


def test_a_node_slow_in_two_operations_is_named_slow_metadata() -> None:
    result = run({"create": 900.0, "unlink": 1000.0})
    named = [(f["kind"], f["host"]) for f in result["doc"]["findings"]]
    assert named == [("slow-metadata", "node4")]
    assert [i["op"] for i in result["doc"]["findings"][0]["evidence"]["figures"]] == ["create", "unlink"]
    assert len(result["doc"]["metadata"]) == 4 and "## Small files and metadata" in result["md"]
    assert "| node4 | dataset | 2000 x 4096 | 900.0 (30.0/90.0)" in result["md"]


def test_one_slow_operation_is_noise() -> None:
    assert run({"stat": 100.0})["doc"]["findings"] == []
