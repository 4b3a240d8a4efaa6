"""gdsio and elbencho parsers (issue 41 point 5) on verbatim recorded outputs (tests/fixtures/measure/hostpath,
each with a .source file naming where it was recorded)."""

from __future__ import annotations

import os

from ansible_collections.aiinfra.datapath.plugins.module_utils import _hostpath_parse as hp

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "..", "fixtures", "measure", "hostpath")


def fixture(name: str) -> str:
    assert os.path.exists(os.path.join(FIXTURES, name + ".source")), "every fixture names its source"
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def test_gdsio_lines_gpu_direct_cpu_bounce_and_cpu_only() -> None:
    rows = hp.parse_gdsio(fixture("gdsio-read-gpud-cpu-gpu-cpuonly.txt"))
    assert [r["xfer_type"] for r in rows] == ["GPUD", "CPU_GPU", "CPUONLY"]
    first = rows[0]
    assert (first["io_type"], first["threads"], first["io_kib"], first["gib_s"], first["avg_latency_us"],
            first["ops"], first["seconds"]) == ("READ", 4, 1024, 6.622534, 589.436984, 102380, 15.097011)
    assert first["bytes"] == 104837120 * 1024 and first["dataset_bytes"] == 104857600 * 1024
    ratio = hp.gdsio_direct_vs_bounce(rows)["READ"]
    assert ratio == {"gpud_gib_s": 6.622534, "cpu_gpu_gib_s": 6.573733, "cpuonly_gib_s": 6.478798,
                     "ratio": round(6.622534 / 6.573733, 4)}


def test_gdsio_garbage_is_no_rows() -> None:
    assert hp.parse_gdsio("gdsio: command not found\n") == [] and hp.parse_gdsio(None) == []
    assert hp.gdsio_direct_vs_bounce(hp.parse_gdsio(fixture("gdsio-read-gpud-cpu-gpu-cpuonly.txt"))[2:]) == {
        "READ": {"gpud_gib_s": None, "cpu_gpu_gib_s": None, "cpuonly_gib_s": 6.478798, "ratio": None}}


def test_elbencho_result_table_first_and_last_done() -> None:
    table = hp.parse_elbencho(fixture("elbencho-write-direct.txt"))
    assert table == {"WRITE": {"elapsed_s": {"first": 123.241, "last": 125.755},
                               "iops": {"first": 33395.0, "last": 33352.0},
                               "mib_s": {"first": 33395.0, "last": 33352.0},
                               "total_mib": {"first": 4115703.0, "last": 4194304.0}}}


def test_elbencho_durations() -> None:
    assert hp._seconds("2m3.241s") == 123.241 and hp._seconds("1h0m1s") == 3601.0 and hp._seconds("450ms") == 0.45
    assert hp._seconds("n/a") is None and hp.parse_elbencho("") == {}
