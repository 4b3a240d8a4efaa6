"""`datapath-lab up --rails N --addressing ...`: the rails' names, addresses, subnets, bridges and ports, the
spec and inventory the lab writes for them, and the checks of the options (no root: nothing is built)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "lab"))

from datapath_lab import cli, impair  # noqa: E402
from datapath_lab.core import Lab, LabConfig, LabError, _fabric_record, node_rails  # noqa: E402
from datapath_lab.spec import lab_spec  # noqa: E402


def fabrics(**kw):
    return LabConfig(name="dp37", nodes=4, **kw).fabric_objs()


def test_one_rail_keeps_the_names_and_addresses_of_before() -> None:
    mgmt, rdma = fabrics()
    got = (mgmt.ifname, rdma.ifname, rdma.address(2), str(rdma.subnet))
    assert got == ("eno1", "ens1f0np0", "198.18.1.12", "198.18.1.0/24")
    assert _fabric_record(rdma) == {"name": "rdma", "mtu": 9000, "index": 1, "subnet": "198.18.1.0/24",
                                    "ifname": "ens1f0np0"}
    assert Lab.port("node2") == "p-node2" and impair.names("node2")["ifb"] == "i-node2"


def test_four_rails_in_one_subnet_and_in_a_subnet_each() -> None:
    mgmt, rdma = fabrics(rails=4)
    assert [rdma.rail_ifname(r) for r in range(4)] == ["ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0"]
    assert [rdma.address(1, r) for r in range(4)] == ["198.18.1.11", "198.18.1.15", "198.18.1.19", "198.18.1.23"]
    assert {rdma.bridge(r) for r in range(4)} == {"br0"} and mgmt.rails == 1
    _mgmt, per = fabrics(rails=4, addressing="per-rail-subnet")
    assert [str(per.rail_subnet(r)) for r in range(4)] == ["198.18.1.0/24", "198.18.9.0/24", "198.18.17.0/24",
                                                           "198.18.25.0/24"]
    assert [per.address(2, r) for r in range(4)] == ["198.18.1.12", "198.18.9.12", "198.18.17.12", "198.18.25.12"]
    assert [per.bridge(r) for r in range(4)] == ["br0", "br1", "br2", "br3"]
    assert Lab.port("node2", 3) == "p-node2r3" and impair.key_of("node2", "rdma", 3) == "node2/rdma/3"
    # a third fabric's NICs follow the rails (no name twice)
    three = LabConfig(nodes=2, rails=2, fabrics=[("mgmt", 1500), ("rdma", 9000), ("stor", 9000)])
    names = [f.rail_ifname(r) for f in three.fabric_objs()
             for r in range(f.rails)]
    assert names == ["eno1", "ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0"]


def _state(addressing: str) -> dict:
    fabs = LabConfig(name="dp37", nodes=2, rails=2, addressing=addressing).fabric_objs()
    nodes = {}
    for idx, node in enumerate(("node1", "node2"), start=1):
        rails = {f.name: [{"rail": r, "ifname": f.rail_ifname(r), "address": f.address(idx, r), "mac": "x",
                           "prefixlen": 24, "port": Lab.port(node, r), "bridge": f.bridge(r)}
                          for r in range(f.rails)] for f in fabs}
        nodes[node] = {"interfaces": {f: rs[0] for f, rs in rails.items()}, "rails": rails, "nvme": f"/dev/loop{idx}",
                       "nvme_bytes": 1 << 30}
    return {"name": "dp37", "fabrics": [_fabric_record(f) for f in fabs], "nodes": nodes}


def test_the_lab_spec_lists_every_rail_and_the_per_rail_subnets() -> None:
    shared = lab_spec(_state("shared-subnet"))["datapath"]
    assert shared["profiles"][0]["interfaces"] == [{"name": "eno1", "fabric": "mgmt"},
                                                   {"name": "ens1f0np0", "fabric": "rdma"},
                                                   {"name": "ens2f0np0", "fabric": "rdma"}]
    assert "addressing" not in shared["fabrics"][1]
    per = lab_spec(_state("per-rail-subnet"))["datapath"]["fabrics"][1]
    assert per["addressing"] == "per-rail-subnet" and per["subnets"] == ["198.18.1.0/24", "198.18.9.0/24"]
    assert per["rails"] == [{"subnet": "198.18.1.0/24"}, {"subnet": "198.18.9.0/24"}]


def test_the_inventory_carries_the_addresses_in_rail_order() -> None:
    state = _state("shared-subnet")
    assert node_rails(state["nodes"]["node2"], "rdma")[1]["address"] == "198.18.1.14"
    lab = Lab("dp37")
    lab.proxy_command = lambda node, st: "true"  # type: ignore[method-assign]
    hosts = lab.inventory_data(state)["all"]["hosts"]
    assert hosts["node2"]["datapath_addresses"] == {"mgmt": "198.18.0.12", "rdma": ["198.18.1.12", "198.18.1.14"]}


@pytest.mark.parametrize(("config", "message"), [
    ({"rails": 9}, "--rails 9: choose 1 to 8"),
    ({"addressing": "per-rail"}, "--addressing 'per-rail'"),
    ({"nodes": 64, "rails": 4}, "64 nodes x 4 rails do not fit one /24"),
])
def test_bad_rails_options(config: dict, message: str) -> None:
    with pytest.raises(LabError, match=message):
        LabConfig(**config).validate()


def test_the_cli_takes_rails_and_a_rail_for_impair_and_set_port_mtu() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["up", "--rails", "4", "--addressing", "per-rail-subnet"])
    assert (args.rails, args.addressing) == (4, "per-rail-subnet")
    args = parser.parse_args(["impair", "node2", "rdma", "--rail", "3", "--rate", "200mbit"])
    assert (args.rail, args.rate) == (3, 200_000_000)
    assert parser.parse_args(["set-port-mtu", "node2", "rdma", "1500", "--rail", "2"]).rail == 2
