"""controller_path: report directories land where the operator ran ansible-playbook, not in playbooks/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter.datapath import FilterModule, controller_path

REPO = Path(__file__).resolve().parents[4]


def test_absolute_paths_are_kept_and_normalised() -> None:
    assert controller_path("/srv/reports/") == "/srv/reports"
    assert controller_path("/srv/./a/../reports") == "/srv/reports"


def test_relative_paths_are_taken_from_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert controller_path("reports") == str(tmp_path / "reports")
    assert controller_path("reports/measure") == str(tmp_path / "reports" / "measure")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert controller_path("~/r") == str(tmp_path / "home" / "r")


@pytest.mark.parametrize("bad", ["", None, 3, ["reports"]])
def test_bad_input_is_an_error(bad: object) -> None:
    with pytest.raises(AnsibleFilterError, match="controller_path"):
        controller_path(bad)


def test_registered() -> None:
    assert FilterModule().filters()["controller_path"] is controller_path


def test_in_a_playbook_below_another_directory_a_relative_path_is_the_callers(tmp_path: Path) -> None:
    """Modules on the controller run in the playbook's directory; the filter still gives the caller's."""
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    book = tmp_path / "playbooks" / "p.yml"
    book.parent.mkdir()
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.file:\n        path: \"{{ 'reports' | aiinfra.datapath.controller_path }}\"\n"
        "        state: directory\n        mode: '0755'\n")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
           "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg")}
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    run = subprocess.run([playbook, "-i", "localhost,", "-c", "local",
                          "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "reports").is_dir() and not (tmp_path / "playbooks" / "reports").exists()
