"""model_cache through real ansible-playbook: 4 lab nodes warm a multi-GiB model from an HTTP source.

The lab (`dpmc`, its own, torn down in the fixture's finalizer) has a source-server namespace
on the RDMA fabric (`up --server src:rdma`, 198.18.1.250) running datapath_lab.httpsrc
(Range support, one JSON line per request). The served "model" is a 2 GiB sparse file with
random blocks plus two small files; `bad/` is the same model with one byte flipped. Each node
lays out its NVMe cache (its own loop device) with nvme_layout, then the model_cache module
runs on all 4 nodes at once. Checksums are read back inside every node with sha256sum.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from datapath_lab import Lab, LabConfig
from labtools import REPO, VENV_BIN, LabHandle, PlayResult, _lab_possible

pytestmark = pytest.mark.lab

LAB = os.environ.get("DATAPATH_MC_TEST_LAB", "dpmc")
PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "model_cache.yml")
TASK = "Warm the model cache"
MOUNT = "/mnt/model-cache"
ROOT = MOUNT + "/models"
BIG = "weights/model-00001-of-00001.bin"
BIG_SIZE = 2 << 30
MIB = 1 << 20
FLIP_AT = 1500 * MIB + 12345  # inside a hole of the sparse file: 0x00 becomes 0x01 in bad/
READ_BACK = """
import hashlib, os, sys
for rel in sys.argv[2:]:
    h = hashlib.sha256()
    with open(os.path.join(sys.argv[1], rel), "rb", buffering=0) as fh:
        while chunk := fh.read(16 << 20):
            h.update(chunk)
    print(h.hexdigest(), rel)
"""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    buf = bytearray(16 * MIB)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            digest.update(view[:n])
    return digest.hexdigest()


def make_model(base: Path) -> list[dict[str, Any]]:
    """A sparse 2 GiB weights file with random blocks, a config and a tokenizer; their entries."""
    (base / "weights").mkdir(parents=True)
    with open(base / BIG, "wb") as fh:
        fh.truncate(BIG_SIZE)
        for offset in (0, 3 * MIB, 777 * MIB, 1024 * MIB - 4096, BIG_SIZE - MIB):
            fh.seek(offset)
            fh.write(os.urandom(MIB))
    (base / "config.json").write_text(json.dumps({"architectures": ["LabForCausalLM"], "hidden_size": 4096}))
    (base / "tokenizer.json").write_bytes(os.urandom(3 * MIB + 17))
    return [{"path": rel, "sha256": sha256_file(base / rel), "size": (base / rel).stat().st_size}
            for rel in (BIG, "config.json", "tokenizer.json")]


@dataclass
class McLab:
    handle: LabHandle
    url: str
    files: list[dict[str, Any]]
    bad_sha: str
    warm: PlayResult | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def lab(self) -> Lab:
        return self.handle.lab

    def model(self, version: str, where: str = "good") -> dict[str, Any]:
        return {"name": "llama", "version": version, "source": f"{self.url}/{where}", "files": self.files}

    def argv(self, extra_vars: dict[str, Any], limit: str | None = None) -> list[str]:
        argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", self.handle.inventory, PLAYBOOK,
                "-e", json.dumps(extra_vars)]
        return argv + (["--limit", limit] if limit else [])

    def play(self, extra_vars: dict[str, Any], limit: str | None = None) -> PlayResult:
        return self.handle.playbook(PLAYBOOK, extra_vars=extra_vars, limit=limit)

    def sha_on_nodes(self, version: str, nodes: list[str]) -> dict[str, dict[str, str]]:
        """sha256 of every file of a published version, read back inside each node (in parallel;
        the node's python3 hashlib: coreutils sha256sum is several times slower)."""
        paths = [f["path"] for f in self.files]

        def one(node: str) -> dict[str, str]:
            out = self.handle.lab.run_in(node, ["python3", "-c", READ_BACK, f"{ROOT}/llama/{version}", *paths]).stdout
            return {line.split()[1]: line.split()[0] for line in out.splitlines()}

        with ThreadPoolExecutor(len(nodes)) as pool:
            return dict(zip(nodes, pool.map(one, nodes), strict=True))

    def current(self, node: str) -> str:
        return self.handle.sh(node, f"readlink {ROOT}/llama/current", check=False).stdout.strip()

    def exists(self, node: str, path: str) -> bool:
        return self.handle.sh(node, f"test -e {path}", check=False).returncode == 0

    def gets_from(self, node: str) -> list[dict[str, Any]]:
        client = self.handle.state["nodes"][node]["interfaces"]["rdma"]["address"]
        return [r for r in self.lab.source_requests() if r["client"] == client and r["method"] == "GET"]


def expected(mc: McLab) -> dict[str, str]:
    return {f["path"]: f["sha256"] for f in mc.files}


def result(play: PlayResult, node: str) -> dict[str, Any]:
    return play.task_results(TASK)[node]


@pytest.fixture(scope="module")
def mc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McLab]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("model-cache")
    served = base / "served"
    files = make_model(served / "good")
    shutil.copytree(served / "good", served / "bad", copy_function=lambda s, d: subprocess.run(
        ["cp", "--sparse=always", s, d], check=True))
    with open(served / "bad" / BIG, "r+b") as fh:
        fh.seek(FLIP_AT)
        byte = fh.read(1)
        fh.seek(FLIP_AT)
        fh.write(bytes([byte[0] ^ 0x01]))
    bad_sha = sha256_file(served / "bad" / BIG)
    lab = Lab(LAB)
    try:
        state = lab.up(LabConfig(name=LAB, nodes=4, nvme_size="6G", inventory_dir=str(base / "inventory"),
                                 server=("src", "rdma")), log=lambda *_: None)
        serving = lab.serve(str(served))
        yield McLab(LabHandle(lab, state), serving["url"], files, bad_sha)
    finally:
        lab.down(log=lambda *_: None)
        shutil.rmtree(served, ignore_errors=True)


@pytest.fixture(scope="module")
def warmed(mc: McLab) -> McLab:
    """Every node lays out its cache and warms llama v1, all 4 at once."""
    started = time.monotonic()
    mc.warm = mc.play({"mc": {"models": [mc.model("v1")]}})
    mc.notes["warm_seconds"] = time.monotonic() - started
    return mc


def test_four_nodes_warm_concurrently_to_identical_verified_files(warmed: McLab) -> None:
    mc = warmed
    play = mc.warm
    assert play is not None and play.rc == 0, play and (play.stdout[-3000:] + play.stderr[-2000:])
    total = sum(f["size"] for f in mc.files)
    for node in mc.handle.nodes:
        [model] = result(play, node)["models"]
        assert (model["name"], model["version"], model["status"]) == ("llama", "v1", "published")
        assert model["bytes_moved"] == total and model["resumed_bytes"] == 0
        assert model["throughput_bytes_per_s"] > 0
        assert mc.current(node) == "v1"
        assert not mc.exists(node, f"{ROOT}/.staging/llama/v1")
    assert mc.sha_on_nodes("v1", mc.handle.nodes) == {n: expected(mc) for n in mc.handle.nodes}
    # Each node fetched each file once, whole (no resume, no retry), and the four downloads of
    # the big file overlapped in time on the source.
    spans = []
    for node in mc.handle.nodes:
        gets = mc.gets_from(node)
        assert sorted(r["path"] for r in gets) == sorted(f"/good/{f['path']}" for f in mc.files), gets
        [big] = [r for r in gets if r["path"] == f"/good/{BIG}"]
        assert (big["status"], big["bytes"]) == (200, BIG_SIZE)
        spans.append((big["start"], big["start"] + big["seconds"]))
    assert max(span[0] for span in spans) < min(span[1] for span in spans), spans


def test_second_run_changes_nothing_and_moves_no_bytes(warmed: McLab) -> None:
    mc = warmed
    before = len(mc.lab.source_requests())
    play = mc.play({"mc": {"models": [mc.model("v1")]}})
    assert play.rc == 0, play.stdout[-3000:]
    assert play.changed_hosts() == {n: 0 for n in mc.handle.nodes}
    for node in mc.handle.nodes:
        [model] = result(play, node)["models"]
        assert (model["status"], model["bytes_moved"]) == ("present", 0)
    assert len(mc.lab.source_requests()) == before  # no network I/O at all


def test_corrupted_source_byte_is_detected_and_nothing_published(warmed: McLab) -> None:
    mc = warmed
    play = mc.play({"mc": {"models": [mc.model("v1bad", where="bad")], "pinned": ["llama@v1"]},
                    "mc_layout": False}, limit="node1")
    assert play.rc != 0
    res = result(play, "node1")
    assert res.get("failed"), res
    msg = res["msg"]
    for needle in ("llama", BIG, [f["sha256"] for f in mc.files if f["path"] == BIG][0], mc.bad_sha):
        assert needle in msg, msg
    assert not mc.exists("node1", f"{ROOT}/llama/v1bad")
    assert not mc.exists("node1", f"{ROOT}/.staging/llama/v1bad/{BIG}.part")
    assert mc.current("node1") == "v1"


def _holders_of(mc: McLab, node: str, suffix: str) -> list[int]:
    """PIDs of processes in the node's mount namespace with a file ending in ``suffix`` open."""
    script = ('me=$(readlink /proc/self/ns/mnt); for p in /proc/[0-9]*; do '
              '[ "$(readlink $p/ns/mnt 2>/dev/null)" = "$me" ] || continue; '
              'for f in $p/fd/*; do case "$(readlink $f 2>/dev/null)" in *' + suffix + ') echo ${p#/proc/};; '
              'esac; done; done | sort -u')
    return [int(p) for p in mc.handle.sh(node, script, check=False).stdout.split()]


def test_kill_mid_copy_then_rerun_resumes_and_verifies(warmed: McLab) -> None:
    mc = warmed
    part = f"{ROOT}/.staging/llama/v2/{BIG}.part"
    extra = {"mc": {"models": [mc.model("v2")], "pinned": ["llama@v1"], "bandwidth_limit": 100 * MIB},
             "mc_layout": False}
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", "")}
    proc = subprocess.Popen(mc.argv(extra, limit="node2"), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    killed: list[int] = []
    try:
        deadline = time.monotonic() + 90
        size = 0
        while size < 300 * MIB:
            assert proc.poll() is None, "the playbook ended before the copy could be interrupted"
            assert time.monotonic() < deadline, f"the .part never grew past 300 MiB ({size} bytes)"
            out = mc.handle.sh("node2", f"stat -c %s {part} 2>/dev/null || echo 0", check=False).stdout
            size = int(out.strip() or 0)
            time.sleep(0.2)
        killed = _holders_of(mc, "node2", f"/{os.path.basename(BIG)}.part")
        assert killed, "no process holds the .part open"
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=60) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    kept = int(mc.handle.sh("node2", f"stat -c %s {part}").stdout)
    assert 300 * MIB <= kept < BIG_SIZE
    assert not mc.exists("node2", f"{ROOT}/llama/v2")
    assert mc.current("node2") == "v1"

    before = len(mc.gets_from("node2"))
    extra["mc"].pop("bandwidth_limit")
    play = mc.play(extra, limit="node2")
    assert play.rc == 0, play.stdout[-3000:]
    [model] = result(play, "node2")["models"]
    assert model["status"] == "published"
    assert model["resumed_bytes"] > 0, model
    assert model["resumed_bytes"] <= kept
    assert model["bytes_moved"] < sum(f["size"] for f in mc.files), model
    gets = mc.gets_from("node2")[before:]
    big = [r for r in gets if r["path"] == f"/good/{BIG}"]
    assert big and big[0]["status"] == 206 and big[0]["range"].startswith("bytes="), big
    assert int(big[0]["range"][6:].rstrip("-")) > 0
    assert mc.current("node2") == "v2"
    assert not mc.exists("node2", part)
    assert mc.sha_on_nodes("v2", ["node2"]) == {"node2": expected(mc)}


def _fs(mc: McLab, node: str) -> tuple[int, int]:
    """(total bytes, free bytes for unprivileged use) of the cache filesystem of a node."""
    blocks, free, size = mc.handle.sh(node, f"stat -f -c '%b %a %S' {ROOT}").stdout.split()
    return int(blocks) * int(size), int(free) * int(size)


def test_reserve_refuses_before_downloading_or_evicts_an_unpinned_version(warmed: McLab) -> None:
    mc = warmed
    total, _free3 = _fs(mc, "node3")
    gets = len(mc.gets_from("node3"))
    hosts = {
        # node3: a reserve as large as the filesystem cannot be met, v1 is pinned: refuse.
        "node3": {"models": [mc.model("v3")], "pinned": ["llama@v1"], "reserve_bytes": total},
    }
    _total4, free4 = _fs(mc, "node4")
    needed = sum(f["size"] for f in mc.files)
    # node4: v2 only fits above the reserve once the unpinned v1 (current, not pinned) is evicted.
    hosts["node4"] = {"models": [mc.model("v2")], "reserve_bytes": free4 - needed + 512 * MIB}
    play = mc.play({"mc_hosts": hosts, "mc_layout": False}, limit="node3,node4")
    refused = result(play, "node3")
    assert refused.get("failed"), refused
    assert "reserve" in refused["msg"], refused["msg"]
    assert len(mc.gets_from("node3")) == gets  # refused before downloading anything
    assert not mc.exists("node3", f"{ROOT}/llama/v3")
    assert not mc.exists("node3", f"{ROOT}/.staging/llama/v3/{BIG}.part")
    assert mc.current("node3") == "v1"
    assert mc.exists("node3", f"{ROOT}/llama/v1/{BIG}")

    evicting = result(play, "node4")
    assert not evicting.get("failed"), evicting
    assert [(e["name"], e["version"]) for e in evicting["evicted"]] == [("llama", "v1")]
    assert evicting["evicted"][0]["bytes"] >= needed
    [model] = evicting["models"]
    assert model["status"] == "published"
    assert not mc.exists("node4", f"{ROOT}/llama/v1")
    assert mc.current("node4") == "v2"
    _total4_after, free_after = _fs(mc, "node4")
    assert free_after >= hosts["node4"]["reserve_bytes"]
    assert mc.sha_on_nodes("v2", ["node4"]) == {"node4": expected(mc)}
