"""storage_probe through main(): real reads of temporary files, the one write (create_size),
check mode opening and creating nothing, parameter failures, fio from recorded JSON."""

from __future__ import annotations

import builtins
import errno
import json
import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _storage_probe_io as io
from ansible_collections.aiinfra.datapath.plugins.modules import storage_probe
from netfakes import FakeRunner, use

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "measure" / "storage"
MIB = 1024 * 1024
FIO = "/usr/bin/fio"
FAST = {"seq_bytes": 2 * MIB, "seq_block_kib": 256, "random_seconds": 0.2, "queue_depths": [1, 4]}


def data_file(path: Path, size: int = 4 * MIB) -> Path:
    path.write_bytes(b"\x5a" * size)
    return path


def no_tools(monkeypatch) -> FakeRunner:
    return use(monkeypatch, FakeRunner([], which={"fio": None}))


def test_builtin_reads_a_file(run_module, monkeypatch, tmp_path) -> None:
    runner = no_tools(monkeypatch)
    path = data_file(tmp_path / "t.dat")
    result = run_module(storage_probe.main, dict(FAST, targets=[{"name": "t", "path": str(path), "direct": False}]))
    assert result["changed"] is False and result["actions"] == [] and result["model_load"] is None
    [entry] = result["targets"]
    summary = (entry["kind"], entry["tool"], entry["ok"], entry["error"], entry["size"])
    assert summary == ("file", "builtin", True, None, 4 * MIB)
    assert entry["seq_read_mib_s"] > 0 and entry["seq_bytes_read"] == 2 * MIB and entry["would_read"] is None
    assert sorted(entry["random"]) == ["1", "4"]
    for figures in entry["random"].values():
        assert figures["iops"] > 0 and 0 < figures["p50_us"] <= figures["p99_us"]
    assert runner.calls == []


def test_create_size_creates_once_and_is_the_only_change(run_module, monkeypatch, tmp_path) -> None:
    no_tools(monkeypatch)
    path = tmp_path / "probe.dat"
    args = dict(FAST, targets=[{"name": "cache", "path": str(path), "create_size": 3 * MIB, "direct": False}],
                queue_depths=[1])
    first = run_module(storage_probe.main, args)
    assert first["changed"] is True
    assert first["actions"] == [{"kind": "file", "target": str(path), "before": None, "after": "3145728 bytes",
                                 "destructive": False, "reboot": False,
                                 "text": "create test file %s (3145728 bytes of non-zero data)" % path}]
    assert first["targets"][0]["ok"] is True and path.stat().st_size == 3 * MIB
    assert b"\x00" not in path.read_bytes()
    mtime = path.stat().st_mtime_ns
    second = run_module(storage_probe.main, args)
    assert second["changed"] is False and second["actions"] == [] and path.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(tmp_path)) == ["probe.dat"]


def test_check_mode_opens_and_creates_nothing(run_module, monkeypatch, tmp_path) -> None:
    no_tools(monkeypatch)
    existing = data_file(tmp_path / "t.dat")
    new = tmp_path / "new.dat"
    model = tmp_path / "model"
    model.mkdir()
    data_file(model / "weights", 2 * MIB)
    opened: list[str] = []
    real_os_open, real_open = os.open, builtins.open

    def os_open(path, flags, *args, **kwargs):
        opened.append(str(path))
        return real_os_open(path, flags, *args, **kwargs)

    def py_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", py_open)
    args = dict(FAST, targets=[{"name": "old", "path": str(existing)},
                               {"name": "new", "path": str(new), "create_size": 2 * MIB}],
                model={"path": str(model)})
    result = run_module(storage_probe.main, args, check_mode=True)
    monkeypatch.undo()
    assert [p for p in opened if p.startswith(str(tmp_path))] == []
    assert not new.exists() and sorted(os.listdir(tmp_path)) == ["model", "t.dat"]
    assert result["changed"] is True and [a["kind"] for a in result["actions"]] == ["file"]
    old, created = result["targets"]
    assert old["ok"] is True and old["seq_read_mib_s"] is None and old["random"] == {}
    assert old["would_read"] == {"seq_bytes": 2 * MIB, "seq_block_kib": 256, "random_block_kib": 4,
                                 "queue_depths": [1, 4], "random_seconds": 0.2, "create_size": 0}
    assert created["kind"] == "file" and created["would_read"]["create_size"] == 2 * MIB
    assert result["model_load"] == {"path": str(model), "files": 1, "bytes": 2 * MIB, "seconds": None,
                                    "mib_s": None, "ok": True, "error": None}


@pytest.mark.parametrize("args, message", [
    ({"targets": [{"name": "t", "path": "rel/t.dat"}]}, "targets[0] (t): path 'rel/t.dat' must be absolute"),
    ({"targets": [{"name": "t", "path": "/dev/loop0", "create_size": 4 * MIB}]},
     "targets[0] (t): create_size is for a test file; /dev/loop0 is a device path, which the probe never writes"),
    ({"targets": [{"name": "t", "path": "/x", "create_size": 10}]}, "create_size must be 0 or at least 1048576"),
    ({"targets": [{"name": "t", "path": "/x"}], "queue_depths": [0, 300]}, "queue depth 0, 300 is out of 1-256"),
    ({"targets": [{"name": "t", "path": "/x"}, {"name": "t", "path": "/y"}]}, "name is used more than once"),
    ({"targets": [{"name": "t", "path": "/x"}], "seq_block_kib": 6}, "seq_block_kib must be a multiple of 4"),
    ({"targets": [{"name": "t", "path": "/x"}], "random_seconds": 0}, "random_seconds must be within"),
    ({"model": {"path": "models/x"}}, "model.path 'models/x' must be absolute"),
    ({}, "nothing to probe: give targets, model or both"),
])
def test_bad_parameters_fail_the_module(run_module, monkeypatch, args, message) -> None:
    no_tools(monkeypatch)
    result = run_module(storage_probe.main, args, expect_failure=True)
    assert message in result["msg"]


def test_unreadable_targets_are_results_not_failures(run_module, monkeypatch, tmp_path) -> None:
    no_tools(monkeypatch)
    (tmp_path / "small.dat").write_bytes(b"x" * 8192)
    data_file(tmp_path / "t.dat")
    real_open = os.open

    def refusing(name, flags, *args):
        if flags & os.O_DIRECT and str(name).endswith("t.dat"):
            raise OSError(errno.EINVAL, "Invalid argument", name)
        return real_open(name, flags, *args)

    monkeypatch.setattr(io.os, "open", refusing)
    targets = [{"name": "gone", "path": str(tmp_path / "none.dat")},
               {"name": "small", "path": str(tmp_path / "small.dat")},
               {"name": "direct", "path": str(tmp_path / "t.dat")}]
    result = run_module(storage_probe.main, dict(FAST, targets=targets))
    gone, small, direct = result["targets"]
    assert gone["ok"] is False and gone["error"].startswith("cannot stat %s" % (tmp_path / "none.dat"))
    assert small["ok"] is False and "too small: 8192 bytes" in small["error"]
    assert direct["ok"] is False and "refuses O_DIRECT (EINVAL)" in direct["error"]
    assert direct["seq_read_mib_s"] is None and direct["random"] == {}


def fio_fake(monkeypatch) -> FakeRunner:
    answers = {"--rw=read": "fio-seq-libaio.json", "--iodepth=1": "fio-randread-qd1-libaio.json",
               "--iodepth=32": "fio-randread-qd32-libaio.json"}

    def handler(argv):
        if argv[0] != FIO:
            return None
        assert "--readonly" in argv and "--output-format=json" in argv
        for flag, name in answers.items():
            if flag in argv and (flag == "--rw=read") == ("--rw=read" in argv):
                return 0, (FIXTURES / name).read_text(), ""
        raise AssertionError(argv)
    return use(monkeypatch, FakeRunner([handler], which={"fio": FIO}))


def test_fio_results_have_the_same_shape(run_module, monkeypatch, tmp_path) -> None:
    runner = fio_fake(monkeypatch)
    path = data_file(tmp_path / "t.dat", 64 * MIB)
    args = dict(FAST, tool="fio", queue_depths=[32, 1, 32], targets=[{"name": "t", "path": str(path), "direct": False}])
    result = run_module(storage_probe.main, args)
    [entry] = result["targets"]
    assert entry["tool"] == "fio" and entry["ok"] is True
    assert entry["seq_read_mib_s"] == 410.3 and entry["seq_bytes_read"] == 64 * MIB
    assert entry["random"] == {"1": {"iops": 15980.0, "p50_us": 40.19, "p99_us": 296.96},
                               "32": {"iops": 94327.7, "p50_us": 317.44, "p99_us": 497.66}}
    assert len(runner.calls) == 3 and all("--direct=0" in call for call in runner.calls)
    assert f"--filename={path}" in runner.calls[0] and "--size=2097152" in runner.calls[0]
    assert "--size=67108864" in runner.calls[1]


def test_fio_missing_falls_back_with_a_warning(run_module, monkeypatch, tmp_path) -> None:
    no_tools(monkeypatch)
    path = data_file(tmp_path / "t.dat")
    result = run_module(storage_probe.main, dict(FAST, tool="fio", queue_depths=[1],
                                                 targets=[{"name": "t", "path": str(path), "direct": False}]))
    assert result["targets"][0]["tool"] == "builtin" and result["targets"][0]["ok"] is True
    assert result["warnings"] == ["storage_probe: fio is not installed on the node; the built-in reader is used"]


def test_fio_error_is_the_target_error(run_module, monkeypatch, tmp_path) -> None:
    out = (FIXTURES / "fio-missing-file.stdout").read_text()
    use(monkeypatch, FakeRunner([lambda argv: (1, out, "")], which={"fio": FIO}))
    path = data_file(tmp_path / "t.dat")
    result = run_module(storage_probe.main, dict(FAST, tool="fio", targets=[{"name": "t", "path": str(path)}]))
    entry = result["targets"][0]
    assert entry["ok"] is False and "error=No such file or directory" in entry["error"]
    json.dumps(result)  # plain data


def test_block_size_sweep_reads_once_per_size(run_module, monkeypatch, tmp_path) -> None:
    """seq_block_sizes_kib (the saturation sweep, issue 41): one sequential pass per block size."""
    no_tools(monkeypatch)
    path = data_file(tmp_path / "t.dat")
    result = run_module(storage_probe.main, dict(FAST, targets=[{"name": "t", "path": str(path), "direct": False}],
                                                 queue_depths=[1], seq_block_sizes_kib=[64, 4, 64]))
    [entry] = result["targets"]
    assert sorted(entry["sequential_by_block"], key=int) == ["4", "64"]
    assert all(v > 0 for v in entry["sequential_by_block"].values())
    plain = run_module(storage_probe.main, dict(FAST, targets=[{"name": "t", "path": str(path), "direct": False}],
                                                queue_depths=[1]))
    assert "sequential_by_block" not in plain["targets"][0]


def test_block_size_sweep_sizes_are_validated(run_module, monkeypatch, tmp_path) -> None:
    no_tools(monkeypatch)
    path = data_file(tmp_path / "t.dat")
    result = run_module(storage_probe.main, dict(FAST, targets=[{"name": "t", "path": str(path), "direct": False}],
                                                 seq_block_sizes_kib=[6]), expect_failure=True)
    assert "seq_block_sizes_kib 6" in result["msg"]
