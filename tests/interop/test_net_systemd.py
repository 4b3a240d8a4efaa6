"""link_mtu's systemd files read by systemd 252 itself, in a network namespace of our own.

- ``udevadm test-builtin net_setup_link`` (what udev runs when a device appears): which .link
  file applies to a veth, the name it gives and the MTU it sets — for [Match] rules against the
  backend's matcher, for an admin's ``50-admin.link`` (``Name=storage0``) that our .link used to
  hide and that now gets our drop-in (issue point 2), and for our own .link;
- ``systemd-networkd``: the node's .network with our drop-in gives the same addresses and routes
  and only a different MTU; netplan's generated files with our drop-in likewise; an interface
  persisted by a .link keeps the MTU udev set, networkd configures its addresses and leaves it.

See net_common.py for the namespaces (network: ``dpi-net-TAG-PID``; mounts: private, with
/etc/systemd/network and /run/systemd/network bound to temporary directories).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf_systemd as systemd
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot

from .net_common import (
    RealRunner,
    addresses,
    netns,
    netns_facts,
    networkd,
    routes_of,
    run,
    system_links,
    tool,
    udev_link,
    veth,
)

pytestmark = pytest.mark.interop

ETC = "etc/systemd/network"


@pytest.fixture(scope="module")
def udev_ns():
    tool("udevadm")
    with netns("udev") as ns:
        veth(ns, "v0", "v1")
        yield ns


def facts_of(ns: str, tmp_path: Path, name: str, mtu: int | None = None) -> tuple[dict, list[dict]]:
    table = netns_facts(ns, tmp_path / "sysfs")
    target = dict(table[name], mtu=mtu) if mtu else table[name]
    return target, [f for n, f in sorted(table.items()) if n != name]


def node_root(tmp_path: Path, files: dict[str, str] | None = None) -> Path:
    """A node root with the distribution's .link files and ``files`` (path below root: text)."""
    root = tmp_path / "root"
    (root / ETC).mkdir(parents=True, exist_ok=True)
    system_links(root)
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def apply(root: Path, actions) -> None:
    for action in actions:
        _netconf.apply_change(HostRoot(str(root)), RealRunner(), action)


LINK_RULES = [
    "OriginalName=v0", "OriginalName=v*", "OriginalName=!v0", "OriginalName=eth0",
    "Type=ether", "Kind=veth", "Kind=bond", "Driver=veth", "Driver=mlx5_core",
    "Path=*-usb-*", "Property=ID_BUS=pci", "Property=!ID_BUS=usb",
    "PermanentMACAddress=MAC", "Name=v0", "OriginalName=v0\nKind=bond", "Type=ether wlan\nDriver=!mlx5*",
]


@pytest.mark.parametrize("rule", LINK_RULES)
def test_udev_reads_link_match_as_the_matcher_does(tmp_path: Path, udev_ns: str, rule: str) -> None:
    facts, others = facts_of(udev_ns, tmp_path, "v0")
    rule = rule.replace("MAC", facts["mac"])
    text = "[Match]\n%s\n\n[Link]\nNamePolicy=keep\n" % rule
    answer = systemd.match_file(text, systemd.LINK_KEYS, facts)
    assert answer is not None, "the matcher settles every rule here"
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "10-rule.link").write_text(text)
    props, link, log = udev_link(udev_ns, "v0", etc)
    applied = props.get("ID_NET_LINK_FILE")
    assert (applied == "/etc/systemd/network/10-rule.link") is answer, (rule, applied, log[-2000:])


def test_udev_admin_link_keeps_its_name_and_gets_our_mtu(tmp_path: Path) -> None:
    """Issue point 2: our own 10-aiinfra-v0.link used to hide 50-admin.link (udev applies the
    first .link that matches); now the MTU goes into a drop-in of 50-admin.link."""
    admin = "[Match]\nOriginalName=v0\n\n[Link]\nName=storage0\n"
    with netns("admin") as ns:
        veth(ns, "v0", "v1")
        facts, others = facts_of(ns, tmp_path, "v0", mtu=9000)
        root = node_root(tmp_path, {ETC + "/50-admin.link": admin})
        files = systemd.unit_files(HostRoot(str(root)), ".link")
        backend = _netconf.NetworkdBackend(HostRoot(str(root)), RealRunner())
        # what the earlier version wrote: a .link of our own, applied instead of the admin's
        (root / ETC / "10-aiinfra-v0.link").write_text(backend.own_link(facts, files))
        props, link, log = udev_link(ns, "v0", root / ETC)
        assert props["ID_NET_LINK_FILE"] == "/etc/systemd/network/10-aiinfra-v0.link"
        assert props.get("ID_NET_NAME") != "storage0"
    with netns("admin2") as ns:
        veth(ns, "v0", "v1")
        actions, notes, planned = backend.plan_links([facts], others)
        actions += backend.cleanup(["v0"], planned)
        assert [a.text for a in actions] == ["write /etc/systemd/network/50-admin.link.d/90-aiinfra-mtu.conf",
                                             "remove /etc/systemd/network/10-aiinfra-v0.link"] and notes == []
        apply(root, actions)
        props, link, log = udev_link(ns, "v0", root / ETC)
        assert props["ID_NET_LINK_FILE"] == "/etc/systemd/network/50-admin.link"
        assert props["ID_NET_NAME"] == "storage0" and link["mtu"] == 9000


def test_udev_applies_our_own_link_when_no_other_does(tmp_path: Path) -> None:
    with netns("own") as ns:
        veth(ns, "v0", "v1")
        facts, others = facts_of(ns, tmp_path, "v0", mtu=9000)
        root = node_root(tmp_path)
        actions, notes = _netconf.NetworkdBackend(HostRoot(str(root)), RealRunner()).plan([facts], others)
        assert [a.text for a in actions] == ["write /etc/systemd/network/10-aiinfra-v0.link"] and notes == []
        apply(root, actions)
        own = systemd.parse_unit((root / ETC / "10-aiinfra-v0.link").read_text())
        default = systemd.parse_unit(Path("/usr/lib/systemd/network/99-default.link").read_text())
        assert own["Link"] == default["Link"] + [("MTUBytes", "9000")]
        props, link, log = udev_link(ns, "v0", root / ETC)
        assert props["ID_NET_LINK_FILE"] == "/etc/systemd/network/10-aiinfra-v0.link" and link["mtu"] == 9000


ADMIN_NETWORK = """[Match]
Name=v0

[Network]
Address=198.18.7.1/24
LinkLocalAddressing=no

[Route]
Destination=198.18.100.0/24
Gateway=198.18.7.254
"""


def test_networkd_network_dropin_changes_only_the_mtu(tmp_path: Path) -> None:
    root = node_root(tmp_path, {ETC + "/20-v0.network": ADMIN_NETWORK})
    with netns("nd-before") as ns:
        veth(ns, "v0", "v1")
        facts, others = facts_of(ns, tmp_path, "v0", mtu=9000)
        addr, routes, log = networkd(ns, root / ETC)
        before = addresses(addr, "v0"), routes_of(routes, "v0")
    assert before == ((1500, [("198.18.7.1", 24)]), [("198.18.100.0/24", "198.18.7.254"), ("198.18.7.0/24", None)])
    actions, notes = _netconf.NetworkdBackend(HostRoot(str(root)), RealRunner()).plan([facts], others)
    assert [a.text for a in actions] == ["write /etc/systemd/network/20-v0.network.d/90-aiinfra-mtu.conf"]
    apply(root, actions)
    with netns("nd-after") as ns:
        veth(ns, "v0", "v1")
        addr, routes, log = networkd(ns, root / ETC)
        assert "v0: Configuring with /etc/systemd/network/20-v0.network." in log
        assert (addresses(addr, "v0"), routes_of(routes, "v0")) == ((9000, before[0][1]), before[1])


NETPLAN_RAIL = """network:
  version: 2
  ethernets:
    rail0:
      addresses: [198.18.8.1/24]
      routes:
        - to: 198.18.200.0/24
          via: 198.18.8.254
"""


def netplan_generate(root: Path) -> Path:
    for path in (root / "etc/netplan").glob("*.yaml"):
        path.chmod(0o600)
    shutil.rmtree(root / "run/systemd/network", ignore_errors=True)
    run([tool("netplan"), "generate", "--root-dir", str(root)], check=True)
    return root / "run/systemd/network"


def test_networkd_reads_netplans_output_with_our_mtu(tmp_path: Path) -> None:
    """A NIC renamed at boot (here: created as eth77, renamed rail0) defined by name in netplan:
    the drop-in's mtu reaches networkd through netplan; addresses and routes are the same."""
    empty = tmp_path / "empty"
    empty.mkdir()
    before_root, after_root = node_root(tmp_path / "b"), node_root(tmp_path / "a")
    for root in (before_root, after_root):
        (root / "etc/netplan").mkdir(parents=True)
        (root / "etc/netplan/50-rail.yaml").write_text(NETPLAN_RAIL)
    with netns("np-before") as ns:
        veth(ns, "rail0", "v1", kernel_name="eth77")
        facts, others = facts_of(ns, tmp_path, "rail0", mtu=9000)
        assert facts["renamed"] is True
        addr, routes, log = networkd(ns, empty, netplan_generate(before_root))
        before = addresses(addr, "rail0"), routes_of(routes, "rail0")
    assert before[0] == (1500, [("198.18.8.1", 24)]) and ("198.18.200.0/24", "198.18.8.254") in before[1]
    actions, notes = _netconf.NetplanBackend(HostRoot(str(after_root)), RealRunner()).plan([facts], others)
    assert [a.text for a in actions] == ["write /etc/netplan/90-aiinfra-datapath.yaml"] and notes == []
    assert json.loads(actions[0].after)["network"]["ethernets"] == {"rail0": {"mtu": 9000}}
    apply(after_root, actions)
    with netns("np-after") as ns:
        veth(ns, "rail0", "v1", kernel_name="eth77")
        addr, routes, log = networkd(ns, empty, netplan_generate(after_root))
        assert "rail0: Configuring with /run/systemd/network/10-netplan-rail0.network." in log
        assert (addresses(addr, "rail0"), routes_of(routes, "rail0")) == ((9000, before[0][1]), before[1])


def test_link_route_mtu_survives_networkd(tmp_path: Path) -> None:
    """netplan defines v0 by its kernel name: link_mtu leaves netplan's output alone and writes a
    .link; udev sets the MTU when the device appears, networkd configures the address and does
    not touch the MTU (netplan's .network has no MTUBytes=)."""
    root = node_root(tmp_path)
    (root / "etc/netplan").mkdir(parents=True)
    (root / "etc/netplan/50-v0.yaml").write_text("network:\n  version: 2\n  ethernets:\n    v0:\n"
                                                 "      addresses: [198.18.9.1/24]\n")
    generated = netplan_generate(root)
    before = dict((p.name, p.read_text()) for p in generated.iterdir())
    with netns("linkroute") as ns:
        veth(ns, "v0", "v1")
        facts, others = facts_of(ns, tmp_path, "v0", mtu=9000)
        actions, notes = _netconf.NetplanBackend(HostRoot(str(root)), RealRunner()).plan([facts], others)
        assert [a.text for a in actions] == ["write /etc/systemd/network/10-aiinfra-v0.link"]
        assert notes[0].startswith("v0: an mtu in netplan's ethernets.v0 makes netplan write 10-netplan-v0.link")
        apply(root, actions)
        assert dict((p.name, p.read_text()) for p in netplan_generate(root).iterdir()) == before
        props, link, log = udev_link(ns, "v0", root / ETC, generated)
        assert props["ID_NET_LINK_FILE"] == "/etc/systemd/network/10-aiinfra-v0.link" and link["mtu"] == 9000
        addr, routes, log = networkd(ns, root / ETC, generated)
        assert "v0: Configuring with /run/systemd/network/10-netplan-v0.network." in log
        assert addresses(addr, "v0") == (9000, [("198.18.9.1", 24)])


def test_netplan_mtu_on_a_match_definition_would_replace_the_link_udev_applies(tmp_path: Path) -> None:
    """Why a `match` definition without a .link of netplan's goes the .link route: with an mtu,
    netplan writes 10-netplan-ID.link, and udev applies it instead of 99-default.link (whose
    NamePolicy= names a NIC). Shown with udev; the backend sees it coming and writes a .link."""
    root = node_root(tmp_path)
    (root / "etc/netplan").mkdir(parents=True)
    conf = "network:\n  version: 2\n  ethernets:\n    fast:\n      match: {driver: veth, name: v0}\n%s"
    (root / "etc/netplan/50-fast.yaml").write_text(conf % "")
    with netns("npmatch") as ns:
        veth(ns, "v0", "v1")
        facts, others = facts_of(ns, tmp_path, "v0", mtu=9000)
        props, link, log = udev_link(ns, "v0", root / ETC, netplan_generate(root))
        assert props["ID_NET_LINK_FILE"].endswith("/99-default.link")
        actions, notes = _netconf.NetplanBackend(HostRoot(str(root)), RealRunner()).plan([facts], others)
        assert [a.text for a in actions] == ["write /etc/systemd/network/10-aiinfra-v0.link"]
        assert "makes netplan write 10-netplan-fast.link" in notes[0]
        (root / "etc/netplan/50-fast.yaml").write_text(conf % "      mtu: 9000\n")
        props, link, log = udev_link(ns, "v0", root / ETC, netplan_generate(root))
        assert props["ID_NET_LINK_FILE"] == "/run/systemd/network/10-netplan-fast.link"
