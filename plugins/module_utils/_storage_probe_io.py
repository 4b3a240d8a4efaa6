# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The built-in storage reader of ``storage_probe`` (stdlib only): reads, never writes.

* sequential: large ``preadv`` calls into one page-aligned buffer (an anonymous ``mmap``, which
  O_DIRECT accepts), from offset 0, until the byte budget or the time limit is spent;
* random: 4 KiB reads at 4 KiB-aligned random offsets, queue depth N = N workers each with its
  own aligned buffer doing one ``preadv`` at a time on the shared descriptor; every read's
  latency is taken with ``time.perf_counter_ns`` and the percentiles are computed over all
  samples of all workers. The workers are forked processes, not threads: with threads, a read
  that completes waits for the interpreter lock before its end is timed, and on a 2-core node
  that wait (up to the 5 ms switch interval) dominated p99 at queue depth 32;
* the page-cache helpers: ``posix_fadvise(POSIX_FADV_DONTNEED)`` on one descriptor drops that
  file's (or block device's) clean cached pages only, never the global ``drop_caches``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import array
import errno
import math
import mmap
import os
import random
import select
import signal
import time

BLOCK = 4096
MIB = 1024 * 1024
SEQ_TIME_LIMIT = 60.0  # seconds: the sequential pass stops here even if its bytes are not all read
JOIN_GRACE = 30.0  # seconds a random-read worker may take to finish its last read after the window


class ProbeError(Exception):
    """A target could not be read; the message is the reason the result carries."""


def percentile(sorted_values, pct):
    """The ``pct`` percentile (0-100) of ascending ``sorted_values``, linear between the closest
    ranks (numpy's default): p50 of [1, 2, 3, 4] is 2.5, p99 of 1..100 is 99.01. None if empty."""
    if not sorted_values:
        return None
    if not 0 <= pct <= 100:
        raise ValueError("percentile must be within 0-100, got %r" % (pct,))
    rank = (len(sorted_values) - 1) * pct / 100.0
    low, high = int(math.floor(rank)), int(math.ceil(rank))
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def latency_summary(samples_ns, seconds):
    """IOPS over ``seconds`` and p50/p99 in microseconds (two decimals) of the samples (ns)."""
    ordered = sorted(samples_ns)
    if not ordered or seconds <= 0:
        return {"iops": 0.0, "p50_us": None, "p99_us": None, "ios": len(ordered)}
    return {"iops": round(len(ordered) / seconds, 1),
            "p50_us": round(percentile(ordered, 50) / 1000.0, 2),
            "p99_us": round(percentile(ordered, 99) / 1000.0, 2),
            "ios": len(ordered)}


def open_target(path, direct):
    """A read-only descriptor on ``path`` (O_DIRECT when ``direct``); ProbeError with the reason."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if direct:
        flags |= os.O_DIRECT
    try:
        return os.open(path, flags)
    except OSError as exc:
        if direct and exc.errno == errno.EINVAL:
            raise ProbeError("%s refuses O_DIRECT (EINVAL): its filesystem does not support direct I/O; "
                             "set direct: false to read it through the page cache" % path)
        raise ProbeError("cannot open %s: %s" % (path, exc.strerror or exc))


def descriptor_size(fd):
    """Size in bytes of an open file or block device (seek to its end)."""
    return os.lseek(fd, 0, os.SEEK_END)


def drop_cached_pages(fd):
    """Drop the clean page-cache pages of this one file or device; False where the kernel refuses."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except (AttributeError, OSError):
        return False


def _read_error(path, exc, direct):
    if direct and exc.errno == errno.EINVAL:
        return ProbeError("%s refuses O_DIRECT reads (EINVAL: alignment or no direct I/O on this "
                          "filesystem); set direct: false" % path)
    return ProbeError("read error on %s: %s" % (path, exc.strerror or exc))


def sequential_read(path, direct, nbytes, block, time_limit=SEQ_TIME_LIMIT):
    """Read ``nbytes`` (rounded down to 4 KiB) from offset 0 in ``block``-byte preads.

    Returns bytes, seconds, mib_s and ``truncated`` (the time limit or the end of the target came
    first). Drops the target's cached pages first, so that a buffered read starts cold too.
    """
    nbytes -= nbytes % BLOCK
    block = max(BLOCK, block - block % BLOCK)
    fd = open_target(path, direct)
    buf = mmap.mmap(-1, block)
    view = memoryview(buf)
    total, truncated = 0, False
    try:
        drop_cached_pages(fd)
        limit_ns = int(time_limit * 1e9)
        start = time.perf_counter_ns()
        while total < nbytes:
            want = min(block, nbytes - total)
            try:
                got = os.preadv(fd, [view[:want]], total)
            except OSError as exc:
                raise _read_error(path, exc, direct)
            if got <= 0:
                truncated = True
                break
            total += got
            if time.perf_counter_ns() - start > limit_ns and total < nbytes:
                truncated = True
                break
        seconds = (time.perf_counter_ns() - start) / 1e9
    finally:
        view.release()
        buf.close()
        os.close(fd)
    mib_s = round(total / MIB / seconds, 1) if seconds > 0 else None
    return {"bytes": total, "seconds": round(seconds, 4), "mib_s": mib_s, "truncated": truncated}


def _random_worker(fd, blocks, seconds, seed, go, out):
    """Child process body: wait for the start signal, read 4 KiB at random aligned offsets until
    ``seconds`` have passed, write the latencies (ns, unsigned 64-bit) to ``out``. Returns the exit
    status: 0, 2 (a read failed; the errno follows as the first sample) or 3 (a short read)."""
    os.read(go, 1)  # EOF when the parent closes its end: every worker starts at once
    rng = random.Random(seed)
    buf = mmap.mmap(-1, BLOCK)
    view = memoryview(buf)
    samples = array.array("Q")
    status = 0
    deadline = time.perf_counter_ns() + int(seconds * 1e9)
    try:
        while True:
            offset = rng.randrange(blocks) * BLOCK
            began = time.perf_counter_ns()
            got = os.preadv(fd, [view], offset)
            ended = time.perf_counter_ns()
            if got != BLOCK:
                status = 3
                break
            samples.append(ended - began)
            if ended >= deadline:
                break
    except OSError as exc:
        samples = array.array("Q", [exc.errno or 0])
        status = 2
    data = samples.tobytes()
    while data:
        data = data[os.write(out, data):]
    return status


def _collect(pid, read_end, deadline):
    """The samples a worker wrote and its exit status; kills it (by its pid) past ``deadline``."""
    chunks = []
    late = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            late = True
            break
        ready = select.select([read_end], [], [], min(left, 1.0))[0]
        if not ready:
            continue
        chunk = os.read(read_end, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    while not late:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            late = True
            break
        time.sleep(0.01)
    if late:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return array.array("Q"), -9
    samples = array.array("Q")
    samples.frombytes(b"".join(chunks))
    return samples, os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1


def _kill_worker(pid, read_end):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except OSError:
        pass
    try:
        os.close(read_end)
    except OSError:
        pass


def random_read(path, direct, size, depth, seconds, seed=None):
    """4 KiB reads at random aligned offsets below ``size``, ``depth`` at a time, for ``seconds``.

    Queue depth N is N worker processes (forked, each with its own aligned buffer, one ``preadv``
    at a time on the shared descriptor), so that no interpreter lock sits between a read's
    completion and its timestamp; they start together on one signal and are all reaped (killed by
    pid if one outlives the window by 30 s). Returns iops, p50_us, p99_us, ios and seconds.
    """
    blocks = size // BLOCK
    if blocks < 1:
        raise ProbeError("%s is smaller than one 4 KiB block" % path)
    fd = open_target(path, direct)
    base = random.Random(seed).randrange(1 << 30) if seed is not None else random.randrange(1 << 30)
    workers = []
    go_read, go_write = os.pipe()
    try:
        drop_cached_pages(fd)
        for index in range(depth):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns into the caller's stack
                status = 1
                try:
                    os.close(go_write)
                    os.close(read_end)
                    status = _random_worker(fd, blocks, seconds, base + index, go_read, write_end)
                finally:
                    os._exit(status)
            os.close(write_end)
            workers.append((pid, read_end))
        os.close(go_read)
        go_read = None
        start = time.perf_counter_ns()
        os.close(go_write)  # start
        go_write = None
        deadline = time.monotonic() + seconds + JOIN_GRACE
        results = []
        while workers:
            pid, read_end = workers[0]
            results.append(_collect(pid, read_end, deadline))
            workers.pop(0)
        elapsed = (time.perf_counter_ns() - start) / 1e9
    finally:
        for end in (go_read, go_write):
            if end is not None:
                os.close(end)
        for pid, read_end in workers:  # only after a failure: kill and reap every worker started
            _kill_worker(pid, read_end)
        os.close(fd)
    samples = array.array("Q")
    for worker_samples, status in results:
        if status == 2:
            code = worker_samples[0] if worker_samples else 0
            raise _read_error(path, OSError(code, os.strerror(code) if code else "read failed"), direct)
        if status == 3:
            raise ProbeError("short read from %s: is it smaller than it says?" % path)
        if status == -9:
            raise ProbeError("a read of %s did not return within %g s after the window; its worker was "
                             "killed" % (path, JOIN_GRACE))
        if status != 0:
            raise ProbeError("a random-read worker for %s failed (status %s)" % (path, status))
        samples.extend(worker_samples)
    summary = latency_summary(samples, elapsed)
    summary["seconds"] = round(elapsed, 3)
    return summary
