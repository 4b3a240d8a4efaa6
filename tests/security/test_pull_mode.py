"""Class 4 - pull mode runs only verified code as root and changes only its own Node.

A stranger who can push to the inventory repository (or replace what a mirror serves) must not get
code run as root on every node: the systemd unit the ``pull_mode`` role writes runs ``ansible-pull
--verify-commit`` against a keyring of the keys the role was given, and the DaemonSet's entrypoint
runs ``git verify-commit`` before anything else. The attacks, with real git repositories and real
gpg keys (throwaway, in temporary GNUPGHOMEs): an unsigned commit, a commit signed by a key that is
not the fleet's. The DaemonSet image must be pinned by digest, a repository URL must not carry
credentials, and the admission policy must let a pod's service account change only its own Node's
annotation (evaluated with a real CEL implementation, cel-python).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from gpgkeys import commit, git, make_key, new_repo

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCRIPT = REPO / "roles" / "pull_mode" / "files" / "datapath-pull-pod.sh"
PLAYBOOK = """- name: The inventory repository's playbook (it would run as root on every node)
  hosts: gpu-01
  gather_facts: false
  tasks:
    - name: Leave a mark
      ansible.builtin.copy:
        content: "{{ who }}"
        dest: "{{ marker }}"
        mode: "0644"
      vars:
        who: %s
"""


def repo_files(who: str) -> dict[str, str]:
    return {"playbooks/local.yml": PLAYBOOK % who,
            "inventories/pull/hosts.ini":
                f"gpu-01 ansible_connection=local ansible_python_interpreter={sys.executable}\n",
            "inventories/pull/marker": who + "\n"}


@pytest.fixture
def fleet(tmp_path: Path) -> dict:
    """The fleet's signing key, a stranger's key and the inventory repository with one signed commit."""
    fpr, public = make_key(tmp_path / "signer", "fleet")
    bad_fpr, _bad_public = make_key(tmp_path / "stranger", "stranger")
    origin = new_repo(tmp_path / "origin")
    head = commit(origin, repo_files("signed"), "the spec", tmp_path / "signer", fpr)
    return {"fpr": fpr, "public": public, "bad_fpr": bad_fpr, "origin": origin, "head": head, "tmp": tmp_path}


def render_unit(tmp: Path, **variables: object) -> Path:
    """The pull_mode role through real ansible-playbook (local, pull_mode_systemd false), every path below tmp."""
    units = tmp / "units"
    units.mkdir()
    playbook = tmp / "pull_mode.yml"
    playbook.write_text("- hosts: gpu-01\n  gather_facts: false\n  roles: [aiinfra.datapath.pull_mode]\n")
    (tmp / "hosts.ini").write_text("gpu-01 ansible_connection=local\n")
    extra = {"pull_mode_unit_dir": str(units), "pull_mode_systemd": False, "ansible_python_interpreter": sys.executable,
             "pull_mode_secrets_dir": str(tmp / "secrets"), "pull_mode_gnupg_home": str(tmp / "secrets" / "gnupg"),
             "pull_mode_ansible_pull": str(BIN / "ansible-pull"), "pull_mode_state_dir": str(tmp / "state"),
             "pull_mode_node_name": "gpu-01", "pull_mode_inventory": "inventories/pull", **variables}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"))
    done = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp / "hosts.ini"), "-e", json.dumps(extra),
                           str(playbook)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return units / "aiinfra-datapath-pull.service"


def systemd_words(value: str) -> list[str]:
    """The words of an ExecStart= or Environment= value as the role quotes them ("..." with \\\\ \\" %% $$)."""
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(value)]


def start_unit(unit: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """What systemd would start: ExecStart with the unit's Environment (and this machine's PATH)."""
    env = {"PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8",
           "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"), "ANSIBLE_REMOTE_TEMP": str(tmp / "ansible-tmp")}
    argv: list[str] = []
    for line in unit.read_text().splitlines():
        key, _sep, value = line.partition("=")
        if key == "Environment":
            env.update(word.split("=", 1) for word in systemd_words(value))
        elif key == "ExecStart":
            argv = systemd_words(value)
    assert argv, unit.read_text()
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False, cwd=tmp)


def test_the_timer_runs_only_commits_signed_by_the_fleet(fleet: dict) -> None:
    tmp, origin = fleet["tmp"], fleet["origin"]
    marker = tmp / "marker"
    unit = render_unit(tmp, pull_mode_repo_url=f"file://{origin}", pull_mode_verify_keys=[fleet["public"]],
                       pull_mode_extra_args=["-e", f"marker={marker}"])
    text = unit.read_text()
    assert '"--verify-commit"' in text and "GNUPGHOME=" in text, text
    assert oct((tmp / "secrets" / "gnupg").stat().st_mode & 0o777) == "0o700"

    first = start_unit(unit, tmp)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert marker.read_text() == "signed"

    # attack 1: an unsigned commit lands in the repository (a push with stolen write access)
    commit(origin, repo_files("unsigned"), "take over the fleet")
    refused = start_unit(unit, tmp)
    assert refused.returncode != 0, refused.stdout[-3000:]
    assert "Failed to verify GPG signature" in refused.stdout + refused.stderr
    assert marker.read_text() == "signed", "the unsigned commit's playbook ran as root"

    # attack 2: a commit signed, but by a key the fleet does not trust
    commit(origin, repo_files("stranger"), "signed by someone", tmp / "stranger", fleet["bad_fpr"])
    refused = start_unit(unit, tmp)
    assert refused.returncode != 0
    assert marker.read_text() == "signed", "a stranger's signed commit ran as root"


def test_the_role_refuses_an_unverified_checkout_and_credentials_in_the_url(fleet: dict) -> None:
    tmp = fleet["tmp"]
    for variables, fragment in (
            ({"pull_mode_repo_url": f"file://{fleet['origin']}"}, "pull_mode_verify_keys is empty"),
            ({"pull_mode_repo_url": f"file://{fleet['origin']}", "pull_mode_verify_commit": False},
             "would run whatever the repository holds as root"),
            ({"pull_mode_repo_url": "https://deploy:ghp_secret@git.example.net/infra/cluster.git",
              "pull_mode_verify_keys": [fleet["public"]]}, "carries credentials")):
        work = tmp / ("case-%d" % len(list(tmp.glob("case-*"))))
        work.mkdir()
        with pytest.raises(AssertionError, match=fragment):
            render_unit(work, **variables)
        assert not (work / "units" / "aiinfra-datapath-pull.service").exists()
    # a pinned commit needs no keys: the unit checks out exactly that commit
    pinned = tmp / "pinned"
    pinned.mkdir()
    unit = render_unit(pinned, pull_mode_repo_url=f"file://{fleet['origin']}", pull_mode_commit=fleet["head"],
                       pull_mode_verify_commit=False)
    assert f'"--checkout" "{fleet["head"]}"' in unit.read_text()


def pod(fleet: dict, work: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The DaemonSet's entrypoint, once, in git mode; ansible-playbook is a stand-in that logs what it
    would have been given (the repository's inventory must never reach it unverified)."""
    fake = work / "bin"
    fake.mkdir(parents=True)
    log = work / "ran.log"
    (fake / "ansible-playbook").write_text(f'#!/bin/sh\nfor a; do case $a in */inventories/pull) '
                                           f'cat "$a/marker" >> {log};; esac; done\n')
    (fake / "ansible-playbook").chmod(0o755)
    base = {"PATH": f"{fake}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(work), "NODE_NAME": "gpu-01",
            "DATAPATH_HOST_ROOT": "/", "DATAPATH_SOURCE": "git", "DATAPATH_REPO_URL": f"file://{fleet['origin']}",
            "DATAPATH_REVISION": "main", "DATAPATH_INVENTORY": "inventories/pull", "DATAPATH_WORK": str(work / "w"),
            "DATAPATH_STATE_DIR": str(work / "state"), "DATAPATH_ANNOTATION": ""}
    base.update(env)
    done = subprocess.run(["sh", str(SCRIPT), "once"], env=base, capture_output=True, text=True, timeout=300,
                          check=False)
    return done, log


def test_the_daemonset_entrypoint_runs_only_signed_or_pinned_commits(fleet: dict) -> None:
    tmp = fleet["tmp"]
    keys = tmp / "keys"
    keys.mkdir()
    (keys / "fleet.asc").write_text(fleet["public"])
    done, log = pod(fleet, tmp / "pod-signed", DATAPATH_VERIFY_KEYS=str(keys))
    assert done.returncode == 0, done.stderr
    assert log.read_text() == "signed\n"

    commit(fleet["origin"], repo_files("unsigned"), "take over the fleet")
    done, log = pod(fleet, tmp / "pod-unsigned", DATAPATH_VERIFY_KEYS=str(keys))
    assert done.returncode != 0 and "is not signed by a key of" in done.stderr, done.stderr
    assert not log.exists(), "the unsigned commit's inventory reached ansible-playbook"

    # a pinned commit: the branch moved on, the pod still applies (only) that commit
    done, log = pod(fleet, tmp / "pod-pinned", DATAPATH_REVISION=fleet["head"])
    assert done.returncode == 0, done.stderr
    assert log.read_text() == "signed\n"
    # a branch without keys: refused
    done, log = pod(fleet, tmp / "pod-branch")
    assert done.returncode != 0 and "unverified" in done.stderr and not log.exists()
    assert git(fleet["origin"], "rev-parse", "HEAD") != fleet["head"]


def objects(**kwargs: object) -> dict[str, dict]:
    from ansible_collections.aiinfra.datapath.plugins.filter.pull import pull_manifests

    args = dict(image="registry.example.net/datapath-ee@sha256:" + "a" * 64)
    args.update(kwargs)
    entries = pull_manifests(["gpu-01"], {"all": ["gpu-01"]}, {"version": 1}, "#!/bin/sh\n", **args)
    return {e["object"]["kind"]: e["object"] for e in entries}


def test_the_daemonset_image_is_pinned_and_git_mode_is_verified() -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="by digest"):
        objects(image="registry.example.net/datapath-ee:latest")
    with pytest.raises(AnsibleFilterError, match="verify_keys"):
        objects(source="git", repo_url="https://git.example.net/infra/cluster.git", inventory="inv")
    with pytest.raises(AnsibleFilterError, match="credentials"):
        objects(source="git", repo_url="https://x:token@git.example.net/infra/cluster.git", inventory="inv",
                verify_keys=["KEY"])
    env = {e["name"]: e.get("value") for e in objects(
        source="git", repo_url="ssh://git@git.example.net/infra/cluster.git", inventory="inv", verify_keys=["KEY"],
        repo_secret="pull-deploy-key")["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DATAPATH_VERIFY_KEYS"] and "IdentitiesOnly=yes" in env["GIT_SSH_COMMAND"]


def admitted(policy: dict, request: dict, obj: dict, old: dict) -> list[str]:
    """The policy's verdict on one admission request, by a real CEL evaluator: the failing messages."""
    import celpy

    env = celpy.Environment()
    act = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old)}

    def holds(expression: str) -> bool:
        return bool(env.program(env.compile(expression)).evaluate(act))

    if not all(holds(c["expression"]) for c in policy["spec"]["matchConditions"]):
        return []
    return [v["message"] for v in policy["spec"]["validations"] if not holds(v["expression"])]


def test_the_service_account_may_change_only_its_own_nodes_annotation() -> None:
    policy = objects()["ValidatingAdmissionPolicy"]
    assert objects()["ValidatingAdmissionPolicyBinding"]["spec"]["validationActions"] == ["Deny"]
    sa = {"username": "system:serviceaccount:kube-system:aiinfra-datapath-pull",
          "extra": {"authentication.kubernetes.io/node-name": ["gpu-01"]}}
    node = {"metadata": {"name": "gpu-01", "labels": {"kubernetes.io/hostname": "gpu-01"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}}, "spec": {"podCIDR": "10.0.0.0/24"}}

    def changed(**meta: object) -> dict:
        new = json.loads(json.dumps(node))
        for key, value in meta.items():
            if key == "spec":
                new["spec"].update(value)
            else:
                new["metadata"][key].update(value)
        return new

    own = changed(annotations={"aiinfra.io/datapath-revision": "abc123"})
    assert admitted(policy, {"userInfo": sa}, own, node) == []
    # the same patch on another Node (a pod that escaped to its service account token)
    other = dict(own, metadata=dict(own["metadata"], name="gpu-02"))
    assert admitted(policy, {"userInfo": sa}, other, dict(node, metadata=dict(node["metadata"], name="gpu-02"))) == [
        "the pull DaemonSet may change only the Node its pod runs on"]
    # its own Node, but labels (scheduling), another annotation, a taint
    for attack, message in ((changed(labels={"nvidia.com/gpu.present": "false"}), "labels"),
                            (changed(annotations={"node.alpha.kubernetes.io/ttl": "30"}), "no annotation but"),
                            (changed(spec={"taints": [{"key": "x", "effect": "NoSchedule"}]}), "spec")):
        verdict = admitted(policy, {"userInfo": sa}, attack, node)
        assert len(verdict) == 1 and message in verdict[0], verdict
    # a token without the node-name claim (an older cluster, a token made by hand) is refused
    assert admitted(policy, {"userInfo": {"username": sa["username"]}}, own, node) == [
        "the pull DaemonSet may change only the Node its pod runs on"]
    # other users are not this policy's business
    assert admitted(policy, {"userInfo": {"username": "system:node:gpu-02"}}, other, node) == []
