"""The sysctl_profile, hugepages and kernel_cmdline roles through real ansible-playbook, on a fake root.

``module_defaults`` points every module's ``root`` at a temporary tree, so the run reads and
writes only files below it; the plan is the shape of docs/plan.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = """
- name: Kernel roles on a fake root
  hosts: localhost
  connection: local
  gather_facts: false
  module_defaults:
    aiinfra.datapath.sysctl_profile: {root: "%(root)s"}
    aiinfra.datapath.hugepages: {root: "%(root)s"}
    aiinfra.datapath.kernel_cmdline: {root: "%(root)s"}
  vars:
    datapath_plan: %(plan)s
  roles:
    - aiinfra.datapath.sysctl_profile
    - aiinfra.datapath.hugepages
    - aiinfra.datapath.kernel_cmdline
  post_tasks:
    - name: Write the registered results
      ansible.builtin.copy:
        content: "{{ {'sysctl': sysctl_profile_result, 'hugepages': hugepages_result,
                     'kernel_cmdline': kernel_cmdline_result} | to_json }}"
        dest: "%(out)s"
        mode: "0644"
"""

PLAN = {
    "sysctl_profile": {"file": "/etc/sysctl.d/90-aiinfra-datapath.conf",
                       "keys": {"vm.aiinfra_test_only": {"value": "5", "mode": "minimum", "scope": "global"}}},
    "hugepages": {"pages": [{"size": "2M", "count": 64, "per_node": None, "persist": "sysctl"}],
                  "bytes_per_node": {"0": 134217728},
                  "thp": {"enabled": "madvise", "defrag": None}, "mounts": []},
    "kernel_cmdline": {"args": ["hugepagesz=2M", "hugepages=64", "iommu=pt"]},
}


def _tree(root: Path) -> None:
    files = {
        "proc/sys/vm/aiinfra_test_only": "0\n",
        "proc/meminfo": "MemAvailable: 8000000 kB\nHugepagesize: 2048 kB\n",
        "proc/cmdline": "ro quiet\n",
        "proc/mounts": "",
        "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
    }
    for name in ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages"):
        files["sys/kernel/mm/hugepages/hugepages-2048kB/" + name] = "0\n"
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)


def _play(tmp_path: Path, root: Path) -> dict:
    out = tmp_path / "results.json"
    book = tmp_path / "play.yml"
    book.write_text(PLAYBOOK % {"root": root, "plan": json.dumps(PLAN), "out": out})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
         "-e", "ansible_python_interpreter=" + sys.executable, str(book)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_roles_apply_then_converge(tmp_path):
    root = tmp_path / "node"
    _tree(root)
    first = _play(tmp_path, root)
    assert first["sysctl"]["changed"] and first["hugepages"]["changed"]
    assert first["hugepages"]["pools_changed"] is True      # what the kubelet handler reads
    assert (root / "proc/sys/vm/aiinfra_test_only").read_text() == "5\n"
    assert (root / "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text() == "64\n"
    assert "vm.nr_hugepages = 64" in (root / "etc/sysctl.d/90-aiinfra-datapath-hugepages.conf").read_text()
    assert first["kernel_cmdline"]["bootloader"] == "none"
    assert first["kernel_cmdline"]["changed"] is False
    second = _play(tmp_path, root)
    assert [second[name]["changed"] for name in ("sysctl", "hugepages", "kernel_cmdline")] == [False] * 3
    assert second["hugepages"]["pools_changed"] is False
