"""Test data for the model cache tests (unit and lab): deterministic bytes and their sha256,
and a source stream that fails on purpose."""

from __future__ import annotations

import hashlib
import io


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob(size: int, seed: int = 1) -> bytes:
    """Deterministic, incompressible-looking bytes."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(b"%d:%d" % (seed, counter)).digest() * 64
        counter += 1
    return bytes(out[:size])


class FlakyStream(io.RawIOBase):
    """A source stream that raises ConnectionResetError after ``fail_after`` bytes."""

    def __init__(self, data: bytes, fail_after: int | None) -> None:
        self.data = data
        self.pos = 0
        self.fail_after = fail_after

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self.fail_after is not None and self.pos >= self.fail_after:
            raise ConnectionResetError(104, "Connection reset by peer")
        end = len(self.data) if self.fail_after is None else min(len(self.data), self.fail_after)
        n = min(len(buf), end - self.pos, 256 * 1024)
        buf[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n
