"""The audit filters: thin wrappers with Ansible errors; the docs render with ansible-doc."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter import drift_audit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
# the converged plan/facts pair of the comparison tests (tests/unit/plugins is not a package)
_SPEC = importlib.util.spec_from_file_location(
    "audit_test_data", os.path.join(REPO, "tests", "unit", "plugins", "plugin_utils", "audit", "_data.py"))
assert _SPEC is not None and _SPEC.loader is not None
_DATA = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_DATA)
facts, plan = _DATA.facts, _DATA.plan


def test_filter_names() -> None:
    assert set(drift_audit.FilterModule().filters()) == {"audit_findings", "audit_reports", "topology_fingerprint",
                                                         "topology_golden_files", "k8s_node"}


def test_golden_files_are_read_by_class_and_a_missing_directory_is_none_yet(tmp_path) -> None:
    assert drift_audit.topology_golden_files(str(tmp_path / "absent")) == {}
    (tmp_path / "h100-sxm.json").write_text('{"format": "aiinfra.datapath/topology-golden/1", "gpus": []}')
    (tmp_path / "notes.txt").write_text("not a golden file")
    assert drift_audit.topology_golden_files(str(tmp_path)) == {
        "h100-sxm": {"format": "aiinfra.datapath/topology-golden/1", "gpus": []}}
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(AnsibleFilterError, match="broken.json"):
        drift_audit.topology_golden_files(str(tmp_path))


def test_audit_findings_and_reports() -> None:
    f = facts()
    f["interfaces"]["ens1f0np0"]["mtu"] = 4000
    findings = drift_audit.audit_findings(plan(), f, None, 100, None, True, "node1")
    assert [(x["capability"], x["key"]) for x in findings] == [("link_mtu", "ens1f0np0")]
    assert drift_audit.audit_findings(plan(), facts()) == []
    bundle = drift_audit.audit_reports({"node1": findings, "node2": None}, "drift", {"rtt_us": 100}, "t")
    report = json.loads(bundle["files"]["audit.json"])
    assert report["failed"] is True and report["generated_at"] == "t"
    assert [(h["name"], h["status"]) for h in report["hosts"]] == [("node1", "fail"), ("node2", "unreachable")]


def test_errors_are_filter_errors() -> None:
    with pytest.raises(AnsibleFilterError, match="plan"):
        drift_audit.audit_findings("nope", facts())
    with pytest.raises(AnsibleFilterError, match="rtt_us"):
        drift_audit.audit_findings(plan(), facts(), None, -1)
    with pytest.raises(AnsibleFilterError, match="fail_on"):
        drift_audit.audit_reports({"node1": []}, "sometimes")
    with pytest.raises(AnsibleFilterError, match="list"):
        drift_audit.audit_reports({"node1": "x"})
    with pytest.raises(AnsibleFilterError, match="map each host"):
        drift_audit.audit_reports(["node1"])


@pytest.mark.parametrize("name", ["audit_findings", "audit_reports"])
def test_filter_docs_render(name: str) -> None:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "-t", "filter",
                           f"aiinfra.datapath.{name}"], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert name in proc.stdout


def test_audit_findings_include_the_topology() -> None:
    # a node_topology result of a node without GPUs (shape: plugins/modules/node_topology.py RETURN)
    f = facts()
    f["topology"] = {"gpus": [], "nics": [{"name": "eth0", "pci": "0000:00:03.0", "rdma": [], "link": {}}],
                     "nvme": [], "bridges": {}, "gpudirect": {"rdma": False, "storage": False}}
    found = drift_audit.audit_findings(plan(), f, None, 100, None, True, "node1")
    assert [(x["capability"], x["check"], x["severity"]) for x in found] == [("node_topology", "no-gpu", "info")]
    p = plan()
    p["node_topology"] = {"gpus": 8}
    found = drift_audit.audit_findings(p, f, None, 100, None, True, "node1")
    assert [(x["check"], x["wanted"], x["actual"], x["severity"]) for x in found] == [("gpu-count", 8, 0, "error")]
    report = json.loads(drift_audit.audit_reports({"node1": found}, "drift")["files"]["audit.json"])
    assert report["failed"] is True and report["by_capability"]["node_topology"]["error"] == 1
