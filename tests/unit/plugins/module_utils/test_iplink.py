"""ip -j -d link parsing, interface matching and MTU limits of VLANs and bonds."""

from __future__ import annotations

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _iplink
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from netfakes import FakeIp, FakeRunner, Node, fixture, nic


@pytest.fixture
def links():
    return _iplink.parse_link_json(fixture("iplink/node-links.json"))


def test_recorded_veth():
    links = _iplink.parse_link_json(fixture("iplink/veth-d.json"))
    v0 = links["v0"]
    assert (v0["mtu"], v0["min_mtu"], v0["max_mtu"]) == (1500, 68, 65535)
    assert _iplink.link_kind(v0) == "veth"
    assert _iplink.mtu_limits(links, "v0") == (68, 65535, "device")


def test_bad_json():
    with pytest.raises(_iplink.LinkError):
        _iplink.parse_link_json("{")


def test_vlan_follows_parent(links):
    assert _iplink.link_parent(links["ens1f0np0.100"]) == "ens1f0np0"
    low, high, why = _iplink.mtu_limits(links, "ens1f0np0.100")
    assert high == 1500 and "parent ens1f0np0" in why
    # the parent is raised in the same run: the VLAN may follow
    assert _iplink.mtu_limits(links, "ens1f0np0.100", {"ens1f0np0": 9000})[1] == 9000
    assert _iplink.depth(links, "ens1f0np0.100") == 1 and _iplink.depth(links, "ens1f0np0") == 0


def test_bond_limited_by_smallest_slave(links):
    assert _iplink.bond_slaves(links, "bond0") == ["ens2f0np0", "ens2f1np1"]
    low, high, why = _iplink.mtu_limits(links, "bond0")
    assert high == 9000 and "ens2f1np1" in why
    assert _iplink.related(links, "bond0") == {"bond0", "ens2f0np0", "ens2f1np1"}


def test_match_by_name_mac_pci_driver(tmp_path, links):
    node = Node(tmp_path)
    nic(node, "ens1f0np0", pci="0000:e6:00.0", driver="mlx5_core")
    nic(node, "ens2f0np0", pci="0000:e7:00.0", driver="mlx5_core", mac="b8:3f:d2:00:00:02")
    nic(node, "eth0", pci="0000:00:03.0", driver="virtio_net", hca=None, ecn=False)
    host = HostRoot(str(node.root))
    assert _iplink.match_interfaces(links, host, {"name": "ens1f0np0"}) == ["ens1f0np0"]
    assert _iplink.match_interfaces(links, host, {"mac": "B8:3F:D2:00:00:01"}) == ["ens1f0np0", "ens1f0np0.100"]
    assert _iplink.match_interfaces(links, host, {"pci": "0000:e6:00.0"}) == ["ens1f0np0"]
    assert _iplink.match_interfaces(links, host, {"driver": "mlx5_core"}) == ["ens1f0np0", "ens2f0np0"]
    assert _iplink.match_interfaces(links, host, {"driver": "mlx5_core", "mac": "b8:3f:d2:00:00:02"}) == [
        "ens2f0np0"]
    assert _iplink.match_interfaces(links, host, {"pci": "0000:ff:00.0"}) == []
    assert _iplink.sysfs_device(host, "v0") == (None, None)
    assert _iplink.sysfs_device(host, "eth0") == ("0000:00:03.0", "virtio_net")


def test_connection_interface_by_address_and_route(links):
    fake = FakeIp([], addr=fixture("iplink/addr.json"), routes={"198.18.0.1": fixture("iplink/route-get-gw.json")})
    ip = _iplink.IpLink(FakeRunner([fake]), "/usr/sbin/ip")
    assert ip.connection_interfaces(links, ["198.18.0.11"]) == ["eth0"]
    assert ip.connection_interfaces(links, [None], client="198.18.0.1") == ["eth0"]
    assert ip.connection_interfaces(links, ["203.0.113.9"]) == []  # not local, no route known


def test_ssh_connection_env():
    assert _iplink.ssh_connection_addresses({"SSH_CONNECTION": "198.18.0.1 50000 198.18.0.11 22"}) == (
        "198.18.0.1", "198.18.0.11")
    assert _iplink.ssh_connection_addresses({"SSH_CONNECTION": "UNKNOWN 65535 UNKNOWN 65535"}) == (None, None)
    assert _iplink.ssh_connection_addresses({}) == (None, None)


def test_route_device_local_is_none():
    assert _iplink.route_device('[{"type":"local","dst":"198.18.0.11","dev":"lo"}]') is None


def test_link_error_is_a_capability_error():
    from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

    with pytest.raises(CapabilityError, match="did not return a JSON list"):
        _iplink.parse_link_json('{"ifname": "eth0"}')
