"""Issue 38, point 5: the collection used from a user's own project, installed from its tarball.

The tarball `ansible-galaxy collection build` makes is installed into a fresh collections path (no
checkout of this repository on the path), and the `datapath` CLI runs from it with `python -m`, as
README's Installation says; the tarball carries what that needs (the sysctl key list, the controller
requirements for pip).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return {**env, **extra}  # no ansible.cfg of this checkout: each command runs in tmp_path


def test_the_cli_runs_from_the_installed_tarball(tmp_path: Path) -> None:
    built = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path",
                            str(tmp_path), str(REPO)], capture_output=True, text=True, check=False, timeout=300,
                           cwd=str(tmp_path), env=_clean_env())
    assert built.returncode == 0, built.stdout + built.stderr
    (tarball,) = tmp_path.glob("aiinfra-datapath-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    assert {"plugins/plugin_utils/cluster_spec/_sysctl_keys.py", "meta/ee-requirements.txt"} <= names
    collections = tmp_path / "collections"
    installed = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-p",
                                str(collections), str(tarball)], capture_output=True, text=True, check=False,
                               timeout=300, cwd=str(tmp_path),
                               env=_clean_env(ANSIBLE_COLLECTIONS_PATH=str(collections)))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    project = tmp_path / "project" / "inventories" / "prod"
    (project / "group_vars" / "all").mkdir(parents=True)
    (project / "hosts.ini").write_text("[train]\nt1\n[infer]\ni1\n[gpu:children]\ntrain\ninfer\n")
    (project / "group_vars" / "all" / "datapath.yml").write_text(
        "datapath:\n  version: 1\n  profiles:\n    - name: gpu\n      sysctl: {vm.swapiness: 10}\n")
    module = "ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec"
    ran = subprocess.run([sys.executable, "-m", module, "validate", "inventories/prod", "--strict"],
                         capture_output=True, text=True, check=False, timeout=300,
                         cwd=str(tmp_path / "project"), env=_clean_env(PYTHONPATH=str(collections)))
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "did you mean vm.swappiness?" in ran.stdout
    assert "[inventories/prod/group_vars/all/datapath.yml:5]" in ran.stdout
    assert str(REPO) not in ran.stdout + ran.stderr
