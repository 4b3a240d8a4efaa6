"""Class 8 - a node's model peer server (issue 42) serves only published files, only to its planned peers,
only with the run's token, only for a bounded time.

The attacker is a stranger on the fabric (another tenant's host, a compromised node) that finds the peer
server listening during a rollout: it asks without being planned, without the token, for files outside the
published versions (staging, metadata, the ``current`` link, a directory listing, ``..``), through a link a
pod swapped into a version, with a method that writes, or after the run. Real sockets on loopback addresses:
the server on 127.0.0.1, the planned peer connects from 127.0.0.3, the stranger from 127.0.0.2 (all of
127.0.0.0/8 is the loopback interface's; nothing is added to any interface). Each attack succeeds against a
plain ``http.server`` serving the cache directory.
"""

from __future__ import annotations

import http.client
import os
import socket
import time
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.peer import PeerServer, PeerServerError

SERVER, PEER, STRANGER = "127.0.0.1", "127.0.0.3", "127.0.0.2"
TOKEN = "b7" * 16
WEIGHTS = os.urandom(3 * 1024 * 1024 + 17)


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    version = root / "llama" / "v1"
    (version / "weights").mkdir(parents=True)
    (version / "weights" / "model.bin").write_bytes(WEIGHTS)
    (version / "config.json").write_bytes(b"{}")
    (root / "llama" / ".versions").mkdir()
    (root / "llama" / ".versions" / "v1.json").write_text("{}")
    (root / ".staging" / "llama" / "v2").mkdir(parents=True)
    (root / ".staging" / "llama" / "v2" / "model.bin.part").write_bytes(b"partial")
    (root / "llama" / "current").symlink_to("v1")
    (tmp_path / "secret").write_bytes(b"the node's secret")
    for folder, dirs, _files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o755)
    os.chmod(root, 0o755)
    os.chmod(tmp_path, 0o755)
    return root


VERSIONS = [{"name": "llama", "version": "v1",
             "files": [{"path": "weights/model.bin", "size": len(WEIGHTS)}, {"path": "config.json", "size": 2}]}]


@pytest.fixture()
def server(cache: Path):
    srv = PeerServer(str(cache), VERSIONS, SERVER, [PEER], TOKEN, lifetime=30).start()
    yield srv
    srv.stop()


def ask(srv: PeerServer, path: str, source: str = PEER, token: str | None = TOKEN, method: str = "GET",
        headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPConnection(SERVER, srv.port, timeout=5, source_address=(source, 0))
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = "Bearer " + token
    conn.request(method, path, headers=sent)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body, dict(resp.getheaders())


def test_the_planned_peer_with_the_token_gets_the_published_file_and_ranges(server: PeerServer) -> None:
    assert ask(server, "/llama/v1/weights/model.bin")[:2] == (200, WEIGHTS)
    status, body, headers = ask(server, "/llama/v1/weights/model.bin", headers={"Range": "bytes=1000-"})
    assert status == 206 and body == WEIGHTS[1000:]
    assert headers["Content-Range"] == f"bytes 1000-{len(WEIGHTS) - 1}/{len(WEIGHTS)}"
    status, body, _headers = ask(server, "/llama/v1/weights/model.bin", headers={"Range": "bytes=5-9"})
    assert (status, body) == (206, WEIGHTS[5:10])
    assert ask(server, "/llama/v1/weights/model.bin", headers={"Range": f"bytes={len(WEIGHTS)}-"})[0] == 416
    assert ask(server, "/llama/v1/config.json", method="HEAD")[0] == 200


def test_a_stranger_on_the_fabric_is_refused(server: PeerServer) -> None:
    status, body, _headers = ask(server, "/llama/v1/weights/model.bin", source=STRANGER)
    assert status == 403 and WEIGHTS[:64] not in body
    assert STRANGER in server.refused


@pytest.mark.parametrize("token", [None, "", "b7" * 15 + "b8", "Bearer " + TOKEN])
def test_without_the_runs_token_nothing_is_served(server: PeerServer, token: str | None) -> None:
    status, body, _headers = ask(server, "/llama/v1/weights/model.bin", token=token)
    assert status == 401 and WEIGHTS[:64] not in body


@pytest.mark.parametrize("path", [
    "/llama/.versions/v1.json", "/.staging/llama/v2/model.bin.part", "/llama/current/config.json",
    "/llama/v1/", "/llama/v1", "/", "/llama/v1/../v1/config.json", "/llama/v1/weights/../../../secret",
    "/llama/v1/%2e%2e/%2e%2e/secret", "/llama/v1/config.json?x=1", "/llama/v2/config.json",
    "/llama/v1/weights", "//etc/passwd",
])
def test_only_files_of_published_versions(server: PeerServer, path: str) -> None:
    status, body, _headers = ask(server, path)
    assert status == 404 and b"secret" not in body and b"partial" not in body


def test_a_link_swapped_into_a_version_is_not_followed(server: PeerServer, cache: Path) -> None:
    target = cache / "llama" / "v1" / "config.json"
    target.unlink()
    target.symlink_to(cache.parent / "secret")  # a pod with write access to the version swaps a link in
    status, body, _headers = ask(server, "/llama/v1/config.json")
    assert status == 404 and b"secret" not in body
    target.unlink()
    os.link(cache.parent / "secret", target)  # or a hard link to a file elsewhere
    status, body, _headers = ask(server, "/llama/v1/config.json")
    assert status == 404 and b"secret" not in body


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE", "PATCH"])
def test_read_only(server: PeerServer, cache: Path, method: str) -> None:
    status, _body, _headers = ask(server, "/llama/v1/config.json", method=method)
    assert status in (405, 501)
    assert (cache / "llama" / "v1" / "config.json").read_bytes() == b"{}"


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", ""])
def test_never_on_every_interface(cache: Path, bind: str) -> None:
    with pytest.raises(PeerServerError, match="one fabric address"):
        PeerServer(str(cache), VERSIONS, bind, [PEER], TOKEN, lifetime=30)


def test_no_server_without_peers_token_or_a_time_bound(cache: Path) -> None:
    with pytest.raises(PeerServerError, match="planned peers"):
        PeerServer(str(cache), VERSIONS, SERVER, [], TOKEN, lifetime=30)
    with pytest.raises(PeerServerError, match="token"):
        PeerServer(str(cache), VERSIONS, SERVER, [PEER], "short", lifetime=30)
    with pytest.raises(PeerServerError, match="time-bounded"):
        PeerServer(str(cache), VERSIONS, SERVER, [PEER], TOKEN, lifetime=0)


def test_it_stops_by_itself_after_its_lifetime_and_when_stopped(cache: Path) -> None:
    srv = PeerServer(str(cache), VERSIONS, SERVER, [PEER], TOKEN, lifetime=0.3).start()
    assert srv.wait(10), "the server stops after its lifetime"
    with pytest.raises(OSError):
        socket.create_connection((SERVER, srv.port), timeout=2).close()
    other = PeerServer(str(cache), VERSIONS, SERVER, [PEER], TOKEN, lifetime=60).start()
    assert ask(other, "/llama/v1/config.json")[0] == 200
    other.stop()
    time.sleep(0.05)
    with pytest.raises(OSError):
        socket.create_connection((SERVER, other.port), timeout=2).close()


def test_a_cache_others_can_write_is_never_served(cache: Path) -> None:
    os.chmod(cache, 0o777)
    with pytest.raises(Exception, match="writable"):
        PeerServer(str(cache), VERSIONS, SERVER, [PEER], TOKEN, lifetime=30)


def test_a_peer_that_redirects_is_passed_over_and_never_gets_followed(tmp_path: Path, cache: Path) -> None:
    """A compromised peer answers with a redirect to a host of its choosing (to learn the run's token, or to
    make the node fetch from an internal service): the redirect is not followed, the next source serves."""
    import hashlib
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.peer import PeerSource
    from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import LocalSource
    from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.transfer import Transfer

    seen: list[dict[str, str]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(dict(self.headers))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    collector = HTTPServer((STRANGER, 0), Collector)

    class Redirector(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(302)
            self.send_header("Location", f"http://{STRANGER}:{collector.server_address[1]}/grab")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    redirector = HTTPServer((PEER, 0), Redirector)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (collector, redirector)]
    for thread in threads:
        thread.start()
    try:
        source = PeerSource([("evil", f"http://{PEER}:{redirector.server_address[1]}/llama/v1")],
                            LocalSource(str(cache / "llama" / "v1")), TOKEN, timeout=5)
        stage = tmp_path / "stage"
        entry = {"path": "config.json", "sha256": hashlib.sha256(b"{}").hexdigest(), "expected_size": 2}
        Transfer(retries=1).fetch_file({"what": "llama@v1", "name": "llama", "version": "v1"}, source, str(stage),
                                       entry)
        assert (stage / "config.json.part").read_bytes() == b"{}"
        assert seen == [] and source.sources["config.json"] == [{"from": "origin", "at": 0}]
    finally:
        for srv in (collector, redirector):
            srv.shutdown()
            srv.server_close()
