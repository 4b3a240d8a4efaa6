"""Golden topology per node class: a node against the fingerprint of a known-good node of its class.

Every topology here is the real node_topology engine's result over a recorded machine
(tests/fixtures/topology/<machine>/) or a constructed tree (topofakes.switch_box(), labelled
constructed); a golden file is what the audit role writes (``topology_fingerprint``) after a JSON
round trip, as an operator would copy it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology import NodeTopology
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import topology_golden as tg
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.audit import compare
from netfakes import FakeRunner
from topofakes import SysRoot, fixture, machine, switch_box, switch_lspci

LSPCI = "/usr/bin/lspci"
SMI = "/usr/bin/nvidia-smi"


def topology(node: SysRoot, lspci: str, smi_matrix: str | None = None) -> dict:
    """node_topology's result over the tree, with the recorded tool outputs."""
    def answer(argv):
        if argv == [LSPCI, "-vvv", "-D"]:
            return 0, lspci, ""
        if argv == [SMI, "topo", "-m"] and smi_matrix is not None:
            return 0, smi_matrix, ""
        if argv == [SMI, "-q", "-x"]:
            return 6, "", "(not recorded)"
        return None
    which = {"lspci": LSPCI, **({"nvidia-smi": SMI} if smi_matrix is not None else {})}
    result = run(NodeTopology, {"root": str(node.root), "lspci": True, "nvidia_smi": True},
                 Node(FakeRunner([answer], which=which), str(node.root)))
    return result["topology"]


def _node(tmp_path: Path, name: str) -> SysRoot:
    root = tmp_path / name
    root.mkdir()
    return SysRoot(root)


def recorded(tmp_path: Path, name: str) -> dict:
    node = _node(tmp_path, name)
    machine(node, name)
    return topology(node, fixture(name, "lspci-vvv.txt"), fixture(name, "nvidia-smi-topo-m.txt"))


def boxed(tmp_path: Path, name: str, **kwargs) -> dict:
    node = _node(tmp_path, name)
    switch_box(node, **kwargs)
    return topology(node, switch_lspci())


def golden_of(topo: dict) -> dict:
    return json.loads(json.dumps(tg.fingerprint(topo)))  # as written to reports/topology/HOST.json


def keys(findings: list[dict]) -> list[tuple[str, str, str]]:
    return [(f["check"], f["key"], f["severity"]) for f in findings]


@pytest.mark.parametrize("name", ["asus-esc8000a-e12", "puget-threadripper-pro-wrx90"])
def test_a_recorded_machine_matches_its_own_golden_topology(tmp_path, name) -> None:
    topo = recorded(tmp_path, name)
    golden = golden_of(topo)
    assert golden["format"] == tg.FORMAT
    assert len(golden["gpus"]) == len(topo["gpus"]) and len(golden["nics"]) == len(topo["nics"])
    assert tg.golden_findings("n1", topo, golden, "cls") == []


def test_the_fingerprint_of_the_esc8000a_names_each_gpus_nearest_rails(tmp_path) -> None:
    golden = golden_of(recorded(tmp_path, "asus-esc8000a-e12"))
    gpu0 = golden["gpus"][0]
    assert gpu0["index"] == 0 and gpu0["pci"] == "0000:01:00.0" and gpu0["numa_node"] == 0
    assert gpu0["nearest_nics"] == {"pci": ["0000:21:00.0", "0000:21:00.1"], "relation": "NODE"}
    assert gpu0["link_cap"] == "x16 16.0 GT/s"
    assert golden["numa_nodes"] == ["0", "1"]


def test_the_current_link_speed_of_an_idle_gpu_is_not_part_of_the_class(tmp_path) -> None:
    topo = recorded(tmp_path, "asus-esc8000a-e12")
    golden = golden_of(topo)
    topo["gpus"][1]["link"]["speed"] = 16.0  # the same node under load: GPU links train up
    assert tg.golden_findings("n1", topo, golden, "cls") == []


def test_another_machine_is_named_element_by_element(tmp_path) -> None:
    golden = golden_of(recorded(tmp_path, "asus-esc8000a-e12"))
    found = tg.golden_findings("wrx90", recorded(tmp_path, "puget-threadripper-pro-wrx90"), golden, "esc8000a")
    assert all(f["check"] == "golden-topology" and f["capability"] == "node_topology" for f in found)
    by_key = {f["key"]: f for f in found}
    assert by_key["numa-nodes"]["reason"] == "the node has NUMA nodes 0, the golden topology esc8000a has 0,1"
    assert by_key["0000:41:00.0"]["reason"] == "GPU1 (0000:41:00.0) of the golden topology esc8000a is missing"
    assert by_key["0000:41:00.0"]["severity"] == "error"
    assert by_key["0000:c2:00.0"]["reason"] == "GPU1 (0000:c2:00.0) is not in the golden topology esc8000a"
    assert by_key["0000:21:00.0/root-port"]["reason"] == (
        "NIC mlx5_0 (0000:21:00.0): root port 0000:20:01.1, the golden topology esc8000a has 0000:20:03.1")
    assert by_key["0000:c1:00.0/nearest-nics"]["wanted"] == "0000:81:00.0,0000:81:00.1 NODE"
    assert by_key["0000:c1:00.0/nearest-nics"]["actual"] == "0000:21:00.0,0000:21:00.1 NODE"


def test_a_nic_moved_to_the_other_socket_names_the_gpu_pairing_and_the_missing_devices(tmp_path) -> None:
    golden = golden_of(boxed(tmp_path, "good"))
    moved = boxed(tmp_path, "moved", nic_numa=1)  # constructed: the HCA is on socket 1, no NVMe
    found = tg.golden_findings("n2", moved, golden, "box")
    assert ("golden-topology", "0000:18:00.0/nearest-nics", "warning") in keys(found)
    pairing = next(f for f in found if f["key"] == "0000:18:00.0/nearest-nics")
    assert pairing["wanted"] == "0000:19:00.0 PIX" and pairing["actual"] == "0000:98:00.0 SYS"
    assert "GPU0 (0000:18:00.0)" in pairing["reason"] and "the golden topology box" in pairing["reason"]
    assert ("golden-topology", "0000:1a:00.0", "error") in keys(found)  # the NVMe device is gone


def test_placement_and_link_capability_are_compared_per_device(tmp_path) -> None:
    topo = boxed(tmp_path, "good")
    golden = golden_of(topo)
    nic = next(item for item in golden["nics"] if item["pci"] == "0000:98:00.0")
    nic["numa_node"], nic["link_cap"] = 0, "x16 64.0 GT/s"  # the class's card sits elsewhere, is Gen6
    found = tg.golden_findings("n1", topo, golden, "box")
    assert keys(found) == [("golden-topology", "0000:98:00.0/numa-node", "warning"),
                           ("golden-topology", "0000:98:00.0/link-cap", "warning")]
    assert found[1]["wanted"] == "x16 64.0 GT/s" and found[1]["actual"] == "x16 32.0 GT/s"


def test_a_class_without_a_golden_file_is_one_error_naming_the_file(tmp_path) -> None:
    found = tg.golden_findings("n1", boxed(tmp_path, "n1"), None, "h100-sxm")
    assert keys(found) == [("golden-topology", "golden", "error")]
    assert "topology-golden/h100-sxm.json" in found[0]["reason"]
    bad = tg.golden_findings("n1", boxed(tmp_path, "n2"), {"format": "something else"}, "h100-sxm")
    assert keys(bad) == [("golden-topology", "golden", "error")]


def test_a_node_without_pci_devices_has_no_fingerprint_and_misses_every_golden_device(tmp_path) -> None:
    lab = {"gpus": [], "nics": [], "nvme": [], "virtual_interfaces": ["veth0"], "numa_nodes": {"0": {}}}
    assert tg.fingerprint(lab) is None and tg.fingerprint(None) is None
    golden = golden_of(boxed(tmp_path, "good"))
    found = tg.golden_findings("lab1", lab, golden, "box")
    assert [f["key"] for f in found if f["severity"] == "error"] == [
        "0000:18:00.0", "0000:19:00.0", "0000:98:00.0", "0000:1a:00.0"]


def test_the_audit_compares_a_host_with_the_golden_topology_its_plan_names(tmp_path) -> None:
    topo = boxed(tmp_path, "moved", nic_numa=1)
    plan = {"host": "n2", "node_topology": {"golden": "box", "acs_off": True}}
    golden = {"box": golden_of(boxed(tmp_path, "good"))}
    found = [f for f in compare(plan, {"topology": topo}, golden=golden) if f["check"] == "golden-topology"]
    assert {f["key"] for f in found} >= {"0000:18:00.0/nearest-nics", "0000:1a:00.0"}
    assert all(f["host"] == "n2" for f in found)
    plain = compare({"host": "n2", "node_topology": {"acs_off": True}}, {"topology": topo}, golden=golden)
    assert not [f for f in plain if f["check"] == "golden-topology"]  # no class named: no comparison
    missing = compare(plan, {"topology": topo}, golden={})
    assert [(f["check"], f["key"]) for f in missing if f["check"] == "golden-topology"] == [
        ("golden-topology", "golden")]
