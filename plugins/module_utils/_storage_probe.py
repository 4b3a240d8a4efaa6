# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_probe: sequential and 4 KiB random reads of block devices and files, and a cold read
of a cached model (stdlib only; fio when asked for and installed).

The probe only reads. The one write it ever does is creating a test file the user named
(``create_size`` > 0 and the file does not exist): filled with non-zero data and fsynced, with
``O_EXCL`` so that nothing existing is ever overwritten, and never on a device path. That file is
the capability's only action (kind ``file``); ``changed`` is true only when it was created.

Check mode stats the targets and says what would be read; nothing is opened for reading and
nothing is created. A target that cannot be opened, refuses O_DIRECT or is too small is returned
``ok: false`` with the reason; the module fails only on bad parameters.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import stat
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils import _storage_probe_fio as fio_job
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Action, Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._storage_probe_io import (
    BLOCK,
    MIB,
    ProbeError,
    descriptor_size,
    drop_cached_pages,
    open_target,
    random_read,
    sequential_read,
)

MIN_TARGET_BYTES = MIB
MAX_QUEUE_DEPTH = 256
MAX_RANDOM_SECONDS = 300.0
MODEL_CHUNK = 8 * MIB


def device_size_from_sysfs(st, sysfs="/sys"):
    """Bytes of a block device from ``/sys/dev/block/MAJ:MIN/size`` (512-byte sectors), without
    opening the device; None where sysfs does not say."""
    path = "%s/dev/block/%d:%d/size" % (sysfs, os.major(st.st_rdev), os.minor(st.st_rdev))
    try:
        with open(path) as handle:
            return int(handle.read().strip()) * 512
    except (IOError, OSError, ValueError):
        return None


def inspect_target(target):
    """What a stat says about a target: kind, size, whether it would be created, or the error."""
    info = {"name": target["name"], "path": target["path"], "direct": target["direct"], "kind": None,
            "size": None, "create": False, "error": None}
    try:
        st = os.stat(target["path"])
    except OSError as exc:
        if exc.errno == errno.ENOENT and target["create_size"] > 0:
            info.update(kind="file", size=target["create_size"], create=True)
            if not os.path.isdir(os.path.dirname(target["path"]) or "/"):
                info["error"] = "cannot create %s: its directory does not exist" % target["path"]
            return info
        info["error"] = "cannot stat %s: %s" % (target["path"], exc.strerror or exc)
        return info
    if stat.S_ISBLK(st.st_mode):
        size = device_size_from_sysfs(st)
        info["kind"] = "device"
    elif stat.S_ISREG(st.st_mode):
        size = st.st_size
        info["kind"] = "file"
    else:
        info["error"] = "%s is neither a block device nor a regular file" % target["path"]
        return info
    info["size"] = size
    if size is not None and size < MIN_TARGET_BYTES:
        info["error"] = "%s is too small: %d bytes (the probe needs at least %d)" % (
            target["path"], size, MIN_TARGET_BYTES)
    return info


def fill_block():
    """1 MiB of non-zero bytes (a repeating 1..255 pattern) for created test files."""
    pattern = bytes(bytearray(range(1, 256)))
    return (pattern * (MIB // len(pattern) + 1))[:MIB]


def create_test_file(path, size):
    """Create ``path`` (O_EXCL: never an existing file) with ``size`` bytes of non-zero data,
    fsync it and its directory. A partial file is removed on failure."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        chunk = fill_block()
        left = size
        while left > 0:
            left -= os.write(fd, chunk[:min(left, len(chunk))])
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    directory = os.open(os.path.dirname(path) or "/", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def model_files(path):
    """Regular files below ``path`` (symlinks to files followed, each real file once; symlinked
    directories not entered), sorted, with their sizes."""
    found, seen = [], set()
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full)
            except OSError:
                continue  # a dangling symlink
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            found.append((full, st.st_size))
    return found


def model_load(path, check_mode):
    """Read every file of a cached model once, cold: each file's cached pages are dropped
    (posix_fadvise DONTNEED on it) before it is read. In check mode only counts them."""
    result = {"path": path, "files": 0, "bytes": 0, "seconds": None, "mib_s": None, "ok": False, "error": None}
    if not os.path.isdir(path):
        result["error"] = "%s is not a directory" % path
        return result
    files = model_files(path)
    result["files"] = len(files)
    if check_mode:
        result.update(bytes=sum(size for _p, size in files), ok=bool(files))
        if not files:
            result["error"] = "no files below %s" % path
        return result
    if not files:
        result["error"] = "no files below %s" % path
        return result
    buf = bytearray(MODEL_CHUNK)
    total = 0
    start = time.perf_counter()
    try:
        for full, _size in files:
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                drop_cached_pages(fd)
                with os.fdopen(os.dup(fd), "rb", buffering=0) as handle:
                    while True:
                        got = handle.readinto(buf)
                        if not got:
                            break
                        total += got
            finally:
                os.close(fd)
    except OSError as exc:
        result["error"] = "cannot read %s: %s" % (getattr(exc, "filename", None) or path, exc.strerror or exc)
        result["bytes"] = total
        return result
    seconds = time.perf_counter() - start
    result.update(bytes=total, seconds=round(seconds, 6), ok=True,
                  mib_s=round(total / float(MIB) / seconds, 1) if seconds > 0 else None)
    return result


class StorageProbe(Capability):
    """Read throughput, random-read IOPS and latency of devices and files; cold model load."""

    name = "storage_probe"
    read_only = True  # no node lock: a probe reads for seconds and changes nothing but a test file
    uses_root = False  # the paths are the node's own; nothing is read below a test root

    @classmethod
    def options(cls):
        return dict(
            targets=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                path=dict(type="str", required=True),
                create_size=dict(type="int", default=0),
                direct=dict(type="bool", default=True),
            )),
            seq_bytes=dict(type="int", default=268435456),
            seq_block_kib=dict(type="int", default=1024),
            random_seconds=dict(type="float", default=3.0),
            queue_depths=dict(type="list", elements="int", default=[1, 32]),
            seq_block_sizes_kib=dict(type="list", elements="int", default=[]),
            tool=dict(type="str", default="builtin", choices=["builtin", "fio"]),
            model=dict(type="dict", options=dict(path=dict(type="str", required=True))),
        )

    def validate(self):
        p = self.params
        errors = []
        names = [t["name"] for t in p["targets"]]
        for index, target in enumerate(p["targets"]):
            where = "targets[%d] (%s)" % (index, target["name"])
            path = target["path"]
            if not target["name"]:
                errors.append("%s: name must not be empty" % where)
            elif names.count(target["name"]) > 1 and names.index(target["name"]) == index:
                errors.append("%s: name is used more than once" % where)
            if not os.path.isabs(path):
                errors.append("%s: path %r must be absolute" % (where, path))
                continue
            if target["create_size"] < 0:
                errors.append("%s: create_size must not be negative" % where)
            elif target["create_size"] > 0:
                if path.startswith("/dev/") or _is_block_device(path):
                    errors.append("%s: create_size is for a test file; %s is a device path, which the "
                                  "probe never writes" % (where, path))
                elif target["create_size"] < MIN_TARGET_BYTES:
                    errors.append("%s: create_size must be 0 or at least %d bytes" % (where, MIN_TARGET_BYTES))
        if p["seq_bytes"] < BLOCK:
            errors.append("seq_bytes must be at least %d" % BLOCK)
        if not 4 <= p["seq_block_kib"] <= 65536 or p["seq_block_kib"] % 4:
            errors.append("seq_block_kib must be a multiple of 4 within 4-65536")
        bad = [b for b in p["seq_block_sizes_kib"] if not 4 <= b <= 65536 or b % 4]
        if bad:
            errors.append("seq_block_sizes_kib %s: each must be a multiple of 4 within 4-65536"
                          % ", ".join(str(b) for b in bad))
        if not 0 < p["random_seconds"] <= MAX_RANDOM_SECONDS:
            errors.append("random_seconds must be within 0-%d (exclusive of 0)" % MAX_RANDOM_SECONDS)
        bad = [d for d in p["queue_depths"] if not 1 <= d <= MAX_QUEUE_DEPTH]
        if bad:
            errors.append("queue depth %s is out of 1-%d" % (", ".join(str(d) for d in bad), MAX_QUEUE_DEPTH))
        model = p.get("model")
        if model and not os.path.isabs(model["path"]):
            errors.append("model.path %r must be absolute" % model["path"])
        if not p["targets"] and not model:
            errors.append("nothing to probe: give targets, model or both")
        if errors:
            raise CapabilityError("storage_probe: %s" % "; ".join(errors), errors=errors)

    def depths(self):
        return sorted(set(self.params["queue_depths"]))

    def read(self):
        fio = None
        if self.params["tool"] == "fio":
            fio = self.runner.which("fio")
            if not fio:
                self.warn("storage_probe: fio is not installed on the node; the built-in reader is used")
        return {"targets": [inspect_target(t) for t in self.params["targets"]], "fio": fio,
                "measured": {}, "created": [], "model_load": None}

    def plan(self, state):
        return [Action("file", info["path"], "create test file %s (%d bytes of non-zero data)" % (
            info["path"], info["size"]), before=None, after="%d bytes" % info["size"], diff=False, size=info["size"])
            for info in state["targets"] if info["create"] and not info["error"]]

    def needs_apply(self, state, actions):
        return True  # the measuring happens here: never in check mode

    def apply(self, state, actions):
        for action in actions:
            info = next(i for i in state["targets"] if i["path"] == action.target)
            try:
                create_test_file(action.target, action.data["size"])
                state["created"].append(action.target)
            except OSError as exc:
                info["error"] = "cannot create %s: %s" % (action.target, exc.strerror or exc)
        for info in state["targets"]:
            if not info["error"]:
                state["measured"][info["name"]] = self._measure(info, state["fio"])
        model = self.params.get("model")
        if model:
            state["model_load"] = model_load(model["path"], False)

    def _measure(self, info, fio):
        out = {"seq": None, "random": {}, "by_block": {}, "error": None, "size": info["size"]}
        try:
            fd = open_target(info["path"], info["direct"])
            try:
                out["size"] = size = descriptor_size(fd)
            finally:
                os.close(fd)
            if size < MIN_TARGET_BYTES:
                raise ProbeError("%s is too small: %d bytes (the probe needs at least %d)" % (
                    info["path"], size, MIN_TARGET_BYTES))
            nbytes = min(self.params["seq_bytes"], size)
            if fio:
                self._measure_fio(info, fio, size, nbytes, out)
            else:
                out["seq"] = sequential_read(info["path"], info["direct"], nbytes, self.params["seq_block_kib"] * 1024)
                for kib in sorted(set(self.params["seq_block_sizes_kib"])):
                    pass_ = sequential_read(info["path"], info["direct"], nbytes, kib * 1024)
                    out["by_block"][str(kib)] = pass_["mib_s"]
                for depth in self.depths():
                    out["random"][str(depth)] = random_read(info["path"], info["direct"], size, depth,
                                                            self.params["random_seconds"])
        except ProbeError as exc:
            out["error"] = str(exc)
        except OSError as exc:
            out["error"] = "%s: %s" % (info["path"], exc.strerror or exc)
        return out

    def _measure_fio(self, info, fio, size, nbytes, out):
        path, direct, p = info["path"], info["direct"], self.params
        nbytes -= nbytes % BLOCK
        seq, why = fio_job.run_fio(self.runner, lambda engine: fio_job.sequential_argv(
            fio, path, direct, nbytes, p["seq_block_kib"], engine))
        if why:
            raise ProbeError(why)
        out["seq"] = {"bytes": seq["bytes"], "seconds": seq["seconds"], "mib_s": seq["mib_s"],
                      "truncated": seq["bytes"] < nbytes}
        for kib in sorted(set(p["seq_block_sizes_kib"])):
            job, why = fio_job.run_fio(self.runner, lambda engine, kib=kib: fio_job.sequential_argv(
                fio, path, direct, nbytes, kib, engine))
            if why:
                raise ProbeError(why)
            out["by_block"][str(kib)] = job["mib_s"]
        span = size - size % BLOCK
        for depth in self.depths():
            job, why = fio_job.run_fio(self.runner, lambda engine, depth=depth: fio_job.random_argv(
                fio, path, direct, span, depth, p["random_seconds"], engine))
            if why:
                raise ProbeError(why)
            out["random"][str(depth)] = {k: job[k] for k in ("iops", "p50_us", "p99_us", "ios", "seconds")}

    def _target_result(self, info, state):
        tool = "fio" if state["fio"] else "builtin"
        entry = {"name": info["name"], "path": info["path"], "kind": info["kind"], "tool": tool,
                 "direct": info["direct"], "size": info["size"], "ok": False, "error": info["error"],
                 "seq_read_mib_s": None, "seq_bytes_read": None, "random": {}, "would_read": None}
        if self.params["seq_block_sizes_kib"]:
            entry["sequential_by_block"] = {}
        if self.check_mode:
            entry["ok"] = info["error"] is None
            if entry["ok"]:
                entry["would_read"] = {
                    "seq_bytes": min(self.params["seq_bytes"], info["size"]) if info["size"] else
                    self.params["seq_bytes"],
                    "seq_block_kib": self.params["seq_block_kib"], "random_block_kib": 4,
                    "queue_depths": self.depths(), "random_seconds": self.params["random_seconds"],
                    "create_size": info["size"] if info["create"] else 0}
            return entry
        measured = state["measured"].get(info["name"])
        if measured is None:
            return entry
        entry["size"] = measured["size"]
        if measured["seq"]:
            entry["seq_read_mib_s"] = measured["seq"]["mib_s"]
            entry["seq_bytes_read"] = measured["seq"]["bytes"]
        for depth, figures in measured["random"].items():
            entry["random"][depth] = {k: figures[k] for k in ("iops", "p50_us", "p99_us")}
        if measured["by_block"]:
            entry["sequential_by_block"] = dict(measured["by_block"])
        entry["error"] = measured["error"]
        entry["ok"] = measured["error"] is None
        return entry

    def result(self, state, actions):
        model = self.params.get("model")
        model_result = state["model_load"]
        if model and self.check_mode:
            model_result = model_load(model["path"], True)
        done = [a for a in actions if self.check_mode or a.target in state["created"]]
        return dict(targets=[self._target_result(info, state) for info in state["targets"]],
                    model_load=model_result, changed=bool(done),
                    actions=[action.public() for action in done])


def _is_block_device(path):
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False
