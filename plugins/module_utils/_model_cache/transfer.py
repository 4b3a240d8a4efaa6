# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model cache transfer (stdlib only): the verified copy of one file into its ``.part``.

From a local file (:func:`kernel_copy`) the kernel copies (copy_file_range, else sendfile) chunk
by chunk while a reader thread reads each chunk back from the destination for a hasher thread, so
the digest is of the bytes written and the data is not copied through Python on the way in. The
copy runs ahead of the hashing (which is the slower of the two) and is fsynced as soon as it is complete,
so that the flush to the disk overlaps the hashing of the last chunks (bench/bench_copy_variants.py
times the alternatives side by side, bench/bench_model_cache.py compares it with ``cp`` + ``sync``).

From anything else the copy loop is a two-stage pipeline over a pool of small buffers: a
reader thread fills a buffer from the source (``readinto``: socket ``recv_into`` or file ``read``)
and feeds it to sha256 while it is still in the CPU's cache, the calling thread writes it. Both
stages release the GIL (socket I/O, OpenSSL's sha256 above 2 KiB, ``write``), so on a node with
a few cores they overlap and verifying costs little over a plain copy. Both copies make what
they wrote durable every ``WRITEBACK_EVERY`` bytes, in a thread of their own (:class:`_Syncer`),
so that the final fsync has little left. A token bucket caps the bytes read per second.

:class:`Transfer` adds what one run needs around it: retries of transient source errors,
resume of a partial file (re-hashed locally, then ``Range``), and the final check of size
and sha256.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import os
import queue
import socket
import stat
import threading
import time

from http.client import HTTPException

from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import safe
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import (
    PART,
    ModelCacheError,
    TransferError,
)

CHUNK = 8 << 20            # bytes per call of the kernel copy
# bytes per buffer of the stream copy, and buffers in flight: small enough that the 4 MiB in flight
# stay in the CPU's cache between the reader, the hasher and the writer (8 MiB buffers in the same
# three threads were 0.6x curl + sync over HTTP on the lab; 256 KiB with the reader hashing: 0.85x)
STREAM_CHUNK = 256 << 10
STREAM_BUFFERS = 16
KERNEL_AHEAD = 64          # chunks the kernel copy of a local file may run ahead of its read-back
READ_BACK = 1 << 20        # bytes the kernel copy's reader reads back (pread) for its hasher at a time
READ_BUFFERS = 8           # buffers of READ_BACK bytes between the kernel copy's reader and hasher
# the queues that hand buffers from thread to thread: the C one, without a Condition of its own
HANDOFF = queue.SimpleQueue
# make what was written durable in the background (fdatasync, in a thread of its own: _Syncer) every
# this many bytes, so that the flush to the disk overlaps the copy instead of following it. (Before:
# sync_file_range every 256 MiB in the writing thread, which started the writeback but left the
# device flush, on the lab the host's write-out of the node's disk image, to the final fsync)
WRITEBACK_EVERY = 128 << 20
# the same for the kernel copy of a local file (every 512 MiB was within the noise in a node with
# direct I/O, rounds of 1.13-1.22 s against 1.12-1.20 s for 2 GiB in two make bench runs each, and
# slower on the host's disk in two runs of three: bench_copy_variants' kernel_wb512)
KERNEL_WRITEBACK_EVERY = WRITEBACK_EVERY
# where a copy's time goes, along its critical path (the ``split`` the copies add to; the module's
# ``stage_seconds``): waiting for the source, the kernel copy of a local source (read and write in
# one step), hashing, waiting for the cache's disk (writes behind, flushes), the bandwidth cap's
# sleeps; ``other`` (requests, opening files, retries' pauses) is what the run's time leaves
STAGES = ("source", "copy", "hash", "disk", "limit", "other")


def _libc_sync_file_range():
    """``sync_file_range(2)`` through ctypes (the standard library has no wrapper), or None."""
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        func = libc.sync_file_range
        func.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
        func.restype = ctypes.c_int
        return func
    except (OSError, AttributeError, ImportError):
        return None


_SYNC_FILE_RANGE = _libc_sync_file_range()
SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd, offset, length):
    """Ask the kernel to start writing ``length`` bytes at ``offset`` back to disk, without
    waiting (SYNC_FILE_RANGE_WRITE). The copies' step before :class:`_Syncer`, which
    bench/bench_copy_variants.py still times. A no-op where sync_file_range is unavailable."""
    if _SYNC_FILE_RANGE is not None and length > 0:
        _SYNC_FILE_RANGE(fd, offset, length, SYNC_FILE_RANGE_WRITE)


def flush_written(fd):
    """What was written to ``fd`` so far, on the disk (the syncer's step; a name of its own for tests)."""
    os.fdatasync(fd)


def drop_cached(fd, end):
    """Let the page cache drop ``fd``'s clean pages below byte ``end`` (POSIX_FADV_DONTNEED): the
    part of the copy that is on the disk and hashed. Advisory: an error changes nothing."""
    if end > 0 and hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, 0, end, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass


class _Syncer(object):
    """Makes a file durable while it is being written: ``written(total)`` after each write; every
    ``every`` bytes a thread of its own runs fdatasync (requests that come while one runs are
    merged into the next), so that the writer never waits for the disk and the final fsync finds
    little left. ``close()`` waits for the running one and returns its error, if any: the kernel
    reports a write-back error once per open file, so an error the syncer saw would otherwise be
    missing from the final fsync. ``every`` 0: never (no thread).

    After each flush the pages it made durable leave the page cache (:func:`drop_cached`; ``base``:
    the file offset the copy started at; ``hashed()``: the bytes hashed so far, where the hashing
    reads the copy back and follows the writing): a copy keeps about ``every`` bytes cached instead
    of the whole file. The copy reuses the pages it just freed instead of taking fresh memory for
    every byte, which costs little on a node with free memory but up to three times the copy's
    time on a VM whose free memory is handed back to its host (free page reporting: the first
    touch of such memory faults it back in); and a warm-up of a model larger than the node's
    memory does not push the node's working set out of the page cache. Who loads the model later
    reads it from the local disk, the cache's purpose."""

    def __init__(self, fd, every, base=0, hashed=None):
        self.fd = fd
        self.every = every
        self.base = base
        self.hashed = hashed
        self.asked = 0
        self.cond = threading.Condition()
        self.pending = False
        self.closing = False
        self.error = None
        self.thread = None

    def written(self, total):
        """Called after each write with the bytes written so far; raises the error of a background
        flush, so that the copy stops at the first one."""
        if not self.every or total - self.asked < self.every:
            return
        self.asked = total
        with self.cond:
            if self.error is not None:
                raise self.error
            self.pending = True
            self.cond.notify()
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="model-cache-sync")
            self.thread.daemon = True
            self.thread.start()

    def _run(self):
        while True:
            with self.cond:
                while not self.pending and not self.closing:
                    self.cond.wait()
                if not self.pending:
                    return
                self.pending = False
                durable = self.asked  # written before the flush starts: on the disk once it returns
            try:
                flush_written(self.fd)
            except OSError as exc:
                with self.cond:
                    self.error = exc
                return
            drop_cached(self.fd, self.base + (durable if self.hashed is None else min(durable, self.hashed())))

    def close(self):
        if self.thread is not None:
            with self.cond:
                self.closing = True
                self.pending = False  # the caller's own fsync follows
                self.cond.notify()
            self.thread.join()
            self.thread = None
        return self.error


# --------------------------------------------------------------------------- bandwidth cap

class TokenBucket(object):
    """Token bucket of ``rate`` bytes/s with a burst of ``burst`` bytes.

    ``consume(n)`` sleeps until ``n`` bytes may pass; ``slept`` is the total sleep asked
    for, so that tests can check the cap without timing the wall clock.
    """

    def __init__(self, rate, burst=None, clock=time.monotonic, sleep=time.sleep):
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(rate // 4, 64 << 10))
        self.clock = clock
        self.sleep = sleep
        self.tokens = self.burst
        self.stamp = clock()
        self.slept = 0.0

    def consume(self, amount):
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= amount
        if self.tokens < 0:
            wait = -self.tokens / self.rate
            self.slept += wait
            self.sleep(wait)
            # the debt is paid by the time we wake up
            self.stamp = self.clock()
            self.tokens = 0.0
            return wait
        return 0.0


# --------------------------------------------------------------------------- files

def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs(path, mode):
    """Create ``path`` and missing parents with ``mode`` (not subject to the umask)."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        makedirs(parent, mode)
    try:
        os.mkdir(path, mode)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
    os.chmod(path, mode)


def hash_file(path, chunk=CHUNK):
    with open(path, "rb", buffering=0) as handle:
        return hash_fd(handle.fileno(), chunk)


def hash_fd(fd, chunk=CHUNK):
    """(sha256, size) of the file open at ``fd``, read from byte 0 with pread (its position is
    left as it is)."""
    digest = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    size = 0
    while True:
        n = os.preadv(fd, [buf], size)
        if not n:
            break
        digest.update(view[:n])
        size += n
    return digest, size


# --------------------------------------------------------------------------- copy pipeline

class _Stop(object):
    """Sentinel closing a pipeline queue; carries the reader's exception, if any."""

    def __init__(self, error=None):
        self.error = error


def stream_copy(stream, fd, digest, limit=None, bucket=None, space_check=None, chunk=STREAM_CHUNK,
                buffers=STREAM_BUFFERS, split=None, hash_thread=True):
    """Copy ``stream`` to ``fd``, updating ``digest`` with every byte written.

    Three stages over ``buffers`` reused buffers of ``chunk`` bytes, each in a thread of its own:
    a reader fills a buffer from the source, a hasher hashes it, and this thread (the writer)
    writes it and hands it back. A buffer reaches the writer only after it was hashed, and in
    order, so the digest is of exactly the bytes written. (``hash_thread`` False: the reader
    hashes each buffer itself, as before; on the lab over HTTP that took 1.75 s for 2 GiB where
    the hasher of its own took 1.46 s, median of 5 interleaved rounds: reading from the socket
    and hashing no longer take turns in one thread.) ``limit``: bytes to copy at most (None: to
    EOF). ``bucket``: a TokenBucket. ``space_check(n)``: called before writing n bytes; raises
    to stop. Returns bytes copied. Exceptions of the reader (source errors) are raised here after
    the data read before them has been hashed and written, so that a retry resumes from the right
    offset with a digest of exactly the bytes written.

    ``split``: a dict (:data:`STAGES`) to which the copy adds where its time went, along the
    reader's path, which is the copy's: ``source`` (in ``readinto``), ``hash`` (hashing in the
    reader, or waiting for a free buffer while most of the buffers wait for the hasher),
    ``limit`` (the bucket's sleeps) and ``disk`` (waiting for a free buffer while the writes are
    behind); after the source ended, the hasher's last buffers count as ``hash`` and the rest of
    the tail (the last writes, the running flush) as ``disk``.
    """
    if bucket is not None:
        chunk = int(max(64 << 10, min(chunk, bucket.rate // 4)))
    clock = time.perf_counter
    spent = dict.fromkeys(("source", "hash", "disk", "limit"), 0.0)  # the reader's; read after join
    ended = []  # when the reader stopped: the tail follows
    hashed = []  # when the hasher stopped
    count = {"read": 0, "hashed": 0, "written": 0}  # buffers past each stage
    free = HANDOFF()
    for _buffer in range(buffers):
        free.put(bytearray(chunk))
    to_hash = HANDOFF() if hash_thread else None
    to_write = HANDOFF()
    stop = threading.Event()

    def reader():
        remaining = limit
        error = None
        try:
            while not stop.is_set():
                began = clock()
                buf = free.get()
                if buf is None:
                    break
                want = chunk if remaining is None else min(chunk, remaining)
                if want <= 0:
                    free.put(buf)
                    break
                view = memoryview(buf)[:want]
                got = clock()
                # a wait for a free buffer counts for the stage that holds more of the others,
                # the one being worked on included: it is behind (each count has one writer)
                behind = "hash" if count["read"] - count["hashed"] > count["hashed"] - count["written"] else "disk"
                spent[behind] += got - began
                n = stream.readinto(view)
                read = clock()
                spent["source"] += read - got
                if not n:
                    free.put(buf)
                    break
                if to_hash is not None:
                    count["read"] += 1
                    to_hash.put((buf, n))
                else:
                    digest.update(view[:n])  # hashed before it is queued: the writer writes what was hashed
                    spent["hash"] += clock() - read
                    count["read"] += 1
                    count["hashed"] += 1
                    to_write.put((buf, n))
                if bucket is not None:
                    spent["limit"] += bucket.consume(n)
                if remaining is not None:
                    remaining -= n
        except BaseException as exc:  # handed to the writer
            error = exc
        ended.append(clock())
        (to_write if to_hash is None else to_hash).put(_Stop(error))

    def hasher():
        failure = None
        while True:
            item = to_hash.get()
            if isinstance(item, _Stop):
                hashed.append(clock())
                to_write.put(item if failure is None else _Stop(failure))
                return
            buf, n = item
            if failure is None:
                try:
                    digest.update(memoryview(buf)[:n])
                except BaseException as exc:  # nothing unhashed is written: the copy stops
                    failure = exc
                    stop.set()
            if failure is None:
                count["hashed"] += 1
                to_write.put(item)
            else:
                free.put(buf)

    threads = [threading.Thread(target=reader, name="model-cache-read")]
    if to_hash is not None:
        threads.append(threading.Thread(target=hasher, name="model-cache-hash"))
    for thread in threads:
        thread.daemon = True
        thread.start()
    copied = 0
    error = failed = None
    syncer = _Syncer(fd, WRITEBACK_EVERY, base=os.lseek(fd, 0, os.SEEK_CUR))  # hashed before written
    try:
        while True:
            item = to_write.get()
            if isinstance(item, _Stop):
                error = item.error
                break
            buf, n = item
            if failed is None:
                try:
                    if space_check is not None:
                        space_check(n)
                    view = memoryview(buf)[:n]
                    while view:
                        written = os.write(fd, view)
                        view = view[written:]
                    copied += n
                    syncer.written(copied)
                except BaseException as exc:
                    failed = exc
                    stop.set()
            count["written"] += 1
            free.put(buf)
    finally:
        stop.set()
        free.put(None)  # wake a reader waiting for a buffer
        for thread in threads:  # the reader, then the hasher (it ends on the reader's _Stop)
            thread.join()
        failed = syncer.close() or failed
        if split is not None:
            tail = clock() - ended[0]
            last_hash = min(tail, max(0.0, hashed[0] - ended[0])) if hashed else 0.0
            spent["hash"] += last_hash  # the hasher's last buffers
            spent["disk"] += tail - last_hash  # the writes queued last, the flush running
            for stage, seconds in spent.items():
                split[stage] += seconds
    if failed is not None:
        # the destination failed (space, disk): not a source error to retry; the digest may hold
        # chunks read after the failed write, so it is not resumed from (the next run re-hashes the part)
        raise failed
    if error is not None:
        if isinstance(error, (socket.timeout, HTTPException, ConnectionError)) or (
                isinstance(error, OSError) and not isinstance(error, ModelCacheError)
                and getattr(error, "errno", None) in (errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, None)):
            raise TransferError(str(error) or error.__class__.__name__)
        raise error
    return copied


_NO_KERNEL_COPY = (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF, errno.ENOTSUP)


def _kernel_copy_chunk(src, dst, count, state):
    """Copy up to ``count`` bytes from ``src``'s to ``dst``'s file position inside the kernel:
    copy_file_range (same file system type; xfs may share the blocks), else sendfile (any two
    files), advancing both positions. ``state`` remembers which call works. Returns the bytes
    copied (0: end of the source)."""
    if state.get("how", "copy_file_range") == "copy_file_range" and hasattr(os, "copy_file_range"):
        try:
            copied = os.copy_file_range(src, dst, count)
        except OSError as exc:
            if exc.errno not in _NO_KERNEL_COPY:
                raise
            copied = 0
        if copied:
            return copied
        # refused, or 0: the end of the source, or a copy the kernel declined without an error
        # (Linux 5.3 to 5.18 answered 0 for files whose size reads as 0). sendfile copies from
        # here on, and its 0 is the end
        state["how"] = "sendfile"
    try:
        return os.sendfile(dst, src, None, count)
    except OSError as exc:
        if exc.errno in _NO_KERNEL_COPY + (errno.ENOTSOCK,) and not state.get("copied"):
            raise _NoKernelCopy()  # neither works here: the caller copies through its own buffers
        raise


class _SizeMismatch(Exception):
    """The source's size (``total``; None: it sent more bytes than declared) is not the file's."""

    def __init__(self, total):
        Exception.__init__(self, total)
        self.total = total


def _has_more(stream):
    """Whether ``stream`` has another byte after the declared size (a short read, no error, is the end)."""
    try:
        return bool(stream.read(1))
    except (OSError, ValueError, HTTPException):
        return False


class _NoKernelCopy(Exception):
    """Neither copy_file_range nor sendfile can copy between these two files."""


def kernel_copy(src, fd, read_fd, digest, limit=None, bucket=None, chunk=CHUNK, ahead=KERNEL_AHEAD, sync=False,
                writeback_every=None, read_size=READ_BACK, split=None, read_thread=True):
    """Copy the file ``src`` (a descriptor, from its position) to ``fd`` (from its position) in
    the kernel, chunk by chunk, while two more threads read each copied chunk back from the
    destination (``read_fd``, open for reading on the same file: the pages are still in the page
    cache, or are read from the disk if they were dropped) and update ``digest``: the digest is of
    the bytes written, and the data is not copied through this process on the way in. The reader
    reads the copy back, ``read_size`` bytes at a time, into ``READ_BUFFERS`` small buffers that
    the hasher hashes in order and hands back, so that the hasher, the copy's slowest stage, only
    hashes. (Reading 2 GiB back from the page cache takes 0.16 s of the 1.2 s that one thread
    reading and hashing took; on a cache with direct I/O the copy of 2 GiB took 1.12 s against
    1.21 s, median of 5 side by side. ``read_thread`` False: the hasher reads each piece back
    itself, as before. Mapping the chunks with mmap instead of pread measured no faster, and a
    page that cannot be read would then kill the process with SIGBUS instead of raising EIO.)

    The copy runs up to ``ahead`` chunks ahead of the reader (the queue holds offsets, not data),
    and the reader up to ``READ_BUFFERS`` pieces ahead of the hasher.
    With ``sync`` the copy is made durable (fsync) as soon as it is complete, while the hasher is
    still catching up: the flush to the disk and the hashing of the last chunks overlap instead of
    following each other. Every ``writeback_every`` bytes (None: ``KERNEL_WRITEBACK_EVERY``; 0: never)
    what was copied is made durable in the background (:class:`_Syncer`).

    ``limit``: bytes to copy at most (None: to EOF); ``bucket``: a TokenBucket. Returns bytes
    copied; on an error, what was copied before it is hashed first (a retry resumes there).

    ``split``: a dict (:data:`STAGES`) to which the copy adds where its time went, along the
    copying thread's path: ``copy`` (in the kernel copy: reading the source and writing the
    cache are one step), ``hash`` (waiting for the read-back and the hasher, whose queue is
    full, and for their last chunks), ``disk`` (the flushes waited for) and ``limit`` (the bucket's sleeps).
    """
    if bucket is not None:
        chunk = int(max(64 << 10, min(chunk, bucket.rate // 4)))
    if writeback_every is None:
        writeback_every = KERNEL_WRITEBACK_EVERY
    pending = queue.Queue(maxsize=max(1, ahead))
    failed = []

    size = max(4096, min(read_size, chunk))
    hashed = [0]  # bytes of the copy hashed so far (read back): the syncer drops no page before that
    views = [memoryview(bytearray(size)) for _buffer in range(READ_BUFFERS if read_thread else 1)]
    free = HANDOFF()  # buffers the reader may fill (indexes into views)
    filled = HANDOFF()  # (buffer, bytes) read back, in order, for the hasher; None: the end
    for index in range(len(views)):
        free.put(index)

    def read_back(give):
        """Reads each queued chunk back, piece by piece, and hands every piece (buffer index,
        bytes) to ``give``; on an error the chunks still queued are drained, not read."""
        while True:
            item = pending.get()
            if item is None:
                return
            if failed:
                continue  # drain: the copier must never block on a full queue
            offset, n = item
            try:
                end = offset + n
                while offset < end and not failed:
                    index = free.get()
                    try:
                        got = os.preadv(read_fd, [views[index][:min(size, end - offset)]], offset)
                        if not got:
                            raise OSError(errno.EIO, "the copy is shorter than written at byte %d" % offset)
                    except BaseException:
                        free.put(index)
                        raise
                    give(index, got)
                    offset += got
            except BaseException as exc:  # raised by the copier
                failed.append(exc)

    def hash_piece(index, got):
        if not failed:  # after a failure the digest is not used: the rest is handed back unhashed
            try:
                digest.update(views[index][:got])
                hashed[0] += got
            except BaseException as exc:  # the reader stops reading; raised by the copier
                failed.append(exc)
        free.put(index)

    def reader():
        try:
            read_back(lambda index, got: filled.put((index, got)))
        finally:
            filled.put(None)

    def hasher():
        while True:
            item = filled.get()
            if item is None:
                return
            hash_piece(*item)

    if read_thread:
        threads = [threading.Thread(target=reader, name="model-cache-read-back"),
                   threading.Thread(target=hasher, name="model-cache-hash")]
    else:  # one thread reads back and hashes
        threads = [threading.Thread(target=read_back, args=(hash_piece,), name="model-cache-hash")]
    for thread in threads:
        thread.daemon = True
        thread.start()
    base = os.lseek(fd, 0, os.SEEK_CUR)
    copied = 0
    state = {}
    ended = False
    syncer = _Syncer(fd, writeback_every, base=base, hashed=lambda: hashed[0])
    clock = time.perf_counter
    spent = dict.fromkeys(("copy", "hash", "disk", "limit"), 0.0)
    try:
        while (limit is None or copied < limit) and not failed:
            want = chunk if limit is None else min(chunk, limit - copied)
            began = clock()
            n = _kernel_copy_chunk(src, fd, want, state)
            done = clock()
            spent["copy"] += done - began
            if not n:
                break
            pending.put((base + copied, n))
            spent["hash"] += clock() - done  # the queue was full: the hasher is behind
            copied += n
            state["copied"] = copied
            if bucket is not None:
                spent["limit"] += bucket.consume(n)
            syncer.written(copied)
        pending.put(None)
        ended = True
        began = clock()
        error = syncer.close()
        if error is not None:
            raise error
        if sync and not failed:
            os.fsync(fd)  # while the hasher reads the last chunks back
        spent["disk"] += clock() - began
    finally:
        if not ended:
            pending.put(None)
        syncer.close()
        began = clock()
        for thread in threads:  # the reader, then the hasher (it ends on the reader's None)
            thread.join()
        spent["hash"] += clock() - began  # the last chunks, hashed after the flush
        if split is not None:
            for stage, seconds in spent.items():
                split[stage] += seconds
    if failed:
        raise failed[0]
    return copied


def _is_file(stream):
    """``stream`` wraps a regular file's descriptor (what the kernel copy needs)."""
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):
        return False


class Transfer(object):
    """Retries, bandwidth cap and resume of the copies of one run.

    ``retries``: how often a transient source error is retried (each retry resumes where the
    transfer stopped); ``rate``: bytes/s read from the sources (0: unlimited); ``dir_mode``:
    mode of the staging directories created; ``warn(msg)``: a warning for the result;
    ``kernel_copy``: copy local files in the kernel (:func:`kernel_copy`; False: the buffered
    pipeline, as before, which bench/bench_model_cache.py times beside it).
    """

    def __init__(self, retries=3, rate=0, dir_mode=0o755, warn=None, kernel_copy=True):
        self.kernel_copy = kernel_copy  # False: local files too go through the buffered pipeline
        self.retries = int(retries)
        self.bucket = TokenBucket(rate) if rate > 0 else None
        self.dir_mode = dir_mode
        self.warn = warn or (lambda msg: None)

    def retry(self, action, item, rel):
        """``action()``, retried on TransferError; after the last attempt a ModelCacheError."""
        attempt = 0
        while True:
            try:
                return action()
            except TransferError as exc:
                attempt += 1
                if attempt > self.retries:
                    raise ModelCacheError("%s: %s failed after %d attempts: %s" % (
                        item["what"], rel, attempt, exc), model=item["name"], version=item["version"], file=rel)
                time.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))

    def fetch_file(self, item, source, staging, entry, space_check=None, split=None, staging_path=None):
        """Download one file into its .part; return (bytes moved, bytes resumed, size).

        ``staging`` is the version's staging directory (a path, or a directory descriptor whose path
        is ``staging_path``; the ``.part`` is reached below it without following links), ``entry``
        the file (path, sha256 and
        ``expected_size``, None when unknown). ``space_check(n)`` is called before writing n
        bytes of a file whose size is unknown, and raises to stop. ``split``: a dict of
        :data:`STAGES` to which the copy adds where its time went (re-hashing a partial file
        counts as ``hash``, the final fsync as ``disk``).
        """
        if split is None:
            split = dict.fromkeys(STAGES, 0.0)
        if isinstance(staging, int):
            staging_fd, staging_path = os.dup(staging), staging_path or "staging"
        else:
            staging_path = staging
            makedirs(staging, self.dir_mode)
            staging_fd = safe.open_root(staging)
        try:
            while True:
                try:
                    return self._fetch_file(item, source, staging_fd, staging_path, entry, space_check, split)
                except ModelCacheError as exc:
                    # peer fan-out (peer.PeerSource): bytes that fail verification exclude every peer that
                    # served part of them, and the file is fetched again, whole, from the next peer or the
                    # origin; bad bytes from the origin fail the model as before
                    named = self._corrupt_peers(source, entry["path"], exc)
                    if not named:
                        raise
                    self.warn("%s: %s from peer %s failed verification (%s); %s excluded for the rest of the run, "
                              "fetched again from the next peer or the origin"
                              % (item["what"], entry["path"], ", ".join(named), exc, ", ".join(named)))
        finally:
            os.close(staging_fd)

    @staticmethod
    def _corrupt_peers(source, rel, exc):
        """The peers excluded for ``exc`` (a checksum or size mismatch of a file read from peers), else []."""
        if getattr(source, "kind", None) != "peers":
            return []
        if "actual_sha256" not in exc.result and "declared_size" not in exc.result:
            return []
        return source.corrupt(rel)

    def _fetch_file(self, item, source, staging_fd, staging_path, entry, space_check, split):
        """:meth:`fetch_file` below the staging directory's descriptor: the ``.part`` is reached
        without following links (``safe``), created with O_EXCL, and the copies get its descriptors."""
        rel = entry["path"]
        parent, leaf = os.path.split(rel)
        part_name, done_name = leaf + PART, leaf
        part = os.path.join(staging_path, rel + PART)
        dfd = safe.walk(staging_fd, parent, staging_path, create=True, mode=self.dir_mode)
        try:
            return self._fetch_part(item, source, dfd, part_name, done_name, part, entry, space_check, split)
        finally:
            os.close(dfd)

    def _fetch_part(self, item, source, dfd, part_name, done_name, part, entry, space_check, split):
        part_st = safe.lstat_at(dfd, part_name)
        done_st = safe.lstat_at(dfd, done_name)
        if part_st is None and done_st is not None and stat.S_ISREG(done_st.st_mode):
            os.rename(done_name, part_name, src_dir_fd=dfd, dst_dir_fd=dfd)  # stopped between verify and publish
            part_st = safe.lstat_at(dfd, part_name)
        if part_st is not None and (not stat.S_ISREG(part_st.st_mode) or part_st.st_nlink != 1):
            # not a partial file of ours (a link, a hard link, a directory): removed, never opened
            self.warn("%s: %s was not a regular file of the cache; removed and downloaded again" % (item["what"], part))
            safe.rmtree_at(dfd, part_name)
            part_st = None
        expected = entry.get("expected_size")
        have = part_st.st_size if part_st is not None else 0
        if expected is not None and have > expected:
            os.unlink(part_name, dir_fd=dfd)
            have = 0
            part_st = None
        if part_st is not None:
            fd = safe.open_file_at(dfd, part_name, part, os.O_RDWR)
        else:
            fd = safe.open_file_at(dfd, part_name, part, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if have:
                began = time.perf_counter()
                digest, have = hash_fd(fd)
                split["hash"] += time.perf_counter() - began
            else:
                digest = hashlib.sha256()
            read_fd = None
            if self.kernel_copy and getattr(source, "kind", None) == "local":
                read_fd = safe.open_file_at(dfd, part_name, part)
                if os.fstat(read_fd).st_ino != os.fstat(fd).st_ino:
                    os.close(read_fd)
                    raise safe.UnsafeCache("%s changed while it was being opened; nothing was published" % part)
        except BaseException:
            os.close(fd)
            raise
        return self._copy_into(item, source, entry, dfd, part_name, fd, read_fd, digest, have, expected,
                               space_check, split)

    def _copy_into(self, item, source, entry, dfd, part_name, fd, read_fd, digest, have, expected,
                   space_check, split):
        rel = entry["path"]
        resumed = have
        moved = 0
        try:
            os.lseek(fd, have, os.SEEK_SET)
            offset = have
            attempt = 0
            while expected is None or offset < expected:
                try:
                    stream, served, total = source.open(rel, offset)
                    if stream is None:  # HTTP 416: the part already holds the whole file
                        break
                    try:
                        if served != offset:
                            # HTTP 200 instead of 206: the source ignores Range, start over from 0
                            self.warn("%s: %s restarted from byte 0 (the source ignored Range)" % (item["what"], rel))
                            os.ftruncate(fd, 0)
                            os.lseek(fd, 0, os.SEEK_SET)
                            digest = hashlib.sha256()
                            offset = 0
                            resumed = 0
                        if expected is None and total is not None:
                            expected = total
                        elif expected is not None and total is not None and total != expected:
                            # the source says what it holds: another size than the spec's is never this file
                            raise _SizeMismatch(total)
                        limit = (expected - offset) if expected is not None else None
                        # A known size was checked against the reserve before the download;
                        # only a file of unknown size is watched while it is written. (Free space
                        # read while writing is not exact: xfs reserves speculative preallocation
                        # beyond the end of a growing file, and trims it on close.)
                        n = None
                        if read_fd is not None and expected is not None and _is_file(stream):
                            # a local file: copied in the kernel, hashed as read back from the copy
                            try:
                                n = kernel_copy(stream.fileno(), fd, read_fd, digest, limit=limit,
                                                bucket=self.bucket, sync=True, split=split)
                            except _NoKernelCopy:
                                pass
                        if n is None:
                            n = stream_copy(stream, fd, digest, limit=limit, bucket=self.bucket,
                                            space_check=space_check if expected is None else None, split=split)
                        if total is None and limit is not None and n == limit and _has_more(stream):
                            # a body that did not say its length, longer than the declared size
                            raise _SizeMismatch(None)
                    finally:
                        stream.close()
                    offset += n
                    moved += n
                    if expected is None:
                        break
                    if n < limit:
                        # the source closed early (http.client returns a short read, no error)
                        raise TransferError("%s ended at byte %d of %d" % (source.describe(rel), offset, expected))
                except TransferError as exc:
                    # what was read before the error is written and hashed: resume from there
                    position = os.lseek(fd, 0, os.SEEK_CUR)
                    moved += max(position - offset, 0)
                    offset = position
                    attempt += 1
                    if attempt > self.retries:
                        os.fsync(fd)
                        raise ModelCacheError(
                            "%s: %s failed after %d attempts at byte %d: %s (the partial file is kept; the next "
                            "run resumes it)" % (item["what"], rel, attempt, offset, exc),
                            model=item["name"], version=item["version"], file=rel)
                    resumed += offset
                    time.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))
                except _SizeMismatch as exc:
                    os.unlink(part_name, dir_fd=dfd)
                    declared = ("declares %d bytes" % exc.total if exc.total is not None
                                else "sent more than %d bytes" % expected)
                    raise ModelCacheError(
                        "%s: checksum mismatch for %s (from %s): the source %s, expected %d; the partial file was "
                        "deleted and nothing was published" % (item["what"], rel, source.describe(rel), declared,
                                                               expected),
                        model=item["name"], version=item["version"], file=rel, expected_size=expected,
                        declared_size=exc.total)
            began = time.perf_counter()
            os.fsync(fd)
            split["disk"] += time.perf_counter() - began
        finally:
            os.close(fd)
            if read_fd is not None:
                os.close(read_fd)
        actual = digest.hexdigest()
        size = safe.lstat_at(dfd, part_name).st_size
        if actual != entry["sha256"] or (expected is not None and size != expected):
            os.unlink(part_name, dir_fd=dfd)
            raise ModelCacheError(
                "%s: checksum mismatch for %s (from %s): expected sha256 %s, got %s (%d bytes); "
                "the partial file was deleted and nothing was published"
                % (item["what"], rel, source.describe(rel), entry["sha256"], actual, size),
                model=item["name"], version=item["version"], file=rel,
                expected_sha256=entry["sha256"], actual_sha256=actual)
        return moved, resumed, size
