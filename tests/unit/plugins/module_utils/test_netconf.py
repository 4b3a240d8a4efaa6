"""Persistence backends of link_mtu (_netconf): planned actions over a fake /etc, applied for real."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import render_diff
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from netfakes import FakeRunner, Node

RAIL = {"name": "ens1f0np0", "mtu": 9000, "kind": "physical", "bus": "0000:e6:00.0", "mac": "b8:3f:d2:00:00:01"}
VIRT = {"name": "v0", "mtu": 9000, "kind": "veth", "bus": None, "mac": "02:00:00:00:00:01"}


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def host(node):
    return HostRoot(str(node.root))


def test_networkd_dropin_for_the_matching_network_file(node):
    node.put("/etc/systemd/network/20-rail0.network", "[Match]\nName=ens1f0np0\n\n[Network]\nDHCP=no\n")
    actions, notes = _netconf.NetworkdBackend(host(node), FakeRunner()).plan([RAIL])
    assert notes == []
    [action] = actions
    path = "/etc/systemd/network/20-rail0.network.d/90-aiinfra-mtu.conf"
    assert (action.kind, action.target, action.before, action.text) == ("file", path, None, "write " + path)
    assert action.after.endswith("[Link]\nMTUBytes=9000\n") and action.diff == "file"
    _netconf.apply_change(host(node), FakeRunner(), action)
    assert (node.path(path).read_text(), os.stat(node.path(path)).st_mode & 0o777) == (action.after, 0o644)
    assert _netconf.NetworkdBackend(host(node), FakeRunner()).plan([RAIL]) == ([], [])


def test_networkd_link_files_by_pci_or_original_name(node):
    actions, notes = _netconf.NetworkdBackend(host(node), FakeRunner()).plan([RAIL, VIRT])
    by_path = {a.target: a.after for a in actions}
    assert "[Match]\nPath=pci-0000:e6:00.0\n" in by_path["/etc/systemd/network/10-aiinfra-ens1f0np0.link"]
    assert "OriginalName=v0" in by_path["/etc/systemd/network/10-aiinfra-v0.link"]
    assert all("NamePolicy=keep kernel database onboard slot path" in text for text in by_path.values())


def test_networkd_one_network_file_with_different_mtus_uses_link_files(node):
    node.put("/etc/systemd/network/20-all.network", "[Match]\nName=ens* v*\n")
    other = dict(VIRT, mtu=4200)
    actions, notes = _netconf.NetworkdBackend(host(node), FakeRunner()).plan([RAIL, other])
    assert notes == ["/etc/systemd/network/20-all.network matches ens1f0np0, v0 with different MTUs; "
                     "using .link files"]
    assert sorted(a.target for a in actions) == ["/etc/systemd/network/10-aiinfra-ens1f0np0.link",
                                                 "/etc/systemd/network/10-aiinfra-v0.link"]


def test_networkd_match_rules(node):
    backend = _netconf.NetworkdBackend(host(node), FakeRunner())
    assert backend.matches({"Name": ["ens*", "!ens2*"]}, RAIL)
    assert not backend.matches({"Name": ["!ens1*"]}, RAIL)
    assert backend.matches({"MACAddress": ["B8:3F:D2:00:00:01"]}, RAIL)
    assert not backend.matches({"Driver": ["mlx5_core"]}, RAIL)  # not evaluated: never guessed
    assert not backend.matches({}, RAIL)
    # the same file name in /etc hides the one in /usr/lib
    node.put("/usr/lib/systemd/network/20-rail0.network", "[Match]\nName=ens1f0np0\n")
    node.put("/etc/systemd/network/20-rail0.network", "[Match]\nName=other0\n")
    assert backend.network_files() == ["/etc/systemd/network/20-rail0.network"]
    assert backend.network_file_for(RAIL) is None


def nmcli(answers, modified):
    def handler(argv):
        if argv[0] != "nmcli":
            return None
        if argv[:4] == ["nmcli", "-t", "connection", "modify"]:
            modified.append(argv)
            return 0, "", ""
        key = tuple(argv)
        return (0, answers[key], "") if key in answers else (10, "", "Error: not found")
    return handler


def test_networkmanager_command_action(node):
    answers = {("nmcli", "-g", "GENERAL.CON-UUID", "device", "show", "ib0"): "77aa-uuid\n",
               ("nmcli", "-g", "connection.type", "connection", "show", "77aa-uuid"): "infiniband\n",
               ("nmcli", "-g", "infiniband.mtu", "connection", "show", "77aa-uuid"): "2044\n"}
    modified = []
    runner = FakeRunner([nmcli(answers, modified)], which={"nmcli": "/usr/bin/nmcli"})
    ib = {"name": "ib0", "mtu": 4092, "kind": "infiniband", "bus": None, "mac": None}
    actions, notes = _netconf.NetworkManagerBackend(host(node), runner).plan([ib, RAIL])
    assert notes == ["ens1f0np0: no NetworkManager connection is active on it; MTU not persisted"]
    [action] = actions
    assert (action.kind, action.target, action.before, action.after) == ("command", "77aa-uuid infiniband.mtu",
                                                                         "2044", "4092")
    assert action.text == "nmcli connection modify 77aa-uuid infiniband.mtu 4092 (ib0)"
    assert render_diff(actions) == [{"before_header": "NetworkManager connections",
                                     "after_header": "NetworkManager connections",
                                     "before": "77aa-uuid infiniband.mtu = 2044\n",
                                     "after": "77aa-uuid infiniband.mtu = 4092\n"}]
    _netconf.apply_change(host(node), runner, action)
    assert modified == [["nmcli", "-t", "connection", "modify", "77aa-uuid", "infiniband.mtu", "4092"]]
    assert runner.commands == modified
    answers[("nmcli", "-g", "infiniband.mtu", "connection", "show", "77aa-uuid")] = "4092\n"
    assert _netconf.NetworkManagerBackend(host(node), runner).plan([ib])[0] == []


def test_networkmanager_without_nmcli(node):
    assert _netconf.NetworkManagerBackend(host(node), FakeRunner()).plan([RAIL]) == (
        [], ["nmcli is not installed; MTU not persisted through NetworkManager"])


def test_netplan_file_0600_bonds_only_when_defined_elsewhere(node):
    node.put("/etc/netplan/50-cloud-init.yaml", "network:\n  bonds:\n    bond0:\n      interfaces: [a, b]\n")
    bond = {"name": "bond0", "mtu": 9000, "kind": "bond"}
    vlan = {"name": "vlan7", "mtu": 9000, "kind": "vlan"}
    actions, notes = _netconf.NetplanBackend(host(node), FakeRunner()).plan([RAIL, bond, vlan])
    assert notes == ["vlan7: vlans is not defined in /etc/netplan; MTU not persisted"]
    [action] = actions
    assert json.loads(action.after) == {"network": {"version": 2, "ethernets": {"ens1f0np0": {"mtu": 9000}},
                                                    "bonds": {"bond0": {"mtu": 9000}}}}
    _netconf.apply_change(host(node), FakeRunner(), action)
    assert os.stat(node.path(_netconf.NetplanBackend.path)).st_mode & 0o777 == 0o600
    assert _netconf.NetplanBackend(host(node), FakeRunner()).plan([RAIL, bond]) == ([], [])


def test_netplan_foreign_file_is_left_alone(node):
    node.put(_netconf.NetplanBackend.path, "network:\n  version: 2\n")
    assert _netconf.NetplanBackend(host(node), FakeRunner()).plan([RAIL]) == (
        [], ["/etc/netplan/90-aiinfra-datapath.yaml exists but was not written by this module (not JSON); not changed"])


@pytest.mark.parametrize("line", ["source /etc/network/interfaces.d/*", "source interfaces.d/*",
                                  "source-directory /etc/network/interfaces.d", "source-directory interfaces.d/"])
def test_ifupdown_source_forms(node, line):
    node.put("/etc/network/interfaces", "auto lo\n%s\n" % line)
    actions, notes = _netconf.IfupdownBackend(host(node), FakeRunner()).plan([RAIL])
    assert [a.target for a in actions] == ["/etc/network/interfaces.d/aiinfra-ens1f0np0"] and notes == []
    assert actions[0].after.endswith("auto ens1f0np0\niface ens1f0np0 inet manual\n    mtu 9000\n")


def test_ifupdown_stanza_in_another_file(node):
    node.put("/etc/network/interfaces", "source /etc/network/interfaces.d/*\n")
    node.put("/etc/network/interfaces.d/rails", "iface ens1f0np0 inet static\n")
    assert _netconf.IfupdownBackend(host(node), FakeRunner()).plan([RAIL]) == (
        [], ["ens1f0np0: defined in /etc/network/interfaces.d/rails; add 'mtu 9000' to that stanza "
             "(not edited automatically)"])


def test_detect_and_choose(node):
    def systemctl(argv):
        if argv[1:3] == ["is-active", "systemd-networkd"]:
            return 0, "active\n", ""
        return 3, "inactive\n", ""

    runner = FakeRunner([systemctl])
    assert _netconf.detect(host(node), runner, "/usr/bin/systemctl") == {"networkd": "systemd-networkd is active"}
    # netplan's own drop-in alone is no evidence of netplan
    node.put(_netconf.NetplanBackend.path, "{}\n")
    node.put("/etc/network/interfaces", "")
    found = _netconf.detect(host(node), runner, None)
    assert found == {"ifupdown": "/etc/network/interfaces present"}
    node.put("/etc/netplan/50-cloud-init.yaml", "network: {}\n")
    found = _netconf.detect(host(node), runner, "/usr/bin/systemctl")
    assert _netconf.choose(found) == "netplan" and set(found) == {"netplan", "networkd", "ifupdown"}
    assert _netconf.choose({}) is None
