"""Class 6 - a net_probe server serves only its planned peer, with the run's token.

The attacker is a stranger on the fabric (another tenant's host, a compromised node) that sees a
probe server listening during a measure round. It connects first to take the slot (so that the pair
fails or measures the stranger), asks for another kind of test, or uses the UDP echo to reflect
traffic. Real sockets on loopback addresses: the server on 127.0.0.1, the planned client from
127.0.0.3, the stranger from 127.0.0.2 (all of 127.0.0.0/8 is the loopback interface's; nothing is
added to any interface), the probe's own engine (``_net_probe_builtin``) in this process.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe_builtin as builtin
from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe_socket as psock
from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe_socket import PairError
from ansible_collections.aiinfra.datapath.plugins.modules import net_probe
from netfakes import free_port

SERVER, PEER, STRANGER = "127.0.0.1", "127.0.0.3", "127.0.0.2"
TOKEN = "5ec2e7" * 5 + "00"


def params(port: int, role: str, **extra: Any) -> dict[str, Any]:
    p = {"role": role, "address": SERVER, "source": PEER if role == "client" else None, "port": port, "streams": 2,
         "duration": 0.5, "max_bytes": 0, "wait": 8.0, "latency_interval": 0.01, "socket_buffer": None,
         "tool": "builtin", "allowed_networks": ["127.0.0.0/8"], "token": TOKEN, "peer": PEER}
    p.update(extra)
    return p


def serve(p: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    got: dict[str, Any] = {}

    def run() -> None:
        try:
            got["server"] = builtin.run_server(p)
        except PairError as exc:
            got["server"] = exc
    thread = threading.Thread(target=run)
    thread.start()
    return thread, got


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        probe = socket.socket()
        try:
            probe.bind((PEER, 0))
            probe.connect((SERVER, port))
            probe.close()   # an empty connection: the server drops it
            return
        except OSError:
            time.sleep(0.05)
        finally:
            probe.close()
    raise AssertionError("the server never listened")


def stranger_hello(port: int) -> socket.socket:
    """A stranger's control connection with a valid header and hello (its own token), sent first."""
    sock = socket.socket()
    sock.bind((STRANGER, 0))
    sock.connect((SERVER, port))
    sock.sendall(builtin.HEADER.pack(builtin.MAGIC_CONTROL, os.urandom(16), 0))
    sock.sendall(json.dumps({"streams": 2, "duration": 0.5, "max_bytes": 0}).encode() + b"\n")
    sock.settimeout(3)
    return sock


def test_an_early_stranger_does_not_take_the_slot(run_module) -> None:
    port = free_port()
    thread, got = serve(params(port, "server"))
    try:
        wait_listening(port)
        intruder = stranger_hello(port)
        try:
            answer = intruder.recv(4096)
        except (TimeoutError, OSError):
            answer = b""
        assert b'"ok": true' not in answer, "the stranger's hello was answered"
        client = builtin.run_client(params(port, "client"))
    finally:
        thread.join(30)
    server = got["server"]
    assert isinstance(server, dict), server
    assert client["bytes"] == server["bytes"] > 0


def test_a_wrong_token_from_the_planned_address_is_turned_away() -> None:
    port = free_port()
    thread, got = serve(params(port, "server", wait=2.0))
    try:
        wait_listening(port)
        with pytest.raises(PairError):
            builtin.run_client(params(port, "client", token="ab" * 16, wait=1.5))
    finally:
        thread.join(30)
    assert isinstance(got["server"], PairError) and "wrong token" in str(got["server"]), got["server"]


def test_the_server_serves_only_the_planned_test() -> None:
    port = free_port()
    thread, got = serve(params(port, "server"))
    try:
        wait_listening(port)
        sock = socket.socket()
        sock.bind((PEER, 0))
        sock.connect((SERVER, port))
        sock.sendall(builtin.HEADER.pack(builtin.MAGIC_CONTROL, bytes.fromhex(TOKEN), 0))
        sock.sendall(json.dumps({"streams": 2, "duration": 0.5, "max_bytes": 0, "reverse": True}).encode() + b"\n")
        sock.settimeout(5)
        answer = json.loads(sock.recv(4096).split(b"\n")[0])
        sock.close()
    finally:
        thread.join(30)
    assert answer["ok"] is False and "reverse" in answer["error"], answer


def test_the_udp_echo_answers_only_the_planned_peer() -> None:
    port = free_port()
    thread, _got = serve(params(port, "server", wait=2.0))
    token = bytes.fromhex(TOKEN)
    try:
        psock.wait_for_echo(PEER, SERVER, port, token, psock.now() + 5)   # the planned peer: answered
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stranger.bind((STRANGER, 0))
        stranger.settimeout(0.5)
        answers = 0
        for seq in range(5):   # even with the right token, from another address
            stranger.sendto(psock.ECHO.pack(psock.MAGIC_ECHO, token, seq, 0.0), (SERVER, port + 1))
            try:
                stranger.recv(256)
                answers += 1
            except (TimeoutError, OSError):
                pass
        stranger.close()
    finally:
        thread.join(30)
    assert answers == 0, "the echo answered a stranger"


def test_the_module_needs_the_runs_token_and_the_servers_peer(run_module) -> None:
    base = {"role": "server", "address": "198.18.1.12", "allowed_networks": ["198.18.1.0/24"]}
    result = run_module(net_probe.main, dict(base, peer="198.18.1.11"), expect_failure=True)
    assert "token" in result["msg"]
    result = run_module(net_probe.main, dict(base, token=TOKEN), expect_failure=True)
    assert "peer" in result["msg"]
    result = run_module(net_probe.main, dict(base, token=TOKEN, peer="203.0.113.9"), expect_failure=True)
    assert "peer 203.0.113.9 is outside allowed_networks" in result["msg"], result["msg"]
