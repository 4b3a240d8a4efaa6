"""The plan's rails (plan_rails.py): rail0..N-1 in interface order, addresses from the host's variables over
the spec, per-rail subnets and their gateways, tables, GPUs from the host's topology; the inventory checks."""

from __future__ import annotations

from typing import Any

from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import node_plan, validate_spec
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.api import validate_inventory

from ._specs import base

NICS = ["ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0"]


def spec(per_rail: bool = False) -> dict[str, Any]:
    s = base()
    s["profiles"][0]["interfaces"] = [{"name": "eno1", "fabric": "mgmt"}] + [
        {"name": n, "fabric": "rail0"} for n in NICS]
    if per_rail:
        s["fabrics"][1].update(addressing="per-rail-subnet", rails=[
            {"subnet": f"10.100.{r}.0/24", "gateway": f"10.100.{r}.1"} for r in range(4)])
    assert validate_spec(s) == [], [e.render() for e in validate_spec(s)]
    return s


def rails(s: dict[str, Any], facts: dict[str, Any] | None = None, host: str = "h1") -> list[dict[str, Any]]:
    return node_plan(s, host, ["gpu"], facts or {})["rail_routing"]["rails"]


def test_rails_in_interface_order_with_tables_and_the_management_fabric_left_out() -> None:
    got = rails(spec(), {"datapath_addresses": {"rail0": [f"10.100.0.{11 + r}" for r in range(4)]}})
    assert [(r["name"], r["interface"], r["address"], r["subnet"], r["table"], r["priority"]) for r in got] == [
        (f"rail{r}", NICS[r], f"10.100.0.{11 + r}", "10.100.0.0/20", 3100 + r, 3100 + r) for r in range(4)]
    assert {r["fabric"] for r in got} == {"rail0"} and all(r["routes"] == [] and r["gpu"] is None for r in got)
    assert node_plan(spec(), "h1", ["gpu"], {})["rail_routing"]["table_range"] == [3100, 3115]


def test_addresses_by_interface_from_the_spec_and_unknown_ones() -> None:
    s = spec()
    s["hosts"] = {"h1": {"interfaces": [{"name": n, "fabric": "rail0", "address": f"10.100.1.{r}/20"}
                                        for r, n in enumerate(NICS, start=1)]}}
    assert [r["address"] for r in rails(s)] == [f"10.100.1.{r}" for r in range(1, 5)]
    # the host variable wins, per interface
    got = rails(s, {"datapath_addresses": {"rail0": {"ens3f0np0": "10.100.2.3"}}})
    assert [r["address"] for r in got] == ["10.100.1.1", "10.100.1.2", "10.100.2.3", "10.100.1.4"]
    unknown = rails(spec())
    assert [(r["address"], r["address_ok"]) for r in unknown] == [(None, False)] * 4  # read from the node


def test_per_rail_subnets_their_gateways_and_the_fabrics_other_subnets() -> None:
    got = rails(spec(per_rail=True), {"datapath_addresses": {"rail0": [f"10.100.{r}.11" for r in range(4)]}})
    assert [(r["subnet"], r["gateway"], r["addressing"]) for r in got] == [
        (f"10.100.{r}.0/24", f"10.100.{r}.1", "per-rail-subnet") for r in range(4)]
    assert got[2]["routes"] == [{"to": "10.100.0.0/20", "via": "10.100.2.1"}]


def test_the_gpu_of_each_rail_from_the_hosts_topology() -> None:
    topology = {"nics": [{"name": "mlx5_0", "netdevs": ["ens1f0np0"], "rdma": ["mlx5_0"]},
                         {"name": "mlx5_1", "netdevs": ["ens2f0np0"], "rdma": ["mlx5_1"]}],
                "gpus": [{"index": 0, "nearest_nics": ["mlx5_0"]}, {"index": 1, "nearest_nics": ["mlx5_1"]}]}
    got = rails(spec(), {"datapath_facts": {"topology": topology}})
    assert [r["gpu"] for r in got] == [0, 1, None, None]


def test_the_inventory_checks_rail_addresses_in_their_subnets_and_unique() -> None:
    s = spec(per_rail=True)
    hosts = {"h1": (["gpu"], {"datapath_addresses": {"rail0": ["10.100.0.11", "10.100.2.11"]}}),
             "h2": (["gpu"], {"datapath_addresses": {"rail0": ["10.100.0.11"]}}),
             "h3": (["gpu"], {"datapath_addresses": {"rail0": {"ens9": "10.100.0.13"}}})}
    errors = [e.render() for e in validate_inventory(s, hosts)]
    assert any("h1" in e and "rail1 (ens2f0np0) address 10.100.2.11 is outside its subnets (10.100.1.0/24)" in e
               for e in errors), errors
    assert any("h2" in e and "rail0 has address 10.100.0.11, which is also h1's rail0 on rail0" in e
               for e in errors), errors
    assert any("h3" in e and "the host has no interface ens9 on fabric rail0" in e for e in errors), errors
