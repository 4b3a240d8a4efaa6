"""Helpers for the lab tests: a handle on a running lab and ansible-playbook runs with JSON results.

Imported by the tests as ``labtools`` (not from ``conftest``, whose module name is shared by every
conftest.py in the tree)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab"))

from datapath_lab import Lab  # noqa: E402

TEST_LAB = os.environ.get("DATAPATH_TEST_LAB", "dpt")
VENV_BIN = os.path.join(REPO, ".venv", "bin")


def _lab_possible() -> str | None:
    if os.geteuid() != 0:
        return "lab tests need root"
    if not os.path.exists("/usr/sbin/sshd"):
        return "sshd missing: run make bootstrap"
    return None


@dataclass
class PlayResult:
    rc: int
    stdout: str
    stderr: str
    data: dict[str, Any]

    def stats(self, host: str) -> dict[str, int]:
        return self.data.get("stats", {}).get(host, {})

    def changed_hosts(self) -> dict[str, int]:
        return {h: s.get("changed", 0) for h, s in self.data.get("stats", {}).items()}

    def task_results(self, task_name: str) -> dict[str, dict[str, Any]]:
        """Per-host results of the (last) task with this name."""
        found: dict[str, dict[str, Any]] = {}
        for play in self.data.get("plays", []):
            for task in play.get("tasks", []):
                name = task.get("task", {}).get("name", "")
                if name == task_name or name.endswith(" : " + task_name):
                    found.update(task.get("hosts", {}))
        return found


class LabHandle:
    def __init__(self, lab: Lab, state: dict[str, Any]) -> None:
        self.lab = lab
        self.state = state
        self.inventory = os.path.join(state["inventory_dir"], "hosts.yml")
        self.nodes = list(state["nodes"])

    def sh(self, node: str, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.lab.run_in(node, ["/bin/sh", "-c", script], check=check)

    def playbook(self, playbook: str, *args: str, extra_vars: dict[str, Any] | None = None,
                 check: bool = False, diff: bool = False, limit: str | None = None,
                 env: dict[str, str] | None = None) -> PlayResult:
        argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", self.inventory, playbook, *args]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        if check:
            argv.append("--check")
        if diff:
            argv.append("--diff")
        if limit:
            argv += ["--limit", limit]
        full_env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
                    "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1",
                    "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", "")}
        full_env.update(env or {})
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=full_env, timeout=900, check=False)
        try:
            data = json.loads(proc.stdout[proc.stdout.index("{"):]) if "{" in proc.stdout else {}
        except ValueError:
            data = {}
        return PlayResult(proc.returncode, proc.stdout, proc.stderr, data)
