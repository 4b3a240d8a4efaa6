# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""checkpoint_probe: a checkpoint burst on the cache filesystem (stdlib only).

P writers (forked processes, started together) each write ``size / writers`` bytes to a file of their
own with ``fsync``, the way a training job's ranks save a checkpoint; then each file's pages are dropped
(``posix_fadvise(POSIX_FADV_DONTNEED)`` on that file, never the global ``drop_caches``) and every file
is read back and compared with what was written (sha256). Reported: each writer's throughput and
duration, the slowest writer and the longest duration (the MLPerf Storage checkpoint rule: a
checkpoint is done when its last rank is), the read-back rate, and — with ``read_file`` — the rate of a
reader running during the burst against the same reader alone (does a checkpoint starve the readers
that feed the GPUs?).

Writes go only to ``directory``, which the probe creates (it must not exist) and removes afterwards,
also on failure; every file is opened relative to that directory's descriptor without following links.
The burst is refused when it would take more than ``max_free_share`` of the filesystem's free space.
Check mode says what would be written and writes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import mmap
import os
import select
import struct
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

MIB = 1024 * 1024
BLOCK = 4096
MAX_WRITERS = 64
WORKER_GRACE = 120.0
_RESULT = struct.Struct("=qdd32s")  # bytes, start, end, sha256


def _pattern(index, size):
    """A deterministic non-zero block for writer ``index`` (not all zeros: no filesystem shortcut)."""
    seed = hashlib.sha256(b"aiinfra-checkpoint-%d" % index).digest()
    return (seed * (size // len(seed) + 1))[:size]


def _aligned(size):
    buf = mmap.mmap(-1, size)
    return buf


def _open_flags(direct):
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    if direct:
        flags |= getattr(os, "O_DIRECT", 0)
    return flags


def _writer(dir_fd, name, nbytes, block, direct, index, go_read, out_fd):
    """Child: wait for the start signal, write, fsync, report (bytes, start, end, sha256)."""
    select.select([go_read], [], [], WORKER_GRACE)
    buf = _aligned(block)
    buf[:] = _pattern(index, block)
    digest = hashlib.sha256()
    fd = os.open(name, _open_flags(direct), 0o600, dir_fd=dir_fd)
    start = time.time()
    written = 0
    try:
        while written < nbytes:
            chunk = min(block, nbytes - written)
            view = memoryview(buf)[:chunk]
            n = os.write(fd, view)
            digest.update(view[:n])
            written += n
        os.fsync(fd)
    finally:
        os.close(fd)
    end = time.time()
    os.write(out_fd, _RESULT.pack(written, start, end, digest.digest()))
    return 0


def _reader(path, block, go_read, stop_read, out_fd):
    """Child: read ``path`` sequentially (pages dropped before each pass) until told to stop."""
    select.select([go_read], [], [], WORKER_GRACE)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    total, start = 0, time.time()
    try:
        while True:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            offset = 0
            while True:
                ready, _w, _x = select.select([stop_read], [], [], 0)
                if ready:
                    raise StopIteration
                data = os.pread(fd, block, offset)
                if not data:
                    break
                offset += len(data)
                total += len(data)
    except StopIteration:
        pass
    finally:
        os.close(fd)
    os.write(out_fd, _RESULT.pack(total, start, time.time(), b"\0" * 32))
    return 0


def _fork(target, *args):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into the caller's stack
        status = 1
        try:
            os.close(read_end)
            status = target(*(args + (write_end,)))
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    return pid, read_end


def _collect(pid, read_end, deadline):
    """Wait for one child (killed by pid past the deadline) and unpack its result (None when it failed)."""
    data = b""
    while len(data) < _RESULT.size:
        ready, _w, _x = select.select([read_end], [], [], max(0.0, deadline - time.time()))
        if not ready:
            break
        chunk = os.read(read_end, _RESULT.size - len(data))
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    if len(data) < _RESULT.size:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    os.waitpid(pid, 0)
    return _RESULT.unpack(data) if len(data) == _RESULT.size else None


def read_alone(path, block, seconds):
    """MiB/s of the reader alone for ``seconds`` (the comparison for the rate during the burst)."""
    go_read, go_write = os.pipe()
    stop_read, stop_write = os.pipe()
    pid, out = _fork(_reader, path, block, go_read, stop_read)
    os.write(go_write, b"go")
    time.sleep(seconds)
    os.write(stop_write, b"stop")
    result = _collect(pid, out, time.time() + WORKER_GRACE)
    for fd in (go_read, go_write, stop_read, stop_write):
        os.close(fd)
    return _rate(result)


def _rate(result):
    if result is None:
        return None
    nbytes, start, end, _digest = result
    return round(nbytes / MIB / (end - start), 2) if end > start else None


def read_back(dir_fd, name, block):
    """(bytes, seconds, sha256) of one file read cold: its pages dropped first."""
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    digest = hashlib.sha256()
    total = 0
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        start = time.time()
        while True:
            data = os.read(fd, block)
            if not data:
                break
            digest.update(data)
            total += len(data)
        seconds = time.time() - start
    finally:
        os.close(fd)
    return total, seconds, digest.digest()


def burst(directory, writers, size, block, direct, read_file=None, read_block=MIB):
    """Run one burst in ``directory`` (which must exist, be empty and be ours); returns the figures."""
    per = size // writers
    per -= per % BLOCK
    dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    names = ["rank-%03d.ckpt" % i for i in range(writers)]
    out = {"writers": [], "read_back": None, "read_during_mib_s": None, "read_alone_mib_s": None}
    go_read, go_write = os.pipe()
    stop_read, stop_write = os.pipe()
    children = []
    reader = None
    try:
        if read_file:
            out["read_alone_mib_s"] = read_alone(read_file, read_block, 1.0)
            reader = _fork(_reader, read_file, read_block, go_read, stop_read)
        for i, name in enumerate(names):
            children.append(_fork(_writer, dir_fd, name, per, block, direct, i, go_read))
        os.write(go_write, b"go" * (len(children) + 1))
        os.close(go_write)
        go_write = None
        deadline = time.time() + max(WORKER_GRACE, size / MIB)  # at least 1 MiB/s
        results = [_collect(pid, fd, deadline) for pid, fd in children]
        if reader:
            os.write(stop_write, b"stop")
            out["read_during_mib_s"] = _rate(_collect(reader[0], reader[1], time.time() + WORKER_GRACE))
        digests = {}
        for i, result in enumerate(results):
            if result is None:
                out["writers"].append({"index": i, "file": names[i], "ok": False, "bytes": None, "seconds": None,
                                       "mib_s": None, "error": "writer %d failed (no result)" % i})
                continue
            nbytes, start, end, digest = result
            digests[names[i]] = digest
            out["writers"].append({"index": i, "file": names[i], "ok": True, "bytes": nbytes,
                                   "seconds": round(end - start, 4), "start": start, "end": end,
                                   "mib_s": round(nbytes / MIB / (end - start), 2) if end > start else None,
                                   "error": None})
        total, seconds, verified = 0, 0.0, True
        for name, digest in sorted(digests.items()):
            nbytes, took, got = read_back(dir_fd, name, read_block)
            total += nbytes
            seconds += took
            verified = verified and got == digest
        out["read_back"] = {"bytes": total, "seconds": round(seconds, 4),
                            "mib_s": round(total / MIB / seconds, 2) if seconds > 0 else None,
                            "verified": verified and len(digests) == writers}
    finally:
        for fd in (go_read, go_write, stop_read, stop_write):
            if fd is not None:
                os.close(fd)
        for name in names:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except OSError:
                pass
        os.close(dir_fd)
    return out


def summarise(figures, size):
    ok = [w for w in figures["writers"] if w["ok"] and w["mib_s"] is not None]
    out = dict(figures)
    if ok:
        slowest = min(ok, key=lambda w: w["mib_s"])
        starts, ends = [w["start"] for w in ok], [w["end"] for w in ok]
        longest = max(w["seconds"] for w in ok)
        out.update(slowest_writer={"index": slowest["index"], "mib_s": slowest["mib_s"],
                                   "seconds": slowest["seconds"]},
                   longest_seconds=longest, burst_seconds=round(max(ends) - min(starts), 4),
                   aggregate_mib_s=round(sum(w["bytes"] for w in ok) / MIB / (max(ends) - min(starts)), 2)
                   if max(ends) > min(starts) else None)
    else:
        out.update(slowest_writer=None, longest_seconds=None, burst_seconds=None, aggregate_mib_s=None)
    during, alone = figures.get("read_during_mib_s"), figures.get("read_alone_mib_s")
    out["read_ratio"] = round(during / alone, 3) if during and alone else None
    for w in out["writers"]:
        w.pop("start", None)
        w.pop("end", None)
    out["size"] = size
    return out


class CheckpointProbe(Capability):
    """A checkpoint burst: P writers with fsync, pages dropped per file, read back (writes only its own directory)."""

    name = "checkpoint_probe"
    read_only = True  # no node lock: it changes nothing but its own directory, removed afterwards
    uses_root = False

    @classmethod
    def options(cls):
        return dict(
            directory=dict(type="str", required=True),
            writers=dict(type="int", default=4),
            size=dict(type="int", default=1073741824),
            block_kib=dict(type="int", default=1024),
            direct=dict(type="bool", default=False),
            max_free_share=dict(type="float", default=0.2),
            read_file=dict(type="str"),
        )

    def validate(self):
        p = self.params
        errors = []
        if not os.path.isabs(p["directory"]) or os.path.normpath(p["directory"]) in ("/", ""):
            errors.append("directory %r must be an absolute path below a filesystem, not /" % p["directory"])
        if not 1 <= p["writers"] <= MAX_WRITERS:
            errors.append("writers must be 1-%d" % MAX_WRITERS)
        if p["size"] < p["writers"] * MIB:
            errors.append("size must be at least 1 MiB per writer (%d bytes)" % (p["writers"] * MIB))
        if not 4 <= p["block_kib"] <= 65536 or p["block_kib"] % 4:
            errors.append("block_kib must be a multiple of 4 within 4-65536")
        if not 0 < p["max_free_share"] <= 0.9:
            errors.append("max_free_share must be within 0-0.9 (exclusive of 0)")
        if p.get("read_file") and not os.path.isabs(p["read_file"]):
            errors.append("read_file %r must be absolute" % p["read_file"])
        if errors:
            raise CapabilityError("checkpoint_probe: %s" % "; ".join(errors), errors=errors)

    def _refusal(self):
        """Why the burst may not run here (None when it may)."""
        p = self.params
        directory = os.path.normpath(p["directory"])
        parent = os.path.dirname(directory)
        if os.path.lexists(directory):
            return ("%s exists: the probe writes only into a directory it creates (remove it, or name a new one)"
                    % directory)
        if not os.path.isdir(parent) or os.path.islink(parent):
            return "the parent %s is not a directory (or is a link)" % parent
        st = os.statvfs(parent)
        free = st.f_bavail * st.f_frsize
        if p["size"] > p["max_free_share"] * free:
            return ("a checkpoint of %d bytes is more than max_free_share %g of the %d bytes free on %s: lower size "
                    "or raise max_free_share" % (p["size"], p["max_free_share"], free, parent))
        return None

    def read(self):
        p = self.params
        state = {"directory": os.path.normpath(p["directory"]), "writers": p["writers"], "size": p["size"],
                 "direct": p["direct"], "ok": False, "error": self._refusal(), "removed": None,
                 "would_write": None}
        if state["error"]:
            return state
        if self.check_mode:
            state["ok"] = True
            state["would_write"] = {"files": p["writers"], "bytes_per_file": p["size"] // p["writers"],
                                    "directory": state["directory"]}
            return state
        os.mkdir(state["directory"], 0o700)
        try:
            figures = burst(state["directory"], p["writers"], p["size"], p["block_kib"] * 1024, p["direct"],
                            p.get("read_file"))
            state.update(summarise(figures, p["size"]))
            failed = [w["error"] for w in state["writers"] if not w["ok"]]
            state["ok"] = not failed and bool(state["read_back"] and state["read_back"]["verified"])
            state["error"] = "; ".join(failed) or (None if state["ok"] else "read-back differs from what was written")
        except OSError as exc:
            state["error"] = "checkpoint burst in %s: %s" % (state["directory"], exc.strerror or exc)
        finally:
            try:
                os.rmdir(state["directory"])
                state["removed"] = True
            except OSError as exc:
                state["removed"] = False
                state["error"] = (state["error"] or "") + "; could not remove %s: %s" % (state["directory"], exc)
        return state

    def result(self, state, actions):
        return {"checkpoint": state, "changed": False}
