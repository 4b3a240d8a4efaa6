"""Packaging: the execution environment definition generates a build context that installs
this collection with its controller-side dependencies, and the pins agree everywhere."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"
EMPTY_CFG = "[defaults]\n"


def _pins(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            pins[name.strip().lower()] = version.strip()
    return pins


def _env(tmp: Path) -> dict[str, str]:
    cfg = tmp / "empty.cfg"
    cfg.write_text(EMPTY_CFG)
    return {**os.environ, "ANSIBLE_CONFIG": str(cfg)}


@pytest.fixture(scope="module")
def ee_context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`ansible-builder create` in a copy of what the definition refers to (the checkout stays clean)."""
    if not (BIN / "ansible-builder").exists():
        pytest.skip("ansible-builder not installed: run ./scripts/bootstrap.sh")
    work = tmp_path_factory.mktemp("ee")
    shutil.copy(REPO / "execution-environment.yml", work)
    (work / "scripts" / "ee").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "ee" / "datapath", work / "scripts" / "ee")
    (work / "build" / "ee").mkdir(parents=True)
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path",
                    str(work / "dist"), str(REPO)], check=True, capture_output=True, env=_env(work))
    (tarball,) = (work / "dist").glob("aiinfra-datapath-*.tar.gz")
    shutil.copy(tarball, work / "build" / "ee" / "aiinfra-datapath.tar.gz")
    proc = subprocess.run([str(BIN / "ansible-builder"), "create", "--file", "execution-environment.yml",
                           "--context", "context", "--output-filename", "Containerfile"],
                          cwd=work, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return work / "context"


def test_definition_is_version_3_with_pinned_core_and_runner() -> None:
    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    assert ee["images"]["base_image"]["name"]
    pins = _pins(REPO / "requirements.txt") | _pins(REPO / "requirements-test.txt")
    assert ee["dependencies"]["ansible_core"]["package_pip"] == f"ansible-core=={pins['ansible-core']}"
    assert ee["dependencies"]["ansible_runner"]["package_pip"] == f"ansible-runner=={pins['ansible-runner']}"


def test_collection_python_deps_match_the_pinned_requirements() -> None:
    ee_pins = _pins(REPO / "meta" / "ee-requirements.txt")
    pins = _pins(REPO / "requirements.txt")
    assert set(ee_pins) == {"pydantic", "ruamel.yaml"}
    for name, version in ee_pins.items():
        assert pins[name] == version, name


def test_containerfile_installs_the_collection_and_the_cli(ee_context: Path) -> None:
    containerfile = (ee_context / "Containerfile").read_text()
    assert 'EE_BASE_IMAGE="quay.io/centos/centos:stream9"' in containerfile
    assert "ansible-core==2.19.14" in containerfile and "ansible-runner==2.4.3" in containerfile
    assert "ansible-galaxy collection install" in containerfile and "-r requirements.yml" in containerfile
    assert "introspect.py introspect" in containerfile  # collection dependencies are collected
    assert "COPY _build/bin/datapath /usr/local/bin/datapath" in containerfile
    requirements = yaml.safe_load((ee_context / "_build" / "requirements.yml").read_text())
    assert requirements == {"collections": [{"name": "/build/collection/aiinfra-datapath.tar.gz", "type": "file"},
                                            {"name": "community.general", "version": "==11.4.2"}]}
    # the pull DaemonSet's needs: community.general (chroot connection) at the tested version, git
    general = json.loads((Path(importlib.metadata.distribution("ansible").locate_file(
        "ansible_collections/community/general/MANIFEST.json"))).read_text())
    assert general["collection_info"]["version"] == "11.4.2"
    assert "git [platform:rpm]" in (ee_context / "_build" / "bindep.txt").read_text()
    assert (ee_context / "_build" / "collection" / "aiinfra-datapath.tar.gz").stat().st_size > 10000
    assert os.access(ee_context / "_build" / "bin" / "datapath", os.X_OK)


def test_introspection_of_the_installed_collection_finds_its_dependencies(ee_context: Path, tmp_path: Path) -> None:
    # What the builder stage of the Containerfile does, here: install the collection from the
    # context, then run the context's own introspect script over the collections path.
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(tmp_path / "c"),
                    str(ee_context / "_build" / "collection" / "aiinfra-datapath.tar.gz")],
                   check=True, capture_output=True, env=_env(tmp_path))
    proc = subprocess.run([sys.executable, str(ee_context / "_build" / "scripts" / "introspect.py"), "introspect",
                           str(tmp_path / "c")], capture_output=True, text=True, check=True)
    found = yaml.safe_load(proc.stdout)
    python = [line.split("#")[0].strip() for line in found["python"]]
    system = [line.split("#")[0].strip() for line in found["system"]]
    assert python == ["pydantic==2.14.4", "ruamel.yaml==0.19.1"]
    assert "openssh-clients [platform:rpm]" in system
    # The EE's `datapath` CLI runs the spec CLI from the installed collection.
    cli = "ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.cli"
    proc = subprocess.run([sys.executable, "-m", cli,
                           "validate", str(REPO / "inventories" / "example")],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path / "c")},
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "valid" in proc.stdout
