"""Fetching from peers (issue 42): the copy engine (transfer.Transfer) reading through peer.PeerSource from real
peer servers on loopback addresses (127.0.0.11-13, the client from 127.0.0.1; nothing added to any interface):
every byte verified against the spec's sha256, a peer that serves bad bytes named and excluded, a peer that dies
mid-transfer costs a resume from the next peer or the origin, never a failed fetch."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.peer import PeerServer, PeerSource
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import (
    LocalSource,
    ModelCacheError,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.transfer import Transfer

TOKEN = "c3" * 16
CLIENT = "127.0.0.1"
DATA = {"weights/model.bin": os.urandom(5 * 1024 * 1024 + 3), "config.json": os.urandom(4096)}
ITEM = {"what": "llama@v1", "name": "llama", "version": "v1"}


def entry(rel: str) -> dict[str, Any]:
    return {"path": rel, "sha256": hashlib.sha256(DATA[rel]).hexdigest(), "expected_size": len(DATA[rel])}


def versions() -> list[dict[str, Any]]:
    return [{"name": "llama", "version": "v1", "files": [{"path": p, "size": len(d)} for p, d in DATA.items()]}]


def make_cache(root: Path, corrupt: bool = False) -> Path:
    for rel, data in DATA.items():
        path = root / "llama" / "v1" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if corrupt:  # same size, one other byte in every 64 KiB: only the checksum can tell
            data = bytes(b ^ 0x5A if i % 65536 == 100 else b for i, b in enumerate(data))
        path.write_bytes(data)
    for folder, _dirs, _files in os.walk(root):
        os.chmod(folder, 0o755)
    return root


class CountingOrigin(LocalSource):
    def __init__(self, base: str) -> None:
        LocalSource.__init__(self, base)
        self.opened: list[tuple[str, int]] = []

    def open(self, path: str, offset: int) -> Any:
        self.opened.append((path, offset))
        return LocalSource.open(self, path, offset)


class DyingServer(PeerServer):
    """Sends ``after`` bytes of a body, then drops the connection (a peer killed mid-transfer)."""

    after = 1 << 20

    def send(self, handler: Any, fd: int, start: int, length: int) -> None:
        handler.wfile.write(os.pread(fd, min(self.after, length), start))
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)
        handler.close_connection = True


@pytest.fixture()
def world(tmp_path: Path):
    os.chmod(tmp_path, 0o755)
    origin_dir = make_cache(tmp_path / "origin")
    servers: dict[str, PeerServer] = {}

    def peer(name: str, address: str, corrupt: bool = False, cls: type[PeerServer] = PeerServer) -> str:
        cache = make_cache(tmp_path / name, corrupt=corrupt)
        servers[name] = cls(str(cache), versions(), address, [CLIENT], TOKEN, lifetime=60).start()
        return f"http://{address}:{servers[name].port}/llama/v1"

    stage = tmp_path / "stage"
    yield {"peer": peer, "servers": servers, "origin": CountingOrigin(str(origin_dir / "llama" / "v1")),
           "stage": stage}
    for server in servers.values():
        server.stop()


def fetch(source: PeerSource, stage: Path, warnings: list[str]) -> None:
    transfer = Transfer(retries=3, warn=warnings.append)
    for rel in DATA:
        transfer.fetch_file(ITEM, source, str(stage), entry(rel))
        assert (stage / (rel + ".part")).read_bytes() == DATA[rel]


def test_a_good_peer_serves_everything_and_the_origin_sends_nothing(world: dict[str, Any]) -> None:
    source = PeerSource([("node2", world["peer"]("node2", "127.0.0.11"))], world["origin"], TOKEN)
    warnings: list[str] = []
    fetch(source, world["stage"], warnings)
    assert world["origin"].opened == [] and warnings == []
    assert source.sources == {rel: [{"from": "node2", "at": 0}] for rel in DATA}
    assert world["servers"]["node2"].served_bytes == sum(len(d) for d in DATA.values())


def test_a_corrupting_peer_is_named_excluded_and_the_file_fetched_again(world: dict[str, Any]) -> None:
    bad = world["peer"]("node3", "127.0.0.12", corrupt=True)
    good = world["peer"]("node2", "127.0.0.11")
    source = PeerSource([("node3", bad), ("node2", good)], world["origin"], TOKEN)
    warnings: list[str] = []
    fetch(source, world["stage"], warnings)
    assert source.excluded == {"node3": "weights/model.bin"}
    assert any("from peer node3 failed verification" in w and "node3 excluded" in w for w in warnings)
    # the next file is not asked of the excluded peer at all
    assert source.sources["config.json"] == [{"from": "node2", "at": 0}]
    assert world["origin"].opened == []


def test_a_peer_killed_mid_transfer_costs_a_resume_from_the_next_peer(world: dict[str, Any]) -> None:
    dying = world["peer"]("node4", "127.0.0.13", cls=DyingServer)
    good = world["peer"]("node2", "127.0.0.11")
    source = PeerSource([("node4", dying), ("node2", good)], world["origin"], TOKEN)
    warnings: list[str] = []
    fetch(source, world["stage"], warnings)
    taken = source.sources["weights/model.bin"]
    assert taken[0] == {"from": "node4", "at": 0}
    assert taken[-1]["from"] == "node2" and taken[-1]["at"] > 0  # resumed with Range, not from byte 0
    assert world["servers"]["node2"].served_bytes < sum(len(d) for d in DATA.values())
    assert world["origin"].opened == []


def test_when_every_peer_fails_the_origin_serves_the_rest(world: dict[str, Any]) -> None:
    dying = world["peer"]("node4", "127.0.0.13", cls=DyingServer)
    bad = world["peer"]("node3", "127.0.0.12", corrupt=True)
    source = PeerSource([("node4", dying), ("node3", bad)], world["origin"], TOKEN)
    warnings: list[str] = []
    fetch(source, world["stage"], warnings)
    # node4 died at 1 MiB, node3 served the rest with bad bytes: the checksum cannot say whose, both are out
    assert source.excluded == {"node4": "weights/model.bin", "node3": "weights/model.bin"}
    assert ("weights/model.bin", 0) in world["origin"].opened  # fetched again, whole, from the origin
    assert source.sources["config.json"] == [{"from": "origin", "at": 0}]


def test_a_peer_without_the_token_is_passed_over_and_the_origin_used(world: dict[str, Any]) -> None:
    url = world["peer"]("node2", "127.0.0.11")
    source = PeerSource([("node2", url)], world["origin"], "d4" * 16)  # another run's token
    fetch(source, world["stage"], [])
    assert {s[0]["from"] for s in source.sources.values()} == {"origin"}


def test_bad_bytes_from_the_origin_still_fail_the_model(world: dict[str, Any], tmp_path: Path) -> None:
    bad_origin = CountingOrigin(str(make_cache(tmp_path / "bad-origin", corrupt=True) / "llama" / "v1"))
    source = PeerSource([], bad_origin, TOKEN)
    with pytest.raises(ModelCacheError, match="checksum mismatch for weights/model.bin"):
        Transfer(retries=1).fetch_file(ITEM, source, str(world["stage"]), entry("weights/model.bin"))
