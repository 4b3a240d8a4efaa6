"""`datapath-lab impair`: bottlenecks on purpose in a real lab ("dpq", 3 nodes), measured inside it.

Rates are measured with iperf3 between lab nodes, delays and loss with ping, the storage throttle with
dd, all inside the nodes' namespaces (nothing runs on the host's network). Impairments are applied
and cleared through the `datapath-lab` command line, so each call is a new process that finds them
in the lab state. The last test brings the lab down with impairments in force and proves nothing is
left: namespaces, veths and IFBs, relay processes, cgroups."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datapath_lab import Lab, LabConfig  # noqa: E402
from datapath_lab import impair as impair_mod  # noqa: E402
from datapath_lab.core import proc_starttime  # noqa: E402
from labtools import REPO, VENV_BIN, _lab_possible  # noqa: E402

pytestmark = pytest.mark.lab

NAME = "dpq"
FABRIC = "rdma"  # MTU 9000, 198.18.1.0/24
ADDR = {"node1": "198.18.1.11", "node2": "198.18.1.12", "node3": "198.18.1.13"}


class Dpq:
    def __init__(self, inventory_dir: str) -> None:
        self.lab = Lab(NAME)
        self.config = LabConfig(name=NAME, nodes=3, nvme_size="256M", inventory_dir=inventory_dir)

    def ensure_up(self) -> dict[str, Any]:
        """Up (a no-op when the lab is healthy with this shape): tests may run in any order."""
        return self.lab.up(self.config, log=lambda *_: None)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([os.path.join(VENV_BIN, "datapath-lab"), "--name", NAME, *args],
                              capture_output=True, text=True, timeout=120, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"datapath-lab {' '.join(args)}: rc={proc.returncode}\n{proc.stdout}{proc.stderr}")
        return proc

    def sh(self, node: str, script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.lab.nsenter_argv(node) + ["/bin/sh", "-c", script], capture_output=True,
                              text=True, timeout=timeout, check=False)

    def iperf_mbit(self, client: str, server: str, seconds: int = 5, streams: int = 1) -> float:
        """TCP throughput client -> server on the rdma fabric, Mbit/s at the receiver (iperf3, in the lab)."""
        srv = subprocess.Popen(self.lab.nsenter_argv(server) + ["iperf3", "-s", "-1", "-B", ADDR[server]],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while ":5201" not in self.sh(server, "ss -Htln 'sport = :5201'").stdout:
                assert time.monotonic() < deadline, "iperf3 server did not listen"
                time.sleep(0.05)
            out = self.sh(client, f"iperf3 -J -c {ADDR[server]} -t {seconds} -P {streams}", timeout=seconds + 60)
            data = json.loads(out.stdout)
            assert "error" not in data, data.get("error")
            return float(data["end"]["sum_received"]["bits_per_second"]) / 1e6
        finally:
            try:
                srv.wait(timeout=10)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()

    def ping(self, src: str, dst: str, count: int, interval: float) -> tuple[float, float]:
        """(loss percent, average RTT ms) of `count` pings from src to dst on the rdma fabric."""
        out = self.sh(src, f"ping -q -n -c {count} -i {interval} -W 2 {ADDR[dst]}", timeout=count * interval + 60)
        loss = re.search(r"([\d.]+)% packet loss", out.stdout)
        rtt = re.search(r"= [\d.]+/([\d.]+)/", out.stdout)
        assert loss, out.stdout + out.stderr
        return float(loss.group(1)), float(rtt.group(1)) if rtt else float("nan")

    def dd_mib_s(self, node: str, args: str) -> float:
        out = self.sh(node, f"dd of=/dev/null {args} 2>&1")
        m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", out.stdout)
        assert m, out.stdout
        return int(m.group(1)) / float(m.group(2)) / (1 << 20)

    def state(self) -> dict[str, Any]:
        return self.lab.require_state()

    def switch_links(self) -> list[str]:
        out = subprocess.run(["ip", "-n", self.lab.sw(FABRIC), "-br", "link"], capture_output=True, text=True,
                             check=True).stdout
        return [line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()]

    def master_of(self, dev: str) -> str | None:
        data = json.loads(subprocess.run(["ip", "-n", self.lab.sw(FABRIC), "-j", "-d", "link", "show", dev],
                                         capture_output=True, text=True, check=True).stdout)
        master: str | None = data[0].get("master")
        return master


@pytest.fixture(scope="module")
def dpq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dpq]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    handle = Dpq(str(tmp_path_factory.mktemp("dpq-inventory")))
    try:
        handle.ensure_up()
        yield handle
    finally:
        handle.lab.down(log=lambda *_: None)


def within(value: float, want: float, share: float) -> bool:
    return want * (1 - share) <= value <= want * (1 + share)


def test_rate_limit_is_measured_and_cleared(dpq: Dpq) -> None:
    dpq.ensure_up()
    out = dpq.cli("impair", "node1", FABRIC, "--rate", "200mbit").stdout
    assert "rate 200mbit (both; tc tbf + ifb)" in out
    try:
        links = dpq.switch_links()
        assert "i-node1" in links and "q-node1" not in links  # kernel shaping only, no relay
        to_node = dpq.iperf_mbit("node2", "node1")
        from_node = dpq.iperf_mbit("node1", "node3")
        others = dpq.iperf_mbit("node2", "node3")
        print(f"200mbit on node1: to {to_node:.1f}, from {from_node:.1f}, node2->node3 {others:.0f} Mbit/s")
        assert within(to_node, 200, 0.15), to_node
        assert within(from_node, 200, 0.15), from_node
        assert others > 1000, others  # another node's port is not touched
    finally:
        dpq.cli("impair", "node1", FABRIC, "--clear")
    assert "i-node1" not in dpq.switch_links()
    assert dpq.master_of("p-node1") == "br0"
    assert dpq.iperf_mbit("node2", "node1") > 1000  # full speed again


def test_delay_and_rate_through_the_relay(dpq: Dpq) -> None:
    dpq.ensure_up()
    _loss, base_rtt = dpq.ping("node1", "node2", 10, 0.05)
    assert base_rtt < 2.0, base_rtt
    # 10 ms each way: the RTT between node1 and any peer grows by 20 ms.
    dpq.cli("impair", "node1", FABRIC, "--delay", "10ms")
    try:
        state = dpq.state()
        record = state["impairments"][f"node1/{FABRIC}"]
        pid = record["relay"]["pid"]
        assert proc_starttime(pid) == record["relay"]["start"]
        assert dpq.master_of("p-node1") is None and dpq.master_of("q-node1") == "br0"
        loss, rtt = dpq.ping("node1", "node2", 20, 0.05)
        print(f"delay 10ms one way: RTT {rtt:.2f} ms (base {base_rtt:.2f} ms)")
        assert loss == 0.0
        assert within(rtt, 20.0, 0.20), rtt
        _loss, rtt_other = dpq.ping("node2", "node3", 10, 0.05)
        assert rtt_other < 2.0, rtt_other
        # Again on the same port replaces it: the first relay is gone, a rate joins the delay.
        dpq.cli("impair", "node1", FABRIC, "--rate", "200mbit", "--delay", "10ms")
        assert proc_starttime(pid) is None
        record = dpq.state()["impairments"][f"node1/{FABRIC}"]
        assert record["relay"]["pid"] != pid and record["rate_bps"] == 200_000_000
        to_node = dpq.iperf_mbit("node2", "node1", seconds=6)
        from_node = dpq.iperf_mbit("node1", "node2", seconds=6)
        _loss, rtt = dpq.ping("node1", "node2", 10, 0.05)
        print(f"200mbit + 10ms each way: to {to_node:.1f}, from {from_node:.1f} Mbit/s, RTT {rtt:.2f} ms")
        assert within(to_node, 200, 0.15), to_node
        assert within(from_node, 200, 0.15), from_node
        assert within(rtt, 20.0, 0.20), rtt
    finally:
        dpq.cli("impair", "node1", FABRIC, "--clear")
    links = dpq.switch_links()
    assert "q-node1" not in links and "r-node1" not in links
    assert dpq.master_of("p-node1") == "br0"
    assert dpq.ping("node1", "node2", 10, 0.05)[1] < 2.0  # RTT back


def test_loss_shows_over_2000_pings(dpq: Dpq) -> None:
    dpq.ensure_up()
    dpq.cli("impair", "node2", FABRIC, "--loss", "1%")
    try:
        # 1 % each way: a ping and its reply each cross the port, 1 - 0.99^2 = 1.99 % expected
        # (2000 pings: sigma 0.31 %); the band is about 4 sigma wide on either side.
        loss, _rtt = dpq.ping("node1", "node2", 2000, 0.002)
        print(f"loss 1% each way: {loss}% of 2000 pings lost")
        assert 0.8 <= loss <= 3.5, loss
        other, _rtt = dpq.ping("node1", "node3", 500, 0.002)
        assert other == 0.0, other
        # One way only: 1 % expected (sigma 0.22 %).
        dpq.cli("impair", "node2", FABRIC, "--loss", "1%", "--direction", "to-node")
        loss, _rtt = dpq.ping("node1", "node2", 2000, 0.002)
        print(f"loss 1% to the node: {loss}% of 2000 pings lost")
        assert 0.2 <= loss <= 2.2, loss
    finally:
        out = dpq.cli("impair", "node2", FABRIC, "--clear").stdout
    assert "cleared" in out
    stats_path = f"/var/tmp/datapath-lab/{NAME}/relay-node2-{FABRIC}.stats.json"
    with open(stats_path) as fh:
        stats = json.load(fh)  # the relay's counters, written when --clear stopped it
    assert stats["ba"]["lost"] > 0 and stats["ab"]["lost"] == 0  # to-node only
    assert dpq.ping("node1", "node2", 300, 0.002)[0] == 0.0


def test_relay_ceiling(dpq: Dpq) -> None:
    """--delay 0 puts the relay in the path with nothing to do: its throughput on the jumbo fabric."""
    dpq.ensure_up()
    direct = dpq.iperf_mbit("node2", "node1")
    dpq.cli("impair", "node1", FABRIC, "--delay", "0")
    try:
        relayed = dpq.iperf_mbit("node2", "node1")
        relayed_4 = dpq.iperf_mbit("node2", "node1", streams=4)
        back = dpq.iperf_mbit("node1", "node2")
    finally:
        dpq.cli("impair", "node1", FABRIC, "--clear")
    print(f"relay ceiling (MTU 9000): to node {relayed / 1000:.2f} Gbit/s (4 streams {relayed_4 / 1000:.2f}), "
          f"from node {back / 1000:.2f}; direct {direct / 1000:.2f} Gbit/s")
    assert relayed > 1000 and back > 1000  # far above the rates the lab's exercises use


def test_crashed_relay_is_reported_and_cleared(dpq: Dpq) -> None:
    dpq.ensure_up()
    dpq.cli("impair", "node3", FABRIC, "--delay", "1ms")
    pid = dpq.state()["impairments"][f"node3/{FABRIC}"]["relay"]["pid"]
    os.kill(pid, 9)
    deadline = time.monotonic() + 5
    while proc_starttime(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    status = dpq.cli("status", check=False)
    assert status.returncode == 1, status.stdout
    assert f"impairment node3/{FABRIC}: relay (pid {pid}) gone" in status.stdout
    dpq.cli("impair", "node3", FABRIC, "--clear")
    assert dpq.cli("status", check=False).returncode == 0
    assert dpq.ping("node1", "node3", 5, 0.05)[0] == 0.0


def test_storage_throttle_holds_inside_the_node_only(dpq: Dpq) -> None:
    state = dpq.ensure_up()
    dev2, dev3 = state["nodes"]["node2"]["nvme"], state["nodes"]["node3"]["nvme"]
    cgroup = state["nodes"]["node2"]["cgroup"]
    assert cgroup == f"/sys/fs/cgroup/blkio/datapath-lab/{NAME}/node2"
    holder = state["nodes"]["node2"]["holder_pid"]
    with open(f"{cgroup}/cgroup.procs") as fh:
        assert str(holder) in fh.read().split()
    out = dpq.cli("impair", "node2", "nvme", "--read-bps", "20M", "--read-iops", "200").stdout
    assert f"node2 nvme {dev2}" in out and "read 20MiB/s, read 200 IOPS" in out
    try:
        with open(f"{cgroup}/blkio.throttle.read_bps_device") as fh:
            assert fh.read().split()[1] == str(20 << 20)
        direct = dpq.dd_mib_s("node2", f"if={dev2} bs=1M count=40 iflag=direct")
        iops = dpq.dd_mib_s("node2", f"if={dev2} bs=4k count=600 iflag=direct") * 256
        own3 = dpq.dd_mib_s("node3", f"if={dev3} bs=1M count=40 iflag=direct")
        # node3 reading node2's device: the throttle is the node's (its cgroup), not the device's.
        other = dpq.dd_mib_s("node3", f"if={dev2} bs=1M count=40 iflag=direct")
        print(f"node2 throttled 20M/200 IOPS: {direct:.1f} MiB/s, {iops:.0f} IOPS; node3 {own3:.0f} MiB/s, "
              f"node3 on node2's device {other:.0f} MiB/s")
        assert within(direct, 20, 0.15), direct
        assert within(iops, 200, 0.20), iops
        assert own3 > 100 and other > 100, (own3, other)

        # Over SSH (ansible's path): the ProxyCommand puts sshd and the module into the cgroup.
        env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
        inventory = os.path.join(state["inventory_dir"], "hosts.yml")
        proc = subprocess.run(
            [os.path.join(VENV_BIN, "ansible"), "-i", inventory, "node2", "-m", "shell", "-a",
             f"grep blkio /proc/self/cgroup; dd if={dev2} of=/dev/null bs=1M count=30 iflag=direct"],
            capture_output=True, text=True, env=env, cwd=REPO, timeout=180, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"blkio:/datapath-lab/{NAME}/node2" in proc.stdout
        m = re.search(r"copied, ([\d.]+) s", proc.stdout)
        assert m and float(m.group(1)) > 1.0, proc.stdout  # 30 MiB at 20 MiB/s

        # A cold buffered read through a file system on the device (ext4: xfs needs 300 MB) is
        # throttled too: read-ahead is submitted by the reading process. A cached read is not.
        script = (f"set -e; mkfs.ext4 -q -F {dev2}; mkdir -p /mnt/dpq; mount {dev2} /mnt/dpq; "
                  "dd if=/dev/urandom of=/mnt/dpq/f bs=1M count=40 oflag=direct status=none; "
                  "dd if=/mnt/dpq/f iflag=nocache count=0 status=none")
        made = dpq.sh("node2", script)
        assert made.returncode == 0, made.stderr
        cold = dpq.dd_mib_s("node2", "if=/mnt/dpq/f bs=1M")
        warm = dpq.dd_mib_s("node2", "if=/mnt/dpq/f bs=1M")
        print(f"buffered through ext4: cold {cold:.1f} MiB/s, cached {warm:.0f} MiB/s")
        assert within(cold, 20, 0.25), cold
        assert warm > 200, warm
    finally:
        dpq.sh("node2", f"umount /mnt/dpq 2>/dev/null; rmdir /mnt/dpq 2>/dev/null; wipefs -aq {dev2}; true")
        dpq.cli("impair", "node2", "nvme", "--clear")
    with open(f"{cgroup}/blkio.throttle.read_bps_device") as fh:
        assert fh.read().strip() == ""
    assert dpq.dd_mib_s("node2", f"if={dev2} bs=1M count=40 iflag=direct") > 100


def test_status_lists_and_down_removes_everything(dpq: Dpq) -> None:
    dpq.ensure_up()
    dpq.cli("impair", "node1", FABRIC, "--rate", "300mbit")
    dpq.cli("impair", "node2", FABRIC, "--loss", "0.5%", "--delay", "2ms")
    dpq.cli("impair", "node3", "mgmt", "--delay", "1ms", "--direction", "from-node")
    dpq.cli("impair", "node3", "nvme", "--read-bps", "10M")
    status = json.loads(dpq.cli("status", "--json").stdout)  # a new process reads them from the state
    found = {(r["node"], r["target"]): r for r in status["impairments"]}
    assert set(found) == {("node1", FABRIC), ("node2", FABRIC), ("node3", "mgmt"), ("node3", "nvme")}
    assert found[("node1", FABRIC)]["rate_bps"] == 300_000_000 and found[("node1", FABRIC)]["relay"] is None
    assert found[("node2", FABRIC)]["loss"] == pytest.approx(0.005)
    assert found[("node2", FABRIC)]["delay_s"] == pytest.approx(0.002)
    assert found[("node3", "mgmt")]["direction"] == "from-node"
    assert found[("node3", "nvme")]["read_bps"] == 10 << 20
    assert status["problems"] == []
    text = dpq.cli("status").stdout
    assert "impaired node1 rdma: rate 300mbit (both; tc tbf + ifb)" in text
    assert "impaired node3 nvme" in text and "read 10MiB/s" in text
    relays = [r["relay"]["pid"] for r in status["impairments"] if r.get("relay")]
    assert len(relays) == 2 and all(proc_starttime(p) for p in relays)

    dpq.cli("down")
    assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                          check=True).stdout.split() if n.startswith(NAME + "-")]
    assert all(proc_starttime(p) is None for p in relays)
    assert not os.path.exists(f"/sys/fs/cgroup/blkio/datapath-lab/{NAME}")
    host_links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    assert not re.search(r"^[pqri]-node\d+", host_links, re.M)  # nothing fell back into the host
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert not [line for line in ps.splitlines() if "datapath_lab.relay" in line and f"/{NAME}/" in line]
    assert json.loads(dpq.cli("status", "--json", check=False).stdout)["leftovers"] == []
    assert impair_mod.cgroup_leftovers(NAME) == []
