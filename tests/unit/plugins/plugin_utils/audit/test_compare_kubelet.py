"""kubelet-hugepages: each kernel HugePage pool against the capacity kubelet advertises.

The Node object is recorded (tests/fixtures/k8s/kubectl-get-node-cnfd1-worker-0.yaml, a real
OpenShift 4.6 bare-metal worker: hugepages-1Gi 1Gi, hugepages-2Mi 256Mi; see its .source); it goes
through the audit role's own path: the file read as YAML, the node picked by the k8s_node filter,
then audit_findings. The kernel side is the converged facts of the other audit tests with the
pools set to what the scenario needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter import drift_audit
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.audit.compare import quantity_bytes, quantity_text

from ._data import facts, plan

FIXTURE = Path(__file__).resolve().parents[4] / "fixtures" / "k8s" / "kubectl-get-node-cnfd1-worker-0.yaml"
NAME = "cnfd1-worker-0.fci1.kni.lab.eng.bos.redhat.com"


def recorded_node() -> dict[str, Any]:
    node = drift_audit.k8s_node([yaml.safe_load(FIXTURE.read_text())], NAME)
    assert node is not None
    return node


def with_pools(two_mb: int, one_gb: int) -> dict[str, Any]:
    f = facts()
    f["hugepages"]["pools"]["2M"].update(total=two_mb, free=two_mb, per_node={"0": {"total": two_mb, "free": two_mb}})
    f["hugepages"]["pools"]["1G"].update(total=one_gb, free=one_gb, per_node={"0": {"total": one_gb, "free": one_gb}})
    return f


def kubelet(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f["check"] == "kubelet-hugepages"]


def test_pools_kubelet_advertises_as_the_kernel_holds_them_are_no_finding() -> None:
    # 128 x 2 MiB = 256Mi and 1 x 1 GiB = 1Gi: what the recorded node's kubelet advertises
    assert kubelet(drift_audit.audit_findings(plan(), with_pools(128, 1), k8s_node=recorded_node())) == []


def test_a_pool_reserved_after_kubelet_started_is_an_error_naming_both_sides() -> None:
    found = kubelet(drift_audit.audit_findings(plan(), with_pools(512, 1), host="node1", k8s_node=recorded_node()))
    assert [(f["key"], f["wanted"], f["actual"], f["severity"], f["capability"]) for f in found] == [
        ("hugepages-2Mi", "1Gi", "256Mi", "error", "hugepages")]
    assert found[0]["reason"].startswith(f"kubelet on Node {NAME} advertises hugepages-2Mi: 256Mi, the kernel "
                                         "holds 1Gi (512 x 2M)")
    assert "restart kubelet" in found[0]["fix"]


def test_a_pool_the_kernel_gave_back_is_still_advertised() -> None:
    found = kubelet(drift_audit.audit_findings(plan(), with_pools(128, 0), k8s_node=recorded_node()))
    assert [(f["key"], f["wanted"], f["actual"]) for f in found] == [("hugepages-1Gi", "0", "1Gi")]


def test_a_pool_kubelet_does_not_list_is_reported_as_advertising_nothing() -> None:
    node = recorded_node()
    del node["status"]["capacity"]["hugepages-1Gi"]
    found = kubelet(drift_audit.audit_findings(plan(), with_pools(128, 2), k8s_node=node))
    assert [(f["key"], f["wanted"], f["actual"]) for f in found] == [("hugepages-1Gi", "2Gi", None)]
    assert "advertises hugepages-1Gi: nothing" in found[0]["reason"]


def test_without_a_node_object_nothing_is_compared() -> None:
    assert kubelet(drift_audit.audit_findings(plan(), with_pools(512, 0))) == []
    assert drift_audit.k8s_node({"kind": "NodeList", "items": []}, NAME) is None
    assert drift_audit.k8s_node({"kind": "NodeList"}, NAME) is None


def test_bad_inputs_are_ansible_errors() -> None:
    with pytest.raises(AnsibleFilterError, match="NodeList"):
        drift_audit.k8s_node("not a list", NAME)
    with pytest.raises(AnsibleFilterError, match="one Node object"):
        drift_audit.audit_findings(plan(), facts(), k8s_node=["a", "list"])
    with pytest.raises(AnsibleFilterError, match="golden"):
        drift_audit.audit_findings(plan(), facts(), golden=["a", "list"])


@pytest.mark.parametrize(("text", "count"), [("1Gi", 2**30), ("256Mi", 256 * 2**20), ("0", 0), ("2048", 2048),
                                             ("1G", 10**9), ("1.5Gi", 3 * 2**29), ("nonsense", None), (None, None)])
def test_kubernetes_quantities(text: Any, count: int | None) -> None:
    assert quantity_bytes(text) == count


def test_canonical_quantities_as_kubelet_names_resources() -> None:
    assert [quantity_text(n) for n in (2 * 2**20, 2**30, 64 * 2**10, 0, 16 * 2**30)] == ["2Mi", "1Gi", "64Ki", "0",
                                                                                         "16Gi"]
