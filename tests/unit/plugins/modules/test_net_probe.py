"""net_probe through main(): a real loopback pair (the client through main(), the server through
the capability runner in a thread of this process), check mode opening no socket, refusals
before any traffic, parameter failures, and pairs that fail as results, not as module failures.

Loopback runs use 127.0.0.1 with ``allowed_networks: [127.0.0.0/8]`` and a load of at most one
second. /proc/net fixtures are the lab recordings under tests/fixtures/measure/net/proc/.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe_socket as psock
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node as CapNode
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import run
from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe import NetProbe
from ansible_collections.aiinfra.datapath.plugins.modules import net_probe
from netfakes import FakeRunner, children, fds, free_port, use

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "measure" / "net"
LOOP = "127.0.0.1"
TOKEN = "5ec2e7" + "0" * 26  # the pair's per-run token (the measure role draws one per pair)
FABRIC = {"address": "198.18.1.12", "allowed_networks": ["198.18.1.0/24"], "token": TOKEN}
CLIENT = dict(FABRIC, role="client", source="198.18.1.11")
PROBE_KEYS = {"role", "address", "source", "port", "tool", "ok", "error", "streams", "duration", "max_bytes",
              "seconds", "bytes", "gbit_per_s", "tcp", "netstat", "latency", "socket_buffers", "nic_bytes"}
NETSTAT_KEYS = {"TcpRetransSegs", "TcpExtTCPLostRetransmit", "TcpExtTCPTimeouts", "TcpOutSegs",
                "TcpExtTCPDSACKRecvSegs", "TcpExtIPReversePathFilter"}


def no_tools(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    return use(monkeypatch, FakeRunner([], which={"iperf3": None}))


def node_with_buffers(node: Any) -> Any:
    node.put("/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n")
    node.put("/proc/sys/net/ipv4/tcp_wmem", "4096\t16384\t4194304\n")
    node.put("/proc/sys/net/core/rmem_max", "212992\n")
    node.put("/proc/sys/net/core/wmem_max", "212992\n")
    return node


BUFFERS = {"tcp_rmem": "4096 131072 6291456", "tcp_wmem": "4096 16384 4194304", "rmem_max": "212992",
           "wmem_max": "212992"}


@pytest.fixture
def no_traffic(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every socket, fork and child process the module would make (the calls still work)."""
    made: list[str] = []
    real_socket, real_fork, real_popen = socket.socket, os.fork, subprocess.Popen

    class Socket(real_socket):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append("socket%r" % (args,))
            super().__init__(*args, **kwargs)

    class Popen(real_popen):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append("popen%r" % (args,))
            super().__init__(*args, **kwargs)

    def fork() -> int:
        made.append("fork")
        return real_fork()

    monkeypatch.setattr(socket, "socket", Socket)
    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(subprocess, "Popen", Popen)
    return made


def test_check_mode_reports_what_would_be_measured_and_opens_no_socket(run_module, monkeypatch, node,
                                                                       no_traffic) -> None:
    runner = no_tools(monkeypatch)
    node_with_buffers(node)
    before = node.snapshot()
    args = dict(CLIENT, root=str(node.root), streams=8, duration=2.5, port=5301, wait=300.0)
    started = time.monotonic()
    result = run_module(net_probe.main, args, check_mode=True)
    assert time.monotonic() - started < 2.0  # no wait for a peer
    assert no_traffic == [] and runner.calls == [] and node.snapshot() == before
    assert result["changed"] is False and "actions" not in result and "warnings" not in result
    probe = result["probe"]
    assert set(probe) == PROBE_KEYS
    assert {k: probe[k] for k in ("role", "address", "source", "port", "tool", "streams", "duration",
                                  "max_bytes", "ok", "error")} == {
        "role": "client", "address": "198.18.1.12", "source": "198.18.1.11", "port": 5301, "tool": "builtin",
        "streams": 8, "duration": 2.5, "max_bytes": 0, "ok": None, "error": None}
    assert probe["socket_buffers"] == BUFFERS
    assert probe["seconds"] is probe["bytes"] is probe["gbit_per_s"] is None
    assert set(probe["netstat"]) == NETSTAT_KEYS and set(probe["netstat"].values()) == {None}
    assert set(probe["tcp"].values()) == {None} and set(probe["latency"].values()) == {None}


def test_check_mode_of_a_server_with_iperf3_on_ipv6(run_module, monkeypatch, node, no_traffic) -> None:
    no_tools(monkeypatch)
    args = {"role": "server", "address": "fd00:1::12", "allowed_networks": ["fd00:1::/64"], "tool": "iperf3",
            "root": str(node.root), "peer": "fd00:1::11", "token": TOKEN}
    probe = run_module(net_probe.main, args, check_mode=True)["probe"]
    assert no_traffic == []
    assert (probe["ok"], probe["role"], probe["source"], probe["tool"]) == (None, "server", None, "iperf3")
    assert probe["socket_buffers"] == dict.fromkeys(BUFFERS)  # a node without those files


@pytest.mark.parametrize("args, why", [
    ({"address": "10.0.0.12"}, "address 10.0.0.12 is outside allowed_networks (198.18.1.0/24)"),
    ({"source": "198.18.2.11"}, "source 198.18.2.11 is outside allowed_networks (198.18.1.0/24)"),
    ({"address": "fd00:1::12"}, "address fd00:1::12 is outside allowed_networks (198.18.1.0/24)"),
    ({"address": "::ffff:198.18.1.12"}, "address ::ffff:198.18.1.12 is outside allowed_networks"),
    ({"address": "node2"}, "address 'node2' is not an IP address (names are not resolved"),
    ({"address": "fd00:1::12", "allowed_networks": ["198.18.1.0/24", "fd00:1::/64"]},
     "source 198.18.1.11 and address fd00:1::12 are of different IP versions"),
])
def test_addresses_outside_allowed_networks_are_refused_before_any_traffic(run_module, monkeypatch, args, why,
                                                                           no_traffic) -> None:
    no_tools(monkeypatch)
    result = run_module(net_probe.main, dict(CLIENT, **args), expect_failure=True)
    assert no_traffic == []
    assert result["msg"].startswith("net_probe refused before any traffic is sent: ") and why in result["msg"]
    assert any(why in error for error in result["errors"])
    assert result["probe"]["ok"] is None and result["probe"]["address"] == dict(CLIENT, **args)["address"]


def test_both_addresses_outside_are_named(run_module, monkeypatch, no_traffic) -> None:
    no_tools(monkeypatch)
    result = run_module(net_probe.main, dict(CLIENT, address="10.0.0.12", source="10.0.0.11"), expect_failure=True)
    assert no_traffic == [] and len(result["errors"]) == 2
    assert "address 10.0.0.12" in result["errors"][0] and "source 10.0.0.11" in result["errors"][1]


@pytest.mark.parametrize("args, message", [
    ({"streams": 0}, "streams 0 is outside 1-64"),
    ({"streams": 65}, "streams 65 is outside 1-64"),
    ({"duration": 0.1}, "duration 0.1 is outside 0.5-300.0"),
    ({"duration": 301}, "duration 301.0 is outside 0.5-300.0"),
    ({"wait": 0.2}, "wait 0.2 is outside 0.5-600.0"),
    ({"latency_interval": 0}, "latency_interval 0.0 is outside 0.001-10.0"),
    ({"port": 65535}, "port 65535 is outside 1-65534"),
    ({"port": 0}, "port 0 is outside 1-65534"),
    ({"max_bytes": -1}, "max_bytes must be 0 (no cap) or positive"),
    ({"socket_buffer": 1024}, "socket_buffer must be 4096-1073741824 bytes"),
    ({"allowed_networks": []}, "allowed_networks is empty: name the fabric subnets the probe may use"),
    ({"allowed_networks": ["198.18.1.0/33"]}, "allowed_networks: '198.18.1.0/33' is not a network"),
    ({"allowed_networks": ["rdma"]}, "allowed_networks: 'rdma' is not a network"),
    ({"source": None}, "role is client but all of the following are missing: source"),
    ({"role": "both"}, "value of role must be one of: server, client, got: both"),
    ({"tool": "netperf"}, "value of tool must be one of: builtin, iperf3, got: netperf"),
    ({"streams": "many"}, "streams"),
])
def test_bad_parameters_fail_the_module(run_module, monkeypatch, args, message, no_traffic) -> None:
    no_tools(monkeypatch)
    params = {k: v for k, v in dict(CLIENT, **args).items() if v is not None}
    result = run_module(net_probe.main, params, expect_failure=True)
    assert message in result["msg"] and no_traffic == []


def test_two_bad_limits_are_reported_at_once(run_module, monkeypatch) -> None:
    no_tools(monkeypatch)
    result = run_module(net_probe.main, dict(CLIENT, streams=0, duration=1000), expect_failure=True)
    assert result["errors"] == ["duration 1000.0 is outside 0.5-300.0", "streams 0 is outside 1-64"]


def test_iperf3_missing_is_a_failed_pair_and_counters_are_read(run_module, monkeypatch, node) -> None:
    """The node's /proc/net are the lab recordings (unchanged during the run: deltas 0)."""
    runner = no_tools(monkeypatch)
    node_with_buffers(node)
    node.put("/proc/net/snmp", (FIXTURES / "proc" / "node1-snmp.after").read_text())
    node.put("/proc/net/netstat", (FIXTURES / "proc" / "node1-netstat.after").read_text())
    result = run_module(net_probe.main, dict(CLIENT, tool="iperf3", root=str(node.root)))
    probe = result["probe"]
    assert result["changed"] is False and runner.calls == []
    assert probe["ok"] is False and probe["error"] == "iperf3 is not installed on this node (tool: iperf3)"
    assert probe["netstat"] == dict.fromkeys(NETSTAT_KEYS, 0) and probe["socket_buffers"] == BUFFERS
    assert probe["gbit_per_s"] is None and probe["tcp"]["segments_sent"] is None
    # without /proc/net below the root the deltas are unknown, not an error
    bare = run_module(net_probe.main, dict(CLIENT, tool="iperf3", root=str(node.path("/proc/sys"))))
    assert bare["probe"]["netstat"] == dict.fromkeys(NETSTAT_KEYS)


# -- real loopback runs ------------------------------------------------------------------------

@pytest.fixture
def nothing_left() -> Any:
    """After the test: the same threads and file descriptors as before and no child process."""
    threads, before = set(threading.enumerate()), fds()
    yield
    # no grace period: the probe joins its threads, closes its sockets and reaps its children before it returns
    assert set(threading.enumerate()) == threads
    assert fds() == before
    assert children() == []


def loop_args(port: int, **extra: Any) -> dict[str, Any]:
    args = {"address": LOOP, "allowed_networks": ["127.0.0.0/8"], "port": port, "streams": 2, "duration": 0.8,
            "wait": 5.0, "latency_interval": 0.01, "token": TOKEN, "peer": LOOP}
    args.update(extra)
    return args


def with_server(server_args: dict[str, Any], client: Any) -> tuple[dict[str, Any], Any]:
    """The server side through the capability runner (as datapath_run runs it) in a thread; then
    ``client()`` here, once the server's echo answers. (server result, client's return value)."""
    params = dict((key, spec.get("default")) for key, spec in NetProbe.argument_spec().items())
    params.update(server_args, role="server")
    got: dict[str, Any] = {}

    def serve() -> None:  # run() returns a failed pair or a refusal as a result: anything raised is a bug
        runner = FakeRunner([], which={"iperf3": shutil.which("iperf3")})
        got["server"] = run(NetProbe, params, CapNode(runner, "/"))

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        try:
            psock.wait_for_echo(LOOP, LOOP, server_args["port"], bytes.fromhex(TOKEN), psock.now() + 5.0)
        except psock.PairError as exc:
            thread.join(20)
            raise AssertionError("the server's echo never answered: %s; server: %r" % (exc, got.get("server")))
        value = client()
    finally:
        thread.join(20)
    assert not thread.is_alive() and isinstance(got.get("server"), dict), got
    return got["server"], value


def test_builtin_pair_on_loopback_through_main(run_module, monkeypatch, nothing_left) -> None:
    no_tools(monkeypatch)
    port = free_port()
    started = time.monotonic()
    server, result = with_server(loop_args(port), lambda: run_module(
        net_probe.main, loop_args(port, role="client", source=LOOP)))
    assert time.monotonic() - started < 6.0
    assert result["changed"] is False and "actions" not in result and "warnings" not in result
    client = result["probe"]
    assert server["changed"] is False and "failed" not in server, server
    host = server["probe"]
    for side in (client, host):
        assert set(side) == PROBE_KEYS
        assert side["ok"] is True and side["error"] is None, side
        assert side["gbit_per_s"] > 0 and side["bytes"] > 0 and 0.7 <= side["seconds"] <= 1.5
        assert side["gbit_per_s"] == pytest.approx(side["bytes"] * 8 / side["seconds"] / 1e9, rel=2e-3)
        assert len(side["socket_buffers"]["tcp_rmem"].split()) == 3
        assert side["netstat"]["TcpOutSegs"] > 0  # this namespace's counters moved
    assert client["bytes"] == host["bytes"] and client["seconds"] == host["seconds"]
    tcp = client["tcp"]
    assert tcp["retransmits"] >= 0 and tcp["segments_sent"] > 0 and tcp["rtt_ms"] > 0 and tcp["snd_cwnd"] > 0
    # loopback reorders: the retransmits the receiver reported as duplicates (DSACK) are no loss
    assert 0 <= tcp["spurious_retransmits"] and tcp["reorderings"] >= 0
    lost = tcp["retransmits"] - min(tcp["spurious_retransmits"], tcp["retransmits"])
    assert tcp["retransmit_share"] == round(lost / tcp["segments_sent"], 6)
    latency = client["latency"]
    assert latency["sent"] >= 30 and latency["received"] >= 0.9 * latency["sent"]
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] and latency["loss_pct"] < 10
    assert set(host["latency"].values()) == {None}  # the server only echoes


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed")
def test_iperf3_pair_on_loopback_through_main(run_module, monkeypatch, nothing_left) -> None:
    use(monkeypatch, FakeRunner([], which={"iperf3": shutil.which("iperf3")}))
    port = free_port()
    server, result = with_server(loop_args(port, tool="iperf3", duration=1.0), lambda: run_module(
        net_probe.main, loop_args(port, role="client", source=LOOP, tool="iperf3", duration=1.0)))
    client, host = result["probe"], server["probe"]
    assert client["ok"] is True and host["ok"] is True, (client, host)
    assert client["bytes"] == host["bytes"] > 0 and client["gbit_per_s"] > 0
    # iperf3 has no segment count: the node's TcpOutSegs over the run stands in
    assert client["tcp"]["segments_sent"] == client["netstat"]["TcpOutSegs"] > 0
    # ... and the node's TcpExtTCPDSACKRecvSegs for the spurious retransmits
    tcp = client["tcp"]
    assert tcp["spurious_retransmits"] == client["netstat"]["TcpExtTCPDSACKRecvSegs"] >= 0
    lost = tcp["retransmits"] - min(tcp["spurious_retransmits"], tcp["retransmits"])
    assert tcp["retransmit_share"] == round(lost / tcp["segments_sent"], 6)
    assert client["latency"]["sent"] >= 30 and client["latency"]["p50_ms"] > 0


def test_client_without_server_is_a_failed_pair_not_a_failed_module(run_module, monkeypatch, nothing_left) -> None:
    no_tools(monkeypatch)
    port = free_port()
    started = time.monotonic()
    result = run_module(net_probe.main, loop_args(port, role="client", source=LOOP, wait=1.0))
    assert time.monotonic() - started < 5.0
    probe = result["probe"]
    assert probe["ok"] is False and probe["error"].startswith("no probe server listening at 127.0.0.1:%d" % port)
    assert probe["gbit_per_s"] is None and probe["bytes"] is None and set(probe["tcp"].values()) == {None}
    assert set(probe["netstat"]) == NETSTAT_KEYS  # read around the attempt all the same


def test_server_without_client_gives_up_at_its_wait(run_module, monkeypatch, nothing_left) -> None:
    no_tools(monkeypatch)
    port = free_port()
    started = time.monotonic()
    result = run_module(net_probe.main, loop_args(port, role="server", wait=1.0))
    assert time.monotonic() - started < 5.0
    assert result["probe"]["ok"] is False
    assert result["probe"]["error"] == "no client connected to 127.0.0.1:%d within 1 s" % port
    again = socket.socket()  # the listener is closed: the port binds again
    try:
        again.bind((LOOP, port))
    finally:
        again.close()


def test_legs_run_every_rail_of_a_pair_at_once_with_each_nics_bytes(run_module, monkeypatch, nothing_left) -> None:
    """Two rails of one pair (on loopback: 127.0.0.1 and 127.0.0.2), each on its own port, in one call per side."""
    no_tools(monkeypatch)
    port = free_port()
    legs = [{"rail": 0, "address": LOOP, "port": port}, {"rail": 1, "address": "127.0.0.2", "port": port + 2}]
    # each server leg serves only its rail's client address (its peer; rail0's is the pair's peer)
    served = [dict(leg, peer=leg["address"]) for leg in legs]
    server, result = with_server(loop_args(port, legs=served), lambda: run_module(net_probe.main, loop_args(
        port, role="client", source=LOOP, legs=[dict(leg, source=leg["address"], interface="lo") for leg in legs])))
    client, host = result["probe"], server["probe"]
    for side in (client, host):
        assert [(leg["rail"], leg["ok"], leg["error"]) for leg in side["legs"]] == [(0, True, None), (1, True, None)]
        assert all(leg["gbit_per_s"] > 0 and leg["bytes"] > 0 for leg in side["legs"]), side["legs"]
        assert side["gbit_per_s"] == side["legs"][0]["gbit_per_s"]  # the pair's own figures are rail0's
        assert isinstance(side["nic_bytes"], dict) and "lo" not in side["nic_bytes"]
    assert [leg["bytes"] for leg in client["legs"]] == [leg["bytes"] for leg in host["legs"]]
    assert client["legs"][1]["port"] == port + 2 and client["legs"][1]["interface"] == "lo"
