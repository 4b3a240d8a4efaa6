"""metrics_textfile backend: rendering, checks, atomic write, check mode, diff, heartbeat, filesystems.

The module itself runs in-process through ``run_module`` (argument spec and check mode as Ansible
runs them); files go under ``tmp_path`` as the node root. promtool reads what this backend writes
in tests/interop/test_telemetry.py.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _metrics_textfile as mt
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.modules import metrics_textfile
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import telemetry

DIRECTORY = "/var/lib/node_exporter/textfile_collector"
HEARTBEAT = "aiinfra_datapath_converge_last_run_timestamp_seconds"


def family(name: str, samples: list[dict[str, Any]], help: str = "A figure.", type: str = "gauge") -> dict[str, Any]:
    return {"name": name, "help": help, "type": type, "samples": samples}


FAMILIES = [
    family("aiinfra_datapath_reboot_required", [{"value": 0}], "1 when a reboot is needed."),
    family("aiinfra_datapath_converge_capability_failed",
           [{"labels": {"capability": "sysctl_profile"}, "value": 1},
            {"labels": {"capability": "hugepages"}, "value": False}],
           "1 when the capability failed."),
]


def call(tmp_path: Path, check: bool = False, diff: bool = True, **params: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"source": "site", "metrics": FAMILIES, "directory": DIRECTORY, "heartbeat": None,
                            "state": "present", "filesystems": [], "root": str(tmp_path)}
    args.update(params)
    return run(mt.MetricsTextfile, args, Node(None, str(tmp_path), check, diff))


def prom(tmp_path: Path, source: str = "site") -> Path:
    return tmp_path / DIRECTORY.lstrip("/") / f"aiinfra_datapath_{source}.prom"


# ------------------------------------------------------------------ rendering
def test_render_help_type_and_samples_in_order() -> None:
    text = mt.render("site", mt.normalise(FAMILIES))
    assert text == (
        "# Written by aiinfra.datapath (metrics_textfile, source site). Do not edit.\n"
        "# HELP aiinfra_datapath_reboot_required 1 when a reboot is needed.\n"
        "# TYPE aiinfra_datapath_reboot_required gauge\n"
        "aiinfra_datapath_reboot_required 0\n"
        "# HELP aiinfra_datapath_converge_capability_failed 1 when the capability failed.\n"
        "# TYPE aiinfra_datapath_converge_capability_failed gauge\n"
        'aiinfra_datapath_converge_capability_failed{capability="sysctl_profile"} 1\n'
        'aiinfra_datapath_converge_capability_failed{capability="hugepages"} 0\n')


def test_label_values_and_help_are_escaped() -> None:
    families = [family("aiinfra_datapath_x_info", [{"labels": {"b": 'say "hi"\\now\nthen', "a": 7, "c": True},
                                                   "value": 1}], help="back\\slash\nnew line")]
    text = mt.render("site", mt.normalise(families))
    assert "# HELP aiinfra_datapath_x_info back\\\\slash new line\n" in text  # whitespace folded to one line
    assert 'aiinfra_datapath_x_info{a="7",b="say \\"hi\\"\\\\now\\nthen",c="true"} 1\n' in text


@pytest.mark.parametrize(("value", "text"), [
    (3, "3"), (True, "1"), (2.5, "2.5"), (1e10, "10000000000"), (0.1, "0.1"), (float("nan"), "NaN"),
    (float("inf"), "+Inf"), (float("-inf"), "-Inf"), ("42", "42"), (" 1.25 ", "1.25"), (1e-7, "1e-07"),
])
def test_values(value: Any, text: str) -> None:
    families = mt.normalise([family("aiinfra_datapath_v", [{"value": value}])])
    assert mt.render("s", families).splitlines()[-1] == f"aiinfra_datapath_v {text}"


def test_none_values_and_labels_are_left_out() -> None:
    families = mt.normalise([
        family("aiinfra_datapath_a", [{"labels": {"x": "1"}, "value": None},
                                      {"labels": {"x": "2", "y": None}, "value": 4}]),
        family("aiinfra_datapath_b", [{"value": None}]),
    ])
    text = mt.render("s", families)
    assert 'aiinfra_datapath_a{x="2"} 4' in text and 'x="1"' not in text
    assert "aiinfra_datapath_b" not in text  # no samples, no HELP


@pytest.mark.parametrize(("families", "message"), [
    ([family("node_load1", [{"value": 1}])], "must start with aiinfra_datapath_"),
    ([family("aiinfra_datapath_bad-name", [{"value": 1}])], "is not a Prometheus metric name"),
    ([family("aiinfra_datapath_a", [{"labels": {"__name": "x"}, "value": 1}])], "is not a label name"),
    ([family("aiinfra_datapath_a", [{"labels": {"1x": "x"}, "value": 1}])], "is not a label name"),
    ([family("aiinfra_datapath_a", [{"value": 1}]), family("aiinfra_datapath_a", [{"value": 2}])], "given twice"),
    ([family("aiinfra_datapath_a", [{"labels": {"x": 1}, "value": 1}, {"labels": {"x": "1"}, "value": 2}])],
     "labels {'x': '1'} are given twice"),
    ([family("aiinfra_datapath_a", [{"value": "fast"}])], "value 'fast' is not a number"),
    ([family("aiinfra_datapath_a", [{"value": 1}], type="histogram")], "type must be one of"),
    ([family("aiinfra_datapath_runs", [{"value": 1}], type="counter")], "a counter's name ends in _total"),
    ([family("aiinfra_datapath_runs_total", [{"value": -1}], type="counter")], "never negative"),
    ([family("aiinfra_datapath_a", [{"value": 1}], help=" ")], "help is required"),
    ([family("aiinfra_datapath_a_bucket", [{"value": 1}])], "belong to histograms"),
    (["aiinfra_datapath_a"], "must be a dict"),
])
def test_bad_families_are_refused_with_the_family_named(families: list[Any], message: str) -> None:
    with pytest.raises(mt.MetricsError, match="metrics_textfile: .*" + message.replace("(", r"\(")
                       .replace("{", r"\{").replace("[", r"\[")):
        mt.normalise(families)


def test_heartbeat_name_cannot_be_a_family() -> None:
    with pytest.raises(mt.MetricsError, match="given twice"):
        mt.normalise([family(HEARTBEAT, [{"value": 1}])], HEARTBEAT)


# ------------------------------------------------------------------ the runner
def test_write_atomic_0644_then_unchanged(tmp_path: Path) -> None:
    first = call(tmp_path)
    assert first["changed"] is True
    path = prom(tmp_path)
    assert path.read_text() == first["content"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [a["kind"] for a in first["actions"]] == ["directory", "file"]
    assert first["diff"][0]["before"] == "" and first["diff"][0]["after"] == first["content"]
    assert first["families"] == 2 and first["samples"] == 3
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    second = call(tmp_path)
    assert second["changed"] is False and second["actions"] == [] and "diff" not in second


def test_content_change_is_a_change_with_a_diff(tmp_path: Path) -> None:
    call(tmp_path)
    changed = [FAMILIES[0], family(FAMILIES[1]["name"], [{"labels": {"capability": "sysctl_profile"}, "value": 0}],
                                   FAMILIES[1]["help"])]
    result = call(tmp_path, metrics=changed)
    assert result["changed"] is True
    (entry,) = result["diff"]
    assert 'capability="sysctl_profile"} 1' in entry["before"] and 'capability="sysctl_profile"} 0' in entry["after"]
    assert prom(tmp_path).read_text() == result["content"]


def test_check_mode_predicts_and_writes_nothing(tmp_path: Path) -> None:
    predicted = call(tmp_path, check=True)
    assert predicted["changed"] is True and not prom(tmp_path).exists()
    assert not (tmp_path / DIRECTORY.lstrip("/")).exists()
    real = call(tmp_path)
    assert [a["text"] for a in real["actions"]] == [a["text"] for a in predicted["actions"]]
    assert real["content"] == predicted["content"]


def test_heartbeat_refreshes_without_a_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mt.time, "time", lambda: 1700000000.4)
    first = call(tmp_path, heartbeat=HEARTBEAT)
    assert first["changed"] is True
    assert f"{HEARTBEAT} 1700000000\n" in prom(tmp_path).read_text()
    monkeypatch.setattr(mt.time, "time", lambda: 1700000600.0)
    checked = call(tmp_path, heartbeat=HEARTBEAT, check=True)
    assert checked["changed"] is False and f"{HEARTBEAT} 1700000000\n" in prom(tmp_path).read_text()
    again = call(tmp_path, heartbeat=HEARTBEAT)
    assert again["changed"] is False and again["actions"] == []
    assert f"{HEARTBEAT} 1700000600\n" in prom(tmp_path).read_text()  # the run is seen
    changed = call(tmp_path, heartbeat=HEARTBEAT, metrics=FAMILIES[:1])
    assert changed["changed"] is True


def test_absent_removes_only_this_source(tmp_path: Path) -> None:
    call(tmp_path)
    call(tmp_path, source="audit")
    removed = call(tmp_path, state="absent")
    assert removed["changed"] is True and not prom(tmp_path).exists() and prom(tmp_path, "audit").exists()
    assert call(tmp_path, state="absent")["changed"] is False


@pytest.mark.parametrize(("params", "message"), [
    ({"source": "Site"}, "must be lowercase"),
    ({"source": "../x"}, "must be lowercase"),
    ({"heartbeat": "last_run"}, "heartbeat 'last_run' must be a metric name"),
    ({"filesystems": [{"path": "relative", "reserve_bytes": None}]}, "must be absolute"),
    ({"metrics": [family("aiinfra_datapath_cache_reserve_bytes", [{"value": 1}])],
      "filesystems": [{"path": "/mnt/cache", "reserve_bytes": None}]}, "must not name the filesystems"),
])
def test_bad_parameters_fail_before_anything_is_written(tmp_path: Path, params: dict[str, Any], message: str) -> None:
    result = call(tmp_path, **params)
    assert result["failed"] and message in result["msg"] and result["changed"] is False
    assert not (tmp_path / "var").exists()


def test_filesystems_are_measured_on_the_node(tmp_path: Path) -> None:
    cache = tmp_path / "mnt" / "model-cache"
    cache.mkdir(parents=True)
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "mountinfo").write_text(
        "22 1 259:1 / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
        "40 22 259:3 / /mnt/model-cache rw,noatime - xfs /dev/nvme1n1p1 rw\n")
    result = call(tmp_path, metrics=[], filesystems=[{"path": "/mnt/model-cache/", "reserve_bytes": 1 << 30},
                                                     {"path": "/mnt/other", "reserve_bytes": None}])
    st = os.statvfs(cache)
    text = result["content"]
    assert 'aiinfra_datapath_cache_filesystem_mounted{mountpoint="/mnt/model-cache"} 1\n' in text
    assert 'aiinfra_datapath_cache_filesystem_mounted{mountpoint="/mnt/other"} 0\n' in text
    size = st.f_blocks * st.f_frsize
    assert f'aiinfra_datapath_cache_filesystem_size_bytes{{mountpoint="/mnt/model-cache"}} {size}\n' in text
    assert 'aiinfra_datapath_cache_filesystem_free_bytes{mountpoint="/mnt/model-cache"} ' in text
    assert 'aiinfra_datapath_cache_reserve_bytes{mountpoint="/mnt/model-cache"} 1073741824\n' in text
    assert 'size_bytes{mountpoint="/mnt/other"}' not in text and 'reserve_bytes{mountpoint="/mnt/other"}' not in text


def test_filesystem_families_match_the_catalogue() -> None:
    for name, text in mt.FILESYSTEM_FAMILIES:
        assert telemetry.BY_NAME[name].help == text and name in telemetry.NODE_MEASURED


# ------------------------------------------------------------------ the module
def test_module_runs_with_check_mode_and_diff(tmp_path: Path, run_module: Any) -> None:
    args = {"source": "measure", "metrics": FAMILIES, "root": str(tmp_path), "directory": "/prom"}
    predicted = run_module(metrics_textfile.main, args, check_mode=True, diff=True)
    assert predicted["changed"] is True and predicted["diff"][0]["after"] == predicted["content"]
    assert not (tmp_path / "prom").exists()
    done = run_module(metrics_textfile.main, args)
    assert done["path"] == "/prom/aiinfra_datapath_measure.prom"
    assert (tmp_path / "prom" / "aiinfra_datapath_measure.prom").read_text() == done["content"]
    assert run_module(metrics_textfile.main, args)["changed"] is False
    failed = run_module(metrics_textfile.main, dict(args, metrics=[family("x", [{"value": 1}])]), expect_failure=True)
    assert "must start with aiinfra_datapath_" in failed["msg"]
