"""model_cache against a real HTTP server, entirely inside a throwaway network namespace.

Each test gets its own namespace ``dpmc-<random>`` with only ``lo`` up: the server
(tests/integration/range_http_server.py: Range, sendfile, fault injection) listens on
127.0.0.1 *of that namespace*, and the module logic runs in the same namespace through a
small driver script, so no packet touches the host's network, not even its loopback. The
fixture kills the server it started (by PID) and deletes the namespace in ``finally``.

``test_throughput_against_curl`` (marked slow) serves a 1 GiB sparse file and prints the
module's throughput next to ``curl -o`` of the same file in the same namespace:

    .venv/bin/pytest -q -s -m lab tests/integration/test_model_cache_http.py -k throughput
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_data import blob, sha

REPO = Path(__file__).resolve().parents[2]
PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable
SERVER = Path(__file__).resolve().parent / "range_http_server.py"
MiB = 1 << 20

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2 (ip netns)"),
]

# Runs the capability (no AnsibleModule) with JSON arguments, validated against its own spec, through
# the contract's runner; prints the result (a failure has failed: true and msg) as JSON. The cache lock
# lies next to the arguments file, so that concurrent test runs never share it.
DRIVER = r"""
import json, os, sys
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.cache import ModelCache
args = json.load(open(sys.argv[1]))
args.setdefault("lock_file", os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "model-cache.lock"))
checked = ArgumentSpecValidator(**ModelCache.module_spec()).validate(args)
if checked.error_messages:
    result = dict(failed=True, msg="; ".join(checked.error_messages))
else:
    result = run(ModelCache, checked.validated_parameters, Node(None))
print(json.dumps(result))
"""


def sh(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError("%s failed (%d): %s%s" % (" ".join(argv), done.returncode, done.stdout, done.stderr))
    return done.stdout


class Netns:
    """A namespace with lo up, servers started in it, and the module driver run in it."""

    def __init__(self, name: str, tmp: Path) -> None:
        self.name = name
        self.tmp = tmp
        self.servers: list[subprocess.Popen] = []
        self.driver = tmp / "driver.py"
        self.driver.write_text(DRIVER)

    def env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONPATH=str(REPO / ".collections"), LC_ALL="C")

    def serve(self, root: Path, *flags: str) -> str:
        """Start a server on ``root``; return its base URL (valid inside the namespace only)."""
        port_file = self.tmp / ("port-%d" % len(self.servers))
        proc = subprocess.Popen(["ip", "netns", "exec", self.name, PYTHON, str(SERVER), "--root", str(root),
                                 "--port-file", str(port_file), *flags],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.servers.append(proc)
        deadline = time.monotonic() + 15
        while not port_file.exists():
            if proc.poll() is not None:
                raise AssertionError("server exited: %s" % proc.stderr.read().decode() if proc.stderr else "")
            if time.monotonic() > deadline:
                raise AssertionError("server did not start")
            time.sleep(0.05)
        return "http://127.0.0.1:%s" % port_file.read_text()

    def stop_servers(self) -> None:
        for proc in self.servers:
            if proc.poll() is None:
                proc.kill()  # only the PIDs this fixture started
            proc.wait(timeout=10)
        self.servers = []

    def run_cache(self, **args) -> dict:
        path = self.tmp / ("args-%s.json" % secrets.token_hex(4))
        path.write_text(json.dumps(args))
        out = subprocess.run(["ip", "netns", "exec", self.name, PYTHON, str(self.driver), str(path)],
                             capture_output=True, text=True, env=self.env(), check=False, timeout=600)
        if out.returncode != 0:
            raise AssertionError("driver failed (%d): %s%s" % (out.returncode, out.stdout, out.stderr))
        return json.loads(out.stdout.strip().splitlines()[-1])

    def run(self, *argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.name, *argv], capture_output=True, text=True,
                              env=self.env(), check=False, timeout=timeout)


@pytest.fixture
def netns(tmp_path: Path) -> Iterator[Netns]:
    name = "dpmc-%s" % secrets.token_hex(4)
    sh("ip", "netns", "add", name)
    handle = Netns(name, tmp_path)
    try:
        sh("ip", "-n", name, "link", "set", "lo", "up")
        yield handle
    finally:
        try:
            handle.stop_servers()
        finally:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@pytest.fixture
def cache_root(tmp_path: Path) -> Path:
    (tmp_path / "cache").mkdir()
    return tmp_path / "cache" / "models"


def publish_tree(base: Path, files: dict[str, bytes]) -> list[dict]:
    entries = []
    for rel, data in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(data)
        entries.append(dict(path=rel, sha256=sha(data), size=len(data)))
    return entries


def test_download_publishes_verified_files(netns, tmp_path, cache_root):
    files = {"config.json": b"{}\n", "weights/part 1.bin": blob(9 * MiB + 3), "tokenizer.model": blob(MiB, 2)}
    entries = publish_tree(tmp_path / "srv" / "m" / "v1", files)
    entries[1]["size"] = None  # taken from HEAD
    url = netns.serve(tmp_path / "srv")
    result = netns.run_cache(cache_dir=str(cache_root), models=[dict(name="m", version="v1", source=url + "/m/v1",
                                                                     files=entries)])
    assert not result.get("failed"), result
    model = result["models"][0]
    assert model["status"] == "published" and model["bytes_moved"] == sum(len(d) for d in files.values())
    assert model["throughput_bytes_per_s"] > 0
    # over HTTP the pipeline reads the socket and hashes; the kernel copy of local files is not used
    stages = model["stage_seconds"]
    assert stages["source"] > 0 and stages["hash"] > 0 and stages["copy"] == 0.0
    assert sum(stages.values()) == pytest.approx(model["seconds"], abs=0.005) and model["bottleneck"] in stages
    for rel, data in files.items():
        assert (cache_root / "m" / "v1" / rel).read_bytes() == data
    assert os.readlink(cache_root / "m" / "current") == "v1"
    again = netns.run_cache(cache_dir=str(cache_root), models=[dict(name="m", version="v1", source=url + "/m/v1",
                                                                    files=entries)])
    assert again["changed"] is False and again["models"][0]["bytes_moved"] == 0


def test_manifest_over_http(netns, tmp_path, cache_root):
    entries = publish_tree(tmp_path / "srv" / "m", {"a.bin": blob(MiB), "b.bin": blob(2000, 3)})
    (tmp_path / "srv" / "m" / "SHA256SUMS").write_text("".join("%s  %s\n" % (e["sha256"], e["path"])
                                                               for e in entries))
    url = netns.serve(tmp_path / "srv")
    result = netns.run_cache(cache_dir=str(cache_root), models=[dict(name="m", version="1", source=url + "/m",
                                                                     manifest="SHA256SUMS")])
    assert [f["path"] for f in result["models"][0]["files"]] == ["a.bin", "b.bin"]
    assert (cache_root / "m" / "1" / "b.bin").read_bytes() == blob(2000, 3)


def test_interrupted_transfer_resumes_on_the_next_run(netns, tmp_path, cache_root):
    data = blob(6 * MiB + 11)
    entries = publish_tree(tmp_path / "srv" / "m", {"w.bin": data})
    url = netns.serve(tmp_path / "srv", "--drop-after", str(2 * MiB), "--drops", "1",
                      "--log", str(tmp_path / "requests.log"))
    models = [dict(name="m", version="1", source=url + "/m", files=entries)]
    failed = netns.run_cache(cache_dir=str(cache_root), models=models, retries=0)
    assert failed.get("failed") and "at byte %d" % (2 * MiB) in failed["msg"], failed
    part = cache_root / ".staging" / "m" / "1" / "w.bin.part"
    assert part.stat().st_size == 2 * MiB
    result = netns.run_cache(cache_dir=str(cache_root), models=models, retries=0)
    assert not result.get("failed"), result
    assert result["models"][0]["resumed_bytes"] == 2 * MiB
    assert result["models"][0]["bytes_moved"] == len(data) - 2 * MiB
    assert (cache_root / "m" / "1" / "w.bin").read_bytes() == data
    assert "GET /m/w.bin range=bytes=%d- " % (2 * MiB) in (tmp_path / "requests.log").read_text()


def test_interrupted_transfer_is_retried_within_the_run(netns, tmp_path, cache_root):
    data = blob(5 * MiB)
    entries = publish_tree(tmp_path / "srv" / "m", {"w.bin": data})
    url = netns.serve(tmp_path / "srv", "--drop-after", str(MiB), "--drops", "2")
    result = netns.run_cache(cache_dir=str(cache_root), models=[dict(name="m", version="1", source=url + "/m",
                                                                     files=entries)], retries=3)
    assert not result.get("failed"), result
    assert result["models"][0]["resumed_bytes"] == MiB + 2 * MiB  # resumed at 1 MiB, then at 2 MiB
    assert result["models"][0]["bytes_moved"] == len(data)
    assert (cache_root / "m" / "1" / "w.bin").read_bytes() == data


def test_server_without_range_restarts_from_zero(netns, tmp_path, cache_root):
    data = blob(4 * MiB)
    entries = publish_tree(tmp_path / "srv" / "m", {"w.bin": data})
    part = cache_root / ".staging" / "m" / "1" / "w.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:MiB])
    url = netns.serve(tmp_path / "srv", "--no-range")
    result = netns.run_cache(cache_dir=str(cache_root), models=[dict(name="m", version="1", source=url + "/m",
                                                                     files=entries)])
    assert not result.get("failed"), result
    assert result["models"][0]["resumed_bytes"] == 0 and result["models"][0]["bytes_moved"] == len(data)
    assert (cache_root / "m" / "1" / "w.bin").read_bytes() == data


def test_corrupted_source_byte_is_detected_and_nothing_published(netns, tmp_path, cache_root):
    data = blob(3 * MiB)
    entries = publish_tree(tmp_path / "srv" / "m", {"w.bin": data})
    bad = bytearray(data)
    bad[MiB + 77] ^= 0x01
    (tmp_path / "srv" / "m" / "w.bin").write_bytes(bytes(bad))
    url = netns.serve(tmp_path / "srv")
    result = netns.run_cache(cache_dir=str(cache_root), models=[dict(name="m", version="1", source=url + "/m",
                                                                     files=entries)])
    assert result.get("failed")
    assert "checksum mismatch" in result["msg"] and entries[0]["sha256"] in result["msg"]
    assert result["actual_sha256"] == sha(bytes(bad))
    assert not (cache_root / "m" / "1").exists() and not (cache_root / "m" / "current").exists()
    assert not list(cache_root.rglob("*.part"))


def test_s3_requests_are_path_style_and_signed(netns, tmp_path, cache_root):
    data = blob(MiB)
    entries = publish_tree(tmp_path / "srv" / "bucket" / "llama" / "v1", {"w.bin": data})
    log = tmp_path / "requests.log"
    url = netns.serve(tmp_path / "srv", "--log", str(log))
    result = netns.run_cache(cache_dir=str(cache_root),
                             models=[dict(name="m", version="1", source="s3://bucket/llama/v1", files=entries)],
                             s3=dict(endpoint_url=url, region="us-east-1", access_key="AKIDEXAMPLE",
                                     secret_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"))
    assert not result.get("failed"), result
    line = log.read_text().splitlines()[-1]
    assert line.startswith("GET /bucket/llama/v1/w.bin ")
    assert "auth=AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/" in line


@pytest.mark.slow
def test_throughput_against_curl(netns, tmp_path):
    """1 GiB sparse file: the module (read + sha256 + write + fsync) against curl -o, same namespace."""
    if shutil.which("curl") is None:
        pytest.skip("needs curl")
    size = 1 << 30
    srv = tmp_path / "srv"
    srv.mkdir()
    with open(srv / "model.bin", "wb") as handle:
        handle.truncate(size)
    digest = hashlib.sha256()
    zeros = bytes(8 * MiB)
    for _chunk in range(size // len(zeros)):
        digest.update(zeros)
    url = netns.serve(srv)
    dest = Path(os.environ.get("MODEL_CACHE_BENCH_DIR") or tmp_path / "dest")
    dest.mkdir(parents=True, exist_ok=True)
    figures = {"curl": [], "curl+fsync": [], "model_cache": []}
    for attempt in range(3):
        target = dest / "curl.bin"
        started = time.monotonic()
        out = netns.run("curl", "-sS", "-o", str(target), url + "/model.bin")
        figures["curl"].append(size / (time.monotonic() - started))
        assert out.returncode == 0, out.stderr
        out = netns.run("sync", str(target))
        figures["curl+fsync"].append(size / (time.monotonic() - started))
        target.unlink()
        root = dest / ("models-%d" % attempt)
        result = netns.run_cache(cache_dir=str(root), models=[dict(name="big", version="1", source=url, files=[
            dict(path="model.bin", sha256=digest.hexdigest(), size=size)])])
        assert not result.get("failed"), result
        figures["model_cache"].append(result["models"][0]["throughput_bytes_per_s"])
        shutil.rmtree(root)
    best = dict((k, max(v)) for k, v in figures.items())
    print("\nthroughput over lo in %s, 1 GiB, best of 3 (MB/s): curl -o %.0f, curl -o + sync %.0f, "
          "model_cache %.0f; ratio %.2f (vs curl), %.2f (vs curl + sync)"
          % (netns.name, best["curl"] / 1e6, best["curl+fsync"] / 1e6, best["model_cache"] / 1e6,
             best["model_cache"] / best["curl"], best["model_cache"] / best["curl+fsync"]))
    print("all runs (MB/s): %s" % json.dumps(dict((k, [round(x / 1e6) for x in v]) for k, v in figures.items())))
