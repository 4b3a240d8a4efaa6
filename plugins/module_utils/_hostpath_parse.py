# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers of the direct-path tools (stdlib only): ``gdsio`` (GPUDirect Storage: GPU direct vs CPU bounce)
and ``elbencho`` result tables, for the direct vs host path comparison (docs/measure.md).

Recorded outputs of both are the test fixtures (tests/fixtures/measure/hostpath, each with its source).
Neither tool is installed by the collection; where a node lacks one, the probe says so.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# gdsio -x: 0 GPUD (GPU direct), 1 CPUONLY, 2 CPU_GPU (bounce through host memory), ...
GDSIO_LINE = re.compile(
    r"IoType:\s*(?P<io_type>\S+)\s+XferType:\s*(?P<xfer_type>\S+)\s+Threads:\s*(?P<threads>\d+)\s+"
    r"DataSetSize:\s*(?P<done_kib>\d+)/(?P<dataset_kib>\d+)\(KiB\)\s+IOSize:\s*(?P<io_kib>\d+)\(KiB\)\s+"
    r"Throughput:\s*(?P<gib_s>[\d.]+)\s*GiB/sec,\s*Avg_Latency:\s*(?P<lat_us>[\d.]+)\s*usecs\s+"
    r"ops:\s*(?P<ops>\d+)\s+total_time\s+(?P<seconds>[\d.]+)\s*secs")
ELBENCHO_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>[\d.]+)s)?(?:(?P<ms>\d+)ms)?\Z")


def parse_gdsio(text):
    """Every result line of gdsio output: io_type, xfer_type, threads, bytes done and planned, io_kib,
    gib_s, avg_latency_us, ops, seconds."""
    out = []
    for match in GDSIO_LINE.finditer(text or ""):
        g = match.groupdict()
        out.append({"io_type": g["io_type"], "xfer_type": g["xfer_type"], "threads": int(g["threads"]),
                    "bytes": int(g["done_kib"]) * 1024, "dataset_bytes": int(g["dataset_kib"]) * 1024,
                    "io_kib": int(g["io_kib"]), "gib_s": float(g["gib_s"]), "avg_latency_us": float(g["lat_us"]),
                    "ops": int(g["ops"]), "seconds": float(g["seconds"])})
    return out


def gdsio_direct_vs_bounce(rows):
    """GPU direct (GPUD) over the CPU bounce (CPU_GPU) throughput per io type; None where one is missing."""
    out = {}
    for io_type in sorted(set(r["io_type"] for r in rows)):
        by = dict((r["xfer_type"], r["gib_s"]) for r in rows if r["io_type"] == io_type)
        direct, bounce = by.get("GPUD"), by.get("CPU_GPU")
        out[io_type] = {"gpud_gib_s": direct, "cpu_gpu_gib_s": bounce, "cpuonly_gib_s": by.get("CPUONLY"),
                        "ratio": round(direct / bounce, 4) if direct and bounce else None}
    return out


def _seconds(text):
    match = ELBENCHO_DURATION.match(text.strip())
    if not match or not any(match.groupdict().values()):
        return None
    g = dict((k, float(v)) for k, v in match.groupdict().items() if v)
    return round(g.get("h", 0) * 3600 + g.get("m", 0) * 60 + g.get("s", 0) + g.get("ms", 0) / 1000.0, 4)


def parse_elbencho(text):
    """``{OPERATION: {result type: {first, last}}}`` of an elbencho result table; elapsed times in seconds,
    the other figures as numbers. Keys: elapsed_s, iops, mib_s, total_mib (others kept by their name)."""
    names = {"Elapsed time": "elapsed_s", "IOPS": "iops", "Throughput MiB/s": "mib_s", "Total MiB": "total_mib"}
    out = {}
    operation = None
    for line in (text or "").splitlines():
        if not line.strip() or line.startswith("OPERATION") or line.startswith("==="):
            continue
        head, sep, values = line.partition(":")
        if not sep:
            continue
        if not line.startswith(" "):
            parts = head.split(None, 1)
            if len(parts) < 2:
                continue
            operation, kind = parts[0], parts[1].strip()
        else:
            kind = head.strip()
        if operation is None:
            continue
        cols = values.split()
        if len(cols) < 2:
            continue
        key = names.get(kind, kind)
        if key == "elapsed_s":
            first, last = _seconds(cols[0]), _seconds(cols[1])
        else:
            try:
                first, last = float(cols[0]), float(cols[1])
            except ValueError:
                continue
        out.setdefault(operation, {})[key] = {"first": first, "last": last}
    return out
