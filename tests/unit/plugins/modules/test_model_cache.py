"""model_cache against real files in tmp_path: publish, verify, resume, manifest, reserve and eviction.

Sources are local directories (the module's ``LocalSource``) or, for transfer failures, a
small in-process source object; HTTP against a real server runs in
tests/integration/test_model_cache_http.py, inside a throwaway network namespace.
Free space: the refusal tests use the real ``statvfs`` of the filesystem holding tmp_path
with a reserve far above its free space. Tests that need exact figures (which version is
evicted) cannot use it: other processes write to the same disk while they run. They replace
``_model_cache.cache.free_bytes``, the one seam the module reads free space through, with a
filesystem of fixed capacity on which only the cache directory uses space (``small_fs``).
The backend's parts alone are tested in tests/unit/plugins/module_utils/test_model_cache*.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible.module_utils.common import warnings as ansible_warnings
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import cache as mc
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import layout, transfer
from ansible_collections.aiinfra.datapath.plugins.modules import model_cache
from capability_results import diff_entry, kinds, texts
from model_data import FlakyStream, blob, sha

MiB = 1 << 20


def make_source(base: Path, files: dict[str, bytes]) -> list[dict]:
    entries = []
    for rel, data in files.items():
        target = base / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        entries.append(dict(path=rel, sha256=sha(data), size=len(data)))
    return entries


def listing(root: Path) -> dict[str, str]:
    """Every path below root with its type, mode, link target or content hash."""
    state: dict[str, str] = {}
    if not root.exists():
        return state
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if os.path.islink(full):
                what = "link:" + os.readlink(full)
            elif os.path.isdir(full):
                what = "dir"
            else:
                what = sha(Path(full).read_bytes())
            state[os.path.relpath(full, root)] = "%o:%s" % (st.st_mode, what)
    return state


class Cache:
    def __init__(self, tmp_path: Path, run_module) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "cache" / "models"
        (tmp_path / "cache").mkdir()
        self.lock = tmp_path / "run" / "aiinfra-datapath.lock"
        self.run_module = run_module

    def args(self, models: list[dict], **extra) -> dict:
        base = dict(cache_dir=str(self.root), models=models, lock_file=str(self.lock))
        base.update(extra)
        return base

    def run(self, models: list[dict], check_mode=False, diff=False, expect_failure=False, **extra) -> dict:
        return self.run_module(model_cache.main, self.args(models, **extra), check_mode=check_mode, diff=diff,
                               expect_failure=expect_failure)

    def source(self, name: str, files: dict[str, bytes]) -> tuple[str, list[dict]]:
        base = self.tmp / "src" / name
        return str(base), make_source(base, files)

    def meta(self, name: str, version: str) -> dict:
        return json.loads((self.root / name / ".versions" / (version + ".json")).read_text())

    def set_last_used(self, name: str, version: str, stamp: str) -> None:
        path = self.root / name / ".versions" / (version + ".json")
        meta = json.loads(path.read_text())
        meta["last_used"] = stamp
        path.write_text(json.dumps(meta))


@pytest.fixture
def cache(tmp_path: Path, run_module) -> Cache:
    return Cache(tmp_path, run_module)


FILES = {"config.json": b'{"hidden_size": 4096}\n', "weights/model-00001.safetensors": blob(3 * MiB + 17),
         "weights/model-00002.safetensors": blob(MiB, seed=2), "empty.txt": b""}


# --------------------------------------------------------------------------- publish

def test_publishes_from_local_dir(cache):
    source, files = cache.source("llama", FILES)
    result = cache.run([dict(name="llama", version="v1", source=source, files=files)])
    assert result["changed"] is True
    model = result["models"][0]
    assert model["status"] == "published" and model["name"] == "llama" and model["version"] == "v1"
    assert model["bytes_moved"] == sum(len(d) for d in FILES.values())
    assert model["resumed_bytes"] == 0 and model["seconds"] >= 0
    # where the time went: the copies' stages and `other` account for the whole run, no more
    stages = model["stage_seconds"]
    assert list(stages) == ["source", "copy", "hash", "disk", "limit", "other"]
    assert sum(stages.values()) == pytest.approx(model["seconds"], abs=0.005)
    assert stages["source"] == 0.0 and stages["copy"] > 0  # a local directory: the kernel copies
    assert model["bottleneck"] in stages
    assert model["path"] == str(cache.root / "llama" / "v1")
    for rel, data in FILES.items():
        path = cache.root / "llama" / "v1" / rel
        assert path.read_bytes() == data
        assert oct(path.stat().st_mode & 0o7777) == "0o644"
    assert oct((cache.root / "llama" / "v1" / "weights").stat().st_mode & 0o7777) == "0o755"
    assert os.readlink(cache.root / "llama" / "current") == "v1"
    meta = cache.meta("llama", "v1")
    assert meta["bytes"] == model["bytes_moved"]
    assert sorted(f["path"] for f in meta["files"]) == sorted(FILES)
    assert meta["published_at"] and meta["last_used"]
    assert not (cache.root / ".staging").exists()
    assert any(a.startswith("fetch llama@v1") for a in texts(result))
    assert "switch llama/current: None -> v1" in texts(result)
    # no reserve given: the default, 1 % of the cache filesystem (64 MiB-4 GiB), never 0
    assert result["reserve_bytes"] == mc.default_reserve(str(cache.root)) > 0
    assert result["free_bytes"] > 0 and result["evicted"] == []
    assert kinds(result) == ["create", "fetch", "switch"]
    fetch, switch = result["actions"][1:]
    assert (fetch["target"], fetch["before"], fetch["after"], fetch["destructive"]) == ("llama@v1", None, "published",
                                                                                        False)
    assert (switch["target"], switch["before"], switch["after"]) == ("llama/current", None, "v1")


def test_file_url_source_and_modes(cache):
    source, files = cache.source("m", {"a.bin": blob(1000)})
    result = cache.run([dict(name="m", version="1", source="file://" + source, files=files)],
                       file_mode="0640", dir_mode="0750")
    assert result["models"][0]["status"] == "published"
    assert oct((cache.root / "m" / "1" / "a.bin").stat().st_mode & 0o7777) == "0o640"
    assert oct((cache.root / "m" / "1").stat().st_mode & 0o7777) == "0o750"


def test_second_run_is_present_without_touching_the_source(cache):
    source, files = cache.source("llama", FILES)
    models = [dict(name="llama", version="v1", source=source, files=files)]
    cache.run(models)
    before = listing(cache.root / "llama" / "v1")
    # no I/O on the source: a present version does not need it at all
    os.rename(source, source + ".gone")
    result = cache.run(models)
    assert result["changed"] is False
    assert result["models"][0]["status"] == "present"
    assert result["models"][0]["bytes_moved"] == 0
    assert result["actions"] == []
    assert listing(cache.root / "llama" / "v1") == before


def test_nothing_to_do_shows_no_diff(cache):
    source, files = cache.source("m", {"a": b"x"})
    models = [dict(name="m", version="1", source=source, files=files)]
    cache.run(models)
    result = cache.run(models, diff=True)
    assert result["changed"] is False and "diff" not in result


def test_last_used_bookkeeping_is_not_a_change(cache):
    source, files = cache.source("m", {"a": b"x"})
    models = [dict(name="m", version="1", source=source, files=files)]
    cache.run(models)
    cache.set_last_used("m", "1", "2001-01-01T00:00:00Z")
    result = cache.run(models)
    assert result["changed"] is False and result["actions"] == []
    assert cache.meta("m", "1")["last_used"] > "2001-01-01T00:00:00Z"


def test_new_version_switches_current_and_keeps_the_old(cache):
    s1, f1 = cache.source("v1", {"w": b"one"})
    s2, f2 = cache.source("v2", {"w": b"two"})
    cache.run([dict(name="m", version="v1", source=s1, files=f1)])
    result = cache.run([dict(name="m", version="v2", source=s2, files=f2)], diff=True)
    assert result["changed"] is True
    assert os.readlink(cache.root / "m" / "current") == "v2"
    assert (cache.root / "m" / "v1" / "w").read_bytes() == b"one"
    assert diff_entry(result, "current versions")["before"] == "m/current = v1\n"
    assert diff_entry(result, "current versions")["after"] == "m/current = v2\n"
    assert len(result["diff"]) == 1
    # switching back to a present version is a change with no bytes moved
    back = cache.run([dict(name="m", version="v1", source=s1, files=f1)])
    assert back["changed"] is True and back["models"][0]["status"] == "present"
    assert back["models"][0]["bytes_moved"] == 0
    assert texts(back) == ["switch m/current: v2 -> v1"]
    assert os.readlink(cache.root / "m" / "current") == "v1"


def test_two_versions_of_one_model_current_is_the_last(cache):
    s1, f1 = cache.source("v1", {"w": b"one"})
    s2, f2 = cache.source("v2", {"w": b"two"})
    cache.run([dict(name="m", version="v2", source=s2, files=f2), dict(name="m", version="v1", source=s1, files=f1)])
    assert os.readlink(cache.root / "m" / "current") == "v1"
    assert (cache.root / "m" / "v2" / "w").exists()


def test_size_null_is_taken_from_the_source(cache):
    source, files = cache.source("m", {"a": blob(5000)})
    files[0]["size"] = None
    result = cache.run([dict(name="m", version="1", source=source, files=files)])
    assert result["models"][0]["files"][0]["size"] == 5000
    assert cache.meta("m", "1")["files"][0]["size"] == 5000


# --------------------------------------------------------------------------- verification

def test_checksum_mismatch_publishes_nothing(cache):
    source, files = cache.source("m", {"good": b"fine", "bad": blob(2 * MiB)})
    wrong = sha(b"something else")
    files[1]["sha256"] = wrong
    result = cache.run([dict(name="m", version="1", source=source, files=files)], expect_failure=True)
    msg = result["msg"]
    assert "m@1" in msg and "bad" in msg and wrong in msg and sha(blob(2 * MiB)) in msg
    assert result["expected_sha256"] == wrong and result["actual_sha256"] == sha(blob(2 * MiB))
    assert not (cache.root / "m" / "1").exists()
    assert not (cache.root / "m" / "current").exists()
    assert not list((cache.root / ".staging").rglob("bad*"))


def test_size_mismatch_is_a_checksum_failure(cache):
    source, files = cache.source("m", {"a": blob(3000)})
    files[0]["size"] = 2000
    result = cache.run([dict(name="m", version="1", source=source, files=files)], expect_failure=True)
    assert "checksum mismatch" in result["msg"]
    assert not (cache.root / "m" / "1").exists()


def test_corrupt_published_file_is_replaced_with_verify_sha256(cache):
    source, files = cache.source("m", {"a": blob(4096)})
    models = [dict(name="m", version="1", source=source, files=files)]
    cache.run(models)
    target = cache.root / "m" / "1" / "a"
    os.chmod(target, 0o644)
    data = bytearray(target.read_bytes())
    data[100] ^= 0xFF
    target.write_bytes(bytes(data))
    # same size, but not the file verified at publish (its mtime and ctime changed): re-hashed, replaced
    cheap = cache.run(models)
    assert cheap["changed"] is True and kinds(cheap) == ["replace", "fetch"]
    assert target.read_bytes() == blob(4096)
    os.chmod(target, 0o644)
    target.write_bytes(bytes(data))
    result = cache.run(models, verify_existing="sha256")
    assert result["changed"] is True and result["models"][0]["status"] == "published"
    assert any(a.startswith("replace m@1") for a in texts(result))
    assert kinds(result) == ["replace", "fetch"] and result["actions"][0]["destructive"] is False
    assert target.read_bytes() == blob(4096)


def test_truncated_published_file_is_refetched(cache):
    source, files = cache.source("m", {"a": blob(4096)})
    models = [dict(name="m", version="1", source=source, files=files)]
    cache.run(models)
    target = cache.root / "m" / "1" / "a"
    os.truncate(target, 10)
    result = cache.run(models)
    assert result["changed"] is True
    assert target.read_bytes() == blob(4096)


# --------------------------------------------------------------------------- resume

def test_resumes_from_a_part_file(cache):
    data = blob(5 * MiB + 123)
    source, files = cache.source("m", {"weights.bin": data})
    part = cache.root / ".staging" / "m" / "1" / "weights.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[: 2 * MiB + 7])
    result = cache.run([dict(name="m", version="1", source=source, files=files)])
    model = result["models"][0]
    assert model["resumed_bytes"] == 2 * MiB + 7
    assert model["bytes_moved"] == len(data) - (2 * MiB + 7)
    assert (cache.root / "m" / "1" / "weights.bin").read_bytes() == data
    assert not part.exists()


def test_complete_part_needs_no_transfer(cache):
    data = blob(MiB)
    source, files = cache.source("m", {"w": data})
    part = cache.root / ".staging" / "m" / "1" / "w.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data)
    result = cache.run([dict(name="m", version="1", source=source, files=files)])
    assert result["models"][0]["bytes_moved"] == 0 and result["models"][0]["resumed_bytes"] == len(data)
    assert (cache.root / "m" / "1" / "w").read_bytes() == data


def test_corrupt_part_fails_and_is_deleted(cache):
    data = blob(2 * MiB)
    source, files = cache.source("m", {"w": data})
    part = cache.root / ".staging" / "m" / "1" / "w.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"\0" * MiB)
    result = cache.run([dict(name="m", version="1", source=source, files=files)], expect_failure=True)
    assert "checksum mismatch" in result["msg"] and not part.exists()
    # the next run starts clean and succeeds
    assert cache.run([dict(name="m", version="1", source=source, files=files)])["models"][0]["resumed_bytes"] == 0


def test_longer_part_than_the_file_restarts(cache):
    data = blob(1000)
    source, files = cache.source("m", {"w": data})
    part = cache.root / ".staging" / "m" / "1" / "w.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(blob(5000, seed=9))
    result = cache.run([dict(name="m", version="1", source=source, files=files)])
    assert result["models"][0]["resumed_bytes"] == 0
    assert (cache.root / "m" / "1" / "w").read_bytes() == data


class FakeHttpSource:
    """Stands in for HttpSource: Range support optional, failure after N bytes on the first opens."""

    kind = "http"

    def __init__(self, data: dict[str, bytes], fail_after: int | None = None, failures: int = 1,
                 ranges: bool = True, sizes: bool = True) -> None:
        self.data = data
        self.fail_after = fail_after
        self.failures = failures
        self.ranges = ranges
        self.sizes = sizes
        self.opens: list[int] = []

    def describe(self, path: str) -> str:
        return "http://fake/" + path

    def size(self, path: str) -> int | None:
        return len(self.data[path]) if self.sizes else None

    def read_small(self, path: str, limit: int = 1 << 24) -> bytes:
        return self.data[path]

    def open(self, path: str, offset: int):
        self.opens.append(offset)
        served = offset if self.ranges else 0
        fail = None
        if self.fail_after is not None and len(self.opens) <= self.failures:
            fail = self.fail_after
        stream = FlakyStream(self.data[path], fail)
        stream.pos = served
        return stream, served, len(self.data[path]) if self.sizes else None


def use_source(monkeypatch, fake: FakeHttpSource) -> None:
    monkeypatch.setattr(mc, "make_source", lambda item, options: fake)
    monkeypatch.setattr(transfer.time, "sleep", lambda s: None)  # retry back-off


def test_interrupted_transfer_resumes_within_the_run(cache, monkeypatch):
    data = blob(3 * MiB)
    fake = FakeHttpSource({"w": data}, fail_after=MiB + 5)
    use_source(monkeypatch, fake)
    result = cache.run([dict(name="m", version="1", source="http://fake", files=[
        dict(path="w", sha256=sha(data), size=len(data))])])
    assert fake.opens == [0, MiB + 5]
    assert result["models"][0]["resumed_bytes"] == MiB + 5
    assert result["models"][0]["bytes_moved"] == len(data)
    assert (cache.root / "m" / "1" / "w").read_bytes() == data


def test_interrupted_transfer_without_retries_keeps_the_part_for_the_next_run(cache, monkeypatch):
    data = blob(3 * MiB)
    fake = FakeHttpSource({"w": data}, fail_after=2 * MiB)
    use_source(monkeypatch, fake)
    models = [dict(name="m", version="1", source="http://fake", files=[dict(path="w", sha256=sha(data), size=None)])]
    failed = cache.run(models, retries=0, expect_failure=True)
    assert "failed after 1 attempts at byte %d" % (2 * MiB) in failed["msg"]
    part = cache.root / ".staging" / "m" / "1" / "w.part"
    assert part.stat().st_size == 2 * MiB
    result = cache.run(models, retries=0)
    assert fake.opens[-1] == 2 * MiB
    assert result["models"][0]["resumed_bytes"] == 2 * MiB
    assert result["models"][0]["bytes_moved"] == MiB
    assert (cache.root / "m" / "1" / "w").read_bytes() == data


def test_source_without_range_support_restarts_from_zero(cache, monkeypatch):
    data = blob(2 * MiB)
    fake = FakeHttpSource({"w": data}, ranges=False)
    use_source(monkeypatch, fake)
    part = cache.root / ".staging" / "m" / "1" / "w.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:MiB])
    result = cache.run([dict(name="m", version="1", source="http://fake", files=[
        dict(path="w", sha256=sha(data), size=len(data))])])
    assert fake.opens == [MiB]
    assert result["models"][0]["resumed_bytes"] == 0
    assert result["models"][0]["bytes_moved"] == len(data)
    assert (cache.root / "m" / "1" / "w").read_bytes() == data
    assert any("ignored Range" in w for w in result.get("warnings", []))


def test_writing_stops_at_the_reserve_when_the_size_is_unknown(cache, monkeypatch):
    data = blob(2 * MiB)
    fake = FakeHttpSource({"w": data}, sizes=False)
    use_source(monkeypatch, fake)
    free = mc.free_bytes(str(cache.tmp))
    result = cache.run([dict(name="m", version="1", source="http://fake", files=[
        dict(path="w", sha256=sha(data), size=None)])], reserve_bytes=free + 64 * MiB, expect_failure=True)
    assert "would drop below the reserve" in result["msg"]
    assert not (cache.root / "m" / "1").exists()


# --------------------------------------------------------------------------- manifest

def manifest_for(files: list[dict]) -> bytes:
    return "".join("%s  %s\n" % (f["sha256"], f["path"]) for f in files).encode()


def test_manifest_lists_the_files(cache):
    source, files = cache.source("m", FILES)
    text = manifest_for(files)
    Path(source, "SHA256SUMS").write_bytes(text)
    model = dict(name="m", version="1", source=source, manifest="SHA256SUMS", manifest_sha256=sha(text))
    result = cache.run([model])
    assert sorted(f["path"] for f in result["models"][0]["files"]) == sorted(FILES)
    assert (cache.root / "m" / "1" / "weights" / "model-00002.safetensors").read_bytes() == FILES[
        "weights/model-00002.safetensors"]
    assert not (cache.root / "m" / "1" / "SHA256SUMS").exists()
    # pinned manifest + present version: no source access at all
    os.rename(source, source + ".gone")
    again = cache.run([model])
    assert again["changed"] is False and again["models"][0]["status"] == "present"


def test_manifest_sha256_mismatch_fails(cache):
    source, files = cache.source("m", {"a": b"1"})
    text = manifest_for(files)
    Path(source, "SHA256SUMS").write_bytes(text)
    pinned = sha(b"another manifest")
    result = cache.run([dict(name="m", version="1", source=source, manifest="SHA256SUMS", manifest_sha256=pinned)],
                       expect_failure=True)
    assert "manifest" in result["msg"] and pinned in result["msg"] and sha(text) in result["msg"]
    assert not (cache.root / "m").exists()


# --------------------------------------------------------------------------- reserve and eviction

def small_fs(monkeypatch, cache: Cache, capacity: int) -> None:
    """free_bytes = capacity - bytes below the cache directory (eviction frees, writing uses); the
    filesystem's size (the default reserve is 1 % of it) is ``capacity``."""
    monkeypatch.setattr(mc, "free_bytes", lambda path: capacity - layout.tree_bytes(str(cache.tmp / "cache")))
    monkeypatch.setattr(mc, "fs_bytes", lambda path: capacity)


def install(cache: Cache, name: str, version: str, size: int, last_used: str, seed: int = 0) -> int:
    source, files = cache.source("%s-%s" % (name, version), {"w.bin": blob(size, seed=seed)})
    cache.run([dict(name=name, version=version, source=source, files=files)])
    cache.set_last_used(name, version, last_used)
    return size


def test_reserve_evicts_lru_unpinned_and_never_pinned(cache, monkeypatch):
    small_fs(monkeypatch, cache, 1 << 30)
    install(cache, "old", "1", 16 * MiB, "2020-01-01T00:00:00Z", seed=1)       # oldest, but pinned
    install(cache, "a", "1", 16 * MiB, "2021-01-01T00:00:00Z", seed=2)         # LRU unpinned
    install(cache, "b", "1", 16 * MiB, "2022-01-01T00:00:00Z", seed=3)
    source, files = cache.source("new", {"w.bin": blob(8 * MiB, seed=4)})
    free = mc.free_bytes(str(cache.root))
    reserve = free  # the new 8 MiB leave a deficit of 8 MiB: one 16 MiB version covers it
    result = cache.run([dict(name="new", version="1", source=source, files=files)], pinned=["old@1"],
                       reserve_bytes=reserve)
    assert result["evicted"] == [dict(name="a", version="1", bytes=16 * MiB)]
    assert not (cache.root / "a" / "1").exists() and not (cache.root / "a" / "current").exists()
    assert not (cache.root / "a" / ".versions" / "1.json").exists()
    assert (cache.root / "old" / "1" / "w.bin").exists() and (cache.root / "b" / "1" / "w.bin").exists()
    assert any(x.startswith("evict a@1") for x in texts(result))
    assert result["models"][0]["status"] == "published" and result["reserve_bytes"] == reserve
    # evictions come first (they make the room; a's pointer goes with its version), only they lose data
    assert texts(result)[0] == "switch a/current: 1 -> None"
    assert kinds(result) == ["switch", "evict", "fetch", "switch"]
    assert [a["destructive"] for a in result["actions"]] == [False, True, False, False]
    evict = result["actions"][1]
    assert (evict["target"], evict["before"], evict["after"]) == ("a@1", "published", None)


def test_reserve_refuses_before_downloading_when_it_cannot_fit(cache):
    install(cache, "old", "1", 4 * MiB, "2020-01-01T00:00:00Z", seed=1)
    install(cache, "a", "1", 4 * MiB, "2021-01-01T00:00:00Z", seed=2)
    source, files = cache.source("new", {"w.bin": blob(4 * MiB, seed=4)})
    before = listing(cache.root)
    free = mc.free_bytes(str(cache.root))
    reserve = free + 256 * MiB
    result = cache.run([dict(name="new", version="1", source=source, files=files)], pinned=["old@1"],
                       reserve_bytes=reserve, expect_failure=True)
    msg = result["msg"]
    assert "need %d bytes" % (4 * MiB) in msg and "reserve %d" % reserve in msg
    assert "%d bytes evictable in 1 unpinned versions" % (4 * MiB) in msg
    assert result["needed_bytes"] == 4 * MiB and result["evictable_bytes"] == 4 * MiB
    assert [a["kind"] for a in result["actions"]] == ["fetch", "switch"]  # what was planned, none done
    assert listing(cache.root) == before  # nothing evicted, nothing downloaded


def test_evict_false_refuses(cache, monkeypatch):
    small_fs(monkeypatch, cache, 1 << 30)
    install(cache, "a", "1", MiB, "2021-01-01T00:00:00Z")
    source, files = cache.source("new", {"w.bin": blob(MiB, seed=4)})
    free = mc.free_bytes(str(cache.root))
    result = cache.run([dict(name="new", version="1", source=source, files=files)], evict=False,
                       reserve_bytes=free, expect_failure=True)
    assert "evict is false" in result["msg"]
    assert (cache.root / "a" / "1").exists()


def test_versions_in_models_are_pinned(cache, monkeypatch):
    small_fs(monkeypatch, cache, 1 << 30)
    install(cache, "a", "1", 8 * MiB, "2000-01-01T00:00:00Z", seed=1)
    source_a, files_a = cache.source("a-1", {"w.bin": blob(8 * MiB, seed=1)})
    source, files = cache.source("new", {"w.bin": blob(4 * MiB, seed=4)})
    free = mc.free_bytes(str(cache.root))
    result = cache.run([dict(name="a", version="1", source=source_a, files=files_a),
                        dict(name="new", version="1", source=source, files=files)],
                       reserve_bytes=free, expect_failure=True)
    assert "0 bytes evictable in 0 unpinned versions" in result["msg"]


# --------------------------------------------------------------------------- check mode

def test_check_mode_changes_nothing(cache, monkeypatch):
    small_fs(monkeypatch, cache, 1 << 30)
    install(cache, "a", "1", 8 * MiB, "2021-01-01T00:00:00Z", seed=2)
    source, files = cache.source("new", {"w.bin": blob(4 * MiB, seed=4)})
    part = cache.root / ".staging" / "new" / "1" / "w.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(blob(4 * MiB, seed=4)[:MiB])
    before = listing(cache.tmp)
    free = mc.free_bytes(str(cache.root))
    result = cache.run([dict(name="new", version="1", source=source, files=files)], check_mode=True, diff=True,
                       reserve_bytes=free - 3 * MiB + 4 * MiB)
    assert listing(cache.tmp) == before
    assert result["changed"] is True
    assert result["models"][0]["status"] == "would_publish" and result["models"][0]["bytes_moved"] == 0
    assert result["models"][0]["bottleneck"] is None and not any(result["models"][0]["stage_seconds"].values())
    assert result["evicted"] == [dict(name="a", version="1", bytes=8 * MiB)]
    assert any(a.startswith("fetch new@1") and "%d bytes to move" % (3 * MiB) in a for a in texts(result))
    assert "switch new/current: None -> 1" in texts(result)
    # a's current pointer goes with the evicted version; new's is created
    assert diff_entry(result, "current versions") == dict(
        before_header="current versions", after_header="current versions",
        before="a/current = 1\n", after="new/current = 1\n")


def test_check_mode_on_a_missing_root_creates_nothing(cache):
    source, files = cache.source("m", {"a": b"x"})
    result = cache.run([dict(name="m", version="1", source=source, files=files)], check_mode=True)
    # nothing on the cache filesystem; the cache lock is taken in check mode as in a real run
    assert not cache.root.exists() and listing(cache.tmp / "cache") == {}
    assert cache.lock.exists()
    assert result["changed"] is True and "create %s" % cache.root in texts(result)


def test_check_mode_predicts_no_change_when_present(cache):
    source, files = cache.source("m", {"a": b"x"})
    models = [dict(name="m", version="1", source=source, files=files)]
    cache.run(models)
    result = cache.run(models, check_mode=True)
    assert result["changed"] is False and result["models"][0]["status"] == "present"


# --------------------------------------------------------------------------- input and mounts

@pytest.mark.parametrize("model, fragment", [
    (dict(name="bad name", version="1"), "models[0].name"),
    (dict(name="m", version="../x"), "models[0].version"),
    (dict(name="current", version="1"), "models[0].name"),
    (dict(name="m", version="1", files=[dict(path="../etc/passwd", sha256="a" * 64)]), "must be relative"),
    (dict(name="m", version="1", files=[dict(path="/abs", sha256="a" * 64)]), "must be relative"),
    (dict(name="m", version="1", files=[dict(path="x", sha256="A" * 64)]), "64 lowercase hex"),
    (dict(name="m", version="1", files=[dict(path="x.part", sha256="a" * 64)]), "staging suffix"),
    (dict(name="m", version="1", files=[]), "give files or a manifest"),
    (dict(name="m", version="1", source="ftp://x/y"), "must be an absolute path"),
])
def test_bad_input_is_named_and_changes_nothing(cache, model, fragment):
    entry = dict(source="/srv", files=[dict(path="a", sha256="a" * 64)])
    entry.update(model)
    result = cache.run([entry], expect_failure=True)
    assert fragment in result["msg"]
    assert not cache.root.exists()


def test_bad_pinned_and_missing_parent(cache, tmp_path):
    assert "name@version" in cache.run([], pinned=["nover"], expect_failure=True)["msg"]
    result = cache.run_module(model_cache.main, dict(cache_dir=str(tmp_path / "no" / "models"), models=[],
                                                     lock_file=str(cache.lock)), expect_failure=True)
    assert "does not exist" in result["msg"]


def test_require_mount(cache, tmp_path):
    failed = cache.run([], require_mount=str(tmp_path / "cache"), expect_failure=True)
    assert "is not a mount point" in failed["msg"] and not cache.root.exists()
    # the real mount point holding tmp_path is accepted
    real = os.path.realpath(str(tmp_path))
    mount = max((p for p in layout.mount_points() if real == p or real.startswith(p.rstrip("/") + "/")), key=len)
    result = cache.run([], require_mount=mount)
    assert result["changed"] is True and cache.root.is_dir()
    outside = cache.run_module(model_cache.main, dict(cache_dir=str(tmp_path / "cache" / "models"), models=[],
                                                      require_mount="/proc", lock_file=str(cache.lock)),
                               expect_failure=True)
    assert "not below require_mount" in outside["msg"]


def lock_state(path: Path) -> str:
    import fcntl
    with open(path) as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return "free"
        except OSError:
            return "held"


def test_node_lock_is_held(cache, monkeypatch):
    source, files = cache.source("m", {"a": b"x"})
    seen = []
    real = mc.ModelCache.apply

    def apply(self, state, actions):
        seen.append(lock_state(cache.lock))
        return real(self, state, actions)

    monkeypatch.setattr(mc.ModelCache, "apply", apply)
    cache.run([dict(name="m", version="1", source=source, files=files)])
    assert seen == ["held"]


def test_cache_lock_is_held_in_check_mode_too(cache, monkeypatch):
    source, files = cache.source("m", {"a": b"x"})
    seen = []
    real = mc.ModelCache.read

    def read(self):
        seen.append(lock_state(cache.lock))
        return real(self)

    monkeypatch.setattr(mc.ModelCache, "read", read)
    cache.run([dict(name="m", version="1", source=source, files=files)], check_mode=True)
    assert seen == ["held"]


def test_root_is_a_deprecated_alias_of_cache_dir(cache):
    source, files = cache.source("m", {"a": b"x"})
    args = cache.args([dict(name="m", version="1", source=source, files=files)])
    args["root"] = args.pop("cache_dir")
    result = cache.run_module(model_cache.main, args)
    assert result["models"][0]["status"] == "published"
    assert (cache.root / "m" / "1" / "a").read_bytes() == b"x"
    deprecations = [str(d) for d in ansible_warnings.get_deprecation_messages()]
    assert any("Alias 'root' is deprecated" in d for d in deprecations), deprecations


# --------------------------------------------------------------------------- bandwidth cap

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_bandwidth_limit_reaches_the_copy_loop(cache, monkeypatch):
    buckets = []
    real = transfer.TokenBucket

    def recording(rate, **kw):
        clock = FakeClock()
        bucket = real(rate, clock=clock, sleep=clock.sleep)
        buckets.append(bucket)
        return bucket

    monkeypatch.setattr(transfer, "TokenBucket", recording)
    data = blob(2 * MiB)
    source, files = cache.source("m", {"w": data})
    result = cache.run([dict(name="m", version="1", source=source, files=files)], bandwidth_limit=MiB)
    assert result["models"][0]["bytes_moved"] == len(data)
    assert buckets and buckets[0].rate == MiB
    assert buckets[0].slept == pytest.approx((len(data) - buckets[0].burst) / MiB, rel=0.01)
