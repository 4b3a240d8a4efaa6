# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the controller keeps what it computed in earlier runs, and how it reads and writes there.

Two caches live under one directory: ``ansiballz/`` (datapath_run's payload, payload_cache.py)
and ``plans/`` (each host's validated plan, plan_cache.py). ``AIINFRA_DATAPATH_CACHE`` names the
directory (default ``$XDG_CACHE_HOME/aiinfra-datapath``, else ``~/.cache/aiinfra-datapath``);
``off`` turns both off. A cache directory is only used while it is owned by the user running
ansible and not writable by group or others: what is kept there decides what a node receives.
Files are written with mode 0600 by write-then-rename, so a concurrent reader (another fork,
another run) sees the old file or the new one.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Any

ENV = "AIINFRA_DATAPATH_CACHE"
OFF = ("off", "0", "false", "no")


def root(environ: Any = None) -> str | None:
    """The cache directory, or None when turned off."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENV, "")
    if value.strip().lower() in OFF:
        return None
    if value:
        return os.path.abspath(os.path.expanduser(value))
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "aiinfra-datapath")


def directory(name: str, environ: Any = None) -> str | None:
    """One cache's directory under the root, or None when turned off."""
    base = root(environ)
    return None if base is None else os.path.join(base, name)


def private_dir(path: str) -> bool:
    """Ours alone: a directory (not a link) owned by this user, not writable by group or others."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def make_private_dir(path: str) -> bool:
    """Create ``path`` (and its parents) with mode 0700 where missing; whether it is private."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return False
    return private_dir(path)


def write_bytes(target: str, data: bytes) -> None:
    """Write by write-then-rename (mode 0600): a concurrent reader sees the old file or the new one."""
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
