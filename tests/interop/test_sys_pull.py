"""Pull mode's systemd units, read by systemd 252's own offline tools.

The pull_mode role runs through real ansible-playbook (local connection, ``pull_mode_systemd:
false``) and writes ``aiinfra-datapath-pull.service`` and ``.timer`` below a temporary root that
also holds the distribution's unit files; ``systemd-analyze verify --root`` prints nothing for
either (every key known, ExecStart an executable, the timer's unit there) and ``systemctl --root
enable`` puts the timer where ``WantedBy=timers.target`` says. Arguments with systemd's specifier
``%``, a ``$`` or a space are quoted and escaped, and the unit still verifies. Nothing talks to
the host's systemd.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .sys_common import REPO, tool
from .sys_common import run as run_tool

pytestmark = pytest.mark.interop

SYSTEM_UNITS = "/usr/lib/systemd/system"
SERVICE = "aiinfra-datapath-pull.service"
TIMER = "aiinfra-datapath-pull.timer"
ANSIBLE_PULL = "/opt/aiinfra-datapath/venv/bin/ansible-pull"
ENV = dict(os.environ, SYSTEMD_LOG_LEVEL="notice", SYSTEMD_PAGER="", LC_ALL="C.UTF-8")


def _render(tmp_path: Path, root: Path, **variables: object) -> Path:
    """The pull_mode role, run by ansible-playbook on this machine, writing into ``root``."""
    unit_dir = root / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True, exist_ok=True)
    playbook = tmp_path / "pull_mode.yml"
    playbook.write_text("- hosts: gpu-01\n  gather_facts: false\n  roles: [aiinfra.datapath.pull_mode]\n")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("gpu-01 ansible_connection=local\n")
    extra = {"pull_mode_unit_dir": str(unit_dir), "pull_mode_systemd": False,
             "ansible_python_interpreter": sys.executable, **variables}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                           "-e", json.dumps(extra), str(playbook)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return unit_dir


def _systemd_root(root: Path) -> None:
    """A root with the distribution's unit files (timers.target, network-online.target ...)."""
    if not os.path.isfile(os.path.join(SYSTEM_UNITS, "timers.target")):
        pytest.skip(f"{SYSTEM_UNITS} has no systemd unit files")
    (root / "usr" / "lib" / "systemd").mkdir(parents=True)
    shutil.copytree(SYSTEM_UNITS, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    (root / "lib").symlink_to("usr/lib")
    pull = root / ANSIBLE_PULL.lstrip("/")
    pull.parent.mkdir(parents=True)
    pull.write_text("#!/bin/sh\nexit 0\n")
    pull.chmod(0o755)


def _verify(root: Path, unit: str) -> str:
    done = run_tool([tool("systemd-analyze"), "verify", f"--root={root}", "--man=no", unit], env=ENV)
    return f"rc={done.returncode} " + done.stdout + done.stderr


def test_service_and_timer_pass_systemd_analyze_verify_and_enable(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _systemd_root(root)
    unit_dir = _render(tmp_path, root, pull_mode_repo_url="https://git.example.net/infra/cluster.git",
                       pull_mode_inventory="inventories/prod", pull_mode_branch="release-7",
                       pull_mode_extra_args=["--skip-tags", "firmware"])
    service = (unit_dir / SERVICE).read_text()
    timer = (unit_dir / TIMER).read_text()
    assert "RandomizedDelaySec=10min" in timer and "OnUnitActiveSec=30min" in timer
    assert '"--checkout" "release-7"' in service and '"--limit" "gpu-01,localhost"' in service
    assert '"--extra-vars" "datapath_node_name=gpu-01"' in service
    assert '"--skip-tags" "firmware" "playbooks/local.yml"' in service
    assert "ANSIBLE_COLLECTIONS_PATH=/var/lib/aiinfra-datapath/collections" in service
    assert _verify(root, SERVICE) == "rc=0 "
    assert _verify(root, TIMER) == "rc=0 "

    systemctl = tool("systemctl")
    enabled = run_tool([systemctl, f"--root={root}", "enable", TIMER], env=ENV)
    assert enabled.returncode == 0, enabled.stdout + enabled.stderr
    assert (root / "etc/systemd/system/timers.target.wants" / TIMER).is_symlink()
    state = run_tool([systemctl, f"--root={root}", "is-enabled", TIMER], env=ENV)
    assert state.stdout.strip() == "enabled", state.stdout + state.stderr

    # the reader is awake: without ansible-pull on the node, verify names the ExecStart
    (root / ANSIBLE_PULL.lstrip("/")).unlink()
    assert ANSIBLE_PULL in _verify(root, SERVICE)


def test_odd_characters_in_the_url_are_quoted_for_systemd(tmp_path: Path) -> None:
    """A % (systemd's specifier), a $ and a space in an argument reach ansible-pull verbatim."""
    root = tmp_path / "root"
    _systemd_root(root)
    url = "https://git.example.net/infra/cluster%20x.git"
    unit_dir = _render(tmp_path, root, pull_mode_repo_url=url, pull_mode_inventory="inv with space/$HOME")
    assert _verify(root, SERVICE) == "rc=0 "
    text = (unit_dir / SERVICE).read_text()
    assert '"https://git.example.net/infra/cluster%%20x.git"' in text
    assert '"inv with space/$$HOME"' in text


# --------------------------------------------------------------------------- the DaemonSet
K8S_VERSIONS = [None, "1.30.0"]     # None: kubernetes-validate's default, the newest it bundles
PULL_HEADER = "# Rendered by aiinfra.datapath (k8s_manifests.yml, pull mode). Do not edit: re-render instead.\n"


def _kubernetes_validate(files: list[Path], version: str | None) -> None:
    argv = [tool("kubernetes-validate"), "--strict"] + (["-k", version] if version else []) + [str(f) for f in files]
    done = run_tool(argv)
    assert done.returncode == 0, done.stdout + done.stderr


def _write_objects(entries: list[dict], out: Path) -> list[Path]:
    """As playbooks/k8s_manifests.yml writes them: the header, then to_nice_yaml."""
    from ansible.plugins.filter.core import to_nice_yaml

    out.mkdir(parents=True, exist_ok=True)
    files = []
    for entry in entries:
        path = out / entry["file"]
        path.write_text(PULL_HEADER + to_nice_yaml(entry["object"], indent=2, sort_keys=False))
        files.append(path)
    return files


def _daemonset(files: list[Path]) -> dict:
    import yaml

    for path in files:
        obj = yaml.safe_load(path.read_text())
        if obj["kind"] == "DaemonSet":
            return obj
    raise AssertionError("no DaemonSet")


def test_k8s_manifests_playbook_renders_a_daemonset_that_validates(tmp_path: Path) -> None:
    """playbooks/k8s_manifests.yml -e k8s_manifests_pull=true on the example inventory (no node is
    reached), then kubernetes-validate --strict of every file, and the ConfigMap's inventory is
    the example's spec and groups."""
    import yaml
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils import cluster_spec

    out = tmp_path / "k8s"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    extra = {"k8s_manifests_label_nodes": False, "k8s_manifests_pv_capacity": "3500Gi", "k8s_manifests_pull": True,
             "k8s_manifests_dir": str(out), "k8s_manifests_kserve": False, "k8s_manifests_pull_max_unavailable": "10%"}
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           os.path.join(REPO, "inventories", "example"), "-e", json.dumps(extra),
                           os.path.join(REPO, "playbooks", "k8s_manifests.yml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    files = sorted((out / "pull").glob("*.yaml"))
    assert [f.name for f in files] == [
        "aiinfra-datapath-pull-clusterrole.yaml", "aiinfra-datapath-pull-clusterrolebinding.yaml",
        "aiinfra-datapath-pull-configmap-inventory.yaml", "aiinfra-datapath-pull-configmap-script.yaml",
        "aiinfra-datapath-pull-daemonset.yaml", "aiinfra-datapath-pull-serviceaccount.yaml"]
    for version in K8S_VERSIONS:
        _kubernetes_validate(files, version)

    ds = _daemonset(files)
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True and pod["hostNetwork"] is True
    container = pod["containers"][0]
    assert container["securityContext"] == {"privileged": True}
    assert container["readinessProbe"]["exec"]["command"][-1] == "ready"
    assert {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}} in pod["volumes"]
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": "10%"}
    revision = ds["spec"]["template"]["metadata"]["annotations"]["aiinfra.io/datapath-revision"]
    assert {"name": "DATAPATH_REVISION", "value": revision} in container["env"]

    inventory = yaml.safe_load((out / "pull" / "aiinfra-datapath-pull-configmap-inventory.yaml").read_text())["data"]
    spec = yaml.safe_load(inventory["datapath.yml"])["datapath"]
    assert cluster_spec.validate_spec(spec) == []
    example = yaml.safe_load(Path(REPO, "inventories/example/group_vars/all/datapath.yml").read_text())["datapath"]
    assert spec == example
    hosts = yaml.safe_load(inventory["hosts.yml"])["all"]
    assert "gpu-node-01" in hosts["hosts"] and "gpu-node-01" in hosts["children"]["gpu_nodes"]["hosts"]
    script = yaml.safe_load((out / "pull" / "aiinfra-datapath-pull-configmap-script.yaml").read_text())
    shipped = Path(REPO, "roles/pull_mode/files/datapath-pull-pod.sh").read_text()
    assert script["data"]["datapath-pull-pod.sh"] == shipped, "the script reaches the ConfigMap byte for byte"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_git_mode_daemonset_validates_and_rolls_on_a_new_revision(tmp_path: Path, version: str | None) -> None:
    from ansible_collections.aiinfra.datapath.plugins.filter.pull import pull_manifests

    def render(revision: str) -> list[dict]:
        return pull_manifests(["gpu-01"], {"all": ["gpu-01"], "gpu_nodes": ["gpu-01"]}, {"version": 1}, "#!/bin/sh\n",
                              image="registry.example.net/datapath-ee:0.5.0", source="git",
                              repo_url="https://git.example.net/infra/cluster.git", revision=revision,
                              inventory="inventories/prod", namespace="aiinfra-datapath", max_unavailable=2,
                              node_selector={"nvidia.com/gpu.present": "true"},
                              tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])

    files = _write_objects(render("v7"), tmp_path / "pull")
    assert not any("inventory" in f.name for f in files), "git mode has no inventory ConfigMap"
    _kubernetes_validate(files, version)
    ds = _daemonset(files)
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DATAPATH_SOURCE"] == "git" and env["DATAPATH_REVISION"] == "v7"
    assert env["DATAPATH_INVENTORY"] == "inventories/prod"
    assert ds["spec"]["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    newer = _daemonset(_write_objects(render("v8"), tmp_path / "pull8"))
    assert newer["spec"]["template"] != ds["spec"]["template"], "a new revision changes the pod template: it rolls"


def test_the_filter_names_a_bad_argument(tmp_path: Path) -> None:
    from ansible.errors import AnsibleFilterError
    from ansible_collections.aiinfra.datapath.plugins.filter.pull import pull_manifests

    with pytest.raises(AnsibleFilterError, match="max_unavailable=0"):
        pull_manifests([], {}, {}, "", image="x", max_unavailable=0)
    with pytest.raises(AnsibleFilterError, match="repo_url=None"):
        pull_manifests([], {}, {}, "", image="x", source="git", inventory="inv")


def test_pull_from_your_own_inventory_repository_that_pins_the_collection(tmp_path: Path) -> None:
    """Issue 38: the repository is the user's inventory, pinning aiinfra.datapath in collections/requirements.yml;
    ansible-pull checks it out and installs the pin (a playbook of the role, outside the checkout), then the
    pinned collection's aiinfra.datapath.local runs. systemd-analyze verifies the unit with both steps;
    ansible-playbook --syntax-check reads the installing playbook."""
    root = tmp_path / "root"
    _systemd_root(root)
    state = root / "var" / "lib" / "aiinfra-datapath"
    playbook_bin = root / ANSIBLE_PULL.replace("ansible-pull", "ansible-playbook").lstrip("/")
    playbook_bin.write_text("#!/bin/sh\nexit 0\n")
    playbook_bin.chmod(0o755)
    unit_dir = _render(tmp_path, root, pull_mode_repo_url="https://git.example.net/infra/cluster.git",
                       pull_mode_inventory="inventories/prod", pull_mode_state_dir=str(state),
                       pull_mode_collection_requirements="collections/requirements.yml")
    service = (unit_dir / SERVICE).read_text()
    starts = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    assert len(starts) == 2, service
    assert f'"--directory" "{state}/inventory"' in starts[0]
    assert starts[0].endswith(f'"{state}/aiinfra-datapath-pull-collections.yml"')
    assert starts[1].startswith('ExecStart="/opt/aiinfra-datapath/venv/bin/ansible-playbook" "--inventory" '
                                f'"{state}/inventory/inventories/prod"')
    assert starts[1].endswith('"--limit" "gpu-01,localhost" "aiinfra.datapath.local"')
    assert f"ANSIBLE_COLLECTIONS_PATH={state}/collections" in service
    # systemd-analyze resolves the ExecStart binaries below --root: the unit's paths are the node's
    (unit_dir / SERVICE).write_text(service.replace(str(root), ""))
    assert _verify(root, SERVICE) == "rc=0 "
    installer = state / "aiinfra-datapath-pull-collections.yml"
    checked = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "--syntax-check",
                              "-i", "localhost,", str(installer)], capture_output=True, text=True, timeout=120,
                             check=False, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = installer.read_text()
    assert "collections/requirements.yml" in text and "--force" in text
