# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node-side file helpers shared by the modules (stdlib only).

* ``HostRoot`` maps absolute node paths (``/proc/sys/...``, ``/sys/...``, ``/etc/...``)
  under a configurable root so that unit tests can point a module at a temporary tree.
* ``atomic_write`` writes a file so that a reader (or a crash) sees either the old or the
  new content, never a truncated file: temp file in the same directory, fsync, rename,
  fsync of the directory.
* ``node_lock`` serialises concurrent runs of the collection on one node. The capability
  runner (``_capability.run``) holds it around a capability's whole read -> plan -> apply, in
  check mode too, at ``/run/aiinfra-datapath.lock`` below the module's ``root``
  (``no_lock`` stands in for it for read-only capabilities).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import os
import tempfile
import time
from contextlib import contextmanager

from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

DEFAULT_LOCK_PATH = "/run/aiinfra-datapath.lock"


class NodePathError(CapabilityError, ValueError):
    """A node path that is not absolute (a parameter the module did not check): a clean failure."""


class HostRoot(object):
    """Resolve absolute node paths below ``root`` (``/`` on a real node)."""

    def __init__(self, root="/"):
        self.root = root or "/"

    def path(self, *parts):
        joined = os.path.join(*parts) if parts else "/"
        if not joined.startswith("/"):
            raise NodePathError("node path must be absolute: %r" % joined)
        if self.root == "/":
            return joined
        return os.path.join(self.root, joined.lstrip("/"))

    def exists(self, path):
        return os.path.exists(self.path(path))

    def read(self, path, default=None):
        """Return the stripped text of a file, or ``default`` if it does not exist."""
        try:
            with open(self.path(path), "r", encoding="utf-8", errors="surrogateescape") as handle:
                return handle.read().strip()
        except (IOError, OSError) as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR) and default is not None:
                return default
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            raise

    def read_raw(self, path):
        """Return the whole text of a file, or None if it does not exist. Line ends are kept as
        they are (no newline translation), so a file we edit keeps the admin's lines byte-identical;
        bytes that are not UTF-8 (a Latin-1 comment) come back as surrogate escapes, which
        :func:`atomic_write` writes back as the same bytes."""
        try:
            with open(self.path(path), "r", encoding="utf-8", errors="surrogateescape", newline="") as handle:
                return handle.read()
        except (IOError, OSError) as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            raise

    def write(self, path, value):
        """Write a value to a kernel file (sysfs/procfs): one write, no temp file."""
        with open(self.path(path), "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(value)

    def listdir(self, path):
        try:
            return sorted(os.listdir(self.path(path)))
        except (IOError, OSError) as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return []
            raise


def atomic_write(path, content, mode=0o644, uid=None, gid=None):
    """Replace ``path`` with ``content`` atomically.

    The temporary file lives in the target directory (same filesystem, so ``rename`` is
    atomic) and starts with a dot so that directory scanners (systemd-sysctl, NFD's
    features.d) skip it while it is incomplete.
    """
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogateescape")
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if uid is not None or gid is not None:
            os.chown(tmp, -1 if uid is None else uid, -1 if gid is None else gid)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextmanager
def node_lock(path=DEFAULT_LOCK_PATH, timeout=60.0, poll=0.2):
    """Hold an exclusive flock on ``path``; raise ``LockTimeout`` after ``timeout`` s."""
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        try:
            os.makedirs(directory, 0o755)
        except OSError as exc:  # another run created it in between: fine
            if exc.errno != errno.EEXIST or not os.path.isdir(directory):
                raise
    handle = open(path, "a+")
    deadline = time.time() + timeout
    try:
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.time() >= deadline:
                    raise LockTimeout(
                        "another aiinfra.datapath run holds %s; waited %.0f s" % (path, timeout)
                    )
                time.sleep(poll)
        yield
    finally:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        finally:
            handle.close()


@contextmanager
def no_lock():
    """Stand-in for ``node_lock`` where a run takes no lock (a read-only capability)."""
    yield


class LockTimeout(CapabilityError):
    """Another run of the collection holds the node lock."""
