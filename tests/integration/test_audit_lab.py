"""The drift audit on the lab: converged -> zero drift; hand-made drift -> exactly that, in all formats.

The lab's own spec (inventory group_vars/all/datapath.yml) is applied with the capability
roles (tests/integration/playbooks/audit_apply.yml), then playbooks/audit.yml runs for real
and under --check. One sysctl changed by hand on node2 (net.*: node2's own network namespace),
one MTU changed inside node3 and the model cache unmounted on node4 must be reported - no more,
no less - in audit.json (which validates against docs/schema/audit.schema.json), audit.xml
(JUnit) and audit.md, and the play must fail. Everything changed is restored; the global kernel values the roles raise
(vm.*, fs.*, kernel.*, the HugePage pool, THP) are put back at the end.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from labtools import REPO, LabHandle, PlayResult, spec_applied_then_restored

pytestmark = pytest.mark.lab

APPLY = os.path.join(REPO, "tests", "integration", "playbooks", "audit_apply.yml")
AUDIT = os.path.join(REPO, "playbooks", "audit.yml")
SCHEMA = os.path.join(REPO, "docs", "schema", "audit.schema.json")
K8S_NODE = Path(REPO) / "tests" / "fixtures" / "k8s" / "kubectl-get-node-cnfd1-worker-0.yaml"
FACTS_TASK = "Collect the live data-path state in one call"
MOUNT = "/mnt/model-cache"
FEATURES = "/etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath"
NODE_FILES = ("/etc/sysctl.d/90-aiinfra-datapath.conf", "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf", FEATURES)
GLOBAL_FILES = [f"/proc/sys/{k}" for k in ("fs/aio-max-nr", "fs/inotify/max_user_instances",
                                           "fs/inotify/max_user_watches", "kernel/pid_max", "vm/max_map_count",
                                           "vm/min_free_kbytes")] + [
    "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"]
THP = "/sys/kernel/mm/transparent_hugepage"
# Non-failing findings a converged lab node has: kernel arguments wait for a reboot the lab
# never does, global net.core keys are read-only in a node's namespace, veth has no DCB, the
# machine has no GPU (node_topology).
LAB_INFO_CHECKS = {"cmdline-pending", "sysctl-read-only", "sysctl-missing", "qos-unsupported", "no-gpu"}
CAPABILITIES = ["sysctl_profile", "hugepages", "kernel_cmdline", "link_mtu", "rail_routing", "roce_qos", "nic_firmware",
                "nic_config", "nvme_layout", "nic_affinity", "ebpf_readiness", "nfd_labels", "node_topology"]


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip()


def _thp(name: str) -> str:
    text = _read(f"{THP}/{name}")
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else text


@pytest.fixture(scope="module")
def converged(lab: LabHandle) -> Iterator[LabHandle]:
    """Apply the lab spec; afterwards restore the nodes and the host's global kernel values."""
    with spec_applied_then_restored(lab):
        result = lab.playbook(APPLY)
        assert result.rc == 0, result.stdout[-4000:]
        yield lab


def audit(lab: LabHandle, report_dir: Path, check: bool = False, **extra: Any) -> tuple[PlayResult, dict[str, Any]]:
    result = lab.playbook(AUDIT, check=check, extra_vars={"audit_report_dir": str(report_dir), **extra})
    report = json.loads((report_dir / "audit.json").read_text())
    with open(SCHEMA) as handle:
        jsonschema.Draft202012Validator(json.load(handle)).validate(report)
    return result, report


def failing(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(host, capability, key) of every finding that is not informational."""
    return sorted((f["host"], f["capability"], f["key"]) for f in report["findings"] if f["severity"] != "info")


def global_only(report: dict[str, Any]) -> bool:
    """Failing findings only on values the host kernel shares with every lab on this machine."""
    items = [f for f in report["findings"] if f["severity"] != "info"]
    return bool(items) and all(f["capability"] == "hugepages"
                               or (f["capability"] == "sysctl_profile" and not f["key"].startswith("net."))
                               for f in items)


def converged_audit(lab: LabHandle, report_dir: Path) -> tuple[PlayResult, dict[str, Any]]:
    """Audit; when only host-global values drifted (another lab's teardown on this shared
    kernel restores its own), re-apply once and audit again."""
    result, report = audit(lab, report_dir)
    if global_only(report):
        assert lab.playbook(APPLY).rc == 0
        result, report = audit(lab, report_dir)
    return result, report


def junit(report_dir: Path) -> dict[str, dict[str, ET.Element]]:
    root = ET.parse(report_dir / "audit.xml").getroot()
    assert root.tag == "testsuites"
    return {suite.get("name", ""): {case.get("name", ""): case for case in suite.findall("testcase")}
            for suite in root.findall("testsuite")}


def test_audit_converged_then_exactly_the_hand_made_drift(converged: LabHandle, tmp_path: Path) -> None:
    lab = converged
    # 1. Converged: no drift that fails, nothing but the lab's informational findings.
    clean_dir = tmp_path / "clean"
    result, report = converged_audit(lab, clean_dir)
    assert result.rc == 0, result.stdout[-4000:]
    assert report["failed"] is False
    assert failing(report) == [], json.dumps(report["findings"], indent=1)[:4000]
    assert {f["check"] for f in report["findings"]} <= LAB_INFO_CHECKS
    assert [h["status"] for h in report["hosts"]] == ["pass"] * 4
    cases = junit(clean_dir)
    assert sorted(cases) == lab.nodes and all(list(c) == CAPABILITIES for c in cases.values())
    assert not [n for n, c in cases.items() for case in c.values() if case.find("failure") is not None]
    assert "passed (fail on: drift)" in (clean_dir / "audit.md").read_text()
    # The facts module changes nothing and reports the plan's sections.
    facts = result.task_results(FACTS_TASK)
    assert all(r["changed"] is False for r in facts.values())
    assert facts["node1"]["ansible_facts"]["datapath_facts"]["numa_nodes"] >= 1
    # The lab has no GPU: the topology says so, the audit has one info finding per node for it.
    assert facts["node1"]["ansible_facts"]["datapath_facts"]["topology"]["gpus"] == []
    assert sorted(f["host"] for f in report["findings"] if f["check"] == "no-gpu") == lab.nodes

    # 2. One sysctl by hand on node2, one MTU inside node3, the cache unmounted on node4.
    probing = lab.sh("node2", "cat /proc/sys/net/ipv4/tcp_mtu_probing").stdout.strip()
    assert probing == "1"
    lab.sh("node2", "echo 0 > /proc/sys/net/ipv4/tcp_mtu_probing")
    lab.sh("node3", "ip link set dev ens1f0np0 mtu 4000")
    lab.sh("node4", f"umount {MOUNT}")
    try:
        drift_dir = tmp_path / "drift"
        result, report = audit(lab, drift_dir)
        assert result.rc != 0, "audit_fail_on=drift must fail the play"
        assert failing(report) == [("node2", "sysctl_profile", "net.ipv4.tcp_mtu_probing"),
                                   ("node3", "link_mtu", "ens1f0np0"), ("node4", "nvme_layout", MOUNT)], \
            json.dumps([f for f in report["findings"] if f["severity"] != "info"], indent=1)
        by_key = {f["key"]: f for f in report["findings"] if f["severity"] != "info"}
        probing_finding = by_key["net.ipv4.tcp_mtu_probing"]
        assert (probing_finding["wanted"], probing_finding["actual"]) == ("1", "0")
        assert (by_key["ens1f0np0"]["wanted"], by_key["ens1f0np0"]["actual"]) == (9000, 4000)
        assert all(f["kind"] == "drift" and f["severity"] == "error" for f in by_key.values())
        assert (by_key[MOUNT]["check"], by_key[MOUNT]["actual"]) == ("mount-missing", "not mounted")
        assert report["failed"] is True and report["summary"]["failing"] == 3
        assert [(h["name"], h["status"]) for h in report["hosts"]] == [
            ("node1", "pass"), ("node2", "fail"), ("node3", "fail"), ("node4", "fail")]
        # JUnit: exactly the three test cases fail.
        cases = junit(drift_dir)
        failed = sorted((n, name) for n, c in cases.items() for name, case in c.items()
                        if case.find("failure") is not None)
        assert failed == [("node2", "sysctl_profile"), ("node3", "link_mtu"), ("node4", "nvme_layout")]
        root = ET.parse(drift_dir / "audit.xml").getroot()
        assert root.get("tests") == str(4 * len(CAPABILITIES)) and root.get("failures") == "3"
        # Markdown: the three rows, errors first, in their capability tables.
        md = (drift_dir / "audit.md").read_text()
        assert "FAILED (fail on: drift)" in md
        rows = [line for line in md.splitlines() if line.startswith("| error")]
        assert len(rows) == 3
        assert any("| node2 | net.ipv4.tcp_mtu_probing | 1 | 0 |" in r for r in rows)
        assert any("| node3 | ens1f0np0 | 9000 | 4000 |" in r for r in rows)
        assert any(f"| node4 | {MOUNT} | mounted | not mounted |" in r for r in rows)
        headings = [line[3:] for line in md.splitlines() if line.startswith("## ")]
        assert set(headings[:3]) == {"sysctl_profile", "link_mtu", "nvme_layout"}

        # --check: the same report, nothing changed on the nodes; audit_fail_on=never passes.
        check_dir = tmp_path / "check"
        result, checked = audit(lab, check_dir, check=True, audit_fail_on="never")
        assert result.rc == 0, result.stdout[-3000:]
        assert failing(checked) == failing(report) and checked["failed"] is False
        for host, stats in result.data.get("stats", {}).items():
            assert host == "node1" or stats.get("changed", 0) == 0, (host, stats)
        assert lab.sh("node3", "cat /sys/class/net/ens1f0np0/mtu").stdout.strip() == "4000"
        assert lab.sh("node2", "cat /proc/sys/net/ipv4/tcp_mtu_probing").stdout.strip() == "0"
        assert lab.sh("node4", f"findmnt -n {MOUNT}", check=False).returncode != 0
    finally:
        lab.sh("node2", "echo 1 > /proc/sys/net/ipv4/tcp_mtu_probing", check=False)
        lab.sh("node3", "ip link set dev ens1f0np0 mtu 9000", check=False)
        lab.sh("node4", f"findmnt -n {MOUNT} >/dev/null || mount {MOUNT}", check=False)

    # 3. Restored: back to no drift.
    result, report = converged_audit(lab, tmp_path / "restored")
    assert result.rc == 0 and failing(report) == []


def test_golden_topology_and_kubelets_hugepages_through_the_audit_role(converged: LabHandle, tmp_path: Path) -> None:
    """The spec names a golden topology class; the audit role reads topology-golden/CLASS.json and a
    saved node list, and writes each host's fingerprint (reports/topology/HOST.json)."""
    lab = converged
    spec = yaml.safe_load((Path(lab.inventory).parent / "group_vars" / "all" / "datapath.yml").read_text())
    spec["datapath"]["profiles"][0]["topology"] = {"golden": "lab-node"}
    # The recorded Node object (tests/fixtures/k8s, a real OpenShift worker) renamed to each lab node,
    # its 2 MiB capacity set as each kubelet would report it: 128Mi = the lab's 64 pages; node4's kubelet
    # "started before the pool was reserved" (0). Constructed from the recording, labelled so.
    recorded = yaml.safe_load(K8S_NODE.read_text())
    items = []
    for node in lab.nodes:
        item = json.loads(json.dumps(recorded))
        item["metadata"]["name"] = node
        item["status"]["capacity"]["hugepages-2Mi"] = "0" if node == "node4" else "128Mi"
        item["status"]["capacity"].pop("hugepages-1Gi")
        items.append(item)
    nodes_file = tmp_path / "nodes.json"
    nodes_file.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": items}))
    golden_dir = tmp_path / "golden"
    golden_dir.mkdir()
    extra = {"datapath": spec["datapath"], "audit_topology_golden_dir": str(golden_dir),
             "audit_k8s_nodes_file": str(nodes_file)}

    # 1. No golden file yet: one error per node naming the file to create; the fingerprints are written.
    first = tmp_path / "first"
    result, report = audit(lab, first, **extra)
    assert result.rc != 0
    golden = sorted((f["host"], f["key"]) for f in report["findings"] if f["check"] == "golden-topology")
    assert golden == [(node, "golden") for node in lab.nodes], golden
    kubelet = [(f["host"], f["key"], f["wanted"], f["actual"]) for f in report["findings"]
               if f["check"] == "kubelet-hugepages"]
    assert kubelet == [("node4", "hugepages-2Mi", "128Mi", "0")], kubelet  # the lab's 64 x 2 MiB pool
    prints = {p.stem: json.loads(p.read_text()) for p in (first / "topology").glob("*.json")}
    pci = [d for d in os.listdir("/sys/bus/pci/devices")
           if open(f"/sys/bus/pci/devices/{d}/class").read().startswith(("0x02", "0x0108", "0x03"))]
    if not pci:
        pytest.skip("this machine has no PCI NIC, NVMe or GPU: the lab nodes have no fingerprint")
    assert sorted(prints) == lab.nodes
    assert all(p == prints["node1"] for p in prints.values())  # one machine: one class

    # 2. node1's fingerprint as the class's golden one, plus a GPU the class has and the lab lacks
    # (constructed): each node reports exactly that GPU missing, nothing else.
    golden_file = dict(prints["node1"])
    golden_file["gpus"] = [{"index": 0, "pci": "0000:17:00.0", "vendor": "0x10de", "device": "0x2330",
                            "numa_node": 0, "root_port": None, "link_cap": "x16 32.0 GT/s", "name": None,
                            "nearest_nics": {"pci": [], "relation": None},
                            "nearest_nvme": {"pci": [], "relation": None}}]
    (golden_dir / "lab-node.json").write_text(json.dumps(golden_file))
    result, report = audit(lab, tmp_path / "second", **extra)
    golden = sorted((f["host"], f["key"], f["severity"]) for f in report["findings"] if f["check"] == "golden-topology")
    assert golden == [(node, "0000:17:00.0", "error") for node in lab.nodes], golden
    md = (tmp_path / "second" / "audit.md").read_text()
    assert "GPU0 (0000:17:00.0) of the golden topology lab-node is missing" in md
