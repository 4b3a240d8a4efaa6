"""roce_qos: dcb and mlnx_qos backends over recorded output, ECN/CNP sysfs and rdma_cm configfs trees."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _roce_qos
from ansible_collections.aiinfra.datapath.plugins.module_utils import _roce_qos_boot as boot
from ansible_collections.aiinfra.datapath.plugins.modules import roce_qos
from capability_results import diff_entry, kinds, texts
from netfakes import FakeDcb, FakeMlnxQos, FakeRunner, fixture, fresh_warnings, nic, rdma_cm, use

DCB = "/usr/sbin/dcb"
MLNX = "/usr/bin/mlnx_qos"
NET = "/sys/class/net/ens1f0np0"
CM = "/sys/kernel/config/rdma_cm/mlx5_0/ports/1"

QOS = {"interface": "ens1f0np0", "fabric": "rail0", "trust": "dscp", "pfc_priorities": [3],
       "dscp2prio": {"26": 3, "48": 6},
       "ets": {"prio_tc": [0, 1, 2, 3, 4, 5, 6, 7], "tsa": ["ets", "ets", "ets", "ets", "ets", "ets", "strict", "ets"],
               "bw": [10, 10, 10, 50, 10, 0, 0, 10]},
       "ecn": {"rp": [3], "np": [3]}, "cnp": {"dscp": 48, "priority": 6}, "roce_tos": 106, "roce_mode": "v2",
       "roce_mtu": 4096}


@pytest.fixture
def tree(node):
    nic(node, "ens1f0np0", mtu=9000)
    rdma_cm(node)
    node.path("/proc/1").mkdir(parents=True)
    node.put("/proc/1/comm", "systemd\n")
    return node


def fake(monkeypatch, *devices, dcb=True, mlnx=False):
    which = {"dcb": DCB if dcb else None, "mlnx_qos": MLNX if mlnx else None}
    runner = FakeRunner(list(devices), which=which)
    use(monkeypatch, runner)
    return runner


def args(node, items, **extra):
    base = {"interfaces": items, "root": str(node.root)}
    base.update(extra)
    return base


def test_dcb_backend_full_run_then_idempotent(run_module, tree, monkeypatch):
    dev = FakeDcb("ens1f0np0", pfc=fixture("dcb/pfc-show.json"))
    fake(monkeypatch, dev)
    result = run_module(roce_qos.main, args(tree, [QOS]), diff=True)
    row = result["interfaces"][0]
    assert row["supported"] is True and row["backend"] == "dcb" and row["rdma_device"] == "mlx5_0"
    assert row["dcbx_owner"] == "os"
    # PFC already 3:on in the recorded JSON: not re-set
    assert [c[1] for c in dev.sets] == ["apptrust", "app", "ets"]
    assert dev.sets[0] == [DCB, "apptrust", "set", "dev", "ens1f0np0", "order", "dscp", "pcp"]
    assert dev.sets[1] == [DCB, "app", "replace", "dev", "ens1f0np0", "dscp-prio", "26:3", "48:6"]
    assert tree.get(NET + "/ecn/roce_rp/enable/3").strip() == "1"
    assert tree.get(NET + "/ecn/roce_rp/enable/0").strip() == "0"
    assert tree.get(NET + "/ecn/roce_np/enable/5").strip() == "0"
    assert tree.get(NET + "/ecn/roce_np/cnp_dscp").strip() == "48"
    assert tree.get(NET + "/ecn/roce_np/cnp_802p_prio").strip() == "6"
    assert tree.get(CM + "/default_roce_mode").strip() == "RoCE v2"
    assert tree.get(CM + "/default_roce_tos").strip() == "106"
    assert "write %s/default_roce_tos = 106" % CM in texts(result)
    settings = diff_entry(result, "RoCE QoS settings")
    assert "ens1f0np0 trust = pcp\n" in settings["before"]
    assert 'ens1f0np0 dscp2prio = {"26": 3, "48": 6}\n' in settings["after"]
    assert "%s/default_roce_tos = 106\n" % CM in diff_entry(result, "sysfs and configfs")["after"]
    assert diff_entry(result, boot.STATE_FILE)["before"] == ""
    assert kinds(result) == ["command"] * 3 + ["sysfs"] * 18 + ["file"] * 3 + ["link"]
    # persistence: state, script, unit, enabled
    state = json.loads(tree.get(boot.STATE_FILE))
    steps = state["interfaces"]["ens1f0np0"]["steps"]
    assert steps[0] == {"op": "run", "argv": [DCB, "apptrust", "set", "dev", "ens1f0np0", "order", "dscp", "pcp"]}
    assert {"op": "write", "path": CM + "/default_roce_tos", "value": "106"} in steps
    assert any(s["op"] == "run" and s["argv"][1] == "pfc" for s in steps)  # full replay, not the diff
    assert os.stat(tree.path(boot.APPLY_SCRIPT)).st_mode & 0o777 == 0o755
    assert "ExecStart=%s %s" % (boot.APPLY_SCRIPT, boot.STATE_FILE) in tree.get(boot.UNIT_FILE)
    assert os.readlink(tree.path(boot.UNIT_LINK)) == boot.UNIT_FILE

    dev.sets.clear()
    again = run_module(roce_qos.main, args(tree, [QOS]))
    assert again["changed"] is False and again["actions"] == [] and dev.sets == []


def test_check_mode_touches_nothing(run_module, tree, monkeypatch):
    dev = FakeDcb("ens1f0np0")
    runner = fake(monkeypatch, dev)
    before = tree.snapshot()
    result = run_module(roce_qos.main, args(tree, [QOS]), check_mode=True)
    assert result["changed"] is True
    assert "%s pfc set dev ens1f0np0 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off" % DCB in texts(result)
    assert "write %s" % boot.STATE_FILE in texts(result)
    assert dev.sets == [] and runner.commands == []
    assert tree.snapshot() == before


def test_mlnx_qos_backend_with_vendor_driver(run_module, node, monkeypatch):
    nic(node, "ens1f0np0", vendor_qos=True)
    rdma_cm(node)
    dev = FakeMlnxQos("ens1f0np0")
    fake(monkeypatch, dev, dcb=True, mlnx=True)
    item = dict(QOS, dscp2prio={"26": 3, "48": 6, "46": 4})
    result = run_module(roce_qos.main, args(node, [item], persist=False))
    assert result["interfaces"][0]["backend"] == "mlnx_qos"
    assert dev.sets[0] == [MLNX, "-i", "ens1f0np0", "--trust", "dscp"]
    assert dev.sets[1] == [MLNX, "-i", "ens1f0np0", "--dscp2prio", "set,46,4"]
    assert dev.sets[2] == [MLNX, "-i", "ens1f0np0", "--pfc", "0,0,0,1,0,0,0,0"]
    assert dev.sets[3][3] == "-p"
    assert not node.exists(boot.STATE_FILE)
    assert run_module(roce_qos.main, args(node, [item], persist=False))["changed"] is False


def test_firmware_dcbx_and_lldpad_are_reported(run_module, node, monkeypatch):
    nic(node, "ens1f0np0", vendor_qos=True)
    node.put("/proc/4242/comm", "lldpad\n")
    warnings = fresh_warnings(monkeypatch)
    fake(monkeypatch, FakeMlnxQos("ens1f0np0", dcbx="Firmware controlled"), mlnx=True)
    item = {"interface": "ens1f0np0", "pfc_priorities": [3]}
    result = run_module(roce_qos.main, args(node, [item], persist=False))
    assert result["interfaces"][0]["dcbx_owner"] == "firmware"
    assert any("DCBX is owned by firmware and lldpad" in w for w in warnings())


def test_veth_unsupported_no_traceback_no_change(run_module, node, monkeypatch):
    nic(node, "v0", pci=None)
    runner = fake(monkeypatch, FakeDcb("v0", unsupported=fixture("dcb/veth-unsupported.stderr.txt").strip()))
    result = run_module(roce_qos.main, args(node, [dict(QOS, interface="v0")]))
    row = result["interfaces"][0]
    assert row["supported"] is False and "virtual interface" in row["reason"]
    assert result["changed"] is False and result["actions"] == []
    assert runner.calls == []
    assert not node.exists(boot.STATE_FILE)


def test_device_answering_operation_not_supported(run_module, node, monkeypatch):
    nic(node, "ens1f0np0", ecn=False)
    fake(monkeypatch, FakeDcb("ens1f0np0", unsupported=fixture("dcb/veth-unsupported.stderr.txt").strip()))
    result = run_module(roce_qos.main, args(node, [QOS]))
    row = result["interfaces"][0]
    assert row == dict(row, supported=False, changed=False,
                       reason="dcb: Attribute read: Operation not supported")
    assert result["changed"] is False


def test_lld_managed_dcbx_reported(run_module, tree, monkeypatch):
    warnings = fresh_warnings(monkeypatch)
    fake(monkeypatch, FakeDcb("ens1f0np0", dcbx='{"lld_managed":true,"ieee":true}'))
    result = run_module(roce_qos.main, args(tree, [{"interface": "ens1f0np0", "pfc_priorities": [3]}]),
                        check_mode=True)
    assert result["interfaces"][0]["dcbx_owner"] == "lld_managed"
    assert any("DCBX is owned by lld_managed" in w for w in warnings())


def test_roce_mtu_checked_against_link_mtu(run_module, node, monkeypatch):
    nic(node, "ens1f0np0", mtu=1500)
    fake(monkeypatch, FakeDcb("ens1f0np0"))
    result = run_module(roce_qos.main, args(node, [{"interface": "ens1f0np0", "roce_mtu": 4096}], persist=False))
    assert any("gives RoCE MTU 1024, plan expects 4096" in n for n in result["interfaces"][0]["notes"])


def test_explicit_backend_missing(run_module, tree, monkeypatch):
    fake(monkeypatch, FakeDcb("ens1f0np0"))
    result = run_module(roce_qos.main, args(tree, [QOS], backend="mlnx_qos"))
    assert result["interfaces"][0]["reason"] == "mlnx_qos is not installed"
    assert result["changed"] is False


def test_no_tool_installed(run_module, tree, monkeypatch):
    fake(monkeypatch, dcb=False)
    result = run_module(roce_qos.main, args(tree, [QOS]))
    assert result["interfaces"][0]["reason"] == "neither iproute2 dcb nor mlnx_qos is installed"


def test_inbox_driver_without_ecn_sysfs_and_configfs(run_module, node, monkeypatch):
    nic(node, "ens1f0np0", ecn=False)
    warnings = fresh_warnings(monkeypatch)
    fake(monkeypatch, FakeDcb("ens1f0np0"))
    result = run_module(roce_qos.main, args(node, [QOS], persist=False))
    notes = result["interfaces"][0]["notes"]
    assert any("ecn is absent" in n for n in notes)
    assert any("rdma_cm is absent" in n for n in notes)
    assert any("ecn is absent" in w for w in warnings())
    assert result["changed"] is True  # the DCB part still applied


def test_rdma_cm_group_created_like_cma_roce_mode(run_module, node, monkeypatch):
    nic(node, "ens1f0np0")
    node.path("/sys/kernel/config/rdma_cm").mkdir(parents=True)
    fake(monkeypatch, FakeDcb("ens1f0np0"))
    item = {"interface": "ens1f0np0", "roce_mode": "v2", "roce_tos": 106}
    check = run_module(roce_qos.main, args(node, [item], persist=False), check_mode=True)
    assert texts(check)[0] == "mkdir /sys/kernel/config/rdma_cm/mlx5_0"

    def kernel_mkdir(path):  # configfs populates the group's ports on mkdir
        os.mkdir(path)
        group = "/" + os.path.relpath(path, node.root)
        node.put(group + "/ports/1/default_roce_mode", "IB/RoCE v1\n")
        node.put(group + "/ports/1/default_roce_tos", "0\n")

    monkeypatch.setattr(_roce_qos, "_mkdir", kernel_mkdir)
    result = run_module(roce_qos.main, args(node, [item], persist=False))
    assert result["changed"] is True
    assert node.get(CM + "/default_roce_mode").strip() == "RoCE v2"
    assert node.get(CM + "/default_roce_tos").strip() == "106"


@pytest.mark.parametrize("item, text", [
    (dict(QOS, ets=dict(QOS["ets"], bw=[10, 10, 10, 10, 10, 0, 0, 10])), "must sum to 100, got 60"),
    (dict(QOS, pfc_priorities=[8]), "pfc_priorities: priorities must be 0-7"),
    (dict(QOS, dscp2prio={"64": 3}), "DSCP must be 0-63"),
    (dict(QOS, dscp2prio={"x": 3}), "is not a number"),
    (dict(QOS, ets=dict(QOS["ets"], tsa=["ets"] * 7)), "need 8 values each"),
    (dict(QOS, roce_tos=256), "roce_tos: must be 0-255"),
    (dict(QOS, interface="nope0"), "name=nope0 matches 0 interfaces"),
])
def test_validation_names_the_field(run_module, tree, monkeypatch, item, text):
    dev = FakeDcb("ens1f0np0")
    fake(monkeypatch, dev)
    result = run_module(roce_qos.main, args(tree, [item]), expect_failure=True)
    assert "interfaces[0]" in result["msg"] and text in result["msg"] and "nothing changed" in result["msg"]
    assert dev.sets == []


def test_lossy_roce_warning(run_module, tree, monkeypatch):
    warnings = fresh_warnings(monkeypatch)
    fake(monkeypatch, FakeDcb("ens1f0np0"))
    run_module(roce_qos.main, args(tree, [dict(QOS, pfc_priorities=[4])]), check_mode=True)
    assert any("maps to priority 3, which has no PFC" in w for w in warnings())


def test_readback_mismatch_fails(run_module, tree, monkeypatch):
    class Stubborn(FakeDcb):
        def __call__(self, argv):
            if argv[1] == "pfc" and argv[2] == "set":
                return 0, "", ""  # accepted, not applied
            return super().__call__(argv)

    fake(monkeypatch, Stubborn("ens1f0np0"))
    result = run_module(roce_qos.main, args(tree, [{"interface": "ens1f0np0", "pfc_priorities": [3]}],
                                            persist=False), expect_failure=True)
    assert "read back differs" in result["msg"] and "pfc set" in result["msg"]


def test_match_selector(run_module, tree, monkeypatch):
    fake(monkeypatch, FakeDcb("ens1f0np0"))
    item = {"match": {"pci": "0000:e6:00.0"}, "pfc_priorities": [3]}
    result = run_module(roce_qos.main, args(tree, [item], persist=False), check_mode=True)
    assert result["interfaces"][0]["interface"] == "ens1f0np0"
