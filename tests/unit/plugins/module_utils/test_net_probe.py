"""net_probe backend: the parsers on recorded real outputs, the percentile and result helpers,
allowed_networks, and real loopback runs of both engines (server and client in this process).

Fixtures under tests/fixtures/measure/net/ (each with a .source sidecar), recorded in the lab on
kernel 6.18 with iperf3 3.12: iperf3 -J of a good pair (client and server), a refused and an
unreachable client, a server killed under its client, a client killed under its server and a
server stopped with no client; /proc/net/snmp and /proc/net/netstat of node1 before and after
a 1.5 s send and of the host; getsockopt(TCP_INFO) of that send as hex, with ``ss -tin`` of the
same socket to check the decoded fields against.

The loopback runs use 127.0.0.1 with ``allowed_networks`` 127.0.0.0/8 and a load of at most one
second; afterwards no thread, file descriptor or child process of the probe is left.
"""

from __future__ import annotations

import re
import shutil
import socket
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe as np
from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe_builtin as builtin
from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe_iperf3 as iperf3
from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe_parse as parse
from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe_socket as psock
from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe_socket import PairError
from netfakes import children, fds, free_port

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "measure" / "net"
LOOP = "127.0.0.1"


def fixture(rel: str) -> str:
    return (FIXTURES / rel).read_text()


def iperf(name: str) -> dict[str, Any]:
    data = parse.load_iperf3(fixture("iperf3/" + name))
    assert data is not None
    return data


def tcp_info_raw() -> bytes:
    return bytes.fromhex(fixture("tcp_info/node1-bbr.hex").strip())


def counters(*names: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for name in names:
        found.update(parse.parse_proc_net(fixture("proc/" + name)))
    return found


# -- recorded fixtures -------------------------------------------------------------------------

def test_every_fixture_has_a_source_sidecar() -> None:
    files = [p for p in FIXTURES.rglob("*") if p.is_file()]
    assert len([p for p in files if p.suffix != ".source"]) == 15
    for path in files:
        if path.suffix != ".source":
            sidecar = path.with_name(path.name + ".source")
            assert sidecar.is_file() and sidecar.read_text().startswith("SOURCE: "), path


def test_iperf3_client_ok_reports_the_receiver_and_the_senders_tcp() -> None:
    data = iperf("client-ok.json")
    got = parse.iperf3_summary(data, "client")
    received = data["end"]["sum_received"]
    senders = [s["sender"] for s in data["end"]["streams"]]
    last = {s["socket"]: s for s in data["intervals"][-1]["streams"]}
    assert (got["ok"], got["error"], got["connected"]) == (True, None, 4)
    assert (got["bytes"], got["seconds"], got["gbit_per_s"]) == (3683385344, 3.009544, 9.7912)
    assert got["bytes"] == received["bytes"] and got["gbit_per_s"] == round(received["bits_per_second"] / 1e9, 4)
    tcp = got["tcp"]
    assert tcp["retransmits"] == data["end"]["sum_sent"]["retransmits"] == 10
    assert tcp["rtt_ms"] == round(statistics.mean(s["mean_rtt"] for s in senders) / 1000, 3) == 1.128
    assert tcp["rttvar_ms"] == round(statistics.mean(s["rttvar"] for s in last.values()) / 1000, 3) == 0.565
    assert tcp["snd_cwnd"] == round(statistics.mean(s["snd_cwnd"] for s in last.values())) == 912696
    # iperf3 counts no segments: the module fills segments_sent from TcpOutSegs, so none here
    assert tcp["segments_sent"] is None and tcp["retransmit_share"] is None
    assert parse.iperf3_connect_failed(data) is False


def test_iperf3_server_ok_is_the_same_bytes_without_sender_figures() -> None:
    server = parse.iperf3_summary(iperf("server-ok.json"), "server")
    client = parse.iperf3_summary(iperf("client-ok.json"), "client")
    assert server["ok"] is True and server["connected"] == 4
    assert (server["bytes"], server["seconds"], server["gbit_per_s"]) == (
        client["bytes"], client["seconds"], client["gbit_per_s"])
    assert server["tcp"] == parse.tcp_result()  # the receiver has no send-side TCP figures


@pytest.mark.parametrize("name, why", [
    ("client-refused.json", "Connection refused"),
    ("client-unreachable.json", "No route to host"),
])
def test_iperf3_client_that_never_connected(name: str, why: str) -> None:
    data = iperf(name)
    got = parse.iperf3_summary(data, "client")
    assert got["ok"] is False and got["error"] == "iperf3: unable to connect to server: " + why
    assert got["connected"] == 0 and got["bytes"] is None and got["gbit_per_s"] is None
    assert got["tcp"] == parse.tcp_result()
    assert parse.iperf3_connect_failed(data) is True  # worth another try while the wait lasts
    # what run_client raises once the wait is over
    assert iperf3._why(dict(got), "client", "", False)["error"] == got["error"]


def test_iperf3_client_whose_server_was_killed() -> None:
    data = iperf("client-serverkilled.json")
    got = parse.iperf3_summary(data, "client")
    assert got["ok"] is False and got["error"] == "iperf3: control socket has closed unexpectedly"
    assert got["connected"] == 4 and got["bytes"] is None and parse.iperf3_connect_failed(data) is False
    # the intervals before the kill still give the sender's window and RTT variance
    last = {s["socket"]: s for s in data["intervals"][-1]["streams"]}
    assert got["tcp"]["snd_cwnd"] == round(statistics.mean(s["snd_cwnd"] for s in last.values()))
    assert got["tcp"]["retransmits"] is None and got["tcp"]["rtt_ms"] is None
    why = iperf3._why(got, "client", "", False)
    assert why["ok"] is False
    assert why["error"] == "the server went away mid-test (iperf3: control socket has closed unexpectedly)"


def test_iperf3_server_whose_client_was_killed() -> None:
    got = parse.iperf3_summary(iperf("server-clientkilled.json"), "server")
    assert got["ok"] is False and got["connected"] == 4 and got["bytes"] is None
    why = iperf3._why(got, "server", "", False)
    assert why["error"] == "the client went away mid-test (iperf3: the client has unexpectedly closed the connection)"


def test_iperf3_server_stopped_with_no_client() -> None:
    got = parse.iperf3_summary(iperf("server-noclient-term.json"), "server")
    assert got["ok"] is False and got["error"] == "iperf3: interrupt - the server has terminated"
    assert got["connected"] == 0
    # the probe stopped it (timed out) and nobody had connected: say that, not iperf3's words
    why = iperf3._why(dict(got), "server", "", True)
    assert why["ok"] is False and why["error"] == "no client connected within the wait (iperf3 server stopped)"
    # a client that did connect and then ran past the deadline keeps iperf3's reason
    late = iperf3._why(parse.iperf3_summary(iperf("client-serverkilled.json"), "client"), "client", "", True)
    assert late["error"].startswith("iperf3 ran past the deadline and was stopped (the server went away")


@pytest.mark.parametrize("text", ["", "iperf3: error - unable to start listener\n", "[1, 2]", None])
def test_iperf3_output_that_is_not_a_json_document(text: str | None) -> None:
    assert parse.load_iperf3(text) is None
    got = parse.iperf3_summary(None, "client")
    assert got["ok"] is False and got["error"] == "iperf3 printed no JSON" and got["connected"] == 0
    why = iperf3._why(got, "client", "iperf3: error - unable to bind\nsecond line: the reason\n", False)
    assert why["error"] == "iperf3 printed no JSON: second line: the reason"
    assert parse.iperf3_connect_failed(None) is False


def test_iperf3_document_without_a_result() -> None:
    got = parse.iperf3_summary({"start": {"connected": [{}]}, "end": {}}, "server")
    assert got["ok"] is False and got["error"] == "iperf3 reported no result" and got["connected"] == 1


def ss_fields(text: str) -> dict[str, str]:
    """``key:value`` tokens of ``ss -tin`` (the recorded one), for checking the decoder."""
    return dict(re.findall(r"\b([a-z_]+):([0-9./]+)", text))


def test_tcp_info_decodes_the_recorded_socket_like_ss_does() -> None:
    raw = tcp_info_raw()
    assert len(raw) == 280  # what kernel 6.18 returned for 512 asked
    info = parse.parse_tcp_info(raw)
    ss = ss_fields(fixture("tcp_info/node1-bbr.ss"))
    rtt, rttvar = ss["rtt"].split("/")
    assert info["rtt_us"] == round(float(rtt) * 1000) == 2374
    assert info["rttvar_us"] == round(float(rttvar) * 1000) == 2580
    assert info["snd_mss"] == int(ss["mss"]) == 8948 and info["pmtu"] == int(ss["pmtu"]) == 9000
    assert info["snd_cwnd"] == int(ss["cwnd"]) and info["snd_ssthresh"] == int(ss["ssthresh"])
    assert info["total_retrans"] == int(ss["retrans"].split("/")[1]) == 3
    for name in ("bytes_sent", "bytes_retrans", "bytes_acked", "segs_out", "segs_in", "data_segs_out", "dsack_dups",
                 "reord_seen"):
        assert info[name] == int(ss[name]), name
    assert (info["dsack_dups"], info["reord_seen"]) == (2, 2)  # two of the three retransmits were spurious
    assert info["state"] == 1 and info["bytes_received"] == 0  # ESTABLISHED, a pure sender


def test_tcp_info_of_an_older_kernel_has_no_later_fields() -> None:
    raw = tcp_info_raw()
    linux_4_1 = parse.parse_tcp_info(raw[:136])  # up to bytes_received
    assert linux_4_1["bytes_received"] == 0 and linux_4_1["total_retrans"] == 3
    assert [linux_4_1[k] for k in ("segs_out", "segs_in", "data_segs_out", "bytes_sent", "bytes_retrans")] == [None] * 5
    linux_4_6 = parse.parse_tcp_info(raw[:160])
    assert linux_4_6["data_segs_out"] == 80597 and linux_4_6["bytes_sent"] is None
    assert linux_4_6["dsack_dups"] is None and linux_4_6["reord_seen"] is None
    # a kernel without dsack_dups: every retransmit counts as a loss
    assert parse.summarise_tcp_info([linux_4_6])["retransmit_share"] == round(3 / 80597, 6)
    assert all(v is None for v in parse.parse_tcp_info(b"").values())


def test_summarise_tcp_info_sums_and_averages_the_streams() -> None:
    full = parse.parse_tcp_info(tcp_info_raw())
    old = parse.parse_tcp_info(tcp_info_raw()[:144])  # segs_out but no data_segs_out: that one stands in
    got = parse.summarise_tcp_info([full, old, None])
    # 6 retransmitted, 2 of them reported back as duplicates (DSACK) by the full one: 4 repaired a loss
    assert got == {"retransmits": 6, "spurious_retransmits": 2, "segments_sent": 80597 + 80599,
                   "retransmit_share": round(4 / 161196, 6), "reorderings": 2,
                   "rtt_ms": 2.374, "rttvar_ms": 2.58, "snd_cwnd": 494 * 8948}
    assert parse.summarise_tcp_info([]) == parse.tcp_result() == {
        "retransmits": None, "spurious_retransmits": None, "segments_sent": None, "retransmit_share": None,
        "reorderings": None, "rtt_ms": None, "rttvar_ms": None, "snd_cwnd": None}


@pytest.mark.parametrize(("retransmits", "spurious", "lost"), [
    (10, 4, 6), (10, None, 10), (None, 4, None), (3, 5, 0), (0, 0, 0),  # more DSACKs than retransmits: none lost
])
def test_lost_segments_leaves_out_the_spurious_retransmits(
        retransmits: int | None, spurious: int | None, lost: int | None) -> None:
    assert parse.lost_segments(retransmits, spurious) == lost


def test_proc_net_counters_of_the_recorded_run() -> None:
    before = counters("node1-snmp.before", "node1-netstat.before")
    after = counters("node1-snmp.after", "node1-netstat.after")
    assert before["TcpMaxConn"] == -1 and before["IcmpMsgInType3"] == 1 and before["IpExtOutOctets"] == 9556642658
    assert (before["TcpRetransSegs"], after["TcpRetransSegs"]) == (17, 20)
    assert set(before) == set(after) and len(before) == 313
    delta = parse.netstat_delta(before, after)
    assert delta == {"TcpRetransSegs": 3, "TcpExtTCPLostRetransmit": 0, "TcpExtTCPTimeouts": 0, "TcpOutSegs": 80598,
                     "TcpExtTCPDSACKRecvSegs": 2, "TcpExtIPReversePathFilter": 0}
    # the same run seen from the socket: the node's counters agree with TCP_INFO
    info = parse.parse_tcp_info(tcp_info_raw())
    assert delta["TcpRetransSegs"] == info["total_retrans"]
    assert delta["TcpExtTCPDSACKRecvSegs"] == info["dsack_dups"]
    assert abs(delta["TcpOutSegs"] - info["segs_out"]) <= 2


def test_proc_net_counters_of_the_host() -> None:
    host = counters("host-snmp", "host-netstat")
    assert len(host) == 313 and host["TcpOutSegs"] == 5494 and host["TcpExtTCPTimeouts"] == 2
    snmp = parse.parse_proc_net(fixture("proc/host-snmp"))
    assert not [k for k in snmp if k.startswith("TcpExt")] and "UdpLiteMemErrors" in snmp


def test_proc_net_parser_and_deltas_on_odd_input() -> None:
    assert parse.parse_proc_net(None) == {} and parse.parse_proc_net("") == {}
    text = "Tcp: A B C\nTcp: 1 x\nno colon here\nUdp: D E\nUdp: 7\n"
    assert parse.parse_proc_net(text) == {"TcpA": 1, "UdpD": 7}  # what is not a number or missing is skipped
    delta = parse.netstat_delta({"TcpOutSegs": 10, "TcpRetransSegs": 5}, {"TcpOutSegs": 4, "TcpRetransSegs": 5})
    # went back (namespace recreated): unknown, not negative
    assert delta == {"TcpRetransSegs": 0, "TcpExtTCPLostRetransmit": None, "TcpExtTCPTimeouts": None,
                     "TcpOutSegs": None, "TcpExtTCPDSACKRecvSegs": None, "TcpExtIPReversePathFilter": None}


def test_socket_buffer_sysctls_as_one_line() -> None:
    assert parse.normalise_sysctl("4096\t131072\t6291456\n") == "4096 131072 6291456"
    assert parse.normalise_sysctl("212992") == "212992" and parse.normalise_sysctl(None) is None
    assert [key for key, _path in parse.SOCKET_BUFFER_SYSCTLS] == ["tcp_rmem", "tcp_wmem", "rmem_max", "wmem_max"]


# -- percentiles and results ------------------------------------------------------------------

def test_percentile_is_nearest_rank() -> None:
    assert parse.percentile([], 50) is None and parse.percentile(None, 99) is None
    assert parse.percentile([7.5], 50) == parse.percentile([7.5], 99) == 7.5
    hundred = list(range(100, 0, -1))
    assert [parse.percentile(hundred, pct) for pct in (50, 99, 100)] == [50, 99, 100]
    ten = list(range(1, 11))
    assert parse.percentile(ten, 99) == 10 and parse.percentile(ten, 50) == 5 and parse.percentile(ten, 0) == 1
    assert parse.percentile([3, 1, 2], 50) == 2  # values need not be sorted


def test_latency_result_edge_cases() -> None:
    nothing = {"sent": None, "received": None, "loss_pct": None, "p50_ms": None, "p99_ms": None}
    assert parse.latency_result() == nothing
    assert parse.latency_result(0, 0, []) == dict(nothing, sent=0, received=0)  # no samples: no loss figure
    all_lost = parse.latency_result(50, 0, [])
    assert all_lost == {"sent": 50, "received": 0, "loss_pct": 100.0, "p50_ms": None, "p99_ms": None}
    some = parse.latency_result(3, 2, [0.12345, 2.0])
    assert some == {"sent": 3, "received": 2, "loss_pct": 33.333, "p50_ms": 0.123, "p99_ms": 2.0}
    assert parse.share(None, 10) is None and parse.share(3, 0) is None and parse.share(1, 3) == 0.333333


def test_latency_figures_from_a_childs_report() -> None:
    assert psock.latency_figures(None) is None
    assert psock.latency_figures({"sent": 4, "rtts": [0.1, 0.3]}) == (4, 2, [0.1, 0.3])
    assert parse.latency_result(*psock.latency_figures({"sent": 4, "rtts": [0.1, 0.3]}))["loss_pct"] == 50.0


# -- allowed_networks --------------------------------------------------------------------------

def test_networks_and_refusal() -> None:
    allowed, errors = np.networks(["198.18.1.5/24", "fd00:1::/64"])
    assert [str(n) for n in allowed] == ["198.18.1.0/24", "fd00:1::/64"] and errors == []
    assert np.refusal("address", "198.18.1.12", allowed) is None
    assert np.refusal("source", "fd00:1::11", allowed) is None
    assert np.refusal("address", "198.18.2.12", allowed) == (
        "address 198.18.2.12 is outside allowed_networks (198.18.1.0/24, fd00:1::/64)")
    assert "outside allowed_networks" in np.refusal("address", "fd00:2::1", allowed)
    assert "not an IP address" in np.refusal("address", "node2", allowed)
    _none, bad = np.networks(["198.18.1.0/33", "fabric"])
    assert len(bad) == 2 and bad[0].startswith("allowed_networks: '198.18.1.0/33' is not a network")
    assert np.networks(None) == ([], [])


# -- the built-in engine on loopback ----------------------------------------------------------

def params(port: int, role: str, **extra: Any) -> dict[str, Any]:
    p = {"role": role, "address": LOOP, "source": LOOP if role == "client" else None, "port": port, "streams": 2,
         "duration": 0.6, "max_bytes": 0, "wait": 5.0, "latency_interval": 0.01, "socket_buffer": None,
         "tool": "builtin", "allowed_networks": ["127.0.0.0/8"], "token": "ab" * 16, "peer": LOOP}
    p.update(extra)
    return p


def pair(server: Callable[[], Any], client: Callable[[], Any], port: int) -> tuple[Any, Any]:
    """Run ``server`` in a thread and ``client`` here once the server's echo answers (so the two
    forked helpers of this one process do not inherit each other's pipes); both results (or the
    exception each raised)."""
    got: dict[str, Any] = {}

    def serve() -> None:
        try:
            got["server"] = server()
        except PairError as exc:  # a failed pair is a result here (anything else is a bug: it shows)
            got["server"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        psock.wait_for_echo(LOOP, LOOP, port, bytes.fromhex("ab" * 16), psock.now() + 5.0)  # the run's token
        try:
            got["client"] = client()
        except PairError as exc:
            got["client"] = exc
    finally:
        thread.join(20)
    assert not thread.is_alive() and "server" in got, got
    return got["server"], got["client"]


@pytest.fixture
def nothing_left() -> Any:
    """After the test: the same threads, file descriptors and (no) child processes as before."""
    threads, before = set(threading.enumerate()), fds()
    yield
    # no grace period: the probe joins its threads, closes its sockets and reaps its children before it returns
    assert set(threading.enumerate()) == threads
    assert fds() == before
    assert children() == []


def test_builtin_pair_on_loopback(nothing_left: None) -> None:
    port = free_port()
    started = time.monotonic()
    server, client = pair(lambda: builtin.run_server(params(port, "server")),
                          lambda: builtin.run_client(params(port, "client")), port)
    assert time.monotonic() - started < 5.0
    assert isinstance(server, dict) and isinstance(client, dict), (server, client)
    assert client["bytes"] == server["bytes"] > 0
    assert 0.5 <= server["seconds"] <= 1.5
    assert client["seconds"] == server["seconds"]  # the client reports what the server confirmed
    assert "stuck_threads" not in client and "stuck_threads" not in server
    sent, received, rtts = client["latency"]
    assert sent >= 20 and received >= 0.9 * sent and len(rtts) == received and min(rtts) > 0
    assert server["latency"] is None
    assert len(client["tcp_infos"]) == 2
    assert all(i["rtt_us"] > 0 and i["data_segs_out"] > 0 for i in client["tcp_infos"])
    # the kernel's count of each stream also has the probe's header and the FIN
    extra = sum(i["bytes_received"] for i in server["tcp_infos"]) - server["bytes"]
    assert 2 * builtin.HEADER.size <= extra <= 2 * (builtin.HEADER.size + 1)


def test_builtin_max_bytes_caps_the_load(nothing_left: None) -> None:
    port = free_port()
    cap = 3 * 1024 * 1024 + 1
    server, client = pair(lambda: builtin.run_server(params(port, "server", max_bytes=cap, duration=1.0)),
                          lambda: builtin.run_client(params(port, "client", max_bytes=cap, duration=1.0)), port)
    assert client["bytes"] == server["bytes"] == cap
    assert builtin._budgets(cap, 2) == [cap // 2 + 1, cap // 2] and builtin._budgets(0, 3) == [None] * 3


def test_builtin_parameters_that_differ_fail_both_sides(nothing_left: None) -> None:
    port = free_port()
    server, client = pair(lambda: builtin.run_server(params(port, "server", streams=2)),
                          lambda: builtin.run_client(params(port, "client", streams=1)), port)
    assert isinstance(server, PairError) and isinstance(client, PairError)
    assert str(server) == "client and server parameters differ: streams 1 != 2"
    assert str(client) == "the server refused the test: client and server parameters differ: streams 1 != 2"


def test_builtin_client_with_no_server_is_refused(nothing_left: None) -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(PairError, match=r"no probe server listening at 127\.0\.0\.1:%d after \d+\.\d s "
                                        r"\(connection refused\)" % port):
        builtin.run_client(params(port, "client", wait=1.0))
    assert time.monotonic() - started < 4.0


def test_builtin_server_with_no_client_gives_up_and_closes_its_listener(nothing_left: None) -> None:
    port = free_port()
    with pytest.raises(PairError, match=r"no client connected to 127\.0\.0\.1:%d within 1 s" % port):
        builtin.run_server(params(port, "server", wait=0.6))
    again = socket.socket()  # the listener is gone: the port binds again
    try:
        again.bind((LOOP, port))
    finally:
        again.close()


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed")
def test_iperf3_pair_on_loopback(nothing_left: None) -> None:
    port = free_port()
    path = shutil.which("iperf3")
    server, client = pair(lambda: iperf3.run_server(params(port, "server", duration=1.0, tool="iperf3"), path),
                          lambda: iperf3.run_client(params(port, "client", duration=1.0, tool="iperf3"), path), port)
    assert server["ok"] is True and client["ok"] is True, (server, client)
    assert client["bytes"] == server["bytes"] > 0 and client["gbit_per_s"] > 0
    assert client["tcp"]["rtt_ms"] is not None and client["tcp"]["retransmits"] is not None
    sent, received, _rtts = client["latency"]
    assert sent >= 20 and received >= 0.9 * sent


def test_run_child_stops_a_child_that_runs_too_long(nothing_left: None) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    started = time.monotonic()
    rc, out, err, timed_out = iperf3.run_child([sleep, "30"], 0.3)
    assert timed_out is True and rc == -15 and (out, err) == ("", "")  # SIGTERM was enough
    assert time.monotonic() - started < 3.0
    assert iperf3.run_child([sleep, "0"], 5.0) == (0, "", "", False)


def test_established_reads_the_tcp_table(tmp_path: Path) -> None:
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0C0112C6:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 0C0112C6:1451 0B0112C6:A3F1 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n")
    assert iperf3.established(5201, (str(table), str(tmp_path / "absent"))) is True
    assert iperf3.established(5301, (str(table),)) is False
    assert iperf3._extra({"socket_buffer": 65536}) == ["-w", "65536"] and iperf3._extra({}) == []
