"""link_mtu, roce_qos, nic_firmware and verify roles through real ansible-playbook on lab nodes.

Lab nodes have veth NICs (`eno1` on mgmt:1500, `ens1f0np0` on rdma:9000) on per-fabric bridges;
`set_port_mtu` shrinks a node's switch port to simulate a misconfigured switch. Every MTU and
file a test changes is restored in a `finally`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from labtools import REPO, LabHandle

pytestmark = pytest.mark.lab

PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "network_roles.yml")
MTU_TASK = "Set and persist the MTU of every planned interface in one call"
QOS_TASK = "Configure lossless RoCE QoS on every planned interface in one call"
FW_TASK = "Collect NIC firmware facts and compliance (never flashes)"
FW_FAIL_TASK = "Fail once with every out-of-policy NIC of every host"
PATH_TASK = "Ping every peer on every fabric at the fabric MTU and 1500, don't-fragment, in one call"
VERIFY_FAIL_TASK = "Fail when a pair fails at its fabric MTU"
RDMA, MGMT = "ens1f0np0", "eno1"
NETWORKD_LINK = f"/etc/systemd/network/10-aiinfra-{RDMA}.link"
IFUPDOWN_FILE = f"/etc/network/interfaces.d/aiinfra-{RDMA}"
QOS_FILES = ("/etc/aiinfra-datapath/roce_qos.json", "/etc/systemd/system/aiinfra-roce-qos.service",
             "/usr/local/libexec/aiinfra-datapath/roce-qos-apply")


def interfaces(rdma: int = 9000, mgmt: int | None = None) -> list[dict[str, Any]]:
    items = [{"name": RDMA, "match": {"name": RDMA}, "fabric": "rdma", "mtu": rdma}]
    if mgmt is not None:
        items.insert(0, {"name": MGMT, "match": {"name": MGMT}, "fabric": "mgmt", "mtu": mgmt})
    return items


def plan(ifaces: list[dict[str, Any]] | None = None, qos: list[dict[str, Any]] | None = None,
         policies: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"link_mtu": {"interfaces": ifaces if ifaces is not None else interfaces()},
            "roce_qos": {"interfaces": qos or []}, "nic_firmware": {"policies": policies or []}}


def mtus(lab: LabHandle, node: str) -> dict[str, int]:
    links = json.loads(lab.sh(node, "ip -j link").stdout)
    return {link["ifname"]: link["mtu"] for link in links}


def set_mtu(lab: LabHandle, node: str, ifname: str, mtu: int) -> None:
    lab.sh(node, f"ip link set dev {ifname} mtu {mtu}", check=False)


def files(lab: LabHandle, node: str, *paths: str) -> dict[str, str | None]:
    out = {}
    for path in paths:
        proc = lab.sh(node, f"cat {path}", check=False)
        out[path] = proc.stdout if proc.returncode == 0 else None
    return out


def run(lab: LabHandle, roles: list[str], plans: dict[str, Any], limit: str | None = None,
        check: bool = False, **extra: Any):
    return lab.playbook(PLAYBOOK, check=check, diff=check, limit=limit,
                        extra_vars={"test_plans": plans, "test_roles": roles, **extra})


@pytest.fixture
def restore_mtus(lab: LabHandle) -> Iterator[None]:
    saved = {node: mtus(lab, node) for node in lab.nodes}
    try:
        yield
    finally:
        for node, links in saved.items():
            now = mtus(lab, node)
            for ifname in (MGMT, RDMA):
                if now.get(ifname) != links[ifname]:
                    set_mtu(lab, node, ifname, links[ifname])
            for port_fabric, mtu in (("rdma", 9000), ("mgmt", 1500)):
                lab.lab.set_port_mtu(node, port_fabric, mtu)


def test_link_mtu_networkd_set_persisted_idempotent_and_check_mode(lab: LabHandle, restore_mtus: None) -> None:
    plans = {n: plan(interfaces(rdma=4200)) for n in ("node1", "node2")}
    before = {n: mtus(lab, n) for n in ("node1", "node2")}
    try:
        # Check mode predicts the change and touches nothing: live MTU and files as before.
        result = run(lab, ["link_mtu"], plans, limit="node1,node2", check=True, link_mtu_persist="networkd")
        assert result.rc == 0, result.stdout[-3000:]
        res = result.task_results(MTU_TASK)["node1"]
        assert res["changed"] is True
        texts = [action["text"] for action in res["actions"]]
        assert f"ip link set dev {RDMA} mtu 4200" in texts
        assert f"write {NETWORKD_LINK}" in " ".join(texts)
        assert [(a["kind"], a["target"], a["after"]) for a in res["actions"] if a["kind"] == "mtu"] == [
            ("mtu", RDMA, 4200)]
        for node in ("node1", "node2"):
            assert mtus(lab, node) == before[node]
            assert files(lab, node, NETWORKD_LINK)[NETWORKD_LINK] is None

        # Real run: live MTU 4200 and a .link file in the node's own /etc.
        result = run(lab, ["link_mtu"], plans, limit="node1,node2", link_mtu_persist="networkd")
        assert result.rc == 0, result.stdout[-3000:]
        for node in ("node1", "node2"):
            assert mtus(lab, node)[RDMA] == 4200
            assert mtus(lab, node)[MGMT] == before[node][MGMT]
            content = files(lab, node, NETWORKD_LINK)[NETWORKD_LINK]
            assert content is not None and "MTUBytes=4200" in content
            assert f"OriginalName={RDMA}" in content
        res = result.task_results(MTU_TASK)["node1"]
        assert res["persist"]["backend"] == "networkd"
        assert [(r["name"], r["mtu_before"], r["mtu"]) for r in res["interfaces"]] == [(RDMA, 9000, 4200)]
        # node3/node4 are untouched
        assert mtus(lab, "node3")[RDMA] == 9000
        assert files(lab, "node3", NETWORKD_LINK)[NETWORKD_LINK] is None

        # Second run: nothing to do.
        result = run(lab, ["link_mtu"], plans, limit="node1,node2", link_mtu_persist="networkd")
        assert result.rc == 0, result.stdout[-3000:]
        assert result.changed_hosts() == {"node1": 0, "node2": 0}

        # And back to 9000 through the role: the file follows.
        back = {n: plan(interfaces(rdma=9000)) for n in ("node1", "node2")}
        result = run(lab, ["link_mtu"], back, limit="node1,node2", link_mtu_persist="networkd")
        assert result.rc == 0, result.stdout[-3000:]
        for node in ("node1", "node2"):
            assert mtus(lab, node)[RDMA] == 9000
            assert "MTUBytes=9000" in (files(lab, node, NETWORKD_LINK)[NETWORKD_LINK] or "")
    finally:
        for node in ("node1", "node2"):
            lab.sh(node, f"rm -f {NETWORKD_LINK}", check=False)


def test_link_mtu_ifupdown_detected_and_persisted(lab: LabHandle, restore_mtus: None) -> None:
    node = "node3"
    had_main = lab.sh(node, "test -e /etc/network/interfaces", check=False).returncode == 0
    assert not had_main, "lab node unexpectedly has /etc/network/interfaces"
    try:
        lab.sh(node, "mkdir -p /etc/network/interfaces.d && printf '%s\\n' "
                     "'# written by test_network_lab' 'source /etc/network/interfaces.d/*' "
                     "'auto lo' 'iface lo inet loopback' > /etc/network/interfaces")
        plans = {node: plan(interfaces(rdma=4200))}
        result = run(lab, ["link_mtu"], plans, limit=node)  # persist: auto
        assert result.rc == 0, result.stdout[-3000:]
        res = result.task_results(MTU_TASK)[node]
        assert res["persist"]["backend"] == "ifupdown"
        assert mtus(lab, node)[RDMA] == 4200
        content = files(lab, node, IFUPDOWN_FILE)[IFUPDOWN_FILE]
        assert content is not None
        assert f"iface {RDMA} inet manual" in content and "mtu 4200" in content

        result = run(lab, ["link_mtu"], plans, limit=node)
        assert result.changed_hosts() == {node: 0}
    finally:
        lab.sh(node, f"rm -f /etc/network/interfaces {IFUPDOWN_FILE}; "
                     "rmdir /etc/network/interfaces.d 2>/dev/null; true", check=False)


def test_lockout_guard_refuses_the_connection_interface(lab: LabHandle, restore_mtus: None) -> None:
    node = "node4"
    plans = {node: plan(interfaces(rdma=9000, mgmt=1400))}
    result = run(lab, ["link_mtu"], plans, limit=node, link_mtu_persist="none")
    assert result.rc != 0
    res = result.task_results(MTU_TASK)[node]
    assert "refusing to change the MTU of the interface carrying the Ansible connection" in res["msg"]
    assert f"{MGMT} (1500 -> 1400)" in res["msg"]
    assert mtus(lab, node)[MGMT] == 1500

    # Allowed explicitly, with a peer that must keep answering: changed, verified.
    peer = lab.state["nodes"]["node1"]["interfaces"]["mgmt"]["address"]
    result = run(lab, ["link_mtu"], plans, limit=node, link_mtu_persist="none",
                 link_mtu_allow_connection_interface=True, link_mtu_verify_after=[peer])
    assert result.rc == 0, result.stdout[-3000:]
    res = result.task_results(MTU_TASK)[node]
    assert res["verified"] == {peer: True}
    assert MGMT in res["connection_interfaces"]
    assert mtus(lab, node)[MGMT] == 1400


def test_roce_qos_on_veth_is_unsupported_and_changes_nothing(lab: LabHandle) -> None:
    qos = [{"interface": RDMA, "match": {"name": RDMA}, "fabric": "rdma", "trust": "dscp",
            "pfc_priorities": [3], "dscp2prio": {"26": 3, "48": 6}, "ecn": {"rp": [3], "np": [3]},
            "cnp": {"dscp": 48, "priority": 6}, "roce_tos": 106, "roce_mode": "v2", "roce_mtu": 4096}]
    plans = {"node1": plan(qos=qos), "node2": plan(qos=[])}
    result = run(lab, ["roce_qos"], plans, limit="node1,node2")
    assert result.rc == 0, result.stdout[-3000:]
    res = result.task_results(QOS_TASK)
    assert res["node1"]["changed"] is False
    row = res["node1"]["interfaces"][0]
    assert row["interface"] == RDMA and row["supported"] is False
    assert "virtual interface" in row["reason"]
    assert res["node1"]["actions"] == [] and res["node1"]["persist"]["changes"] == []
    assert res["node2"].get("skipped") is True  # empty qos part: skipped cleanly
    assert result.changed_hosts() == {"node1": 0, "node2": 0}
    assert files(lab, "node1", *QOS_FILES) == {p: None for p in QOS_FILES}


def test_nic_firmware_unknown_on_veth_and_aggregated_only_when_demanded(lab: LabHandle) -> None:
    mlx = [{"driver": "mlx5_core", "psid": None, "min_version": "28.39.3560", "allowed": []}]
    plans = {"all": plan(policies=mlx)}
    result = run(lab, ["nic_firmware"], plans, nic_firmware_interfaces=[RDMA])
    assert result.rc == 0, result.stdout[-3000:]
    res = result.task_results(FW_TASK)
    assert sorted(res) == lab.nodes
    for node in lab.nodes:
        row = res[node]["compliance"][0]
        assert (row["interface"], row["status"], row["driver"]) == (RDMA, "unknown", "veth")
        assert "firmware version not reported" in row["reason"]
        assert res[node]["changed"] is False
    assert result.task_results(FW_FAIL_TASK)["node1"].get("skipped") is True

    # A policy for the veth driver demands a version the NIC cannot show: one failure after
    # every host reported, listing every node.
    demanding = {"all": plan(policies=[{"driver": "veth", "psid": None, "min_version": "1.0", "allowed": []}])}
    result = run(lab, ["nic_firmware"], demanding, nic_firmware_interfaces=[RDMA])
    assert result.rc != 0
    assert sorted(result.task_results(FW_TASK)) == lab.nodes
    fail = result.task_results(FW_FAIL_TASK)
    assert list(fail) == ["node1"]
    msg = fail["node1"]["msg"]
    assert msg[0] == "NIC firmware out of policy:"
    assert len(msg) == 1 + len(lab.nodes)
    for node, line in zip(sorted(lab.nodes), msg[1:], strict=True):
        assert line.startswith(f"{node} {RDMA} ")
        assert "has no firmware version" in line

    # fail_on_unknown lists it even without a policy for the driver.
    result = run(lab, ["nic_firmware"], plans, limit="node2", nic_firmware_interfaces=[RDMA],
                 nic_firmware_fail_on_unknown=True)
    assert result.rc != 0
    assert len(result.task_results(FW_FAIL_TASK)["node2"]["msg"]) == 2


def _report(path: str) -> dict[str, Any]:
    with open(path) as fh:
        return json.load(fh)


def test_verify_finds_exactly_the_misconfigured_port(lab: LabHandle, restore_mtus: None, tmp_path) -> None:
    plans = {"all": plan(interfaces(rdma=9000, mgmt=1500))}
    report = str(tmp_path / "verify.json")
    extra = {"verify_report_dir": str(tmp_path)}

    result = run(lab, ["verify"], plans, **extra)
    assert result.rc == 0, result.stdout[-3000:]
    data = _report(report)
    assert data["ok"] is True
    assert data["fabrics"]["rdma"] == {"mtu": 9000, "pairs": 12, "passed": 12, "failed": [], "ok": True}
    assert data["fabrics"]["mgmt"]["pairs"] == 12 and data["fabrics"]["mgmt"]["ok"] is True
    assert all(p["largest_mtu"] == p["mtu"] for p in data["paths"])
    node1 = result.task_results(PATH_TASK)["node1"]
    assert sorted(p["peer"] for p in node1["paths"] if p["fabric"] == "rdma") == ["node2", "node3", "node4"]
    assert {p["interface"] for p in node1["paths"]} == {MGMT, RDMA}

    lab.lab.set_port_mtu("node2", "rdma", 1500)
    try:
        result = run(lab, ["verify"], plans, **extra)
        assert result.rc != 0
        data = _report(report)
        assert data["ok"] is False
        rdma = data["fabrics"]["rdma"]
        failing = sorted((f["source"], f["peer"]) for f in rdma["failed"])
        expected = sorted([(n, "node2") for n in ("node1", "node3", "node4")]
                          + [("node2", n) for n in ("node1", "node3", "node4")])
        assert failing == expected
        assert rdma["passed"] == 6 and rdma["pairs"] == 12
        assert all(f["largest_mtu"] == 1500 and f["loss"] == 100 for f in rdma["failed"])
        assert data["fabrics"]["mgmt"]["ok"] is True
        for path in data["paths"]:
            at = {p["mtu"]: p for p in path["probes"]}
            assert at[1500]["ok"] is True
        msg = result.task_results(VERIFY_FAIL_TASK)["node1"]["msg"]
        assert len(msg) == 1 + 6
        assert "node1 -> node2 on rdma (MTU 9000): largest passing MTU 1500, 100% loss at 9000" in msg

        # Without failing: the facts still say the same.
        result = run(lab, ["verify"], plans, verify_fail_on_mtu=False, **extra)
        assert result.rc == 0, result.stdout[-3000:]
        assert not _report(report)["ok"]
    finally:
        lab.lab.set_port_mtu("node2", "rdma", 9000)

    result = run(lab, ["verify"], plans, **extra)
    assert result.rc == 0, result.stdout[-3000:]
    assert _report(report)["ok"] is True


def test_verify_ring_mode_samples_neighbours(lab: LabHandle, tmp_path) -> None:
    plans = {"all": plan(interfaces(rdma=9000))}
    result = run(lab, ["verify"], plans, verify_mode="ring", verify_ring_neighbours=1,
                 verify_report_dir=str(tmp_path))
    assert result.rc == 0, result.stdout[-3000:]
    res = result.task_results(PATH_TASK)
    peers = {node: [p["peer"] for p in res[node]["paths"]] for node in lab.nodes}
    assert peers == {"node1": ["node2"], "node2": ["node3"], "node3": ["node4"], "node4": ["node1"]}
    assert _report(str(tmp_path / "verify.json"))["fabrics"]["rdma"]["pairs"] == 4


def test_verify_playbook_with_a_given_plan(lab: LabHandle, tmp_path) -> None:
    # playbooks/verify.yml computes the plan from the spec unless datapath_plan is given.
    result = lab.playbook(os.path.join(REPO, "playbooks", "verify.yml"),
                          extra_vars={"datapath_plan": plan(interfaces(rdma=9000, mgmt=1500)),
                                      "verify_report_dir": str(tmp_path)})
    assert result.rc == 0, result.stdout[-3000:]
    data = _report(str(tmp_path / "verify.json"))
    assert data["ok"] is True and sorted(data["fabrics"]) == ["mgmt", "rdma"]
    # one NIC per fabric on the lab: every route leaves by its own NIC, no address has ARP flux
    assert data["summary"] == ["mgmt: MTU 1500, 12/12 paths pass", "rdma: MTU 9000, 12/12 paths pass",
                               "rails: 24 route check(s), 0 leave by another NIC; 0 address(es) with ARP flux"]
