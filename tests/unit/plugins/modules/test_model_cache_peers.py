"""model_cache with ``peers`` (issue 42): the module fetches a version from a peer node's published copy (a real
peer server on a loopback address), verifies every byte against the spec's sha256 and reports per file where
its bytes came from; a corrupting peer is named in ``excluded_peers`` and the origin finishes the job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.peer import PeerServer
from ansible_collections.aiinfra.datapath.plugins.modules import model_cache
from model_data import blob, sha

MiB = 1 << 20
TOKEN = "e5" * 16
FILES = {"config.json": b'{"hidden_size": 4096}\n', "weights/model.bin": blob(2 * MiB + 5)}


def tree(base: Path, corrupt: bool = False) -> Path:
    for rel, data in FILES.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(bytes(b ^ 1 for b in data) if corrupt else data)
    for folder, _dirs, _files in os.walk(base.parent.parent):
        os.chmod(folder, 0o755)
    return base


@pytest.fixture()
def setup(tmp_path: Path, run_module):
    os.chmod(tmp_path, 0o755)
    origin = tree(tmp_path / "origin" / "llama" / "v1")
    servers = []

    def peer(name: str, address: str, corrupt: bool = False) -> dict[str, str]:
        tree(tmp_path / name / "llama" / "v1", corrupt=corrupt)
        files = [{"path": p, "size": len(d)} for p, d in FILES.items()]
        versions = [{"name": "llama", "version": "v1", "files": files}]
        server = PeerServer(str(tmp_path / name), versions, address, ["127.0.0.1"], TOKEN, lifetime=60).start()
        servers.append(server)
        return {"name": name, "url": f"http://{address}:{server.port}"}

    (tmp_path / "cache").mkdir()

    def run(peers: list[dict[str, str]], expect_failure: bool = False, **extra: Any) -> dict[str, Any]:
        args = dict(cache_dir=str(tmp_path / "cache" / "models"), lock_file=str(tmp_path / "run" / "lock"),
                    models=[{"name": "llama", "version": "v1", "source": str(origin),
                             "files": [{"path": p, "sha256": sha(d), "size": len(d)} for p, d in FILES.items()]}],
                    peers=peers, peer_token=TOKEN)
        args.update(extra)
        return run_module(model_cache.main, args, expect_failure=expect_failure)

    yield peer, run, tmp_path, servers
    for server in servers:
        server.stop()


def test_published_from_a_peer_and_reported_per_file(setup) -> None:
    peer, run, tmp_path, servers = setup
    result = run([peer("node2", "127.0.0.21")])
    [entry] = result["models"]
    assert entry["status"] == "published" and entry["excluded_peers"] == []
    assert entry["sources"] == {p: [{"from": "node2", "at": 0}] for p in FILES}
    for rel, data in FILES.items():
        assert (tmp_path / "cache" / "models" / "llama" / "v1" / rel).read_bytes() == data
    assert servers[0].served_bytes == sum(len(d) for d in FILES.values())


def test_a_corrupting_peer_is_named_and_the_origin_finishes(setup) -> None:
    peer, run, tmp_path, _servers = setup
    result = run([peer("node3", "127.0.0.22", corrupt=True)])
    [entry] = result["models"]
    assert entry["status"] == "published" and entry["excluded_peers"] == ["node3"]
    assert entry["sources"]["config.json"][-1]["from"] == "origin"
    assert any("from peer node3 failed verification" in w for w in result.get("warnings", []))


@pytest.mark.parametrize(("peers", "token", "message"), [
    ([{"name": "n2", "url": "http://198.18.0.2:8470"}], None, "peers need peer_token"),
    ([{"name": "n2", "url": "http://user:pw@198.18.0.2:8470"}], TOKEN, "is not http://<fabric address>:<port>"),
    ([{"name": "n2", "url": "https://mirror.example/x"}], TOKEN, "is not http://<fabric address>:<port>"),
])
def test_peer_arguments_are_checked(setup, peers: list[dict[str, str]], token: str | None, message: str) -> None:
    _peer, run, _tmp, _servers = setup
    result = run(peers, peer_token=token, expect_failure=True)
    assert message in result["msg"]
