"""link_mtu: live MTU through recorded ip -j output, persistence backends in a fake /etc."""

from __future__ import annotations

import json
import os
import socket

import pytest
from ansible_collections.aiinfra.datapath.plugins.modules import link_mtu
from capability_results import diff_entry, kinds, texts
from netfakes import FakeIp, FakeRunner, fixture, nic, static, use

IP = "/usr/sbin/ip"
SYSTEMCTL = "/usr/bin/systemctl"


def links():
    return json.loads(fixture("iplink/node-links.json"))


def systemctl(active=()):
    def handler(argv):
        if argv[:2] == [SYSTEMCTL, "is-active"]:
            states = ["active" if unit in active else "inactive" for unit in argv[2:]]
            return (0 if all(s == "active" for s in states) else 3), "".join(s + "\n" for s in states), ""
        return None
    return handler


@pytest.fixture
def tree(node):
    nic(node, "ens1f0np0", pci="0000:e6:00.0")
    nic(node, "ens2f0np0", pci="0000:e7:00.0", mac="b8:3f:d2:00:00:02")
    nic(node, "ens2f1np1", pci="0000:e7:00.1", mac="b8:3f:d2:00:00:03")
    nic(node, "eth0", pci="0000:00:03.0", driver="virtio_net", hca=None, ecn=False)
    nic(node, "v0", pci=None)
    return node


def fake(monkeypatch, ip=None, active=(), extra=(), ping_rc=0, ping_before=0):
    pings = []

    def ping(argv):
        if argv[0] != "/usr/bin/ping":
            return None
        pings.append(argv[-1])
        return (ping_before if len(pings) == 1 else ping_rc), "", ""

    ip = ip or FakeIp(links(), addr=fixture("iplink/addr.json"),
                      routes={"198.18.0.1": fixture("iplink/route-get-gw.json")})
    handlers = [ip, systemctl(active), *extra,
                ping]
    runner = FakeRunner(handlers, which={"ip": IP, "systemctl": SYSTEMCTL, "ping": "/usr/bin/ping", "nmcli": "nmcli"})
    use(monkeypatch, runner)
    return runner, ip


def args(node, interfaces, **extra):
    base = {"interfaces": interfaces, "root": str(node.root)}
    base.update(extra)
    return base


RAIL = [{"name": "ens1f0np0", "match": {"name": "ens1f0np0"}, "fabric": "rail0", "mtu": 9000}]
IFUPDOWN_MAIN = "auto lo\niface lo inet loopback\n\nsource /etc/network/interfaces.d/*\n"


def test_check_mode_touches_nothing(run_module, tree, monkeypatch):
    tree.put("/etc/network/interfaces", IFUPDOWN_MAIN)
    runner, ip = fake(monkeypatch)
    before = tree.snapshot()
    result = run_module(link_mtu.main, args(tree, RAIL), check_mode=True, diff=True)
    assert result["changed"] is True
    assert texts(result) == ["ip link set dev ens1f0np0 mtu 9000",
                             "write /etc/network/interfaces.d/aiinfra-ens1f0np0"]
    assert kinds(result) == ["mtu", "file"]
    assert result["actions"][0] == dict(result["actions"][0], target="ens1f0np0", before=1500, after=9000)
    assert diff_entry(result, "live MTU")["after"] == "ens1f0np0 = 9000\n"
    assert result["persist"]["backend"] == "ifupdown"
    assert ip.sets == [] and runner.commands == []
    assert tree.snapshot() == before


def test_ifupdown_apply_then_idempotent(run_module, tree, monkeypatch):
    tree.put("/etc/network/interfaces", IFUPDOWN_MAIN)
    runner, ip = fake(monkeypatch)
    result = run_module(link_mtu.main, args(tree, RAIL))
    assert result["changed"] is True
    assert ip.sets == [("ens1f0np0", 9000)]
    assert runner.commands == [[IP, "link", "set", "dev", "ens1f0np0", "mtu", "9000"]]
    text = tree.get("/etc/network/interfaces.d/aiinfra-ens1f0np0")
    assert "iface ens1f0np0 inet manual\n    mtu 9000\n" in text and "auto ens1f0np0" in text
    assert result["interfaces"][0]["mtu_before"] == 1500
    again = run_module(link_mtu.main, args(tree, RAIL))
    assert again["changed"] is False and again["actions"] == []


def test_ifupdown_without_source_line_is_reported(run_module, tree, monkeypatch):
    tree.put("/etc/network/interfaces", "auto lo\niface lo inet loopback\n")
    fake(monkeypatch)
    result = run_module(link_mtu.main, args(tree, RAIL))
    assert "does not source" in result["persist"]["notes"][0]
    assert not tree.exists("/etc/network/interfaces.d/aiinfra-ens1f0np0")


def test_ifupdown_existing_stanza_not_duplicated(run_module, tree, monkeypatch):
    tree.put("/etc/network/interfaces", IFUPDOWN_MAIN + "\nauto ens1f0np0\niface ens1f0np0 inet dhcp\n")
    fake(monkeypatch)
    result = run_module(link_mtu.main, args(tree, RAIL))
    assert "add 'mtu 9000' to that stanza" in result["persist"]["notes"][0]
    assert result["persist"]["changes"] == []


def test_networkd_dropin_for_matching_network_file(run_module, tree, monkeypatch):
    tree.put("/etc/systemd/network/20-rail0.network", "[Match]\nName=ens1f0np0\n\n[Network]\nAddress=198.19.0.11/24\n")
    fake(monkeypatch, active=("systemd-networkd",))
    result = run_module(link_mtu.main, args(tree, RAIL))
    assert result["persist"]["backend"] == "networkd"
    assert result["persist"]["detected"] == {"networkd": "systemd-networkd is active"}
    text = tree.get("/etc/systemd/network/20-rail0.network.d/90-aiinfra-mtu.conf")
    assert "[Link]\nMTUBytes=9000\n" in text


def test_networkd_link_file_when_no_network_file(run_module, tree, monkeypatch):
    fake(monkeypatch, active=("systemd-networkd",))
    items = RAIL + [{"name": "v0", "mtu": 9000}]
    run_module(link_mtu.main, args(tree, items))
    pci = tree.get("/etc/systemd/network/10-aiinfra-ens1f0np0.link")
    assert "[Match]\nPath=pci-0000:e6:00.0\n" in pci and "MTUBytes=9000" in pci and "NamePolicy=" in pci
    assert "OriginalName=v0" in tree.get("/etc/systemd/network/10-aiinfra-v0.link")


NETPLAN_RAIL0 = """network:
  version: 2
  ethernets:
    eth0:
      dhcp4: true
    rail0:
      match: {macaddress: "b8:3f:d2:00:00:01"}
      set-name: ens1f0np0
      addresses: [198.19.0.11/24]
"""


def test_netplan_dropin_under_the_owning_id(run_module, tree, monkeypatch):
    """The MTU goes to the definition that configures the NIC (rail0), never to a new one; an
    interface netplan does not configure gets a .link (issue point 1)."""
    tree.put("/etc/netplan/50-cloud-init.yaml", NETPLAN_RAIL0)
    tree.put("/sys/class/net/ens1f0np0/name_assign_type", "4\n")
    fake(monkeypatch, active=("systemd-networkd",))
    result = run_module(link_mtu.main, args(tree, RAIL + [{"name": "v0", "mtu": 9000}]))
    assert result["persist"]["backend"] == "netplan"
    path = tree.path("/etc/netplan/90-aiinfra-datapath.yaml")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert json.loads(path.read_text()) == {"network": {"version": 2, "ethernets": {"rail0": {"mtu": 9000}}}}
    assert "OriginalName=v0" in tree.get("/etc/systemd/network/10-aiinfra-v0.link")
    assert result["persist"]["notes"] == [
        "v0: not configured by netplan; MTU persisted by a systemd .link (udev applies it at boot, whatever "
        "renders the network), not by a new netplan definition"]
    assert result["persist"]["changes"] == ["write /etc/netplan/90-aiinfra-datapath.yaml",
                                            "write /etc/systemd/network/10-aiinfra-v0.link"]
    assert run_module(link_mtu.main, args(tree, RAIL + [{"name": "v0", "mtu": 9000}]))["changed"] is False


def test_netplan_earlier_wrong_entry_is_removed(run_module, tree, monkeypatch):
    tree.put("/etc/netplan/50-cloud-init.yaml", NETPLAN_RAIL0)
    tree.put("/sys/class/net/ens1f0np0/name_assign_type", "4\n")
    tree.put("/etc/netplan/90-aiinfra-datapath.yaml",
             json.dumps({"network": {"version": 2, "ethernets": {"ens1f0np0": {"mtu": 9000}}}}))
    fake(monkeypatch, ip=FakeIp([dict(link, mtu=9000) if link["ifname"] == "ens1f0np0" else link for link in links()]))
    result = run_module(link_mtu.main, args(tree, RAIL), check_mode=True, diff=True)
    assert result["changed"] is True and [a["kind"] for a in result["actions"]] == ["file"]
    entry = diff_entry(result, "/etc/netplan/90-aiinfra-datapath.yaml")
    assert '"ens1f0np0"' in entry["before"] and '"rail0"' in entry["after"] and '"ens1f0np0"' not in entry["after"]
    assert result["persist"]["notes"][0].startswith("removed ethernets.ens1f0np0 from /etc/netplan/")


def test_networkmanager_connection_modify(run_module, tree, monkeypatch):
    nm = {("nmcli", "-g", "GENERAL.CON-UUID", "device", "show", "ens1f0np0"): "5b1e-uuid\n",
          ("nmcli", "-g", "connection.type", "connection", "show", "5b1e-uuid"): "802-3-ethernet\n",
          ("nmcli", "-g", "802-3-ethernet.mtu", "connection", "show", "5b1e-uuid"): "auto\n"}
    state = {}

    def nmcli(argv):
        if argv[0] != "nmcli":
            return None
        if argv[:4] == ["nmcli", "-t", "connection", "modify"]:
            state["mtu"] = argv[-1]
            return 0, "", ""
        key = tuple(argv)
        if key[2] == "802-3-ethernet.mtu" and "mtu" in state:
            return 0, state["mtu"] + "\n", ""
        return (0, nm[key], "") if key in nm else (10, "", "Error: not found")

    runner, ip = fake(monkeypatch, active=("NetworkManager",), extra=[nmcli])
    result = run_module(link_mtu.main, args(tree, RAIL), diff=True)
    assert result["persist"]["backend"] == "networkmanager"
    assert kinds(result) == ["mtu", "command"]
    assert result["persist"]["changes"] == texts(result)[1:] == [
        "nmcli connection modify 5b1e-uuid 802-3-ethernet.mtu 9000 (ens1f0np0)"]
    assert diff_entry(result, "NetworkManager connections")["after"] == "5b1e-uuid 802-3-ethernet.mtu = 9000\n"
    assert ["nmcli", "-t", "connection", "modify", "5b1e-uuid", "802-3-ethernet.mtu", "9000"] in runner.commands
    assert run_module(link_mtu.main, args(tree, RAIL))["changed"] is False


def test_networkmanager_without_nmcli_is_reported(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch, active=("NetworkManager",))
    runner.paths["nmcli"] = None
    result = run_module(link_mtu.main, args(tree, RAIL))
    assert result["persist"]["notes"] == ["nmcli is not installed; MTU not persisted through NetworkManager"]


def test_ifupdown_diff_shows_file(run_module, tree, monkeypatch):
    tree.put("/etc/network/interfaces", IFUPDOWN_MAIN)
    fake(monkeypatch)
    result = run_module(link_mtu.main, args(tree, RAIL), check_mode=True, diff=True)
    path = "/etc/network/interfaces.d/aiinfra-ens1f0np0"
    assert diff_entry(result, path)["before"] == ""
    assert "mtu 9000" in diff_entry(result, path)["after"]


def test_no_backend_is_reported_not_guessed(run_module, tree, monkeypatch):
    fake(monkeypatch)
    result = run_module(link_mtu.main, args(tree, RAIL))
    assert result["persist"]["backend"] == "none"
    assert "no network configuration backend found" in result["persist"]["notes"][0]
    assert texts(result) == ["ip link set dev ens1f0np0 mtu 9000"]


def test_match_by_pci_and_driver(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch)
    items = [{"name": None, "match": {"pci": "0000:e6:00.0"}, "fabric": "rail1", "mtu": 4200}]
    result = run_module(link_mtu.main, args(tree, items, persist="none"))
    assert [r["name"] for r in result["interfaces"]] == ["ens1f0np0"]
    # the driver match takes the bond's members too: the bond gets the same MTU (tests of bonds below)
    items = [{"match": {"driver": "mlx5_core"}, "mtu": 9000}, {"name": "bond0", "mtu": 9000}]
    result = run_module(link_mtu.main, args(tree, items, persist="none"), check_mode=True)
    assert sorted(r["name"] for r in result["interfaces"] if r["name"] != "bond0") == [
        "ens1f0np0", "ens2f0np0", "ens2f1np1"]


def test_no_match_fails_before_anything(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch)
    items = RAIL + [{"match": {"pci": "0000:ff:00.0"}, "fabric": "rail1", "mtu": 9000}]
    result = run_module(link_mtu.main, args(tree, items), expect_failure=True)
    assert "interfaces[1] (fabric rail1): no interface matches pci=0000:ff:00.0" in result["msg"]
    assert ip.sets == []


@pytest.mark.parametrize("items, text", [
    ([{"name": "ens2f1np1", "mtu": 9216}], "MTU 9216 for ens2f1np1 is outside 68-9000, the range the device "
                                           "accepts (its max_mtu in 'ip -d link'; the spec allows up to 9216)"),
    ([{"name": "bond0", "mtu": 9216}], "MTU 9216 for bond0 is above 9000, the max MTU of bond slave ens2f1np1"),
    ([{"name": "ens1f0np0.100", "mtu": 9000}], "MTU 9000 for ens1f0np0.100 is above 1500, the MTU of parent "
                                               "ens1f0np0 (a VLAN cannot exceed it); raise the parent's MTU"),
    ([{"name": "ens1f0np0", "mtu": 9217}], "outside 68-9216 (the spec's range; the device may allow more)"),
    ([{"name": "ens1f0np0", "mtu": 9000}, {"match": {"pci": "0000:e6:00.0"}, "mtu": 4200}], "already gets MTU 9000"),
])
def test_limits_refused(run_module, tree, monkeypatch, items, text):
    runner, ip = fake(monkeypatch)
    result = run_module(link_mtu.main, args(tree, items, persist="none"), expect_failure=True)
    assert text in result["msg"] and "nothing changed" in result["msg"]
    assert ip.sets == []


def test_vlan_with_parent_raised_first_lowered_last(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch)
    items = [{"name": "ens1f0np0.100", "mtu": 9000}, {"name": "ens1f0np0", "mtu": 9000}]
    run_module(link_mtu.main, args(tree, items, persist="none"))
    assert ip.sets == [("ens1f0np0", 9000), ("ens1f0np0.100", 9000)]
    ip.sets.clear()
    items = [{"name": "ens1f0np0", "mtu": 1500}, {"name": "ens1f0np0.100", "mtu": 1500}]
    run_module(link_mtu.main, args(tree, items, persist="none"))
    assert ip.sets == [("ens1f0np0.100", 1500), ("ens1f0np0", 1500)]


MGMT = [{"name": "eth0", "mtu": 9000}]


def test_lockout_guard_refuses_connection_interface(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch)
    result = run_module(link_mtu.main, args(tree, MGMT, connection_address="198.18.0.11"), expect_failure=True)
    assert "refusing to change the MTU of the interface carrying the Ansible connection: eth0" in result["msg"]
    assert result["connection_interfaces"] == ["eth0"]
    assert ip.sets == []


def test_lockout_guard_from_ssh_connection(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch)
    monkeypatch.setenv("SSH_CONNECTION", "198.18.0.1 40000 198.18.0.11 22")
    result = run_module(link_mtu.main, args(tree, MGMT), expect_failure=True)
    assert "eth0" in result["msg"]


def test_unchanged_connection_interface_is_fine(run_module, tree, monkeypatch):
    fake(monkeypatch)
    result = run_module(link_mtu.main, args(tree, [{"name": "eth0", "mtu": 1500}], connection_address="198.18.0.11"))
    assert result["changed"] is False and result["interfaces"][0]["connection"] is True


def test_allowed_change_reverted_when_peer_lost(run_module, tree, monkeypatch):
    tree.put("/etc/network/interfaces", IFUPDOWN_MAIN)
    runner, ip = fake(monkeypatch, ping_rc=1)
    result = run_module(link_mtu.main, args(tree, MGMT, connection_address="198.18.0.11",
                                            allow_connection_interface=True, verify_after=["198.18.0.1"]),
                        expect_failure=True)
    assert "stopped answering" in result["msg"] and "eth0->1500" in result["msg"]
    assert ip.sets == [("eth0", 9000), ("eth0", 1500)]
    assert not tree.exists("/etc/network/interfaces.d/aiinfra-eth0")


def test_silent_peer_before_change_refuses(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch, ping_before=1)
    result = run_module(link_mtu.main, args(tree, MGMT, connection_address="198.18.0.11", persist="none",
                                            allow_connection_interface=True, verify_after=["198.18.0.1"]),
                        expect_failure=True)
    assert "do not answer before the change" in result["msg"] and ip.sets == []


def test_connection_address_as_name(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch)
    monkeypatch.setattr(socket, "getaddrinfo", lambda name, port: [(2, 1, 6, "", ("198.18.0.11", 0))])
    result = run_module(link_mtu.main, args(tree, MGMT, connection_address="gpu-node-01"), expect_failure=True)
    assert "eth0" in result["msg"]


def test_allowed_change_verified(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch, ping_rc=0)
    result = run_module(link_mtu.main, args(tree, MGMT, connection_address="198.18.0.11", persist="none",
                                            allow_connection_interface=True, verify_after=["198.18.0.1"]))
    assert result["verified"] == {"198.18.0.1": True}
    assert ip.sets == [("eth0", 9000)]


def test_device_refuses_and_run_reverts(run_module, tree, monkeypatch):
    # v0, not a bond member (whose MTU on its own is refused before anything changes)
    ip = FakeIp(links(), refuse={"v0": "Error: mtu greater than device maximum."})
    fake(monkeypatch, ip=ip)
    items = [{"name": "ens1f0np0", "mtu": 9000}, {"name": "v0", "mtu": 9000}]
    result = run_module(link_mtu.main, args(tree, items, persist="none"), expect_failure=True)
    assert "applying MTU failed" in result["msg"] and "ens1f0np0->1500" in result["msg"]
    assert ip.links["ens1f0np0"]["mtu"] == 1500


def test_ip_failure_is_clean(run_module, tree, monkeypatch):
    runner = FakeRunner([static([IP, "-j", "-d", "link", "show"], rc=255, err="Cannot open netlink socket")],
                        which={"ip": IP})
    use(monkeypatch, runner)
    result = run_module(link_mtu.main, args(tree, RAIL), expect_failure=True)
    assert "Cannot open netlink socket" in result["msg"]


# --------------------------------------------------------------------------- bonds (issue 45)
# node-links.json: bond0 over ens2f0np0 and ens2f1np1, all at MTU 1500. Each backend holds the
# bond's own configuration the way that backend defines a bond.
MEMBER = [{"name": "ens2f0np0", "fabric": "storage", "mtu": 9000}]
BOND_AND_MEMBER = [{"name": "bond0", "fabric": "storage", "mtu": 9000}] + MEMBER

NETPLAN_BOND = """network:
  version: 2
  renderer: networkd
  ethernets:
    ens2f0np0: {}
    ens2f1np1: {}
  bonds:
    bond0:
      interfaces: [ens2f0np0, ens2f1np1]
      parameters: {mode: 802.3ad, lacp-rate: fast}
      addresses: [198.19.5.11/24]
"""


def _nm_bond():
    """nmcli answering for a bond profile and its two port profiles (NetworkManager 1.42 names)."""
    uuids = {"bond0": "b0nd-uuid", "ens2f0np0": "p0rt-uuid-0", "ens2f1np1": "p0rt-uuid-1"}
    state: dict[str, str] = {}

    def nmcli(argv):
        if argv[0] != "nmcli":
            return None
        if argv[:4] == ["nmcli", "-t", "connection", "modify"]:
            state[argv[4]] = argv[-1]
            return 0, "", ""
        if argv[1:4] == ["-g", "GENERAL.CON-UUID", "device"] and argv[5] in uuids:
            return 0, uuids[argv[5]] + "\n", ""
        if argv[1:3] == ["-g", "connection.type"]:
            return 0, ("bond" if argv[-1] == "b0nd-uuid" else "802-3-ethernet") + "\n", ""
        if argv[1:3] == ["-g", "802-3-ethernet.mtu"]:
            return 0, state.get(argv[-1], "auto") + "\n", ""
        return 10, "", "Error: not found"
    return nmcli


def _backend(name, tree):
    """(systemctl units active, extra handlers) for ``name``, with the bond configured in it."""
    if name == "ifupdown":
        tree.put("/etc/network/interfaces", IFUPDOWN_MAIN)
        tree.put("/etc/network/interfaces.d/bond0", "auto bond0\niface bond0 inet static\n    address 198.19.5.11/24\n"
                                                    "    bond-slaves ens2f0np0 ens2f1np1\n    bond-mode 802.3ad\n")
        return (), []
    if name == "networkd":
        tree.put("/etc/systemd/network/10-bond0.netdev", "[NetDev]\nName=bond0\nKind=bond\n\n[Bond]\nMode=802.3ad\n")
        tree.put("/etc/systemd/network/20-bond0.network", "[Match]\nName=bond0\n\n[Network]\nAddress=198.19.5.11/24\n")
        tree.put("/etc/systemd/network/30-bond0-ports.network", "[Match]\nName=ens2f0np0 ens2f1np1\n\n"
                                                                "[Network]\nBond=bond0\n")
        return ("systemd-networkd",), []
    if name == "netplan":
        tree.put("/etc/netplan/60-bond.yaml", NETPLAN_BOND)
        return ("systemd-networkd",), []
    return ("NetworkManager",), [_nm_bond()]


BOND_BACKENDS = ["ifupdown", "networkd", "netplan", "networkmanager"]


@pytest.mark.parametrize("backend", BOND_BACKENDS)
@pytest.mark.parametrize("check_mode", [True, False])
def test_mtu_on_a_bond_member_alone_is_refused_before_anything(run_module, tree, monkeypatch, backend, check_mode):
    active, extra = _backend(backend, tree)
    runner, ip = fake(monkeypatch, active=active, extra=extra)
    before = tree.snapshot()
    result = run_module(link_mtu.main, args(tree, MEMBER), check_mode=check_mode, expect_failure=True)
    assert result["errors"] == [
        "interfaces[0] (fabric storage): MTU 9000 asked for on ens2f0np0, a member of bond bond0: the kernel gives "
        "members the bond's MTU at every enslave, so it would be undone or leave the members mismatched (this run "
        "does not set bond0); set it on bond0: its members follow it"]
    assert "nothing changed" in result["msg"]
    assert ip.sets == [] and runner.commands == [] and tree.snapshot() == before
    assert ip.links["ens2f0np0"]["mtu"] == ip.links["bond0"]["mtu"] == 1500


@pytest.mark.parametrize("backend", BOND_BACKENDS)
def test_a_member_with_a_bond_of_another_mtu_is_refused(run_module, tree, monkeypatch, backend):
    active, extra = _backend(backend, tree)
    runner, ip = fake(monkeypatch, active=active, extra=extra)
    items = [{"name": "bond0", "fabric": "storage", "mtu": 4200}] + MEMBER
    result = run_module(link_mtu.main, args(tree, items), expect_failure=True)
    assert result["errors"] == [
        "interfaces[1] (fabric storage): MTU 9000 asked for on ens2f0np0, a member of bond bond0: the kernel gives "
        "members the bond's MTU at every enslave, so it would be undone or leave the members mismatched (this run "
        "sets bond0 to 4200); set it on bond0: its members follow it"]
    assert ip.sets == [] and runner.commands == []


# what each backend persists for bond0 at 9000 (and nothing for its members)
BOND_PERSISTED = {
    "ifupdown": [],  # bond0's own stanza: the backend names the line to add instead of a second stanza
    "networkd": ["write /etc/systemd/network/20-bond0.network.d/90-aiinfra-mtu.conf"],
    "netplan": ["write /etc/netplan/90-aiinfra-datapath.yaml"],
    "networkmanager": ["nmcli connection modify b0nd-uuid 802-3-ethernet.mtu 9000 (bond0)"],
}


@pytest.mark.parametrize("backend", BOND_BACKENDS)
def test_a_member_is_satisfied_by_its_bond_in_the_same_run(run_module, tree, monkeypatch, backend):
    active, extra = _backend(backend, tree)
    runner, ip = fake(monkeypatch, active=active, extra=extra)
    check = run_module(link_mtu.main, args(tree, BOND_AND_MEMBER), check_mode=True, diff=True)
    assert ip.sets == [] and runner.commands == []
    result = run_module(link_mtu.main, args(tree, BOND_AND_MEMBER), diff=True)
    # one live change, the bond's: the kernel sets its members (both, also the one not listed)
    assert [a["text"] for a in result["actions"] if a["kind"] == "mtu"] == ["ip link set dev bond0 mtu 9000"]
    assert ip.sets == [("bond0", 9000)]
    assert {n: ip.links[n]["mtu"] for n in ("bond0", "ens2f0np0", "ens2f1np1")} == {
        "bond0": 9000, "ens2f0np0": 9000, "ens2f1np1": 9000}
    assert result["persist"]["changes"] == BOND_PERSISTED[backend]
    assert not any("ens2f" in change for change in result["persist"]["changes"])
    assert diff_entry(result, "live MTU")["after"] == "bond0 = 9000\n"
    rows = {r["name"]: r for r in result["interfaces"]}
    assert (rows["bond0"]["follows"], rows["ens2f0np0"]["follows"]) == (None, "bond0")
    assert (rows["ens2f0np0"]["mtu_before"], rows["ens2f0np0"]["mtu"]) == (1500, 9000)
    # check mode predicted exactly this
    assert check["actions"] == result["actions"] and check["diff"] == result["diff"]
    if backend == "netplan":
        persisted = json.loads(tree.get("/etc/netplan/90-aiinfra-datapath.yaml"))
        assert persisted == {"network": {"version": 2, "bonds": {"bond0": {"mtu": 9000}}}}
    if backend == "ifupdown":
        assert result["persist"]["notes"] == [
            "bond0: defined in /etc/network/interfaces.d/bond0; add 'mtu 9000' to that stanza "
            "(not edited automatically)"]
        assert not tree.exists("/etc/network/interfaces.d/aiinfra-ens2f0np0")
    if backend == "networkmanager":
        assert not any("p0rt-uuid" in " ".join(argv) for argv in runner.commands)
    again = run_module(link_mtu.main, args(tree, BOND_AND_MEMBER))
    assert again["changed"] is False and again["actions"] == []


def test_a_member_left_mismatched_is_set_to_its_bonds_mtu(run_module, tree, monkeypatch):
    """bond0 is at 9000 already, one member was left at 1500 by hand: the member is set to the bond's MTU."""
    table = [dict(link, mtu=9000) if link["ifname"] in ("bond0", "ens2f1np1") else link for link in links()]
    runner, ip = fake(monkeypatch, ip=FakeIp(table))
    result = run_module(link_mtu.main, args(tree, BOND_AND_MEMBER, persist="none"))
    assert ip.sets == [("ens2f0np0", 9000)]
    assert [r["follows"] for r in result["interfaces"]] == [None, "bond0"]


def test_a_driver_match_that_takes_bond_members_is_refused_without_the_bond(run_module, tree, monkeypatch):
    runner, ip = fake(monkeypatch)
    items = [{"match": {"driver": "mlx5_core"}, "mtu": 9000}]
    result = run_module(link_mtu.main, args(tree, items, persist="none"), check_mode=True, expect_failure=True)
    assert [e.split(":")[1].strip() for e in result["errors"]] == [
        "MTU 9000 asked for on ens2f0np0, a member of bond bond0",
        "MTU 9000 asked for on ens2f1np1, a member of bond bond0"]
