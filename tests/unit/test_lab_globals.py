"""The lab's machine-wide record of global kernel state: first up records, last down restores.

The registry logic runs on real files (the registry, its lock, the labs' state directories)
under a temporary root; the kernel side (reading and writing /proc/sys) is replaced by a dict
here, and runs for real in tests/integration/test_lab.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "lab"))

from datapath_lab import core  # noqa: E402


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    state_root, run_root = tmp_path / "state", tmp_path / "run"
    state_root.mkdir()
    monkeypatch.setattr(core, "STATE_ROOT", str(state_root))
    monkeypatch.setattr(core, "RUN_ROOT", str(run_root))
    monkeypatch.setattr(core, "GLOBALS_REGISTRY", str(run_root / ".globals.json"))
    monkeypatch.setattr(core, "GLOBALS_LOCK", str(run_root / ".globals.lock"))
    values = {"vm/max_map_count": "65530"}
    monkeypatch.setattr(core, "snapshot_globals", lambda: dict(values))

    def restore(snapshot: dict[str, str]) -> list[str]:
        changed = [k for k, v in snapshot.items() if values.get(k) != v]
        values.update(snapshot)
        return changed

    monkeypatch.setattr(core, "restore_globals", restore)
    return values


def up(name: str) -> dict[str, str]:
    os.makedirs(os.path.join(core.STATE_ROOT, name))
    return core.acquire_globals(name)


def down(name: str) -> list[str]:
    restored = core.release_globals(name)
    os.rmdir(os.path.join(core.STATE_ROOT, name))
    return restored


def test_overlapping_labs_restore_in_any_order(kernel: dict[str, str]) -> None:
    assert up("a") == {"vm/max_map_count": "65530"}
    kernel["vm/max_map_count"] = "262144"             # a play on lab a raises it
    assert up("b") == {"vm/max_map_count": "65530"}   # b joins the record, not the raised value
    assert down("a") == []                             # a first: b is still up, nothing restored
    assert kernel["vm/max_map_count"] == "262144"
    assert down("b") == ["vm/max_map_count"]           # the last lab restores the host's value
    assert kernel["vm/max_map_count"] == "65530"
    assert not os.path.exists(core.GLOBALS_REGISTRY)


def test_reverse_order_and_a_lab_up_again(kernel: dict[str, str]) -> None:
    up("a")
    up("b")
    kernel["vm/max_map_count"] = "1"
    assert down("b") == []
    assert down("a") == ["vm/max_map_count"]
    kernel["vm/max_map_count"] = "70000"               # the host's own new value, no lab up
    assert up("c") == {"vm/max_map_count": "70000"}    # a new record
    assert json.loads(Path(core.GLOBALS_REGISTRY).read_text())["labs"] == ["c"]


def test_a_lab_gone_without_down_does_not_hold_the_record(kernel: dict[str, str]) -> None:
    up("a")
    up("b")
    os.rmdir(os.path.join(core.STATE_ROOT, "a"))       # a's state removed by hand
    kernel["vm/max_map_count"] = "5"
    assert down("b") == ["vm/max_map_count"]


def test_a_lab_from_before_the_record_restores_its_own_snapshot(kernel: dict[str, str]) -> None:
    kernel["vm/max_map_count"] = "7"
    assert core.release_globals("old", {"vm/max_map_count": "65530"}) == ["vm/max_map_count"]
    assert kernel["vm/max_map_count"] == "65530"


def test_up_twice_counts_once(kernel: dict[str, str]) -> None:
    up("a")
    core.acquire_globals("a")
    assert json.loads(Path(core.GLOBALS_REGISTRY).read_text())["labs"] == ["a"]
    kernel["vm/max_map_count"] = "9"
    assert down("a") == ["vm/max_map_count"]
