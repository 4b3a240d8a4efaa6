"""The model cache's verified copy alone: token bucket, the reader (read + hash) / writer pipeline,
kernel writeback while copying, and resume, retries and verification of one file."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import transfer
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import (
    ModelCacheError,
    TransferError,
)
from model_data import FlakyStream, blob, sha

MiB = 1 << 20


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


# --------------------------------------------------------------------------- bandwidth cap

def test_token_bucket_sleeps_for_the_bytes_over_the_burst():
    clock = FakeClock()
    bucket = transfer.TokenBucket(1000000, burst=250000, clock=clock, sleep=clock.sleep)
    for _attempt in range(40):
        bucket.consume(100000)  # 4 MB at 1 MB/s with no time passing but the sleeps
    assert bucket.slept == pytest.approx((4000000 - 250000) / 1000000.0)
    assert clock.now == pytest.approx(3.75)


def test_token_bucket_refills_while_idle():
    clock = FakeClock()
    bucket = transfer.TokenBucket(1000, burst=1000, clock=clock, sleep=clock.sleep)
    bucket.consume(1000)
    clock.now += 10.0  # idle: the bucket refills up to its burst only
    assert bucket.consume(1000) == 0.0
    assert bucket.consume(500) == pytest.approx(0.5)


def test_transfer_has_a_bucket_only_with_a_rate():
    assert transfer.Transfer(rate=0).bucket is None
    assert transfer.Transfer(rate=MiB).bucket.rate == MiB


# --------------------------------------------------------------------------- copy pipeline

def test_stream_copy_with_a_cap_copies_everything_and_computes_the_sleep(tmp_path):
    data = blob(3 * MiB + 5)
    clock = FakeClock()
    rate = 4 * MiB
    bucket = transfer.TokenBucket(rate, clock=clock, sleep=clock.sleep)
    digest = hashlib.sha256()
    target = tmp_path / "out"
    fd = os.open(str(target), os.O_WRONLY | os.O_CREAT)
    try:
        copied = transfer.stream_copy(io.BytesIO(data), fd, digest, bucket=bucket)
    finally:
        os.close(fd)
    assert copied == len(data) and target.read_bytes() == data and digest.hexdigest() == sha(data)
    # the copy moved len(data) bytes at `rate`: everything over the initial burst was slept for
    assert bucket.slept == pytest.approx((len(data) - bucket.burst) / rate, rel=0.01)


STREAM_DEFAULT = (transfer.STREAM_CHUNK, transfer.STREAM_BUFFERS)


@pytest.mark.parametrize("hash_thread", [True, False], ids=["hasher-thread", "reader-hashes"])
@pytest.mark.parametrize("chunk, buffers", [(1, 1), (7, 2), (64 * 1024, 3), STREAM_DEFAULT])
def test_stream_copy_keeps_order_for_any_buffering(tmp_path, chunk, buffers, hash_thread):
    data = blob(5000 if chunk < 100 else 3 * MiB)
    digest = hashlib.sha256()
    target = tmp_path / "out"
    fd = os.open(str(target), os.O_WRONLY | os.O_CREAT)
    try:
        copied = transfer.stream_copy(io.BytesIO(data), fd, digest, chunk=chunk, buffers=buffers,
                                      hash_thread=hash_thread)
    finally:
        os.close(fd)
    assert copied == len(data) and target.read_bytes() == data and digest.hexdigest() == sha(data)


def test_stream_copy_limit_and_reader_error(tmp_path):
    data = blob(MiB)
    digest = hashlib.sha256()
    fd = os.open(str(tmp_path / "out"), os.O_WRONLY | os.O_CREAT)
    try:
        assert transfer.stream_copy(io.BytesIO(data), fd, digest, limit=1000, chunk=300) == 1000
        with pytest.raises(TransferError):
            transfer.stream_copy(FlakyStream(data, 5000), fd, hashlib.sha256(), chunk=1024)
    finally:
        os.close(fd)
    assert digest.hexdigest() == sha(data[:1000])


class SlowDigest:
    """sha256 that takes ``delay`` seconds per update, and raises ``fail`` at update number ``fail_at``."""

    def __init__(self, delay: float = 0.0, fail_at: int = 0, fail: BaseException | None = None) -> None:
        self.inner = hashlib.sha256()
        self.delay = delay
        self.fail_at = fail_at
        self.fail = fail
        self.updates = 0
        self.hashed = 0

    def update(self, data) -> None:  # type: ignore[no-untyped-def]
        self.updates += 1
        if self.fail is not None and self.updates == self.fail_at:
            raise self.fail
        time.sleep(self.delay)
        self.inner.update(data)
        self.hashed += len(data)

    def hexdigest(self) -> str:
        return self.inner.hexdigest()


def test_the_stream_copy_writes_nothing_its_hasher_did_not_hash(tmp_path):
    """A hasher that fails at its fourth buffer stops the copy with its own error, and the file holds
    no byte past what was hashed (the writer only gets buffers from the hasher, in order)."""
    data = blob(40 * 64 * 1024)
    digest = SlowDigest(fail_at=4, fail=MemoryError("hashing failed"))
    target = tmp_path / "out"
    fd = os.open(str(target), os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(MemoryError, match="hashing failed"):
            transfer.stream_copy(io.BytesIO(data), fd, digest, chunk=64 * 1024, buffers=4)
    finally:
        os.close(fd)
    assert digest.hashed == 3 * 64 * 1024
    assert target.read_bytes() == data[:digest.hashed]


def test_a_source_error_leaves_a_digest_of_exactly_the_bytes_written(tmp_path):
    """The bytes read before a source error are hashed and written before the error is raised,
    whichever thread hashes: a retry resumes at the file's end with that digest."""
    data = blob(MiB)
    for hash_thread in (True, False):
        digest = hashlib.sha256()
        target = tmp_path / f"out-{hash_thread}"
        fd = os.open(str(target), os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(TransferError):
                transfer.stream_copy(FlakyStream(data, 300000), fd, digest, chunk=4096, buffers=8,
                                     hash_thread=hash_thread)
        finally:
            os.close(fd)
        written = target.read_bytes()
        assert 0 < len(written) < len(data) and written == data[:len(written)]
        assert digest.hexdigest() == sha(written)


def test_stream_copy_raises_a_destination_error_as_it_is(tmp_path):
    """A failed write is not a source error to retry and resume from: the reader may have hashed
    chunks after it, so the error is raised as it is (an OSError here, even with an errno that a
    socket error would have), never as a TransferError."""
    import errno

    data = blob(3 * MiB)
    writes = []

    def space_check(n):
        writes.append(n)
        if len(writes) == 3:
            raise OSError(errno.ETIMEDOUT, "the cache's NFS server timed out")

    fd = os.open(str(tmp_path / "out"), os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError) as caught:
            transfer.stream_copy(io.BytesIO(data), fd, hashlib.sha256(), chunk=64 * 1024, space_check=space_check)
    finally:
        os.close(fd)
    assert not isinstance(caught.value, TransferError) and caught.value.errno == errno.ETIMEDOUT
    assert (tmp_path / "out").stat().st_size == 2 * 64 * 1024  # nothing written after the failure


def test_the_copy_is_made_durable_while_copying(tmp_path, monkeypatch):
    """Every WRITEBACK_EVERY bytes the syncer thread flushes what was written (fdatasync), while
    the copy goes on, so that the final fsync has little left; the data is the same either way.
    Requests that come while a flush runs are merged: one flush, at most, after the last request."""
    flushed: list[int] = []
    gate = threading.Event()

    def slow_flush(fd):
        gate.wait(5)  # the first flush lasts until the copy has asked for more
        flushed.append(os.fstat(fd).st_size)
        os.fdatasync(fd)

    monkeypatch.setattr(transfer, "flush_written", slow_flush)
    monkeypatch.setattr(transfer, "WRITEBACK_EVERY", 1 << 20)
    data = os.urandom(5 << 20)
    target = tmp_path / "out.bin"
    fd = os.open(str(target), os.O_WRONLY | os.O_CREAT, 0o644)
    threading.Timer(0.2, gate.set).start()
    try:
        os.write(fd, b"x" * 100)  # resuming: the copy appends after what is there
        digest = hashlib.sha256()
        copied = transfer.stream_copy(io.BufferedReader(io.BytesIO(data)), fd, digest, chunk=256 << 10)
    finally:
        os.close(fd)
    assert copied == len(data)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert target.read_bytes() == b"x" * 100 + data
    assert 1 <= len(flushed) <= 2  # five requests, merged while the first flush waited
    assert flushed[0] >= 100 + (1 << 20)


@pytest.mark.parametrize("kernel", [False, True])
def test_an_error_of_the_background_flush_is_raised(tmp_path, monkeypatch, kernel):
    """The kernel reports a write-back error once per open file: the syncer's fdatasync may be the
    one that sees it, so the copy raises it (the final fsync on the same descriptor would not)."""
    import errno

    def failing_flush(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(transfer, "flush_written", failing_flush)
    monkeypatch.setattr(transfer, "WRITEBACK_EVERY", 1 << 20)
    data = os.urandom(3 << 20)
    source = tmp_path / "src.bin"
    source.write_bytes(data)
    target = tmp_path / "out.bin"
    fd = os.open(str(target), os.O_WRONLY | os.O_CREAT, 0o644)
    read_fd = os.open(str(target), os.O_RDONLY)
    try:
        with pytest.raises(OSError) as caught:
            if kernel:
                with open(source, "rb") as handle:
                    transfer.kernel_copy(handle.fileno(), fd, read_fd, hashlib.sha256(), chunk=256 << 10,
                                         writeback_every=1 << 20, sync=True)
            else:
                transfer.stream_copy(io.BytesIO(data), fd, hashlib.sha256(), chunk=256 << 10)
    finally:
        os.close(fd)
        os.close(read_fd)
    assert caught.value.errno == errno.EIO and not isinstance(caught.value, TransferError)


# --------------------------------------------------------------------------- one file: resume, retries, verify

class OneFileSource:
    """A source of one file: Range honoured or not, failing after N bytes on the first opens."""

    def __init__(self, data: bytes, fail_after: int | None = None, failures: int = 1, ranges: bool = True) -> None:
        self.data = data
        self.fail_after = fail_after
        self.failures = failures
        self.ranges = ranges
        self.opens: list[int] = []

    def describe(self, path: str) -> str:
        return "http://fake/" + path

    def open(self, path: str, offset: int):
        self.opens.append(offset)
        served = offset if self.ranges else 0
        fail = self.fail_after if self.fail_after is not None and len(self.opens) <= self.failures else None
        stream = FlakyStream(self.data, fail)
        stream.pos = served
        return stream, served, len(self.data)


ITEM = dict(name="m", version="1", what="models[0] m@1")


def fetch(tmp_path: Path, monkeypatch, source: OneFileSource, retries: int = 3, size: int | None = None,
          digest: str | None = None, warnings: list[str] | None = None):
    monkeypatch.setattr(transfer.time, "sleep", lambda s: None)  # retry back-off
    entry = dict(path="d/w", sha256=digest or sha(source.data), expected_size=size)
    run = transfer.Transfer(retries=retries, warn=(warnings if warnings is not None else []).append)
    return run.fetch_file(ITEM, source, str(tmp_path / "staging"), entry)


def test_fetch_file_resumes_a_part_and_retries_within_the_call(tmp_path, monkeypatch):
    data = blob(3 * MiB)
    part = tmp_path / "staging" / "d" / "w.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:MiB])
    source = OneFileSource(data, fail_after=2 * MiB)
    moved, resumed, size = fetch(tmp_path, monkeypatch, source, size=len(data))
    assert source.opens == [MiB, 2 * MiB]
    assert (moved, resumed, size) == (2 * MiB, MiB + 2 * MiB, len(data))
    assert part.read_bytes() == data


def test_fetch_file_without_range_restarts_and_warns(tmp_path, monkeypatch):
    data = blob(2 * MiB)
    part = tmp_path / "staging" / "d" / "w.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:MiB])
    warnings: list[str] = []
    moved, resumed, _size = fetch(tmp_path, monkeypatch, OneFileSource(data, ranges=False), size=len(data),
                                  warnings=warnings)
    assert (moved, resumed) == (len(data), 0)
    assert warnings == ["models[0] m@1: d/w restarted from byte 0 (the source ignored Range)"]


def test_fetch_file_gives_up_after_the_retries_and_keeps_the_part(tmp_path, monkeypatch):
    data = blob(3 * MiB)
    with pytest.raises(ModelCacheError, match="failed after 1 attempts at byte %d" % (2 * MiB)) as failed:
        fetch(tmp_path, monkeypatch, OneFileSource(data, fail_after=2 * MiB), retries=0)
    assert failed.value.result == dict(model="m", version="1", file="d/w")
    assert (tmp_path / "staging" / "d" / "w.part").stat().st_size == 2 * MiB


def test_fetch_file_checksum_mismatch_deletes_the_part(tmp_path, monkeypatch):
    data = blob(MiB)
    wrong = sha(b"other")
    with pytest.raises(ModelCacheError, match="checksum mismatch for d/w") as failed:
        fetch(tmp_path, monkeypatch, OneFileSource(data), digest=wrong)
    assert failed.value.result["expected_sha256"] == wrong and failed.value.result["actual_sha256"] == sha(data)
    assert not (tmp_path / "staging" / "d" / "w.part").exists()


def test_retry_backs_off_then_names_the_file(monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr(transfer.time, "sleep", sleeps.append)
    calls = []

    def flaky():
        calls.append(1)
        raise TransferError("HEAD http://x/a: HTTP 503 Service Unavailable")

    with pytest.raises(ModelCacheError, match="a failed after 3 attempts: HEAD http://x/a: HTTP 503"):
        transfer.Transfer(retries=2).retry(flaky, ITEM, "a")
    assert len(calls) == 3 and sleeps == [0.5, 1.0]


# --------------------------------------------------------------------------- local files: the copy in the kernel

def _local(tmp_path: Path, data: bytes):
    from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import LocalSource
    (tmp_path / "src" / "d").mkdir(parents=True)
    (tmp_path / "src" / "d" / "w").write_bytes(data)
    return LocalSource(str(tmp_path / "src"))


def _copy(tmp_path: Path, data: bytes, prefix: bytes = b"", **kwargs):
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    target = tmp_path / "out.bin"
    target.write_bytes(prefix)
    src = os.open(str(source), os.O_RDONLY)
    fd = os.open(str(target), os.O_WRONLY)
    read_fd = os.open(str(target), os.O_RDONLY)
    try:
        os.lseek(fd, len(prefix), os.SEEK_SET)
        digest = hashlib.sha256()
        copied = transfer.kernel_copy(src, fd, read_fd, digest, **kwargs)
        position = os.lseek(fd, 0, os.SEEK_CUR)
    finally:
        for each in (src, fd, read_fd):
            os.close(each)
    return copied, digest, position, target.read_bytes()


@pytest.mark.parametrize("read_thread", [True, False])
@pytest.mark.parametrize("chunk,ahead,read_size", [(64 << 10, 1, 64 << 10), (1 << 20, 2, 256 << 10),
                                                   (8 << 20, 6, 1 << 20), (3 << 20, 2, 5000)])
def test_kernel_copy_hashes_what_was_written(tmp_path, chunk, ahead, read_size, read_thread):
    data = blob(5 * MiB + 12345)
    copied, digest, position, written = _copy(tmp_path, data, prefix=b"p" * 100, chunk=chunk, ahead=ahead,
                                              read_size=read_size, read_thread=read_thread)
    assert copied == len(data) and position == 100 + len(data)
    assert written == b"p" * 100 + data
    assert digest.hexdigest() == sha(data)  # the copied bytes only, as read back from the copy


@pytest.mark.parametrize("read_thread", [True, False])
def test_a_read_back_error_stops_the_kernel_copy(tmp_path, monkeypatch, read_thread):
    """The copy cannot be read back (EIO at the 5th piece): the error is raised, nothing hangs,
    and the copy stops within the chunks it may run ahead."""
    real = transfer.os.preadv
    reads = []

    def preadv(fd, buffers, offset):
        reads.append(offset)
        if len(reads) == 5:
            raise OSError(transfer.errno.EIO, "cannot read back")
        return real(fd, buffers, offset)

    monkeypatch.setattr(transfer.os, "preadv", preadv)
    with pytest.raises(OSError, match="cannot read back"):
        _copy(tmp_path, blob(64 * 64 * 1024), chunk=64 * 1024, ahead=2, read_size=64 * 1024,
              read_thread=read_thread)
    assert len(reads) == 5  # nothing read back after the error
    assert (tmp_path / "out.bin").stat().st_size < 64 * 64 * 1024


class _FailingDigest:
    """sha256 whose ``fail_at``-th update raises."""

    def __init__(self, fail_at: int) -> None:
        self.inner = hashlib.sha256()
        self.fail_at = fail_at
        self.updates = 0

    def update(self, data) -> None:  # type: ignore[no-untyped-def]
        self.updates += 1
        if self.updates == self.fail_at:
            raise MemoryError("hasher failed")
        self.inner.update(data)


@pytest.mark.parametrize("read_thread", [True, False])
def test_a_hasher_failure_stops_the_kernel_copy(tmp_path, read_thread):
    digest = _FailingDigest(3)
    data = blob(64 * 64 * 1024)
    (tmp_path / "source.bin").write_bytes(data)
    src = os.open(str(tmp_path / "source.bin"), os.O_RDONLY)
    fd = os.open(str(tmp_path / "out.bin"), os.O_WRONLY | os.O_CREAT)
    read_fd = os.open(str(tmp_path / "out.bin"), os.O_RDONLY)
    try:
        with pytest.raises(MemoryError, match="hasher failed"):
            transfer.kernel_copy(src, fd, read_fd, digest, chunk=64 * 1024, ahead=2, read_size=64 * 1024,
                                 read_thread=read_thread)
    finally:
        for each in (src, fd, read_fd):
            os.close(each)
    assert digest.updates == 3  # nothing hashed after the failure
    assert (tmp_path / "out.bin").stat().st_size < len(data)


def test_kernel_copy_limit_and_cap(tmp_path):
    clock = FakeClock()
    bucket = transfer.TokenBucket(4 * MiB, burst=MiB, clock=clock, sleep=clock.sleep)
    data = blob(3 * MiB)
    copied, digest, _position, written = _copy(tmp_path, data, limit=2 * MiB + 7, bucket=bucket)
    assert copied == 2 * MiB + 7 and written == data[:copied] and digest.hexdigest() == sha(data[:copied])
    assert bucket.slept == pytest.approx((2 * MiB + 7 - MiB) / (4 * MiB))


def test_kernel_copy_falls_back_to_sendfile(tmp_path, monkeypatch):
    calls = []

    def no_copy_file_range(*_args):
        calls.append(1)
        raise OSError(transfer.errno.EXDEV, "cross-device")

    monkeypatch.setattr(transfer.os, "copy_file_range", no_copy_file_range, raising=False)
    data = blob(3 * MiB)
    copied, digest, _position, written = _copy(tmp_path, data, chunk=MiB)
    assert copied == len(data) and written == data and digest.hexdigest() == sha(data)
    assert calls == [1]  # tried once, then sendfile for every chunk


def test_kernel_copy_error_after_hashing_what_was_copied(tmp_path, monkeypatch):
    real = transfer.os.sendfile
    monkeypatch.setattr(transfer.os, "copy_file_range", lambda *a: (_x for _x in ()).throw(OSError(22, "x")),
                        raising=False)
    sent = []

    def sendfile(*args):
        if sent:
            raise OSError(transfer.errno.EIO, "disk gone")
        sent.append(1)
        return real(*args)

    monkeypatch.setattr(transfer.os, "sendfile", sendfile)
    with pytest.raises(OSError, match="disk gone"):
        _copy(tmp_path, blob(3 * MiB), chunk=MiB)


def test_fetch_file_copies_a_local_file_in_the_kernel(tmp_path, monkeypatch):
    calls = []
    real = transfer.kernel_copy
    monkeypatch.setattr(transfer, "kernel_copy", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    data = blob(3 * MiB)
    part = tmp_path / "staging" / "d" / "w.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:MiB])  # resumed: re-hashed, then the rest copied from byte MiB
    entry = dict(path="d/w", sha256=sha(data), expected_size=len(data))
    moved, resumed, size = transfer.Transfer().fetch_file(ITEM, _local(tmp_path, data), str(tmp_path / "staging"),
                                                          entry)
    assert calls == [1] and (moved, resumed, size) == (2 * MiB, MiB, len(data))
    assert part.read_bytes() == data


def test_fetch_file_local_mismatch_and_no_kernel_copy(tmp_path, monkeypatch):
    data = blob(MiB)
    entry = dict(path="d/w", sha256=sha(b"other"), expected_size=len(data))
    with pytest.raises(ModelCacheError, match="checksum mismatch for d/w") as failed:
        transfer.Transfer().fetch_file(ITEM, _local(tmp_path, data), str(tmp_path / "staging"), entry)
    assert failed.value.result["actual_sha256"] == sha(data)
    # neither copy_file_range nor sendfile between these files: the buffered pipeline copies
    monkeypatch.setattr(transfer.os, "copy_file_range", lambda *a: (_x for _x in ()).throw(OSError(18, "x")),
                        raising=False)
    monkeypatch.setattr(transfer.os, "sendfile", lambda *a: (_x for _x in ()).throw(OSError(22, "x")))
    entry = dict(path="d/w", sha256=sha(data), expected_size=len(data))
    assert transfer.Transfer().fetch_file(ITEM, _local(tmp_path / "b", data), str(tmp_path / "s2"), entry)[2] == MiB
    assert (tmp_path / "s2" / "d" / "w.part").read_bytes() == data


def test_transfer_without_kernel_copy_uses_the_pipeline_for_local_files(tmp_path, monkeypatch):
    monkeypatch.setattr(transfer, "kernel_copy", lambda *a, **k: pytest.fail("kernel copy used"))
    data = blob(2 * MiB)
    entry = dict(path="d/w", sha256=sha(data), expected_size=len(data))
    run = transfer.Transfer(kernel_copy=False)
    assert run.fetch_file(ITEM, _local(tmp_path, data), str(tmp_path / "staging"), entry) == (len(data), 0, len(data))
    assert (tmp_path / "staging" / "d" / "w.part").read_bytes() == data


@pytest.mark.parametrize("code", ["ENOSYS", "EOPNOTSUPP", "EINVAL", "EXDEV"])
def test_kernel_copy_falls_back_to_sendfile_for_each_refusal(tmp_path, monkeypatch, code):
    """Old kernels (ENOSYS; EXDEV across file systems before 5.3 and across types since 5.19),
    file systems without the operation (EOPNOTSUPP, EINVAL): sendfile copies instead."""
    def refuse(*_args):
        raise OSError(getattr(transfer.errno, code), code)

    monkeypatch.setattr(transfer.os, "copy_file_range", refuse, raising=False)
    data = blob(2 * MiB + 3)
    copied, digest, _position, written = _copy(tmp_path, data, chunk=MiB)
    assert copied == len(data) and written == data and digest.hexdigest() == sha(data)


def test_kernel_copy_without_copy_file_range_in_python(tmp_path, monkeypatch):
    """Python before 3.8 has no os.copy_file_range: sendfile from the start."""
    monkeypatch.delattr(transfer.os, "copy_file_range", raising=False)
    data = blob(MiB + 1)
    copied, digest, _position, written = _copy(tmp_path, data, chunk=256 << 10)
    assert copied == len(data) and written == data and digest.hexdigest() == sha(data)


class _GatedDigest:
    """A sha256 whose updates wait for ``gate`` (at most ``timeout`` seconds) and record if it was open."""

    def __init__(self, gate, timeout: float = 10.0) -> None:
        self.inner = hashlib.sha256()
        self.gate = gate
        self.timeout = timeout
        self.opened: list[bool] = []

    def update(self, data) -> None:
        self.opened.append(self.gate.wait(self.timeout))
        self.inner.update(data)

    def hexdigest(self) -> str:
        return self.inner.hexdigest()


def test_kernel_copy_syncs_while_the_hasher_catches_up(tmp_path, monkeypatch):
    """With sync, the copy is fsynced as soon as the last chunk is copied, not after the hasher has
    read every chunk back: the flush and the hashing overlap. The digest is still complete."""
    synced = threading.Event()
    real_fsync = transfer.os.fsync
    calls = []

    def fsync(fd):
        calls.append(fd)
        real_fsync(fd)
        synced.set()

    monkeypatch.setattr(transfer.os, "fsync", fsync)
    digest = _GatedDigest(synced)  # the hasher cannot finish until the copier has fsynced
    data = blob(3 * MiB)
    (tmp_path / "source.bin").write_bytes(data)
    src = os.open(str(tmp_path / "source.bin"), os.O_RDONLY)
    fd = os.open(str(tmp_path / "out.bin"), os.O_WRONLY | os.O_CREAT)
    read_fd = os.open(str(tmp_path / "out.bin"), os.O_RDONLY)
    try:
        copied = transfer.kernel_copy(src, fd, read_fd, digest, chunk=MiB, ahead=8, sync=True)
    finally:
        for each in (src, fd, read_fd):
            os.close(each)
    assert copied == len(data) and calls == [fd] and digest.hexdigest() == sha(data)
    assert digest.opened and all(digest.opened), "the hasher waited for the fsync: they overlapped"


@pytest.mark.parametrize("read_thread", [True, False])
def test_kernel_copy_runs_at_most_ahead_chunks_before_the_hasher(tmp_path, read_thread):
    """The copy may run ``ahead`` chunks before its read-back, and the read-back READ_BUFFERS pieces
    before the hasher, no more (the chunks read back stay recent)."""
    gate = threading.Event()
    digest = _GatedDigest(gate)
    chunk = 64 << 10
    data = blob(64 * chunk)
    (tmp_path / "source.bin").write_bytes(data)
    src = os.open(str(tmp_path / "source.bin"), os.O_RDONLY)
    fd = os.open(str(tmp_path / "out.bin"), os.O_WRONLY | os.O_CREAT)
    read_fd = os.open(str(tmp_path / "out.bin"), os.O_RDONLY)
    result: list[int] = []
    copier = threading.Thread(target=lambda: result.append(
        transfer.kernel_copy(src, fd, read_fd, digest, chunk=chunk, ahead=3, read_thread=read_thread)))
    copier.start()
    try:
        time.sleep(0.3)
        # one chunk held by the blocked hasher, three queued, one copied and waiting for room; with
        # the read-back in a thread of its own, the other buffers filled (a chunk is one piece
        # here: chunk < READ_BACK) and one chunk taken by the reader, which waits for a buffer
        most = 5 + (transfer.READ_BUFFERS if read_thread else 0)
        assert (tmp_path / "out.bin").stat().st_size == most * chunk
    finally:
        gate.set()
        copier.join()
        for each in (src, fd, read_fd):
            os.close(each)
    assert result == [len(data)] and digest.hexdigest() == sha(data)


def test_kernel_copy_fsync_error_is_raised_after_the_hasher_stopped(tmp_path, monkeypatch):
    def fsync(_fd):
        raise OSError(transfer.errno.EIO, "flush failed")

    monkeypatch.setattr(transfer.os, "fsync", fsync)
    with pytest.raises(OSError, match="flush failed"):
        _copy(tmp_path, blob(2 * MiB), chunk=MiB, sync=True)
    assert [t.name for t in threading.enumerate() if t.name == "model-cache-hash"] == []


def test_fetch_file_detects_a_corrupted_destination(tmp_path, monkeypatch):
    """The digest is of the bytes in the destination, as read back: a byte changed in the copy
    after the kernel wrote it (a bad page, a bug, another writer) fails the file, the .part is
    deleted and the message names the sha256 of what the copy holds."""
    data = blob(3 * MiB)
    real = transfer._kernel_copy_chunk
    corrupted = bytearray(data)
    corrupted[MiB + 10] ^= 0xFF

    def copy_then_corrupt(src, dst, count, state):
        start = os.lseek(dst, 0, os.SEEK_CUR)
        n = real(src, dst, count, state)
        if start <= MiB + 10 < start + n:
            os.pwrite(dst, bytes(corrupted[MiB + 10:MiB + 11]), MiB + 10)
        return n

    monkeypatch.setattr(transfer, "_kernel_copy_chunk", copy_then_corrupt)
    entry = dict(path="d/w", sha256=sha(data), expected_size=len(data))
    staging = tmp_path / "staging"
    with pytest.raises(ModelCacheError, match="checksum mismatch for d/w") as failed:
        transfer.Transfer().fetch_file(ITEM, _local(tmp_path, data), str(staging), entry)
    assert failed.value.result["expected_sha256"] == sha(data)
    assert failed.value.result["actual_sha256"] == sha(bytes(corrupted))
    assert not (staging / "d" / "w.part").exists() and not (staging / "d" / "w").exists()


def test_fetch_file_local_copy_is_durable_before_the_check(tmp_path, monkeypatch):
    """fetch_file asks the kernel copy to fsync (overlapping the hashing) and fsyncs once more."""
    seen = []
    real = transfer.kernel_copy
    monkeypatch.setattr(transfer, "kernel_copy", lambda *a, **k: (seen.append(k.get("sync")), real(*a, **k))[1])
    data = blob(2 * MiB)
    entry = dict(path="d/w", sha256=sha(data), expected_size=len(data))
    assert transfer.Transfer().fetch_file(ITEM, _local(tmp_path, data), str(tmp_path / "staging"), entry) == (
        len(data), 0, len(data))
    assert seen == [True]


def test_kernel_copy_continues_with_sendfile_when_copy_file_range_answers_0(tmp_path, monkeypatch):
    """copy_file_range answering 0 before the end (no error, nothing copied) is not taken for the
    end of the source: sendfile copies, and only its 0 ends the copy."""
    monkeypatch.setattr(transfer.os, "copy_file_range", lambda *a: 0, raising=False)
    data = blob(2 * MiB + 9)
    copied, digest, _position, written = _copy(tmp_path, data, chunk=MiB)
    assert copied == len(data) and written == data and digest.hexdigest() == sha(data)


def _resident_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache, as util-linux's fincore counts them."""
    import subprocess

    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


class _CountingDigest:
    """sha256 that counts the bytes it was given, slowly (a hasher that lags behind the copy)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.inner = hashlib.sha256()
        self.count = 0
        self.delay = delay

    def update(self, data) -> None:
        if self.delay:
            time.sleep(self.delay)
        self.inner.update(data)
        self.count += len(data)

    def hexdigest(self) -> str:
        return self.inner.hexdigest()


class _PacedSource:
    """A source that trickles in as a network does: it never runs more than ``ahead`` bytes past
    what the copy has made durable and dropped (``dropped(n)``), however fast this machine writes
    and however late its flushing thread gets a CPU (a 16 MiB copy from memory could otherwise end
    before the first background flush did, and keep it all cached: a loaded CI machine did)."""

    def __init__(self, data: bytes, ahead: int) -> None:
        self.data = memoryview(data)
        self.ahead = ahead
        self.pos = 0
        self.durable = 0
        self.cond = threading.Condition()

    def dropped(self, upto: int) -> None:
        with self.cond:
            self.durable = max(self.durable, upto)
            self.cond.notify_all()

    def readinto(self, view) -> int:
        with self.cond:  # 30 s: a copy that stops flushing fails the test instead of hanging it
            self.cond.wait_for(lambda: self.pos - self.durable < self.ahead, timeout=30)
        n = min(len(view), len(self.data) - self.pos)
        view[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n


def test_the_stream_copy_leaves_what_is_on_the_disk_out_of_the_page_cache(tmp_path, monkeypatch):
    """After each background flush the pages it made durable are dropped (fadvise DONTNEED), never
    past what was written before the flush: the copy keeps about WRITEBACK_EVERY bytes cached."""
    drops: list[tuple[int, int]] = []
    real = transfer.drop_cached
    data = os.urandom(16 << 20)
    source = _PacedSource(data, ahead=2 << 20)

    def recording(fd, end):
        drops.append((end, os.fstat(fd).st_size))
        real(fd, end)
        source.dropped(end - 4096)

    monkeypatch.setattr(transfer, "drop_cached", recording)
    monkeypatch.setattr(transfer, "WRITEBACK_EVERY", 1 << 20)
    target = tmp_path / "out.bin"
    fd = os.open(str(target), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 4096)  # resuming after a part already there
        digest = hashlib.sha256()
        transfer.stream_copy(source, fd, digest, chunk=256 << 10)
    finally:
        os.close(fd)
    assert _resident_bytes(target) < len(data) // 2  # most of the copy left the page cache (before reading it)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert target.read_bytes() == b"x" * 4096 + data
    assert drops and all(0 < end <= size for end, size in drops)
    assert drops[-1][0] >= 4096 + (8 << 20)


def test_the_kernel_copy_drops_no_page_its_hasher_has_not_read_back(tmp_path, monkeypatch):
    drops: list[int] = []
    digest = _CountingDigest(delay=0.002)

    def recording(fd, end):
        assert end <= digest.count, (end, digest.count)  # nothing the hasher has yet to read back
        drops.append(end)

    monkeypatch.setattr(transfer, "drop_cached", recording)
    data = os.urandom(12 << 20)
    source = tmp_path / "src.bin"
    source.write_bytes(data)
    target = tmp_path / "out.bin"
    fd = os.open(str(target), os.O_WRONLY | os.O_CREAT, 0o644)
    read_fd = os.open(str(target), os.O_RDONLY)
    try:
        with open(source, "rb") as handle:
            transfer.kernel_copy(handle.fileno(), fd, read_fd, digest, chunk=256 << 10, read_size=64 << 10,
                                 writeback_every=1 << 20, sync=True)
    finally:
        os.close(fd)
        os.close(read_fd)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert drops, "the background flushes dropped what was durable and hashed"


def test_a_page_cache_advice_that_fails_changes_nothing(tmp_path, monkeypatch):
    def refused(*_args):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", refused)
    monkeypatch.setattr(transfer, "WRITEBACK_EVERY", 1 << 20)
    data = os.urandom(4 << 20)
    target = tmp_path / "out.bin"
    fd = os.open(str(target), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        digest = hashlib.sha256()
        assert transfer.stream_copy(io.BytesIO(data), fd, digest, chunk=256 << 10) == len(data)
    finally:
        os.close(fd)
    assert target.read_bytes() == data and digest.hexdigest() == hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- where the time went

class _SlowSource(io.RawIOBase):
    """``data`` in ``chunk``-byte reads, each taking at least ``delay`` seconds (a slow server)."""

    def __init__(self, data: bytes, delay: float) -> None:
        self.data = io.BytesIO(data)
        self.delay = delay

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[no-untyped-def,override]
        time.sleep(self.delay)
        return self.data.readinto(buf)


class _SlowDigest:
    """sha256 whose every update takes at least ``delay`` seconds (a hashing CPU that is behind)."""

    def __init__(self, delay: float) -> None:
        self.inner = hashlib.sha256()
        self.delay = delay

    def update(self, data) -> None:  # type: ignore[no-untyped-def]
        time.sleep(self.delay)
        self.inner.update(data)

    def hexdigest(self) -> str:
        return self.inner.hexdigest()


def _split() -> dict[str, float]:
    return dict.fromkeys(transfer.STAGES, 0.0)


def test_a_slow_source_is_what_the_stream_copy_waited_for(tmp_path):
    data = blob(12 * 64 * 1024)
    split = _split()
    fd = os.open(str(tmp_path / "out"), os.O_WRONLY | os.O_CREAT)
    try:
        transfer.stream_copy(_SlowSource(data, 0.02), fd, hashlib.sha256(), chunk=64 * 1024, split=split)
    finally:
        os.close(fd)
    assert split["source"] >= 12 * 0.02  # every read waited (and the read at the end)
    assert max(split, key=split.__getitem__) == "source"
    assert split["copy"] == split["other"] == split["limit"] == 0.0


def test_writes_that_are_behind_are_what_the_stream_copy_waited_for(tmp_path):
    """The writer takes 20 ms per buffer (its space check stands in for a slow disk): with two
    buffers the reader waits for one to come back before each read but the first two, and the
    writer's tail after the source ended waits too. Both count as ``disk``."""
    data = blob(12 * 64 * 1024)
    split = _split()

    def slow_disk(_n):
        time.sleep(0.02)

    fd = os.open(str(tmp_path / "out"), os.O_WRONLY | os.O_CREAT)
    try:
        transfer.stream_copy(io.BytesIO(data), fd, hashlib.sha256(), chunk=64 * 1024, buffers=2,
                             space_check=slow_disk, split=split)
    finally:
        os.close(fd)
    assert split["disk"] >= 0.15  # about 12 x 20 ms: the reader's path waited for almost every write
    assert max(split, key=split.__getitem__) == "disk"
    assert (tmp_path / "out").read_bytes() == data


def test_a_hasher_that_is_behind_is_what_the_stream_copy_waited_for(tmp_path):
    """The hasher takes 20 ms per buffer: with four buffers the reader waits for a free one while
    they queue for the hasher, and the hasher's last buffers follow the source's end. Both count as
    ``hash``, and the stages still add up to the copy's time."""
    data = blob(12 * 64 * 1024)
    split = _split()
    fd = os.open(str(tmp_path / "out"), os.O_WRONLY | os.O_CREAT)
    digest = SlowDigest(delay=0.02)
    began = time.perf_counter()
    try:
        transfer.stream_copy(io.BytesIO(data), fd, digest, chunk=64 * 1024, buffers=4, split=split)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - began
    assert split["hash"] >= 0.15  # about 12 x 20 ms
    assert max(split, key=split.__getitem__) == "hash"
    assert sum(split.values()) <= elapsed
    assert (tmp_path / "out").read_bytes() == data and digest.hexdigest() == sha(data)


def test_the_caps_sleeps_are_counted_as_limit(tmp_path):
    clock = FakeClock()
    data = blob(3 * MiB)
    for kernel in (False, True):
        bucket = transfer.TokenBucket(4 * MiB, burst=MiB, clock=clock, sleep=clock.sleep)
        split = _split()
        if kernel:
            _copy(tmp_path, data, bucket=bucket, split=split)
        else:
            fd = os.open(str(tmp_path / "out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                transfer.stream_copy(io.BytesIO(data), fd, hashlib.sha256(), bucket=bucket, split=split)
            finally:
                os.close(fd)
        assert split["limit"] == pytest.approx(bucket.slept) and bucket.slept > 0.4


def test_a_hasher_that_is_behind_is_what_the_kernel_copy_waited_for(tmp_path):
    data = blob(8 * 64 * 1024)
    source, target = tmp_path / "src", tmp_path / "dst"
    source.write_bytes(data)
    target.write_bytes(b"")
    split = _split()
    digest = _SlowDigest(0.02)
    src = os.open(str(source), os.O_RDONLY)
    fd = os.open(str(target), os.O_WRONLY)
    read_fd = os.open(str(target), os.O_RDONLY)
    try:
        transfer.kernel_copy(src, fd, read_fd, digest, chunk=64 * 1024, ahead=1, read_size=64 * 1024,
                             sync=True, split=split)
    finally:
        for each in (src, fd, read_fd):
            os.close(each)
    assert digest.hexdigest() == sha(data)
    assert split["hash"] >= 0.1  # the copier waited for room in the queue, then for the last chunks
    assert max(split, key=split.__getitem__) == "hash"
    assert split["copy"] > 0 and split["source"] == 0.0


def test_fetch_file_counts_the_rehash_of_a_part_and_the_final_fsync(tmp_path, monkeypatch):
    data = blob(MiB)
    part = tmp_path / "staging" / "model.bin.part"
    part.parent.mkdir()
    part.write_bytes(data[:4096])
    syncs = []
    real_fsync = os.fsync

    def fsync(fd):
        syncs.append(fd)
        time.sleep(0.05)
        real_fsync(fd)

    monkeypatch.setattr(transfer.os, "fsync", fsync)
    split = _split()
    source = OneFileSource(data)
    transfer.Transfer().fetch_file({"what": "m@v", "name": "m", "version": "v"}, source, str(tmp_path / "staging"),
                                   {"path": "model.bin", "sha256": sha(data), "expected_size": len(data)},
                                   split=split)
    assert syncs and split["disk"] >= 0.05 * len(syncs)
    assert split["hash"] > 0  # the 4 KiB already there were hashed again before the resume


def test_time_split_leaves_the_rest_to_other_and_names_the_largest():
    from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.cache import time_split

    split = dict(_split(), source=0.5, hash=0.2, disk=0.1)
    got = time_split(split, 1.0)
    assert got["stage_seconds"] == {"source": 0.5, "copy": 0.0, "hash": 0.2, "disk": 0.1, "limit": 0.0,
                                    "other": 0.2}
    assert got["bottleneck"] == "source"
    assert time_split(dict(_split(), disk=0.1), 2.0)["bottleneck"] == "other"  # requests, not bytes
    assert time_split(_split(), 0.0) == {"stage_seconds": dict.fromkeys(transfer.STAGES, 0.0), "bottleneck": None}
    # stages that overlap the run's own timing never make `other` negative
    assert time_split(dict(_split(), copy=1.2), 1.0)["stage_seconds"]["other"] == 0.0
