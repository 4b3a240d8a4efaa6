"""Issue 18: the ways to make the model cache's verified copy, side by side in one run.

A cache laid out like a lab node's (a sparse image on this host's disk behind a loop device, xfs
or ext4, mounted noatime) and a source like bench_model_cache.py's (one --size-mib weights file
written in full, plus a 3 MiB file, on this host's root filesystem,
also served over HTTP on 127.0.0.1 by the lab's source server). Each variant copies the files into
the cache and makes them durable (fsync); the variants run interleaved, round by round, the order
reversed every other round, after --warmup rounds that are not counted; before each copy the last
one is removed, synced and the filesystem trimmed.

From the local path (reference: `cp --sparse=never` + `sync FILE...`):

  module           Transfer().fetch_file as the module runs it: transfer.kernel_copy
                   (copy_file_range, else sendfile) up to KERNEL_AHEAD chunks ahead of a reader
                   that reads each chunk back from the destination (pread, READ_BACK bytes at a
                   time, into READ_BUFFERS buffers) for a hasher that only hashes, fsync as soon
                   as the copy is complete (overlapping the hashing),
                   writeback started every KERNEL_WRITEBACK_EVERY bytes
  buffered         Transfer(kernel_copy=False): read, hash, write in three threads (the HTTP path)
  kernel_before    the kernel copy before this change: 6 chunks ahead at most, fsync after the
                   last chunk is hashed, writeback every 32 MiB, chunks read back whole
  kernel_hasher_reads  the module's kernel copy before its read-back had a thread of its own:
                   the hasher reads each piece back and hashes it
  kernel_*         the module's kernel copy with one setting changed (see VARIANTS)
  kernel_mmap      each chunk hashed from a shared read-only mapping of the destination
                   (MAP_POPULATE) instead of pread
  odirect_buffer   O_DIRECT writes from aligned buffers, each buffer hashed (NOT read back from
                   the destination: it does not verify what the file holds)
  odirect_readback O_DIRECT writes, each chunk read back from the destination with O_DIRECT

Over HTTP (reference: `curl -o` + `sync`): http_module (the buffered pipeline as the module runs
it: read, hash and write in three threads, writeback every WRITEBACK_EVERY, 128 MiB), http_wb32
(every 32 MiB, the module's setting before), http_nowb (no writeback while copying),
http_reader_hashes (the reader hashes each buffer itself: the module before its hasher thread),
http_1m16 and http_4m8 (16 buffers of 1 MiB, 8 of 4 MiB, instead of the module's 16 of 256 KiB:
fewer hand-overs between the threads, less CPU; measured, not kept: see docs/models.md), http_queue
(the threads hand buffers over through queue.Queue, a Condition each, instead of the module's
queue.SimpleQueue).

--direct-io: the cache's loop device does direct I/O to its image, as bench_model_cache.py's lab
nodes do (a flush waits for the cache's own writes, not for the host's write-out of a page-cached
image). --primer: each timed copy follows an untimed copy of the same variant, so that it starts
from the state its own kind leaves; without it the variant that follows `cp` took up to 25 % longer
on this VM (most likely because it takes back the memory that `cp`'s cached copy has just freed).

Every variant's sha256 is checked against the file's. Prints one line per variant: MiB/s (median
of --rounds), the ratio to its reference (medians, and fastest rounds), the spread (slowest minus
fastest round over the median), the CPU seconds of this process and of the whole machine per copy
(medians), and every round's seconds. Run as root: `.venv/bin/python bench/bench_copy_variants.py`.
The image, the loop device, the mount, the server and the source are always removed.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import mmap
import os
import queue
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, ".collections"))

from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import transfer  # noqa: E402
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import (  # noqa: E402
    HttpSource,
    LocalSource,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_model_cache import make_model  # noqa: E402 - the same model files as the module's benchmark
from datapath_lab.core import loop_direct_io  # noqa: E402 - on the path through bench_model_cache

MIB = 1 << 20
CHUNK = transfer.CHUNK
ITEM = {"what": "bench", "name": "bench", "version": "1"}


# --------------------------------------------------------------------------- variants
# Each copies src (path) to dst (path), makes it durable and returns the sha256 hex it verified.

def kernel(ahead: int, sync: bool, every: int, read_size: int = transfer.READ_BACK,
           read_thread: bool = True) -> Callable[[str, str], str]:
    """transfer.kernel_copy (copy_file_range, else sendfile; each chunk hashed as read back from the
    destination with pread) with these settings, then fsync as fetch_file does."""

    def run(src_path: str, dst_path: str) -> str:
        src = os.open(src_path, os.O_RDONLY)
        fd = os.open(dst_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        read_fd = os.open(dst_path, os.O_RDONLY)
        digest = hashlib.sha256()
        try:
            transfer.kernel_copy(src, fd, read_fd, digest, ahead=ahead, sync=sync, writeback_every=every,
                                 read_size=read_size, read_thread=read_thread)
            os.fsync(fd)
        finally:
            for each in (src, fd, read_fd):
                os.close(each)
        return digest.hexdigest()

    return run


def kernel_mmap(ahead: int, every: int) -> Callable[[str, str], str]:
    """As transfer.kernel_copy with sync, but each chunk hashed from a read-only shared mapping of
    the destination (MAP_POPULATE) instead of pread into a buffer: no copy into the process."""

    def run(src_path: str, dst_path: str) -> str:
        src = os.open(src_path, os.O_RDONLY)
        fd = os.open(dst_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        read_fd = os.open(dst_path, os.O_RDONLY)
        digest = hashlib.sha256()
        pending: queue.Queue = queue.Queue(maxsize=ahead)

        def hasher() -> None:
            while (item := pending.get()) is not None:
                offset, n = item
                with mmap.mmap(read_fd, n, mmap.MAP_SHARED | 0x8000, mmap.PROT_READ, offset=offset) as mapped:
                    digest.update(mapped)

        thread = threading.Thread(target=hasher)
        thread.start()
        state: dict[str, Any] = {}
        copied = flushed = 0
        try:
            while n := transfer._kernel_copy_chunk(src, fd, CHUNK, state):
                pending.put((copied, n))
                copied += n
                state["copied"] = copied
                if every and copied - flushed >= every:
                    transfer.start_writeback(fd, flushed, copied - flushed)
                    flushed = copied
            pending.put(None)
            os.fsync(fd)
            thread.join()
        finally:
            for each in (src, fd, read_fd):
                os.close(each)
        return digest.hexdigest()

    return run


def _aligned(size: int) -> mmap.mmap:
    return mmap.mmap(-1, size)  # anonymous maps are page aligned


def odirect_variant(readback: bool) -> Callable[[str, str], str]:
    """Reader thread fills page-aligned buffers from the source; this thread writes them with
    O_DIRECT (no page cache on the cache filesystem); a hasher hashes either the buffer before it
    goes out (``readback`` False) or the chunk read back from the destination with O_DIRECT."""

    def run(src_path: str, dst_path: str) -> str:
        size = os.path.getsize(src_path)
        src = os.open(src_path, os.O_RDONLY)
        fd = os.open(dst_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
        read_fd = os.open(dst_path, os.O_RDONLY | os.O_DIRECT)
        digest = hashlib.sha256()
        free: queue.Queue = queue.Queue()
        for _buffer in range(4):
            free.put(_aligned(CHUNK))
        filled: queue.Queue = queue.Queue()
        to_hash: queue.Queue = queue.Queue()

        def reader() -> None:
            offset = 0
            while offset < size:
                buf = free.get()
                n = os.preadv(src, [buf], offset)
                filled.put((buf, offset, n))
                offset += n
            filled.put(None)

        def hasher() -> None:
            back = _aligned(CHUNK)
            while True:
                item = to_hash.get()
                if item is None:
                    return
                buf, offset, n = item
                if readback:
                    rounded = (n + 4095) & ~4095
                    got = os.preadv(read_fd, [memoryview(back)[:rounded]], offset)
                    digest.update(memoryview(back)[:min(got, n)])
                else:
                    digest.update(memoryview(buf)[:n])
                free.put(buf)

        threads = [threading.Thread(target=reader), threading.Thread(target=hasher)]
        for thread in threads:
            thread.start()
        try:
            while True:
                item = filled.get()
                if item is None:
                    break
                buf, offset, n = item
                rounded = (n + 4095) & ~4095
                os.pwritev(fd, [memoryview(buf)[:rounded]], offset)
                to_hash.put(item)
            to_hash.put(None)
            for thread in threads:
                thread.join()
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            for each in (src, fd, read_fd):
                os.close(each)
        return digest.hexdigest()

    return run


def engine(kernel: bool, source: Any, out_dir: str, files: list[dict[str, Any]], every: int | None = None,
           hash_thread: bool = True, buffers: tuple[int, int] | None = None,
           queue_class: Any = None) -> None:
    """The module's own Transfer.fetch_file (into <out_dir>/<path>.part, checked against the sums);
    ``every``: WRITEBACK_EVERY of the buffered pipeline for this copy (None: the module's);
    ``hash_thread`` False: the buffered pipeline's reader hashes (the module before its hasher thread);
    ``buffers``: (bytes per buffer, buffers) of the buffered pipeline (None: the module's);
    ``queue_class``: what hands its buffers over (None: the module's, transfer.HANDOFF)."""
    saved = transfer.WRITEBACK_EVERY
    saved_copy = transfer.stream_copy
    if every is not None:
        transfer.WRITEBACK_EVERY = every or (1 << 62)
    saved_handoff = transfer.HANDOFF
    if queue_class is not None:
        transfer.HANDOFF = queue_class
    if not hash_thread or buffers is not None:
        extra = {} if buffers is None else {"chunk": buffers[0], "buffers": buffers[1]}
        transfer.stream_copy = functools.partial(saved_copy, hash_thread=hash_thread, **extra)
    try:
        run_transfer = transfer.Transfer(kernel_copy=kernel)
        for f in files:
            entry = {"path": f["path"], "sha256": f["sha256"], "expected_size": f["size"]}
            run_transfer.fetch_file(ITEM, source, out_dir, entry)
    finally:
        transfer.WRITEBACK_EVERY = saved
        transfer.stream_copy = saved_copy
        transfer.HANDOFF = saved_handoff


# HTTP from the lab's source server on 127.0.0.1 (sendfile): the buffered pipeline with the module's
# writeback interval (WRITEBACK_EVERY), with 32 MiB (the module's before), or none, and with the reader
# hashing each buffer (the module's before its hasher thread), and with larger buffers; `curl` + `sync`
# is their reference. (writeback interval, hasher thread, (bytes per buffer, buffers), queue class;
# None: the module's)
HTTP_VARIANTS: dict[str, tuple[int | None, bool, tuple[int, int] | None, Any]] = {
    "http_module": (None, True, None, None), "http_wb32": (32 * MIB, True, None, None),
    "http_nowb": (0, True, None, None), "http_reader_hashes": (None, False, None, None),
    "http_1m16": (None, True, (MIB, 16), None), "http_4m8": (None, True, (4 * MIB, 8), None),
    "http_queue": (None, True, None, queue.Queue)}


WB = transfer.KERNEL_WRITEBACK_EVERY
VARIANTS: dict[str, Callable[[str, str], str]] = {
    # the kernel copy before: 6 chunks ahead at most, fsync once the last chunk is hashed,
    # writeback every 32 MiB, each chunk read back whole
    "kernel_before": kernel(6, False, 32 * MIB, read_size=CHUNK, read_thread=False),
    # the module's kernel copy before its read-back had a thread of its own: the hasher read back
    "kernel_hasher_reads": kernel(transfer.KERNEL_AHEAD, True, WB, read_thread=False),
    # the module's kernel copy with one setting changed
    "kernel_ahead6": kernel(6, True, WB),
    "kernel_fsync_after_hash": kernel(transfer.KERNEL_AHEAD, False, WB),
    "kernel_wb32": kernel(transfer.KERNEL_AHEAD, True, 32 * MIB),
    "kernel_wb512": kernel(transfer.KERNEL_AHEAD, True, 512 * MIB),
    "kernel_nowb": kernel(transfer.KERNEL_AHEAD, True, 0),
    "kernel_read8m": kernel(transfer.KERNEL_AHEAD, True, WB, read_size=CHUNK),
    "kernel_mmap": kernel_mmap(transfer.KERNEL_AHEAD, WB),
    "odirect_buffer": odirect_variant(readback=False),
    "odirect_readback": odirect_variant(readback=True),
}


# --------------------------------------------------------------------------- the cache filesystem

class Cache:
    """A sparse image on this host's disk behind a loop device, with a filesystem, mounted."""

    def __init__(self, base: str, fstype: str, size_gib: int, direct_io: bool = False) -> None:
        self.direct_io = direct_io
        self.image = base + ".img"
        self.mount = base + "-mnt"
        self.fstype = fstype
        self.size = size_gib << 30
        self.loop = ""

    def __enter__(self) -> Cache:
        with open(self.image, "wb") as fh:
            fh.truncate(self.size)
        dio = ["--direct-io=on"] if self.direct_io else []
        self.loop = subprocess.run(["losetup", "-f", "--show", *dio, self.image], check=True, capture_output=True,
                                   text=True).stdout.strip()
        try:
            if self.direct_io and not loop_direct_io(self.loop):
                raise RuntimeError(f"the kernel did not grant direct I/O to {self.loop}")
            mkfs = ["mkfs.xfs", "-q", "-f"] if self.fstype == "xfs" else ["mkfs.ext4", "-q", "-F"]
            subprocess.run([*mkfs, self.loop], check=True)
            os.makedirs(self.mount, exist_ok=True)
            subprocess.run(["mount", "-o", "noatime", self.loop, self.mount], check=True)
        except BaseException:
            self.__exit__()  # the with block never runs: the loop device and the image go now
            raise
        return self

    def __exit__(self, *_: object) -> None:
        subprocess.run(["umount", self.mount], check=False)
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], check=False)
        shutil.rmtree(self.mount, ignore_errors=True)
        if os.path.exists(self.image):
            os.unlink(self.image)

    def clean(self, out: str) -> None:
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(["sync"], check=True)
        subprocess.run(["fstrim", self.mount], check=False, capture_output=True)
        os.makedirs(out)


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (all cores, from /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def copy(name: str, src: str, url: str, out: str, files: list[dict[str, Any]], dests: list[str]) -> None:
    """One copy of the model's files into ``dests`` by the variant ``name``, made durable."""
    if name == "cp":
        for f, d in zip(files, dests, strict=True):
            subprocess.run(["cp", "--sparse=never", os.path.join(src, f["path"]), d], check=True)
        subprocess.run(["sync", *dests], check=True)
    elif name == "curl":
        subprocess.run(["curl", "-sSf", *[a for f, d in zip(files, dests, strict=True)
                                          for a in ("-o", d, f"{url}/{f['path']}")]], check=True)
        subprocess.run(["sync", *dests], check=True)
    elif name in HTTP_VARIANTS:
        every, hash_thread, buffers, queue_class = HTTP_VARIANTS[name]
        engine(False, HttpSource(url), out, files, every=every, hash_thread=hash_thread, buffers=buffers,
               queue_class=queue_class)
    elif name in ("module", "buffered"):
        engine(name == "module", LocalSource(src), out, files)
    else:
        for f, d in zip(files, dests, strict=True):
            got = VARIANTS[name](os.path.join(src, f["path"]), d)
            if got != f["sha256"]:
                raise SystemExit(f"{name}: {f['path']}: sha256 {got}, expected {f['sha256']}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fs", default="xfs", choices=("xfs", "ext4"))
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted")
    parser.add_argument("--port", type=int, default=18418, help="of the HTTP source on 127.0.0.1")
    parser.add_argument("--only", default="", help="comma-separated variants (cp, module, buffered, ...)")
    parser.add_argument("--primer", action="store_true",
                        help="each timed copy follows an untimed copy of the same variant, so that it starts "
                             "from the state its own kind leaves (as bench_model_cache.py does)")
    parser.add_argument("--direct-io", action="store_true",
                        help="the cache's loop device does direct I/O to its image, as bench_model_cache's lab nodes")
    args = parser.parse_args()
    base = "/var/tmp/datapath-copy-variants"
    src = base + "-src"
    shutil.rmtree(src, ignore_errors=True)
    names = ["cp", "module", "buffered", *VARIANTS, "curl", *HTTP_VARIANTS]
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    times: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    busy: dict[str, list[float]] = {n: [] for n in names}
    server = None
    try:
        files = make_model(src, args.size_mib * MIB)
        total = sum(f["size"] for f in files)
        ready = base + "-ready"
        server = subprocess.Popen([sys.executable, os.path.join(REPO, "lab", "datapath_lab", "httpsrc.py"), src,
                                   "--bind", "127.0.0.1", "--port", str(args.port), "--ready", ready])
        for _wait in range(100):
            if os.path.exists(ready):
                break
            time.sleep(0.05)
        os.unlink(ready)
        url = f"http://127.0.0.1:{args.port}"
        with Cache(base, args.fs, max(2, 2 * args.size_mib // 1024 + 1), direct_io=args.direct_io) as cache:
            out = os.path.join(cache.mount, "out")
            for i in range(-args.warmup, args.rounds):
                for name in (names if i % 2 == 0 else names[::-1]):
                    for _run in range(2 if args.primer else 1):  # with --primer: the untimed run first
                        cache.clean(out)
                        dests = [os.path.join(out, f["path"]) for f in files]
                        for d in dests:
                            os.makedirs(os.path.dirname(d), exist_ok=True)
                        c0, b0, t0 = time.process_time(), machine_busy(), time.perf_counter()
                        copy(name, src, url, out, files, dests)
                    if i >= 0:
                        times[name].append(time.perf_counter() - t0)
                        cpu[name].append(time.process_time() - c0)
                        busy[name].append(machine_busy() - b0)
            cache.clean(out)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(src, ignore_errors=True)
    mib = total / MIB
    for name in names:
        med = statistics.median(times[name])
        line = f"{name}_MiBps: {mib / med:.0f}"
        ref = "curl" if name.startswith("http_") else None if name == "curl" else "cp"
        if ref in times and name != ref:
            line += (f"  ratio_vs_{ref}: {statistics.median(times[ref]) / med:.3f}"
                     f"  ratio_vs_{ref}_best: {min(times[ref]) / min(times[name]):.3f}")
        line += (f"  spread_pct: {100 * (max(times[name]) - min(times[name])) / med:.1f}"
                 f"  cpu_self_s: {statistics.median(cpu[name]):.2f}  cpu_machine_s: {statistics.median(busy[name]):.2f}"
                 f"  rounds_s: {' '.join(f'{t:.2f}' for t in times[name])}")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
