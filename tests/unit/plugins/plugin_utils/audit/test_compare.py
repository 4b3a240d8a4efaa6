"""compare(): every capability, a converged case and each kind of drift and finding."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.audit import (
    AuditOptions,
    compare,
    fails,
    is_failure,
    options_from,
)

from ._data import facts, plan

FIELDS = {"host", "capability", "check", "key", "wanted", "actual", "severity", "kind", "reason", "fix"}


def only(findings: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(findings) == 1, findings
    return findings[0]


def checks(findings: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted((f["capability"], f["check"], f["key"]) for f in findings)


def test_converged_host_has_no_findings() -> None:
    assert compare(plan(), facts()) == []


def test_every_finding_has_the_documented_fields() -> None:
    f = facts()
    f["sysctl"]["net.ipv4.tcp_mtu_probing"]["value"] = "0"
    found = only(compare(plan(), f))
    assert set(found) == FIELDS
    assert found["host"] == "node1"
    assert compare(plan(), f, host="other")[0]["host"] == "other"


# -- sysctl -----------------------------------------------------------------------------
def test_sysctl_exact_drift() -> None:
    f = facts()
    f["sysctl"]["net.ipv4.tcp_mtu_probing"]["value"] = "0"
    found = only(compare(plan(), f))
    assert (found["capability"], found["check"], found["key"]) == ("sysctl_profile", "sysctl-value",
                                                                   "net.ipv4.tcp_mtu_probing")
    assert (found["wanted"], found["actual"], found["severity"], found["kind"]) == ("1", "0", "error", "drift")
    assert is_failure(found)


def test_sysctl_minimum_is_compared_field_by_field() -> None:
    f = facts()
    # larger in total but the middle field is below the floor
    f["sysctl"]["net.ipv4.tcp_rmem"]["value"] = "8192 65536 33554432"
    found = only(compare(plan(), f))
    assert found["key"] == "net.ipv4.tcp_rmem" and found["wanted"] == ">= 4096 131072 16777216"
    f["sysctl"]["net.ipv4.tcp_rmem"]["value"] = "4096 131072 16777216"
    assert compare(plan(), f) == []


def test_sysctl_multi_value_exact_compares_values_not_whitespace() -> None:
    p = plan()
    p["sysctl_profile"]["keys"]["net.ipv4.tcp_rmem"]["mode"] = "exact"
    f = facts()
    f["sysctl"]["net.ipv4.tcp_rmem"]["value"] = "4096  131072\t16777216"
    assert compare(p, f) == []
    f["sysctl"]["net.ipv4.tcp_rmem"]["value"] = "4096 131072 33554432"
    assert only(compare(p, f))["check"] == "sysctl-value"


def test_sysctl_missing_key_is_drift_unless_ignore_missing() -> None:
    f = facts()
    f["sysctl"]["vm.zone_reclaim_mode"] = {"value": None, "state": "missing"}
    found = only(compare(plan(), f))
    assert (found["check"], found["kind"], found["severity"]) == ("sysctl-missing", "drift", "error")
    f = facts()
    f["sysctl"]["net.core.rmem_max"] = {"value": None, "state": "missing"}
    found = only(compare(plan(), f))
    assert (found["check"], found["kind"], found["severity"]) == ("sysctl-missing", "finding", "info")
    assert not is_failure(found)


def test_sysctl_read_only_below_floor_with_ignore_missing_is_info() -> None:
    f = facts()
    f["sysctl"]["net.core.rmem_max"] = {"value": "212992", "state": "read_only"}
    found = list(compare(plan(), f, options={"rtt_us": 1}))
    assert checks(found) == [("sysctl_profile", "sysctl-read-only", "net.core.rmem_max")]
    assert found[0]["severity"] == "info"


def test_sysctl_not_gathered_is_not_compared() -> None:
    f = facts()
    f["sysctl"] = None
    assert compare(plan(), f) == []


# -- socket buffers vs BDP --------------------------------------------------------------------
OURS = "/etc/sysctl.d/90-aiinfra-datapath.conf"


def test_sysctl_right_now_but_not_restored_by_a_boot() -> None:
    """The facts' ``boot``/``boot_file`` (what systemd-sysctl applies next boot): a value that is right
    live but set by no file, or overridden by a later one, is persistence drift, named with its file."""
    f = facts()
    for entry in f["sysctl"].values():
        entry.update(boot=entry["value"], boot_file=OURS)
    assert compare(plan(), f) == []
    f["sysctl"]["net.ipv4.tcp_mtu_probing"].update(boot=None, boot_file=None)  # our file deleted
    found = only(compare(plan(), f))
    assert (found["check"], found["kind"], found["severity"]) == ("sysctl-boot", "drift", "error")
    assert found["actual"] is None
    assert "no sysctl.d file (or active TuneD profile) sets it, so a boot does not restore it" in found["reason"]
    f["sysctl"]["net.ipv4.tcp_mtu_probing"].update(boot="0", boot_file="/etc/sysctl.d/99-local.conf")
    found = only(compare(plan(), f))
    assert found["actual"] == "0" and "the next boot sets 0 (/etc/sysctl.d/99-local.conf)" in found["reason"]
    # minimum mode: a boot value at or above the floor is fine
    f = facts()
    for entry in f["sysctl"].values():
        entry.update(boot=entry["value"], boot_file=OURS)
    f["sysctl"]["net.ipv4.tcp_rmem"].update(boot="4096 262144 33554432")
    assert compare(plan(), f) == []


def test_sysctl_live_drift_names_the_boot_cause_in_one_finding() -> None:
    """After a reboot without our file: one finding per key, its reason says why the boot lost it."""
    f = facts()
    for entry in f["sysctl"].values():
        entry.update(boot=entry["value"], boot_file=OURS)
    f["sysctl"]["net.ipv4.tcp_mtu_probing"].update(value="0", boot=None, boot_file=None)
    found = only(compare(plan(), f))
    assert found["check"] == "sysctl-value"
    assert found["reason"] == ("net.ipv4.tcp_mtu_probing is 0: differs from the plan; no sysctl.d file (or active "
                               "TuneD profile) sets it, so a boot does not restore it")
    f["sysctl"]["net.ipv4.tcp_mtu_probing"].update(boot="1", boot_file=OURS)  # the file is fine: no cause to add
    assert only(compare(plan(), f))["reason"] == "net.ipv4.tcp_mtu_probing is 0: differs from the plan"


def test_socket_buffer_below_bandwidth_delay_product() -> None:
    f = facts()
    f["sysctl"]["net.core.wmem_max"]["value"] = "4194304"  # 4 MiB < 400 Gb/s x 100 µs = 5 MB
    found = only(compare(plan(), f))
    assert (found["capability"], found["check"], found["key"]) == ("sysctl_profile", "socket-buffer-bdp",
                                                                   "net.core.wmem_max")
    assert found["wanted"] == ">= 5000000" and found["severity"] == "warning" and found["kind"] == "finding"
    assert "400000 Mb/s" in found["reason"] and "100 µs" in found["reason"]
    assert not is_failure(found)
    # a shorter RTT makes 4 MiB enough
    assert compare(plan(), f, options={"rtt_us": 50}) == []


def test_buffer_finding_uses_the_last_field_of_tcp_mem_keys_and_fallback_speed() -> None:
    f = facts()
    for iface in f["interfaces"].values():
        iface["speed_mbps"] = None
    f["sysctl"]["net.ipv4.tcp_wmem"]["value"] = "4096 16384 4194304"
    assert compare(plan(), f) == []  # speed unknown: no check
    found = only(compare(plan(), f, options=AuditOptions(link_speed_mbps=400000)))
    assert found["key"] == "net.ipv4.tcp_wmem" and "audit_link_speed_mbps" in found["reason"]
    assert compare(plan(), f, options=AuditOptions(link_speed_mbps=400000, check_buffers=False)) == []


def test_buffer_finding_is_dropped_when_the_key_already_drifted() -> None:
    p = plan()
    p["sysctl_profile"]["keys"]["net.ipv4.tcp_rmem"]["value"] = "4096 131072 16777216"
    f = facts()
    f["sysctl"]["net.ipv4.tcp_rmem"]["value"] = "4096 131072 1048576"
    assert checks(compare(p, f)) == [("sysctl_profile", "sysctl-value", "net.ipv4.tcp_rmem")]


# -- hugepages and THP -------------------------------------------------------------------------
def test_hugepages_short_of_the_plan() -> None:
    f = facts()
    f["hugepages"]["pools"]["2M"]["total"] = 40
    found = only(compare(plan(), f))
    assert (found["check"], found["key"], found["wanted"], found["actual"]) == ("hugepages-short", "2M.total", 64, 40)
    assert found["severity"] == "error" and "short of the plan" in found["reason"]


def test_hugepages_above_the_plan_is_a_warning_drift() -> None:
    f = facts()
    f["hugepages"]["pools"]["2M"]["total"] = 128
    found = only(compare(plan(), f))
    assert (found["check"], found["severity"], found["kind"]) == ("hugepages-count", "warning", "drift")
    assert is_failure(found)


def test_hugepages_per_numa_node_and_missing_size() -> None:
    f = facts()
    f["hugepages"]["pools"]["1G"]["per_node"] = {"0": {"total": 4, "free": 4}, "1": {"total": 0, "free": 0}}
    assert checks(compare(plan(), f)) == [("hugepages", "hugepages-node", "1G.node0"),
                                          ("hugepages", "hugepages-node", "1G.node1")]
    f = facts()
    del f["hugepages"]["pools"]["1G"]
    assert checks(compare(plan(), f)) == [("hugepages", "hugepages-size", "1G.total")]


def test_thp_drift_and_defrag_always_finding() -> None:
    f = facts()
    f["thp"]["enabled"] = "always"
    found = only(compare(plan(), f))
    assert (found["capability"], found["check"], found["key"]) == ("hugepages", "thp-value", "enabled")
    # defrag=always in the plan itself: no drift, but the stall finding
    p = plan()
    p["hugepages"]["thp"]["defrag"] = "always"
    f = facts()
    f["thp"]["defrag"] = "always"
    found = only(compare(p, f))
    assert (found["check"], found["kind"], found["severity"]) == ("thp-defrag-stalls", "finding", "warning")
    # defrag=always against a plan of madvise: the drift says it, once
    f = facts()
    f["thp"]["defrag"] = "always"
    assert checks(compare(plan(), f)) == [("hugepages", "thp-value", "defrag")]


def test_thp_left_alone_by_the_plan() -> None:
    p = plan()
    p["hugepages"]["thp"] = None
    f = facts()
    f["thp"] = {"enabled": "always", "defrag": "defer"}
    assert compare(p, f) == []


# -- kernel command line ------------------------------------------------------------------------
def test_kernel_argument_missing_is_a_pending_reboot_info() -> None:
    f = facts()
    f["cmdline"] = ["ro", "iommu=on", "hugepagesz=1G", "hugepages=0:2,1:2"]
    found = only(compare(plan(), f))
    assert (found["capability"], found["check"], found["key"]) == ("kernel_cmdline", "cmdline-pending", "iommu=pt")
    assert (found["severity"], found["kind"], found["actual"]) == ("info", "drift", "iommu=on")
    assert "reboot is pending" in found["reason"]
    assert not fails([found], "drift")


# -- interfaces and MTU ---------------------------------------------------------------------------
def test_mtu_drift_by_name_and_by_pci_match() -> None:
    f = facts()
    f["interfaces"]["ens1f0np0"]["mtu"] = 4000
    found = only(compare(plan(), f))
    assert (found["capability"], found["check"], found["key"], found["wanted"], found["actual"]) == (
        "link_mtu", "mtu-value", "ens1f0np0", 9000, 4000)
    f = facts()
    f["interfaces"]["eno1"]["mtu"] = 9000
    assert checks(compare(plan(), f)) == [("link_mtu", "mtu-value", "eno1")]


def test_interface_missing() -> None:
    f = facts()
    del f["interfaces"]["ens1f0np0"]
    del f["qos"]["ens1f0np0"]
    found = compare(plan(), f)
    assert checks(found) == [("link_mtu", "interface-missing", "pci=0000:1a:00.0")]


def test_path_mtu_from_verify_results_both_shapes() -> None:
    report = {"version": 1, "ok": False, "paths": [
        {"source": "node1", "fabric": "rdma", "peer": "node2", "mtu": 9000, "largest_mtu": 1500, "ok": False},
        {"source": "node1", "fabric": "rdma", "peer": "node3", "mtu": 9000, "largest_mtu": 9000, "ok": True},
        {"source": "node2", "fabric": "rdma", "peer": "node1", "mtu": 9000, "largest_mtu": 1500, "ok": False}]}
    found = only(compare(plan(), facts(), verify=report))
    assert (found["capability"], found["check"], found["key"]) == ("link_mtu", "path-mtu", "rdma:node2")
    assert (found["wanted"], found["actual"], found["severity"]) == (9000, 1500, "error")
    per_host = {"hosts": {"node1": {"paths": [{"fabric": "rdma", "peer": "node4", "mtu": 9000,
                                               "largest_mtu": None, "ok": False}]}}}
    found = only(compare(plan(), facts(), verify=per_host))
    assert found["key"] == "rdma:node4" and "none" in found["reason"]
    assert compare(plan(), facts(), verify={"unexpected": True}) == []


# -- QoS -------------------------------------------------------------------------------------------
def test_qos_converged_and_unsupported() -> None:
    p = plan()
    p["roce_qos"]["interfaces"][0]["interface"] = "eno1"  # not DCB capable
    found = only(compare(p, facts()))
    assert (found["capability"], found["check"], found["severity"], found["kind"]) == (
        "roce_qos", "qos-unsupported", "info", "finding")


def test_qos_drift_per_setting() -> None:
    f = facts()
    live = f["qos"]["ens1f0np0"]
    live.update(trust="pcp", dscp2prio={"26": 3}, ecn={"rp": [3], "np": []})
    live["ets"]["bw"] = [100, 0, 0, 0, 0, 0, 0, 0]
    assert checks(compare(plan(), f)) == [
        ("roce_qos", "qos-dscp2prio", "ens1f0np0.dscp48"),
        ("roce_qos", "qos-ecn", "ens1f0np0.ecn.np"),
        ("roce_qos", "qos-ets", "ens1f0np0.ets.bw"),
        ("roce_qos", "qos-trust", "ens1f0np0.trust"),
    ]


def test_roce_priority_without_pfc_and_without_ecn() -> None:
    f = facts()
    f["qos"]["ens1f0np0"].update(pfc_priorities=[], ecn={"rp": [], "np": []})
    found = compare(plan(), f)
    assert ("roce_qos", "roce-lossy", "ens1f0np0.priority3") in checks(found)
    lossy = [x for x in found if x["check"] == "roce-lossy"][0]
    assert lossy["severity"] == "error" and lossy["kind"] == "finding" and "neither PFC nor ECN" in lossy["reason"]
    # PFC off but ECN on: lossy RoCE with DCQCN is a (planned) choice, no finding
    f = facts()
    f["qos"]["ens1f0np0"]["pfc_priorities"] = []
    assert "roce-lossy" not in [x["check"] for x in compare(plan(), f)]


# -- firmware --------------------------------------------------------------------------------------
def test_firmware_below_policy() -> None:
    f = facts()
    f["interfaces"]["ens1f0np0"]["firmware"]["version"] = "28.36.1010"
    f["interfaces"]["ens1f0np0"]["firmware"]["stored"] = "28.36.1010"
    found = only(compare(plan(), f))
    assert (found["capability"], found["check"], found["key"], found["severity"]) == (
        "nic_firmware", "firmware-below-policy", "ens1f0np0", "error")
    assert found["wanted"] == ">= 28.39.3560" and found["actual"] == "28.36.1010"
    assert "older than the minimum" in found["reason"]


def test_firmware_pending_activation_and_virtual_nics_skipped() -> None:
    f = facts()
    f["interfaces"]["ens1f0np0"]["firmware"]["stored"] = "28.41.1000"
    found = only(compare(plan(), f))
    assert (found["check"], found["severity"]) == ("firmware-pending", "warning")
    f = facts()
    f["interfaces"]["ens1f0np0"].update(physical=False, firmware=None)
    assert compare(plan(), f) == []


# -- storage ---------------------------------------------------------------------------------------
def test_cache_not_mounted() -> None:
    f = facts()
    f["storage"]["mounts"]["/mnt/model-cache"] = {"mounted": False, "source": None, "fstype": None, "options": []}
    found = only(compare(plan(), f))
    assert (found["capability"], found["check"], found["key"], found["severity"]) == (
        "nvme_layout", "mount-missing", "/mnt/model-cache", "error")


def test_mount_options_fstype_and_fstab() -> None:
    f = facts()
    f["storage"]["mounts"]["/mnt/model-cache"].update(options=["rw", "noatime"], fstype="ext4")
    f["storage"]["fstab"]["/mnt/model-cache"]["options"] = ["defaults"]
    assert checks(compare(plan(), f)) == [
        ("nvme_layout", "fstab-options", "/mnt/model-cache fstab options"),
        ("nvme_layout", "mount-fstype", "/mnt/model-cache fstype"),
        ("nvme_layout", "mount-options", "/mnt/model-cache options"),
    ]
    f = facts()
    f["storage"]["fstab"]["/mnt/model-cache"] = {"present": False, "source": None, "fstype": None, "options": []}
    found = only(compare(plan(), f))
    assert (found["check"], found["severity"], found["kind"]) == ("fstab-missing", "warning", "drift")


def test_cache_without_noatime_finding_when_the_plan_does_not_ask() -> None:
    p = plan()
    p["nvme_layout"]["mount"]["options"] = []
    f = facts()
    f["storage"]["mounts"]["/mnt/model-cache"]["options"] = ["rw", "relatime"]
    found = only(compare(p, f))
    assert (found["check"], found["kind"], found["severity"]) == ("cache-atime", "finding", "warning")
    # when the plan asks for noatime the drift says it, once
    assert checks(compare(plan(), f)) == [("nvme_layout", "mount-options", "/mnt/model-cache options")]


def test_storage_device_missing_and_no_storage_plan() -> None:
    f = facts()
    f["storage"]["devices"]["/dev/disk/by-id/nvme-A"]["exists"] = False
    assert checks(compare(plan(), f)) == [("nvme_layout", "device-missing", "/dev/disk/by-id/nvme-A")]
    p = plan()
    p["nvme_layout"] = None
    f["storage"]["mounts"] = {}
    assert compare(p, f) == []


# -- k8s ---------------------------------------------------------------------------------------------
def test_nfd_label_missing_or_different() -> None:
    f = facts()
    f["nfd"]["labels"] = {"aiinfra.io/nvme-cache": "false"}
    found = only(compare(plan(), f))
    assert (found["capability"], found["check"], found["key"], found["wanted"], found["actual"]) == (
        "nfd_labels", "nfd-label", "aiinfra.io/nvme-cache", "true", "false")
    f["nfd"]["labels"] = {}
    assert "missing" in only(compare(plan(), f))["reason"]


# -- host without facts, options, gate -------------------------------------------------------------
def test_host_without_facts() -> None:
    found = only(compare(plan(), None))
    assert (found["capability"], found["severity"]) == ("facts", "error")


def test_options_validation() -> None:
    assert options_from(None) == AuditOptions()
    assert options_from({"rtt_us": "20", "link_speed_mbps": "100000"}) == AuditOptions(20.0, 100000)
    for bad in ({"rtt_us": 0}, {"rtt_us": "x"}, {"rtt_us": True}, {"link_speed_mbps": "fast"}):
        with pytest.raises(ValueError):
            options_from(bad)


def test_fail_on() -> None:
    drift = {"kind": "drift", "severity": "error"}
    warn_drift = {"kind": "drift", "severity": "warning"}
    info_drift = {"kind": "drift", "severity": "info"}
    warn_finding = {"kind": "finding", "severity": "warning"}
    err_finding = {"kind": "finding", "severity": "error"}
    assert fails([drift], "drift") and fails([warn_drift], "drift") and fails([err_finding], "drift")
    assert not fails([info_drift, warn_finding], "drift")
    assert fails([err_finding], "error") and fails([drift], "error") and not fails([warn_drift], "error")
    assert not fails([drift, err_finding], "never")
    with pytest.raises(ValueError):
        fails([], "sometimes")
