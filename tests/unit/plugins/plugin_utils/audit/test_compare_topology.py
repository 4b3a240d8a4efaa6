"""The audit's node_topology findings: the facts' topology against the plan's node_topology.

The topologies are read by the real node_topology engine over the recorded ASUS ESC8000A-E12
(tests/fixtures/topology/, sysfs built by topofakes.machine()) and over a lab-like node without GPUs;
plugin_utils/test_topology_findings.py covers every check on its own.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology import NodeTopology
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.audit import CAPABILITIES, compare, reports
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.topology_findings import topology_findings
from netfakes import FakeRunner
from topofakes import SysRoot, Tree, fixture, machine

from ._data import facts, plan

LSPCI = "/usr/bin/lspci"
SMI = "/usr/bin/nvidia-smi"
NAME = "asus-esc8000a-e12"
SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 5, "docs", "schema",
                      "audit.schema.json")


@pytest.fixture
def node(tmp_path: Path) -> SysRoot:
    root = tmp_path / "node"
    root.mkdir()
    return SysRoot(root)


def read(node: SysRoot, recorded: bool) -> dict[str, Any]:
    def answer(argv: list[str]) -> tuple[int, str, str] | None:
        if argv == [LSPCI, "-vvv", "-D"]:
            return 0, fixture(NAME, "lspci-vvv.txt"), ""
        if argv == [SMI, "topo", "-m"]:
            return 0, fixture(NAME, "nvidia-smi-topo-m.txt"), ""
        if argv == [SMI, "-q", "-x"]:
            return 6, "", "(not recorded)"
        return None
    which = {"lspci": LSPCI, "nvidia-smi": SMI} if recorded else {}
    result = run(NodeTopology, {"root": str(node.root), "lspci": True, "nvidia_smi": True},
                 Node(FakeRunner([answer], which=which), str(node.root)))
    return result["topology"]


def lab_node(node: SysRoot) -> dict[str, Any]:
    """Like a lab node: a virtio NIC, no GPU, no NVMe controller, no tools."""
    tree = Tree(node)
    tree.function("0000:00:03.0", "pci0000:00", None, "0x020000", vendor="0x1af4")
    tree.netdev("0000:00:03.0", "eth0")
    return read(node, recorded=False)


def audited(topology: dict[str, Any] | None, expect: dict[str, Any] | None) -> list[dict[str, Any]]:
    p, f = plan(), facts()
    p["node_topology"] = expect
    f["topology"] = topology
    return compare(p, f, host="node1")


def test_recorded_machine_findings_are_topology_findings_with_the_plans_expectations(node) -> None:
    topology = (machine(node, NAME), read(node, recorded=True))[1]
    expect = {"gpus": 8, "rdma_nics": None, "max_gpu_nic_relation": "NODE", "min_link_width": None,
              "min_link_gen": None, "acs_off": True, "gpudirect": ["rdma"], "min_max_read_req": 4096}
    found = audited(topology, expect)
    assert found == topology_findings("node1", topology, expect)  # nothing else drifts in the converged pair
    assert {f["capability"] for f in found} == {"node_topology"}
    count = [f for f in found if f["check"] == "gpu-count"]
    assert [(f["wanted"], f["actual"], f["severity"]) for f in count] == [(8, 4, "error")]
    # without the spec section the general checks still run, and the count is not checked
    assert [f for f in audited(topology, None) if f["check"] == "gpu-count"] == []
    assert audited(topology, None) == topology_findings("node1", topology, None)

    bundle = reports({"node1": found}, "drift", None, "t")
    report = json.loads(bundle["files"]["audit.json"])
    with open(SCHEMA, encoding="utf-8") as handle:
        jsonschema.Draft202012Validator(json.load(handle)).validate(report)
    assert report["failed"] is True and report["by_capability"]["node_topology"]["error"] >= 1
    suite = ET.fromstring(bundle["files"]["audit.xml"]).find("testsuite")
    assert suite is not None
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert list(cases) == list(CAPABILITIES) and CAPABILITIES[-1] == "node_topology"
    assert cases["node_topology"].find("failure") is not None
    assert "## node_topology" in bundle["files"]["audit.md"]


def test_a_node_without_gpus_gets_one_info_finding_and_passes(node) -> None:
    topology = lab_node(node)
    assert topology["gpus"] == [] and [n["name"] for n in topology["nics"]] == ["eth0"]
    found = audited(topology, None)
    assert [(f["capability"], f["check"], f["key"], f["severity"], f["kind"]) for f in found] == [
        ("node_topology", "no-gpu", "gpus", "info", "finding")]
    assert "eth0" in found[0]["reason"]
    report = json.loads(reports({"node1": found}, "drift", None, "t")["files"]["audit.json"])
    assert report["failed"] is False and report["hosts"][0]["status"] == "pass"
    # a spec that says the node has no GPU: nothing to say; one that says 8: the count is an error
    assert audited(topology, {"gpus": 0}) == []
    assert [(f["check"], f["severity"]) for f in audited(topology, {"gpus": 8})] == [("gpu-count", "error")]


def test_topology_not_gathered_is_not_compared() -> None:
    assert audited(None, {"gpus": 8}) == []
    assert compare(plan(), facts(), host="node1") == []  # neither key: older plans and facts
