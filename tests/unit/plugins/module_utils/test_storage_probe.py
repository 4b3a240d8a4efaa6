"""storage_probe backend: percentile math, fio argv and JSON (recorded), the built-in reader on
temporary files, O_DIRECT refusal, test-file creation and the model load probe.

fio outputs under tests/fixtures/measure/storage/ were recorded with fio-3.33 (see the .source
sidecars); the reader tests use real files in pytest's temporary directory, with direct=false
where the filesystem may refuse O_DIRECT.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _storage_probe as sp
from ansible_collections.aiinfra.datapath.plugins.module_utils import _storage_probe_fio as fio
from ansible_collections.aiinfra.datapath.plugins.module_utils import _storage_probe_io as io
from netfakes import FakeRunner

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "measure" / "storage"
MIB = 1024 * 1024


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def data_file(path: Path, size: int = 4 * MIB) -> Path:
    path.write_bytes(bytes(range(1, 256)) * (size // 255) + b"\x01" * (size % 255))
    return path


def children() -> list[str]:
    """PIDs of this process's children (every thread's), from procfs."""
    found: list[str] = []
    for task in Path("/proc/self/task").iterdir():
        found += (task / "children").read_text().split()
    return found


def direct_ok(path: Path) -> bool:
    try:
        os.close(os.open(str(path), os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False


# -- percentiles ------------------------------------------------------------------------------

def test_percentile_linear_between_closest_ranks() -> None:
    assert io.percentile([1, 2, 3, 4], 50) == 2.5
    assert io.percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert io.percentile(list(range(1, 101)), 50) == pytest.approx(50.5)
    assert io.percentile([7], 99) == 7
    assert io.percentile([3, 9], 0) == 3 and io.percentile([3, 9], 100) == 9
    assert io.percentile([], 50) is None
    with pytest.raises(ValueError):
        io.percentile([1], 101)


def test_latency_summary_units() -> None:
    samples = [40_000] * 98 + [300_000, 900_000]  # ns
    summary = io.latency_summary(samples, 2.0)
    assert summary == {"iops": 50.0, "p50_us": 40.0, "p99_us": 306.0, "ios": 100}
    assert io.latency_summary([], 1.0) == {"iops": 0.0, "p50_us": None, "p99_us": None, "ios": 0}


# -- fio --------------------------------------------------------------------------------------

def test_fio_argv_is_read_only_json_and_bounded() -> None:
    seq = fio.sequential_argv("/usr/bin/fio", "/dev/nvme0n1", True, 268435456, 1024)
    for flag in ("--output-format=json", "--readonly", "--direct=1", "--rw=read", "--bs=1024k",
                 "--size=268435456", "--ioengine=libaio", "--runtime=60000ms"):
        assert flag in seq
    rand = fio.random_argv("/usr/bin/fio", "/mnt/c:d/f", False, 8 * MIB, 32, 3.0)
    assert "--filename=/mnt/c\\:d/f" in rand and "--direct=0" in rand and "--iodepth=32" in rand
    assert "--time_based=1" in rand and "--runtime=3000ms" in rand and "--readonly" in rand
    psync = fio.random_argv("/usr/bin/fio", "/dev/sdb", True, 8 * MIB, 4, 1.0, engine="psync")
    assert "--numjobs=4" in psync and "--iodepth=1" in psync and "--group_reporting=1" in psync
    for name in ("fio-seq-libaio", "fio-randread-qd1-libaio", "fio-randread-qd32-libaio", "fio-randread-qd4-psync"):
        recorded = json.loads(fixture(name + ".json.argv"))
        assert "--readonly" in recorded and recorded[1] == "--output-format=json"


def test_fio_recorded_json() -> None:
    seq = fio.parse_job(fixture("fio-seq-libaio.json"))
    assert seq["bytes"] == 67108864 and seq["seconds"] == 0.156
    assert seq["mib_s"] == round(430185025 / MIB, 1) and seq["version"] == "fio-3.33"
    qd1 = fio.parse_job(fixture("fio-randread-qd1-libaio.json"))
    assert (qd1["iops"], qd1["p50_us"], qd1["p99_us"], qd1["ios"]) == (15980.0, 40.19, 296.96, 15996)
    qd32 = fio.parse_job(fixture("fio-randread-qd32-libaio.json"))
    assert (qd32["iops"], qd32["p50_us"], qd32["p99_us"]) == (94327.7, 317.44, 497.66)
    psync = fio.parse_job(fixture("fio-randread-qd4-psync.json"))
    assert (psync["iops"], psync["p50_us"], psync["p99_us"], psync["ios"]) == (46282.7, 63.23, 132.1, 46329)


def test_fio_clat_fallback_and_garbage() -> None:
    data = json.loads(fixture("fio-randread-qd1-libaio.json"))
    del data["jobs"][0]["read"]["lat_ns"]["percentile"]
    clat = data["jobs"][0]["read"]["clat_ns"]["percentile"]["50.000000"]
    assert fio.parse_job("note: something\n" + json.dumps(data))["p50_us"] == round(clat / 1000.0, 2)
    with pytest.raises(io.ProbeError, match="no JSON"):
        fio.parse_job("fio: command not found\n")
    with pytest.raises(io.ProbeError, match="not valid JSON"):
        fio.parse_job("{ broken")


def test_fio_error_is_a_reason() -> None:
    out, err = fixture("fio-missing-file.stdout"), fixture("fio-missing-file.stderr")
    runner = FakeRunner([lambda argv: (1, out, err)])
    result, why = fio.run_fio(runner, lambda engine: ["/usr/bin/fio", "--ioengine=" + engine])
    assert result is None
    assert why.startswith("fio exited 1: fio: pid=") and "error=No such file or directory" in why
    with pytest.raises(io.ProbeError, match="failed with error 2"):
        fio.parse_job(out)


def test_fio_falls_back_to_psync_when_libaio_cannot_load() -> None:
    out, err = fixture("fio-engine-missing.stdout"), fixture("fio-engine-missing.stderr")
    assert fio.engine_missing(out, err) and not fio.engine_missing(fixture("fio-missing-file.stdout"), "")
    runner = FakeRunner([lambda argv: (1, out, err) if "--ioengine=libaio" in argv else
                         (0, fixture("fio-randread-qd4-psync.json"), "")])
    result, why = fio.run_fio(runner, lambda engine: ["/usr/bin/fio", "--ioengine=" + engine])
    assert why is None and result["engine"] == "psync" and result["iops"] == 46282.7
    assert [call[1] for call in runner.calls] == ["--ioengine=libaio", "--ioengine=psync"]


# -- built-in reader --------------------------------------------------------------------------

def test_sequential_read_of_a_file(tmp_path: Path) -> None:
    path = data_file(tmp_path / "t.dat", 4 * MIB + 4096)
    result = io.sequential_read(str(path), False, 3 * MIB + 100, 1024 * 1024)
    assert result["bytes"] == 3 * MIB and result["truncated"] is False and result["mib_s"] > 0
    whole = io.sequential_read(str(path), False, 64 * MIB, 1024 * 1024)  # more than the file: stops at its end
    assert whole["bytes"] == 4 * MIB + 4096 and whole["truncated"] is True


def test_sequential_read_stops_at_the_time_limit(tmp_path: Path) -> None:
    path = data_file(tmp_path / "t.dat", 4 * MIB)
    result = io.sequential_read(str(path), False, 4 * MIB, 4096, time_limit=0.0)
    assert result["bytes"] == 4096 and result["truncated"] is True


def test_sequential_read_direct_where_the_filesystem_allows(tmp_path: Path) -> None:
    path = data_file(tmp_path / "t.dat", 2 * MIB)
    if not direct_ok(path):
        pytest.skip("this filesystem refuses O_DIRECT")
    assert io.sequential_read(str(path), True, 2 * MIB, 1024 * 1024)["bytes"] == 2 * MIB


@pytest.mark.parametrize("depth", [1, 4])
def test_random_read_reaps_every_worker(tmp_path: Path, depth: int) -> None:
    path = data_file(tmp_path / "t.dat", 2 * MIB)
    before = children()
    result = io.random_read(str(path), False, 2 * MIB, depth, 0.2, seed=7)
    assert result["ios"] > depth and result["iops"] > 0
    assert 0 < result["p50_us"] <= result["p99_us"]
    assert 0.2 <= result["seconds"] < 5
    assert children() == before


def test_random_read_failure_in_a_worker_is_a_reason(tmp_path: Path) -> None:
    path = data_file(tmp_path / "t.dat", 2 * MIB)
    before = children()
    with pytest.raises(io.ProbeError, match="short read"):
        io.random_read(str(path), False, 64 * MIB, 2, 0.2)  # claims a size the file does not have
    assert children() == before


def test_a_worker_stuck_past_the_window_is_killed_and_reaped(tmp_path: Path, monkeypatch) -> None:
    path = data_file(tmp_path / "t.dat", 2 * MIB)
    real_preadv = os.preadv

    def slow(fd, buffers, offset):  # runs in the forked workers: a read that takes 30 s
        time.sleep(30)
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(io, "JOIN_GRACE", 0.5)
    monkeypatch.setattr(io.os, "preadv", slow)
    before = children()
    started = time.monotonic()
    with pytest.raises(io.ProbeError, match="did not return within 0.5 s after the window; its worker was killed"):
        io.random_read(str(path), False, 2 * MIB, 3, 0.1)
    assert time.monotonic() - started < 5
    assert children() == before


def test_o_direct_refusal_is_reported(tmp_path: Path, monkeypatch) -> None:
    path = data_file(tmp_path / "t.dat", 2 * MIB)
    real_open = os.open

    def refusing(name, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", name)
        return real_open(name, flags, *args)

    monkeypatch.setattr(io.os, "open", refusing)
    with pytest.raises(io.ProbeError) as caught:
        io.sequential_read(str(path), True, MIB, MIB)
    assert "refuses O_DIRECT (EINVAL)" in str(caught.value) and "direct: false" in str(caught.value)
    assert io.sequential_read(str(path), False, MIB, MIB)["bytes"] == MIB


def test_unaligned_direct_read_is_a_reason_not_a_traceback() -> None:
    error = io._read_error("/x", OSError(errno.EINVAL, "Invalid argument"), True)
    assert "refuses O_DIRECT reads" in str(error)
    assert str(io._read_error("/x", OSError(errno.EIO, "Input/output error"), True)) == \
        "read error on /x: Input/output error"


# -- targets, test files, model load ----------------------------------------------------------

def target(path: str, create_size: int = 0, direct: bool = True) -> dict:
    return {"name": "t", "path": path, "create_size": create_size, "direct": direct}


def test_inspect_target_kinds_and_errors(tmp_path: Path) -> None:
    data_file(tmp_path / "big.dat", 2 * MIB)
    (tmp_path / "small.dat").write_bytes(b"x" * 4096)
    assert sp.inspect_target(target(str(tmp_path / "big.dat")))["kind"] == "file"
    assert "too small: 4096 bytes" in sp.inspect_target(target(str(tmp_path / "small.dat")))["error"]
    assert "No such file" in sp.inspect_target(target(str(tmp_path / "none.dat")))["error"]
    create = sp.inspect_target(target(str(tmp_path / "new.dat"), 2 * MIB))
    assert (create["kind"], create["size"], create["create"], create["error"]) == ("file", 2 * MIB, True, None)
    nodir = sp.inspect_target(target(str(tmp_path / "no" / "new.dat"), 2 * MIB))
    assert nodir["error"].endswith("its directory does not exist")
    assert "neither a block device nor a regular file" in sp.inspect_target(target(str(tmp_path)))["error"]
    assert "neither" in sp.inspect_target(target("/dev/null"))["error"]


def test_device_size_from_sysfs(tmp_path: Path) -> None:
    (tmp_path / "dev" / "block" / "7:3").mkdir(parents=True)
    (tmp_path / "dev" / "block" / "7:3" / "size").write_text("524288\n")

    class St:
        st_rdev = os.makedev(7, 3)
        st_mode = stat.S_IFBLK
    assert sp.device_size_from_sysfs(St(), str(tmp_path)) == 256 * MIB
    St.st_rdev = os.makedev(7, 4)
    assert sp.device_size_from_sysfs(St(), str(tmp_path)) is None


def test_create_test_file_is_non_zero_fsynced_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "probe.dat"
    sp.create_test_file(str(path), 3 * MIB + 5)
    data = path.read_bytes()
    assert len(data) == 3 * MIB + 5 and b"\x00" not in data
    path.write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        sp.create_test_file(str(path), MIB)
    assert path.read_bytes() == b"keep"


def model_dir(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    (root / "blobs").mkdir(parents=True)
    (root / "snapshots" / "main").mkdir(parents=True)
    data_file(root / "blobs" / "weights-1", 3 * MIB)
    data_file(root / "blobs" / "weights-2", MIB + 10)
    (root / "config.json").write_text('{"a": 1}\n')
    os.symlink("../../blobs/weights-1", root / "snapshots" / "main" / "model.safetensors")  # HF cache style
    os.symlink("/nonexistent/dangling", root / "snapshots" / "main" / "broken")
    os.symlink(str(tmp_path), root / "loop")  # a symlinked directory is not entered
    return root


def test_model_load_reads_each_file_once_cold(tmp_path: Path) -> None:
    root = model_dir(tmp_path)
    result = sp.model_load(str(root), False)
    assert result["ok"] is True and result["error"] is None
    assert result["files"] == 3 and result["bytes"] == 4 * MIB + 10 + 9
    assert result["seconds"] > 0 and result["mib_s"] > 0
    counted = sp.model_load(str(root), True)
    assert (counted["files"], counted["bytes"], counted["seconds"], counted["ok"]) == (3, 4 * MIB + 19, None, True)


def test_model_load_errors(tmp_path: Path) -> None:
    assert sp.model_load(str(tmp_path / "none"), False)["error"].endswith("is not a directory")
    (tmp_path / "empty").mkdir()
    empty = sp.model_load(str(tmp_path / "empty"), False)
    assert empty["ok"] is False and empty["error"].startswith("no files below")
