"""The converge metrics of nic_config: per device, the parameters waiting in Next Boot for a reboot and those
a reboot did not apply (nvconfig-not-applied-after-reboot), from datapath_apply's results."""

from __future__ import annotations

from ansible_collections.aiinfra.datapath.plugins.filter.metrics import datapath_metrics


def _samples(result: dict) -> dict[str, list]:
    return {f["name"]: [(s["labels"], s["value"]) for s in f["samples"]]
            for f in datapath_metrics({"result": result}, "site")["metrics"]}


def test_pending_reboot_and_failed_apply_gauges_per_device() -> None:
    result = {"failed": False, "results": {"nic_config": {"changed": True, "reboot_required": True, "devices": [
        {"pci": "0000:3b:00.0", "psid": "MT_0000000834", "config": {"LINK_TYPE_P1": 2},
         "params": [{"param": "LINK_TYPE_P1", "state": "set"}, {"param": "SRIOV_EN", "state": "pending"},
                    {"param": "NUM_OF_VFS", "state": "ok"}]},
        {"pci": "0000:5e:00.0", "psid": "MT_0000000834", "config": {"SRIOV_EN": 1},
         "params": [{"param": "SRIOV_EN", "state": "not_applied"}, {"param": "NUM_OF_VFS", "state": "not_applied"}]},
        {"pci": "0000:af:00.0", "psid": "DEL0000000027", "config": None, "params": []},  # no entry: no sample
    ]}}}
    samples = _samples(result)
    assert samples["aiinfra_datapath_nic_config_reboot_required"] == [
        ({"pci": "0000:3b:00.0", "psid": "MT_0000000834"}, 2), ({"pci": "0000:5e:00.0", "psid": "MT_0000000834"}, 0)]
    assert samples["aiinfra_datapath_nic_config_apply_failed"] == [
        ({"pci": "0000:3b:00.0", "psid": "MT_0000000834"}, 0), ({"pci": "0000:5e:00.0", "psid": "MT_0000000834"}, 2)]
    assert samples["aiinfra_datapath_reboot_required"] == [({}, 1)]


def test_a_skipped_or_failed_nic_config_has_no_device_gauges() -> None:
    for outcome in ({"skipped": True}, {"failed": True, "msg": "mlxconfig not found"}):
        samples = _samples({"failed": False, "results": {"nic_config": outcome}})
        assert "aiinfra_datapath_nic_config_reboot_required" not in samples
        assert "aiinfra_datapath_nic_config_apply_failed" not in samples
