"""nic_firmware: compliance table from recorded ethtool/devlink output; never changes anything."""

from __future__ import annotations

from ansible_collections.aiinfra.datapath.plugins.modules import nic_firmware
from netfakes import FakeRunner, fixture, nic, static, use

ETHTOOL = "/usr/sbin/ethtool"
DEVLINK = "/usr/sbin/devlink"
POLICY = {"driver": "mlx5_core", "psid": "MT_0000000838", "min_version": "28.39.3560", "allowed": []}


def fake(monkeypatch, handlers, ethtool=True, devlink=True):
    runner = FakeRunner(handlers, which={"ethtool": ETHTOOL if ethtool else None,
                                         "devlink": DEVLINK if devlink else None})
    return use(monkeypatch, runner)


def recorded(devlink_fixture="devlink/mlx5-dev-info.json"):
    return [static([ETHTOOL, "-i", "ens1f0np0"], out=fixture("ethtool/connectx7-i.txt")),
            static([ETHTOOL, "-i", "v0"], out=fixture("ethtool/veth-i.txt")),
            static([DEVLINK, "-j", "dev", "info"], out=fixture(devlink_fixture))]


def args(node, **extra):
    base = {"root": str(node.root)}
    base.update(extra)
    return base


def test_default_is_physical_nics_only_and_compliant(run_module, node, monkeypatch):
    nic(node, "ens1f0np0")
    nic(node, "v0", pci=None)
    fake(monkeypatch, recorded())
    before = node.snapshot()
    result = run_module(nic_firmware.main, args(node, policies=[POLICY]))
    assert result["changed"] is False
    assert [n["interface"] for n in result["nics"]] == ["ens1f0np0"]
    facts = result["nics"][0]
    assert facts["sources"] == ["ethtool", "devlink"]
    assert (facts["driver"], facts["driver_version"], facts["firmware_version"], facts["psid"], facts["bus_info"]) == (
        "mlx5_core", "23.10-1.1.9", "28.39.3560", "MT_0000000838", "0000:e6:00.0")
    assert result["compliance"][0]["status"] == "compliant"
    assert result["summary"] == {"compliant": 1, "noncompliant": 0, "unknown": 0}
    assert node.snapshot() == before


def test_noncompliant_reported_not_failed_by_default(run_module, node, monkeypatch):
    nic(node, "ens1f0np0")
    fake(monkeypatch, recorded())
    policy = dict(POLICY, min_version="28.41.1000")
    result = run_module(nic_firmware.main, args(node, policies=[policy]))
    row = result["compliance"][0]
    assert row["status"] == "noncompliant" and row["needs"] == ">= 28.41.1000"
    assert "28.39.3560 is older than the minimum 28.41.1000" in row["reason"]


def test_fail_on_noncompliant(run_module, node, monkeypatch):
    nic(node, "ens1f0np0")
    fake(monkeypatch, recorded())
    result = run_module(nic_firmware.main, args(node, policies=[dict(POLICY, min_version="28.41.1000")],
                                                fail_on_noncompliant=True), expect_failure=True)
    assert "ens1f0np0 (0000:e6:00.0, PSID MT_0000000838)" in result["msg"]
    assert result["compliance"][0]["status"] == "noncompliant"


def test_check_mode_same_result(run_module, node, monkeypatch):
    nic(node, "ens1f0np0")
    fake(monkeypatch, recorded("devlink/mlx5-pending-activation.json"))
    result = run_module(nic_firmware.main, args(node, policies=[POLICY]), check_mode=True)
    assert result["nics"][0]["firmware_stored"] == "28.41.1000"
    assert any("activation pending" in n for n in result["nics"][0]["notes"])


def test_veth_reports_missing_information_cleanly(run_module, node, monkeypatch):
    nic(node, "v0", pci=None)
    fake(monkeypatch, recorded())
    result = run_module(nic_firmware.main, args(node, interfaces=["v0"], policies=[POLICY]))
    row = result["compliance"][0]
    assert row["status"] == "unknown" and row["driver"] == "veth"
    assert "firmware version not reported" in row["reason"] and "virtual interface" in row["reason"]
    assert result["summary"]["unknown"] == 1


def test_devlink_unavailable_in_namespace(run_module, node, monkeypatch):
    nic(node, "ens1f0np0")
    handlers = recorded()[:1] + [static([DEVLINK, "-j", "dev", "info"], rc=1,
                                        err="Failed to connect to devlink Netlink")]
    fake(monkeypatch, handlers)
    result = run_module(nic_firmware.main, args(node, policies=[POLICY]))
    assert result["notes"] == ["devlink -j dev info failed: Failed to connect to devlink Netlink"]
    assert result["compliance"][0]["status"] == "compliant"


def test_devlink_output_that_cannot_be_read_is_said(run_module, node, monkeypatch):
    nic(node, "ens1f0np0")
    handlers = [static([ETHTOOL, "-i", "ens1f0np0"], out="driver: mlx5_core\nbus-info: 0000:e6:00.0\n"),
                static([DEVLINK, "-j", "dev", "info"], out="devlink: unknown command")]
    fake(monkeypatch, handlers)
    result = run_module(nic_firmware.main, args(node, policies=[POLICY]))
    assert result["notes"][0].startswith("devlink -j dev info printed output this module cannot read, so devlink "
                                         "was not used: not JSON")
    row = result["compliance"][0]
    assert row["status"] == "unknown" and "devlink was not read" in row["reason"]


def test_sysfs_only(run_module, node, monkeypatch):
    nic(node, "ens1f0np0", fw_ver="28.39.3560", board_id="MT_0000000838")
    fake(monkeypatch, [], ethtool=False, devlink=False)
    result = run_module(nic_firmware.main, args(node, policies=[POLICY]))
    assert result["nics"][0]["sources"] == ["sysfs"]
    assert result["compliance"][0]["status"] == "compliant"


def test_bad_input(run_module, node, monkeypatch):
    nic(node, "ens1f0np0")
    fake(monkeypatch, recorded())
    result = run_module(nic_firmware.main, args(node, interfaces=["nope0"]), expect_failure=True)
    assert "interfaces not found on the node: nope0" in result["msg"]
    result = run_module(nic_firmware.main, args(node, policies=[{"min_version": "1.0"}]), expect_failure=True)
    assert "policies[0]: give driver and/or psid" in result["msg"]


def test_no_policy_is_unknown(run_module, node, monkeypatch):
    nic(node, "ens1f0np0")
    fake(monkeypatch, recorded())
    result = run_module(nic_firmware.main, args(node))
    assert result["compliance"][0]["status"] == "unknown"
    assert "no policy for driver mlx5_core, PSID MT_0000000838" in result["compliance"][0]["reason"]
