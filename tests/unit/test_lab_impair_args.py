"""`datapath-lab impair`: its settings (rates, loss, delay, storage rates), their checks, the TBF
parameters, the cgroup-joining prefixes and the relay's forwarding loop (delay line and loss),
all without root: the relay runs on Unix datagram socket pairs instead of AF_PACKET sockets."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "lab"))

from datapath_lab import cli, impair, relay  # noqa: E402
from datapath_lab.impair import ImpairError  # noqa: E402


@pytest.mark.parametrize(("text", "bps"), [
    ("200mbit", 200_000_000), ("1gbit", 10**9), ("1.5gbit", 1_500_000_000), ("500kbit", 500_000),
    ("200Mbit", 200_000_000), ("10GBIT", 10**10), ("64000", 64_000), ("64000bit", 64_000), (" 25 mbit ", 25 * 10**6),
])
def test_rate(text: str, bps: int) -> None:
    assert impair.parse_rate(text) == bps


@pytest.mark.parametrize(("text", "word"), [
    ("200mbps", "bytes per second"), ("1gbps", "bytes per second"), ("fast", "mbit"), ("", "mbit"),
    ("-5mbit", "mbit"), ("1000", "between"), ("500gbit", "between"), ("200mb", "mbit"), ("1e9", "mbit"),
])
def test_rate_refused(text: str, word: str) -> None:
    with pytest.raises(ImpairError, match=word):
        impair.parse_rate(text)


@pytest.mark.parametrize(("text", "ratio"), [
    ("1%", 0.01), ("0.5%", 0.005), ("1", 0.01), ("100%", 1.0), ("0%", 0.0), (".1%", 0.001), (" 2 % ", 0.02),
])
def test_loss(text: str, ratio: float) -> None:
    assert impair.parse_loss(text) == pytest.approx(ratio)


@pytest.mark.parametrize("text", ["101%", "-1%", "1%%", "one", "", "0.01x"])
def test_loss_refused(text: str) -> None:
    with pytest.raises(ImpairError, match="loss"):
        impair.parse_loss(text)


@pytest.mark.parametrize(("text", "seconds"), [
    ("5ms", 0.005), ("20ms", 0.02), ("1.5ms", 0.0015), ("500us", 0.0005), ("1s", 1.0), ("20", 0.02),
    ("0", 0.0), ("0ms", 0.0), ("250usec", 0.00025), ("2msec", 0.002), ("10 ms", 0.01), ("0.2sec", 0.2),
])
def test_delay(text: str, seconds: float) -> None:
    assert impair.parse_delay(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5 minutes", "11s", "-5ms", "ms", "5ns", "five"])
def test_delay_refused(text: str) -> None:
    with pytest.raises(ImpairError, match="delay"):
        impair.parse_delay(text)


@pytest.mark.parametrize(("text", "value"), [
    ("20M", 20 << 20), ("20m", 20 << 20), ("20MiB", 20 << 20), ("20MB", 20 << 20), ("20M/s", 20 << 20),
    ("512K", 512 << 10), ("1G", 1 << 30), ("1.5M", 3 << 19), ("1048576", 1 << 20),
])
def test_byte_rate(text: str, value: int) -> None:
    assert impair.parse_byte_rate(text) == value


@pytest.mark.parametrize("text", ["1K", "20X", "fast", "", "2T"])
def test_byte_rate_refused(text: str) -> None:
    with pytest.raises(ImpairError, match="byte rate"):
        impair.parse_byte_rate(text)


@pytest.mark.parametrize(("text", "value"), [("200", 200), ("2k", 2000), ("1.5k", 1500), ("1", 1)])
def test_iops(text: str, value: int) -> None:
    assert impair.parse_iops(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "many", "2m"])
def test_iops_refused(text: str) -> None:
    with pytest.raises(ImpairError, match="IOPS"):
        impair.parse_iops(text)


def test_formats_round_trip() -> None:
    assert impair.format_rate(impair.parse_rate("200mbit")) == "200mbit"
    assert impair.format_rate(impair.parse_rate("1.5gbit")) == "1.5gbit"
    assert impair.format_rate(64_000) == "64kbit"
    assert impair.format_delay(impair.parse_delay("5ms")) == "5ms"
    assert impair.format_delay(impair.parse_delay("250us")) == "250us"
    assert impair.format_delay(0.0) == "0ms"
    assert impair.format_loss(impair.parse_loss("1%")) == "1%"
    assert impair.format_bytes_rate(20 << 20) == "20MiB/s"


NET = {"rate": None, "loss": None, "delay": None}
DISK = {"read_bps": None, "read_iops": None, "write_bps": None, "write_iops": None}


@pytest.mark.parametrize(("target", "clear", "net", "disk", "word"), [
    ("rdma", False, {}, {}, "give --rate, --loss or --delay"),
    ("nvme", False, {}, {}, "give --read-bps"),
    ("nvme", False, {"rate": 10**8}, {}, "--rate: network settings"),
    ("rdma", False, {}, {"read_bps": 1 << 20}, "--read-bps: storage settings"),
    ("rdma", True, {"loss": 0.01}, {}, "--clear takes no settings"),
    ("nvme", True, {}, {"read_iops": 5}, "--clear takes no settings"),
])
def test_request_refused(target: str, clear: bool, net: dict[str, float], disk: dict[str, int], word: str) -> None:
    with pytest.raises(ImpairError, match=word):
        impair.check_request(target, clear, {**NET, **net}, {**DISK, **disk})


@pytest.mark.parametrize(("target", "clear", "net", "disk"), [
    ("rdma", False, {"rate": 10**8}, {}), ("rdma", False, {"loss": 0.0}, {}), ("mgmt", False, {"delay": 0.0}, {}),
    ("nvme", False, {}, {"read_bps": 1 << 20, "read_iops": 100}), ("rdma", True, {}, {}), ("nvme", True, {}, {}),
])
def test_request_accepted(target: str, clear: bool, net: dict[str, float], disk: dict[str, int]) -> None:
    impair.check_request(target, clear, {**NET, **net}, {**DISK, **disk})


def test_cli_parses_impair() -> None:
    args = cli.build_parser().parse_args(
        ["--name", "dpq", "impair", "node3", "rdma", "--rate", "200mbit", "--loss", "1%", "--delay", "5ms",
         "--direction", "to-node"])
    assert (args.name, args.command, args.node, args.target) == ("dpq", "impair", "node3", "rdma")
    assert (args.rate, args.loss, args.delay, args.direction) == (200_000_000, 0.01, 0.005, "to-node")
    args = cli.build_parser().parse_args(["impair", "node1", "nvme", "--read-bps", "20M", "--read-iops", "200"])
    assert (args.target, args.read_bps, args.read_iops, args.clear) == ("nvme", 20 << 20, 200, False)
    assert cli.build_parser().parse_args(["impair", "node1", "rdma", "--clear"]).clear is True


@pytest.mark.parametrize(("argv", "word"), [
    (["impair", "node1", "rdma", "--rate", "200mbps"], "bytes per second"),
    (["impair", "node1", "rdma", "--loss", "200%"], "0% to 100%"),
    (["impair", "node1", "rdma", "--delay", "soon"], "ms, us or s"),
    (["impair", "node1", "rdma", "--rate", "1gbit", "--direction", "sideways"], "invalid choice"),
])
def test_cli_refuses(argv: list[str], word: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert word in capsys.readouterr().err


def test_cli_combination_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # Checked before the lab is looked at: no root and no lab needed.
    assert cli.main(["--name", "dpq", "impair", "node1", "nvme", "--rate", "1gbit"]) == 2
    assert "network settings" in capsys.readouterr().err
    assert cli.main(["--name", "dpq", "impair", "node1", "rdma", "--clear", "--delay", "5ms"]) == 2
    assert "--clear takes no settings" in capsys.readouterr().err


def test_tbf_args() -> None:
    args = impair.tbf_args(200_000_000, 9000)
    assert args[:2] == ["rate", "200000000bit"] and args[-2:] == ["latency", impair.TBF_LATENCY]
    burst = int(args[3])
    assert burst == 125_000  # 5 ms at 25 MB/s
    assert int(impair.tbf_args(8_000, 9000)[3]) == 2 * 9064  # at least two jumbo frames
    assert int(impair.tbf_args(10**10, 1500)[3]) == 6_250_000


def test_fabric_named_nvme_is_reserved() -> None:
    from datapath_lab.core import LabConfig, LabError

    with pytest.raises(LabError, match="reserved"):
        LabConfig(name="dpq", fabrics=[("mgmt", 1500), ("nvme", 9000)]).validate()


def test_join_prefixes(tmp_path: Path) -> None:
    cg = tmp_path / "node1"
    assert impair.join_argv(str(cg)) == [] and impair.join_argv(None) == []
    assert impair.join_shell(str(cg), "nsenter -t 1") == "nsenter -t 1"
    cg.mkdir()
    argv = impair.join_argv(str(cg))
    assert argv[-1] == f"{cg}/cgroup.procs"
    shell = impair.join_shell(str(cg), "nsenter -t 1 -m")
    assert shell == f"sh -c 'echo $$ > {cg}/cgroup.procs && exec nsenter -t 1 -m'"
    # The prefix really writes the shell's own PID there and then runs the command as that PID.
    import subprocess

    out = subprocess.run(argv + ["/bin/sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    assert (cg / "cgroup.procs").read_text().strip() == out.stdout.strip()


def test_describe() -> None:
    text = impair.describe({"node": "node3", "target": "rdma", "kind": "fabric", "direction": "both",
                            "rate_bps": 200_000_000, "delay_s": 0.005, "loss": 0.01, "relay": {"pid": 42}})
    assert text == "node3 rdma: rate 200mbit, delay 5ms one way, loss 1% (both; relay pid 42)"
    text = impair.describe({"node": "node3", "target": "rdma", "kind": "fabric", "direction": "to-node",
                            "rate_bps": 10**9, "delay_s": None, "loss": None, "relay": None, "ifb": None})
    assert text == "node3 rdma: rate 1gbit (to-node; tc tbf)"
    text = impair.describe({"node": "node2", "target": "nvme", "kind": "nvme", "device": "/dev/loop5",
                            "majmin": "7:5", "read_bps": 20 << 20, "read_iops": 200, "cgroup": "/cg"})
    assert text == "node2 nvme /dev/loop5 (7:5): read 20MiB/s, read 200 IOPS (blkio cgroup /cg)"


# ------------------------------------------------------------------ the relay's loop
def _relay_on_pairs(delay_ab: float, loss_ab: float, seed: int = 1):  # type: ignore[no-untyped-def]
    """A relay between two Unix datagram socket pairs: returns (outer A, outer B, ways, stop, thread)."""
    a_out, a_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b_out, b_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (a_in, b_in):
        s.setblocking(False)
    ways = [relay.Direction("ab", a_in, b_in, delay_ab, loss_ab), relay.Direction("ba", b_in, a_in, 0.0, 0.0)]
    stop = [False]
    thread = threading.Thread(target=relay.relay, args=(ways, stop, seed), daemon=True)
    thread.start()
    return a_out, b_out, ways, stop, thread


def _frame(n: int) -> bytes:
    return bytes(relay.VNET_HDR_LEN) + n.to_bytes(4, "big") + bytes(60)


def test_relay_delays_each_frame_and_keeps_order() -> None:
    a, b, ways, stop, thread = _relay_on_pairs(0.05, 0.0)
    b.settimeout(2.0)
    try:
        sent = {}
        for n in range(20):
            sent[n] = time.monotonic()
            a.send(_frame(n))
            time.sleep(0.002)
        got = []
        for _packet in range(20):
            data = b.recv(2048)
            n = int.from_bytes(data[relay.VNET_HDR_LEN:relay.VNET_HDR_LEN + 4], "big")
            got.append((n, time.monotonic() - sent[n]))
        assert [n for n, _held in got] == list(range(20))
        assert all(0.045 <= held <= 0.2 for _n, held in got), got
        a.settimeout(2.0)
        start = time.monotonic()
        b.send(_frame(99))  # the other way: no delay
        assert a.recv(2048)[relay.VNET_HDR_LEN:relay.VNET_HDR_LEN + 4] == (99).to_bytes(4, "big")
        assert time.monotonic() - start < 0.04
    finally:
        stop[0] = True
        thread.join(3)
    assert ways[0].frames == 20 and ways[0].lost == 0 and ways[1].frames == 1
    assert ways[0].bytes == 20 * 64


def test_relay_loses_the_given_share() -> None:
    a, b, ways, stop, thread = _relay_on_pairs(0.0, 0.1, seed=7)
    b.settimeout(0.5)
    try:
        for n in range(2000):
            a.send(_frame(n))
            if n % 100 == 99:
                time.sleep(0.01)  # let the relay drain (a datagram pair's queue is short)
        received = 0
        while True:
            try:
                b.recv(2048)
            except TimeoutError:
                break
            received += 1
    finally:
        stop[0] = True
        thread.join(3)
    assert ways[0].frames == 2000
    assert ways[0].lost + received + ways[0].send_errors == 2000
    assert 140 <= ways[0].lost <= 260  # 10 % of 2000 = 200 (sigma 13)


def test_relay_refuses_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        relay.main(["--a", "x", "--b", "y", "--loss-ab", "1.5"])
    assert "probability" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        relay.main(["--a", "x", "--b", "y", "--delay-ba", "-1"])
