"""The rail_routing backend on recorded iproute2 outputs (tests/fixtures/network/rails/README.md).

A small stateful model of a node's rules and tables answers ``ip``: it starts from the recorded
node1 of a 4-rail lab node, as a boot finds it (the kernel's rules only, no rail table: ``before``)
or as rail_routing left it (``after``), and takes the module's ``ip rule``/``ip route`` changes, so
that a second run sees what the first one did. The sysctls are files of a temporary /proc tree.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.module_utils import _rail_routing as rr
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from netfakes import FakeRunner, fixture

IP = "/usr/sbin/ip"
RAILS = ["ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0"]
ADDRS = ["198.18.1.11", "198.18.1.15", "198.18.1.19", "198.18.1.23"]


def recorded(name: str) -> Any:
    return json.loads(fixture(f"rails/node1-{name}.json"))


class FakeRouting:
    """``ip`` over the recorded link and address tables, and rules and routes that change."""

    def __init__(self, configured: bool) -> None:
        self.links, self.addr = recorded("link"), recorded("addr")
        if configured:
            self.rules, self.routes = recorded("rules"), recorded("routes")
        else:
            self.rules = json.loads(fixture("rails/fresh-netns-rules.json"))
            self.routes = [r for r in recorded("routes") if r.get("table") in (None, "local")]
        self.changes: list[list[str]] = []

    def table(self, route: dict[str, Any]) -> int:
        return rr.table_id(route.get("table"), rr.TABLE_NAMES) or 0

    def route_get(self, peer: str, source: str) -> str:
        for rule in sorted(self.rules, key=lambda r: r["priority"]):
            if rule.get("src") not in ("all", source):
                continue
            table = rr.table_id(rule["table"], rr.TABLE_NAMES)
            for route in self.routes:
                dst = route.get("dst")
                if self.table(route) == table and dst not in (None, "default") and route.get("type") is None \
                        and ipaddress.ip_address(peer) in ipaddress.ip_network(dst):
                    return json.dumps([{"dst": peer, "from": source, "dev": route["dev"], "table": str(table)}])
        return "[]"

    def __call__(self, argv: list[str]):
        if argv[:1] != [IP]:
            return None
        rest = argv[1:]
        if rest == ["-j", "-d", "link", "show"]:
            return 0, json.dumps(self.links), ""
        if rest == ["-j", "addr", "show"]:
            return 0, json.dumps(self.addr), ""
        if rest == ["-4", "-j", "rule", "show"]:
            return 0, json.dumps(self.rules), ""
        if rest == ["-4", "-j", "route", "show", "table", "all"]:
            return 0, json.dumps(self.routes), ""
        if rest[:3] == ["-j", "route", "get"]:
            return 0, self.route_get(rest[3], rest[5]), ""
        self.changes.append(rest)
        if rest[:3] == ["-4", "rule", "add"]:
            src = rest[6].split("/")[0]
            self.rules.append({"priority": int(rest[4]), "src": src, "table": rest[8]})
            return 0, "", ""
        if rest[:3] == ["-4", "rule", "del"]:
            src = rest[6].split("/")[0]
            self.rules = [r for r in self.rules if not (r["priority"] == int(rest[4]) and r.get("src") == src)]
            return 0, "", ""
        if rest[:3] == ["-4", "route", "replace"]:
            dev, table = rest[rest.index("dev") + 1], rest[rest.index("table") + 1]
            route: dict[str, Any] = {"dst": rest[3], "dev": dev, "table": table, "scope": "link", "flags": []}
            if "via" in rest:
                route["gateway"] = rest[rest.index("via") + 1]
            self.routes = [r for r in self.routes if not (r["dst"] == rest[3] and r.get("table") == table)]
            self.routes.append(route)
            return 0, "", ""
        if rest[:3] == ["-4", "route", "del"]:
            table = rest[rest.index("table") + 1]
            self.routes = [r for r in self.routes if not (r["dst"] == rest[3] and r.get("table") == table)]
            return 0, "", ""
        if rest[:3] == ["-4", "neigh", "flush"]:
            return 0, "", ""
        return None


def proc_tree(root: Path, value: dict[str, str]) -> None:
    """/proc/sys/net/ipv4/conf/IF/{arp_ignore,arp_announce,rp_filter} of every rail and of all."""
    for name in ["all", "eno1", *RAILS]:
        base = root / "proc" / "sys" / "net" / "ipv4" / "conf" / name
        base.mkdir(parents=True, exist_ok=True)
        for key in rr.SYSCTL_KEYS:
            (base / key).write_text(value.get(key, "0") + "\n")


def rails(addresses: bool = True) -> list[dict[str, Any]]:
    return [{"fabric": "rdma", "rail": r, "name": f"rail{r}", "interface": RAILS[r], "match": {"name": RAILS[r]},
             "address": ADDRS[r] if addresses else None, "subnets": ["198.18.1.0/24"], "subnet": "198.18.1.0/24",
             "gateway": None, "addressing": "shared-subnet", "routes": [], "table": 3100 + r, "priority": 3100 + r,
             "gpu": None, "address_ok": True} for r in range(4)]


def call(tmp_path: Path, ip: FakeRouting, check_mode: bool = False, diff: bool = False, **args: Any):
    params = {"rails": rails(), "table_range": [3100, 3115], "persist": "none", "root": str(tmp_path)}
    params.update(args)
    checked = ArgumentSpecValidator(**rr.RailRouting.module_spec()).validate(params)
    assert not checked.error_messages, checked.error_messages
    runner = FakeRunner([ip], which={"ip": IP})
    return run(rr.RailRouting, checked.validated_parameters, Node(runner, str(tmp_path), check_mode, diff)), runner


@pytest.fixture(autouse=True)
def no_ssh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_CONNECTION", raising=False)


def test_check_mode_plans_every_rail_and_changes_nothing(tmp_path: Path) -> None:
    proc_tree(tmp_path, {})
    ip = FakeRouting(configured=False)
    result, _runner = call(tmp_path, ip, check_mode=True, diff=True, connection_address="198.18.0.11")
    assert result["changed"] is True and "failed" not in result, result
    assert ip.changes == []
    texts = [a["text"] for a in result["actions"]]
    assert texts[:12] == [f"set net.ipv4.conf.{n}.{k}: 0 -> {v}" for n in RAILS
                          for k, v in (("arp_announce", 2), ("arp_ignore", 1), ("rp_filter", 2))]
    assert texts[12:16] == [f"ip neigh flush dev {n} (learned before its ARP settings)" for n in RAILS]
    assert texts[16:20] == [f"ip -4 route replace 198.18.1.0/24 dev {n} scope link table {3100 + r}"
                            for r, n in enumerate(RAILS)]
    assert texts[20:] == [f"ip -4 rule add priority {3100 + r} from {a}/32 lookup {3100 + r}"
                          for r, a in enumerate(ADDRS)]
    sections = {d["after_header"]: d for d in result["diff"]}
    assert sections["policy rules"]["after"].splitlines()[1] == "priority 3101 = from 198.18.1.15/32 lookup 3101"
    assert [(r["name"], r["interface"], r["address"], r["status"]) for r in result["rails"]] == [
        (f"rail{r}", RAILS[r], ADDRS[r], "configured") for r in range(4)]
    assert (tmp_path / "proc/sys/net/ipv4/conf/ens2f0np0/arp_ignore").read_text() == "0\n"


def test_apply_routes_each_rail_by_its_own_nic_then_changes_nothing(tmp_path: Path) -> None:
    proc_tree(tmp_path, {})
    ip = FakeRouting(configured=False)
    result, _runner = call(tmp_path, ip)
    assert result["changed"] is True and "failed" not in result, result
    assert [r["route_get"]["dev"] for r in result["rails"]] == RAILS  # the read-back
    assert (tmp_path / "proc/sys/net/ipv4/conf/ens3f0np0/rp_filter").read_text().strip() == "2"
    again, _runner = call(tmp_path, ip)
    assert again["changed"] is False and again["actions"] == [], again["actions"]


def test_the_recorded_node_after_rail_routing_needs_nothing(tmp_path: Path) -> None:
    proc_tree(tmp_path, {"arp_ignore": "1", "arp_announce": "2", "rp_filter": "2"})
    result, runner = call(tmp_path, FakeRouting(configured=True), check_mode=True)
    assert result["changed"] is False and result["actions"] == [], result.get("msg")


def test_addresses_read_from_the_interfaces_when_the_plan_has_none(tmp_path: Path) -> None:
    proc_tree(tmp_path, {"arp_ignore": "1", "arp_announce": "2", "rp_filter": "2"})
    result, _runner = call(tmp_path, FakeRouting(configured=True), check_mode=True, rails=rails(addresses=False))
    assert [r["address"] for r in result["rails"]] == ADDRS and result["changed"] is False


def test_someone_elses_rule_or_route_at_a_planned_place_is_an_error_naming_it(tmp_path: Path) -> None:
    proc_tree(tmp_path, {})
    ip = FakeRouting(configured=False)
    ip.rules.append({"priority": 3102, "src": "10.1.0.0", "srclen": 16, "table": "3102", "protocol": "bird"})
    result, _runner = call(tmp_path, ip)
    assert result["failed"] and ip.changes == []
    assert ("priority 3102 (rdma rail2) is taken by the rule '3102: from 10.1.0.0/16 lookup 3102 proto bird'"
            in result["msg"]) and "rail_routing.table_base" in result["msg"]
    ip = FakeRouting(configured=False)
    ip.rules.append({"priority": 200, "src": "all", "table": "3101"})
    ip.routes.append({"dst": "10.9.0.0/16", "dev": "eno1", "table": "3103", "protocol": "bird", "flags": []})
    result, _runner = call(tmp_path, ip)
    assert "table 3101 is looked up by the rule '200: from all lookup 3101'" in result["msg"]
    assert "table 3103 (rdma rail3) holds routes that are not rail_routing's: 10.9.0.0/16 dev eno1" in result["msg"]
    assert ip.changes == []


def test_a_rail_left_out_of_the_plan_loses_its_rule_and_table(tmp_path: Path) -> None:
    proc_tree(tmp_path, {"arp_ignore": "1", "arp_announce": "2", "rp_filter": "2"})
    ip = FakeRouting(configured=True)
    result, _runner = call(tmp_path, ip, rails=rails()[:3])
    assert [a["text"] for a in result["actions"]] == [
        "ip -4 rule del priority 3103 from 198.18.1.23/32 lookup 3103",
        "ip -4 route del 198.18.1.0/24 dev ens4f0np0 table 3103"]
    assert not [r for r in ip.rules if r["priority"] == 3103]


def test_the_connection_interface_is_left_alone_and_bad_plans_fail_before_any_change(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    proc_tree(tmp_path, {})
    ip = FakeRouting(configured=False)
    result, _runner = call(tmp_path, ip, check_mode=True, connection_address="198.18.1.15")
    skipped = [r for r in result["rails"] if r["status"] == "skipped"]
    assert [(r["interface"], r["reason"]) for r in skipped] == [
        ("ens2f0np0", "carries the Ansible connection: left as it is")]
    assert not [a for a in result["actions"] if "ens2f0np0" in a["text"] or "3101" in a["text"]]
    assert any("carries the Ansible connection" in w for w in result["warnings"])
    bad = copy.deepcopy(rails())
    bad[1]["address"] = "198.18.1.99"
    bad[2]["interface"], bad[2]["match"] = "ens9f0np0", {"name": "ens9f0np0"}
    result, _runner = call(tmp_path, ip, rails=bad)
    assert result["failed"] and ip.changes == []
    assert "rdma rail1 (ens2f0np0): the plan's address 198.18.1.99 is not on the interface (it has " \
           "198.18.1.15/24)" in result["msg"]
    assert "rails[2] (rdma rail2): name=ens9f0np0 matches no interface" in result["msg"]


def test_options_outside_their_ranges_are_refused(tmp_path: Path) -> None:
    proc_tree(tmp_path, {})
    result, _runner = call(tmp_path, FakeRouting(configured=False), table_range=[3100, 3101], rp_filter=3)
    assert result["failed"] and "rails[2] (rdma rail2): table 3102 is outside table_range 3100-3101" in result["msg"]
    assert "rp_filter 3 is outside 0-2" in result["msg"]


def test_rule_and_table_helpers() -> None:
    assert rr.parse_rt_tables(["# comment\n3100 rail0\n  200 cilium  # Cilium's\n"])["rail0"] == 3100
    assert rr.table_id(None, rr.TABLE_NAMES) == 254 and rr.table_id("local", rr.TABLE_NAMES) == 255
    assert rr.sysctl_key("ens1f0np0.100", "rp_filter") == "net.ipv4.conf.ens1f0np0/100.rp_filter"
    assert rr.probe_address("198.18.1.0/24", "198.18.1.1") == "198.18.1.2"
    assert rr.owner_of(2004) == "Cilium" and rr.owner_of(10001).startswith("cloud network utilities")
