"""rail_routing's files read by their real readers: systemd-networkd installs the rules and tables of our
drop-in (and of netplan's output of our netplan file) in a network namespace of its own, ``netplan generate``
turns our file into networkd's [RoutingPolicyRule]/[Route] Table= without touching the definition's own
routes, ``ifquery`` reads the post-up lines of our ifupdown stanza, and ``systemd-sysctl`` applies our
sysctl.d file's per-interface keys. Nothing touches the host's network (net_common.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf_netplan as np
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import render_conf

from .net_common import MOUNTS, NETWORKD, RealRunner, in_mounts, in_ns, ip, netns, run, sections, tool, veth

pytestmark = pytest.mark.interop

VETH = {"kind": "veth", "bus": None, "permaddr": None, "altnames": [], "driver": "veth", "path": None,
        "id_bus": None, "type": "ether", "devkind": "veth", "renamed": False}


def target(name: str, rail: int, address: str, **more: Any) -> dict[str, Any]:
    return dict(VETH, name=name, mac=f"02:dd:00:{rail:02x}:00:01", original_name=name, rails=[dict(
        {"fabric": "rdma", "rail": rail, "name": f"rail{rail}", "address": address, "subnet": "198.18.101.0/24",
         "routes": [], "table": 3100 + rail, "priority": 3100 + rail}, **more)])


RAIL0 = target("rl0", 0, "198.18.101.11")
RAIL1 = target("rl1", 1, "198.18.101.15", routes=[{"to": "198.18.100.0/22", "via": "198.18.101.1"}])


def apply(root: Path, actions: list[Any]) -> None:
    for action in actions:
        _netconf.apply_change(HostRoot(str(root)), RealRunner(), action)


def networkd_rules(ns: str, etc: Path, runnet: Path | None = None, seconds: float = 4.0) -> dict[str, Any]:
    """systemd-networkd for ``seconds`` in ``ns``: its rules and the routes of tables 3100-3101, and its log."""
    tool(NETWORKD)
    script = MOUNTS + f"""mount -o remount,bind,ro /sys
SYSTEMD_LOG_LEVEL=debug SYSTEMD_LOG_TARGET=console {NETWORKD} >/run/networkd.log 2>&1 &
pid=$!
sleep {seconds}
ip -4 -j rule show
echo '---'
ip -4 -j route show table all
kill "$pid"
wait "$pid" || true
echo '---'
cat /run/networkd.log
"""
    done = in_ns(ns, script, str(etc), str(runnet or ""), timeout=int(seconds) + 30)
    assert done.returncode == 0, done.stdout + done.stderr
    rules, routes, log = done.stdout.split("---\n", 2)
    return {"rules": json.loads(rules), "routes": [r for r in json.loads(routes) if r.get("table") in ("3100", "3101")],
            "log": log}


def wanted_rules() -> list[tuple[int, str, str]]:
    return [(3100, "198.18.101.11", "3100"), (3101, "198.18.101.15", "3101")]


def got_rules(found: dict[str, Any]) -> list[tuple[int, str, str]]:
    return sorted((r["priority"], r["src"], r["table"]) for r in found["rules"] if 3100 <= r["priority"] <= 3115)


def got_routes(found: dict[str, Any]) -> list[tuple[str, str, str | None, str]]:
    return sorted((r["table"], r["dst"], r.get("gateway"), r["dev"]) for r in found["routes"])


WANTED_ROUTES = [("3100", "198.18.101.0/24", None, "rl0"), ("3101", "198.18.100.0/22", "198.18.101.1", "rl1"),
                 ("3101", "198.18.101.0/24", None, "rl1")]


def test_networkd_installs_the_rules_and_tables_of_our_dropins(tmp_path: Path) -> None:
    etc = tmp_path / "etc/systemd/network"
    etc.mkdir(parents=True)
    for t in (RAIL0, RAIL1):
        (etc / f"10-{t['name']}.network").write_text(
            f"[Match]\nName={t['name']}\n\n[Network]\nAddress={t['rails'][0]['address']}/24\nLinkLocalAddressing=no\n")
    actions, notes = _netconf.NetworkdBackend(HostRoot(str(tmp_path)), RealRunner()).plan_routing([RAIL0, RAIL1])
    assert notes == [] and len(actions) == 2
    apply(tmp_path, actions)
    with netns("rails") as ns:
        for name in ("rl0", "rl1"):
            veth(ns, name, name + "p")
        found = networkd_rules(ns, etc)
    assert got_rules(found) == wanted_rules(), found["log"][-3000:]
    assert got_routes(found) == WANTED_ROUTES, found["log"][-3000:]


def test_netplan_generates_them_and_networkd_installs_them_beside_the_definitions_own_routes(tmp_path: Path) -> None:
    netplan = tool("netplan")
    (tmp_path / "etc/netplan").mkdir(parents=True)
    (tmp_path / "etc/systemd/network").mkdir(parents=True)
    own = tmp_path / "etc/netplan/01-lab.yaml"
    own.write_text(json.dumps({"network": {"version": 2, "renderer": "networkd", "ethernets": {
        "rl0": {"addresses": ["198.18.101.11/24"], "link-local": []},
        "rl1": {"addresses": ["198.18.101.15/24"], "link-local": [],
                "routes": [{"to": "198.18.200.0/24", "via": "198.18.101.1"}]}}}}))
    own.chmod(0o600)
    actions, notes = _netconf.NetplanBackend(HostRoot(str(tmp_path)), RealRunner()).plan_routing([RAIL0, RAIL1])
    assert notes == [] and [a.target for a in actions] == [np.OWN_RAILS]
    apply(tmp_path, actions)
    assert run([netplan, "generate", "--root-dir", str(tmp_path)]).returncode == 0
    generated = tmp_path / "run/systemd/network/10-netplan-rl1.network"
    parsed = sections(generated.read_text())
    assert ("Destination", "198.18.200.0/24") in parsed["Route"]  # the definition's own route stays
    assert ("Table", "3101") in parsed["Route"] and ("Priority", "3101") in parsed["RoutingPolicyRule"]
    with netns("railsnp") as ns:
        for name in ("rl0", "rl1"):
            veth(ns, name, name + "p")
        found = networkd_rules(ns, tmp_path / "etc/systemd/network", tmp_path / "run/systemd/network")
    assert got_rules(found) == wanted_rules(), found["log"][-3000:]
    assert got_routes(found) == WANTED_ROUTES, found["log"][-3000:]


def test_ifquery_reads_the_post_up_lines_of_our_stanza(tmp_path: Path) -> None:
    tool("ifquery")
    etc = tmp_path / "etc/network"
    (etc / "interfaces.d").mkdir(parents=True)
    (etc / "interfaces").write_text("auto lo\niface lo inet loopback\n\nsource /etc/network/interfaces.d/*\n")
    backend = _netconf.IfupdownBackend(HostRoot(str(tmp_path)), RealRunner())
    apply(tmp_path, backend.plan([dict(RAIL1, mtu=9000)])[0])
    apply(tmp_path, backend.plan_routing([RAIL1])[0])
    done = in_mounts('mount --bind "$1" /etc/network; ifquery rl1', str(etc))
    assert done.returncode == 0, done.stderr
    # ifupdown reads post-up as its synonym up, pre-down as down
    assert done.stdout.splitlines() == [
        "mtu: 9000",
        "up: ip -4 route replace 198.18.101.0/24 dev rl1 scope link table 3101",
        "up: ip -4 route replace 198.18.100.0/22 via 198.18.101.1 dev rl1 table 3101",
        "up: ip -4 rule add priority 3101 from 198.18.101.15/32 lookup 3101 || true",
        "down: ip -4 rule del priority 3101 from 198.18.101.15/32 lookup 3101 || true"]


def test_systemd_sysctl_applies_the_rails_interface_keys(tmp_path: Path) -> None:
    sysctl = shutil.which("systemd-sysctl") or "/lib/systemd/systemd-sysctl"
    tool(sysctl)
    conf = tmp_path / "90-aiinfra-datapath-rails.conf"
    conf.write_text(render_conf({"net.ipv4.conf.rl0.arp_ignore": "1", "net.ipv4.conf.rl0.arp_announce": "2",
                                 "net.ipv4.conf.rl0.rp_filter": "2"}, module="rail_routing"))
    with netns("railsys") as ns:
        veth(ns, "rl0", "rl0p")
        done = in_ns(ns, 'mount -t tmpfs tmpfs /run; "$1" "$2"; sysctl -n net.ipv4.conf.rl0.arp_ignore '
                         "net.ipv4.conf.rl0.arp_announce net.ipv4.conf.rl0.rp_filter", sysctl, str(conf))
        assert ip(ns, "-br", "link").count("rl0") >= 1
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "2", "2"]
