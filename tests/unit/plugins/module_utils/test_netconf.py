"""Persistence backends of link_mtu (_netconf*): planned actions over a fake /etc, applied for real.

The netplan cases are the shared ones of tests/fixtures/interop/net/netplan (netcases.py); here
they are read by the backend's own reader of netplan files, or answered with netplan's recorded
output; tests/interop/test_net_*.py checks the same plans with netplan, udev and networkd.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import netcases
import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf_systemd as systemd
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import render_diff
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from netfakes import FakeRunner, Node, static

# device facts as _iplink.device_facts gives them (a renamed mlx5 NIC, a veth named by its creator)
RAIL = {"name": "ens1f0np0", "mtu": 9000, "kind": "physical", "bus": "0000:e6:00.0", "mac": "b8:3f:d2:00:00:01",
        "permaddr": "b8:3f:d2:00:00:01", "altnames": ["enp230s0f0np0"], "driver": "mlx5_core",
        "path": "pci-0000:e6:00.0", "id_bus": "pci", "type": "ether", "devkind": None, "renamed": True}
VIRT = {"name": "v0", "mtu": 9000, "kind": "veth", "bus": None, "mac": "02:00:00:00:00:01", "permaddr": None,
        "altnames": [], "driver": "veth", "path": None, "id_bus": None, "type": "ether", "devkind": "veth",
        "original_name": "v0", "renamed": False}
OTHER = dict(RAIL, name="ens2f0np0", mac="b8:3f:d2:00:00:02", permaddr="b8:3f:d2:00:00:02", altnames=[],
             bus="0000:e7:00.0", path="pci-0000:e7:00.0")
LINK_DIR = "/etc/systemd/network"


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def host(node):
    return HostRoot(str(node.root))


def networkd(node):
    return _netconf.NetworkdBackend(host(node), FakeRunner())


# -- systemd-networkd: .network drop-ins ---------------------------------------------------
def test_networkd_dropin_for_the_matching_network_file(node):
    node.put("/etc/systemd/network/20-rail0.network", "[Match]\nName=ens1f0np0\n\n[Network]\nDHCP=no\n")
    actions, notes = networkd(node).plan([RAIL])
    assert notes == []
    [action] = actions
    path = "/etc/systemd/network/20-rail0.network.d/90-aiinfra-mtu.conf"
    assert (action.kind, action.target, action.before, action.text) == ("file", path, None, "write " + path)
    assert action.after.endswith("[Link]\nMTUBytes=9000\n") and action.diff == "file"
    assert "# MTU of ens1f0np0 (first matching .network: /etc/systemd/network/20-rail0.network)." in action.after
    _netconf.apply_change(host(node), FakeRunner(), action)
    assert (node.path(path).read_text(), os.stat(node.path(path)).st_mode & 0o777) == (action.after, 0o644)
    assert networkd(node).plan([RAIL]) == ([], [])


def test_networkd_network_matched_by_altname_mac_or_driver(node):
    node.put("/usr/lib/systemd/network/30-by-altname.network", "[Match]\nName=enp230s0f0np0\n")
    actions, notes = networkd(node).plan([RAIL])
    assert [a.target for a in actions] == ["/etc/systemd/network/30-by-altname.network.d/90-aiinfra-mtu.conf"]
    node.put("/etc/systemd/network/20-by-mac.network", "[Match]\nPermanentMACAddress=B8-3F-D2-00-00-01\n")
    actions, notes = networkd(node).plan([RAIL])
    assert [a.target for a in actions] == ["/etc/systemd/network/20-by-mac.network.d/90-aiinfra-mtu.conf"]
    node.put("/etc/systemd/network/10-by-driver.network", "[Match]\nDriver=mlx5_*\nName=!ens2*\n")
    actions, notes = networkd(node).plan([RAIL])
    assert [a.target for a in actions] == ["/etc/systemd/network/10-by-driver.network.d/90-aiinfra-mtu.conf"]


def test_networkd_network_with_different_mtus_uses_link_files(node):
    node.put("/etc/systemd/network/20-all.network", "[Match]\nName=ens* v*\n")
    other = dict(VIRT, mtu=4200)
    actions, notes = networkd(node).plan([RAIL, other])
    assert notes == ["%s: /etc/systemd/network/20-all.network matches ens1f0np0, v0, which get different MTUs; "
                     "MTU persisted by a .link file instead (the .network sets no MTU)" % name
                     for name in ("ens1f0np0", "v0")]
    assert sorted(a.target for a in actions) == ["/etc/systemd/network/10-aiinfra-ens1f0np0.link",
                                                 "/etc/systemd/network/10-aiinfra-v0.link"]


def test_networkd_network_reaching_another_device(node):
    node.put("/etc/systemd/network/20-rails.network", "[Match]\nDriver=mlx5_core\n")
    actions, notes = networkd(node).plan([RAIL], [OTHER])
    assert notes == ["ens1f0np0: /etc/systemd/network/20-rails.network also matches ens2f0np0, which this run does "
                     "not set; MTU persisted by a .link file instead (the .network sets no MTU)"]
    assert [a.target for a in actions] == ["/etc/systemd/network/10-aiinfra-ens1f0np0.link"]
    # ... unless the .network sets an MTU itself: networkd would undo the .link's
    node.put("/usr/lib/systemd/network/20-rails.network.d/mtu.conf", "[Link]\nMTUBytes=1500\n")
    actions, notes = networkd(node).plan([RAIL], [OTHER])
    assert actions == [] and notes == [
        "ens1f0np0: /etc/systemd/network/20-rails.network also matches ens2f0np0, which this run does not set, "
        "and it sets MTUBytes=1500 itself; MTU not persisted (give ens1f0np0 a .network of its own)"]


def test_networkd_unsettled_network_gets_a_dropin_and_a_note(node):
    node.put("/etc/systemd/network/10-host.network", "[Match]\nName=ens*\nHost=gpu-node-*\n")
    node.put("/etc/systemd/network/20-rail0.network", "[Match]\nName=ens1f0np0\n")
    actions, notes = networkd(node).plan([RAIL])
    assert sorted(a.target for a in actions) == [
        "/etc/systemd/network/10-host.network.d/90-aiinfra-mtu.conf",
        "/etc/systemd/network/20-rail0.network.d/90-aiinfra-mtu.conf"]
    assert notes == ["ens1f0np0: /etc/systemd/network/10-host.network may configure it (Host= cannot be checked "
                     "here); its drop-in sets the MTU only if it does"]


# -- [Match] as udev and networkd read it ---------------------------------------------------
@pytest.mark.parametrize("match, keys, facts, answer", [
    ("Name=ens* !ens2*", "network", RAIL, True),
    ("Name=!ens1*", "network", dict(RAIL, altnames=[]), False),
    ("Name=!ens1*", "network", RAIL, True),             # systemd: the name *or any altname* passes
    ("Name=enp230s0f0np0", "network", RAIL, True),                      # alternative names count
    ("Name=ens9\nName=\nName=ens1f0np0", "network", RAIL, True),         # an empty assignment resets
    ("MACAddress=b8:3f:d2:00:00:01 b8:3f:d2:00:00:09", "network", RAIL, True),
    ("PermanentMACAddress=b83f.d200.0001", "network", RAIL, True),
    ("PermanentMACAddress=02:00:00:00:00:01", "network", VIRT, False),   # a veth has no permanent MAC
    ("Driver=mlx5_core", "network", RAIL, True),
    ("Driver=mlx5_core", "network", dict(RAIL, driver=None), False),
    ("Driver=mlx5_core", "network", {"name": "x"}, None),                # unknown: may match
    ("Path=pci-0000:e6:*", "link", RAIL, True),
    ("Path=*-usb-*", "link", RAIL, False),                                # 73-usb-net-by-mac.link
    ("Path=*-usb-*", "link", VIRT, False),                                # no ID_PATH at all
    ("Type=ether\nKind=veth", "network", VIRT, True),
    ("Kind=bond", "link", RAIL, False),
    ("Property=ID_BUS=pci", "link", RAIL, True),
    ("Property=!ID_BUS=usb", "link", RAIL, True),
    ("Property=ID_MODEL_ID=0x101d", "link", RAIL, None),
    ("Host=gpu-node-01\nName=ens1f0np0", "network", RAIL, None),
    ("Virtualization=!container\nOriginalName=*", "link", RAIL, None),
    ("OriginalName=v0", "link", VIRT, True),
    ("OriginalName=ens1f0np0", "link", RAIL, False),                      # renamed: not its kernel name
    ("OriginalName=eth*", "link", RAIL, None),                            # renamed from what? unknown
    ("MACAddress=b8:3f:d2:00:00:01", "link", RAIL, True),                 # a NIC is born with its own MAC
    ("MACAddress=02:00:00:00:00:01", "link", VIRT, None),                 # a veth's is random at birth
    ("Name=ens1f0np0", "link", RAIL, False),                              # not a .link key: ignored, empty
    ("", "network", RAIL, False),
])
def test_match_rules(match, keys, facts, answer):
    table = systemd.LINK_KEYS if keys == "link" else systemd.NETWORK_KEYS
    assert systemd.match_file("[Match]\n%s\n" % match, table, facts) is answer


def test_search_path_masking_and_dropins(node):
    node.put("/usr/lib/systemd/network/20-rail0.network", "[Match]\nName=ens1f0np0\n")
    node.put("/etc/systemd/network/20-rail0.network", "[Match]\nName=other0\n")
    node.put("/lib/systemd/network/30-masked.network", "[Match]\nName=ens1f0np0\n")
    node.path("/run/systemd/network").mkdir(parents=True)
    os.symlink("/dev/null", node.path("/run/systemd/network/30-masked.network"))
    assert systemd.unit_files(host(node), ".network") == [("20-rail0.network", "/etc/systemd/network/20-rail0.network")]
    node.put("/usr/lib/systemd/network/99-default.link.d/50-a.conf", "[Link]\nNamePolicy=mac\n")
    node.put("/etc/systemd/network/99-default.link.d/50-a.conf", "[Link]\nNamePolicy=path\n")
    node.put("/run/systemd/network/99-default.link.d/10-b.conf", "[Link]\n")
    assert systemd.dropins(host(node), "99-default.link") == [
        "/run/systemd/network/99-default.link.d/10-b.conf", "/etc/systemd/network/99-default.link.d/50-a.conf"]
    assert networkd(node).plan([RAIL])[0][0].target == "/etc/systemd/network/10-aiinfra-ens1f0np0.link"


# -- the .link route ---------------------------------------------------------------------------
def test_own_link_files_repeat_the_nodes_99_default(node):
    actions, notes = networkd(node).plan([RAIL, VIRT])
    by_path = {a.target: a.after for a in actions}
    assert "[Match]\nPath=pci-0000:e6:00.0\n" in by_path["/etc/systemd/network/10-aiinfra-ens1f0np0.link"]
    assert "[Match]\nOriginalName=v0\n" in by_path["/etc/systemd/network/10-aiinfra-v0.link"]
    assert all("NamePolicy=keep kernel database onboard slot path" in text for text in by_path.values())
    node.put("/usr/lib/systemd/network/99-default.link", "[Match]\nOriginalName=*\n\n[Link]\nNamePolicy=keep path\n"
             "MACAddressPolicy=persistent\n")
    node.put("/etc/systemd/network/99-default.link.d/10-altnames.conf", "[Link]\nAlternativeNamesPolicy=path\n")
    [action] = networkd(node).plan([RAIL])[0]
    assert action.after.endswith("[Link]\nNamePolicy=keep path\nMACAddressPolicy=persistent\n"
                                 "AlternativeNamesPolicy=path\nMTUBytes=9000\n")


def test_admin_link_gets_a_dropin_not_a_rival(node):
    """Issue point 2: 50-admin.link names the NIC storage0; a .link of ours would hide it."""
    admin = "[Match]\nPermanentMACAddress=b8:3f:d2:00:00:01\n\n[Link]\nName=storage0\n"
    node.put("/etc/systemd/network/50-admin.link", admin)
    old = node.put("/etc/systemd/network/10-aiinfra-ens1f0np0.link", "# %s\n[Match]\n" % systemd.HEADER)
    actions, notes = networkd(node).plan([RAIL])
    assert notes == []
    assert [(a.text, a.after) for a in actions] == [
        ("write /etc/systemd/network/50-admin.link.d/90-aiinfra-mtu.conf",
         "# %s\n# MTU of ens1f0np0 (.link udev applies: /etc/systemd/network/50-admin.link).\n[Link]\nMTUBytes=9000\n"
         % systemd.HEADER),
        ("remove /etc/systemd/network/10-aiinfra-ens1f0np0.link", None)]
    for action in actions:
        _netconf.apply_change(host(node), FakeRunner(), action)
    assert not old.exists() and networkd(node).plan([RAIL]) == ([], [])


def test_admin_link_reaching_another_device_is_not_extended(node):
    node.put("/etc/systemd/network/50-mlx.link", "[Match]\nDriver=mlx5_core\n\n[Link]\nNamePolicy=path\n")
    actions, notes = networkd(node).plan([RAIL], [OTHER])
    assert actions == [] and notes == [
        "ens1f0np0: /etc/systemd/network/50-mlx.link also matches ens2f0np0, which this run does not set; MTU not "
        "persisted by .link: add MTUBytes= for it to a .link that matches it alone"]


def test_unsettled_admin_links(node):
    node.put("/etc/systemd/network/05-early.link", "[Match]\nOriginalName=eth*\n\n[Link]\nNamePolicy=path\n")
    actions, notes = networkd(node).plan([RAIL])
    assert sorted(a.target for a in actions) == ["/etc/systemd/network/05-early.link.d/90-aiinfra-mtu.conf",
                                                 "/etc/systemd/network/10-aiinfra-ens1f0np0.link"]
    assert notes == ["ens1f0np0: /etc/systemd/network/05-early.link may apply to it (OriginalName= cannot be "
                     "checked here); MTU written as its drop-in too"]
    node.put("/etc/systemd/network/60-late.link", "[Match]\nHost=gpu-*\n\n[Link]\nName=storage0\n")
    actions, notes = networkd(node).plan([RAIL])
    assert sorted(a.target for a in actions) == ["/etc/systemd/network/05-early.link.d/90-aiinfra-mtu.conf",
                                                 "/etc/systemd/network/60-late.link.d/90-aiinfra-mtu.conf"]
    assert notes[-1] == ("ens1f0np0: /etc/systemd/network/60-late.link may apply to it and sorts after "
                         "10-aiinfra-ens1f0np0.link, which would hide it; no .link of our own written")


def test_stale_dropins_of_this_run_are_removed(node):
    stale = "/etc/systemd/network/20-old.network.d/90-aiinfra-mtu.conf"
    node.put(stale, "# %s\n# MTU of ens1f0np0 (first matching .network: x).\n[Link]\nMTUBytes=9000\n" % systemd.HEADER)
    keep = "/etc/systemd/network/21-other.network.d/90-aiinfra-mtu.conf"
    node.put(keep, "# %s\n# MTU of ens3f0np0 (first matching .network: y).\n[Link]\nMTUBytes=9000\n" % systemd.HEADER)
    actions, notes = networkd(node).plan([RAIL])
    assert [a.text for a in actions] == ["write /etc/systemd/network/10-aiinfra-ens1f0np0.link", "remove " + stale]


# -- NetworkManager ------------------------------------------------------------------------
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


# -- netplan -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in netcases.names() if not netcases.load(n)["expect"].get("cli_only")])
def test_netplan_cases_read_from_the_files(tmp_path, name):
    hosted, targets, others, case = netcases.build(name, tmp_path)
    actions, notes = _netconf.NetplanBackend(hosted, FakeRunner()).plan(targets, others)
    netcases.expect(case, actions, notes)
    for action in actions:
        _netconf.apply_change(hosted, FakeRunner(), action)
    assert _netconf.NetplanBackend(hosted, FakeRunner()).plan(targets, others)[0] == []


def recorded_netplan_get(case):
    """``netplan get`` answered from the case's recordings (with or without our planned drop-in)."""
    calls = []

    def handler(argv):
        if argv[:2] != ["/usr/sbin/netplan", "get"]:
            return None
        root = Path(argv[argv.index("--root-dir") + 1])
        planned = (root / "etc/netplan/90-aiinfra-datapath.yaml").exists()
        calls.append(sorted(str(p.relative_to(root)) for p in root.rglob("*.yaml")))
        name = "netplan-get-planned.yaml" if planned else "netplan-get.yaml"
        return 0, (netcases.CASES / case / name).read_text(), ""
    return handler, calls


@pytest.mark.parametrize("name", ["set-name-by-mac", "bond-vlan"])
def test_netplan_cases_read_by_netplan_get(tmp_path, name):
    hosted, targets, others, case = netcases.build(name, tmp_path)
    handler, calls = recorded_netplan_get(name)
    runner = FakeRunner([handler], which={"netplan": "/usr/sbin/netplan"})
    actions, notes = _netconf.NetplanBackend(hosted, runner).plan(targets, others)
    netcases.expect(case, actions, notes)
    # netplan reads a private copy: first without our drop-in, then with the planned one
    assert len(calls) == 2 and "etc/netplan/90-aiinfra-datapath.yaml" not in calls[0]
    assert "etc/netplan/90-aiinfra-datapath.yaml" in calls[1]


def test_netplan_get_failure_is_a_note(node):
    node.put("/etc/netplan/50-x.yaml", "network: {version: 2}\n")
    error = ("Traceback ...\nnetplan.libnetplan.LibNetplanException: /tmp/aiinfra-netplan-x/etc/netplan/50-x.yaml:"
             "3:14: Error in network definition: invalid boolean value 'maybe'\n")

    def failing(argv):
        return (1, "", error.replace("/tmp/aiinfra-netplan-x", argv[3])) if argv[1] == "get" else None

    runner = FakeRunner([failing], which={"netplan": "/usr/sbin/netplan"})
    assert _netconf.NetplanBackend(host(node), runner).plan([RAIL]) == ([], [
        "netplan cannot read the configuration: /etc/netplan/50-x.yaml:3:14: Error in network definition: invalid "
        "boolean value 'maybe'; MTU not persisted through netplan"])


def test_netplan_without_get_reads_the_files(node):
    """netplan before 0.100 (Ubuntu 18.04) has no 'get': the files are read as netplan reads them."""
    node.put("/etc/netplan/50-x.yaml", "network:\n  ethernets:\n    ens1f0np0: {addresses: [198.19.0.11/24]}\n")
    old = static(["/usr/sbin/netplan", "get"], rc=2, err="netplan: error: argument : invalid choice: 'get'\n")

    def handler(argv):
        return old(argv[:2])

    runner = FakeRunner([handler], which={"netplan": "/usr/sbin/netplan"})
    [action] = _netconf.NetplanBackend(host(node), runner).plan([RAIL])[0]
    assert json.loads(action.after)["network"]["ethernets"] == {"ens1f0np0": {"mtu": 9000}}
    assert len(runner.calls) == 1


def test_netplan_file_the_reader_refuses(node):
    node.put("/etc/netplan/50-anchors.yaml", "network:\n  ethernets:\n    a: &x {dhcp4: true}\n")
    assert _netconf.NetplanBackend(host(node), FakeRunner()).plan([RAIL]) == ([], [
        "/etc/netplan/50-anchors.yaml, line 3: anchors are not supported: this reader refuses it and netplan's CLI "
        "is not installed to read it; MTU not persisted through netplan"])


def test_netplan_foreign_file_is_left_alone(node):
    node.put(_netconf.NetplanBackend.path, "network:\n  version: 2\n")
    assert _netconf.NetplanBackend(host(node), FakeRunner()).plan([RAIL]) == (
        [], ["/etc/netplan/90-aiinfra-datapath.yaml exists but was not written by this module (not JSON); not changed"])


def test_netplan_dropin_removed_when_nothing_is_left(node):
    node.put("/etc/netplan/50-cloud-init.yaml", "network:\n  ethernets:\n    eno1: {dhcp4: true}\n")
    node.put(_netconf.NetplanBackend.path, json.dumps({"network": {"version": 2, "ethernets": {"ens1f0np0": {
        "mtu": 9000}}}}))
    actions, notes = _netconf.NetplanBackend(host(node), FakeRunner()).plan([RAIL])
    assert [a.text for a in actions] == ["remove /etc/netplan/90-aiinfra-datapath.yaml",
                                         "write /etc/systemd/network/10-aiinfra-ens1f0np0.link"]
    assert notes[0].startswith("ens1f0np0: not configured by netplan; MTU persisted by a systemd .link")


def test_netplan_entries_of_other_interfaces_are_kept(node):
    node.put("/etc/netplan/50-rails.yaml", "network:\n  ethernets:\n    ens1f0np0: {}\n    ens3f0np0: {}\n")
    node.put(_netconf.NetplanBackend.path, json.dumps({"network": {"version": 2, "ethernets": {"ens3f0np0": {
        "mtu": 4200}}}}))
    [action] = _netconf.NetplanBackend(host(node), FakeRunner()).plan([RAIL])[0]
    assert json.loads(action.after)["network"]["ethernets"] == {"ens1f0np0": {"mtu": 9000}, "ens3f0np0": {"mtu": 4200}}


def test_netplan_sections_without_mtu_and_unsettled_matches(node):
    node.put("/etc/netplan/50-x.yaml", "network:\n  vrfs:\n    ens1f0np0: {table: 10}\n  ethernets:\n"
             "    any:\n      match: {driver: veth}\n")
    notes = _netconf.NetplanBackend(host(node), FakeRunner()).plan([RAIL, dict(VIRT, driver="x", devkind="x")])[1]
    assert notes == ["ens1f0np0: configured by netplan's vrfs.ens1f0np0, which has no mtu key; MTU not persisted",
                     "v0: not configured by netplan; MTU persisted by a systemd .link (udev applies it at boot, "
                     "whatever renders the network), not by a new netplan definition"]
    unknown = dict(VIRT)
    del unknown["driver"]
    notes = _netconf.NetplanBackend(host(node), FakeRunner()).plan([unknown])[1]
    assert notes == ["v0: netplan's ethernets.any may configure it (its match cannot be checked here); MTU not "
                     "persisted: set mtu there"]


# -- ifupdown ------------------------------------------------------------------------------
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


# -- detection -----------------------------------------------------------------------------
def test_detect_and_choose(node):
    def systemctl(argv):
        # the real systemctl's answer to `is-active NetworkManager systemd-networkd`: a state per unit
        assert argv[1:] == ["is-active", "NetworkManager", "systemd-networkd"]
        return 3, "inactive\nactive\n", ""

    runner = FakeRunner([systemctl])
    assert _netconf.detect(host(node), runner, "/usr/bin/systemctl") == {"networkd": "systemd-networkd is active"}
    # netplan's own drop-in alone is no evidence of netplan
    node.put(_netconf.NetplanBackend.path, "{}\n")
    node.put("/etc/network/interfaces", "")
    found = _netconf.detect(host(node), runner, None)
    assert found == {"ifupdown": "/etc/network/interfaces present"}
    node.put("/run/netplan/50-cloud-init.yaml", "network: {}\n")
    assert _netconf.detect(host(node), runner, None)["netplan"] == "/run/netplan/50-cloud-init.yaml present"
    node.put("/etc/netplan/50-cloud-init.yaml", "network: {}\n")
    found = _netconf.detect(host(node), runner, "/usr/bin/systemctl")
    assert _netconf.choose(found) == "netplan" and set(found) == {"netplan", "networkd", "ifupdown"}
    assert found["netplan"] == "/etc/netplan/*.yaml present"
    assert _netconf.choose({}) is None


def test_networkd_without_a_service_manager_is_found_by_its_state_file(node):
    """A node without systemd as PID 1 (a container, a lab node): systemctl prints nothing on stdout
    ("System has not been booted with systemd"), so networkd's state file in /run is the evidence;
    a manager that answers (inactive) is believed over a stale file."""
    def no_manager(argv):
        return 1, "", "System has not been booted with systemd as init system (PID 1). Can't operate.\n"

    def inactive(argv):
        return 3, "inactive\n", ""

    assert _netconf.detect(host(node), FakeRunner([no_manager, no_manager]), "/usr/bin/systemctl") == {}
    node.put(_netconf.NETWORKD_STATE, "# This is private data. Do not parse.\nOPER_STATE=routable\n")
    found = _netconf.detect(host(node), FakeRunner([no_manager, no_manager]), "/usr/bin/systemctl")
    assert found == {"networkd": "no service manager answers; /run/systemd/netif/state present"}
    assert _netconf.detect(host(node), FakeRunner(), None) == found  # no systemctl at all
    assert _netconf.detect(host(node), FakeRunner([inactive, inactive]), "/usr/bin/systemctl") == {}
