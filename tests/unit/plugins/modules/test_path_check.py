"""path_check: don't-fragment probes per peer and size, run concurrently, judged per path."""

from __future__ import annotations

import threading
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils import _path_check
from ansible_collections.aiinfra.datapath.plugins.modules import path_check
from netfakes import FakeRunner, use

PING = "/usr/bin/ping"

# Verbatim iputils 20221126 output (captured in the lab: node1 -> node2 on rdma with the
# switch port of node2 at MTU 1500 and 9000).
LOST = """PING 198.18.1.12 (198.18.1.12) from 198.18.1.11 ens1f0np0: 8972(9000) bytes of data.

--- 198.18.1.12 ping statistics ---
3 packets transmitted, 0 received, 100% packet loss, time 413ms

"""
PASSED = """PING 198.18.1.12 (198.18.1.12) from 198.18.1.11 ens1f0np0: 1472(1500) bytes of data.

--- 198.18.1.12 ping statistics ---
3 packets transmitted, 3 received, 0% packet loss, time 405ms
rtt min/avg/max/mdev = 0.081/0.114/0.169/0.039 ms
"""
LOCAL_ERROR_OUT = """PING 198.18.1.12 (198.18.1.12) 8972(9000) bytes of data.

--- 198.18.1.12 ping statistics ---
3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2040ms

"""
LOCAL_ERROR_ERR = "ping: local error: message too long, mtu=1500\n" * 3
NO_DEVICE = "ping: SO_BINDTODEVICE ens9: No such device\n"


class FakePing:
    """A fabric where each peer passes up to a path MTU; records concurrency."""

    def __init__(self, path_mtu: dict[str, int], delay: float = 0.0) -> None:
        self.path_mtu = path_mtu
        self.delay = delay
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, argv: list[str]):
        if argv[0] != PING:
            return None
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.delay)
        with self.lock:
            self.active -= 1
        if "-I" in argv and argv[argv.index("-I") + 1] == "ens9":
            return 2, "", NO_DEVICE
        address = argv[-1]
        size = int(argv[argv.index("-s") + 1]) + (48 if "-6" in argv else 28)
        if size <= self.path_mtu[address]:
            return 0, PASSED, ""
        return 1, LOST, ""


def fake(monkeypatch, ping: FakePing | None, present: bool = True) -> FakeRunner:
    runner = FakeRunner([ping] if ping else [], which={"ping": PING if present else None})
    return use(monkeypatch, runner)


def rdma(peers: dict[str, str], mtu: int = 9000, interface: str = "ens1f0np0") -> dict:
    return {"fabric": "rdma", "mtu": mtu, "interface": interface, "subnets": ["198.18.1.0/24"],
            "peers": [{"name": n, "address": a} for n, a in peers.items()]}


def test_parse_ping_outputs() -> None:
    assert _path_check.parse_ping(1, LOST, "")[("loss")] == 100
    ok = _path_check.parse_ping(0, PASSED, "")
    assert (ok["sent"], ok["received"], ok["loss"], ok["error"]) == (3, 3, 0, None)
    local = _path_check.parse_ping(1, LOCAL_ERROR_OUT, LOCAL_ERROR_ERR)
    assert (local["sent"], local["received"], local["loss"], local["local_mtu"]) == (3, 0, 100, 1500)
    broken = _path_check.parse_ping(2, "", NO_DEVICE)
    assert broken["error"] == NO_DEVICE.strip() and broken["received"] == 0
    partial = _path_check.parse_ping(1, "4 packets transmitted, 3 received, 25% packet loss", "")
    assert partial["loss"] == 25


def test_argv_payload_is_mtu_minus_headers() -> None:
    argv = _path_check.ping_argv(PING, "198.18.1.12", 9000, 3, 0.2, 1, interface="ens1f0np0")
    assert argv == [PING, "-4", "-n", "-q", "-M", "do", "-s", "8972", "-c", "3", "-i", "0.2", "-W", "1",
                    "-I", "ens1f0np0", "198.18.1.12"]
    argv6 = _path_check.ping_argv(PING, "fd00::2", 9000, 3, 0.2, 1, source="fd00::1")
    assert argv6[:2] == [PING, "-6"] and argv6[argv6.index("-s") + 1] == "8952"
    assert argv6[-3:] == ["-I", "fd00::1", "fd00::2"]
    assert _path_check.probe_sizes(9000, [1500, 4200, 9100, 9000, 10]) == [9000, 4200, 1500]
    assert _path_check.probe_sizes(1500, [1500]) == [1500]


def test_all_paths_pass(run_module, monkeypatch) -> None:
    runner = fake(monkeypatch, FakePing({"198.18.1.12": 9000, "198.18.1.13": 9000}))
    result = run_module(path_check.main, {"targets": [rdma({"node2": "198.18.1.12", "node3": "198.18.1.13"})]},
                        check_mode=True)
    assert result["changed"] is False and result["failing"] == []
    assert [(p["peer"], p["largest_mtu"], p["ok"]) for p in result["paths"]] == [
        ("node2", 9000, True), ("node3", 9000, True)]
    assert [pr["mtu"] for pr in result["paths"][0]["probes"]] == [9000, 1500]
    assert result["summary"] == {"rdma": {"mtu": 9000, "pairs": 2, "passed": 2, "failed": [], "ok": True}}
    assert len(runner.calls) == 4


def test_small_port_names_the_peer_and_largest_passing_size(run_module, monkeypatch) -> None:
    fake(monkeypatch, FakePing({"198.18.1.12": 1500, "198.18.1.13": 9000, "198.18.0.12": 1500}))
    targets = [rdma({"node2": "198.18.1.12", "node3": "198.18.1.13"}),
               {"fabric": "mgmt", "mtu": 1500, "interface": "eno1", "subnets": ["198.18.0.0/24"],
                "peers": [{"name": "node2", "address": "198.18.0.12"}]}]
    result = run_module(path_check.main, {"targets": targets, "sizes": [1500, 4200]})
    node2 = result["paths"][0]
    assert (node2["peer"], node2["ok"], node2["largest_mtu"]) == ("node2", False, 1500)
    assert [(pr["mtu"], pr["loss"], pr["ok"]) for pr in node2["probes"]] == [
        (9000, 100, False), (4200, 100, False), (1500, 0, True)]
    assert result["summary"]["rdma"] == {"mtu": 9000, "pairs": 2, "passed": 1, "failed": ["node2"], "ok": False}
    assert result["summary"]["mgmt"]["ok"] is True
    assert result["failing"] == ["rdma: node2 (largest passing MTU 1500, 100% loss at 9000)"]


def test_probes_run_concurrently(run_module, monkeypatch) -> None:
    ping = FakePing({"198.18.1.%d" % i: 9000 for i in range(12, 20)}, delay=0.05)
    fake(monkeypatch, ping)
    peers = {"node%d" % (i - 10): "198.18.1.%d" % i for i in range(12, 20)}
    started = time.monotonic()
    result = run_module(path_check.main, {"targets": [rdma(peers)], "workers": 8})
    elapsed = time.monotonic() - started
    assert len(result["paths"]) == 8 and all(p["ok"] for p in result["paths"])
    assert ping.peak > 1
    assert elapsed < 16 * 0.05  # 16 probes, serial would take at least 0.8 s


def test_unknown_interface_is_an_error_row_not_a_crash(run_module, monkeypatch) -> None:
    fake(monkeypatch, FakePing({"198.18.1.12": 9000}))
    result = run_module(path_check.main, {"targets": [rdma({"node2": "198.18.1.12"}, interface="ens9")]})
    path = result["paths"][0]
    assert path["ok"] is False and path["largest_mtu"] is None
    assert path["probes"][0]["error"] == NO_DEVICE.strip()
    assert "SO_BINDTODEVICE" in result["failing"][0]


def test_max_loss_allows_partial_loss(run_module, monkeypatch) -> None:
    partial = "4 packets transmitted, 3 received, 25% packet loss, time 600ms\n"
    runner = FakeRunner([lambda argv: (1, partial, "")], which={"ping": PING})
    use(monkeypatch, runner)
    args = {"targets": [rdma({"node2": "198.18.1.12"})], "count": 4}
    assert run_module(path_check.main, args)["paths"][0]["ok"] is False
    assert run_module(path_check.main, dict(args, max_loss=30))["paths"][0]["ok"] is True


def test_bad_input_and_missing_ping_fail_cleanly(run_module, monkeypatch) -> None:
    fake(monkeypatch, None)
    result = run_module(path_check.main, {"targets": [rdma({}, mtu=20000)], "count": 0}, expect_failure=True)
    assert "targets[0] (fabric rdma): mtu 20000 is outside 68-9216" in result["msg"]
    assert "count must be at least 1" in result["msg"]
    fake(monkeypatch, None, present=False)
    result = run_module(path_check.main, {"targets": [rdma({"node2": "198.18.1.12"})]}, expect_failure=True)
    assert "needs iputils ping" in result["msg"]


def test_no_peers_is_an_empty_report(run_module, monkeypatch) -> None:
    fake(monkeypatch, None)
    result = run_module(path_check.main, {"targets": [rdma({})]})
    assert result["paths"] == [] and result["summary"] == {} and result["failing"] == []
