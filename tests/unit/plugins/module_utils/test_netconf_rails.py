"""Rail routing persisted through link_mtu's backends (_netconf*.plan_routing): planned actions over a fake
/etc, applied for real; tests/interop/test_net_rails.py reads the same files with netplan, networkd and
ifquery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf_netplan as np
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from netfakes import FakeRunner, Node, static

VETH = {"kind": "veth", "bus": None, "permaddr": None, "altnames": [], "driver": "veth", "path": None,
        "id_bus": None, "type": "ether", "devkind": "veth", "renamed": False}


def target(name: str, rail: int, address: str, table: int, **more: Any) -> dict[str, Any]:
    return dict(VETH, name=name, mac="02:dd:00:%02x:00:01" % rail, original_name=name, rails=[
        dict({"fabric": "rdma", "rail": rail, "name": f"rail{rail}", "address": address,
              "subnet": "198.18.1.0/24", "routes": [], "table": table, "priority": table}, **more)])


RAIL0 = target("ens1f0np0", 0, "198.18.1.11", 3100)
RAIL1 = target("ens2f0np0", 1, "198.18.1.15", 3101)
ROUTED = target("ens3f0np0", 2, "10.2.2.11", 3102, subnet="10.2.2.0/24",
                routes=[{"to": "10.2.0.0/16", "via": "10.2.2.1"}])


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def host(node: Node) -> HostRoot:
    return HostRoot(str(node.root))


def apply(node: Node, actions: list[Any], runner: Any = None) -> None:
    for action in actions:
        _netconf.apply_change(host(node), runner or FakeRunner(), action)


# -- systemd-networkd ----------------------------------------------------------------------------
def test_networkd_dropin_with_the_rule_and_the_table_of_each_rail(node: Node) -> None:
    for t in (RAIL0, RAIL1):
        node.put(f"/etc/systemd/network/10-lab-{t['name']}.network", f"[Match]\nName={t['name']}\n\n[Network]\n"
                 f"Address={t['rails'][0]['address']}/24\n")
    backend = _netconf.NetworkdBackend(host(node), FakeRunner())
    actions, notes = backend.plan_routing([RAIL0, RAIL1])
    assert notes == [] and [a.target for a in actions] == [
        "/etc/systemd/network/10-lab-ens1f0np0.network.d/90-aiinfra-rails.conf",
        "/etc/systemd/network/10-lab-ens2f0np0.network.d/90-aiinfra-rails.conf"]
    assert actions[1].after == (
        "# Managed by aiinfra.datapath.rail_routing; changes here are overwritten.\n"
        "# Rail routing of ens2f0np0 (rdma rail1; first matching .network: "
        "/etc/systemd/network/10-lab-ens2f0np0.network).\n\n"
        "[RoutingPolicyRule]\nFrom=198.18.1.15/32\nTable=3101\nPriority=3101\n\n"
        "[Route]\nDestination=198.18.1.0/24\nScope=link\nTable=3101\n")
    apply(node, actions)
    assert backend.plan_routing([RAIL0, RAIL1]) == ([], [])
    # rail1 leaves the plan: its drop-in goes, rail0's stays
    actions, notes = backend.plan_routing([RAIL0])
    assert [(a.target, a.after) for a in actions] == [
        ("/etc/systemd/network/10-lab-ens2f0np0.network.d/90-aiinfra-rails.conf", None)]


def test_networkd_gateway_routes_and_a_shared_network_file_is_not_extended(node: Node) -> None:
    node.put("/etc/systemd/network/10-rails.network", "[Match]\nName=ens*\n\n[Network]\nDHCP=yes\n")
    backend = _netconf.NetworkdBackend(host(node), FakeRunner())
    other = dict(VETH, name="ens4f0np0", mac="02:dd:00:03:00:01", original_name="ens4f0np0")
    actions, notes = backend.plan_routing([ROUTED], [other])
    assert actions == [] and notes == [
        "ens3f0np0: /etc/systemd/network/10-rails.network also matches ens4f0np0; rail routing not persisted (a "
        "table and rule in it would apply to every interface it matches: give ens3f0np0 a .network of its own)"]
    node.put("/etc/systemd/network/10-rails.network", "[Match]\nName=ens3f0np0\n")
    actions, notes = backend.plan_routing([ROUTED])
    assert "[Route]\nDestination=10.2.0.0/16\nGateway=10.2.2.1\nTable=3102\n" in actions[0].after
    node.path("/etc/systemd/network/10-rails.network").unlink()
    actions, notes = backend.plan_routing([ROUTED])
    assert actions == [] and "no .network of systemd-networkd configures it" in notes[0]


# -- netplan -------------------------------------------------------------------------------------
def test_netplan_routes_and_routing_policy_under_the_owning_definition(node: Node) -> None:
    node.put("/etc/netplan/01-lab.yaml", "network:\n  version: 2\n  ethernets:\n    rail-a:\n      match:\n"
             "        name: ens2f0np0\n      addresses: [198.18.1.15/24]\n")
    backend = _netconf.NetplanBackend(host(node), FakeRunner())  # no netplan CLI: the strict reader
    actions, notes = backend.plan_routing([RAIL1])
    assert notes == [] and [a.target for a in actions] == [np.OWN_RAILS]
    assert json.loads(actions[0].after) == {"network": {"version": 2, "ethernets": {"rail-a": {
        "routes": [{"to": "198.18.1.0/24", "scope": "link", "table": 3101}],
        "routing-policy": [{"from": "198.18.1.15", "table": 3101, "priority": 3101}]}}}}
    apply(node, actions)
    assert oct(node.path(np.OWN_RAILS).stat().st_mode & 0o777) == "0o600"
    assert backend.plan_routing([RAIL1]) == ([], [])
    # our own file never counts as the node's configuration (nor makes netplan "detected")
    node.path("/etc/netplan/01-lab.yaml").unlink()
    assert "netplan" not in _netconf.detect(host(node), FakeRunner())
    actions, notes = backend.plan_routing([RAIL1])
    assert [(a.target, a.after) for a in actions] == [(np.OWN_RAILS, None)]
    assert notes == ["ens2f0np0: not configured by netplan; its rail table and rule are not persisted (a new "
                     "netplan definition would take the interface over)"]


# -- NetworkManager (nm-settings-nmcli(5) formats: 'priority 5 from 192.167.4.0/24 table 45') ------
def test_networkmanager_adds_what_the_connection_lacks(node: Node) -> None:
    uuid = "6f2c1a4e-0b7e-4a55-9d6a-1f3a2b4c5d6e"
    props = {"ipv4.routing-rules": "priority 3101 from 198.18.1.99/32 table 3101",
             "ipv4.routes": "10.9.0.0/16 198.18.1.1, 198.18.1.0/24 0.0.0.0 table=3101"}
    handlers = [static(["nmcli", "-g", "GENERAL.CON-UUID", "device", "show", "ens2f0np0"], out=uuid + "\n")]
    handlers += [static(["nmcli", "-g", key, "connection", "show", uuid], out=value + "\n")
                 for key, value in props.items()]
    runner = FakeRunner(handlers, which={"nmcli": "/usr/bin/nmcli"})
    actions, notes = _netconf.NetworkManagerBackend(host(node), runner).plan_routing([RAIL1])
    assert notes == [] and len(actions) == 1  # the route is there already (another spelling)
    assert actions[0].data["argv"] == ["nmcli", "-t", "connection", "modify", uuid,
                                       "-ipv4.routing-rules", "priority 3101 from 198.18.1.99/32 table 3101",
                                       "+ipv4.routing-rules", "priority 3101 from 198.18.1.15/32 table 3101"]
    assert _netconf.nm_list("a, b\\, c") == ["a", "b, c"]
    assert _netconf._same_rule("priority 3 from 10.0.0.1 table 3", "priority 3 from 10.0.0.1/32 table 3")


# -- ifupdown: one stanza shared with link_mtu ---------------------------------------------------
def test_ifupdown_shares_our_stanza_with_link_mtu_and_neither_undoes_the_other(node: Node) -> None:
    node.put("/etc/network/interfaces", "auto lo\niface lo inet loopback\nsource /etc/network/interfaces.d/*\n")
    backend = _netconf.IfupdownBackend(host(node), FakeRunner())
    apply(node, backend.plan([dict(RAIL1, mtu=9000)])[0])
    actions, notes = backend.plan_routing([RAIL1])
    apply(node, actions)
    text = node.path("/etc/network/interfaces.d/aiinfra-ens2f0np0").read_text()
    assert text == ("# Managed by aiinfra.datapath.link_mtu; changes here are overwritten.\nauto ens2f0np0\n"
                    "iface ens2f0np0 inet manual\n    mtu 9000\n    # rail_routing: rdma rail1 (table 3101)\n"
                    "    post-up ip -4 route replace 198.18.1.0/24 dev ens2f0np0 scope link table 3101\n"
                    "    post-up ip -4 rule add priority 3101 from 198.18.1.15/32 lookup 3101 || true\n"
                    "    pre-down ip -4 rule del priority 3101 from 198.18.1.15/32 lookup 3101 || true\n")
    assert backend.plan([dict(RAIL1, mtu=9000)]) == ([], []) and backend.plan_routing([RAIL1]) == ([], [])
    # rail routing leaves: the MTU stays
    apply(node, backend.plan_routing([])[0])
    assert node.path("/etc/network/interfaces.d/aiinfra-ens2f0np0").read_text().endswith("    mtu 9000\n")
    # a stanza of the admin's: a note with the lines to add, nothing written
    node.put("/etc/network/interfaces.d/admin", "iface ens1f0np0 inet static\n    address 198.18.1.11/24\n")
    actions, notes = backend.plan_routing([RAIL0])
    assert actions == [] and notes[0].startswith("ens1f0np0: defined in /etc/network/interfaces.d/admin; rail "
                                                 "routing not persisted: add to that stanza")
