# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model cache layout on disk (stdlib only): paths, metadata, ``current`` pointers, mounts.

Below ``cache_dir``::

    <cache_dir>/<name>/<version>/<files...>        published version, never modified after publish
    <cache_dir>/<name>/current -> <version>        relative symlink, switched with symlink + rename
    <cache_dir>/<name>/.versions/<version>.json    metadata: files, bytes, published_at, last_used
    <cache_dir>/.staging/<name>/<version>/<path>.part   partial downloads, resumed from here (.staging: 0700)

:class:`CacheDir` reads this layout (installed versions, pointers, whether a published
version still matches what is asked) and changes it one atomic step at a time (publish a
staged version by one rename, switch a pointer, evict a version, write metadata). Every path
below ``cache_dir`` is reached by directory descriptors without following links, and the tree
must be ours and not writable by others (``safe``); the metadata records what was verified of
each published file (inode, size, mtime, ctime), so that ``verify_existing: size`` re-hashes a
file whose bytes were swapped for others of the same size.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json
import os
import re
import stat
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import safe
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.safe import DirFd, UnsafeCache
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import (
    CURRENT,
    NAME_RE,
    PART,
    ModelCacheError,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.transfer import hash_fd

STAGING = ".staging"
VERSIONS = ".versions"
MOUNTINFO = "/proc/self/mountinfo"


def mount_points(mountinfo=MOUNTINFO):
    points = set()
    with open(mountinfo, encoding="utf-8", errors="surrogateescape") as handle:  # a mount point may not be UTF-8
        for line in handle:
            fields = line.split()
            if len(fields) > 4:
                points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def check_mount(cache_dir, require_mount, mountinfo=MOUNTINFO):
    mount = os.path.realpath(require_mount)
    if mount not in mount_points(mountinfo):
        raise ModelCacheError("require_mount %s is not a mount point; refusing to fill the filesystem below it "
                              "(nothing was changed)" % require_mount)
    real = os.path.realpath(cache_dir)
    if real != mount and not real.startswith(mount.rstrip("/") + "/"):
        raise ModelCacheError("cache_dir %s is not below require_mount %s (nothing was changed)"
                              % (cache_dir, require_mount))


def tree_bytes(path):
    total = 0
    for dirpath, _dirs, filenames in os.walk(path):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def iso_seconds(value):
    try:
        return calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return 0


def iso_time(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def file_record(st):
    """What was verified of a published file: it changes when its bytes are replaced or rewritten
    (a new inode, or new mtime and ctime; ctime cannot be set back by a user)."""
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class CacheDir(object):
    """One models directory: read its versions and pointers, change them atomically."""

    def __init__(self, path, file_mode=0o644, dir_mode=0o755):
        self.path = path.rstrip("/") or "/"
        self.file_mode = file_mode
        self.dir_mode = dir_mode

    # ---- paths (for messages and results; the disk is reached through descriptors)
    def version_dir(self, name, version):
        return os.path.join(self.path, name, version)

    def meta_path(self, name, version):
        return os.path.join(self.path, name, VERSIONS, version + ".json")

    def staging_dir(self, name, version):
        return os.path.join(self.path, STAGING, name, version)

    def pointer(self, name):
        return os.path.join(self.path, name, CURRENT)

    # ---- descriptors
    def root(self, create=False):
        """The cache directory's descriptor (checked: ``safe.open_root``); None when missing."""
        return safe.open_root(self.path, create=create, mode=self.dir_mode)

    def open(self, rel, create=False, mode=None):
        """A directory below the cache (``'name/version'``) by descriptor; None when missing."""
        with DirFd(self.root(create=create)) as root:
            if root is None:
                return None
            return safe.walk(root, rel, self.path, create=create, mode=self.dir_mode if mode is None else mode)

    def staging(self, create=False):
        """``.staging`` (mode 0700: partial files are nobody else's business)."""
        with DirFd(self.root(create=create)) as root:
            if root is None:
                return None
            path = os.path.join(self.path, STAGING)
            if create:
                return safe.mkdir_at(root, STAGING, safe.STAGING_MODE, path)
            fd = safe.open_dir_at(root, STAGING, path)
            if fd is not None:
                try:
                    safe.check_own_dir(fd, path)  # its mode is set to 0700 when it is next written
                except BaseException:
                    os.close(fd)
                    raise
            return fd

    def open_staging(self, item, create=True):
        """The staging directory of one version (``.staging/<name>/<version>``)."""
        with DirFd(self.staging(create=create)) as top:
            if top is None:
                return None
            return safe.walk(top, "%s/%s" % (item["name"], item["version"]), os.path.join(self.path, STAGING),
                             create=create, mode=self.dir_mode)

    # ---- read
    def current(self, name):
        """The version ``<name>/current`` points to, or None (also for a link that names no version)."""
        with DirFd(self.open(name)) as fd:
            if fd is None:
                return None
            try:
                target = os.readlink(CURRENT, dir_fd=fd)
            except OSError:
                return None
        target = target.rstrip("/")
        return target if NAME_RE.match(target) else None

    def meta(self, name, version):
        with DirFd(self.open(name + "/" + VERSIONS)) as fd:
            if fd is None:
                return None
            raw = safe.read_at(fd, version + ".json", self.meta_path(name, version))
        if raw is None:
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError:
            return None

    def installed(self):
        """Every version with our metadata: [{name, version, bytes, last_used, path, current}]."""
        found = []
        with DirFd(self.root()) as root:
            if root is None:
                return found
            for name in sorted(os.listdir(root)):
                if name.startswith(".") or not NAME_RE.match(name):
                    continue
                st = safe.lstat_at(root, name)
                if st is None or not stat.S_ISDIR(st.st_mode):
                    continue
                with DirFd(safe.walk(root, name, self.path)) as mfd:
                    vfd = safe.walk(mfd, VERSIONS, os.path.join(self.path, name))
                    if vfd is None:
                        continue
                    with DirFd(vfd):
                        current = self.current(name)
                        for entry in sorted(os.listdir(vfd)):
                            version = entry[:-5]
                            if not entry.endswith(".json") or not NAME_RE.match(version):
                                continue
                            raw = safe.read_at(vfd, entry, os.path.join(self.path, name, VERSIONS, entry))
                            try:
                                meta = json.loads(raw.decode("utf-8")) if raw is not None else None
                            except ValueError:
                                meta = None
                            vst = safe.lstat_at(mfd, version)
                            if not isinstance(meta, dict) or vst is None or not stat.S_ISDIR(vst.st_mode):
                                continue
                            size = meta.get("bytes")
                            if not size:
                                with DirFd(safe.walk(mfd, version, os.path.join(self.path, name))) as dfd:
                                    size = safe.tree_bytes_at(dfd)
                            found.append(dict(name=name, version=version, path=self.version_dir(name, version),
                                              bytes=int(size),
                                              last_used=iso_seconds(meta.get("last_used") or meta.get("published_at")),
                                              current=current == version))
        return found

    def stray_parts(self, keep):
        """Partial downloads of versions not in ``keep`` (a set of (name, version)):
        [{name, version, bytes}] below ``.staging`` (and leftovers of interrupted runs)."""
        found = []
        with DirFd(self.staging()) as top:
            if top is None:
                return found
            base = os.path.join(self.path, STAGING)
            for name in sorted(os.listdir(top)):
                st = safe.lstat_at(top, name)
                if st is None:
                    continue
                if not stat.S_ISDIR(st.st_mode) or name.startswith("."):
                    # a leftover (.replaced-*, .evict-* of a killed run) or something that is not ours
                    size = st.st_size if stat.S_ISREG(st.st_mode) else 0
                    if stat.S_ISDIR(st.st_mode):
                        with DirFd(safe.walk(top, name, base, check=False)) as fd:
                            size = safe.tree_bytes_at(fd)
                    found.append(dict(name=name, version=None, bytes=size))
                    continue
                with DirFd(safe.walk(top, name, base)) as nfd:
                    for version in sorted(os.listdir(nfd)):
                        if (name, version) in keep:
                            continue
                        vst = safe.lstat_at(nfd, version)
                        size = 0
                        if vst is not None and stat.S_ISDIR(vst.st_mode):
                            with DirFd(safe.walk(nfd, version, base + "/" + name)) as vfd:
                                size = safe.tree_bytes_at(vfd)
                        elif vst is not None and stat.S_ISREG(vst.st_mode):
                            size = vst.st_size
                        found.append(dict(name=name, version=version, bytes=size))
        return found

    def existing(self, item, files, verify="size"):
        """(state, reason): state is present, missing, adopt (dir without metadata) or corrupt."""
        state, reason, _records = self.check_existing(item, files, verify)
        return state, reason

    def check_existing(self, item, files, verify="size"):
        """(state, reason, records): ``records`` ({path: record}) holds what was verified anew of a
        present or adoptable version (re-hashed because its record differed, or was missing):
        bookkeeping the run writes with ``last_used``."""
        name, version = item["name"], item["version"]
        meta = self.meta(name, version)
        known = None
        if isinstance(meta, dict) and isinstance(meta.get("files"), list):
            known = dict((f.get("path"), f) for f in meta["files"] if isinstance(f, dict))
        verified = meta.get("verified") if isinstance(meta, dict) and isinstance(meta.get("verified"), dict) else {}
        wanted = dict((f["path"], f) for f in files)
        with DirFd(self.root()) as root:
            vst = safe.lstat_at(root, name) if root is not None else None
            if vst is None:
                return "missing", None, {}
            with DirFd(safe.walk(root, name, self.path)) as mfd:
                vst = safe.lstat_at(mfd, version)
                if vst is None:
                    return "missing", None, {}
                if stat.S_ISLNK(vst.st_mode) or not stat.S_ISDIR(vst.st_mode):
                    # not a directory of ours: replaced by the fetch (renamed away, never followed)
                    return "corrupt", "%s is not a directory" % self.version_dir(name, version), {}
                with DirFd(safe.walk(mfd, version, os.path.join(self.path, name))) as vfd:
                    if known is not None:
                        if set(known) != set(wanted) or any(
                                known[p].get("sha256") != wanted[p]["sha256"] or (
                                    wanted[p]["size"] is not None and known[p].get("size") != wanted[p]["size"])
                                for p in wanted):
                            return "corrupt", "published metadata lists other files or checksums", {}
                    return self._check_files(vfd, name, version, wanted, known, verified, verify)

    def _check_files(self, vfd, name, version, wanted, known, verified, verify):
        records = {}
        base = self.version_dir(name, version)
        for rel, entry in sorted(wanted.items()):
            full = os.path.join(base, rel)
            missing = ("corrupt" if known is not None else "missing"), "%s is missing" % rel, {}
            parent, leaf = os.path.split(rel)
            try:
                dfd = safe.walk(vfd, parent, base) if parent else os.dup(vfd)
            except UnsafeCache as exc:
                return "corrupt", exc.msg, {}
            if dfd is None:
                return missing
            with DirFd(dfd):
                try:
                    fd = safe.open_file_at(dfd, leaf, full)
                except UnsafeCache as exc:
                    return "corrupt", exc.msg, {}
                except OSError:
                    return missing
            with DirFd(fd):
                st = os.fstat(fd)
                expected = entry["size"] if entry["size"] is not None else (known or {}).get(rel, {}).get("size")
                if expected is not None and st.st_size != expected:
                    return "corrupt", "%s has %d bytes, expected %d" % (rel, st.st_size, expected), {}
                record = file_record(st)
                if known is not None and verify != "sha256" and verified.get(rel) == record:
                    continue  # exactly the file that was verified at publish (or at the last re-hash)
                digest, _size = hash_fd(fd)
                if digest.hexdigest() != entry["sha256"]:
                    return "corrupt", "%s has sha256 %s, expected %s" % (rel, digest.hexdigest(), entry["sha256"]), {}
                records[rel] = record
        return ("present" if known is not None else "adopt"), None, records

    def records(self, fd, files, base):
        """The verified-file records of ``files`` below the directory ``fd`` (path ``base``)."""
        out = {}
        for entry in files:
            parent, leaf = os.path.split(entry["path"])
            with DirFd(safe.walk(fd, parent, base) if parent else os.dup(fd)) as dfd:
                st = safe.lstat_at(dfd, leaf) if dfd is not None else None
                if st is not None and stat.S_ISREG(st.st_mode):
                    out[entry["path"]] = file_record(st)
        return out

    def part_size(self, item, rel):
        """Bytes already staged for one file (its ``.part``, or the file verified but unpublished)."""
        try:
            top = self.open_staging(item, create=False)
        except UnsafeCache:
            return 0
        with DirFd(top):
            if top is None:
                return 0
            parent, leaf = os.path.split(rel)
            with DirFd(safe.walk(top, parent, self.staging_dir(item["name"], item["version"]))
                       if parent else os.dup(top)) as dfd:
                if dfd is None:
                    return 0
                for candidate in (leaf + PART, leaf):
                    st = safe.lstat_at(dfd, candidate)
                    if st is not None and stat.S_ISREG(st.st_mode):
                        return st.st_size
        return 0

    # ---- change
    def create(self):
        os.close(self.root(create=True))

    def write_meta(self, item, manifest_sha256, files, verified=None):
        """The version's metadata; ``verified``: {path: record} of the files as published (None:
        read from the published version now)."""
        now = now_iso()
        name, version = item["name"], item["version"]
        if verified is None:
            with DirFd(self.open(name + "/" + version)) as vfd:
                verified = self.records(vfd, files, self.version_dir(name, version)) if vfd is not None else {}
        meta = dict(name=name, version=version, source=item["source"],
                    manifest=item["manifest"], manifest_sha256=manifest_sha256,
                    files=files, bytes=sum(int(f["size"] or 0) for f in files),
                    published_at=now, last_used=now, verified=verified)
        self._write_meta(name, version, meta)

    def _write_meta(self, name, version, meta):
        with DirFd(self.open(name + "/" + VERSIONS, create=True)) as fd:
            safe.write_at(fd, version + ".json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode("utf-8"),
                          0o644, self.meta_path(name, version))

    def touch(self, item, verified=None):
        """last_used bookkeeping (and the records of files re-verified in this run): not a change."""
        meta = self.meta(item["name"], item["version"])
        if isinstance(meta, dict):
            meta["last_used"] = now_iso()
            if verified:
                records = meta.get("verified") if isinstance(meta.get("verified"), dict) else {}
                records.update(verified)
                meta["verified"] = records
            self._write_meta(item["name"], item["version"], meta)

    def publish(self, item, files):
        """Publish the staged version whose ``files`` (.part) are all verified: drop the
        suffixes, fix modes (fchmod), fsync the tree; returns the files' records. Then
        ``move_into_place`` renames it into place."""
        base = self.staging_dir(item["name"], item["version"])
        with DirFd(self.open_staging(item, create=False)) as top:
            if top is None:
                raise ModelCacheError("%s vanished before it was published" % base)
            for entry in files:
                parent, leaf = os.path.split(entry["path"])
                with DirFd(safe.walk(top, parent, base) if parent else os.dup(top)) as dfd:
                    fd = safe.open_file_at(dfd, leaf + PART, os.path.join(base, entry["path"] + PART))
                    try:
                        os.fchmod(fd, self.file_mode)
                    finally:
                        os.close(fd)
                    os.rename(leaf + PART, leaf, src_dir_fd=dfd, dst_dir_fd=dfd)
            safe.fix_tree_modes(top, self.dir_mode, base)
            return self.records(top, files, base)

    def move_into_place(self, item):
        name, version = item["name"], item["version"]
        with DirFd(self.staging(create=True)) as top, DirFd(self.open(name, create=True)) as parent:
            old = None
            if safe.lstat_at(parent, version) is not None:
                old = ".replaced-%s-%s-%d" % (name, version, os.getpid())
                safe.rmtree_at(top, old)
                os.rename(version, old, src_dir_fd=parent, dst_dir_fd=top)
            with DirFd(safe.walk(top, name, os.path.join(self.path, STAGING))) as nfd:
                os.rename(version, version, src_dir_fd=nfd, dst_dir_fd=parent)
                os.fsync(parent)
                if old:
                    safe.rmtree_at(top, old)
        self.cleanup_staging(name)

    def cleanup_staging(self, name):
        """Remove ``.staging/<name>`` and ``.staging`` once they are empty."""
        with DirFd(self.root()) as root:
            if root is None:
                return
            with DirFd(safe.open_dir_at(root, STAGING, os.path.join(self.path, STAGING))) as top:
                if top is None:
                    return
                try:
                    os.rmdir(name, dir_fd=top)
                except OSError:
                    return
            try:
                os.rmdir(STAGING, dir_fd=root)
            except OSError:
                pass

    def discard_staged(self, name, version):
        """Remove a partial download (``version`` None: a leftover entry ``name`` of ``.staging``)."""
        with DirFd(self.staging()) as top:
            if top is None:
                return
            if version is None:
                safe.rmtree_at(top, name)
                return
            with DirFd(safe.walk(top, name, os.path.join(self.path, STAGING))) as nfd:
                if nfd is not None:
                    safe.rmtree_at(nfd, version)
            try:
                os.rmdir(name, dir_fd=top)
            except OSError:
                pass

    def switch(self, name, version):
        """Point ``<name>/current`` at ``version`` (new symlink, then rename over the old one)."""
        with DirFd(self.open(name, create=True)) as fd:
            tmp = ".%s.%d.tmp" % (CURRENT, os.getpid())
            safe.unlink_at(fd, tmp)
            os.symlink(version, tmp, dir_fd=fd)
            os.rename(tmp, CURRENT, src_dir_fd=fd, dst_dir_fd=fd)
            os.fsync(fd)

    def unpoint(self, name, version):
        """Remove ``<name>/current`` while it points to ``version`` (which is being evicted)."""
        if self.current(name) == version:
            with DirFd(self.open(name)) as fd:
                safe.unlink_at(fd, CURRENT)

    def evict(self, name, version):
        """Delete a published version: out of sight by one rename, then removed (by descriptor)."""
        self.unpoint(name, version)
        trash = ".evict-%s-%s-%d" % (name, version, os.getpid())
        with DirFd(self.staging(create=True)) as top, DirFd(self.open(name)) as parent:
            safe.rmtree_at(top, trash)
            os.rename(version, trash, src_dir_fd=parent, dst_dir_fd=top)
            with DirFd(safe.walk(parent, VERSIONS, os.path.join(self.path, name))) as vfd:
                if vfd is not None:
                    safe.unlink_at(vfd, version + ".json")
            safe.rmtree_at(top, trash)
