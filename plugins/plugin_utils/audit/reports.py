# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit reports: one document (``build_report``) rendered as JSON, JUnit XML and Markdown.

* ``audit.json``: the document itself; schema docs/schema/audit.schema.json (``schema_version`` 1).
* ``audit.xml``: JUnit, one ``testsuite`` per host and one ``testcase`` per host and capability;
  a test case fails (one ``failure`` element listing its failing findings) when it holds a
  finding that ``is_failure``; the other findings go to ``system-out``.
* ``audit.md``: a table per capability, capabilities and rows worst first.

Output is deterministic for the same input (sorted, no wall clock unless ``generated_at`` is given).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from .compare import CAPABILITIES, fails, is_failure

SCHEMA_VERSION = 2
REPORT_FILES = ("audit.json", "audit.xml", "audit.md")
_RANK = {"error": 0, "warning": 1, "info": 2}
_KIND_RANK = {"drift": 0, "finding": 1}
_COLUMNS = ("severity", "kind", "host", "key", "wanted", "actual", "reason", "fix")


def sort_key(finding: Mapping[str, Any]) -> tuple[Any, ...]:
    return (_RANK.get(str(finding.get("severity")), 3), _KIND_RANK.get(str(finding.get("kind")), 2),
            str(finding.get("host")), str(finding.get("capability")), str(finding.get("key")),
            str(finding.get("check")))


def _counts(findings: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return {
        "total": len(findings),
        # drift that needs fixing; informational drift (a reboot pending) counts under info only
        "drift": sum(1 for f in findings if f.get("kind") == "drift" and f.get("severity") != "info"),
        "error": sum(1 for f in findings if f.get("severity") == "error"),
        "warning": sum(1 for f in findings if f.get("severity") == "warning"),
        "info": sum(1 for f in findings if f.get("severity") == "info"),
        "failing": sum(1 for f in findings if is_failure(f)),
    }


LAST_RUN_FIELDS = ("result", "finished", "revision", "error", "reboot_required")


def build_report(results: Mapping[str, Sequence[Mapping[str, Any]]], fail_on: str = "drift",
                 options: Mapping[str, Any] | None = None, generated_at: str | None = None,
                 last_runs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The audit document from ``{host: findings}`` (every audited host, also those without findings).

    ``last_runs``: ``{host: datapath_facts.last_run}``; a host whose node keeps a last-run.json (pull
    mode) gets ``last_run`` (result, finished, revision, error, reboot_required)."""
    findings = sorted((dict(f) for host in sorted(results) for f in results[host]), key=sort_key)
    hosts = []
    for host in sorted(results):
        mine = [f for f in findings if f["host"] == host]
        counts = _counts(mine)
        reached = not any(f.get("capability") == "facts" for f in mine)
        status = "unreachable" if not reached else "fail" if counts["failing"] else "pass"
        entry: dict[str, Any] = {"name": host, "status": status, "counts": counts}
        run = (last_runs or {}).get(host)
        if isinstance(run, Mapping) and run.get("present"):
            entry["last_run"] = {key: run.get(key) for key in LAST_RUN_FIELDS}
        hosts.append(entry)
    by_capability = {cap: _counts([f for f in findings if f.get("capability") == cap])
                     for cap in (*CAPABILITIES, "facts")}
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "aiinfra.datapath audit",
        "generated_at": generated_at,
        "options": dict(sorted((options or {}).items())),
        "fail_on": fail_on,
        "failed": fails(findings, fail_on),
        "summary": {"hosts": len(hosts), **_counts(findings)},
        "by_capability": {cap: counts for cap, counts in by_capability.items() if counts["total"]},
        "hosts": hosts,
        "findings": findings,
    }


def render_json(report: Mapping[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _line(f: Mapping[str, Any]) -> str:
    return (f"[{f['severity']}/{f['kind']}] {f['key']}: wanted {_value(f.get('wanted'))}, "
            f"actual {_value(f.get('actual'))} - {f['reason']} Fix: {f['fix']}")


# Characters XML 1.0 cannot carry; a value read from a node (an interface name, a sysctl value)
# could hold one, and one such character would make the whole report unreadable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def render_junit(report: Mapping[str, Any]) -> str:
    """JUnit XML: a testsuite per host, a testcase per host and capability.

    The shape Jenkins and GitLab read (tests/interop/schemas/junit.xsd checks it, counts included:
    tests/interop/test_spec_junit.py)."""
    findings: list[Mapping[str, Any]] = list(report["findings"])
    root = ET.Element("testsuites", name="aiinfra.datapath audit")
    total_tests = total_failures = 0
    for host in report["hosts"]:
        name = host["name"]
        mine = [f for f in findings if f["host"] == name]
        capabilities = list(CAPABILITIES)
        if any(f["capability"] == "facts" for f in mine):
            capabilities = ["facts"]
        suite = ET.SubElement(root, "testsuite", name=_xml(str(name)))
        failures = 0
        for cap in capabilities:
            case = ET.SubElement(suite, "testcase", classname=_xml(f"audit.{name}"), name=cap)
            items = [f for f in mine if f["capability"] == cap]
            failing = [f for f in items if is_failure(f)]
            if failing:
                failures += 1
                failure = ET.SubElement(case, "failure", type=_xml(str(failing[0]["kind"])),
                                        message=_xml("; ".join(f"{f['key']}: {f['reason']}" for f in failing)))
                failure.text = _xml("\n".join(_line(f) for f in failing))
            others = [f for f in items if not is_failure(f)]
            if others:
                ET.SubElement(case, "system-out").text = _xml("\n".join(_line(f) for f in others))
        suite.set("tests", str(len(capabilities)))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        suite.set("skipped", "0")
        total_tests += len(capabilities)
        total_failures += failures
    root.set("tests", str(total_tests))
    root.set("failures", str(total_failures))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _cell(value: Any) -> str:
    return _value(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Mapping[str, Any]) -> str:
    summary = report["summary"]
    verdict = "FAILED" if report["failed"] else "passed"
    lines = [
        "# Data-path audit",
        "",
        f"{verdict} (fail on: {report['fail_on']}) - {summary['hosts']} host(s), "
        f"{summary['drift']} drift, {summary['error']} error, {summary['warning']} warning, "
        f"{summary['info']} info" + (f"; generated {report['generated_at']}" if report.get("generated_at") else ""),
        "",
        "| host | status | error | warning | info |",
        "|---|---|---|---|---|",
    ]
    for host in report["hosts"]:
        c = host["counts"]
        lines.append(f"| {host['name']} | {host['status']} | {c['error']} | {c['warning']} | {c['info']} |")
    pulled = [h for h in report["hosts"] if h.get("last_run")]
    if pulled:
        lines += ["", "## Last pull run of each pulled node", "",
                  "| host | result | finished | revision | reboot required | error |", "|---|---|---|---|---|---|"]
        for host in pulled:
            run = host["last_run"]
            reboot = {True: "yes", False: "no"}.get(run["reboot_required"])
            lines.append("| " + " | ".join(_cell(v) for v in (
                host["name"], run["result"], run["finished"], run["revision"], reboot, run["error"])) + " |")
    findings: list[Mapping[str, Any]] = list(report["findings"])
    caps = sorted({f["capability"] for f in findings},
                  key=lambda cap: (min(sort_key(f) for f in findings if f["capability"] == cap)[:2],
                                   -sum(1 for f in findings if f["capability"] == cap), cap))
    if not caps:
        lines += ["", "No drift and no findings."]
    for cap in caps:
        rows = [f for f in findings if f["capability"] == cap]
        lines += ["", f"## {cap}", "",
                  "| " + " | ".join(_COLUMNS) + " |",
                  "|" + "---|" * len(_COLUMNS)]
        for f in rows:
            cells = [_cell(f.get(k)) for k in _COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def reports(results: Mapping[str, Sequence[Mapping[str, Any]]], fail_on: str = "drift",
            options: Mapping[str, Any] | None = None, generated_at: str | None = None,
            last_runs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{files: {audit.json: text, audit.xml: text, audit.md: text}, summary, failed, hosts}``."""
    report = build_report(results, fail_on, options, generated_at, last_runs)
    return {
        "files": {"audit.json": render_json(report), "audit.xml": render_junit(report),
                  "audit.md": render_markdown(report)},
        "summary": report["summary"],
        "failed": report["failed"],
        "hosts": report["hosts"],
    }
