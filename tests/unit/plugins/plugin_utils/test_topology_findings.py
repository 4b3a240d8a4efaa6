"""Topology findings: every check has a fixture that triggers it and one that does not.

The topology each rule reads is produced by the real node_topology engine over a recorded machine
(tests/fixtures/topology/<machine>/, sysfs built by topofakes.machine()) or a constructed tree
(topofakes.switch_box(): labelled constructed), never written by hand.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology import NodeTopology
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import topology_findings as tf
from netfakes import FakeRunner
from topofakes import SysRoot, Tree, fixture, machine, switch_box, switch_lspci

LSPCI = "/usr/bin/lspci"
SMI = "/usr/bin/nvidia-smi"


@pytest.fixture
def node(tmp_path: Path) -> SysRoot:
    root = tmp_path / "node"
    root.mkdir()
    return SysRoot(root)


def topology(node: SysRoot, lspci: str | None = None, smi_matrix: str | None = None) -> dict:
    def answer(argv):
        if argv == [LSPCI, "-vvv", "-D"] and lspci is not None:
            return 0, lspci, ""
        if argv == [SMI, "topo", "-m"] and smi_matrix is not None:
            return 0, smi_matrix, ""
        if argv == [SMI, "-q", "-x"]:
            return 6, "", "(not recorded)"
        return None
    which = {}
    if lspci is not None:
        which["lspci"] = LSPCI
    if smi_matrix is not None:
        which["nvidia-smi"] = SMI
    result = run(NodeTopology, {"root": str(node.root), "lspci": True, "nvidia_smi": True},
                 Node(FakeRunner([answer], which=which), str(node.root)))
    return result["topology"]


def recorded(node: SysRoot, name: str) -> dict:
    machine(node, name)
    return topology(node, fixture(name, "lspci-vvv.txt"), fixture(name, "nvidia-smi-topo-m.txt"))


def checks(findings: list[dict], check: str) -> list[dict]:
    return [f for f in findings if f["check"] == check]


def _box(node: SysRoot, **kwargs) -> SysRoot:
    switch_box(node, **kwargs)
    return node


# --- link-trained-down ------------------------------------------------------------------------

def test_link_trained_down_on_a_narrow_nic(node) -> None:
    found = checks(tf.topology_findings("n1", topology(_box(node))), "link-trained-down")
    assert [(f["key"], f["wanted"], f["actual"], f["severity"]) for f in found] == [
        ("0000:19:00.0", "x16 32.0 GT/s", "x8 32.0 GT/s", "warning")]
    assert found[0]["capability"] == "node_topology" and found[0]["kind"] == "finding"


def test_idle_gpu_speed_is_not_a_finding_on_a_recorded_machine(node) -> None:
    # Puget WRX90 recorded: both GPUs at 2.5 of 16 GT/s (idle), full width; the NIC at full link
    topo = recorded(node, "puget-threadripper-pro-wrx90")
    assert all(gpu["link"]["trained_down"] == ["speed"] for gpu in topo["gpus"])
    assert checks(tf.topology_findings("canyon1", topo), "link-trained-down") == []


def test_parent_port_caps_the_capability(node) -> None:
    tree = Tree(node)
    tree.numa_node(0, "0-3")
    # constructed: a Gen5 NVMe in a Gen4 x4 slot runs at 16 GT/s: the platform's limit, not a fault
    tree.function("0000:00:01.1", "pci0000:00", None, "0x060400", link=(16.0, 4, 16.0, 4))
    tree.function("0000:01:00.0", "pci0000:00", "0000:00:01.1", "0x010802", link=(16.0, 4, 32.0, 4))
    tree.nvme("0000:01:00.0", "nvme0")
    topo = topology(node)
    topo["bridges"]["0000:00:01.1"] = {"pci": "0000:00:01.1", "link": {"max_speed": 16.0, "max_width": 4}}
    assert checks(tf.topology_findings("n1", topo), "link-trained-down") == []


# --- nic-numa ---------------------------------------------------------------------------------

def test_nic_numa_when_the_only_hca_is_on_the_other_socket(node) -> None:
    found = checks(tf.topology_findings("n1", topology(_box(node, nic_numa=1))), "nic-numa")
    assert [(f["key"], f["actual"]) for f in found] == [("GPU0", "mlx5_1 on NUMA node 1 (SYS)")]


def test_no_nic_numa_on_a_recorded_two_socket_machine(node) -> None:
    # ESC8000A recorded: every GPU has ConnectX ports on its own NUMA node (NODE)
    assert checks(tf.topology_findings("coyote2", recorded(node, "asus-esc8000a-e12")), "nic-numa") == []


# --- acs-redirect -----------------------------------------------------------------------------

def test_acs_redirect_on_the_switch_between_gpu_and_nic(node) -> None:
    found = checks(tf.topology_findings("n1", topology(_box(node), switch_lspci(acs_redirect=True))), "acs-redirect")
    assert [(f["key"], f["actual"], f["severity"]) for f in found] == [
        ("GPU0/mlx5_0", "ReqRedir/CmpltRedir on 0000:17:00.0, 0000:17:01.0", "error"),
        ("GPU0/nvme0", "ReqRedir/CmpltRedir on 0000:17:00.0", "error")]  # lspci lists no 17:02.0 here


def test_no_acs_finding_with_acs_off(node) -> None:
    assert checks(tf.topology_findings("n1", topology(_box(node), switch_lspci())), "acs-redirect") == []


def test_acs_unknown_without_lspci_is_not_a_finding(node) -> None:
    topo = topology(_box(node))
    assert topo["gpus"][0]["nics"][0]["acs_unknown"] and checks(tf.topology_findings("n1", topo), "acs-redirect") == []


# --- max-payload ------------------------------------------------------------------------------

def test_max_payload_below_what_the_whole_path_can_do(node) -> None:
    found = checks(tf.topology_findings("n1", topology(_box(node), switch_lspci())), "max-payload")
    assert [(f["key"], f["wanted"], f["actual"]) for f in found] == [("0000:19:00.0", 512, 256)]


def test_max_payload_limited_by_a_bridge_is_right(node) -> None:
    topo = topology(_box(node), switch_lspci(bridge_payload_cap=256))
    assert checks(tf.topology_findings("n1", topo), "max-payload") == []


# --- max-read-request -------------------------------------------------------------------------

def test_max_read_request_512_on_recorded_connectx7(node) -> None:
    found = checks(tf.topology_findings("coyote2", recorded(node, "asus-esc8000a-e12")), "max-read-request")
    assert [(f["key"], f["actual"]) for f in found] == [("0000:21:00.0", 512), ("0000:81:00.0", 512)]


def test_max_read_request_4096_is_fine(node) -> None:
    assert checks(tf.topology_findings("n1", topology(_box(node), switch_lspci())), "max-read-request") == []


def test_max_read_request_threshold_from_expect(node) -> None:
    topo = recorded(node, "asus-esc8000a-e12")
    assert checks(tf.topology_findings("coyote2", topo, {"min_max_read_req": 512}), "max-read-request") == []


# --- gpudirect --------------------------------------------------------------------------------

def test_gpudirect_rdma_missing_where_gpus_meet_rdma_nics(node) -> None:
    found = checks(tf.topology_findings("n1", topology(_box(node))), "gpudirect-rdma")
    assert [(f["key"], f["actual"], f["severity"]) for f in found] == [("nvidia_peermem", "not loaded", "error")]


def test_gpudirect_rdma_present(node) -> None:
    Tree(_box(node)).module("nvidia_peermem")
    assert checks(tf.topology_findings("n1", topology(node)), "gpudirect-rdma") == []


def test_gpudirect_not_expected_without_gpus(node) -> None:
    tree = Tree(node)
    tree.function("0000:00:03.0", "pci0000:00", None, "0x020000")
    tree.rdma("0000:00:03.0", "mlx5_0")
    assert tf.topology_findings("lab", topology(node)) == []


def test_gpudirect_storage_expected(node) -> None:
    _box(node)
    found = checks(tf.topology_findings("n1", topology(node), {"gpudirect": ["storage"]}), "gpudirect-storage")
    assert [f["actual"] for f in found] == ["missing: nvidia_fs, /etc/cufile.json"]
    Tree(node).module("nvidia_fs")
    node.put("/etc/cufile.json", "{ // comments are allowed\n}\n")
    topo = topology(node)
    assert topo["gpudirect"]["cufile_json"] == {"present": True, "valid": False}
    assert [f["actual"] for f in checks(tf.topology_findings("n1", topo, {"gpudirect": ["storage"]}),
                                        "gpudirect-storage")] == ["missing: /etc/cufile.json (not valid JSON)"]
    node.put("/etc/cufile.json", "{\n  // comments are allowed on their own line\n  \"logging\": {}\n}\n")
    assert checks(tf.topology_findings("n1", topology(node), {"gpudirect": ["storage"]}), "gpudirect-storage") == []


# --- iommu-translated -------------------------------------------------------------------------

def _group(node: SysRoot, kind: str) -> None:
    node.put("/sys/class/iommu/dmar0/uevent", "")
    for bdf in ("0000:18:00.0", "0000:19:00.0", "0000:98:00.0"):
        target = node.path("/sys/kernel/iommu_groups/%s/type" % bdf)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(kind + "\n")
        link = node.path("/sys/bus/pci/devices/%s" % bdf).resolve() / "iommu_group"
        os.symlink(os.path.relpath(str(target.parent), str(link.parent)), str(link))


def test_iommu_translated_with_gpudirect_expected(node) -> None:
    _box(node)
    _group(node, "DMA-FQ")
    found = checks(tf.topology_findings("n1", topology(node)), "iommu-translated")
    assert [(f["actual"], f["severity"]) for f in found] == [("translated", "warning")]


def test_iommu_passthrough_is_fine(node) -> None:
    _box(node)
    _group(node, "identity")
    topo = topology(node)
    assert topo["iommu"]["mode"] == "passthrough"
    assert checks(tf.topology_findings("n1", topo), "iommu-translated") == []


# --- from the spec's topology section ----------------------------------------------------------

def spec_topology(**fields) -> dict:
    """The spec's topology section as the plan would carry it: validated by the real model."""
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.models import Topology

    return Topology.model_validate(fields).model_dump(mode="json")


def test_counts_from_the_spec(node) -> None:
    topo = recorded(node, "asus-esc8000a-e12")
    good = tf.topology_findings("coyote2", topo, spec_topology(gpus=4, rdma_nics=4))
    assert checks(good, "gpu-count") == [] and checks(good, "rdma-nic-count") == []
    bad = tf.topology_findings("coyote2", topo, spec_topology(gpus=8, rdma_nics=8))
    assert [(f["check"], f["wanted"], f["actual"]) for f in bad if f["check"].endswith("count")] == [
        ("gpu-count", 8, 4), ("rdma-nic-count", 8, 4)]


def test_gpu_nic_distance_from_the_spec(node) -> None:
    topo = recorded(node, "asus-esc8000a-e12")  # every GPU's nearest ConnectX is NODE
    assert checks(tf.topology_findings("coyote2", topo, spec_topology()), "gpu-nic-distance") == []
    found = checks(tf.topology_findings("coyote2", topo, spec_topology(max_gpu_nic_relation="PXB")),
                   "gpu-nic-distance")
    assert [(f["key"], f["actual"]) for f in found] == [("GPU0", "NODE"), ("GPU1", "NODE"), ("GPU2", "NODE"),
                                                        ("GPU3", "NODE")]


def test_link_below_spec(node) -> None:
    topo = topology(_box(node), switch_lspci())  # the RDMA NIC trained x8 at 32 GT/s, the GPU x16 at 32 GT/s
    assert checks(tf.topology_findings("n1", topo, spec_topology(min_link_width=8, min_link_gen=5)),
                  "link-below-spec") == []
    found = checks(tf.topology_findings("n1", topo, spec_topology(min_link_width=16, min_link_gen=6)),
                   "link-below-spec")
    assert [(f["key"], f["wanted"], f["actual"]) for f in found] == [
        ("0000:19:00.0/width", "x16", "x8"), ("0000:19:00.0/speed", "64.0 GT/s", "32.0 GT/s"),
        ("0000:98:00.0/speed", "64.0 GT/s", "32.0 GT/s")]


def test_acs_off_false_silences_acs(node) -> None:
    topo = topology(_box(node), switch_lspci(acs_redirect=True))
    assert checks(tf.topology_findings("n1", topo, spec_topology(acs_off=False)), "acs-redirect") == []


def test_every_check_is_covered_and_none_topology_is_quiet() -> None:
    assert tf.topology_findings("n1", None) == []
    assert set(tf.CHECKS) == {"link-trained-down", "nic-numa", "acs-redirect", "max-payload", "max-read-request",
                              "gpudirect-rdma", "gpudirect-storage", "iommu-translated", "gpu-count",
                              "rdma-nic-count", "gpu-nic-distance", "link-below-spec"}
