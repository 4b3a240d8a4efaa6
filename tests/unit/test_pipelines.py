"""The pipeline examples (docs/examples/*.yml) name playbooks, options and commands that exist."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiinfra_datapath_spec.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"
PLAYBOOK_VARS = {
    "verify.yml": {"verify_report_dir"},
    "audit.yml": {"audit_report_dir", "audit_fail_on"},
    "site.yml": set(),
    "measure.yml": {"measure_report_dir"},
}


def _gitlab() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())


def _github() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())


def _commands() -> list[str]:
    lines: list[str] = []
    for job in _gitlab().values():
        if isinstance(job, dict) and "script" in job:
            lines += job["script"]
    for job in _github()["jobs"].values():
        for step in job["steps"]:
            lines += [line for line in step.get("run", "").splitlines() if line.strip()]
    return lines


def _role_vars(role: str) -> set[str]:
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return {var for entry in specs.values() for var in (entry.get("options") or {})}


def test_gitlab_jobs_have_stages_and_scripts() -> None:
    ci = _gitlab()
    jobs = {k: v for k, v in ci.items() if isinstance(v, dict) and "script" in v}
    assert set(jobs) == {"validate-spec", "plan-check", "audit", "apply"}
    for name, job in jobs.items():
        assert job["stage"] in ci["stages"], name
    # validate on merge requests, audit on schedule, both publishing JUnit
    assert any(r.get("if", "").endswith('"merge_request_event"') for r in jobs["validate-spec"]["rules"])
    assert jobs["validate-spec"]["artifacts"]["reports"]["junit"] == "reports/validate.xml"
    assert jobs["audit"]["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "schedule"'}]
    assert jobs["audit"]["artifacts"]["reports"]["junit"] == "reports/audit.xml"
    assert jobs["audit"]["artifacts"]["when"] == "always"


def test_github_workflow_validates_on_pull_requests_and_audits_on_schedule() -> None:
    wf = _github()
    assert set(wf["on"]) >= {"pull_request", "schedule"}
    runs = {name: "\n".join(s.get("run", "") for s in job["steps"]) for name, job in wf["jobs"].items()}
    assert "datapath validate" in runs["validate"] and "--format junit" in runs["validate"]
    assert "aiinfra.datapath.audit" in runs["audit"]  # from the installed collection, not a fork (issue 38)
    uploads = [s["with"]["path"] for s in wf["jobs"]["audit"]["steps"] if "upload-artifact" in s.get("uses", "")]
    assert uploads and "reports/audit.xml" in uploads[0]


def test_github_workflow_writes_a_summary_and_annotations_and_keeps_secrets_in_env() -> None:
    text = (EXAMPLES / "github-actions.yml").read_text()
    wf = _github()
    runs = {name: "\n".join(s.get("run", "") for s in job["steps"]) for name, job in wf["jobs"].items()}
    assert "--format sarif" in runs["validate"] and "GITHUB_STEP_SUMMARY" in runs["validate"]
    assert '"::" + kind + where + "::"' in runs["validate"]  # ::error file=...,line=...:: workflow commands
    assert any("upload-sarif" in s.get("uses", "") for s in wf["jobs"]["validate"]["steps"])
    assert wf["jobs"]["validate"]["permissions"]["security-events"] == "write"
    assert "reports/measure.md" in runs["audit"] and "GITHUB_STEP_SUMMARY" in runs["audit"]
    # a secret is never expanded into a script: only into a step's env
    assert text.count("secrets.") == text.count("${{ secrets.DATAPATH_SSH_KEY }}") == 1
    for job in wf["jobs"].values():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), step.get("name")
            for value in (step.get("env") or {}).values():
                assert value.startswith("${{ secrets."), value


def test_the_github_summary_script_writes_a_table(tmp_path: Path) -> None:
    wf = _github()
    run = next(s["run"] for s in wf["jobs"]["validate"]["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    script = run.split("<<'PY'\n", 1)[1].rsplit("PY", 1)[0]
    report = {"exit_code": 1, "usable": True, "skipped": [{"host": "i1", "reason": "not checked: x"}],
              "errors": [{"path": "datapath.fabrics[1].mtu", "message": "99999 | is out of range", "hint": "fix",
                          "host": None, "file": "inv/group_vars/all/datapath.yml", "line": 5}],
              "warnings": [{"path": "datapath.profiles[0].name", "message": "a,b: c", "fix": "", "host": "n1",
                            "file": None, "line": None}]}
    (tmp_path / "validate.json").write_text(json.dumps(report))
    (tmp_path / "s.py").write_text(script)
    proc = subprocess.run([sys.executable, str(tmp_path / "s.py"), str(tmp_path / "validate.json")],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")})
    assert proc.stdout.splitlines() == [
        "::error file=inv/group_vars/all/datapath.yml,line=5::datapath.fabrics[1].mtu: 99999 | is out of range; fix",
        "::warning::datapath.profiles[0].name: a,b: c (host n1)"]
    summary = (tmp_path / "summary.md").read_text().splitlines()
    assert summary[0] == "## datapath validate: FAILED"
    assert summary[4] == "| error | inv/group_vars/all/datapath.yml:5 | datapath.fabrics[1].mtu: 99999 \\| is out " \
                         "of range; fix |"
    assert summary[-1] == "| not checked | host i1 | not checked: x |"


@pytest.mark.parametrize("line", [c for c in _commands() if "ansible-playbook" in c])
def test_playbook_commands_name_existing_playbooks_and_variables(line: str) -> None:
    argv = shlex.split(line)
    # a playbook of the installed collection by name (aiinfra.datapath.audit), or by path in a checkout
    playbooks = [f"playbooks/{a.rsplit('.', 1)[1]}.yml" if a.startswith("aiinfra.datapath.") else a
                 for a in argv if a.startswith(("playbooks/", "aiinfra.datapath."))]
    assert len(playbooks) == 1, line
    playbook = REPO / playbooks[0]
    assert playbook.is_file(), line
    known = PLAYBOOK_VARS[playbook.name] | _role_vars(playbook.stem if playbook.stem != "site" else "datapath")
    for i, arg in enumerate(argv):
        if arg == "-e":
            assert argv[i + 1].split("=", 1)[0] in known, line
    allowed = {"ansible-playbook", "-i", "--private-key", "--check", "--diff", "-e"}
    for arg in argv:
        if arg.startswith("-"):
            assert arg in allowed, arg


@pytest.mark.parametrize("line", [c for c in _commands() if c.lstrip().startswith("datapath ")])
def test_datapath_commands_parse_with_the_real_cli(line: str) -> None:
    argv = shlex.split(line.split(">", 1)[0].split("||", 1)[0])
    args = build_parser().parse_args(argv[1:])
    assert args.command == "validate" and args.format in ("junit", "sarif", "json") and args.output


def test_audit_junit_report_name_matches_the_audit_role() -> None:
    tasks = (REPO / "roles" / "audit" / "tasks" / "main.yml").read_text()
    assert "audit.xml" in tasks


def test_docs_name_files_that_exist() -> None:
    text = (REPO / "docs" / "pipelines.md").read_text()
    for path in re.findall(r"`((?:scripts|playbooks|tests|meta)/[\w./-]+)`", text):
        assert (REPO / path).exists(), path
    for link in re.findall(r"\]\(([\w./-]+\.(?:yml|md))\)", text):
        assert (REPO / "docs" / link).resolve().exists(), link


def test_every_warning_check_is_documented() -> None:
    from aiinfra_datapath_spec.spec_warnings import WARNING_CHECKS

    text = (REPO / "docs" / "pipelines.md").read_text()
    for name in WARNING_CHECKS:
        assert f"| `{name}` |" in text, name
