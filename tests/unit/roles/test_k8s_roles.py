"""nfd_labels, nvme_layout, k8s_manifests (and their names before 0.3.0) and playbooks/k8s_manifests.yml
through real ansible-playbook, no lab.

The nodes are local connections; module_defaults point nfd_labels at a temporary root and
the manifests go to a temporary directory, so nothing outside tmp_path is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]

PLAN: dict[str, Any] = {
    "link_mtu": {"interfaces": [{"name": "eno1", "match": {"name": "eno1"}, "fabric": "mgmt", "mtu": 1500}]},
    "roce_qos": {"interfaces": []},
    "nvme_layout": {"devices": ["/dev/nvme1n1"], "select": None, "raid": None,
                    "filesystem": {"type": "xfs", "label": "model-cache"},
                    "mount": {"path": "/mnt/model-cache", "options": ["noatime"]},
                    "directories": [], "reserve_bytes": 0, "wipe_serials": []},
    "nfd_labels": {"labels": {"aiinfra.io/pool": "inference"}, "local_volume_class": "local-nvme"},
}


def _run(tmp_path: Path, playbook: Path, inventory: str, extra: dict[str, Any],
         limit: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    inv = tmp_path / "hosts.ini"
    inv.write_text(inventory)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inv),
            "-e", json.dumps(dict(extra, ansible_python_interpreter=sys.executable)), str(playbook)]
    if limit:
        argv += ["--limit", limit]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc


INVENTORY = "[gpu_nodes]\ngpu-01 ansible_connection=local\ngpu-02 ansible_connection=local\n"


@pytest.mark.slow
def test_k8s_manifests_playbook_renders_one_file_per_object(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    # no spec (the plan is given): the hosts are named, as the playbook's first play asks
    extra = {"k8s_manifests_label_nodes": False, "datapath_plan": PLAN, "k8s_manifests_pv_capacity": "900Gi",
             "datapath_hosts": "gpu_nodes",
             "k8s_manifests_dir": str(out),
             "k8s_manifests_kinds": ["storageclass", "pv", "configmap"]}
    _run(tmp_path, REPO / "playbooks" / "k8s_manifests.yml", INVENTORY, extra)
    files = sorted(name for name in os.listdir(out) if (out / name).is_file())
    assert (out / "kserve").is_dir()  # KServe's objects in their own directory (tests/interop/test_kserve.py)
    assert files == ["configmap-local-provisioner-config.yaml", "persistentvolume-local-nvme-gpu-01.yaml",
                     "persistentvolume-local-nvme-gpu-02.yaml", "storageclass-local-nvme.yaml"]
    docs = {name: yaml.safe_load((out / name).read_text()) for name in files}
    assert all((out / name).read_text().startswith("# Rendered by aiinfra.datapath") for name in files)
    sc = docs["storageclass-local-nvme.yaml"]
    assert (sc["apiVersion"], sc["kind"], sc["provisioner"], sc["volumeBindingMode"]) == (
        "storage.k8s.io/v1", "StorageClass", "kubernetes.io/no-provisioner", "WaitForFirstConsumer")
    for host in ("gpu-01", "gpu-02"):
        pv = docs[f"persistentvolume-local-nvme-{host}.yaml"]
        assert (pv["apiVersion"], pv["kind"]) == ("v1", "PersistentVolume")
        assert pv["metadata"]["name"] == f"local-nvme-{host}"
        assert pv["spec"]["local"]["path"] == "/mnt/model-cache/volume"  # beside the models, never them
        assert pv["spec"]["capacity"]["storage"] == "900Gi"
        expr = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
        assert expr == {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}
    cm = docs["configmap-local-provisioner-config.yaml"]
    assert yaml.safe_load(cm["data"]["storageClassMap"])["local-nvme"]["hostDir"] == "/mnt"

    # Second run: nothing changes.
    second = _run(tmp_path, REPO / "playbooks" / "k8s_manifests.yml", INVENTORY, extra)
    recap = second.stdout.split("PLAY RECAP")[1]
    assert "changed=0" in recap and "changed=1" not in recap

    # gpu-02 leaves the play: its PersistentVolume file is pruned, a foreign file stays.
    (out / "mine.yaml").write_text("kind: Secret\n")
    _run(tmp_path, REPO / "playbooks" / "k8s_manifests.yml", INVENTORY, extra, limit="gpu-01")
    left = sorted(n for n in os.listdir(out) if (out / n).is_file())
    assert left == ["configmap-local-provisioner-config.yaml", "mine.yaml",
                    "persistentvolume-local-nvme-gpu-01.yaml", "storageclass-local-nvme.yaml"]


ROLES_PLAY = """
- name: Storage and Kubernetes roles on a fake root
  hosts: localhost
  connection: local
  gather_facts: false
  module_defaults:
    aiinfra.datapath.nfd_labels: {root: "%(root)s"}
  vars:
    datapath_plan: %(plan)s
  roles:
    - aiinfra.datapath.%(storage_role)s
    - aiinfra.datapath.%(labels_role)s
  post_tasks:
    - name: Write the registered results
      ansible.builtin.copy:
        content: "{{ {'nvme': %(storage_role)s_result, 'k8s': %(labels_role)s_result} | to_json }}"
        dest: "%(out)s"
        mode: "0644"
"""


@pytest.mark.slow
@pytest.mark.parametrize(("storage_role", "labels_role"), [("nvme_layout", "nfd_labels"), ("nvme_cache", "k8s_node")])
def test_roles_without_storage_skip_the_cache_and_label(tmp_path: Path, storage_role: str, labels_role: str) -> None:
    """The roles, and their names before 0.3.0 (aliases that run them and keep the old result names)."""
    root = tmp_path / "node"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text("22 1 0:21 / / rw - overlay overlay rw\n")
    (root / "sys/class/net/eno1").mkdir(parents=True)
    (root / "sys/class/net/eno1/mtu").write_text("1500\n")
    plan = dict(PLAN, nvme_layout=None)
    out = tmp_path / "results.json"
    book = tmp_path / "play.yml"
    book.write_text(ROLES_PLAY % {"root": root, "plan": json.dumps(plan), "out": out,
                                  "storage_role": storage_role, "labels_role": labels_role})
    _run(tmp_path, book, "localhost\n", {})
    results = json.loads(out.read_text())
    assert results["nvme"]["skipped"] is True
    assert results["k8s"]["changed"] is True
    assert results["k8s"]["labels"] == {"aiinfra.io/fabric-mgmt-mtu": "1500", "aiinfra.io/pool": "inference"}
    features = root / "etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath"
    assert features.read_text().endswith("aiinfra.io/fabric-mgmt-mtu=1500\naiinfra.io/pool=inference\n")
