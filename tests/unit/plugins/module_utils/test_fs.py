"""_fs: HostRoot path mapping, atomic_write, node_lock."""

from __future__ import annotations

import os
import threading

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import (
    HostRoot,
    LockTimeout,
    atomic_write,
    node_lock,
)


def test_host_root_maps_below_root(tmp_path):
    host = HostRoot(str(tmp_path))
    assert host.path("/proc/sys/vm/swappiness") == str(tmp_path / "proc/sys/vm/swappiness")
    assert HostRoot("/").path("/etc/fstab") == "/etc/fstab"
    assert HostRoot(None).path("/etc") == "/etc"
    with pytest.raises(ValueError):
        host.path("relative/path")


def test_host_root_read_write_list(tmp_path):
    host = HostRoot(str(tmp_path))
    assert host.read("/nope") is None
    assert host.read("/nope", default="x") == "x"
    assert host.read_raw("/nope") is None
    assert host.listdir("/nope") == []
    (tmp_path / "d").mkdir()
    host.write("/d/f", "42\n")
    assert host.read("/d/f") == "42"
    assert host.read_raw("/d/f") == "42\n"
    assert host.exists("/d/f") and host.listdir("/d") == ["f"]


def test_atomic_write_replaces_with_mode_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "file.conf"
    atomic_write(str(target), "one\n", mode=0o600)
    assert target.read_text() == "one\n"
    assert target.stat().st_mode & 0o777 == 0o600
    atomic_write(str(target), b"two\n")
    assert target.read_text() == "two\n"
    assert target.stat().st_mode & 0o777 == 0o644
    assert os.listdir(target.parent) == ["file.conf"]


def test_atomic_write_failure_keeps_old_content(tmp_path, monkeypatch):
    target = tmp_path / "file.conf"
    target.write_text("old\n")

    def boom(src, dst):
        raise OSError("rename failed")
    monkeypatch.setattr(os, "rename", boom)
    with pytest.raises(OSError):
        atomic_write(str(target), "new\n")
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["file.conf"]


def test_node_lock_excludes_and_times_out(tmp_path):
    path = str(tmp_path / "run" / "lock")
    held = threading.Event()
    release = threading.Event()

    def holder():
        with node_lock(path):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(5)
    try:
        with pytest.raises(LockTimeout):
            with node_lock(path, timeout=0.3, poll=0.05):
                pass
    finally:
        release.set()
        thread.join()
    with node_lock(path, timeout=1):
        pass
