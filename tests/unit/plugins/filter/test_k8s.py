"""local_volume_manifests: Kubernetes objects by structure (no cluster needed)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter.k8s import FilterModule, local_volume_manifests

STORAGE = {"devices": ["/dev/nvme1n1"], "select": None, "raid": None,
           "filesystem": {"type": "xfs", "label": "model-cache"},
           "mount": {"path": "/mnt/model-cache", "options": ["noatime"]},
           "directories": [], "reserve_bytes": 0, "wipe_serials": []}


def hv(storage: Any = "default", cls: str | None = "local-nvme", **extra: Any) -> dict[str, Any]:
    plan = {"nvme_layout": copy.deepcopy(STORAGE if storage == "default" else storage),
            "nfd_labels": {"labels": {}, "local_volume_class": cls}}
    return {"datapath_plan": plan, **extra}


def test_storageclass_and_pv_per_host() -> None:
    hostvars = {
        "gpu-01": hv(nfd_labels_result={"cache": {"size_bytes": 3840000000000}}),
        "gpu-02": hv(k8s_manifests_pv_capacity="3500Gi", k8s_manifests_node_name="gpu-02.example.org"),
        "cpu-01": hv(storage=None),
    }
    out = local_volume_manifests(["gpu-02", "gpu-01", "cpu-01"], hostvars)
    assert [e["file"] for e in out] == ["persistentvolume-local-nvme-gpu-01.yaml",
                                        "persistentvolume-local-nvme-gpu-02.example.org.yaml",
                                        "storageclass-local-nvme.yaml"]
    sc = out[2]["object"]
    assert sc["apiVersion"] == "storage.k8s.io/v1" and sc["kind"] == "StorageClass"
    assert sc["provisioner"] == "kubernetes.io/no-provisioner"
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"
    pv1, pv2 = out[0]["object"], out[1]["object"]
    for pv, node in ((pv1, "gpu-01"), (pv2, "gpu-02.example.org")):
        assert pv["apiVersion"] == "v1" and pv["kind"] == "PersistentVolume"
        spec = pv["spec"]
        # a directory of its own beside the models, never the mount that holds them
        assert spec["local"] == {"path": "/mnt/model-cache/volume"}
        assert spec["storageClassName"] == "local-nvme"
        assert spec["volumeMode"] == "Filesystem" and spec["accessModes"] == ["ReadWriteOnce"]
        terms = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                "values": [node]}]}]
    assert pv1["spec"]["capacity"] == {"storage": "3662109Mi"}
    assert pv2["spec"]["capacity"] == {"storage": "3500Gi"}
    # Every object survives a YAML round trip unchanged.
    for entry in out:
        assert yaml.safe_load(yaml.safe_dump(entry["object"])) == entry["object"]


def test_configmap_for_the_static_provisioner() -> None:
    hostvars = {"a": hv(), "b": hv()}
    out = local_volume_manifests(["a", "b"], hostvars, ["storageclass", "configmap"])
    assert [e["kind"] for e in out] == ["ConfigMap", "StorageClass"]
    cm = out[0]["object"]
    assert cm["metadata"] == {"name": "local-provisioner-config", "namespace": "kube-system",
                              "labels": {"app.kubernetes.io/managed-by": "aiinfra.datapath"}}
    assert yaml.safe_load(cm["data"]["nodeLabelsForPV"]) == ["kubernetes.io/hostname"]
    assert yaml.safe_load(cm["data"]["storageClassMap"]) == {"local-nvme": {
        "hostDir": "/mnt", "mountDir": "/mnt", "volumeMode": "Filesystem", "fsType": "xfs",
        "namePattern": "model-cache"}}


def test_all_three_kinds_and_default_class() -> None:
    out = local_volume_manifests(["a"], {"a": hv(cls=None, k8s_node_pv_capacity=2 * 1024 ** 3)},
                                 ["storageclass", "pv", "configmap"], default_class="fast")
    assert sorted(e["file"] for e in out) == ["configmap-local-provisioner-config.yaml",
                                              "persistentvolume-fast-a.yaml", "storageclass-fast.yaml"]
    assert next(e for e in out if e["kind"] == "PersistentVolume")["object"]["spec"]["capacity"]["storage"] == "2048Mi"


def test_unknown_capacity_names_the_host() -> None:
    with pytest.raises(AnsibleFilterError, match="gpu-07.*k8s_manifests_pv_capacity"):
        local_volume_manifests(["gpu-07"], {"gpu-07": hv()})


def test_errors() -> None:
    with pytest.raises(AnsibleFilterError, match="datapath_plan"):
        local_volume_manifests(["a"], {"a": {}})
    with pytest.raises(AnsibleFilterError, match="kinds"):
        local_volume_manifests(["a"], {"a": hv()}, ["deployment"])
    with pytest.raises(AnsibleFilterError, match="quantity"):
        local_volume_manifests(["a"], {"a": hv(k8s_node_pv_capacity="lots")})
    with pytest.raises(AnsibleFilterError, match="not a DNS name"):
        local_volume_manifests(["a"], {"a": hv(cls="Local_NVMe", k8s_node_pv_capacity="1Gi")})
    other = dict(STORAGE, mount={"path": "/data/cache", "options": []})
    with pytest.raises(AnsibleFilterError, match="different directories"):
        local_volume_manifests(["a", "b"], {"a": hv(), "b": hv(storage=other)}, ["configmap"])
    with pytest.raises(AnsibleFilterError, match="hosts a and b both map to the PersistentVolume local-nvme-n"):
        local_volume_manifests(["a", "b"], {"a": hv(k8s_node_name="n", k8s_node_pv_capacity="1Gi"),
                                            "b": hv(k8s_node_name="n", k8s_node_pv_capacity="1Gi")})


def _affinity(entry: dict[str, Any]) -> list[str]:
    terms = entry["object"]["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert len(terms) == 1 and len(terms[0]["matchExpressions"]) == 1
    expr = terms[0]["matchExpressions"][0]
    assert expr["key"] == "kubernetes.io/hostname" and expr["operator"] == "In"
    return expr["values"]


def test_node_affinity_is_the_hostname_label_kubelet_sets() -> None:
    """kubelet lowercases its hostname for kubernetes.io/hostname: GPU-Node-01 is gpu-node-01."""
    hostvars = {
        "GPU-Node-01": hv(k8s_manifests_pv_capacity="1Gi"),
        "gpu-a": hv(k8s_manifests_pv_capacity="1Gi", ansible_facts={"nodename": "GPU-A.lab.example"}),
        "gpu-b": hv(k8s_manifests_pv_capacity="1Gi", ansible_facts={"nodename": "ignored"},
                    k8s_manifests_node_name=" Node-B "),
        "gpu_node_07": hv(k8s_manifests_pv_capacity="1Gi", k8s_manifests_node_name="gpu-node-07"),
    }
    out = {e["name"]: e for e in local_volume_manifests(list(hostvars), hostvars, ["pv"])}
    assert {name: _affinity(entry) for name, entry in out.items()} == {
        "local-nvme-gpu-node-01": ["gpu-node-01"],
        "local-nvme-gpu-a.lab.example": ["gpu-a.lab.example"],
        "local-nvme-node-b": ["node-b"],
        "local-nvme-gpu-node-07": ["gpu-node-07"],
    }


@pytest.mark.parametrize("host,extra,source", [
    ("gpu_node_01", {}, "the inventory name 'gpu_node_01'"),
    ("gpu-01", {"k8s_manifests_node_name": "gpu 01"}, "k8s_manifests_node_name 'gpu 01'"),
    ("gpu-01", {"ansible_facts": {"nodename": "x" * 64}}, "ansible_facts.nodename"),
    ("gpu-01", {"k8s_manifests_node_name": "-gpu"}, "k8s_manifests_node_name '-gpu'"),
])
def test_a_name_kubelet_cannot_have_names_the_host_and_the_fix(host: str, extra: dict[str, Any], source: str) -> None:
    with pytest.raises(AnsibleFilterError) as err:
        local_volume_manifests([host], {host: hv(k8s_manifests_pv_capacity="1Gi", **extra)}, ["pv"])
    assert f"{host}: {source}" in str(err.value)
    assert f"set k8s_manifests_node_name for {host}" in str(err.value)
    # only a PersistentVolume names the node
    assert local_volume_manifests([host], {host: hv(**extra)}, ["storageclass", "configmap"])


def test_two_hosts_on_one_object_name_fail_with_both_names() -> None:
    hostvars = {"GPU-Node-01": hv(k8s_manifests_pv_capacity="1Gi"), "gpu-node-01": hv(k8s_manifests_pv_capacity="1Gi")}
    with pytest.raises(AnsibleFilterError) as err:
        local_volume_manifests(list(hostvars), hostvars, ["pv"])
    msg = str(err.value)
    assert "GPU-Node-01 and gpu-node-01" in msg and "local-nvme-gpu-node-01" in msg
    assert "k8s_manifests_node_name" in msg
    # the StorageClass alone does not need node names to differ
    assert [e["kind"] for e in local_volume_manifests(list(hostvars), hostvars, ["storageclass"])] == ["StorageClass"]


def test_registered() -> None:
    assert FilterModule().filters()["local_volume_manifests"] is local_volume_manifests
