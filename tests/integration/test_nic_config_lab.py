"""NIC firmware (NV) settings on the lab: site.yml sets them and asks for a reboot, rolling_reboot.yml
reboots each node once, and then either the values are Current (healthy firmware: nothing left to do,
no drift) or they are not (broken firmware: the finding nvconfig-not-applied-after-reboot, site.yml's
gate fails once, and no later site.yml or rolling_reboot.yml reboots that node for it again).

Its own 2-node lab ("dp39"): `datapath-lab nic-firmware` gives node1 a ConnectX-7 whose firmware
applies Next Boot at a reboot and node2 one whose firmware does not (--broken). The lab's mlxconfig
prints the real tool's format (lab/datapath_lab/fake_mlxconfig.py; recorded outputs of real devices are
the parser's unit fixtures, tests/fixtures/nic_config/), so the module reads it with the code it runs on
real nodes; the module finds the devices in the PCI directory the inventory names (nic_config_pci_dir).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datapath_lab import Lab, LabConfig, nvconfig  # noqa: E402
from labtools import REPO, LabHandle, PlayResult, _lab_possible, spec_applied_then_restored  # noqa: E402
from test_audit_lab import audit  # noqa: E402  (the audit run, schema-checked)

pytestmark = pytest.mark.lab

LAB_NAME = "dp39"
SITE = os.path.join(REPO, "playbooks", "site.yml")
ROLLING = os.path.join(REPO, "playbooks", "rolling_reboot.yml")
PF0 = "0000:3b:00.0"
SETS = ["LINK_TYPE_P1", "LINK_TYPE_P2", "SRIOV_EN", "NUM_OF_VFS", "ROCE_CC_PRIO_MASK_P1", "ROCE_CC_PRIO_MASK_P2"]
WANTED = {"LINK_TYPE_P1": 2, "LINK_TYPE_P2": 2, "SRIOV_EN": 1, "NUM_OF_VFS": 8, "ROCE_CC_PRIO_MASK_P1": 8,
          "ROCE_CC_PRIO_MASK_P2": 8}
STATE_FILE = "/var/lib/aiinfra-datapath/nic_config.json"


@pytest.fixture(scope="module")
def dp39(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    lab = Lab(LAB_NAME)
    inventory_dir = str(tmp_path_factory.mktemp("dp39-inventory"))
    try:
        lab.up(LabConfig(name=LAB_NAME, nodes=2, inventory_dir=inventory_dir), log=lambda *_: None)
        nvconfig.enable(lab, "node1", "healthy")
        nvconfig.enable(lab, "node2", "broken")
        handle = LabHandle(lab, lab.require_state())
        with spec_applied_then_restored(handle, extra_files=(STATE_FILE,)):
            yield handle
    finally:
        lab.down(log=lambda *_: None)


def nv(lab: LabHandle, node: str) -> dict[str, dict[str, Any]]:
    """The device's parameters as the lab's firmware holds them (default, current, next)."""
    return nvconfig.describe(lab.lab, node)["devices"][0]["params"]


def boots(lab: LabHandle) -> dict[str, int]:
    state = lab.lab.require_state()
    return {n: int(state["nodes"][n]["boots"]) for n in lab.nodes}


def nic_results(result: PlayResult) -> dict[str, dict[str, Any]]:
    rows = result.task_results("Facts, plan and every capability module, once each, in dependency order")
    return {host: row["results"]["nic_config"] for host, row in rows.items()}


def test_check_mode_then_site_then_one_reboot_each_healthy_applies_broken_is_named_once(
        dp39: LabHandle, tmp_path: Path) -> None:
    lab = dp39
    untouched = {n: nv(lab, n) for n in lab.nodes}
    assert all(p["current"] == p["next"] == p["default"] for p in untouched["node1"].values())

    # check mode: nothing changes; it predicts every action, and --diff shows Next Boot old -> new
    predicted = lab.playbook(SITE, check=True, diff=True)
    assert predicted.rc == 0, predicted.failures()
    assert {n: nv(lab, n) for n in lab.nodes} == untouched
    assert lab.sh("node1", f"test -e {STATE_FILE}", check=False).returncode != 0
    will = nic_results(predicted)
    for node in lab.nodes:
        assert will[node]["reboot_required"] is True
        assert sorted(p["param"] for p in will[node]["pending"]) == sorted(SETS)
    rows = predicted.task_results("Facts, plan and every capability module, once each, in dependency order")
    diff = next(d for d in rows["node1"]["diff"] if d["before_header"] == f"{PF0} Next Boot")
    assert "LINK_TYPE_P1 = IB(1)\n" in diff["before"] and "LINK_TYPE_P1 = ETH(2)\n" in diff["after"]
    assert "SRIOV_EN = False(0)\n" in diff["before"] and "SRIOV_EN = True(1)\n" in diff["after"]
    assert "NUM_OF_VFS = 0\n" in diff["before"] and "NUM_OF_VFS = 8\n" in diff["after"]
    assert "ROCE_CC_PRIO_MASK_P1 = 255\n" in diff["before"] and "ROCE_CC_PRIO_MASK_P1 = 8\n" in diff["after"]

    # site.yml: the same actions, one batched set per device; a reboot is required and said so
    done = lab.playbook(SITE)
    assert done.rc == 0, done.failures()
    did = nic_results(done)
    for node in lab.nodes:
        assert did[node]["actions"] == will[node]["actions"]
        sets = [a for a in did[node]["actions"] if a["kind"] == "command"]
        assert len(sets) == 1 and sets[0]["text"].startswith(f"run mlxconfig -d {PF0} -y set LINK_TYPE_P1=2 ")
        params = nv(lab, node)
        assert {k: params[k]["next"] for k in WANTED} == WANTED
        assert {k: params[k]["current"] for k in WANTED} != WANTED
    summaries = done.task_results("Facts, plan and every capability module, once each, in dependency order")
    for node in lab.nodes:
        summary = summaries[node]["ansible_facts"]["datapath_summary"]
        assert summary["reboot_required"] is True
        assert [r for r in summary["reboot_reasons"] if r.startswith("nic_config")] == [
            f"nic_config {PF0} (LINK_TYPE_P1 IB(1) -> ETH(2), LINK_TYPE_P2 IB(1) -> ETH(2), SRIOV_EN False(0) -> "
            "True(1), NUM_OF_VFS 0 -> 8, ROCE_CC_PRIO_MASK_P1 255 -> 8, ROCE_CC_PRIO_MASK_P2 255 -> 8)"]
    _pending, report = audit(lab, tmp_path / "pending")
    drifts = [f for f in report["findings"] if f["capability"] == "nic_config"]
    assert {f["check"] for f in drifts} == {"nvconfig-pending"} and all(f["severity"] == "info" for f in drifts)

    # rolling_reboot.yml: each node once. node1's firmware applies the values; node2's does not, and the
    # playbook says so (the node stays cordoned)
    before = boots(lab)
    rolled = lab.playbook(ROLLING, extra_vars={"datapath_reboot_serial": 1,
                                               "datapath_reboot_max_fail_percentage": 100})
    after = boots(lab)
    assert after == {n: before[n] + 1 for n in lab.nodes}, (before, after, rolled.failures())
    assert rolled.rc != 0
    checks = rolled.task_results("Assert the boot brought the planned state")
    assert not checks["node1"].get("failed"), checks["node1"]
    assert checks["node2"].get("failed") and "nvconfig-not-applied-after-reboot" in checks["node2"]["msg"]
    healthy, broken = nv(lab, "node1"), nv(lab, "node2")
    assert {k: healthy[k]["current"] for k in WANTED} == WANTED
    assert {k: broken[k]["current"] for k in WANTED} == {k: broken[k]["default"] for k in WANTED}

    # site.yml again: node1 has nothing to change; node2 has the finding, asks for no reboot, and the play
    # fails once, naming node2 alone
    again = lab.playbook(SITE)
    assert again.rc != 0
    results = nic_results(again)
    assert results["node1"]["changed"] is False and results["node1"]["reboot_required"] is False
    assert results["node1"]["actions"] == [] and results["node1"]["findings"] == []
    assert results["node2"]["reboot_required"] is False and results["node2"]["actions"] == []
    assert [f["check"] for f in results["node2"]["findings"]] == ["nvconfig-not-applied-after-reboot"]
    assert results["node2"]["findings"][0]["params"] == SETS
    gate = again.task_results("Fail once with every NIC whose firmware settings did not take effect after a reboot")
    messages = [row.get("msg") for row in gate.values() if row.get("failed")]
    assert len(messages) == 1 and any(line.startswith("node2 0000:3b:00.0 (PSID MT_0000000834")
                                      for line in messages[0]), messages
    assert not any("node1" in line for line in messages[0])

    # rolling_reboot.yml again: no node is rebooted for it
    quiet = lab.playbook(ROLLING, extra_vars={"datapath_reboot_serial": 1})
    assert quiet.rc == 0, quiet.failures()
    assert boots(lab) == after
    assert quiet.task_results("Reboot the node") == {}

    # the audit: node1 holds the plan (no nic_config drift), node2 carries the finding
    _result, final = audit(lab, tmp_path / "after")
    mine = [(f["host"], f["check"], f["kind"], f["severity"]) for f in final["findings"]
            if f["capability"] == "nic_config"]
    assert not [m for m in mine if m[0] == "node1"], mine
    assert ("node2", "nvconfig-not-applied-after-reboot", "finding", "error") in mine
    assert not [f for f in final["findings"] if f["capability"] == "nic_config" and f["kind"] == "drift"]

    # the record names the boot each value was set in: the one before the reboot
    record = json.loads(lab.sh("node2", f"cat {STATE_FILE}").stdout)
    boots_seen = {entry["boot_id"] for entry in record["devices"][PF0]["params"].values()}
    now = lab.sh("node2", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert len(boots_seen) == 1 and now not in boots_seen
