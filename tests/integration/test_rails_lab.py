"""Rails on the lab: 4 nodes with 4 NICs each on the rdma fabric, through ansible-playbook (issue 37).

Two labs, one after the other, each module-scoped:

* ``dp37s``: the rails share one subnet on one bridge, the nodes run systemd-networkd;
* ``dp37p``: a subnet (and a bridge) per rail, the nodes' network is /etc/netplan rendered by
  ``netplan generate``.

On each, in order:

1. before site.yml (shared subnet): the measure names ``wrong-egress`` and ``arp-flux`` on the rails
   the kernel's defaults misroute (the main table sends every rail's traffic out of one NIC, every NIC
   answers ARP for every address), which the lab's own ``ip route get`` and ``arping`` confirm; with
   a subnet per rail the main table's connected routes already pick each rail's NIC;
2. after site.yml: ``ip route get PEER from SELF`` names the rail's NIC for every node x rail x peer,
   each rail address (of the same and, on a shared subnet, of the other rails) is answered by its own
   NIC alone, a ring measure of every rail passes with more than 99 % of each rail's bytes on its own
   NIC at both ends and no ``IPReversePathFilter`` rise, and a second site.yml changes nothing;
3. after ``datapath-lab reboot`` of every node: the rules and tables came back from the network
   backend's files, the audit reports 0 drift, and removing one rule is named as that rail's drift;
4. with ``impair node2 rdma --rail 3 --rate 200mbit``: the measure names (node2, rail 3) as
   ``slow-rail`` and nothing else, and every other rail still keeps its bytes on its own NIC.

The lab is always brought down (which restores the global kernel values site.yml changed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datapath_lab import Lab, LabConfig  # noqa: E402
from labtools import REPO, VENV_BIN, LabHandle, _lab_possible  # noqa: E402
from test_audit_lab import audit  # noqa: E402  (the audit run, schema-checked)

pytestmark = pytest.mark.lab

SITE = os.path.join(REPO, "playbooks", "site.yml")
MEASURE = os.path.join(REPO, "playbooks", "measure.yml")
AUDIT = os.path.join(REPO, "playbooks", "audit.yml")
SCHEMA = os.path.join(REPO, "docs", "schema", "measure.schema.json")
FABRIC, RAILS, NODES = "rdma", 4, 4
# short ring loads of every rail at once; no storage probes and no RoCE counters (veths have none)
RUN_VARS = {"measure_storage": False, "measure_counters": False, "measure_mode": "ring", "measure_duration": 2,
            "measure_wait": 10}
RAIL_KINDS = {"wrong-egress", "arp-flux", "rp-filter-drops", "slow-rail"}
LABS = {"dp37s": ("shared-subnet", "networkd"), "dp37p": ("per-rail-subnet", "netplan")}


def lab_cli(name: str, *args: str) -> str:
    done = subprocess.run([os.path.join(VENV_BIN, "datapath-lab"), "--name", name, *args],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module", params=sorted(LABS), ids=lambda n: f"{n}-{LABS[n][0]}-{LABS[n][1]}")
def rails_lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    name = request.param
    addressing, network = LABS[name]
    lab = Lab(name)
    inventory_dir = str(tmp_path_factory.mktemp(f"{name}-inventory"))
    try:
        state = lab.up(LabConfig(name=name, nodes=NODES, rails=RAILS, addressing=addressing, network=network,
                                 nvme_size="256M", inventory_dir=inventory_dir), log=lambda *_: None)
        handle = LabHandle(lab, state)
        handle.state["lab_name"], handle.state["addressing"] = name, addressing
        yield handle
    finally:
        subprocess.run([os.path.join(VENV_BIN, "datapath-lab"), "--name", name, "impair", "node2", FABRIC,
                        "--rail", "3", "--clear"], capture_output=True, check=False, timeout=120)
        lab.down(log=lambda *_: None)


def spec(lab: LabHandle) -> dict[str, Any]:
    with open(os.path.join(lab.state["inventory_dir"], "group_vars", "all", "datapath.yml")) as handle:
        body = yaml.safe_load(handle)["datapath"]
    for host in body["hosts"].values():
        host["storage"]["filesystem"]["type"] = "ext4"  # xfs needs 300 MiB
    return body


def rails(lab: LabHandle, node: str) -> list[dict[str, Any]]:
    """The node's NICs on the rdma fabric, rail0 first: rail, ifname, address."""
    found = sorted(lab.state["nodes"][node]["rails"][FABRIC], key=lambda r: r["rail"])
    assert len(found) == RAILS
    return found


def shared(lab: LabHandle) -> bool:
    return bool(lab.state["addressing"] == "shared-subnet")


def measure(lab: LabHandle, report_dir: Path) -> tuple[int, dict[str, Any]]:
    result = lab.playbook(MEASURE, extra_vars={"datapath": spec(lab), "measure_report_dir": str(report_dir),
                                               **RUN_VARS})
    assert (report_dir / "measure.json").exists(), result.stdout[-4000:] + result.stderr[-2000:]
    report = json.loads((report_dir / "measure.json").read_text())
    with open(SCHEMA) as handle:
        jsonschema.Draft202012Validator(json.load(handle)).validate(report)
    return result.rc, report


def rail_findings(report: dict[str, Any]) -> set[tuple[str, str, int]]:
    return {(f["kind"], f["host"], f["rail"]) for f in report["findings"] if f["kind"] in RAIL_KINDS}


def route_devs(lab: LabHandle, node: str, cross: bool) -> dict[tuple[int, str, int], str]:
    """{(rail, peer, peer_rail): the device ``ip route get PEER_ADDRESS from RAIL_ADDRESS`` names}, from the
    node, to every peer's same rail (and every peer's other rails when ``cross``)."""
    queries = []
    for mine in rails(lab, node):
        for peer in lab.nodes:
            if peer == node:
                continue
            for theirs in rails(lab, peer):
                if cross or theirs["rail"] == mine["rail"]:
                    queries.append((mine, peer, theirs))
    script = "; ".join(f"ip -o route get {t['address']} from {m['address']}" for m, _p, t in queries)
    lines = [ln for ln in lab.sh(node, script).stdout.splitlines() if ln.strip()]
    assert len(lines) == len(queries), lines
    out = {}
    for (mine, peer, theirs), line in zip(queries, lines, strict=True):
        dev = re.search(r"\bdev (\S+)", line)
        assert dev, line
        out[(mine["rail"], peer, theirs["rail"])] = dev.group(1)
    return out


def arp_answers(lab: LabHandle, node: str, peer: str) -> dict[tuple[int, int], set[str]]:
    """{(rail, peer_rail): the MACs that answered ``arping -I RAIL PEER_ADDRESS``} from ``node``'s rails for
    the peer's addresses its rails reach (every rail of the peer on a shared subnet, the same rail
    otherwise), all asked at once."""
    asks = [(m, t) for m in rails(lab, node) for t in rails(lab, peer) if shared(lab) or m["rail"] == t["rail"]]
    script = " ".join(f"(arping -c 2 -w 2 -I {m['ifname']} -s {m['address']} {t['address']} > /tmp/arp-{m['rail']}-"
                      f"{t['rail']}.txt 2>&1 || true) &" for m, t in asks)
    lab.sh(node, f"{script} wait")
    out = {}
    for mine, theirs in asks:
        text = lab.sh(node, f"cat /tmp/arp-{mine['rail']}-{theirs['rail']}.txt; rm -f /tmp/arp-{mine['rail']}-"
                            f"{theirs['rail']}.txt").stdout
        out[(mine["rail"], theirs["rail"])] = {m.lower() for m in re.findall(r"\[([0-9A-Fa-f:]{17})\]", text)}
    return out


def rp_filter_drops(lab: LabHandle) -> dict[str, int]:
    """Each node's TcpExt IPReversePathFilter (/proc/net/netstat of its namespace)."""
    out = {}
    for node in lab.nodes:
        head, values = [ln.split() for ln in lab.sh(node, "grep '^TcpExt:' /proc/net/netstat").stdout.splitlines()]
        out[node] = int(dict(zip(head, values, strict=True))["IPReversePathFilter"])
    return out


def assert_every_rail_routes_by_its_own_nic(lab: LabHandle) -> None:
    """ip route get names the rail's NIC for every node x rail x peer (and, on a shared subnet, for
    every peer rail); each address is answered by its own NIC alone."""
    checked = 0
    for node in lab.nodes:
        own = {r["rail"]: r["ifname"] for r in rails(lab, node)}
        devs = route_devs(lab, node, cross=shared(lab))
        wrong = {k: v for k, v in devs.items() if v != own[k[0]]}
        assert not wrong, f"{node}: {wrong}"
        checked += sum(1 for k in devs if k[0] == k[2])
    assert checked == NODES * RAILS * (NODES - 1)  # 100 % of node x rail x peer
    for node, peer in (("node1", "node2"), ("node3", "node1")):
        macs = {r["rail"]: lab.sh(peer, f"cat /sys/class/net/{r['ifname']}/address").stdout.strip().lower()
                for r in rails(lab, peer)}
        answers = arp_answers(lab, node, peer)
        assert answers and all(got == {macs[t]} for (_m, t), got in answers.items()), (node, peer, answers)


def assert_bytes_on_their_rails(report: dict[str, Any], skip: tuple[str, int] | None = None) -> None:
    rows = [p for p in report["pairs"] if p["fabric"] == FABRIC]
    assert {p["rail"] for p in rows} == set(range(RAILS)) and len(rows) == NODES * RAILS  # ring: 4 pairs x 4 rails
    for row in rows:
        if skip and row["rail"] == skip[1] and skip[0] in (row["client"], row["server"]):
            continue
        assert row["egress_share"] >= 0.99 and row["ingress_share"] >= 0.99, row
        assert row["client_rp_filter_drops"] == 0 and row["server_rp_filter_drops"] == 0, row


# --------------------------------------------------------------------------- the cases, in order
def test_before_site_the_kernel_defaults_misroute_and_the_measure_names_it(rails_lab: LabHandle,
                                                                           tmp_path: Path) -> None:
    lab = rails_lab
    if not shared(lab):
        # a subnet per rail: the main table's connected route of each subnet is the rail's own NIC, so the
        # kernel's defaults route the same rail right before anything is applied
        for node in lab.nodes:
            own = {r["rail"]: r["ifname"] for r in rails(lab, node)}
            assert all(dev == own[k[0]] for k, dev in route_devs(lab, node, cross=False).items())
        return
    # the lab confirms the misrouting with the kernel's own tools ...
    own = {r["rail"]: r["ifname"] for r in rails(lab, "node1")}
    devs = route_devs(lab, "node1", cross=False)
    misrouted = {rail for (rail, _peer, _pr), dev in devs.items() if dev != own[rail]}
    assert misrouted, devs
    answers = arp_answers(lab, "node1", "node2")
    assert any(len(macs) > 1 for macs in answers.values()), answers  # several NICs answer one address
    # ... and the measure names both, per host and rail
    rc, report = measure(lab, tmp_path / "before")
    assert rc != 0
    found = rail_findings(report)
    assert {("wrong-egress", "node1", rail) for rail in misrouted} <= found, sorted(found)
    assert {("arp-flux", "node2", rail) for rail in range(RAILS)} <= found, sorted(found)
    assert {h for _k, h, _r in found} == set(lab.nodes)
    for f in report["findings"]:
        if f["kind"] in RAIL_KINDS:
            assert f["interface"] and f["fabric"] == FABRIC and f["fix"], f


def test_after_site_every_rail_uses_its_own_nic_and_a_rerun_changes_nothing(rails_lab: LabHandle,
                                                                            tmp_path: Path) -> None:
    lab = rails_lab
    result = lab.playbook(SITE, extra_vars={"datapath": spec(lab)})
    assert result.rc == 0, result.failures()
    for node in lab.nodes:
        rules = lab.sh(node, "ip rule").stdout
        for rail in rails(lab, node):
            assert re.search(rf"from {re.escape(rail['address'])} lookup \d+", rules), (node, rules)
            keys = lab.sh(node, " ".join(f"cat /proc/sys/net/ipv4/conf/{rail['ifname']}/{k};"
                                         for k in ("arp_ignore", "arp_announce", "rp_filter"))).stdout.split()
            assert keys == ["1", "2", "2"], (node, rail["ifname"], keys)
    # persisted by the node's backend: networkd drop-ins, or netplan's own file (rendered by netplan generate)
    persisted = {"networkd": "/etc/systemd/network/10-lab-{ifname}.network.d/90-aiinfra-rails.conf",
                 "netplan": "/etc/netplan/90-aiinfra-rails.yaml"}[LABS[lab.state["lab_name"]][1]]
    for rail in rails(lab, "node2"):
        assert rail["address"] in lab.sh("node2", f"cat {persisted.format(ifname=rail['ifname'])}").stdout
    assert_every_rail_routes_by_its_own_nic(lab)
    drops = rp_filter_drops(lab)
    rc, report = measure(lab, tmp_path / "after")
    assert rc == 0 and report["findings"] == [], json.dumps(report["findings"], indent=1)[:4000]
    assert_bytes_on_their_rails(report)
    assert rp_filter_drops(lab) == drops
    again = lab.playbook(SITE, extra_vars={"datapath": spec(lab)})
    assert again.rc == 0 and set(again.changed_hosts().values()) == {0}, again.changed_hosts()


def test_after_every_node_rebooted_the_rails_hold_and_the_audit_is_clean(rails_lab: LabHandle,
                                                                         tmp_path: Path) -> None:
    lab = rails_lab
    name = lab.state["lab_name"]
    for node in lab.nodes:
        lab.sh(node, "ip -o rule | grep -q 'lookup 3100'")
    reports = json.loads(lab_cli(name, "reboot", "--json"))
    assert [r["node"] for r in reports] == lab.nodes and all(r["problems"] == [] for r in reports), reports
    for report in reports:
        steps = {s["step"]: s["text"] for s in report["steps"]}
        # the boot started from the kernel's own rules; networkd (from netplan's output) brought the rails back
        assert "policy rule(s) gone" in steps["network"] and "systemd-networkd started" in steps["network-backend"]
        if LABS[name][1] == "netplan":
            assert "netplan generate: rc 0" in steps["network-backend"], steps
    assert_every_rail_routes_by_its_own_nic(lab)
    result, report = audit(lab, tmp_path / "audit", datapath=spec(lab))
    failing = [f for f in report["findings"] if f["severity"] != "info"]
    assert result.rc == 0 and report["summary"]["drift"] == 0, failing
    # the audit sees a rail's rule: remove node3's rail1 rule, the audit names that rail alone
    lab.sh("node3", "ip rule del priority 3101")
    try:
        drift_dir = tmp_path / "drift"
        result = lab.playbook(AUDIT, extra_vars={"audit_report_dir": str(drift_dir), "datapath": spec(lab)},
                              limit="node3")
        report = json.loads((drift_dir / "audit.json").read_text())
    finally:
        assert lab.playbook(SITE, "--tags", "rail_routing", extra_vars={"datapath": spec(lab)},
                            limit="node3").rc == 0
    drifted = [(f["host"], f["capability"], f["key"]) for f in report["findings"] if f["severity"] != "info"]
    assert drifted and all(h == "node3" and c == "rail_routing" and "rail1" in k for h, c, k in drifted), drifted
    lab.sh("node3", "ip -o rule | grep -q '^3101:'")


def test_an_impaired_rail_is_named_alone(rails_lab: LabHandle, tmp_path: Path) -> None:
    lab = rails_lab
    name = lab.state["lab_name"]
    lab_cli(name, "impair", "node2", FABRIC, "--rail", "3", "--rate", "200mbit")
    try:
        rc, report = measure(lab, tmp_path / "impaired")
    finally:
        lab_cli(name, "impair", "node2", FABRIC, "--rail", "3", "--clear")
    assert rc != 0
    assert rail_findings(report) == {("slow-rail", "node2", 3)}, sorted(rail_findings(report))
    assert report["summary"]["failing_hosts"] == ["node2"]
    assert report["summary"]["bottlenecks"] == [f"slow-rail node2 {FABRIC} rail3 {rails(lab, 'node2')[3]['ifname']}"]
    assert_bytes_on_their_rails(report, skip=("node2", 3))
