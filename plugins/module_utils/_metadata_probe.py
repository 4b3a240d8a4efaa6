# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metadata_probe: small files and metadata on the cache filesystem (stdlib only).

For each set (``{name, files, size}``: a model's shard set, a dataset of small files) N files of the
given size are created in a tree of ``width`` directories, then each is stat'ed, read (its pages
dropped first with ``posix_fadvise(POSIX_FADV_DONTNEED)`` on that file, never the global cache) and
unlinked. Per set and operation: operations per second and latency p50/p99 in microseconds, every
operation timed with ``time.perf_counter_ns``.

Writes go only to ``directory``, which the probe creates (it must not exist) and removes afterwards,
also on failure; every path is opened relative to a directory descriptor without following links. A
set whose bytes exceed ``max_free_share`` of the free space is refused. Check mode writes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._storage_probe_io import latency_summary

OPS = ("create", "stat", "read", "unlink")
MAX_FILES = 1000000
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _timed(samples, fn, *args, **kwargs):
    start = time.perf_counter_ns()
    value = fn(*args, **kwargs)
    samples.append(time.perf_counter_ns() - start)
    return value


def _create(dir_fd, name, data):
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _read(dir_fd, name, size):
    fd = os.open(name, os.O_RDONLY | NOFOLLOW, dir_fd=dir_fd)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        total = 0
        while True:
            data = os.read(fd, max(size, 4096))
            if not data:
                return total
            total += len(data)
    finally:
        os.close(fd)


def run_set(directory, files, size, width):
    """One set in ``directory`` (ours, empty): the figures of each operation; everything created is removed."""
    data = (b"aiinfra-metadata" * (size // 16 + 1))[:size]
    subdirs = ["d%04d" % i for i in range(min(width, files))]
    top = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW)
    fds = []
    created = []
    samples = dict((op, []) for op in OPS)
    seconds = dict((op, 0.0) for op in OPS)
    try:
        for name in subdirs:
            os.mkdir(name, 0o700, dir_fd=top)
            fds.append(os.open(name, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW, dir_fd=top))
        names = [(fds[i % len(fds)], "f%07d" % i) for i in range(files)]
        start = time.perf_counter()
        for dir_fd, name in names:
            _timed(samples["create"], _create, dir_fd, name, data)
            created.append((dir_fd, name))
        for fd in fds:
            os.fsync(fd)
        seconds["create"] = time.perf_counter() - start
        start = time.perf_counter()
        for dir_fd, name in names:
            _timed(samples["stat"], os.stat, name, dir_fd=dir_fd, follow_symlinks=False)
        seconds["stat"] = time.perf_counter() - start
        start = time.perf_counter()
        for dir_fd, name in names:
            got = _timed(samples["read"], _read, dir_fd, name, size)
            if got != size:
                raise OSError("%s read %d bytes, wrote %d" % (name, got, size))
        seconds["read"] = time.perf_counter() - start
        start = time.perf_counter()
        for dir_fd, name in names:
            _timed(samples["unlink"], os.unlink, name, dir_fd=dir_fd)
        created = []  # on a failure above, the finally unlinks what is left (ENOENT for the rest is ignored)
        seconds["unlink"] = time.perf_counter() - start
    finally:
        for dir_fd, name in created:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except OSError:
                pass
        for fd in fds:
            os.close(fd)
        for name in subdirs:
            try:
                os.rmdir(name, dir_fd=top)
            except OSError:
                pass
        os.close(top)
    out = {}
    for op in OPS:
        figures = latency_summary(samples[op], seconds[op])
        out[op] = {"ops_s": figures["iops"], "p50_us": figures["p50_us"], "p99_us": figures["p99_us"],
                   "ops": figures["ios"]}
    return out


class MetadataProbe(Capability):
    """Create, stat, read and unlink many small files (writes only its own directory, removed afterwards)."""

    name = "metadata_probe"
    read_only = True
    uses_root = False

    @classmethod
    def options(cls):
        return dict(
            directory=dict(type="str", required=True),
            sets=dict(type="list", elements="dict", default=[
                {"name": "shards", "files": 64, "size": 4194304},
                {"name": "dataset", "files": 2000, "size": 4096}], options=dict(
                    name=dict(type="str", required=True),
                    files=dict(type="int", required=True),
                    size=dict(type="int", required=True))),
            width=dict(type="int", default=64),
            max_free_share=dict(type="float", default=0.2),
        )

    def validate(self):
        p = self.params
        errors = []
        if not os.path.isabs(p["directory"]) or os.path.normpath(p["directory"]) == "/":
            errors.append("directory %r must be an absolute path below a filesystem, not /" % p["directory"])
        names = [s["name"] for s in p["sets"]]
        for index, item in enumerate(p["sets"]):
            where = "sets[%d] (%s)" % (index, item["name"])
            if not item["name"] or names.count(item["name"]) > 1:
                errors.append("%s: name must be set and unique" % where)
            if not 1 <= item["files"] <= MAX_FILES:
                errors.append("%s: files must be 1-%d" % (where, MAX_FILES))
            if not 0 <= item["size"] <= 1 << 30:
                errors.append("%s: size must be 0-1073741824 bytes" % where)
        if not p["sets"]:
            errors.append("sets is empty: give at least one {name, files, size}")
        if not 1 <= p["width"] <= 4096:
            errors.append("width must be 1-4096")
        if not 0 < p["max_free_share"] <= 0.9:
            errors.append("max_free_share must be within 0-0.9 (exclusive of 0)")
        if errors:
            raise CapabilityError("metadata_probe: %s" % "; ".join(errors), errors=errors)

    def _refusal(self, directory):
        parent = os.path.dirname(directory)
        if os.path.lexists(directory):
            return "%s exists: the probe writes only into a directory it creates" % directory
        if not os.path.isdir(parent) or os.path.islink(parent):
            return "the parent %s is not a directory (or is a link)" % parent
        st = os.statvfs(parent)
        free = st.f_bavail * st.f_frsize
        largest = max(s["files"] * max(s["size"], 4096) for s in self.params["sets"])
        if largest > self.params["max_free_share"] * free:
            return ("a set of %d bytes is more than max_free_share %g of the %d bytes free on %s"
                    % (largest, self.params["max_free_share"], free, parent))
        return None

    def read(self):
        p = self.params
        directory = os.path.normpath(p["directory"])
        state = {"directory": directory, "ok": False, "error": self._refusal(directory), "sets": [],
                 "removed": None, "would_write": None}
        if state["error"]:
            return state
        if self.check_mode:
            state["ok"] = True
            state["would_write"] = [dict(s) for s in p["sets"]]
            return state
        os.mkdir(directory, 0o700)
        try:
            for item in p["sets"]:
                entry = {"name": item["name"], "files": item["files"], "size": item["size"], "ok": False,
                         "error": None, "ops": None}
                try:
                    entry["ops"] = run_set(directory, item["files"], item["size"], p["width"])
                    entry["ok"] = True
                except OSError as exc:
                    entry["error"] = "%s: %s" % (item["name"], exc.strerror or exc)
                state["sets"].append(entry)
            failed = [s["error"] for s in state["sets"] if not s["ok"]]
            state["ok"] = not failed
            state["error"] = "; ".join(failed) or None
        finally:
            try:
                os.rmdir(directory)
                state["removed"] = True
            except OSError as exc:
                state["removed"] = False
                state["error"] = (state["error"] or "") + "; could not remove %s: %s" % (directory, exc)
        return state

    def result(self, state, actions):
        return {"metadata": state, "changed": False}
