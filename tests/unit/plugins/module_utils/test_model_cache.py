"""The model cache's layout on disk and its capability (read -> plan -> apply) run directly
through the contract's runner, without AnsibleModule."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import cache as mc
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import layout
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import ModelCacheError
from model_data import blob, sha

MiB = 1 << 20


# --------------------------------------------------------------------------- layout

def test_mountinfo_escapes(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text("36 35 98:0 / /mnt/model\\040cache rw,noatime master:1 - xfs /dev/md127 rw\n")
    assert "/mnt/model cache" in layout.mount_points(str(info))


def test_check_mount_names_cache_dir(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text("36 35 98:0 / %s rw - xfs /dev/md127 rw\n" % (tmp_path / "mnt"))
    (tmp_path / "mnt").mkdir()
    layout.check_mount(str(tmp_path / "mnt" / "models"), str(tmp_path / "mnt"), str(info))
    with pytest.raises(ModelCacheError, match="cache_dir .* is not below require_mount"):
        layout.check_mount(str(tmp_path / "elsewhere"), str(tmp_path / "mnt"), str(info))
    with pytest.raises(ModelCacheError, match="is not a mount point"):
        layout.check_mount(str(tmp_path / "mnt"), str(tmp_path), str(info))


ITEM = dict(name="m", version="1", source="/srv/m", manifest=None)


def publish_by_hand(cache: layout.CacheDir, files: dict[str, bytes], meta: bool = True) -> list[dict]:
    entries = []
    for rel, data in files.items():
        path = Path(cache.version_dir("m", "1"), rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        entries.append(dict(path=rel, sha256=sha(data), size=len(data)))
    if meta:
        cache.write_meta(ITEM, None, entries)
    return entries


def test_existing_version_states(tmp_path):
    cache = layout.CacheDir(str(tmp_path / "models"))
    files = [dict(path="w", sha256=sha(b"data"), size=4)]
    assert cache.existing(ITEM, files) == ("missing", None)
    publish_by_hand(cache, {"w": b"data"}, meta=False)
    assert cache.existing(ITEM, files) == ("adopt", None)  # files without metadata: verified by sha256
    cache.write_meta(ITEM, None, files)
    assert cache.existing(ITEM, files) == ("present", None)
    Path(cache.version_dir("m", "1"), "w").write_bytes(b"DATA")
    # same size, but not the file that was verified (mtime, ctime): the cheap check re-hashes it
    assert cache.existing(ITEM, files) == ("corrupt", "w has sha256 %s, expected %s" % (sha(b"DATA"), sha(b"data")))
    state, reason = cache.existing(ITEM, files, verify="sha256")
    assert state == "corrupt" and reason.startswith("w has sha256 %s" % sha(b"DATA"))
    other = [dict(path="w", sha256=sha(b"else"), size=4)]
    assert cache.existing(ITEM, other) == ("corrupt", "published metadata lists other files or checksums")


def test_installed_pointer_and_eviction(tmp_path):
    cache = layout.CacheDir(str(tmp_path / "models"))
    publish_by_hand(cache, {"a": b"1234", "d/b": b"56"})
    Path(cache.version_dir("hand", "made")).mkdir(parents=True)  # no metadata: never listed, never evicted
    cache.switch("m", "1")
    assert os.readlink(cache.pointer("m")) == "1" and cache.current("m") == "1"
    [version] = cache.installed()
    assert (version["name"], version["version"], version["bytes"], version["current"]) == ("m", "1", 6, True)
    assert version["last_used"] > 0
    cache.evict("m", "1")
    assert cache.current("m") is None and not os.path.exists(cache.version_dir("m", "1"))
    assert not os.path.exists(cache.meta_path("m", "1")) and cache.installed() == []
    assert os.path.isdir(cache.version_dir("hand", "made"))


def test_touch_updates_last_used_only(tmp_path):
    cache = layout.CacheDir(str(tmp_path / "models"))
    publish_by_hand(cache, {"a": b"x"})
    meta = cache.meta("m", "1")
    meta["last_used"] = "2001-01-01T00:00:00Z"
    Path(cache.meta_path("m", "1")).write_text(json.dumps(meta))
    cache.touch(ITEM)
    after = cache.meta("m", "1")
    assert after["last_used"] > "2001-01-01T00:00:00Z"
    assert dict(after, last_used=None) == dict(meta, last_used=None)


# --------------------------------------------------------------------------- the capability

def params(tmp_path: Path, models: list[dict], **extra) -> dict:
    args = dict(cache_dir=str(tmp_path / "cache" / "models"), models=models,
                lock_file=str(tmp_path / "run" / "model-cache.lock"))
    args.update(extra)
    checked = ArgumentSpecValidator(**mc.ModelCache.module_spec()).validate(args)
    assert not checked.error_messages, checked.error_messages
    return checked.validated_parameters


def source(tmp_path: Path, name: str, data: bytes) -> dict:
    base = tmp_path / "src" / name
    base.mkdir(parents=True)
    (base / "w.bin").write_bytes(data)
    return dict(source=str(base), files=[dict(path="w.bin", sha256=sha(data), size=len(data))])


def test_spec_and_lock(tmp_path):
    spec = mc.ModelCache.argument_spec()
    assert spec["cache_dir"]["aliases"] == ["root"]
    assert spec["cache_dir"]["deprecated_aliases"] == [dict(name="root", version="1.0.0",
                                                            collection_name="aiinfra.datapath")]
    assert mc.ModelCache.name == "model_cache"
    capability = mc.ModelCache(params(tmp_path, []), Node(None))
    assert capability.lock_file() == str(tmp_path / "run" / "model-cache.lock")


@pytest.mark.parametrize("extra, fragment", [
    (dict(cache_dir="relative/models"), "cache_dir must be an absolute path"),
    (dict(reserve_bytes=-1), "reserve_bytes must not be negative"),
    (dict(dir_mode="0x755"), "dir_mode '0x755' is not an octal mode"),
    (dict(pinned=["nover"]), "name@version"),
])
def test_validation_fails_before_anything_is_read(tmp_path, extra, fragment):
    result = run(mc.ModelCache, params(tmp_path, [], **extra), Node(None))
    assert result["failed"] is True and fragment in result["msg"]
    assert not (tmp_path / "run").exists()  # not even the lock


def test_plan_order_and_check_mode(tmp_path, monkeypatch):
    (tmp_path / "cache").mkdir()
    capacity = 1 << 30
    monkeypatch.setattr(mc, "free_bytes", lambda path: capacity - layout.tree_bytes(str(tmp_path / "cache")))
    monkeypatch.setattr(mc, "fs_bytes", lambda path: capacity)  # the default reserve: 1 % of it
    old = source(tmp_path, "old", blob(8 * MiB, seed=1))
    assert not run(mc.ModelCache, params(tmp_path, [dict(name="m", version="0", **old)]), Node(None)).get("failed")
    new = source(tmp_path, "new", blob(4 * MiB, seed=2))
    free = mc.free_bytes(str(tmp_path / "cache"))
    result = run(mc.ModelCache, params(tmp_path, [dict(name="m", version="1", **new)], reserve_bytes=free),
                 Node(None, check_mode=True, diff=True))
    used = layout.CacheDir(str(tmp_path / "cache" / "models")).meta("m", "0")["last_used"]
    # m@0 is m's current version: m's pointer is switched anyway, so the eviction adds no pointer removal
    assert [a["text"] for a in result["actions"]] == [
        "evict m@0 (%d bytes, last used %s)" % (8 * MiB, used),
        "fetch m@1 from %s: 1 files, %d bytes to move" % (new["source"], 4 * MiB),
        "switch m/current: 0 -> 1",
    ]
    assert result["evicted"] == [dict(name="m", version="0", bytes=8 * MiB)]
    assert result["models"][0]["status"] == "would_publish"
    assert result["diff"] == [dict(before_header="current versions", after_header="current versions",
                                   before="m/current = 0\n", after="m/current = 1\n")]
    assert os.readlink(tmp_path / "cache" / "models" / "m" / "current") == "0"  # check mode: nothing done


def test_only_last_used_is_no_change(tmp_path):
    (tmp_path / "cache").mkdir()
    model = dict(name="m", version="1", **source(tmp_path, "m", b"x"))
    first = run(mc.ModelCache, params(tmp_path, [model]), Node(None))
    assert first["changed"] is True and [a["kind"] for a in first["actions"]] == ["create", "fetch", "switch"]
    again = run(mc.ModelCache, params(tmp_path, [model]), Node(None, diff=True))
    assert again["changed"] is False and again["actions"] == [] and "diff" not in again
    assert again["models"][0]["status"] == "present"
