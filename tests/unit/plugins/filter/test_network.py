"""path_targets, path_report, firmware_violations: the controller side of the network roles."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter.network import (
    FilterModule,
    fabric_address,
    firmware_violations,
    path_report,
    path_targets,
)

HOSTS = ["node1", "node2", "node3", "node4"]
PLAN_IFACES = [{"name": "eno1", "match": {"name": "eno1"}, "fabric": "mgmt", "mtu": 1500},
               {"name": "ens1f0np0", "match": {"name": "ens1f0np0"}, "fabric": "rdma", "mtu": 9000}]


def lab_hostvars() -> dict[str, Any]:
    """Host variables as the lab's inventory writes them: datapath_addresses (and its own lab variable,
    which the filters never read)."""
    return {h: {"datapath_addresses": {"mgmt": f"198.18.0.{10 + i}", "rdma": f"198.18.1.{10 + i}"},
                "datapath_lab_interfaces": {"mgmt": {"address": f"198.18.0.{10 + i}", "ifname": "eno1"},
                                            "rdma": {"address": f"198.18.1.{10 + i}", "ifname": "ens1f0np0"}}}
            for i, h in enumerate(HOSTS, start=1)}


def rails_hostvars(rails: int = 4) -> dict[str, Any]:
    """Four hosts with ``rails`` NICs on rdma (shared subnet), addresses in rail order, plans computed."""
    out: dict[str, Any] = {}
    for i, h in enumerate(HOSTS, start=1):
        addrs = [f"198.18.1.{10 + i + 4 * r}" for r in range(rails)]
        out[h] = {"datapath_addresses": {"rdma": addrs},
                  "datapath_plan": {"rail_routing": {"rails": [
                      {"fabric": "rdma", "rail": r, "interface": f"ens{r + 1}f0np0", "address": addrs[r],
                       "addressing": "shared-subnet"} for r in range(rails)]}}}
    return out


RAIL_IFACES = [{"name": f"ens{r + 1}f0np0", "match": {"name": f"ens{r + 1}f0np0"}, "fabric": "rdma", "mtu": 9000}
               for r in range(4)]


def test_registered() -> None:
    assert set(FilterModule().filters()) == {"path_targets", "path_report", "firmware_violations",
                                             "nic_config_violations"}


def test_address_comes_from_datapath_addresses_never_from_the_lab() -> None:
    hv = lab_hostvars()
    hv["node2"]["datapath_addresses"] = {"rdma": "10.0.0.2"}
    assert fabric_address(hv, "node2", "rdma") == "10.0.0.2"
    assert fabric_address(hv, "node2", "mgmt") is None  # only the lab's variable has it: not read
    assert fabric_address(hv, "node9", "mgmt") is None
    hv["node3"]["datapath_addresses"] = {"rdma": ["10.0.0.3", "10.0.0.7"], "mgmt": {"eno1": "192.0.2.3"}}
    assert fabric_address(hv, "node3", "rdma") == "10.0.0.3" and fabric_address(hv, "node3", "mgmt") == "192.0.2.3"


def test_full_mode_every_other_host_per_fabric() -> None:
    targets = path_targets(PLAN_IFACES, lab_hostvars(), HOSTS, "node1")
    assert [(t["fabric"], t["mtu"], t["interface"], t["source"]) for t in targets] == [
        ("mgmt", 1500, "eno1", "198.18.0.11"), ("rdma", 9000, "ens1f0np0", "198.18.1.11")]
    assert targets[1]["peers"] == [{"name": "node2", "address": "198.18.1.12", "rail": 0},
                                   {"name": "node3", "address": "198.18.1.13", "rail": 0},
                                   {"name": "node4", "address": "198.18.1.14", "rail": 0}]
    assert targets[1]["rail"] == 0 and targets[1]["cross_peers"] == []


def test_rails_pair_rail_i_with_rail_i_and_cross_check_a_shared_subnet() -> None:
    targets = path_targets(RAIL_IFACES, rails_hostvars(), HOSTS, "node1")
    assert [(t["rail"], t["interface"], t["source"]) for t in targets] == [
        (0, "ens1f0np0", "198.18.1.11"), (1, "ens2f0np0", "198.18.1.15"), (2, "ens3f0np0", "198.18.1.19"),
        (3, "ens4f0np0", "198.18.1.23")]
    assert targets[2]["peers"] == [{"name": "node2", "address": "198.18.1.20", "rail": 2},
                                   {"name": "node3", "address": "198.18.1.21", "rail": 2},
                                   {"name": "node4", "address": "198.18.1.22", "rail": 2}]
    # one subnet: the peers' other rails are route-checked from this rail too
    assert len(targets[2]["cross_peers"]) == 9 and {p["rail"] for p in targets[2]["cross_peers"]} == {0, 1, 3}
    # per-rail subnets: no cross-rail peers
    hv = rails_hostvars()
    for h in HOSTS:
        for rail in hv[h]["datapath_plan"]["rail_routing"]["rails"]:
            rail["addressing"] = "per-rail-subnet"
    assert all(t["cross_peers"] == [] for t in path_targets(RAIL_IFACES, hv, HOSTS, "node1"))


def test_ring_mode_next_neighbours_wraps_around() -> None:
    hv = lab_hostvars()
    peers = {h: [p["name"] for p in path_targets(PLAN_IFACES, hv, HOSTS, h, "ring", 2)[1]["peers"]]
             for h in HOSTS}
    assert peers == {"node1": ["node2", "node3"], "node2": ["node3", "node4"],
                     "node3": ["node4", "node1"], "node4": ["node1", "node2"]}
    # more neighbours than hosts: everyone once
    assert len(path_targets(PLAN_IFACES, hv, HOSTS, "node1", "ring", 10)[1]["peers"]) == 3


def test_hosts_without_address_on_a_fabric_are_not_peers_and_fabrics_filter() -> None:
    hv = lab_hostvars()
    del hv["node3"]["datapath_addresses"]["rdma"]
    targets = path_targets(PLAN_IFACES, hv, HOSTS, "node1", fabrics=["rdma"])
    assert [t["fabric"] for t in targets] == ["rdma"]
    assert [p["name"] for p in targets[0]["peers"]] == ["node2", "node4"]


def test_bad_arguments() -> None:
    with pytest.raises(AnsibleFilterError, match="mode must be full or ring"):
        path_targets(PLAN_IFACES, {}, HOSTS, "node1", "star")
    with pytest.raises(AnsibleFilterError, match="neighbours must be at least 1"):
        path_targets(PLAN_IFACES, {}, HOSTS, "node1", "ring", 0)
    with pytest.raises(AnsibleFilterError, match="interfaces list"):
        path_targets({"fabric": "rdma"}, {}, HOSTS, "node1")


def _path(peer: str, ok: bool, fabric: str = "rdma") -> dict[str, Any]:
    probes = [{"mtu": 9000, "loss": 0 if ok else 100, "ok": ok, "error": None},
              {"mtu": 1500, "loss": 0, "ok": True, "error": None}]
    return {"fabric": fabric, "peer": peer, "address": "x", "interface": "ens1f0np0", "mtu": 9000,
            "largest_mtu": 9000 if ok else 1500, "ok": ok, "probes": probes}


def test_report_names_failing_pairs_and_missing_hosts() -> None:
    hv = {"node1": {"verify_result": {"paths": [_path("node2", False), _path("node3", True)]}},
          "node2": {"verify_result": {"paths": [_path("node1", False), _path("node3", False)]}},
          "node3": {"verify_result": {"paths": [_path("node1", True), _path("node2", False)]}},
          "node4": {}}
    report = path_report(hv, ["node1", "node2", "node3", "node4"])
    assert report["ok"] is False and report["missing"] == ["node4"]
    rdma = report["fabrics"]["rdma"]
    assert (rdma["pairs"], rdma["passed"]) == (6, 2)
    assert [(f["source"], f["peer"], f["largest_mtu"]) for f in rdma["failed"]] == [
        ("node1", "node2", 1500), ("node2", "node1", 1500), ("node2", "node3", 1500), ("node3", "node2", 1500)]
    assert report["summary"][0].startswith("rdma: MTU 9000, 2/6 paths pass; failing: node1 -> node2")
    assert report["failures"][0] == "node1 -> node2 on rdma (MTU 9000): largest passing MTU 1500, 100% loss at 9000"
    assert report["failures"][-1] == "node4: no path_check result"
    assert report["paths"][0]["source"] == "node1"


def test_report_all_ok() -> None:
    hv = {"a": {"verify_result": {"paths": [_path("b", True)]}}, "b": {"verify_result": {"paths": [_path("a", True)]}}}
    report = path_report(hv, ["a", "b"])
    assert report["ok"] is True and report["failures"] == []
    assert report["fabrics"] == {"rdma": {"mtu": 9000, "pairs": 2, "passed": 2, "failed": [], "ok": True}}


def _fw(rows: list[dict[str, Any]], plan_policies: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    hv: dict[str, Any] = {"nic_firmware_result": {"compliance": rows}}
    if plan_policies is not None:
        hv["datapath_plan"] = {"nic_firmware": {"policies": plan_policies}}
    return hv


def _row(status: str, driver: str = "mlx5_core", **extra: Any) -> dict[str, Any]:
    row = {"interface": "ens1f0np0", "bus_info": "0000:e6:00.0", "driver": driver, "psid": "MT_0000000838",
           "firmware_version": "28.39.3560", "needs": ">= 28.41.1000", "status": status,
           "reason": "28.39.3560 is older than the minimum 28.41.1000"}
    row.update(extra)
    return row


def test_firmware_lists_every_noncompliant_nic_of_every_host() -> None:
    hv = {"gpu-01": _fw([_row("noncompliant"), _row("compliant", interface="ens2f0np0")]),
          "gpu-02": _fw([_row("noncompliant", interface="ens2f0np0")]),
          "gpu-03": _fw([_row("compliant")]),
          "gpu-04": {}}
    found = firmware_violations(hv, ["gpu-01", "gpu-02", "gpu-03", "gpu-04"])
    assert [(f["host"], f["interface"]) for f in found] == [("gpu-01", "ens1f0np0"), ("gpu-02", "ens2f0np0")]
    assert found[0]["text"] == ("gpu-01 ens1f0np0 (0000:e6:00.0, driver mlx5_core, PSID MT_0000000838): has "
                                "28.39.3560, needs >= 28.41.1000 — 28.39.3560 is older than the minimum 28.41.1000")


def test_firmware_unknown_only_when_a_policy_names_the_driver() -> None:
    unknown = _row("unknown", driver="veth", firmware_version=None, needs=None, psid=None, bus_info=None,
                   reason="firmware version not reported by ethtool, devlink or sysfs")
    hv = {"n1": _fw([unknown])}
    mlx = [{"driver": "mlx5_core", "min_version": "1"}]
    veth = [{"driver": "veth", "min_version": "1"}]
    assert firmware_violations(hv, ["n1"], policies=mlx) == []
    found = firmware_violations(hv, ["n1"], policies=veth)
    assert len(found) == 1 and found[0]["has"] == "no firmware version"
    assert "a policy for driver veth" in found[0]["needs"]
    assert len(firmware_violations(hv, ["n1"], fail_on_unknown=True, policies=mlx)) == 1
    # the host's own plan wins over the role's policies
    assert len(firmware_violations({"n1": _fw([unknown], plan_policies=veth)}, ["n1"], policies=mlx)) == 1
