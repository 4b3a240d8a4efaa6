# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model cache's tree, walked without following links (stdlib only).

The cache directory holds files other programs read (the published models) and is reached by
paths a neighbour may try to bend: a pod that can write below the cache, a user who owns a
directory on the way. Every path below ``cache_dir`` is therefore reached from a directory
descriptor, one component at a time, with ``O_NOFOLLOW | O_DIRECTORY`` (``openat``): a symbolic
link where a directory belongs stops the walk with a clear error instead of sending a root
write elsewhere. A new file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, an existing one
opened with ``O_NOFOLLOW`` and checked with ``fstat`` (a regular file, one link); modes are set
with ``fchmod`` on the descriptor, renames and unlinks name an entry relative to the directory
descriptor that holds it (they never follow the entry itself), ``lstat`` (``fstatat`` without
following) tells what exists.

Trust: ``cache_dir`` itself and every directory below it must be owned by the user the module
runs as (root on a node) and not writable by group or others; every directory above it must be
owned by root or that user and not writable by group or others unless it is sticky (``/tmp``):
otherwise someone else could rename the cache away and put a tree of theirs in its place.
:class:`UnsafeCache` names the path, what is wrong and the fix; nothing is changed.

Only the walks are here: the copies (``transfer``) receive the descriptors these functions
open, so their hot loops are the same as before.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import stat

from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import ModelCacheError

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC
O_FILE = os.O_NOFOLLOW | O_CLOEXEC
STAGING_MODE = 0o700  # nobody but the owner looks into partial downloads


class UnsafeCache(ModelCacheError):
    """The cache tree is not safe to write: a link, a foreign owner, a mode others can write."""


def euid():
    return os.geteuid()


def _owner_text(uid):
    return "root" if uid == 0 else "uid %d" % uid


def check_own_dir(fd, path):
    """``fd`` (a directory of the cache) is owned by this user and writable by no one else."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeCache("%s is not a directory; refusing to use the model cache (nothing was changed)" % path)
    if st.st_uid != euid():
        raise UnsafeCache(
            "%s is owned by %s, not by %s who runs the module: another user could change what is published "
            "there; refusing (nothing was changed). Fix: chown %s %s (after checking what is in it), or remove it"
            % (path, _owner_text(st.st_uid), _owner_text(euid()), euid(), path), path=path)
    if st.st_mode & 0o022:
        raise UnsafeCache(
            "%s is writable by group or others (mode %04o): they could replace what is published there; "
            "refusing (nothing was changed). Fix: chmod go-w %s" % (path, stat.S_IMODE(st.st_mode), path), path=path)
    return st


def check_ancestor(st, path):
    """A directory above the cache: root's or ours, and only sticky if others may write to it."""
    if st.st_uid not in (0, euid()):
        raise UnsafeCache(
            "%s, above cache_dir, is owned by %s: its owner could move the cache away and put another tree in "
            "its place; refusing (nothing was changed). Fix: put the cache below directories owned by root"
            % (path, _owner_text(st.st_uid)), path=path)
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UnsafeCache(
            "%s, above cache_dir, is writable by group or others (mode %04o) and not sticky: they could move the "
            "cache away and put another tree in its place; refusing (nothing was changed). Fix: chmod go-w %s"
            % (path, stat.S_IMODE(st.st_mode), path), path=path)


def _link_error(path):
    return UnsafeCache("%s is a symbolic link where the model cache expects a directory or file: refusing to "
                       "follow it (nothing was changed). Fix: remove the link (it is not ours)" % path, path=path)


def open_dir_at(dirfd, name, path):
    """``name`` in ``dirfd``, opened without following a link; None when it does not exist."""
    try:
        return os.open(name, O_DIR, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            if is_link_at(dirfd, name):
                raise _link_error(path)
            raise UnsafeCache("%s is not a directory; refusing to use it (nothing was changed)" % path, path=path)
        raise


def is_link_at(dirfd, name):
    st = lstat_at(dirfd, name)
    return st is not None and stat.S_ISLNK(st.st_mode)


def lstat_at(dirfd, name):
    """What ``name`` in ``dirfd`` is, without following it; None when it does not exist."""
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise


def mkdir_at(dirfd, name, mode, path):
    """Create ``name`` in ``dirfd`` (or open it if it exists); returns its descriptor, checked and
    with ``mode`` (fchmod: not subject to the umask)."""
    try:
        os.mkdir(name, mode, dir_fd=dirfd)
        created = True
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
        created = False
    fd = open_dir_at(dirfd, name, path)
    if fd is None:  # removed between mkdir and open
        raise UnsafeCache("%s vanished while it was being created; nothing was published" % path, path=path)
    try:
        st = check_own_dir(fd, path) if not created else os.fstat(fd)
        if stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def walk(dirfd, rel, base, create=False, mode=0o755, check=True):
    """The directory ``rel`` ('a/b') below ``dirfd`` (whose path is ``base``), one component at a
    time without following links; created with ``mode`` where missing when ``create``. Returns a
    new descriptor, or None when a component is missing (and not ``create``)."""
    fd = os.dup(dirfd)
    path = base
    try:
        for part in [p for p in rel.split("/") if p]:
            if part in (".", ".."):
                raise UnsafeCache("%s/%s: '.' and '..' are not walked below the cache" % (path, part))
            path = path.rstrip("/") + "/" + part
            if create:
                nfd = mkdir_at(fd, part, mode, path)
            else:
                nfd = open_dir_at(fd, part, path)
                if nfd is None:
                    return None
                if check:
                    try:
                        check_own_dir(nfd, path)
                    except BaseException:
                        os.close(nfd)
                        raise
            os.close(fd)
            fd = nfd
        result, fd = fd, None
        return result
    finally:
        if fd is not None:
            os.close(fd)


def open_root(path, create=False, mode=0o755):
    """The cache directory ``path``: its ancestors checked (:func:`check_ancestor`), then opened
    (and created when ``create``) by a walk from ``/`` over its resolved path without following
    links, and checked itself (:func:`check_own_dir`). None when it does not exist and not
    ``create``."""
    given = os.path.abspath(path)
    # The directories above as written (a link among them was put there by root or us: it lies in
    # a directory checked here), then the same walk on the resolved path, by descriptor.
    prefix = "/"
    parts = [p for p in given.split("/") if p]
    for part in parts[:-1]:
        prefix = os.path.join(prefix, part)
        try:
            check_ancestor(os.stat(prefix), prefix)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                break
            raise
    real = os.path.realpath(given)
    fd = os.open("/", O_DIR)
    walked = "/"
    try:
        check_ancestor(os.fstat(fd), "/")
        rparts = [p for p in real.split("/") if p]
        for index, part in enumerate(rparts):
            last = index == len(rparts) - 1
            walked = os.path.join(walked, part)
            nfd = open_dir_at(fd, part, walked)
            if nfd is None:
                if not create:
                    return None
                nfd = mkdir_at(fd, part, mode, walked)
            try:
                if last:
                    check_own_dir(nfd, walked)
                else:
                    check_ancestor(os.fstat(nfd), walked)
            except BaseException:
                os.close(nfd)
                raise
            os.close(fd)
            fd = nfd
        result, fd = fd, None
        return result
    finally:
        if fd is not None:
            os.close(fd)


def open_file_at(dirfd, name, path, flags=os.O_RDONLY, mode=0o600, regular=True):
    """Open ``name`` in ``dirfd`` without following a link; with ``regular`` the result must be a
    regular file with one link (never a hard link to a file elsewhere). Raises ``FileNotFoundError``
    when missing (and not created)."""
    try:
        fd = os.open(name, flags | O_FILE, mode, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_error(path)
        raise
    if regular:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise UnsafeCache("%s is not a regular file with a single link (%s); refusing to use it"
                              % (path, "%d links" % st.st_nlink if stat.S_ISREG(st.st_mode) else "not a file"),
                              path=path)
    return fd


def read_at(dirfd, name, path, limit=16 << 20):
    """The bytes of a small regular file in ``dirfd``; None when missing or unsafe to read."""
    try:
        fd = open_file_at(dirfd, name, path)
    except (OSError, UnsafeCache):
        return None
    try:
        chunks = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_at(dirfd, name, data, mode, path):
    """Write ``data`` to ``name`` in ``dirfd`` atomically: a new temporary file (O_EXCL, no link
    followed), fsync, fchmod, rename over ``name``, fsync of the directory."""
    tmp = ".%s.%d.tmp" % (name, os.getpid())
    try:
        os.unlink(tmp, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
    fd = open_file_at(dirfd, tmp, path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp, dir_fd=dirfd)
        raise
    os.close(fd)
    os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    os.fsync(dirfd)


def unlink_at(dirfd, name):
    try:
        os.unlink(name, dir_fd=dirfd)
        return True
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise


def rmtree_at(dirfd, name):
    """Remove ``name`` in ``dirfd`` and everything below it, by descriptor: links are removed,
    never followed."""
    st = lstat_at(dirfd, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dirfd)
        return
    fd = os.open(name, O_DIR, dir_fd=dirfd)
    try:
        for entry in os.listdir(fd):
            rmtree_at(fd, entry)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dirfd)


def tree_bytes_at(dirfd):
    """Bytes of the regular files below ``dirfd`` (links are not followed)."""
    total = 0
    for entry in os.listdir(dirfd):
        st = lstat_at(dirfd, entry)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            fd = os.open(entry, O_DIR, dir_fd=dirfd)
            try:
                total += tree_bytes_at(fd)
            finally:
                os.close(fd)
        elif stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total


def fix_tree_modes(dirfd, dir_mode, path, fsync=True):
    """fchmod every directory below ``dirfd`` (itself included) to ``dir_mode`` and fsync it,
    bottom-up, by descriptor."""
    for entry in os.listdir(dirfd):
        st = lstat_at(dirfd, entry)
        if st is not None and stat.S_ISDIR(st.st_mode):
            fd = os.open(entry, O_DIR, dir_fd=dirfd)
            try:
                fix_tree_modes(fd, dir_mode, path + "/" + entry, fsync)
            finally:
                os.close(fd)
    os.fchmod(dirfd, dir_mode)
    if fsync:
        os.fsync(dirfd)


class DirFd(object):
    """A directory descriptor as a context manager (closed on exit; None stays None)."""

    def __init__(self, fd):
        self.fd = fd

    def __enter__(self):
        return self.fd

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        return False
