"""Pull mode on a lab of its own (dpt19, 2 nodes): ansible-pull inside the nodes, no controller run.

Each node gets a git repository of this working tree plus the lab's inventory, made inside the
node (in its overlay, which the lab owns and removes), and runs the documented command
(docs/pull.md) from a plain clone: ``ansible-pull -U file://... -d <state>/collections/
ansible_collections/aiinfra/datapath -i inventories/pull playbooks/local.yml``. Both nodes pull
at once and converge; a second pull changes nothing; a commit with an invalid spec changes
nothing and last-run.json says why; a node missing from the inventory is refused. Then the
DaemonSet's entrypoint runs inside a node the way the pod would: in its own mount namespace,
the node's root bind-mounted at /host, modules through the chroot connection, from a
ConfigMap-like inventory and from a git revision.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from datapath_lab import Lab, LabConfig
from labtools import CACHE_MOUNT, NODE_FILES, REPO, VENV_BIN, LabHandle, _lab_possible, spec_applied_then_restored

pytestmark = pytest.mark.lab

LAB_NAME = "dpt19"
SRC = "/var/tmp/aiinfra-datapath-src"          # inside each node (its overlay)
STATE = "/var/lib/aiinfra-datapath"
CHECKOUT = f"{STATE}/collections/ansible_collections/aiinfra/datapath"
LAST_RUN = f"{STATE}/last-run.json"
POD_SCRIPT = os.path.join(REPO, "roles", "pull_mode", "files", "datapath-pull-pod.sh")
SYSCTL_FILE = NODE_FILES[0]
ENV = ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LC_ALL=C.UTF-8"]
BROKEN = "datapath:\n  version: 1\n  fabrics:\n    - {name: rail0, purpose: bogus, mtu: 90000}\n"

# The working tree (tracked and untracked, not ignored) copied into a new repository with the
# lab's inventory at inventories/pull, committed; prints the commit.
MAKE_REPO = r"""
set -eu
src=$1
rm -rf "$src"; mkdir -p "$src"
cd "$2"
git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
    if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
done | xargs -0 cp -P --parents -t "$src"
python3 -c '
import json, os, sys
for rel, text in json.load(sys.stdin).items():
    path = os.path.join(sys.argv[1], rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)' "$src"
cd "$src"
git init -q -b main
git add -A
git -c user.name=lab -c user.email=lab@example.net commit -qm "the spec"
git rev-parse HEAD
"""


def _lab(name: str, nodes: int) -> Iterator[LabHandle]:
    """A lab of its own with the lab spec applied (restored and brought down afterwards)."""
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    lab = Lab(name)
    with tempfile.TemporaryDirectory(prefix=f"{name}-inventory-") as inventory_dir:
        try:
            state = lab.up(LabConfig(name=name, nodes=nodes, nvme_size="1G", inventory_dir=inventory_dir),
                           log=lambda *_: None)
            handle = LabHandle(lab, state)
            with spec_applied_then_restored(handle):
                yield handle
        finally:
            lab.down(log=lambda *_: None)


@pytest.fixture(scope="module")
def pull_lab() -> Iterator[LabHandle]:
    yield from _lab(LAB_NAME, 2)


def _inventory_files(lab: LabHandle, prefix: str) -> str:
    inv = lab.state["inventory_dir"]
    spec = os.path.join(inv, "group_vars", "all", "datapath.yml")
    with open(os.path.join(inv, "hosts.yml")) as hosts, open(spec) as spec_file:
        return json.dumps({f"{prefix}hosts.yml": hosts.read(),
                           f"{prefix}group_vars/all/datapath.yml": spec_file.read()})


def make_repo(lab: LabHandle, node: str) -> str:
    done = lab.lab.run_in(node, ["bash", "-c", MAKE_REPO, "make-repo", SRC, REPO], check=False,
                          input=_inventory_files(lab, "inventories/pull/"))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def commit(lab: LabHandle, node: str, path: str, text: str) -> str:
    done = lab.lab.run_in(node, ["sh", "-c", f'cat > "{SRC}/{path}" && cd {SRC} && git -c user.name=lab '
                                 '-c user.email=lab@example.net commit -qam change && git rev-parse HEAD'],
                          check=False, input=text)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def pull(lab: LabHandle, node: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The documented command (docs/pull.md), inside the node."""
    argv = ENV + [f"ANSIBLE_COLLECTIONS_PATH={STATE}/collections", os.path.join(VENV_BIN, "ansible-pull"),
                  "-U", f"file://{SRC}", "-C", "main", "-d", CHECKOUT, "-i", "inventories/pull", *args,
                  "playbooks/local.yml"]
    return lab.lab.run_in(node, argv, check=False)


def last_run(lab: LabHandle, node: str) -> dict:
    return json.loads(lab.sh(node, f"cat {LAST_RUN}").stdout)


def recap(done: subprocess.CompletedProcess[str], node: str) -> dict[str, int]:
    found = re.search(rf"^{node}\s+:\s+(.*)$", done.stdout, re.M)
    assert found, done.stdout[-3000:] + done.stderr[-2000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(1))}


def node_state(lab: LabHandle, node: str) -> str:
    return lab.sh(node, f"cat {SYSCTL_FILE} 2>&1; findmnt -no SOURCE {CACHE_MOUNT}; sysctl -n net.ipv4.tcp_rmem",
                  check=False).stdout


def test_nodes_pull_at_once_converge_then_change_nothing(pull_lab: LabHandle, tmp_path: Path) -> None:
    revisions = {node: make_repo(pull_lab, node) for node in pull_lab.nodes}
    with ThreadPoolExecutor(len(pull_lab.nodes)) as pool:
        runs = dict(zip(pull_lab.nodes, pool.map(lambda n: pull(pull_lab, n), pull_lab.nodes), strict=True))
    for node, done in runs.items():
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert recap(done, node)["failed"] == 0
        record = last_run(pull_lab, node)
        assert record["node"] == node and record["result"] == "succeeded" and record["error"] is None
        assert record["revision"] == revisions[node]
        assert {"sysctl_profile", "nvme_layout"} <= set(record["changed"]), record
        assert record["reboot_required"] is False
        assert any(line.startswith("roce_qos ens1f0np0") for line in record["unsupported"]), record
        assert "net.ipv4.tcp_rmem" in node_state(pull_lab, node)
        assert pull_lab.sh(node, f"findmnt -n {CACHE_MOUNT}", check=False).stdout, "cache mounted"

    again = pull(pull_lab, pull_lab.nodes[0])
    assert again.returncode == 0, again.stdout[-4000:]
    assert recap(again, pull_lab.nodes[0])["changed"] == 0, again.stdout[-4000:]
    assert last_run(pull_lab, pull_lab.nodes[0])["changed"] == []

    # the controller's audit sees when each pulled node last converged and at which revision
    audit = pull_lab.playbook(os.path.join(REPO, "playbooks", "audit.yml"),
                              extra_vars={"audit_report_dir": str(tmp_path)})
    report = json.loads((tmp_path / "audit.json").read_text())
    hosts = {h["name"]: h for h in report["hosts"]}
    assert set(hosts) == set(pull_lab.nodes), audit.stdout[-3000:]
    for node in pull_lab.nodes:
        record = last_run(pull_lab, node)
        assert hosts[node]["last_run"] == {"result": "succeeded", "finished": record["finished"],
                                           "revision": revisions[node], "error": None, "reboot_required": False}
    assert f"| {pull_lab.nodes[0]} | succeeded | " in (tmp_path / "audit.md").read_text()


def test_an_invalid_spec_changes_nothing_and_last_run_says_why(pull_lab: LabHandle) -> None:
    node = pull_lab.nodes[0]
    before = node_state(pull_lab, node)
    revision = commit(pull_lab, node, "inventories/pull/group_vars/all/datapath.yml", BROKEN)
    done = pull(pull_lab, node)
    assert done.returncode != 0
    record = last_run(pull_lab, node)
    assert record["result"] == "failed" and record["revision"] == revision
    assert "nothing was changed" in record["error"]
    assert "datapath.fabrics[0].purpose" in record["error"] and "datapath.fabrics[0].mtu" in record["error"]
    assert record["changed"] == []
    assert node_state(pull_lab, node) == before


def test_a_node_missing_from_the_inventory_is_refused(pull_lab: LabHandle) -> None:
    node = pull_lab.nodes[1]
    before = node_state(pull_lab, node)
    # ansible-pull: its --limit matches no host, so ansible-playbook refuses before any play
    done = pull(pull_lab, node, "-e", "datapath_node_name=gpu-node-99", "-l", "gpu-node-99,localhost")
    assert done.returncode != 0
    assert "no hosts to target" in done.stdout + done.stderr, done.stdout[-4000:]
    # ansible-playbook from the checkout without --limit: the playbook says so in last-run.json
    argv = ["sh", "-c", f'cd {CHECKOUT} && exec "$@"', "run"] + ENV + [
        f"ANSIBLE_COLLECTIONS_PATH={STATE}/collections", os.path.join(VENV_BIN, "ansible-playbook"), "-c", "local",
        "-i", "inventories/pull", "-e", "datapath_node_name=gpu-node-99", "playbooks/local.yml"]
    done = pull_lab.lab.run_in(node, argv, check=False)
    assert done.returncode != 0
    assert "gpu-node-99 is not in the inventory; nothing was changed" in done.stdout, done.stdout[-4000:]
    record = last_run(pull_lab, node)
    assert record["result"] == "failed" and record["node"] == "gpu-node-99"
    assert "no host gpu-node-99 in the inventory" in record["error"]
    assert node_state(pull_lab, node) == before


def _pod(lab: LabHandle, node: str, *env: str, command: str = "once") -> subprocess.CompletedProcess[str]:
    """The entrypoint as the DaemonSet runs it: own mount namespace, the node's root at /host."""
    script = ('mkdir -p /host && mount --rbind / /host && exec "$@"')
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "pod"] + ENV + [
        f"PATH={VENV_BIN}:/usr/sbin:/usr/bin:/sbin:/bin", f"ANSIBLE_COLLECTIONS_PATH={REPO}/.collections",
        f"NODE_NAME={node}", "DATAPATH_HOST_ROOT=/host", "DATAPATH_WORK=/tmp/dpt19-pod",
        "DATAPATH_ANNOTATION=aiinfra.io/datapath-revision", *env, "sh", POD_SCRIPT, command]
    return lab.lab.run_in(node, argv, check=False)


def test_the_daemonset_entrypoint_applies_the_plan_from_a_configmap_and_from_git(pull_lab: LabHandle) -> None:
    node = pull_lab.nodes[1]
    # the ConfigMap's inventory, as the DaemonSet mounts it
    files = json.loads(_inventory_files(pull_lab, "/etc/aiinfra-datapath/inventory/"))
    for path, text in files.items():
        pull_lab.lab.run_in(node, ["sh", "-c", f'mkdir -p "$(dirname {path})" && cat > {path}'], input=text)
    done = _pod(pull_lab, node, "DATAPATH_SOURCE=configmap", "DATAPATH_REVISION=cm-0123456789ab")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "not in a cluster: node annotation aiinfra.io/datapath-revision not set" in done.stderr
    record = last_run(pull_lab, node)
    assert record["result"] == "succeeded" and record["revision"] == "cm-0123456789ab" and record["node"] == node
    assert "net.ipv4.tcp_rmem" in node_state(pull_lab, node)
    assert _pod(pull_lab, node, command="ready").returncode == 0
    # a new pod whose first run has not ended is not ready, whatever last-run.json says
    assert _pod(pull_lab, node, "DATAPATH_WORK=/tmp/dpt19-new-pod", command="ready").returncode != 0

    # from a git revision: the node's repository, its commit recorded
    head = pull_lab.sh(node, f"git -C {SRC} rev-parse HEAD").stdout.strip()
    # a pinned commit (the entrypoint runs no unverified branch: docs/security.md; signed commits are in
    # tests/security/test_pull_mode.py)
    done = _pod(pull_lab, node, "DATAPATH_SOURCE=git", f"DATAPATH_REPO_URL=file://{SRC}", f"DATAPATH_REVISION={head}",
                "DATAPATH_INVENTORY=inventories/pull")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert recap(done, node)["changed"] == 0, "converged already"
    assert last_run(pull_lab, node)["revision"] == head


# --------------------------------------------------------------------------- eight nodes
@pytest.fixture(scope="module")
def eight() -> Iterator[LabHandle]:
    yield from _lab("dpt8", 8)


def _all_pull(lab: LabHandle) -> tuple[dict[str, subprocess.CompletedProcess[str]], float]:
    start = time.monotonic()
    with ThreadPoolExecutor(len(lab.nodes)) as pool:
        runs = dict(zip(lab.nodes, pool.map(lambda n: pull(lab, n), lab.nodes), strict=True))
    return runs, time.monotonic() - start


@pytest.mark.slow
def test_eight_nodes_pull_at_once_converge_change_nothing_then_refuse_an_invalid_spec(eight: LabHandle) -> None:
    """The issue's check with no controller run: eight nodes run ansible-pull at the same time from
    their file:// repository and converge; a second pull is changed=0 everywhere; a commit with an
    invalid spec changes nothing on any node, and each last-run.json says why. Slow (8 concurrent
    ansible-pull on a 2-core machine): `pytest -m slow tests/integration/test_pull_lab.py`."""
    revisions = {node: make_repo(eight, node) for node in eight.nodes}
    runs, first = _all_pull(eight)
    for node, done in runs.items():
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        record = last_run(eight, node)
        assert record["result"] == "succeeded" and record["revision"] == revisions[node], record
        assert {"sysctl_profile", "nvme_layout"} <= set(record["changed"]), record
    runs, second = _all_pull(eight)
    for node, done in runs.items():
        assert done.returncode == 0 and recap(done, node)["changed"] == 0, done.stdout[-3000:]
    before = {node: node_state(eight, node) for node in eight.nodes}
    broken = {node: commit(eight, node, "inventories/pull/group_vars/all/datapath.yml", BROKEN) for node in eight.nodes}
    runs, third = _all_pull(eight)
    for node, done in runs.items():
        assert done.returncode != 0
        record = last_run(eight, node)
        assert record["result"] == "failed" and record["revision"] == broken[node] and record["changed"] == []
        assert "datapath.fabrics[0].purpose" in record["error"], record
        assert node_state(eight, node) == before[node]
    print(f"\n8 nodes pulling at once: converge {first:.1f} s ({8 / first * 60:.1f} nodes/min), "
          f"no-change pull {second:.1f} s, invalid spec refused {third:.1f} s")
