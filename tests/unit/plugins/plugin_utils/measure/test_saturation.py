"""Saturation sweeps (issue 41 point 1) on constructed curves: the knee is the load before the first
doubling that gains less than the share; a port shaped to 2 Gbit/s has its knee at 2 Gbit/s, a device
throttled to 2,000 IOPS at 2,000 IOPS; the sweep is in measure.json (schema), measure.md and an SVG."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from typing import Any

import jsonschema
import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.plan_measure import _doublings
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure import saturation as S
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure.report import reports

from ._data import RATE, Lab, probe

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5))
SCHEMA = os.path.join(REPO, "docs", "schema", "measure.schema.json")
STREAMS = [1, 2, 4, 8, 16]
PER_STREAM = 3.0  # Gbit/s one stream reaches on a healthy pair
PER_QD = 800.0  # IOPS per queue-depth step of a healthy device at low depth


def curve(values: list[float | None], xs: list[int] | None = None) -> list[dict[str, Any]]:
    return [{"x": x, "value": v} for x, v in zip(xs or STREAMS, values, strict=True)]


@pytest.mark.parametrize(("values", "knee_x", "saturated"), [
    ([3, 6, 12, 20, 20], 8, True),          # healthy: gains until 8 streams, then nothing
    ([2, 2, 2, 2, 2], 1, True),             # shaped: more streams buy nothing
    ([2, 2.09, 4, 8, 16], 1, True),         # the *first* doubling under 5 % is the knee
    ([2, 4, 8, 16, 32], 16, False),         # still gaining at the top: no knee
    ([None, 4, 8, 8.1, 8.1], 4, True),      # a failed point is skipped
    ([10, 9, 8, 7, 6], 1, True),            # a loss is a gain below the share
])
def test_knee_is_the_load_before_the_first_small_gain(values: list[float | None], knee_x: int,
                                                      saturated: bool) -> None:
    k = S.knee(curve(values))
    assert (k["knee_x"], k["saturated"]) == (knee_x, saturated)
    assert k["peak"] == max(v for v in values if v is not None)


def test_knee_share_is_configurable_and_empty_curves_have_none() -> None:
    values = [10, 11, 12.1, 13.3, 14.6]  # +10 % per doubling
    assert S.knee(curve(values), 0.05)["saturated"] is False
    assert S.knee(curve(values), 0.2)["knee_x"] == 1
    assert S.knee([])["knee_x"] is None


def test_doublings() -> None:
    assert S.doublings(1, 16) == _doublings(1, 16) == [1, 2, 4, 8, 16]
    assert S.doublings(4, 4096)[-1] == 4096 and len(S.doublings(4, 4096)) == 11
    assert S.doublings(1, 12) == _doublings(1, 12) == [1, 2, 4, 8, 12]
    with pytest.raises(ValueError):
        S.doublings(8, 4)


def sweep_lab(shaped: str | None = "node3", throttled: str | None = "node2", nodes: int = 4) -> Lab:
    lab = Lab(nodes)
    if shaped:
        lab.props[shaped]["rate"] = 2.0
    for part in lab.parts.values():
        part["saturation"] = {"enabled": True, "knee_share": 0.05, "streams": STREAMS}
    return lab


def with_sweeps(lab: Lab, throttled: str | None = "node2") -> tuple[dict[str, Any], dict[str, Any]]:
    schedule, hosts = lab.run()
    for rnd in schedule["rounds"]:
        for pair in rnd["pairs"]:
            cap = min(lab.props[pair["client"]].get("rate", RATE), lab.props[pair["server"]].get("rate", RATE))
            for n in STREAMS:
                rate = min(cap, PER_STREAM * n)
                for host, role in ((pair["client"], "client"), (pair["server"], "server")):
                    hosts[host].setdefault("sweep_net", []).append(
                        {"round": rnd["index"], "streams": n, "fabric": rnd["fabric"], "pair": pair["id"],
                         "role": role, "probe": {**probe(role, rate), "streams": n}, "error": None})
    for host in lab.nodes:
        cap = 2000.0 if host == throttled else 1e9
        hosts[host]["sweep_storage"] = {"targets": [
            {"name": "device", "path": "/dev/loopX", "ok": True, "error": None,
             "random": {str(q): {"iops": min(cap, PER_QD * q), "p50_us": 100.0, "p99_us": 200.0}
                        for q in (1, 2, 4, 8, 16, 32)},
             "sequential_by_block": {str(b): min(2000.0 if host == throttled else 4000.0, b * 10.0)
                                     for b in (4, 8, 16, 32, 64, 128, 256, 512, 1024)}}]}
    return schedule, hosts


def test_a_port_shaped_to_2_gbit_has_its_knee_at_2_gbit_and_healthy_pairs_at_full_rate() -> None:
    lab = sweep_lab()
    out = reports(*with_sweeps(lab))
    doc = json.loads(out["files"]["measure.json"])
    fab = doc["saturation"]["fabrics"]["rdma"]
    for p in fab["pairs"]:
        if "node3" in (p["client"], p["server"]):
            assert (p["knee_x"], p["knee_value"], p["saturated"]) == (1, 2.0, True)
        else:
            assert (p["knee_x"], p["knee_value"]) == (8, RATE)
    assert fab["nodes"]["node3"] == {"knee_gbit_s": 2.0, "knee_streams": 1}
    # ring 1->2, 2->3, 3->4, 4->1: node2 and node4 have a pair with node3, but their own best pair is healthy
    assert {h: n["knee_gbit_s"] for h, n in fab["nodes"].items()} == {"node1": RATE, "node2": RATE, "node3": 2.0,
                                                                      "node4": RATE}
    assert (fab["knee_x"], fab["saturated"]) == (8, True)  # the fabric's median curve


def test_a_device_throttled_to_2000_iops_has_its_queue_depth_knee_at_2000() -> None:
    doc = json.loads(reports(*with_sweeps(sweep_lab(shaped=None)))["files"]["measure.json"])
    rows = {r["host"]: r for r in doc["saturation"]["storage"]}
    qd = rows["node2"]["queue_depth"]
    # 800, 1600, 2000 (+25 %), 2000: the knee is at QD 4, 2,000 IOPS
    assert (qd["knee_x"], qd["knee_value"]) == (4, 2000.0)
    healthy = rows["node1"]["queue_depth"]
    assert healthy["saturated"] is False and healthy["peak"] == PER_QD * 32
    bs = rows["node2"]["block_size"]
    assert (bs["knee_x"], bs["knee_value"]) == (256, 2000.0)
    assert (rows["node1"]["block_size"]["knee_x"], rows["node1"]["block_size"]["knee_value"]) == (512, 4000.0)


def test_the_sweep_validates_and_is_in_markdown_and_svg() -> None:
    with open(SCHEMA) as handle:
        validator = jsonschema.Draft202012Validator(json.load(handle))
    out = reports(*with_sweeps(sweep_lab()), generated_at="2026-01-01T00:00:00Z")
    doc = json.loads(out["files"]["measure.json"])
    validator.validate(doc)
    assert doc["saturation"]["svgs"] == ["measure-saturation-fabric-rdma.svg", "measure-saturation-storage-qd.svg",
                                         "measure-saturation-storage-bs.svg"]
    for name in doc["saturation"]["svgs"]:
        root = ET.fromstring(out["files"][name])
        assert root.tag.endswith("svg") and root.findall(".//{http://www.w3.org/2000/svg}polyline")
    svg = out["files"]["measure-saturation-fabric-rdma.svg"]
    assert "knee 1: 2.00" in svg and "knee 8: 20.0" in svg
    md = out["files"]["measure.md"]
    assert "## Saturation" in md and "![rdma saturation](measure-saturation-fabric-rdma.svg)" in md
    assert "| node2->node3 | 2.00 | 2.00 | 2.00 | 2.00 | 2.00 | 1: 2.00 Gbit/s |" in md.replace("rdma:", "")
    assert "4: 2000 IOPS" in md
    assert out == reports(*with_sweeps(sweep_lab()), generated_at="2026-01-01T00:00:00Z")  # deterministic


def test_no_sweep_no_saturation_part() -> None:
    schedule, hosts = Lab(4).run()
    out = reports(schedule, hosts)
    doc = json.loads(out["files"]["measure.json"])
    assert doc["saturation"] is None and "## Saturation" not in out["files"]["measure.md"]
    assert not [n for n in out["files"] if n.startswith("measure-saturation")]


def test_a_failed_sweep_point_is_kept_with_its_error() -> None:
    lab = sweep_lab(shaped=None)
    schedule, hosts = with_sweeps(lab)
    for rec in hosts["node1"]["sweep_net"]:
        if rec["streams"] == 16 and rec["role"] == "client":
            rec["probe"] = {**rec["probe"], "ok": False, "error": "connect timed out", "gbit_per_s": None}
    doc = json.loads(reports(schedule, hosts)["files"]["measure.json"])
    pair = next(p for p in doc["saturation"]["fabrics"]["rdma"]["pairs"] if p["client"] == "node1")
    last = pair["points"][-1]
    assert last["value"] is None and "timed out" in last["error"] and pair["knee_x"] == 8
