"""Survive the reboot: site.yml, then `datapath-lab reboot` (the boot path replayed with the real
tools), then audit.yml; rolling_reboot.yml through Ansible's own reboot module; a broken boot path
named by the audit. Its own 4-node lab ("dpb") whose nodes run systemd-networkd (`up --network
networkd`), so link_mtu's persistence is read back by networkd itself at the boot.

What a reboot resets and replays is in docs/lab.md ("Rebooting a node"). Global kernel state is
shared with the host and never reset: HugePages are proven by what systemd-sysctl would apply from
the node's own files against the live pool (the boot report's ``globals``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ansible_collections.aiinfra.datapath.plugins.module_utils import _roce_qos_boot as roce_boot  # noqa: E402
from datapath_lab import Lab, LabConfig  # noqa: E402
from labtools import REPO, VENV_BIN, LabHandle, _lab_possible  # noqa: E402
from test_audit_lab import audit, failing  # noqa: E402  (the audit run, schema-checked; failing findings)

pytestmark = pytest.mark.lab

LAB_NAME = "dpb"
SITE = os.path.join(REPO, "playbooks", "site.yml")
AUDIT = os.path.join(REPO, "playbooks", "audit.yml")
ROLLING = os.path.join(REPO, "playbooks", "rolling_reboot.yml")
RDMA_IF, MGMT_IF = "ens1f0np0", "eno1"
DROP_IN = f"/etc/systemd/network/10-lab-{RDMA_IF}.network.d/90-aiinfra-mtu.conf"
SYSCTL_FILE = "/etc/sysctl.d/90-aiinfra-datapath.conf"
CACHE = "/mnt/model-cache"
TCP_RMEM = "4096\t131072\t16777216"  # the lab spec's net.ipv4.tcp_rmem as the kernel prints it
THP = "/sys/kernel/mm/transparent_hugepage"
TXQUEUELEN = 4242  # what the RoCE re-apply unit's saved steps set in the lab (veths have no DCB)


def lab_cli_named(name: str, *args: str) -> str:
    done = subprocess.run([os.path.join(VENV_BIN, "datapath-lab"), "--name", name, *args],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def lab_cli(*args: str) -> str:
    return lab_cli_named(LAB_NAME, *args)


@pytest.fixture(scope="module")
def dpb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    lab = Lab(LAB_NAME)
    inventory_dir = str(tmp_path_factory.mktemp("dpb-inventory"))
    try:
        state = lab.up(LabConfig(name=LAB_NAME, nodes=4, network="networkd", inventory_dir=inventory_dir),
                       log=lambda *_: None)
        handle = LabHandle(lab, state)
        result = handle.playbook(SITE)
        assert result.rc == 0, result.failures()
        yield handle
    finally:
        lab.down(log=lambda *_: None)  # also restores the global kernel values the first lab up recorded


def boot_ids(lab: LabHandle) -> dict[str, str]:
    return {n: lab.sh(n, "cat /proc/sys/kernel/random/boot_id").stdout.strip() for n in lab.nodes}


def mtu(lab: LabHandle, node: str, ifname: str) -> int:
    return int(lab.sh(node, f"cat /sys/class/net/{ifname}/mtu").stdout)


def install_roce_unit(lab: LabHandle, node: str) -> None:
    """roce_qos's own boot unit and re-apply script (the module's text), enabled as the module enables
    it, with saved steps a veth can take (the lab's NICs have no DCB): the boot must run it."""
    steps = {RDMA_IF: {"steps": [{"op": "run", "argv": ["ip", "link", "set", "dev", RDMA_IF,
                                                        "txqueuelen", str(TXQUEUELEN)]}]}}
    files = {roce_boot.STATE_FILE: roce_boot.state_document(steps), roce_boot.APPLY_SCRIPT: roce_boot.APPLY_SCRIPT_TEXT,
             roce_boot.UNIT_FILE: roce_boot.UNIT_TEXT}
    for path, text in files.items():
        lab.lab.run_in(node, ["/bin/sh", "-c", f"mkdir -p {os.path.dirname(path)} && cat > {path}"], input=text)
    lab.sh(node, f"chmod 0755 {roce_boot.APPLY_SCRIPT}; mkdir -p {os.path.dirname(roce_boot.UNIT_LINK)}; "
                 f"ln -sfn {roce_boot.UNIT_FILE} {roce_boot.UNIT_LINK}")


def test_site_then_every_node_rebooted_then_the_audit_is_clean(dpb: LabHandle, tmp_path: Path) -> None:
    lab = dpb
    # networkd was found (no service manager in a lab node: its state file) and holds the MTU
    for node in lab.nodes:
        assert lab.sh(node, f"cat {DROP_IN}").stdout.count("MTUBytes=9000") == 1
        assert mtu(lab, node, RDMA_IF) == 9000
    install_roce_unit(lab, "node1")
    before = boot_ids(lab)
    reports = json.loads(lab_cli("reboot", "--json"))
    after = boot_ids(lab)
    assert [r["node"] for r in reports] == lab.nodes
    assert all(after[n] != before[n] and after[n] == r["boot_id"] for n, r in zip(lab.nodes, reports, strict=True))
    assert len(set(after.values())) == 4
    for node, report in zip(lab.nodes, reports, strict=True):
        assert report["problems"] == [], report
        steps = {s["step"]: s["text"] for s in report["steps"]}
        assert f"unmounted {CACHE}" in steps["mounts"]  # the boot found the cache unmounted, fstab mounted it
        assert "systemd-networkd started" in steps["network-backend"]
        # networkd set the MTU from our drop-in on a NIC that came back at 1500; the cache is mounted
        # from fstab; systemd-sysctl restored the socket buffers in the node's namespace
        assert mtu(lab, node, RDMA_IF) == 9000 and mtu(lab, node, MGMT_IF) == 1500
        assert lab.sh(node, f"findmnt -n -o TARGET {CACHE}").stdout.strip() == CACHE
        assert lab.sh(node, "sysctl -n net.ipv4.tcp_rmem").stdout.strip() == TCP_RMEM
        assert lab.sh(node, "test -e /run/datapath-lab-networkd.log && ! test -e /run/reboot-required",
                      check=False).returncode == 0
        # the global pool is not reset: the boot's HugePage setting is read from the node's own file
        assert report["globals"]["vm.nr_hugepages"] == {
            "boot": "64", "live": "64", "same": True, "file": "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf"}
        assert report["globals"][f"{THP}/enabled"] == {"boot": "madvise", "live": "madvise", "same": True,
                                                       "file": "/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf"}
        assert all(v["same"] for v in report["globals"].values()), report["globals"]
    units = {u["unit"]: u["result"] for u in reports[0]["units"]}
    assert units == {"aiinfra-roce-qos.service": "ok"}
    assert f"qlen {TXQUEUELEN}" in lab.sh("node1", f"ip link show {RDMA_IF}").stdout
    assert all(r["units"] == [] for r in reports[1:])

    result, report = audit(lab, tmp_path)
    assert result.rc == 0 and failing(report) == [], failing(report)
    assert report["summary"]["drift"] == 0


def test_rolling_reboot_two_at_a_time_clears_the_flag_and_the_audit_passes(dpb: LabHandle, tmp_path: Path) -> None:
    lab = dpb
    for node in lab.nodes:
        lab.sh(node, "touch /run/reboot-required")
    before = boot_ids(lab)
    result = lab.playbook(ROLLING, extra_vars={"datapath_reboot_serial": 2})
    assert result.rc == 0, result.failures()
    after = boot_ids(lab)
    assert all(after[n] != before[n] for n in lab.nodes)
    # Ansible's own reboot module did it, two nodes per batch, through the nodes' shutdown -r
    batches = [sorted(task["hosts"]) for play in result.data["plays"] for task in play["tasks"]
               if task["task"]["name"] == "Reboot the node"]
    assert batches == [["node1", "node2"], ["node3", "node4"]], batches
    state = lab.lab.load_state() or {}
    booted = {n: state["nodes"][n]["booted_at"] for n in lab.nodes}
    assert max(booted["node1"], booted["node2"]) < min(booted["node3"], booted["node4"])
    for node in lab.nodes:
        assert state["nodes"][node]["boot_id"] == after[node]
        assert lab.sh(node, "test -e /run/reboot-required", check=False).returncode != 0
    checks = result.task_results("Assert the boot brought the planned state")
    assert sorted(checks) == lab.nodes
    audit_result, report = audit(lab, tmp_path)
    assert audit_result.rc == 0 and failing(report) == [], failing(report)


def test_a_broken_boot_path_is_named_by_the_audit_after_the_reboot(dpb: LabHandle, tmp_path: Path) -> None:
    """node2: our sysctl.d file deleted (the persistence removed); node3: the same file corrupted;
    node4: the cache's filesystem gone, so fstab cannot mount it. node1 is rebooted intact."""
    lab = dpb
    lab.sh("node2", f"rm {SYSCTL_FILE}")
    lab.sh("node3", f"sed -i 's/^net.ipv4.tcp_rmem = .*/net.ipv4.tcp_rmem = four thousand/' {SYSCTL_FILE}")
    cache_dev = lab.sh("node4", f"findmnt -n -o SOURCE {CACHE}").stdout.strip()
    lab.sh("node4", f"umount {CACHE} && wipefs -aq {cache_dev}")
    reports = {r["node"]: r for r in json.loads(lab_cli("reboot", "--json"))}
    assert reports["node1"]["problems"] == []
    assert any(p.startswith("fstab entries not mounted") and CACHE in p for p in reports["node4"]["problems"]), \
        reports["node4"]["problems"]
    assert any("tcp_rmem" in line for line in reports["node3"]["sysctl_log"]), reports["node3"]["sysctl_log"]
    for node in ("node2", "node3"):
        assert lab.sh(node, "sysctl -n net.ipv4.tcp_rmem").stdout.strip() != TCP_RMEM

    result, report = audit(lab, tmp_path)
    assert result.rc != 0
    found = failing(report)
    assert ("node2", "sysctl_profile", "net.ipv4.tcp_rmem") in found
    assert ("node3", "sysctl_profile", "net.ipv4.tcp_rmem") in found
    assert any(h == "node4" and c == "nvme_layout" for h, c, _k in found), found
    assert not [f for f in found if f[0] == "node1"], found
    # each finding carries its cause: the file gone, the value the kernel holds, the cache not mounted
    reasons: dict[tuple[str, str], list[str]] = {}
    for f in report["findings"]:
        if f["severity"] != "info":
            reasons.setdefault((f["host"], f["capability"]), []).append(f"{f['key']}: {f['reason']}")
    # (the value is the kernel's default for a new namespace, which depends on the machine's memory)
    lost = ": differs from the plan; no sysctl.d file (or active TuneD profile) sets it, so a boot does not restore it"
    assert any(r.startswith("net.ipv4.tcp_rmem: net.ipv4.tcp_rmem is ") and r.endswith(lost)
               for r in reasons[("node2", "sysctl_profile")]), reasons
    # node3's file is there but systemd-sysctl could not apply its value: the boot value names the file
    assert any(f"the next boot sets four thousand ({SYSCTL_FILE})" in r
               for r in reasons[("node3", "sysctl_profile")]), reasons
    assert any(f"the model cache {CACHE} is not mounted" in r for r in reasons[("node4", "nvme_layout")]), reasons


# --------------------------------------------------------------------------- netplan
@pytest.fixture(scope="module")
def dpn2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    if not shutil.which("netplan"):
        pytest.skip("netplan is not installed (scripts/bootstrap.sh installs netplan.io)")
    lab = Lab("dpn2")
    try:
        state = lab.up(LabConfig(name="dpn2", nodes=2, network="netplan",
                                 inventory_dir=str(tmp_path_factory.mktemp("dpn2-inventory"))), log=lambda *_: None)
        yield LabHandle(lab, state)
    finally:
        lab.down(log=lambda *_: None)


def test_netplan_node_keeps_its_mtu_across_a_reboot(dpn2: LabHandle, tmp_path: Path) -> None:
    """netplan nodes: link_mtu finds netplan (the node's /etc/netplan), and as netplan would replace the
    .link udev applies, persists the MTU with a .link of its own; at the boot netplan generate renders the
    addresses for networkd and udev's net_setup_link applies our .link: the MTU is back, the audit clean."""
    lab = dpn2
    result = lab.playbook(SITE)
    assert result.rc == 0, result.failures()
    for node in lab.nodes:
        assert mtu(lab, node, RDMA_IF) == 9000
        assert "MTUBytes=9000" in lab.sh(node, f"cat /etc/systemd/network/10-aiinfra-{RDMA_IF}.link").stdout
    reports = json.loads(lab_cli_named("dpn2", "reboot", "--json"))
    for node, report in zip(lab.nodes, reports, strict=True):
        assert report["problems"] == [], report["problems"]
        steps = {s["step"]: s["text"] for s in report["steps"]}
        assert steps["network-backend"].startswith("netplan generate: rc 0; systemd-networkd started")
        assert f"{RDMA_IF} /etc/systemd/network/10-aiinfra-{RDMA_IF}.link" in steps["udev"]
        assert mtu(lab, node, RDMA_IF) == 9000
        assert f"10-netplan-{RDMA_IF}.network" in lab.sh(node, "ls /run/systemd/network").stdout
    audit_result, report = audit(lab, tmp_path)
    assert audit_result.rc == 0 and failing(report) == [], failing(report)
