# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fio as the reader of ``storage_probe`` (stdlib only): argv lists and JSON parsing.

Every fio job runs with ``--readonly`` (fio refuses to write anything, and never lays out a
file), ``--output-format=json``, the target's O_DIRECT choice (``--direct=1`` by default) and a
``--runtime`` bound. Latency percentiles are fio's total latency (``lat_ns``, issue to
completion, asked for with ``--lat_percentiles=1``), which is what the built-in reader measures
around each ``preadv``; completion latency (``clat_ns``) is the fallback for an older fio.
Queue depth N is ``--iodepth=N`` with ``libaio``, or ``--numjobs=N --thread`` with ``psync`` where
libaio is not available.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.aiinfra.datapath.plugins.module_utils._storage_probe_io import (
    MIB,
    SEQ_TIME_LIMIT,
    ProbeError,
)

ENGINES = ("libaio", "psync")


def escape_filename(path):
    """fio splits --filename at ':'; a literal colon is written ``\\:``."""
    return path.replace(":", "\\:")


def _common(fio, job, path, direct, size, engine):
    return [fio, "--output-format=json", "--readonly", "--name=%s" % job,
            "--filename=%s" % escape_filename(path), "--direct=%d" % (1 if direct else 0),
            "--ioengine=%s" % engine, "--size=%d" % size, "--invalidate=1",
            "--lat_percentiles=1", "--percentile_list=50:99"]


def sequential_argv(fio, path, direct, nbytes, block_kib, engine="libaio", time_limit=SEQ_TIME_LIMIT):
    """One pass of ``nbytes`` from offset 0 in ``block_kib`` KiB reads, at most ``time_limit`` s."""
    return _common(fio, "seq", path, direct, nbytes, engine) + [
        "--rw=read", "--bs=%dk" % block_kib, "--iodepth=1", "--runtime=%dms" % int(time_limit * 1000)]


def random_argv(fio, path, direct, size, depth, seconds, engine="libaio"):
    """4 KiB random reads over ``size`` bytes at queue depth ``depth`` for ``seconds``."""
    argv = _common(fio, "randread-qd%d" % depth, path, direct, size, engine) + [
        "--rw=randread", "--bs=4k", "--time_based=1", "--runtime=%dms" % max(1, int(seconds * 1000)),
        "--norandommap=1", "--randrepeat=0"]
    if engine == "libaio":
        argv.append("--iodepth=%d" % depth)
    else:
        argv += ["--iodepth=1", "--numjobs=%d" % depth, "--thread=1", "--group_reporting=1"]
    return argv


def engine_missing(out, err):
    """True when fio says the I/O engine cannot be loaded (fall back to psync)."""
    text = "%s\n%s" % (out or "", err or "")
    return "engine" in text and ("not loadable" in text or "failed to load" in text)


def load_json(text):
    """fio's JSON document from its stdout (fio may print notes before the ``{``)."""
    text = text or ""
    start = text.find("{")
    if start < 0:
        raise ProbeError("fio printed no JSON: %s" % (text.strip().splitlines() or ["(nothing)"])[-1])
    try:
        data = json.loads(text[start:])
    except (ValueError, RecursionError) as exc:
        raise ProbeError("fio output is not valid JSON: %s" % exc)
    if not isinstance(data, dict):
        raise ProbeError("fio output is not a JSON object")
    return data


def _field(obj, key, kind, what):
    """``obj[key]`` when it is a ``kind`` (None when absent or null); ProbeError otherwise."""
    value = obj.get(key)
    if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    raise ProbeError("fio JSON: %s.%s is %r, not a %s" % (what, key, value, getattr(kind, "__name__", "number")))


def _number(obj, key, what):
    value = _field(obj, key, (int, float), what) or 0
    if not abs(value) <= 1e18:  # NaN, infinity, or an integer no float holds
        raise ProbeError("fio JSON: %s.%s is %r, not a plausible figure" % (what, key, value))
    return value


def _pct_us(read, pct):
    for key in ("lat_ns", "clat_ns"):
        table = _field(_field(read, key, dict, "read") or {}, "percentile", dict, "read." + key) or {}
        for name in table:
            try:
                at = float(name)
            except ValueError:
                raise ProbeError("fio JSON: percentile %r is not a number" % (name,))
            if abs(at - pct) < 1e-6:
                return round(_number(table, name, "read.%s.percentile" % key) / 1000.0, 2)
    return None


def parse_job(text):
    """The read side of fio's first (or only, with group_reporting) job: bytes, seconds, mib_s,
    iops, p50_us, p99_us, ios, and fio's version. ProbeError when fio reports a job error or
    prints a document of another shape (a field of an unexpected type)."""
    data = load_json(text)
    jobs = _field(data, "jobs", list, "document") or []
    if not jobs:
        raise ProbeError("fio JSON has no jobs")
    job = jobs[0]
    if not isinstance(job, dict):
        raise ProbeError("fio JSON: jobs[0] is %r, not an object" % (job,))
    if job.get("error"):
        raise ProbeError("fio job %s failed with error %s" % (job.get("jobname"), job.get("error")))
    read = _field(job, "read", dict, "jobs[0]") or {}
    seconds = _number(read, "runtime", "read") / 1000.0
    nbytes = _number(read, "io_bytes", "read")
    latency = _field(read, "lat_ns", dict, "read") or _field(read, "clat_ns", dict, "read") or {}
    return {"bytes": nbytes, "seconds": seconds,
            "mib_s": round(_number(read, "bw_bytes", "read") / float(MIB), 1),
            "iops": round(float(_number(read, "iops", "read")), 1),
            "p50_us": _pct_us(read, 50.0), "p99_us": _pct_us(read, 99.0),
            "ios": int(_number(latency, "N", "read latency") or _number(read, "total_ios", "read")),
            "version": data.get("fio version")}


def fio_complaint(out, err):
    """fio's own "fio: ..." lines (before its JSON, and on stderr), most telling first."""
    text = (out or "").split("{", 1)[0] + "\n" + (err or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line for line in lines if "error=" in line] + [line for line in lines if "error=" not in line]
    if said:
        return "; ".join(said[:2])
    try:
        parse_job(out)
    except ProbeError as exc:
        return str(exc)
    return "no message"


def run_fio(runner, make_argv):
    """Run one fio job built by ``make_argv(engine)``: libaio first, psync where fio cannot load
    libaio. Returns (result, None) or (None, reason); result["engine"] says which engine ran."""
    for engine in ENGINES:
        rc, out, err = runner.run(make_argv(engine), check=False)
        if rc != 0 and engine != ENGINES[-1] and engine_missing(out, err):
            continue
        if rc != 0:
            return None, "fio exited %s: %s" % (rc, fio_complaint(out, err))
        try:
            result = parse_job(out)
        except ProbeError as exc:
            return None, str(exc)
        result["engine"] = engine
        return result, None
    return None, "fio could not load an I/O engine"
