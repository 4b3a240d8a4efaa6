"""Issue 38, points 3 and 4: every error in one run, and reports a pipeline can act on.

Point 3: a fabric with a bad MTU still has its name (an interface on an unknown fabric is reported in
the same run), and a spec error does not hide the hosts' own errors: hosts are checked against what is
intact, and a host that needs a broken part is named as not checked. Point 4: JUnit (hosts not checked
are skipped, each failure's message is its first error), the file and line of each error in every
format, stderr saying why the exit code is 1, --output FILE, SARIF.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import cli, validate_spec
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.api import check_inventory

from ._specs import base

SPEC = """\
datapath:
  version: 1
  fabrics:
    - {name: mgmt, purpose: management}
    - {name: rail0, purpose: rdma, kind: roce, mtu: 99999}
  profiles:
    - name: train
      hugepages:
        pages: [{size: 2M, count: 512}]
    - name: infer
      sysctl: {vm.swappiness: [1]}
"""
HOSTS = ("all:\n  children:\n    train:\n      hosts:\n        t1: {datapath_memory_bytes: 1073741824}\n"
         "        t2: {datapath_memory_bytes: 8589934592}\n    infer:\n      hosts:\n        i1:\n")


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(list(argv), out), out.getvalue()


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    inv = tmp_path / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(HOSTS)
    (inv / "group_vars" / "all" / "datapath.yml").write_text(SPEC)
    return inv


# --------------------------------------------------------------------------- point 3
def test_a_fabric_with_a_bad_mtu_still_has_its_name() -> None:
    spec = base()
    spec["fabrics"][1]["mtu"] = 99999
    spec["profiles"][0]["interfaces"].append({"name": "ens9", "fabric": "rail9"})
    assert [e.path for e in validate_spec(spec)] == ["datapath.fabrics[1].mtu",
                                                     "datapath.profiles[0].interfaces[2].fabric"]


def test_a_spec_error_does_not_hide_the_hosts_errors() -> None:
    spec = base()
    spec["fabrics"][1]["mtu"] = 99999                                      # a spec error
    spec["profiles"][0]["hugepages"]["pages"][0]["count"] = 8             # 8 GiB of 1G pages
    hosts = {"small": (["gpu"], {"datapath_memory_bytes": 4 * 2**30}),
             "big": (["gpu"], {"datapath_memory_bytes": 2**40})}
    result = check_inventory(spec, hosts)
    assert [(e.host, e.path) for e in result.errors] == [
        (None, "datapath.fabrics[1].mtu"), ("small", "datapath.profiles[0].hugepages.pages")]
    assert result.skipped == {}


def test_hosts_that_need_a_broken_part_are_named_not_checked() -> None:
    spec = base()
    spec["profiles"].append({"name": "infer", "sysctl": {"vm.swappiness": [1]}})
    hosts = {"t1": (["gpu"], {}), "i1": (["infer"], {})}
    result = check_inventory(spec, hosts)
    assert [e.path for e in result.errors] == ['datapath.profiles[1].sysctl["vm.swappiness"]']
    assert result.skipped == {"i1": "not checked: datapath.profiles[1], which applies to the host, has errors"}


def test_the_cli_reports_spec_and_host_errors_in_one_run(broken: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run("validate", str(broken))
    spec_file = broken / "group_vars" / "all" / "datapath.yml"
    assert code == 1
    assert out.splitlines() == [
        f"datapath.fabrics[1].mtu: 99999 is out of range; must be <= 9216 [{spec_file}:5]",
        f'datapath.profiles[1].sysctl["vm.swappiness"]: expected a mapping, got a list [1]; write a mapping '
        f"[{spec_file}:11]",
        "datapath.profiles[0].hugepages.pages: HugePages take 1073741824 bytes, more than 0.5 of the node's "
        f"1073741824 bytes; lower the page counts or raise hugepages.max_memory_share (host t1) [{spec_file}:9]",
        "host i1: not checked: datapath.profiles[1], which applies to the host, has errors",
        f"3 error(s) in {broken}",
    ]
    assert capsys.readouterr().err == (f"datapath: exit 1: 3 error(s) in {broken} (1 host(s) with node errors; "
                                       "1 host(s) not checked until the spec's errors are fixed)\n")


# --------------------------------------------------------------------------- point 4
def test_junit_skips_hosts_not_checked_and_names_the_first_error(broken: Path) -> None:
    code, out = run("validate", str(broken), "--format", "junit")
    suite = ET.fromstring(out)
    assert code == 1
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    spec_failure = cases["spec"].find("failure")
    assert spec_failure is not None
    assert spec_failure.get("message") == "datapath.fabrics[1].mtu: 99999 is out of range; must be <= 9216"
    spec_file = str(broken / "group_vars" / "all" / "datapath.yml")
    assert (spec_failure.text or "").splitlines()[0] == \
        f"{spec_file}:5: datapath.fabrics[1].mtu: 99999 is out of range; must be <= 9216"
    assert cases["spec"].get("file") == spec_file
    skipped = cases["host i1"].find("skipped")
    assert skipped is not None and skipped.get("message") == \
        "not checked: datapath.profiles[1], which applies to the host, has errors"
    assert cases["host t2"].find("failure") is None and cases["host t2"].find("skipped") is None
    assert cases["host t1"].find("failure") is not None


def test_json_errors_carry_file_and_line_and_the_skipped_hosts(broken: Path) -> None:
    data = json.loads(run("validate", str(broken), "--format", "json")[1])
    spec_file = str(broken / "group_vars" / "all" / "datapath.yml")
    assert [(e["path"], e["file"], e["line"]) for e in data["errors"]] == [
        ("datapath.fabrics[1].mtu", spec_file, 5), ('datapath.profiles[1].sysctl["vm.swappiness"]', spec_file, 11),
        ("datapath.profiles[0].hugepages.pages", spec_file, 9)]
    assert data["skipped"] == [{"host": "i1", "reason": "not checked: datapath.profiles[1], which applies to the "
                                                        "host, has errors"}]
    assert data["exit_code"] == 1


def test_output_file_gets_the_report_and_stdout_the_text(broken: Path, tmp_path: Path) -> None:
    report = tmp_path / "reports" / "validate.xml"
    report.parent.mkdir()
    code, out = run("validate", str(broken), "--format", "junit", "--output", str(report))
    assert code == 1 and ET.fromstring(report.read_text()).get("failures") == "2"
    assert out.splitlines()[-1] == f"3 error(s) in {broken}"
    assert [p.name for p in report.parent.iterdir()] == ["validate.xml"]  # no temporary file left
    code, _out = run("validate", str(tmp_path / "nope.yml"), "--format", "json", "--output", str(report))
    assert code == 2 and json.loads(report.read_text())["usable"] is False
    assert run("validate", str(broken), "--output", str(tmp_path / "no" / "such" / "dir.xml"))[0] == 2


def test_stderr_is_quiet_when_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "good.yml"
    path.write_text("datapath:\n  version: 1\n")
    assert run("validate", str(path))[0] == 0
    assert capsys.readouterr().err == ""


def test_sarif_results_are_located(broken: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(broken)
    code, out = run("validate", ".", "--format", "sarif")
    log = json.loads(out)
    assert code == 1 and log["version"] == "2.1.0"
    results = log["runs"][0]["results"]
    assert [(r["ruleId"], r["level"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
             r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in results] == [
        ("spec-error", "error", "group_vars/all/datapath.yml", 5),
        ("spec-error", "error", "group_vars/all/datapath.yml", 11),
        ("node-error", "error", "group_vars/all/datapath.yml", 9)]
    assert results[2]["properties"]["host"] == "t1"
    assert log["runs"][0]["invocations"][0] == {"executionSuccessful": True, "exitCode": 1}
