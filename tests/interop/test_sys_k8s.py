"""The local volume manifests, read by kubernetes-validate --strict (the OpenAPI schemas of a
current and of a 1.30 Kubernetes, unknown fields rejected).

They are rendered through the filter ``local_volume_manifests`` with realistic hostvars and
written as the k8s_manifests role writes them (its header line, then ``to_nice_yaml(indent=2,
sort_keys=false)``). The schemas do not check name formats, so the names and the node affinity
are checked here against the Kubernetes rules (DNS-1123 subdomain, label value) as well.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.plugins.filter.core import to_nice_yaml
from ansible_collections.aiinfra.datapath.plugins.filter.k8s import local_volume_manifests
from ansible_collections.aiinfra.datapath.plugins.module_utils._nfd_rules import label_key_error, label_value_error

from .sys_common import run as run_tool
from .sys_common import tool

pytestmark = pytest.mark.interop

HEADER = "# Rendered by aiinfra.datapath (role k8s_manifests). Do not edit: re-render instead.\n"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
VERSIONS = [None, "1.30.0"]     # None: kubernetes-validate's default, the newest it bundles
STORAGE = {"devices": ["/dev/disk/by-id/nvme-SAMSUNG_MZQL27T6HBLA-00A07_S6CKNE0T000001"], "select": None,
           "raid": {"level": 0, "chunk_kib": 512, "name": "md-cache"},
           "filesystem": {"type": "xfs", "label": "model-cache"},
           "mount": {"path": "/mnt/model-cache", "options": ["noatime", "nodiratime"]},
           "directories": [{"path": "models", "owner": "root", "group": "root", "mode": "0755"}],
           "reserve_bytes": 10737418240, "wipe_serials": []}


def _hostvars(cls: str | None = "local-nvme", storage: Any = "default", **extra: Any) -> dict[str, Any]:
    plan = {"nvme_layout": copy.deepcopy(STORAGE) if storage == "default" else storage,
            "nfd_labels": {"labels": {"aiinfra.io/nvme-cache": "true"}, "local_volume_class": cls}}
    return {"datapath_plan": plan, "inventory_hostname": "x", **extra}


HOSTVARS = {
    # measured by the nfd_labels role (3.84 TB disk), inventory name with capitals
    "GPU-Node-01": _hostvars(nfd_labels_result={"cache": {"size_bytes": 3840755982336}}),
    # facts gathered: kubelet's hostname is uname -n
    "gpu-node-02": _hostvars(nfd_labels_result={"cache": {"size_bytes": 7681501126656}},
                             ansible_facts={"nodename": "gpu-node-02.dc1.example.net"}),
    # kubelet runs with --hostname-override; capacity given by hand
    "gpu_node_03": _hostvars(k8s_manifests_node_name="gpu-node-03", k8s_manifests_pv_capacity="3500Gi"),
    # another class on a faster pool
    "gpu-node-04": _hostvars(cls="fast-nvme", k8s_manifests_pv_capacity=2 * 1024 ** 4),
    # no cache: no objects
    "cpu-node-01": _hostvars(storage=None),
}


def _write(entries: list[dict[str, Any]], out: Path) -> list[Path]:
    """As the role writes them: one file per object."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for entry in entries:
        path = out / entry["file"]
        path.write_text(HEADER + to_nice_yaml(entry["object"], indent=2, sort_keys=False))
        assert yaml.safe_load(path.read_text()) == entry["object"]
        files.append(path)
    return files


def _validate(files: list[Path], version: str | None) -> str:
    argv = [tool("kubernetes-validate"), "--strict"] + (["-k", version] if version else []) + [str(f) for f in files]
    done = run_tool(argv)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _names_and_labels(entry: dict[str, Any]) -> None:
    obj = entry["object"]
    name = obj["metadata"]["name"]
    assert DNS_SUBDOMAIN.match(name) and len(name) <= 253, name
    for key, value in obj["metadata"].get("labels", {}).items():
        assert label_key_error(key) is None and label_value_error(key, value) is None
    if obj["kind"] == "PersistentVolume":
        for term in obj["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]:
            for expr in term["matchExpressions"]:
                for value in expr["values"]:
                    # kubelet's kubernetes.io/hostname: a lowercase Node name that is also a label value
                    assert value == value.lower() and DNS_SUBDOMAIN.match(value) and len(value) <= 63, value
                    assert label_value_error(expr["key"], value) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_storageclasses_and_persistent_volumes_validate(tmp_path: Path, version: str | None) -> None:
    entries = local_volume_manifests(sorted(HOSTVARS), HOSTVARS, ["storageclass", "pv"])
    assert sorted(e["file"] for e in entries) == [
        "persistentvolume-fast-nvme-gpu-node-04.yaml",
        "persistentvolume-local-nvme-gpu-node-01.yaml",
        "persistentvolume-local-nvme-gpu-node-02.dc1.example.net.yaml",
        "persistentvolume-local-nvme-gpu-node-03.yaml",
        "storageclass-fast-nvme.yaml",
        "storageclass-local-nvme.yaml",
    ]
    for entry in entries:
        _names_and_labels(entry)
    output = _validate(_write(entries, tmp_path / "k8s"), version)
    assert output.count(" passed ") == len(entries), output
    wanted = "against version %s" % (version.rsplit(".", 1)[0] if version else "")
    assert wanted in output, output


@pytest.mark.parametrize("version", VERSIONS)
def test_all_three_kinds_with_the_provisioner_configmap_validate(tmp_path: Path, version: str | None) -> None:
    hosts = ["GPU-Node-01", "gpu-node-02", "gpu_node_03"]
    entries = local_volume_manifests(hosts, HOSTVARS, ["storageclass", "pv", "configmap"],
                                     namespace="local-storage", reclaim_policy="Delete")
    assert [e["kind"] for e in entries].count("ConfigMap") == 1
    for entry in entries:
        _names_and_labels(entry)
    output = _validate(_write(entries, tmp_path / "k8s"), version)
    assert output.count(" passed ") == len(entries), output


def test_the_reader_rejects_what_strict_forbids(tmp_path: Path) -> None:
    """kubernetes-validate --strict is live: an unknown field in a rendered PV fails it."""
    entry = next(e for e in local_volume_manifests(["GPU-Node-01"], HOSTVARS, ["pv"]))
    entry["object"]["spec"]["nodeAfinity"] = entry["object"]["spec"].pop("nodeAffinity")
    path = _write([entry], tmp_path / "k8s")[0]
    done = run_tool([tool("kubernetes-validate"), "--strict", str(path)])
    assert done.returncode != 0 and "nodeAfinity" in done.stdout + done.stderr
