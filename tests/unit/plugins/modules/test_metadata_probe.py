"""metadata_probe (issue 41 point 4) on a real temporary filesystem: every operation of every set is
counted and timed, nothing is left behind; refusals and check mode write nothing."""

from __future__ import annotations

import os
from pathlib import Path

from ansible_collections.aiinfra.datapath.plugins.modules import metadata_probe


def test_sets_are_created_stated_read_unlinked_and_removed(run_module, tmp_path: Path) -> None:
    target = tmp_path / "meta"
    result = run_module(metadata_probe.main, {"directory": str(target), "width": 8, "sets": [
        {"name": "shards", "files": 4, "size": 1 << 20}, {"name": "dataset", "files": 300, "size": 4096}]})
    m = result["metadata"]
    assert result["changed"] is False and m["ok"] is True and m["removed"] is True, m
    assert [s["name"] for s in m["sets"]] == ["shards", "dataset"]
    for s in m["sets"]:
        assert sorted(s["ops"]) == ["create", "read", "stat", "unlink"]
        for op in s["ops"].values():
            assert op["ops"] == s["files"] and op["ops_s"] > 0 and 0 < op["p50_us"] <= op["p99_us"]
    assert not target.exists() and os.listdir(tmp_path) == []


def test_an_existing_directory_is_refused_and_left_alone(run_module, tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "keep").write_text("x")
    m = run_module(metadata_probe.main, {"directory": str(tmp_path / "meta")})["metadata"]
    assert m["ok"] is False and "exists" in m["error"] and (tmp_path / "meta" / "keep").exists()


def test_check_mode_and_bad_parameters(run_module, tmp_path: Path) -> None:
    m = run_module(metadata_probe.main, {"directory": str(tmp_path / "m")}, check_mode=True)["metadata"]
    assert [s["name"] for s in m["would_write"]] == ["shards", "dataset"] and not (tmp_path / "m").exists()
    bad = run_module(metadata_probe.main, {"directory": "x", "sets": [{"name": "a", "files": 0, "size": 1}]},
                     expect_failure=True)
    assert "absolute" in bad["msg"] and "files must be" in bad["msg"]
