"""A capability role used alone (issue 38, point 1): it plans the host itself, or fails saying how.

Before, each capability role read ``datapath_plan | default({})``: used alone, in a playbook of the
user's that does not compute the plan, every role's task was skipped and the run exited 0 having
done nothing. Now the role computes the host's plan from the cluster spec ``datapath`` when no
play did, and without a spec and without its own variables it fails, naming both. Real
ansible-playbook; ``module_defaults`` points the module's ``root`` at a temporary tree (as
test_kernel_roles.py does), so nothing outside it is read or written. The spec's profile is named
``all``, which applies to every host (also a point of the issue).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = """
- name: A capability role used alone
  hosts: localhost
  connection: local
  gather_facts: false
  module_defaults:
    aiinfra.datapath.sysctl_profile: {root: "%(root)s"}
  vars: %(vars)s
  roles:
    - aiinfra.datapath.sysctl_profile
  post_tasks:
    - name: Write the registered result
      ansible.builtin.copy:
        content: "{{ sysctl_profile_result | to_json }}"
        dest: "%(out)s"
        mode: "0644"
"""
SPEC = {"version": 1, "builtin_profile": "none",
        "profiles": [{"name": "all", "sysctl": {"vm.aiinfra_test_only": 7}}]}


def _play(tmp_path: Path, variables: dict) -> tuple[subprocess.CompletedProcess[str], Path]:
    root = tmp_path / "root"
    (root / "proc/sys/vm").mkdir(parents=True)
    (root / "proc/sys/vm/aiinfra_test_only").write_text("0\n")
    (root / "etc/sysctl.d").mkdir(parents=True)
    out = tmp_path / "result.json"
    book = tmp_path / "play.yml"
    book.write_text(PLAYBOOK % {"root": root, "vars": json.dumps(variables), "out": out})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
         "-e", "ansible_python_interpreter=" + sys.executable, str(book)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, root


def test_the_role_plans_the_host_from_the_spec(tmp_path: Path) -> None:
    proc, root = _play(tmp_path, {"datapath": SPEC})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result.get("changed") is True and "skipped" not in result, result
    assert (root / "proc/sys/vm/aiinfra_test_only").read_text().strip() == "7"
    assert "vm.aiinfra_test_only = 7" in (root / "etc/sysctl.d/90-aiinfra-datapath.conf").read_text()


def test_the_role_without_a_plan_fails_saying_how(tmp_path: Path) -> None:
    proc, root = _play(tmp_path, {})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "role aiinfra.datapath.sysctl_profile has nothing to apply on this host: it has no plan" in out
    assert "cluster spec `datapath`" in out and "sysctl_profile_keys" in out
    assert (root / "proc/sys/vm/aiinfra_test_only").read_text().strip() == "0"


def test_the_role_variables_alone_still_work(tmp_path: Path) -> None:
    proc, root = _play(tmp_path, {"sysctl_profile_keys": {"vm.aiinfra_test_only": 3}})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert (root / "proc/sys/vm/aiinfra_test_only").read_text().strip() == "3"
