"""Test data for the model cache tests (unit and lab): deterministic bytes and their sha256."""

from __future__ import annotations

import hashlib


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
