"""Class 2 - redirects never carry credentials to another origin, never leave https for http.

The attacker controls, or has taken over, a mirror that the model source redirects to (or is on the
path of a plain http request): they want the user's bearer token, an S3 signature, or a downgrade to
plain http where they can change the bytes. Real HTTP(S) servers on 127.0.0.1 (the source, and the
"other origin" on another port, which records every request it gets), the module's ``main()``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.modules import model_cache
from httpfixtures import Server, self_signed, send

DATA = os.urandom(256 * 1024 + 3)
FILES = [dict(path="w.bin", sha256=hashlib.sha256(DATA).hexdigest(), size=len(DATA))]
SECRET = {"Authorization": "Bearer fleet-secret-token", "X-Team-Token": "t0ken"}


def serve_data(req) -> None:
    send(req, 200, DATA, {"Content-Type": "application/octet-stream"})


def redirect_to(target: str):
    def handle(req) -> None:
        send(req, 302, b"", {"Location": target + req.path})
    return handle


@pytest.fixture
def stranger():
    server = Server(serve_data)        # another origin: serves the right bytes, keeps what it was sent
    yield server
    server.close()


def run(run_module, tmp: Path, source: str, expect_failure: bool = False, **extra) -> dict:
    args = dict(cache_dir=str(tmp / "models"), lock_file=str(tmp / "lock"), retries=0, timeout=5,
                models=[dict(name="m", version="1", source=source, files=FILES)])
    args.update(extra)
    return run_module(model_cache.main, args, expect_failure=expect_failure)


def test_credentials_stay_with_their_origin(run_module, tmp_path: Path, stranger: Server) -> None:
    origin = Server(redirect_to(stranger.url))
    try:
        result = run(run_module, tmp_path, origin.url + "/v1", headers=SECRET)
    finally:
        origin.close()
    assert result["models"][0]["status"] == "published"   # the bytes are checked, so the redirect may serve them
    assert origin.requests[0]["headers"].get("Authorization") == SECRET["Authorization"]
    assert stranger.requests, "the redirect was not followed"
    for request in stranger.requests:
        sent = {k.lower() for k in request["headers"]}
        assert "authorization" not in sent and "x-team-token" not in sent, request["headers"]


def test_a_signed_s3_request_is_not_sent_to_another_host(run_module, tmp_path: Path, stranger: Server) -> None:
    origin = Server(redirect_to(stranger.url))
    try:
        s3 = dict(endpoint_url=origin.url, access_key="AKIDEXAMPLE", secret_key="s3cr3t", region="us-east-1")
        result = run(run_module, tmp_path, "s3://bucket/llama", expect_failure=True, s3=s3)
    finally:
        origin.close()
    assert "refused" in result["msg"] and "endpoint_url" in result["msg"], result["msg"]
    assert origin.requests and origin.requests[0]["headers"]["Authorization"].startswith("AWS4-HMAC-SHA256")
    assert stranger.requests == [], "a signed request went to another host"


def test_https_is_never_downgraded_to_http(run_module, tmp_path: Path, stranger: Server) -> None:
    cert, key = self_signed(tmp_path)
    origin = Server(redirect_to(stranger.url), tls=(cert, key))
    try:
        result = run(run_module, tmp_path, origin.url + "/v1", expect_failure=True, ca_path=cert, headers=SECRET)
    finally:
        origin.close()
    assert origin.requests and "plain http" in result["msg"], result["msg"]
    assert stranger.requests == [], "the module followed https -> http"


def test_only_http_targets_are_followed(run_module, tmp_path: Path) -> None:
    # (urllib itself refuses file://; ftp:// it would follow, from a server the attacker names)
    origin = Server(redirect_to("ftp://127.0.0.1:9"))
    try:
        result = run(run_module, tmp_path, origin.url + "/v1", expect_failure=True)
    finally:
        origin.close()
    assert "only http(s) targets are followed" in result["msg"], result["msg"]


def test_redirects_are_bounded(run_module, tmp_path: Path) -> None:
    hops = []

    def loop(req) -> None:
        hops.append(req.path)
        send(req, 302, b"", {"Location": "/hop%d%s" % (len(hops), req.path)})
    origin = Server(loop)
    try:
        result = run(run_module, tmp_path, origin.url + "/v1", expect_failure=True)
    finally:
        origin.close()
    assert result["failed"] and len(hops) <= 6, len(hops)


def test_turning_checks_off_is_said_out_loud(run_module, tmp_path: Path) -> None:
    manifest = ("%s  w.bin\n" % FILES[0]["sha256"]).encode()

    def handle(req) -> None:
        send(req, 200, manifest if req.path.endswith("SHA256SUMS") else DATA)
    origin = Server(handle)
    try:
        result = run(run_module, tmp_path, origin.url + "/v1", validate_certs=False,
                     models=[dict(name="m", version="1", source=origin.url + "/v1", manifest="SHA256SUMS")])
    finally:
        origin.close()
    warnings = " ".join(result.get("warnings", []))
    assert "validate_certs is false" in warnings and "over plain http without manifest_sha256" in warnings, warnings
