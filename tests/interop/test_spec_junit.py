"""Every JUnit file the collection writes, validated by xmlschema against tests/interop/schemas/junit.xsd.

The writers (grep "testsuite"): `datapath validate --format junit` (plugins/plugin_utils/
cluster_spec/cli.py) and the audit's audit.xml (plugins/plugin_utils/audit/reports.py). What
this proves: each report has the structure Jenkins and GitLab read, and its counts are true
(tests, failures, errors and skipped equal the test cases with that result; the totals of
<testsuites> are the sums), for valid and invalid specs and inventories, unusable input, every
audit outcome (converged, drift, unreachable, empty), and hostile text (control characters in a
host name, a value or a message).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.audit import build_report, compare, render_junit, reports
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import cli
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.errors import SpecError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.loader import Inventory
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.spec_warnings import SpecWarning
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .spec_common import EXAMPLE, JUNIT_XSD, full_spec, run, tool, yaml_text

pytestmark = pytest.mark.interop

CASES: Counter[str] = Counter()
HOSTILE = "x\x00\x01\x1b[31m\x7f\ud800\ufffe é <&>\"'\n"


@functools.cache
def _schema() -> Any:
    xmlschema = pytest.importorskip("xmlschema", reason="xmlschema is installed by scripts/bootstrap.sh")
    return xmlschema.XMLSchema11(JUNIT_XSD)


@pytest.fixture(scope="module")
def xsd() -> Any:
    return _schema()


def valid(xsd: Any, text: str, what: str) -> ET.Element:
    errors = [str(e).splitlines()[0] for e in xsd.iter_errors(text)]
    assert not errors, f"{what}: {errors}\n{text[:2000]}"
    CASES[what.split(":")[0]] += 1
    return ET.fromstring(text)


def _unit_module(name: str) -> Any:
    base = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "unit", "plugins"))
    if base not in sys.path:
        sys.path.insert(0, base)
    return importlib.import_module(name)


def test_the_xsd_rejects_what_it_should(xsd: Any) -> None:
    good = ('<testsuite name="s" tests="2" failures="1" errors="0"><testcase name="a"/>'
            '<testcase name="b" classname="c" time="0.5"><failure message="m" type="t">x</failure>'
            '<system-out>o</system-out></testcase></testsuite>')
    assert xsd.is_valid(good)
    bad = {
        "no errors attribute": good.replace(' errors="0"', ""),
        "no name": good.replace('name="s" ', ""),
        "a wrong failure count": good.replace('failures="1"', 'failures="0"'),
        "a wrong test count": good.replace('tests="2"', 'tests="3"'),
        "two results": good.replace("</failure>", "</failure><error/>"),
        "a negative time": good.replace('time="0.5"', 'time="-1"'),
        "an unknown element": good.replace("<system-out>", "<stdout/><system-out>"),
        "totals that do not add up": f'<testsuites tests="5">{good}</testsuites>',
    }
    for name, text in bad.items():
        assert not xsd.is_valid(text), name


# --------------------------------------------------------------------------- datapath validate --format junit
def _spec_file(tmp_path: Path, spec: Any, name: str) -> str:
    path = tmp_path / name
    path.write_text(yaml_text({"datapath": spec}))
    return str(path)


def test_datapath_validate_junit(xsd: Any, tmp_path: Path) -> None:
    good = _spec_file(tmp_path, full_spec(), "good.yml")
    bad_spec = full_spec()
    bad_spec["fabrics"][1]["roce"].update(pfc_priorities=[], ecn=False)
    bad_spec["fabrics"][0]["mtu"] = 9217
    bad = _spec_file(tmp_path, bad_spec, "bad.yml")
    host_errors = tmp_path / "inv"
    (host_errors / "group_vars" / "all").mkdir(parents=True)
    (host_errors / "hosts.ini").write_text("[gpu]\nn1 datapath_memory_bytes=1073741824\nn2\n")
    (host_errors / "group_vars" / "all" / "datapath.yml").write_text(yaml_text({"datapath": {
        "version": 1, "profiles": [{"name": "gpu", "hugepages": {"pages": [{"size": "2M", "count": 512}]}}]}}))
    broken_ini = tmp_path / "broken.ini"
    broken_ini.write_text("[gpu:nonsense]\nx\n")
    skipping = tmp_path / "skipping"  # a broken profile for infer: i1 is skipped, t1 still checked (issue 38)
    (skipping / "group_vars" / "all").mkdir(parents=True)
    (skipping / "hosts.ini").write_text("[gpu]\nn1 datapath_memory_bytes=1073741824\n[infer]\ni1\n")
    (skipping / "group_vars" / "all" / "datapath.yml").write_text(yaml_text({"datapath": {
        "version": 1, "profiles": [{"name": "gpu", "hugepages": {"pages": [{"size": "2M", "count": 512}]}},
                                   {"name": "infer", "sysctl": {"vm.swapiness": [1]}},
                                   {"name": "gpu_nodes"}]}}))
    cases = [
        ("valid spec file", good, 0, 0, 0),
        ("invalid spec file", bad, 1, 1, 0),
        ("valid inventory", EXAMPLE, 0, 0, 0),
        ("inventory with host errors", str(host_errors), 1, 1, 0),
        ("missing file", str(tmp_path / "nope.yml"), 2, 0, 1),
        ("broken INI inventory", str(broken_ini), 2, 0, 1),
        ("spec errors, host errors, a skipped host, warnings", str(skipping), 1, 2, 0),
    ]
    for what, target, code, failures, errors in cases:
        proc = run([tool("datapath"), "validate", target, "--format", "junit"])
        assert proc.returncode == code, (what, proc.stderr)
        suite = valid(xsd, proc.stdout, f"datapath validate --format junit: {what}")
        assert (suite.tag, suite.get("failures"), suite.get("errors")) == ("testsuite", str(failures), str(errors))
    suite = ET.fromstring(run([tool("datapath"), "validate", EXAMPLE, "--format", "junit"]).stdout)
    assert suite.get("tests") == "17"  # the spec and 16 hosts
    failing = ET.fromstring(run([tool("datapath"), "validate", str(host_errors), "--format", "junit"]).stdout)
    assert [c.get("name") for c in failing.findall("testcase") if c.find("failure") is not None] == ["host n1"]
    mixed = ET.fromstring(run([tool("datapath"), "validate", str(skipping), "--format", "junit"]).stdout)
    assert [c.get("name") for c in mixed.findall("testcase") if c.find("skipped") is not None] == ["host i1"]
    assert mixed.get("skipped") == "1"
    assert "profile 'gpu_nodes' applies" in (mixed.findtext("testcase[@name='spec']/system-out") or "")


errors_st = st.lists(st.builds(SpecError, st.text(max_size=20), st.text(max_size=30), st.text(max_size=10),
                               st.one_of(st.none(), st.text(min_size=1, max_size=8))), max_size=6)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(errors_st, st.lists(st.text(min_size=1, max_size=8), max_size=4, unique=True), st.text(max_size=12),
       st.one_of(st.none(), st.text(min_size=1, max_size=30)))
def test_validate_junit_writer_with_any_text(errors: list[SpecError], hosts: list[str], target: str,
                                             unusable: str | None) -> None:
    schema = _schema()
    inv = Inventory(spec={}, spec_source="", hosts={h: ([], {}) for h in hosts})
    warnings = [SpecWarning(e.path, e.message, e.hint, "sysctl-key-unknown", e.host) for e in errors[:2]]
    skipped = {h: f"not checked: {h}" for h in hosts[:1]}
    text = cli._junit(errors, None if unusable else inv, target, unusable=unusable, warnings=warnings,
                      skipped=skipped)
    problems = [str(e).splitlines()[0] for e in schema.iter_errors(text)]
    assert not problems, (problems, text)
    CASES["validate JUnit writer, generated texts"] += 1


def test_validate_junit_with_hostile_text(xsd: Any) -> None:
    errors = [SpecError(f"datapath.k8s.labels[{HOSTILE!r}]", HOSTILE, HOSTILE, HOSTILE)]
    inv = Inventory(spec={}, spec_source="", hosts={HOSTILE: ([], {})})
    suite = valid(xsd, cli._junit(errors, inv, HOSTILE), "validate JUnit writer: hostile text")
    assert suite.get("failures") == "1"
    valid(xsd, cli._junit([], None, HOSTILE, unusable=HOSTILE), "validate JUnit writer: hostile text")


# --------------------------------------------------------------------------- audit.xml
def _audit_results() -> dict[str, list[dict[str, Any]]]:
    return _unit_module("plugin_utils.audit.test_reports").results()


def test_audit_xml(xsd: Any) -> None:
    data = _unit_module("plugin_utils.audit._data")
    outcomes = {
        "drift, findings, unreachable": _audit_results(),
        "converged": {"node1": compare(data.plan(), data.facts())},
        "empty": {},
        "unreachable only": {"node3": compare({"host": "node3"}, None)},
    }
    for name, results in outcomes.items():
        for fail_on in ("drift", "error", "never"):
            text = render_junit(build_report(results, fail_on))
            root = valid(xsd, text, f"audit.xml: {name}")
            assert root.tag == "testsuites"
        files = reports(results)["files"]
        valid(xsd, files["audit.xml"], f"audit.xml (reports()): {name}")
        json.loads(files["audit.json"])


def test_audit_xml_with_hostile_text(xsd: Any) -> None:
    results = _audit_results()
    finding = dict(results["node2"][0], host=HOSTILE, key=HOSTILE, reason=HOSTILE, fix=HOSTILE, actual=HOSTILE)
    text = render_junit(build_report({HOSTILE: [finding], "node1": results["node1"]}))
    root = valid(xsd, text, "audit.xml: hostile text")
    assert len(root.findall("testsuite")) == 2


def test_zz_report(capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\nJUnit files validated: {dict(sorted(CASES.items()))}")
