"""The playbooks run unchanged under ansible-runner (as AWX / AAP run them), against the lab.

A private data dir is laid out the way AWX lays out a job: ``project/`` with the playbooks and
a collections path holding this collection, ``inventory/`` with the lab inventory,
``env/envvars`` and ``env/extravars``. ``ansible-runner run`` then runs
``validate.yml`` (controller only) and ``verify.yml`` (every path of every fabric of a 2-node
lab), and the artifacts are checked: ``rc``, ``status`` and the job events.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from datapath_lab import Lab, LabConfig
from labtools import REPO, VENV_BIN, _lab_possible

pytestmark = pytest.mark.lab

RUNNER_LAB = os.environ.get("DATAPATH_RUNNER_LAB", "dpr")


@pytest.fixture(scope="module")
def runner_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    if not os.path.exists(os.path.join(VENV_BIN, "ansible-runner")):
        pytest.skip("ansible-runner not installed: run ./scripts/bootstrap.sh")
    lab = Lab(RUNNER_LAB)
    inventory_dir = str(tmp_path_factory.mktemp("runner-lab-inventory"))
    try:
        yield lab.up(LabConfig(name=RUNNER_LAB, nodes=2, nvme_size="64M", inventory_dir=inventory_dir),
                     log=lambda *_: None)
    finally:
        lab.down(log=lambda *_: None)


@pytest.fixture(scope="module")
def private_data_dir(runner_lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    pdd = tmp_path_factory.mktemp("runner")
    project = pdd / "project"
    project.mkdir()
    for playbook in glob.glob(os.path.join(REPO, "playbooks", "*.yml")):
        shutil.copy(playbook, project)
    # The collection on the project's collections path, as AWX installs it from
    # collections/requirements.yml; a link to this checkout here.
    link = project / "collections" / "ansible_collections" / "aiinfra" / "datapath"
    link.parent.mkdir(parents=True)
    link.symlink_to(REPO)
    shutil.copytree(runner_lab["inventory_dir"], pdd / "inventory")
    (pdd / "env").mkdir()
    envvars = {
        "ANSIBLE_COLLECTIONS_PATH": str(project / "collections"),
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
    }
    (pdd / "env" / "envvars").write_text(yaml.safe_dump(envvars))
    (pdd / "env" / "extravars").write_text(yaml.safe_dump({"verify_report_dir": str(pdd / "reports")}))
    return pdd


def run(pdd: Path, playbook: str, ident: str) -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-runner"), "run", str(pdd), "-p", playbook,
                           "--ident", ident, "--quiet"],
                          cwd="/", env=env, capture_output=True, text=True, timeout=600, check=False)
    artifacts = pdd / "artifacts" / ident
    stdout = (artifacts / "stdout").read_text() if (artifacts / "stdout").exists() else proc.stdout
    assert proc.returncode == 0, stdout[-4000:] + proc.stderr[-2000:]
    return artifacts


def events(artifacts: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted((artifacts / "job_events").glob("*.json"), key=lambda p: int(p.name.split("-", 1)[0])):
        found.append(json.loads(path.read_text()))
    return found


def ok_tasks(evs: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Task name -> hosts it succeeded on."""
    tasks: dict[str, set[str]] = {}
    for ev in evs:
        if ev["event"] == "runner_on_ok":
            data = ev["event_data"]
            tasks.setdefault(data["task"], set()).add(data["host"])
    return tasks


def test_validate_playbook_under_ansible_runner(private_data_dir: Path) -> None:
    artifacts = run(private_data_dir, "validate.yml", "validate")
    assert (artifacts / "rc").read_text().strip() == "0"
    assert (artifacts / "status").read_text().strip() == "successful"
    evs = events(artifacts)
    assert evs[0]["event"] == "playbook_on_start" and evs[-1]["event"] == "playbook_on_stats"
    tasks = ok_tasks(evs)
    # Controller only: run_once, delegated to localhost.
    assert "Validate the spec (every error at once, each with its path and a fix)" in tasks
    assert "Show the plan summary per group" in tasks
    stats = evs[-1]["event_data"]
    assert not stats["failures"] and not stats["dark"]


def test_verify_playbook_against_the_lab_under_ansible_runner(private_data_dir: Path) -> None:
    artifacts = run(private_data_dir, "verify.yml", "verify")
    assert (artifacts / "rc").read_text().strip() == "0"
    assert (artifacts / "status").read_text().strip() == "successful"
    evs = events(artifacts)
    tasks = ok_tasks(evs)
    assert tasks["Compute each host's plan from the cluster spec"] == {"node1", "node2"}
    assert any(hosts == {"node1", "node2"} for name, hosts in tasks.items() if name != "Compute each host's plan from "
               "the cluster spec"), tasks
    stats = evs[-1]["event_data"]
    assert set(stats["ok"]) == {"node1", "node2"} and not stats["failures"] and not stats["dark"]
    # The job's own report, written where the job's extravars said.
    report = json.loads((private_data_dir / "reports" / "verify.json").read_text())
    assert report["ok"] is True
    fabrics = [line for line in report["summary"] if not line.startswith("rails: ")]  # the rails' own line
    assert fabrics and all("2/2 paths pass" in line for line in fabrics), report["summary"]
    assert [line for line in report["summary"] if line.startswith("rails: ")] == [
        "rails: 4 route check(s), 0 leave by another NIC; 0 address(es) with ARP flux"], report["summary"]
    # The job's artifacts carry the command AWX would show.
    command = json.loads((artifacts / "command").read_text())
    assert command["command"][0].endswith("ansible-playbook") and "verify.yml" in command["command"]
