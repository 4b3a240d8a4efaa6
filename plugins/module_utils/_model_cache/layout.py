# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model cache layout on disk (stdlib only): paths, metadata, ``current`` pointers, mounts.

Below ``cache_dir``::

    <cache_dir>/<name>/<version>/<files...>        published version, never modified after publish
    <cache_dir>/<name>/current -> <version>        relative symlink, switched with symlink + rename
    <cache_dir>/<name>/.versions/<version>.json    metadata: files, bytes, published_at, last_used
    <cache_dir>/.staging/<name>/<version>/<path>.part   partial downloads, resumed from here

:class:`CacheDir` reads this layout (installed versions, pointers, whether a published
version still matches what is asked) and changes it one atomic step at a time (publish a
staged version by one rename, switch a pointer, evict a version, write metadata).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json
import os
import re
import shutil
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import atomic_write
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import (
    CURRENT,
    PART,
    ModelCacheError,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.transfer import (
    fsync_dir,
    hash_file,
    makedirs,
)

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


class CacheDir(object):
    """One models directory: read its versions and pointers, change them atomically."""

    def __init__(self, path, file_mode=0o644, dir_mode=0o755):
        self.path = path.rstrip("/") or "/"
        self.file_mode = file_mode
        self.dir_mode = dir_mode

    # ---- paths
    def version_dir(self, name, version):
        return os.path.join(self.path, name, version)

    def meta_path(self, name, version):
        return os.path.join(self.path, name, VERSIONS, version + ".json")

    def staging_dir(self, name, version):
        return os.path.join(self.path, STAGING, name, version)

    def pointer(self, name):
        return os.path.join(self.path, name, CURRENT)

    # ---- read
    def current(self, name):
        """The version ``<name>/current`` points to, or None."""
        try:
            target = os.readlink(self.pointer(name))
        except OSError:
            return None
        return target.rstrip("/")

    def meta(self, name, version):
        return read_json(self.meta_path(name, version))

    def installed(self):
        """Every version with our metadata: [{name, version, bytes, last_used, path, current}]."""
        found = []
        if not os.path.isdir(self.path):
            return found
        for name in sorted(os.listdir(self.path)):
            vdir = os.path.join(self.path, name, VERSIONS)
            if name.startswith(".") or not os.path.isdir(vdir):
                continue
            current = self.current(name)
            for entry in sorted(os.listdir(vdir)):
                if not entry.endswith(".json"):
                    continue
                version = entry[:-5]
                meta = read_json(os.path.join(vdir, entry))
                path = self.version_dir(name, version)
                if not isinstance(meta, dict) or not os.path.isdir(path):
                    continue
                found.append(dict(name=name, version=version, path=path,
                                  bytes=int(meta.get("bytes") or tree_bytes(path)),
                                  last_used=iso_seconds(meta.get("last_used") or meta.get("published_at")),
                                  current=current == version))
        return found

    def existing(self, item, files, verify="size"):
        """(state, reason): state is present, missing, adopt (dir without metadata) or corrupt."""
        path = self.version_dir(item["name"], item["version"])
        if not os.path.isdir(path):
            return "missing", None
        meta = self.meta(item["name"], item["version"])
        known = None
        if isinstance(meta, dict) and isinstance(meta.get("files"), list):
            known = dict((f.get("path"), f) for f in meta["files"] if isinstance(f, dict))
        wanted = dict((f["path"], f) for f in files)
        if known is not None:
            if set(known) != set(wanted) or any(known[p].get("sha256") != wanted[p]["sha256"] or (
                    wanted[p]["size"] is not None and known[p].get("size") != wanted[p]["size"]) for p in wanted):
                return "corrupt", "published metadata lists other files or checksums"
        mode = verify if known is not None else "sha256"
        for rel, entry in sorted(wanted.items()):
            full = os.path.join(path, rel)
            try:
                size = os.stat(full).st_size
            except OSError:
                return ("corrupt" if known is not None else "missing"), "%s is missing" % rel
            expected = entry["size"] if entry["size"] is not None else (known or {}).get(rel, {}).get("size")
            if expected is not None and size != expected:
                return "corrupt", "%s has %d bytes, expected %d" % (rel, size, expected)
            if mode == "sha256":
                digest, _size = hash_file(full)
                if digest.hexdigest() != entry["sha256"]:
                    return "corrupt", "%s has sha256 %s, expected %s" % (rel, digest.hexdigest(), entry["sha256"])
        return ("present" if known is not None else "adopt"), None

    def part_size(self, item, rel):
        """Bytes already staged for one file (its ``.part``, or the file verified but unpublished)."""
        staging = self.staging_dir(item["name"], item["version"])
        for candidate in (os.path.join(staging, rel + PART), os.path.join(staging, rel)):
            try:
                return os.stat(candidate).st_size
            except OSError:
                pass
        return 0

    # ---- change
    def create(self):
        makedirs(self.path, self.dir_mode)

    def write_meta(self, item, manifest_sha256, files):
        now = now_iso()
        meta = dict(name=item["name"], version=item["version"], source=item["source"],
                    manifest=item["manifest"], manifest_sha256=manifest_sha256,
                    files=files, bytes=sum(int(f["size"] or 0) for f in files),
                    published_at=now, last_used=now)
        path = self.meta_path(item["name"], item["version"])
        makedirs(os.path.dirname(path), self.dir_mode)
        atomic_write(path, json.dumps(meta, indent=2, sort_keys=True) + "\n", mode=0o644)

    def touch(self, item):
        """last_used bookkeeping: not a change."""
        path = self.meta_path(item["name"], item["version"])
        meta = read_json(path)
        if isinstance(meta, dict):
            meta["last_used"] = now_iso()
            atomic_write(path, json.dumps(meta, indent=2, sort_keys=True) + "\n", mode=0o644)

    def publish(self, item, files):
        """Publish the staged version whose ``files`` (.part) are all verified: drop the
        suffixes, fix modes, fsync the tree, then one rename into place."""
        staging = self.staging_dir(item["name"], item["version"])
        for entry in files:
            part = os.path.join(staging, entry["path"] + PART)
            os.chmod(part, self.file_mode)
            os.rename(part, os.path.join(staging, entry["path"]))
        for dirpath, _dirs, _files in os.walk(staging, topdown=False):
            os.chmod(dirpath, self.dir_mode)
            fsync_dir(dirpath)

    def move_into_place(self, item):
        staging = self.staging_dir(item["name"], item["version"])
        target = self.version_dir(item["name"], item["version"])
        makedirs(os.path.dirname(target), self.dir_mode)
        old = None
        if os.path.lexists(target):
            old = os.path.join(self.path, STAGING,
                               ".replaced-%s-%s-%d" % (item["name"], item["version"], os.getpid()))
            os.rename(target, old)
        os.rename(staging, target)
        fsync_dir(os.path.dirname(target))
        if old:
            shutil.rmtree(old)
        self.cleanup_staging(item["name"])

    def cleanup_staging(self, name):
        for path in (os.path.join(self.path, STAGING, name), os.path.join(self.path, STAGING)):
            try:
                os.rmdir(path)
            except OSError:
                break

    def switch(self, name, version):
        """Point ``<name>/current`` at ``version`` (new symlink, then rename over the old one)."""
        link = self.pointer(name)
        tmp = os.path.join(self.path, name, ".%s.%d.tmp" % (CURRENT, os.getpid()))
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(version, tmp)
        os.rename(tmp, link)
        fsync_dir(os.path.dirname(link))

    def unpoint(self, name, version):
        """Remove ``<name>/current`` while it points to ``version`` (which is being evicted)."""
        if self.current(name) == version:
            os.unlink(self.pointer(name))

    def evict(self, name, version):
        """Delete a published version: out of sight by one rename, then removed."""
        self.unpoint(name, version)
        trash = os.path.join(self.path, STAGING, ".evict-%s-%s-%d" % (name, version, os.getpid()))
        makedirs(os.path.dirname(trash), self.dir_mode)
        os.rename(self.version_dir(name, version), trash)
        try:
            os.unlink(self.meta_path(name, version))
        except OSError:
            pass
        shutil.rmtree(trash)
