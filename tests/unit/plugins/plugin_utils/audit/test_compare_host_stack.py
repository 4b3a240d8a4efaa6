"""Audit of the host stack: datapath_facts reads nic_affinity's and ebpf_readiness's state with the same
engines on the recorded trees (tests/fixtures/host_stack, see each .source), compare turns it into findings.

Drift before nic_affinity ran, none after it; an IRQ the interrupt controller keeps elsewhere (the recorded
Azure VF) is a finding; a kernel config without CONFIG_NETKIT with netkit planned is an error.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.filter import drift_audit
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._datapath_facts import DatapathFacts
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity import NicAffinity
from netfakes import FakeRunner
from nicfakes import FIXTURES, IP, azure_vm, crow, fixture, runner
from topofakes import SysRoot

from ._data import facts, plan


@pytest.fixture
def node(tmp_path: Path) -> SysRoot:
    root = tmp_path / "node"
    root.mkdir()
    return SysRoot(root)


def part(names: list[str]) -> dict[str, Any]:
    """The nic_affinity plan part as plan.py writes it (the module's options)."""
    return {"interfaces": [{"name": n, "fabric": "rdma"} for n in names]}


def ip_veth(argv: list[str]):
    """ip on a node with the recorded veth; no routes, rules of a fresh host (nothing collides)."""
    if argv[0] != IP:
        return None
    if argv[1:] == ["-j", "-d", "link", "show"]:
        return 0, fixture("veth-ip-j-d-link.json"), ""
    return 0, "[]", ""


def gathered(node: SysRoot, names: list[str], tools: Any = None, **sections: Any) -> dict[str, Any]:
    args = {"root": str(node.root), "gather": list(sections), **sections}
    checked = ArgumentSpecValidator(**DatapathFacts.module_spec()).validate(args)
    assert not checked.error_messages, checked.error_messages
    result = run(DatapathFacts, checked.validated_parameters,
                 Node(tools or runner(names), str(node.root), False, False))
    return result["ansible_facts"]["datapath_facts"]


def apply(node: SysRoot, names: list[str]) -> dict[str, Any]:
    args = {**part(names), "root": str(node.root)}
    checked = ArgumentSpecValidator(**NicAffinity.module_spec()).validate(args)
    assert not checked.error_messages, checked.error_messages
    return run(NicAffinity, checked.validated_parameters, Node(runner(names), str(node.root), False, False))


def audit(node_facts: dict[str, Any], **parts: Any) -> list[dict[str, Any]]:
    wanted = {**plan(), **parts}
    found = drift_audit.audit_findings(wanted, {**facts(), **node_facts}, host="node1")
    return [f for f in found if f["capability"] in ("nic_affinity", "ebpf_readiness")]


def test_irqs_off_their_cpus_are_drift_until_nic_affinity_ran(node) -> None:
    tree = crow(node)
    names = sorted(tree["nics"])
    before = gathered(node, names, nic_affinity=part(names))
    found = audit({"nic_affinity": before["nic_affinity"]}, nic_affinity=part(names))
    irqs = [f for f in found if f["check"] == "nic-affinity-irq"]
    assert len(irqs) == sum(len(row["irqs"]) for row in before["nic_affinity"]["interfaces"]) > 0
    assert {f["kind"] for f in irqs} == {"drift"} and {f["severity"] for f in irqs} == {"warning"}
    assert irqs[0]["key"].startswith("IRQ ") and "site.yml --tags nic_affinity" in irqs[0]["fix"]
    # the unit and its saved plan are drift as well (files shown present/absent, not as their text)
    assert {"nic-affinity-file", "nic-affinity-link"} <= {f["check"] for f in found}
    assert all(not (isinstance(f["wanted"], str) and "\n" in f["wanted"]) for f in found)
    assert apply(node, names)["changed"] is True
    after = gathered(node, names, nic_affinity=part(names))
    assert audit({"nic_affinity": after["nic_affinity"]}, nic_affinity=part(names)) == []


def test_an_irq_the_interrupt_controller_keeps_elsewhere_is_a_finding(node) -> None:
    tree = azure_vm(node)
    names = sorted(tree["nics"])
    apply(node, names)
    section = gathered(node, names, nic_affinity=part(names))["nic_affinity"]
    found = [f for f in audit({"nic_affinity": section}, nic_affinity=part(names))
             if f["check"] == "irq-effective-elsewhere"]
    assert len(found) == 14 and {f["actual"] for f in found} == {"0"}
    assert "IRQ 29 (mlx5_comp1@pci:8b76:00:02.0 of enP35702p0s2f0np0) is set to CPU 1" in " ".join(
        f["reason"] for f in found)


def test_a_plan_the_node_cannot_take_is_one_error(node) -> None:
    tree = crow(node)
    section = gathered(node, sorted(tree["nics"]), nic_affinity=part(["ens9"]))["nic_affinity"]
    assert "no interface matches" in section["error"] or "ens9" in section["error"]
    assert section["error"]
    found = audit({"nic_affinity": section}, nic_affinity=part(["ens9"]))
    assert [(f["check"], f["severity"]) for f in found] == [("nic-affinity-plan", "error")]


def test_a_kernel_without_netkit_and_netkit_planned_is_an_error_finding(node) -> None:
    release = "6.6.62-talos"
    node.put("/proc/sys/kernel/osrelease", release + "\n")
    node.put("/proc/sys/net/core/bpf_jit_enable", "1\n")
    node.put("/boot/config-%s" % release,
             gzip.decompress((FIXTURES / "talos-6.6.62-config-amd64.gz").read_bytes()).decode())
    node.put("/proc/self/mountinfo", fixture("build-host-mountinfo-bpffs.txt"))
    ebpf = {"datapath": "cilium", "features": ["native-routing", "netkit"], "persist_bpffs": False,
            "interfaces": [{"name": "veth0", "fabric": "rdma", "mtu": 1500}]}
    section = gathered(node, [], FakeRunner([ip_veth], which={"ip": IP}), ebpf=ebpf)["ebpf"]
    assert section["ready"] is False and section["features"] == {"native-routing": True, "netkit": False}
    found = audit({"ebpf": section}, ebpf_readiness=ebpf)
    errors = [f for f in found if f["severity"] == "error"]
    # Cilium needs 6.8 for netkit and the 6.6 config has no CONFIG_NETKIT: both named
    assert [(f["check"], f["key"], f["kind"]) for f in errors] == [
        ("ebpf-kernel", "kernel.netkit", "finding"), ("ebpf-kernel-config", "kernel-config.netkit", "finding")]
    assert "CONFIG_NETKIT" in errors[1]["reason"]
    # no plan part, no finding
    assert audit({"ebpf": section}) == []
    assert json.dumps(found)  # plain data for audit.json
