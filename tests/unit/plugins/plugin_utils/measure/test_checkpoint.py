"""The checkpoint part of the report (issue 41 point 3) on constructed results: the write-throttled node
is the slowest writer and the longest burst, named slow-writer; measure.json validates; measure.md shows it."""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.report import reports

from ._data import Lab

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5))
SCHEMA = os.path.join(REPO, "docs", "schema", "measure.schema.json")


def burst(mib_s: list[float], ok: bool = True) -> dict[str, Any]:
    writers = [{"index": i, "file": f"rank-{i:03d}.ckpt", "ok": True, "bytes": 8 << 20, "seconds": round(8 / v, 4),
                "mib_s": v, "error": None} for i, v in enumerate(mib_s)]
    slowest = min(writers, key=lambda w: w["mib_s"])
    return {"checkpoint": {"ok": ok, "error": None if ok else "writer 1 failed (no result)", "writers": writers,
                           "size": 16 << 20, "slowest_writer": {k: slowest[k] for k in ("index", "mib_s", "seconds")},
                           "longest_seconds": max(w["seconds"] for w in writers), "aggregate_mib_s": sum(mib_s),
                           "read_back": {"bytes": 16 << 20, "seconds": 0.1, "mib_s": 160.0, "verified": True},
                           "read_during_mib_s": 100.0, "read_alone_mib_s": 400.0, "read_ratio": 0.25,
                           "removed": True}}


def run(throttled: str = "node2") -> dict[str, Any]:
    schedule, hosts = Lab(4).run()
    for host in hosts:
        hosts[host]["checkpoint"] = burst([4.0, 3.5] if host == throttled else [400.0, 380.0])
    return reports(schedule, hosts)


def test_the_write_throttled_node_is_the_slowest_writer_and_named_slow_writer() -> None:
    out = run()
    doc = json.loads(out["files"]["measure.json"])
    with open(SCHEMA) as handle:
        jsonschema.Draft202012Validator(json.load(handle)).validate(doc)
    part = doc["checkpoint"]
    assert part["slowest"] == {"host": "node2", "writer": 1, "mib_s": 3.5}
    assert part["longest"] == {"host": "node2", "seconds": round(8 / 3.5, 4)}
    named = {(f["kind"], f["host"]) for f in doc["findings"] if f["severity"] == "error"}
    assert named == {("slow-writer", "node2")} and doc["failed"] is True
    md = out["files"]["measure.md"]
    assert "## Checkpoint burst" in md and "Slowest writer: node2 (writer 1, 3.5 MiB/s)" in md


def test_even_writers_find_nothing_and_a_failed_burst_is_a_probe_error() -> None:
    schedule, hosts = Lab(4).run()
    for host in hosts:
        hosts[host]["checkpoint"] = burst([400.0, 390.0], ok=host != "node3")
    doc = json.loads(reports(schedule, hosts)["files"]["measure.json"])
    assert [(f["kind"], f["host"]) for f in doc["findings"]] == [("probe-error", "node3")]
    assert "writer 1 failed" in doc["findings"][0]["reason"]


def test_no_burst_no_checkpoint_part() -> None:
    assert json.loads(reports(*Lab(4).run())["files"]["measure.json"])["checkpoint"] is None
