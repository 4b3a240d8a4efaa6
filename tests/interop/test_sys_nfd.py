"""The node-feature-discovery features file, read with NFD's own rules (ported from NFD v0.18.3
into plugins/module_utils/_nfd_rules.py: source/local/local.go parseFeatureFile,
pkg/apis/nfd/validate/validate.go Label, pkg/nfd-master/nfd-master.go filterFeatureLabel).

The chain is the real one: the example inventory's spec -> the host's plan (node_plan) -> the
module arguments (capability_args, as the role and site.yml build them) -> the nfd_labels
backend on a temporary node root -> the features file. Every line of it is then read the way
nfd-worker's local source reads it and every label is put through nfd-master's filter: nothing
may be dropped. And the spec refuses, through ``datapath validate``, the labels nfd-master drops.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nfd_rules
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._nfd_labels import NfdLabels
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.capabilities import capability_args
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import node_plan

from .sys_common import REPO, tool
from .sys_common import run as run_tool

pytestmark = pytest.mark.interop

EXAMPLE = Path(REPO) / "inventories" / "example"
NFD_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d/"   # local.go featureFilesDir


def _spec() -> Any:
    return yaml.safe_load((EXAMPLE / "group_vars" / "all" / "datapath.yml").read_text())["datapath"]


def _node_root(root: Path, plan: dict[str, Any]) -> None:
    """A node as the plan expects it: the cache mounted, HugePage pools, the fabrics' NICs."""
    cache = plan["nvme_layout"]["mount"]["path"]
    (root / "proc" / "self").mkdir(parents=True)
    (root / cache.lstrip("/")).mkdir(parents=True)
    (root / "proc" / "self" / "mountinfo").write_text(
        "22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw\n"
        "40 22 9:127 / %s rw,noatime shared:20 - xfs /dev/md127 rw,attr2\n" % cache)
    for kib, count in ((2048, 0), (1048576, 64)):
        pool = root / "sys" / "kernel" / "mm" / "hugepages" / f"hugepages-{kib}kB"
        pool.mkdir(parents=True)
        (pool / "nr_hugepages").write_text(f"{count}\n")
    for iface in plan["link_mtu"]["interfaces"]:
        if iface.get("name"):
            nic = root / "sys" / "class" / "net" / iface["name"]
            nic.mkdir(parents=True, exist_ok=True)
            (nic / "mtu").write_text("%d\n" % iface["mtu"])


def _run(root: Path, args: dict[str, Any]) -> dict[str, Any]:
    checked = ArgumentSpecValidator(**NfdLabels.module_spec()).validate(dict(args, root=str(root)))
    assert not checked.error_messages, checked.error_messages
    return run(NfdLabels, checked.validated_parameters, Node(None, str(root)))


def _read_as_nfd(path: Path, extra_label_ns: tuple[str, ...] = ()) -> dict[str, str]:
    """nfd-worker's local source, then nfd-master's filter, over the file; every line accounted for."""
    assert not path.name.startswith("."), "NFD skips dot-files"
    assert path.stat().st_size <= _nfd_rules.NFD_MAX_FILE_BYTES
    text = path.read_text()
    labels, problems = _nfd_rules.parse_features_file(text)
    assert problems == [], problems
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        assert line == stripped, "no line relies on NFD trimming it"
        if stripped.startswith("#"):
            assert not stripped.startswith(_nfd_rules.NFD_DIRECTIVE_PREFIX), line
            continue
        key, sep, value = stripped.partition("=")
        assert sep and labels[key] == value, line
        assert _nfd_rules.nfd_label_error(key, value, extra_label_ns) is None, line
    return labels


@pytest.mark.parametrize("host,groups", [("gpu-node-16", ["gpu_nodes", "rack_b"]),
                                         ("gpu-node-01", ["gpu_nodes", "rack_a"])])
def test_the_features_file_of_an_example_node_passes_nfds_rules_line_by_line(tmp_path: Path, host: str,
                                                                             groups: list[str]) -> None:
    plan = node_plan(_spec(), host, groups, {"datapath_numa_nodes": 2, "datapath_memory_bytes": 2 * 1024 ** 4})
    args = capability_args("nfd_labels", plan, {"roce_ready": {"rail0": True, "rail1": False}})
    assert args is not None and args["path"].startswith(NFD_FEATURES_DIR)
    root = tmp_path / "root"
    _node_root(root, plan)
    result = _run(root, args)
    assert not result.get("failed"), result.get("msg")
    labels = _read_as_nfd(root / args["path"].lstrip("/"))
    assert labels == result["labels"], "NFD reads exactly the labels the module reports"
    assert labels["aiinfra.io/nvme-cache"] == "true" and labels["aiinfra.io/hugepages-1Gi"] == "true"
    assert all(key in labels for key in plan["nfd_labels"]["labels"])


def test_a_namespace_the_cluster_allows_is_written_and_read_with_that_allowance(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sys" / "kernel" / "mm" / "hugepages").mkdir(parents=True)
    labels = {"node-role.kubernetes.io/gpu": "", "feature.node.kubernetes.io/rdma-rails": "2",
              "vendor.profile.node.kubernetes.io/tier": "a100-class", "aiinfra.io/canary": True}
    refused = _run(root, {"labels": labels})
    assert refused.get("failed") and "node-role.kubernetes.io" in refused["msg"]
    assert not (root / "etc").exists()
    result = _run(root, {"labels": labels, "extra_label_ns": ["node-role.kubernetes.io"]})
    assert not result.get("failed"), result.get("msg")
    path = root / NFD_FEATURES_DIR.lstrip("/") / "aiinfra-datapath"
    with pytest.raises(AssertionError, match="node-role"):
        _read_as_nfd(path)          # a default nfd-master drops it ...
    read = _read_as_nfd(path, ("node-role.kubernetes.io",))   # ... one with extraLabelNs publishes it
    assert read["node-role.kubernetes.io/gpu"] == "" and read["aiinfra.io/canary"] == "true"


def _validate(tmp_path: Path, labels: dict[str, Any]) -> Any:
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text((EXAMPLE / "hosts.yml").read_text())
    data = yaml.safe_load((EXAMPLE / "group_vars" / "all" / "datapath.yml").read_text())
    data["datapath"]["hosts"]["gpu-node-16"]["k8s"]["labels"].update(labels)
    (inventory / "group_vars" / "all" / "datapath.yml").write_text(yaml.safe_dump(data))
    return run_tool([tool("datapath"), "validate", str(inventory / "group_vars" / "all" / "datapath.yml")],
                    env=dict(os.environ, NO_COLOR="1"))


def test_datapath_validate_refuses_the_labels_nfd_master_drops(tmp_path: Path) -> None:
    assert _validate(tmp_path / "ok", {"feature.node.kubernetes.io/gpu": "true"}).returncode == 0
    done = _validate(tmp_path / "bad", {"kubernetes.io/role": "gpu", "node-role.kubernetes.io/gpu": "",
                                        "gpu": "true"})
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "hosts.gpu-node-16.k8s.labels" in out and "3 error(s)" in out, out
    assert "'kubernetes.io/role': nfd-master ignores labels in kubernetes.io" in out
    assert "use a prefix of your own, e.g. aiinfra.io/role" in out and "nfd_labels_extra_label_ns" in out
    assert "'node-role.kubernetes.io/gpu': nfd-master ignores labels in node-role.kubernetes.io" in out
    assert "'gpu' has no prefix" in out
