"""The measurement method of issue 41 on a real 4-node lab (``dp41``), through ``ansible-playbook``:

* saturation: node3's rdma port shaped to 2 Gbit/s and node2's NVMe throttled to 2,000 read IOPS in the
  same run; the streams sweep puts node3's knee at about 2 Gbit/s (the healthy nodes' far above), the
  queue-depth sweep node2's device knee at about 2,000 IOPS (the others' far above);
* two faults at once: a rate limit on node2's rdma port and 1 % loss on node3's at the same time:
  node2 is named node-link, node3 lossy-port, and no third node is named;
* baselines: record, 5 unchanged compare runs without a finding, then a shaped port named with its
  figure and both values.

Small sizes (a 256 MiB NVMe, 1 s steps); run under ``flock /tmp/datapath-lab.lock``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datapath_lab import Lab, LabConfig  # noqa: E402
from labtools import REPO, VENV_BIN, LabHandle, _lab_possible, spec_applied_then_restored  # noqa: E402

pytestmark = pytest.mark.lab

LAB_NAME = "dp41"
SITE = os.path.join(REPO, "playbooks", "site.yml")
MEASURE = os.path.join(REPO, "playbooks", "measure.yml")
SCHEMA = os.path.join(REPO, "docs", "schema", "measure.schema.json")
FABRIC = "rdma"
NODES = ("node1", "node2", "node3", "node4")
MEASURE_SPEC = {"mode": "ring", "duration": 2, "streams": 4, "storage": {"test_file_size": "32MiB"}}
SATURATION = {"enabled": True, "max_streams": 4, "step_duration": 1.5, "max_queue_depth": 32, "random_seconds": 1.0,
              "min_block_kib": 64, "max_block_kib": 1024}
RUN_VARS = {"measure_storage_seq_bytes": 16 << 20, "measure_storage_random_seconds": 0.5, "measure_wait": 10,
            "measure_fail": False, "measure_path_check": False}


def lab_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([os.path.join(VENV_BIN, "datapath-lab"), "--name", LAB_NAME, *args],
                          capture_output=True, text=True, check=check, timeout=120)


def lab_spec(inventory_dir: str, **measure: Any) -> dict[str, Any]:
    with open(os.path.join(inventory_dir, "group_vars", "all", "datapath.yml")) as handle:
        spec = yaml.safe_load(handle)["datapath"]
    for body in spec["hosts"].values():
        body["storage"]["filesystem"]["type"] = "ext4"  # xfs needs 300 MiB
    spec["measure"] = {**copy.deepcopy(MEASURE_SPEC), **measure}
    return spec


@pytest.fixture(scope="module")
def dp41(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    lab = Lab(LAB_NAME)
    inventory_dir = str(tmp_path_factory.mktemp("dp41-inventory"))
    try:
        state = lab.up(LabConfig(name=LAB_NAME, nodes=len(NODES), nvme_size="256M", inventory_dir=inventory_dir),
                       log=lambda *_: None)
        handle = LabHandle(lab, state)
        with spec_applied_then_restored(handle):
            result = handle.playbook(SITE, "--tags", "sysctl_profile,nvme_layout",
                                     extra_vars={"datapath": lab_spec(inventory_dir)})
            assert result.rc == 0, result.stdout[-4000:]
            yield handle
    finally:
        for node in NODES:
            for target in (FABRIC, "nvme"):
                lab_cli("impair", node, target, "--clear", check=False)
        lab.down(log=lambda *_: None)


def measure(lab: LabHandle, report_dir: Path, spec: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    result = lab.playbook(MEASURE, extra_vars={"datapath": lab_spec(lab.state["inventory_dir"], **(spec or {})),
                                               "measure_report_dir": str(report_dir), **RUN_VARS, **extra})
    assert (report_dir / "measure.json").exists(), result.stdout[-4000:] + result.stderr[-2000:]
    report = json.loads((report_dir / "measure.json").read_text())
    with open(SCHEMA) as handle:
        jsonschema.Draft202012Validator(json.load(handle)).validate(report)
    return report


def test_saturation_knees_at_the_shaped_rate_and_the_throttled_iops(dp41: LabHandle, tmp_path: Path) -> None:
    lab_cli("impair", "node3", FABRIC, "--rate", "2gbit")
    lab_cli("impair", "node2", "nvme", "--read-iops", "2000")
    try:
        report = measure(dp41, tmp_path, {"saturation": SATURATION})
    finally:
        lab_cli("impair", "node3", FABRIC, "--clear")
        lab_cli("impair", "node2", "nvme", "--clear")
    sat = report["saturation"]
    print("saturation:", json.dumps({"nodes": sat["fabrics"][FABRIC]["nodes"],
                                     "qd": {r["host"]: r["queue_depth"] for r in sat["storage"]
                                            if r["name"] == "device"}}, indent=1))
    nodes = sat["fabrics"][FABRIC]["nodes"]
    assert 1.4 <= nodes["node3"]["knee_gbit_s"] <= 2.1, nodes
    assert all(nodes[h]["knee_gbit_s"] > 3.0 for h in ("node1", "node2", "node4")), nodes
    shaped = [p for p in sat["fabrics"][FABRIC]["pairs"] if "node3" in (p["client"], p["server"])]
    assert shaped and all(p["saturated"] and p["knee_value"] <= 2.1 for p in shaped), shaped
    device = {r["host"]: r for r in sat["storage"] if r["name"] == "device"}
    qd = device["node2"]["queue_depth"]
    # blk-throttle dispatches in time slices: a little above 2,000 in a short window, slower at QD 1
    assert qd["saturated"] and 1500 <= qd["knee_value"] <= 2600 and qd["peak"] <= 2700, qd
    assert all(device[h]["queue_depth"]["peak"] > 3000 for h in ("node1", "node3", "node4")), device
    assert [pt["x"] for pt in qd["points"]] == [1, 2, 4, 8, 16, 32]
    assert [pt["x"] for pt in device["node1"]["block_size"]["points"]] == [64, 128, 256, 512, 1024]
    for name in sat["svgs"]:
        assert (tmp_path / name).exists()
    assert "## Saturation" in (tmp_path / "measure.md").read_text()


def test_two_faults_at_once_are_each_named_with_their_own_kind(dp41: LabHandle, tmp_path: Path) -> None:
    lab_cli("impair", "node2", FABRIC, "--rate", "200mbit")
    lab_cli("impair", "node3", FABRIC, "--loss", "1%")
    try:
        report = measure(dp41, tmp_path)
    finally:
        lab_cli("impair", "node2", FABRIC, "--clear")
        lab_cli("impair", "node3", FABRIC, "--clear")
    named = {(f["kind"], f["host"]) for f in report["findings"] if f["severity"] == "error" and f["kind"] != "gate"}
    print("two faults:", sorted(named))
    assert ("node-link", "node2") in named and ("lossy-port", "node3") in named, json.dumps(report["findings"])[:4000]
    assert {h for _k, h in named} == {"node2", "node3"}, named
    assert {f["host"] for f in report["findings"] if f["severity"] == "error"} <= {"node2", "node3"}


def test_baseline_record_then_unchanged_compares_pass_and_a_shaped_port_is_named(
        dp41: LabHandle, tmp_path: Path) -> None:
    """record twice, compare 5 times unchanged (no finding), then shape node4's port to a fifth of its
    baseline rate: node4 and rdma.best_gbit_s are named with both values. The lab's veth rates swing with
    the shared CPUs, so the lab runs with a 50 % tolerance and without storage."""
    base_dir = tmp_path / "baseline"
    extra = {"measure_baseline_dir": str(base_dir), "measure_storage": False, "measure_baseline_tolerance": 0.5}
    for i in range(2):
        measure(dp41, tmp_path / f"record{i}", measure_baseline="record", **extra)
    doc = json.loads((base_dir / "node4.json").read_text())
    assert len(doc["runs"]) == 2 and doc["kernel"] == [os.uname().release]
    baseline = doc["figures"][f"{FABRIC}.best_gbit_s"]["value"]
    for i in range(5):
        report = measure(dp41, tmp_path / f"compare{i}", measure_baseline="compare", **extra)
        assert report["baseline"]["mode"] == "compare"
        assert not [f for f in report["findings"] if f["kind"].startswith("baseline")], report["findings"]
    lab_cli("impair", "node4", FABRIC, "--rate", f"{max(50, int(baseline * 1000 * 0.2))}mbit")
    try:
        report = measure(dp41, tmp_path / "shaped", measure_baseline="compare", **extra)
    finally:
        lab_cli("impair", "node4", FABRIC, "--clear")
    regressions = [f for f in report["findings"] if f["kind"] == "baseline-regression"]
    print("baseline:", baseline, [(f["host"], f["evidence"]["figure"], f["evidence"]["value"]) for f in regressions])
    assert {(f["host"], f["evidence"]["figure"]) for f in regressions} == {("node4", f"{FABRIC}.best_gbit_s")}
    ev = regressions[0]["evidence"]
    assert ev["baseline"] == baseline and ev["value"] < baseline * 0.5 and ev["changed"] == {}


def test_checkpoint_burst_names_the_write_throttled_node_as_the_slowest_writer(dp41: LabHandle,
                                                                               tmp_path: Path) -> None:
    lab_cli("impair", "node2", "nvme", "--write-bps", "4M")
    try:
        burst = {"enabled": True, "writers": 2, "size": "24MiB", "direct": True}
        report = measure(dp41, tmp_path, {"checkpoint": burst})
    finally:
        lab_cli("impair", "node2", "nvme", "--clear")
    part = report["checkpoint"]
    print("checkpoint:", json.dumps(part, indent=1)[:3000])
    assert [r["host"] for r in part["hosts"]] == list(NODES)
    assert all(r["ok"] and r["verified"] and r["removed"] for r in part["hosts"]), part["hosts"]
    assert part["slowest"]["host"] == "node2" and part["longest"]["host"] == "node2"
    assert ("slow-writer", "node2") in {(f["kind"], f["host"]) for f in report["findings"]}
    for node in NODES:  # the burst's own directory is gone
        out = dp41.sh(node, "ls -A /mnt/model-cache/.aiinfra-measure/ 2>/dev/null || true").stdout.split()
        assert "checkpoint" not in out, (node, out)
