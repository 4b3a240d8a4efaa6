"""Reports: audit.json validates against its published schema, audit.xml is JUnit, audit.md tables."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from typing import Any

import jsonschema
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.audit import (
    CAPABILITIES,
    build_report,
    compare,
    render_json,
    render_junit,
    render_markdown,
    reports,
)

from ._data import facts, plan

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))))
SCHEMA = os.path.join(REPO, "docs", "schema", "audit.schema.json")


def results() -> dict[str, list[dict[str, Any]]]:
    """node1 converged, node2 with a sysctl drift, an MTU drift and a warning, node3 unreachable."""
    f2 = facts()
    f2["sysctl"]["net.ipv4.tcp_mtu_probing"]["value"] = "0"
    f2["interfaces"]["ens1f0np0"]["mtu"] = 4000
    f2["sysctl"]["net.core.wmem_max"]["value"] = "4194304"
    f2["cmdline"] = ["ro"]
    p2 = dict(plan(), host="node2")
    return {"node1": compare(plan(), facts()), "node2": compare(p2, f2), "node3": compare({"host": "node3"}, None)}


def validator() -> jsonschema.Draft202012Validator:
    with open(SCHEMA) as handle:
        schema = json.load(handle)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_json_report_validates_and_counts() -> None:
    report = json.loads(render_json(build_report(results(), "drift", {"rtt_us": 100}, "2026-01-01T00:00:00Z")))
    validator().validate(report)
    assert report["schema_version"] == 2 and report["failed"] is True
    # drift counts what needs fixing; informational drift (a reboot pending) counts under info only
    assert report["summary"] == {"hosts": 3, "total": 7, "drift": 2, "error": 3, "warning": 1, "info": 3,
                                 "failing": 3}
    assert sum(1 for f in report["findings"] if f["kind"] == "drift") == 5
    assert [(h["name"], h["status"]) for h in report["hosts"]] == [
        ("node1", "pass"), ("node2", "fail"), ("node3", "unreachable")]
    # worst first: errors (drift before finding), then warnings, then info
    assert [f["severity"] for f in report["findings"]] == ["error"] * 3 + ["warning"] + ["info"] * 3
    assert report["findings"][0]["kind"] == "drift"
    assert report["by_capability"]["link_mtu"]["total"] == 1


def test_json_schema_rejects_what_it_should() -> None:
    report = json.loads(render_json(build_report(results())))
    bad = json.loads(json.dumps(report))
    bad["findings"][0]["severity"] = "fatal"
    assert list(validator().iter_errors(bad))
    bad = json.loads(json.dumps(report))
    del bad["findings"][0]["fix"]
    assert list(validator().iter_errors(bad))


def test_empty_and_converged_report() -> None:
    report = build_report({"node1": []})
    validator().validate(report)
    assert report["failed"] is False and report["findings"] == []
    assert "No drift and no findings." in render_markdown(report)


def test_junit_one_testcase_per_host_and_capability() -> None:
    text = render_junit(build_report(results()))
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["node1", "node2", "node3"]
    node2 = suites["node2"]
    cases = {c.get("name"): c for c in node2.findall("testcase")}
    assert list(cases) == list(CAPABILITIES)
    failed = sorted(name for name, case in cases.items() if case.find("failure") is not None)
    assert failed == ["link_mtu", "sysctl_profile"]
    assert node2.get("tests") == str(len(CAPABILITIES)) and node2.get("failures") == "2"
    # warning and info findings are output, not failures
    assert "socket-buffer" not in (cases["sysctl_profile"].find("failure").text or "")
    assert "wmem_max" in cases["sysctl_profile"].find("system-out").text
    assert "iommu=pt" in cases["kernel_cmdline"].find("system-out").text
    assert "tcp_mtu_probing" in cases["sysctl_profile"].find("failure").get("message")
    # an unreachable host is one failing test case
    node3 = suites["node3"].findall("testcase")
    assert [c.get("name") for c in node3] == ["facts"] and node3[0].find("failure") is not None
    assert suites["node1"].get("failures") == "0"
    assert root.get("tests") == str(2 * len(CAPABILITIES) + 1) and root.get("failures") == "3"
    assert all(c.get("classname") == "audit.node2" for c in node2.findall("testcase"))


def test_markdown_table_per_capability_worst_first() -> None:
    text = render_markdown(build_report(results(), generated_at="2026-01-01T00:00:00Z"))
    assert text.startswith("# Data-path audit\n")
    assert "FAILED (fail on: drift)" in text and "2026-01-01T00:00:00Z" in text
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    # errors first (drift before findings, more findings first), info-only capabilities last
    assert headings == ["sysctl_profile", "link_mtu", "facts", "kernel_cmdline"]
    sysctl = text.split("## sysctl_profile\n")[1].split("\n## ")[0]
    rows = [line for line in sysctl.splitlines() if line.startswith("| error") or line.startswith("| warning")]
    assert rows[0].startswith("| error | drift | node2 | net.ipv4.tcp_mtu_probing | 1 | 0 |")
    assert rows[1].startswith("| warning | finding | node2 | net.core.wmem_max |")
    assert "| node2 | fail | 2 | 1 | 3 |" in text  # 3 kernel arguments pending


def test_markdown_escapes_pipes() -> None:
    finding = dict(compare(plan(), None)[0], reason="a | b")
    assert "a \\| b" in render_markdown(build_report({"node1": [finding]}))


def test_reports_bundle_is_deterministic() -> None:
    one = reports(results(), "error", {"rtt_us": 100}, "2026-01-01T00:00:00Z")
    two = reports(results(), "error", {"rtt_us": 100}, "2026-01-01T00:00:00Z")
    assert one == two
    assert sorted(one["files"]) == ["audit.json", "audit.md", "audit.xml"]
    assert one["failed"] is True and one["summary"]["failing"] == 3
    assert reports(results(), "never")["failed"] is False


def test_junit_stays_readable_with_control_characters() -> None:
    """A value read from a node may hold characters XML 1.0 cannot carry; they are written as \\xNN."""
    finding = dict(compare(plan(), None)[0], host="node\x01", reason="a\x00b\x1b[31m", key="k\ud800")
    text = render_junit(build_report({"node\x01": [finding]}))
    root = ET.fromstring(text)  # well-formed
    assert root.find("testsuite").get("name") == "node\\x01"
    assert "a\\x00b\\x1b[31m" in root.find("testsuite/testcase/failure").text


def test_pulled_nodes_show_their_last_run() -> None:
    """datapath_facts' last_run (pull mode) per host: in audit.json (schema-valid) and a table in audit.md;
    a pushed node (present: false) and a host without facts get none."""
    runs = {"node1": {"present": True, "file": "/var/lib/aiinfra-datapath/last-run.json", "node": "node1",
                      "result": "succeeded", "error": None, "finished": "2026-12-03T18:00:00Z",
                      "revision": "3f1c2e0a", "check_mode": False, "reboot_required": False,
                      "changed": [], "failed": []},
            "node2": {"present": False, "file": "/var/lib/aiinfra-datapath/last-run.json"}}
    report = json.loads(render_json(build_report(results(), "drift", None, None, runs)))
    validator().validate(report)
    assert report["hosts"][0]["last_run"] == {"result": "succeeded", "finished": "2026-12-03T18:00:00Z",
                                              "revision": "3f1c2e0a", "error": None, "reboot_required": False}
    assert "last_run" not in report["hosts"][1] and "last_run" not in report["hosts"][2]
    md = render_markdown(build_report(results(), "drift", None, None, runs))
    assert "## Last pull run of each pulled node" in md
    assert "| node1 | succeeded | 2026-12-03T18:00:00Z | 3f1c2e0a | no | - |" in md
    assert "Last pull run" not in render_markdown(build_report(results()))
    bad = dict(report["hosts"][0]["last_run"], extra=1)
    assert list(validator().iter_errors(dict(report, hosts=[dict(report["hosts"][0], last_run=bad)])))
