"""The reports: measure.json validates against docs/schema/measure.schema.json, measure.xml against the
JUnit XSD (counts true), measure.md names the findings and links one SVG heatmap per fabric."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from typing import Any

import jsonschema
import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.report import (
    build_report,
    render_junit,
    reports,
)
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.svg import colour, heatmap

from ._data import Lab

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5))
SCHEMA = os.path.join(REPO, "docs", "schema", "measure.schema.json")
JUNIT_XSD = os.path.join(REPO, "tests", "interop", "schemas", "junit.xsd")


def labs() -> dict[str, Lab]:
    clean, rate, down, disk, qos = Lab(4), Lab(4, "all-pairs"), Lab(4), Lab(4), Lab(3)
    rate.props["node3"]["rate"] = 0.2
    down.props["node4"]["down"] = True
    disk.read["node2"] = 50.0
    qos.counters["node1"] = tuple({"ens1f0np0": {"supported": True, "ethtool": {"rx_prio3_pause": v}, "rdma": {}}}
                                  for v in (0, 100))  # type: ignore[assignment]
    return {"clean": clean, "rate": rate, "down": down, "disk": disk, "qos": qos}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    with open(SCHEMA) as handle:
        schema = json.load(handle)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("case", sorted(labs()))
def test_measure_json_validates_and_has_the_required_keys(case: str, validator: Any) -> None:
    out = reports(*labs()[case].run(), generated_at="2026-01-01T00:00:00Z")
    doc = json.loads(out["files"]["measure.json"])
    validator.validate(doc)
    assert {"failed", "pairs", "storage", "counters", "findings", "summary", "gates", "schedule"} <= set(doc)
    assert doc["failed"] is (case != "clean") and out["failed"] is doc["failed"]
    for f in doc["findings"]:
        assert {"kind", "severity", "host", "evidence", "reason", "fix"} <= set(f)
        assert f["fabric"] or f["device"] or f["kind"] == "probe-error"


def test_reports_are_deterministic() -> None:
    lab = labs()["rate"]
    assert reports(*lab.run()) == reports(*lab.run())


@pytest.mark.parametrize("case", sorted(labs()))
def test_junit_is_valid_with_true_counts(case: str) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    xsd = xmlschema.XMLSchema11(JUNIT_XSD)
    report = build_report(*labs()[case].run())
    text = render_junit(report)
    assert not [str(e) for e in xsd.iter_errors(text)]
    root = ET.fromstring(text)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [h["name"] for h in report["hosts"]]
    for suite in suites:
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == ["network", "storage", "counters"]
        assert int(suite.get("failures", "")) == sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("skipped", "")) == sum(c.find("skipped") is not None for c in cases)
    failing = {s.get("name") for s in suites if int(s.get("failures", "0"))}
    assert failing == set(report["summary"]["failing_hosts"])
    assert int(root.get("failures", "")) == sum(int(s.get("failures", "")) for s in suites)


def test_junit_names_the_failing_probe_of_each_host() -> None:
    root = ET.fromstring(reports(*labs()["disk"].run())["files"]["measure.xml"])
    failures = {(s.get("name"), c.get("name")) for s in root.findall("testsuite") for c in s.findall("testcase")
                if c.find("failure") is not None}
    assert failures == {("node2", "storage")}
    root = ET.fromstring(reports(*labs()["qos"].run())["files"]["measure.xml"])
    failures = {(s.get("name"), c.get("name")) for s in root.findall("testsuite") for c in s.findall("testcase")
                if c.find("failure") is not None}
    assert failures == {("node1", "counters")}


def test_markdown_names_the_bottleneck_and_links_the_heatmap() -> None:
    out = reports(*labs()["rate"].run())
    md = out["files"]["measure.md"]
    assert md.startswith("# Data-path measurement\n\nFAILED")
    assert "**Bottlenecks:** node-link node3 rdma" in md
    assert "[rdma pair matrix (SVG)](measure-rdma.svg)" in md and "measure-rdma.svg" in out["files"]
    assert "![" not in md  # no image a step summary or merge-request comment cannot show (issue 38)
    assert "| sends \\ receives | `node1` |" in md and "🟥" in md  # the heatmap itself, as a table
    clean = reports(*labs()["clean"].run())["files"]["measure.md"]
    assert "passed" in clean and "No bottleneck" in clean


def test_heatmap_is_svg_with_failing_and_error_cells_marked() -> None:
    lab = Lab(5, "all-pairs")
    lab.props["node3"]["rate"] = 0.2
    lab.props["node5"]["down"] = True
    out = reports(*lab.run())
    root = ET.fromstring(out["files"]["measure-rdma.svg"])
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = out["files"]["measure-rdma.svg"]
    doc = build_report(*lab.run())
    failing = sum(1 for p in doc["pairs"] if p["status"] == "fail")
    errors = sum(1 for p in doc["pairs"] if p["status"] == "error")
    assert text.count('stroke="#000" stroke-width="3"/>') == failing + 1  # + the legend
    assert text.count('fill="#9e9e9e" stroke="#555"') == errors
    assert "node3 -&gt; " in text or "-&gt; node3" in text


def test_heatmap_scales_and_escapes() -> None:
    pairs = [{"client": f"h{i}", "server": f"h{i + 1}", "ok": True, "gbit_per_s": 10.0, "status": "pass"}
             for i in range(300)]
    big = heatmap("rail<0>", [f"h{i}" for i in range(301)], pairs, 10.0)
    ET.fromstring(big)
    assert "rail&lt;0&gt;" in big and big.count("<rect") >= 300
    assert colour(0) == "#dc3c28" and colour(1) == "#28a028" and colour(5) == colour(1)
