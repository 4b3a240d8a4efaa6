"""net_probe through real ansible-playbook on a 2-node lab (`dpn`, its own, always torn down).

node2 serves and node1 measures on the rdma fabric (198.18.1.0/24), both started by Ansible at
the same time, with the built-in probe and with iperf3. The faults: a peer address of the
fabric subnet with nobody there, a server whose client never comes, a client killed mid-test,
a server killed mid-test (SIGKILL of the module process on the node, by its PID), and an
address outside ``allowed_networks``. After each, nothing the probe started is left: no
listener on the probe ports (``ss`` inside the node) and no probe process in the node's
network namespace (``ip netns pids``; the probe, its forked echo or prober and iperf3 all run
as ``python3`` / ``iperf3`` there, where nothing else runs those).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from datapath_lab import Lab, LabConfig
from labtools import REPO, VENV_BIN, LabHandle, PlayResult, _lab_possible

pytestmark = pytest.mark.lab

LAB = os.environ.get("DATAPATH_NET_TEST_LAB", "dpn")
PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "net_probe.yml")
TASK = "Run the network probe"
FABRIC = "rdma"
PORT = 5301
TOOLS = ["builtin", "iperf3"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    handle = Lab(LAB)
    try:
        state = handle.up(LabConfig(name=LAB, nodes=2, nvme_size="256M",
                                    inventory_dir=str(tmp_path_factory.mktemp("net-probe-inventory"))),
                          log=lambda *_: None)
        yield LabHandle(handle, state)
    finally:
        handle.down(log=lambda *_: None)


def address(lab: LabHandle, node: str) -> str:
    return str(lab.state["nodes"][node]["interfaces"][FABRIC]["address"])


def subnet(lab: LabHandle) -> str:
    return address(lab, "node1").rsplit(".", 1)[0] + ".0/24"


def pair_vars(lab: LabHandle, tool: str, hosts: tuple[str, ...] = ("node1", "node2"),
              server_address: str | None = None, **common: Any) -> dict[str, Any]:
    server = server_address or address(lab, "node2")
    # the server serves only its planned client, which presents the pair's per-run token (docs/security.md)
    args = {"node2": {"role": "server", "address": server, "peer": address(lab, "node1")},
            "node1": {"role": "client", "address": server, "source": address(lab, "node1")}}
    base = {"port": PORT, "streams": 4, "duration": 2.0, "wait": 15.0, "tool": tool,
            "allowed_networks": [subnet(lab)], "token": secrets.token_hex(16)}
    base.update(common)
    return {"probe_common": base, "probe_args": {h: args[h] for h in hosts}}


def probe(play: PlayResult, host: str) -> dict[str, Any]:
    return play.task_results(TASK)[host]["probe"]


def argv(lab: LabHandle, extra_vars: dict[str, Any]) -> list[str]:
    return [os.path.join(VENV_BIN, "ansible-playbook"), "-i", lab.inventory, PLAYBOOK, "-e", json.dumps(extra_vars)]


def env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1",
            "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", "")}


def finish(proc: subprocess.Popen[str]) -> PlayResult:
    out, err = proc.communicate(timeout=300)
    data = json.loads(out[out.index("{"):]) if "{" in out else {}
    return PlayResult(proc.returncode, out, err, data)


def leftovers(lab: LabHandle, node: str) -> list[str]:
    """Probe sockets still open and probe processes still running inside ``node``."""
    found = []
    sockets = lab.sh(node, "ss -Htuan", check=False).stdout
    found += [line for line in sockets.splitlines() if re.search(r":(%d|%d)\b" % (PORT, PORT + 1), line)]
    pids = subprocess.run(["ip", "netns", "pids", f"{LAB}-{node}"], capture_output=True, text=True,
                          check=False).stdout.split()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as handle:
                comm = handle.read().strip()
        except OSError:
            continue
        if comm.startswith(("python", "iperf3")):
            found.append(f"pid {pid} ({comm})")
    return found


def assert_clean(lab: LabHandle) -> None:
    deadline = time.monotonic() + 5.0
    while True:
        left = {node: leftovers(lab, node) for node in ("node1", "node2")}
        # TIME-WAIT entries are the kernel's, not a process: only sockets a process could own count.
        left = {n: [x for x in v if "TIME-WAIT" not in x] for n, v in left.items()}
        if not any(left.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == {"node1": [], "node2": []}


def counters(lab: LabHandle, node: str) -> dict[str, int]:
    text = lab.sh(node, "cat /proc/net/snmp", check=False).stdout
    lines = [line.split() for line in text.splitlines()]
    found = {}
    for head, values in zip(lines[::2], lines[1::2], strict=True):
        found.update({head[0].rstrip(":") + name: int(value) for name, value in zip(head[1:], values[1:], strict=True)})
    return found


def module_pid(lab: LabHandle, node: str, state_filter: str) -> int | None:
    """The PID of the net_probe module process on ``node`` that owns a test connection (iperf3's
    parent when iperf3 owns it)."""
    out = lab.sh(node, f"ss -Htnp state established '{state_filter}'", check=False).stdout
    for pid in re.findall(r"pid=(\d+)", out):
        with open(f"/proc/{pid}/status") as handle:
            status = dict(line.split(":\t", 1) for line in handle.read().splitlines() if ":\t" in line)
        if status["Name"].strip() == "iperf3":
            return int(status["PPid"].strip())
        return int(pid)
    return None


def kill_mid_test(lab: LabHandle, tool: str, victim: str) -> tuple[PlayResult, PlayResult, float]:
    """Start server and client (two ansible-playbook runs), SIGKILL the victim's module process
    once its streams run; the two play results and the seconds from the kill until both ended."""
    extra = pair_vars(lab, tool, duration=20.0)
    procs = {}
    for host in ("node2", "node1"):
        one = dict(extra, probe_args={host: extra["probe_args"][host]})
        procs[host] = subprocess.Popen(argv(lab, one), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       cwd=REPO, env=env())
    flt = f"( dport = :{PORT} )" if victim == "node1" else f"( sport = :{PORT} )"
    pid = None
    try:
        deadline = time.monotonic() + 60
        while pid is None and time.monotonic() < deadline:
            time.sleep(0.5)
            pid = module_pid(lab, victim, flt)
        assert pid is not None, "the probe's streams never showed on " + victim
        time.sleep(1.5)  # well into the load
        os.kill(pid, signal.SIGKILL)  # the module process this test started, by its PID
        killed = time.monotonic()
        results = {host: finish(proc) for host, proc in procs.items()}
        return results["node2"], results["node1"], time.monotonic() - killed
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.parametrize("tool", TOOLS)
def test_pair_measures_throughput_retransmits_rtt_and_latency(lab: LabHandle, tool: str) -> None:
    play = lab.playbook(PLAYBOOK, extra_vars=pair_vars(lab, tool))
    assert play.rc == 0, play.stdout[-3000:] + play.stderr[-2000:]
    client, server = probe(play, "node1"), probe(play, "node2")
    for side in (client, server):
        assert side["ok"] is True and side["error"] is None, side
        assert side["tool"] == tool and side["gbit_per_s"] > 0 and side["bytes"] > 0
        assert 1.5 < side["seconds"] < 4.0
        assert set(side["socket_buffers"]) == {"tcp_rmem", "tcp_wmem", "rmem_max", "wmem_max"}
        assert len(side["socket_buffers"]["tcp_rmem"].split()) == 3
    assert client["bytes"] == server["bytes"]
    tcp = client["tcp"]
    assert tcp["rtt_ms"] > 0 and tcp["snd_cwnd"] > 0 and tcp["retransmits"] >= 0
    assert tcp["segments_sent"] > 0 and 0 <= tcp["retransmit_share"] < 0.1
    assert client["netstat"]["TcpOutSegs"] > 1000 and client["netstat"]["TcpRetransSegs"] >= 0
    latency = client["latency"]
    assert latency["sent"] >= 50 and latency["received"] > 0.9 * latency["sent"]
    assert 0 < latency["p50_ms"] <= latency["p99_ms"]
    assert_clean(lab)


@pytest.mark.parametrize("tool", TOOLS)
def test_unreachable_peer_is_a_failed_pair_and_leaves_nothing(lab: LabHandle, tool: str) -> None:
    nobody = subnet(lab).replace(".0/24", ".99")
    started = time.monotonic()
    play = lab.playbook(PLAYBOOK, extra_vars=pair_vars(lab, tool, hosts=("node1",), server_address=nobody, wait=3.0))
    assert play.rc == 0, play.stdout[-3000:]  # the pair fails, the module and the run do not
    client = probe(play, "node1")
    assert client["ok"] is False and "unreachable" in client["error"], client
    assert client["gbit_per_s"] is None
    assert time.monotonic() - started < 3.0 + 2.0 + 5.0 + 15.0  # wait + duration + grace + Ansible
    assert_clean(lab)


@pytest.mark.parametrize("tool", TOOLS)
def test_server_without_client_gives_up_and_closes_its_listener(lab: LabHandle, tool: str) -> None:
    play = lab.playbook(PLAYBOOK, extra_vars=pair_vars(lab, tool, hosts=("node2",), wait=2.0))
    assert play.rc == 0, play.stdout[-3000:]
    server = probe(play, "node2")
    assert server["ok"] is False and "no client" in server["error"], server
    assert_clean(lab)


@pytest.mark.parametrize("tool", TOOLS)
def test_client_killed_mid_test_server_reports_it_and_exits(lab: LabHandle, tool: str) -> None:
    server_play, client_play, after_kill = kill_mid_test(lab, tool, victim="node1")
    assert client_play.rc != 0  # its module process was killed
    assert server_play.rc == 0, server_play.stdout[-3000:]
    server = probe(server_play, "node2")
    assert server["ok"] is False and "client went away" in server["error"], server
    assert after_kill < 15.0  # the server did not sit out its 20 s test
    assert_clean(lab)


@pytest.mark.parametrize("tool", TOOLS)
def test_server_killed_mid_test_client_reports_it_and_exits(lab: LabHandle, tool: str) -> None:
    server_play, client_play, after_kill = kill_mid_test(lab, tool, victim="node2")
    assert server_play.rc != 0
    assert client_play.rc == 0, client_play.stdout[-3000:]
    client = probe(client_play, "node1")
    assert client["ok"] is False and "server went away" in client["error"], client
    assert after_kill < 15.0
    assert_clean(lab)


def test_address_outside_allowed_networks_fails_before_any_traffic(lab: LabHandle) -> None:
    mgmt = str(lab.state["nodes"]["node2"]["interfaces"]["mgmt"]["address"])  # reachable, but not allowed
    before = counters(lab, "node1")
    play = lab.playbook(PLAYBOOK, extra_vars=pair_vars(lab, "builtin", hosts=("node1",), server_address=mgmt))
    after = counters(lab, "node1")
    assert play.rc != 0
    result = play.task_results(TASK)["node1"]
    assert result.get("failed") and "refused before any traffic is sent" in result["msg"], result
    assert mgmt in result["msg"] and "allowed_networks" in result["msg"]
    for key in ("TcpActiveOpens", "TcpOutSegs", "UdpOutDatagrams", "IcmpOutMsgs"):
        assert after[key] == before[key], key  # the node sent nothing at all
    assert_clean(lab)


def test_check_mode_reports_the_plan_and_opens_no_socket(lab: LabHandle) -> None:
    before = counters(lab, "node1")
    play = lab.playbook(PLAYBOOK, extra_vars=pair_vars(lab, "builtin"), check=True)
    assert play.rc == 0, play.stdout[-3000:]
    for host in ("node1", "node2"):
        side = probe(play, host)
        assert side["ok"] is None and side["error"] is None and side["gbit_per_s"] is None
        assert side["streams"] == 4 and side["port"] == PORT
    assert counters(lab, "node1")["TcpOutSegs"] == before["TcpOutSegs"]
    assert_clean(lab)
