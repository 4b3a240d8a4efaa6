"""checkpoint_probe (issue 41 point 3) on a real temporary filesystem: P writers with fsync, a cold,
verified read-back, a reader during the burst, the directory removed afterwards; refusals (an existing
directory, more than the share of free space) write nothing; check mode writes nothing."""

from __future__ import annotations

import os
from pathlib import Path

from ansible_collections.aiinfra.datapath.plugins.module_utils import _checkpoint_probe as cp
from ansible_collections.aiinfra.datapath.plugins.modules import checkpoint_probe

MIB = 1024 * 1024


def test_a_burst_writes_reads_back_verified_and_removes_its_directory(run_module, tmp_path: Path) -> None:
    reader = tmp_path / "probe.bin"
    reader.write_bytes(b"\x5a" * (4 * MIB))
    target = tmp_path / "ckpt"
    result = run_module(checkpoint_probe.main, {"directory": str(target), "writers": 3, "size": 6 * MIB,
                                                "block_kib": 256, "read_file": str(reader)})
    c = result["checkpoint"]
    assert result["changed"] is False and c["ok"] is True and c["error"] is None, c
    assert [w["bytes"] for w in c["writers"]] == [2 * MIB] * 3 and all(w["mib_s"] > 0 for w in c["writers"])
    slowest = min(c["writers"], key=lambda w: w["mib_s"])
    assert c["slowest_writer"] == {"index": slowest["index"], "mib_s": slowest["mib_s"], "seconds": slowest["seconds"]}
    assert c["longest_seconds"] == max(w["seconds"] for w in c["writers"])
    assert c["read_back"]["verified"] is True and c["read_back"]["bytes"] == 6 * MIB
    assert c["read_alone_mib_s"] > 0 and c["read_during_mib_s"] > 0 and c["read_ratio"] > 0
    assert c["removed"] is True and not target.exists() and sorted(os.listdir(tmp_path)) == ["probe.bin"]


def test_an_existing_directory_is_refused_and_left_alone(run_module, tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    target.mkdir()
    (target / "keep").write_text("mine")
    c = run_module(checkpoint_probe.main, {"directory": str(target), "writers": 1, "size": MIB})["checkpoint"]
    assert c["ok"] is False and "exists" in c["error"] and c["removed"] is None
    assert (target / "keep").read_text() == "mine"


def test_more_than_the_share_of_free_space_is_refused(run_module, tmp_path: Path) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    size = int(free * 0.5) // MIB * MIB
    c = run_module(checkpoint_probe.main, {"directory": str(tmp_path / "c"), "writers": 1, "size": size,
                                           "max_free_share": 0.2})["checkpoint"]
    assert c["ok"] is False and "max_free_share" in c["error"] and not (tmp_path / "c").exists()


def test_check_mode_writes_nothing(run_module, tmp_path: Path) -> None:
    result = run_module(checkpoint_probe.main, {"directory": str(tmp_path / "c"), "writers": 2, "size": 2 * MIB},
                        check_mode=True)
    assert result["checkpoint"]["would_write"] == {"files": 2, "bytes_per_file": MIB,
                                                   "directory": str(tmp_path / "c")}
    assert not (tmp_path / "c").exists()


def test_bad_parameters_fail_with_every_reason(run_module, tmp_path: Path) -> None:
    result = run_module(checkpoint_probe.main, {"directory": "rel/dir", "writers": 0, "size": 10, "block_kib": 6},
                        expect_failure=True)
    assert "must be an absolute path" in result["msg"] and "writers must be" in result["msg"]
    assert "block_kib" in result["msg"]


def test_summary_names_the_slowest_writer_and_the_longest_duration() -> None:
    figures = {"writers": [
        {"index": 0, "file": "a", "ok": True, "bytes": 4 * MIB, "seconds": 1.0, "mib_s": 4.0, "start": 10.0,
         "end": 11.0, "error": None},
        {"index": 1, "file": "b", "ok": True, "bytes": 4 * MIB, "seconds": 4.0, "mib_s": 1.0, "start": 10.0,
         "end": 14.0, "error": None}], "read_back": None, "read_during_mib_s": 50.0, "read_alone_mib_s": 200.0}
    out = cp.summarise(figures, 8 * MIB)
    assert out["slowest_writer"] == {"index": 1, "mib_s": 1.0, "seconds": 4.0} and out["longest_seconds"] == 4.0
    assert out["aggregate_mib_s"] == 2.0 and out["read_ratio"] == 0.25 and "start" not in out["writers"][0]
