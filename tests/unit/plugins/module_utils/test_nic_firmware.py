"""NIC firmware facts and policy evaluation against recorded ethtool/devlink output."""

from __future__ import annotations

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nic_firmware as fw
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from netfakes import FakeRunner, Node, fixture, nic, static

POLICY = {"driver": "mlx5_core", "psid": "MT_0000000838", "min_version": "28.39.3560", "allowed": []}


def test_ethtool_connectx7_verbatim():
    info = fw.parse_ethtool_info(fixture("ethtool/connectx7-i.txt"))
    assert info["driver"] == "mlx5_core"
    assert info["version"] == "23.10-1.1.9"
    assert info["fw_version"] == "28.39.3560"
    assert info["psid"] == "MT_0000000838"
    assert info["bus-info"] == "0000:e6:00.0"
    assert info["expansion-rom-version"] is None


def test_ethtool_veth_recorded():
    info = fw.parse_ethtool_info(fixture("ethtool/veth-i.txt"))
    assert info["driver"] == "veth"
    assert info["fw_version"] is None and info["psid"] is None and info["bus-info"] is None


def test_ethtool_firmware_without_psid():
    info = fw.parse_ethtool_info("driver: ice\nfirmware-version: 4.40 0x8001c967 1.3534.0\n")
    assert info["fw_version"] == "4.40" and info["psid"] is None


def test_devlink_fixtures():
    info = fw.parse_devlink_info(fixture("devlink/mlx5-dev-info.json"))["0000:e6:00.0"]
    assert info == {"driver": "mlx5_core", "serial": "MT2244X00001", "psid": "MT_0000000838",
                    "fw_running": "28.39.3560", "fw_stored": "28.39.3560"}
    failed = fw.parse_devlink_info(fixture("devlink/mlx5-stored-query-failed.json"))["0000:e6:00.0"]
    assert failed["fw_stored"] is None  # 255.255.65535 = query failed, not a version
    pending = fw.parse_devlink_info(fixture("devlink/mlx5-pending-activation.json"))["0000:e6:00.0"]
    assert pending["fw_stored"] == "28.41.1000"
    for text in ("garbage", "[]", '{"info": []}', '{"info": {"pci/0000:e6:00.0": "x"}}'):
        with pytest.raises(fw.DevlinkOutputError):
            fw.parse_devlink_info(text)
    assert fw.parse_devlink_info("") == {} and fw.parse_devlink_info('{"info": {}}') == {}


def test_unknown_version_says_what_each_source_said(tmp_path):
    node = Node(tmp_path)
    nic(node, "ens1f0np0")
    runner = FakeRunner([static(["ethtool", "-i", "ens1f0np0"], out="driver: mlx5_core\nversion: 6.1.0-28-amd64\n"
                                "firmware-version: \nbus-info: 0000:e6:00.0\n")])
    node.put("/proc/sys/kernel/osrelease", "6.1.0-28-amd64\n")
    facts = fw.collect(HostRoot(str(node.root)), runner, "ens1f0np0", "ethtool", None)
    row = fw.evaluate(facts, [{"driver": "mlx5_core", "min_version": "28.39.3560"}])
    assert row["status"] == "unknown"
    assert row["reason"] == ("firmware version not reported: ethtool -i gave no firmware-version; devlink was "
                             "not read (not installed, failed or unreadable: see notes); sysfs RDMA device "
                             "mlx5_0 has no fw_ver")
    # the "version:" of an inbox driver is the kernel release, and the result says so
    assert facts["driver_version"] == "6.1.0-28-amd64" and facts["driver_inbox"] is True
    assert "is the kernel release: the inbox mlx5_core driver" in " ".join(facts["notes"])


def test_collect_merges_ethtool_and_devlink(tmp_path):
    node = Node(tmp_path)
    nic(node, "ens1f0np0")
    runner = FakeRunner([static(["ethtool", "-i", "ens1f0np0"], out=fixture("ethtool/connectx7-i.txt"))])
    facts = fw.collect(HostRoot(str(node.root)), runner, "ens1f0np0", "ethtool",
                       fw.parse_devlink_info(fixture("devlink/mlx5-pending-activation.json")))
    assert facts["sources"] == ["ethtool", "devlink"]
    assert facts["firmware_version"] == "28.39.3560" and facts["firmware_stored"] == "28.41.1000"
    assert any("activation pending" in n for n in facts["notes"])


def test_collect_sysfs_fallback(tmp_path):
    node = Node(tmp_path)
    nic(node, "ens1f0np0", fw_ver="28.39.3560", board_id="MT_0000000838")
    facts = fw.collect(HostRoot(str(node.root)), FakeRunner([]), "ens1f0np0", None, {})
    assert facts["sources"] == ["sysfs"]
    assert (facts["firmware_version"], facts["psid"]) == ("28.39.3560", "MT_0000000838")


def _nic(version="28.39.3560", psid="MT_0000000838", driver="mlx5_core"):
    return {"interface": "ens1f0np0", "bus_info": "0000:e6:00.0", "driver": driver, "psid": psid,
            "firmware_version": version, "physical": True}


def test_numeric_comparison_not_string():
    row = fw.evaluate(_nic("28.39.3560"), [dict(POLICY, min_version="28.41.1000")])
    assert row["status"] == "noncompliant"
    assert "older than the minimum 28.41.1000" in row["reason"]
    assert fw.evaluate(_nic("28.100.1000"), [dict(POLICY, min_version="28.41.1000")])["status"] == "compliant"
    assert fw.evaluate(_nic("28.39.3560"), [POLICY])["status"] == "compliant"


def test_allowed_list():
    policy = dict(POLICY, min_version=None, allowed=["28.41.1000", "28.42.1000"])
    assert fw.evaluate(_nic("28.39.3560"), [policy])["status"] == "noncompliant"
    assert fw.evaluate(_nic("28.42.1000"), [policy])["status"] == "compliant"


def test_most_specific_policy_wins_and_psid_case_insensitive():
    policies = [{"driver": "mlx5_core", "min_version": "1.0", "allowed": []},
                {"psid": "mt_0000000838", "driver": "mlx5_core", "min_version": "99.0", "allowed": []}]
    row = fw.evaluate(_nic(), policies)
    assert row["policy"]["psid"] == "mt_0000000838" and row["status"] == "noncompliant"


def test_unknown_cases():
    assert fw.evaluate(_nic(version=None), [POLICY])["status"] == "unknown"
    row = fw.evaluate(_nic(psid="MT_OTHER"), [POLICY])
    assert row["status"] == "unknown" and "no policy" in row["reason"]
    row = fw.evaluate(_nic(psid=None), [POLICY])
    assert row["status"] == "unknown" and "PSID not reported" in row["reason"]
    veth = {"interface": "v0", "driver": "veth", "firmware_version": None, "physical": False}
    assert "virtual interface" in fw.evaluate(veth, [POLICY])["reason"]
