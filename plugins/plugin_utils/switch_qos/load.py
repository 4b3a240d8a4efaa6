# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a fabric's ``switch.state``: a file (one switch) or a directory (one file per switch), relative
to the inventory directory; each file through the parser of ``switch.os``."""

from __future__ import annotations

import errno
import json
import os
import stat

from . import nvue, onyx, sonic
from .model import State, StateError

MAX_BYTES = 64 * 1024 * 1024
PARSERS = {"sonic": sonic, "cumulus-nvue": nvue, "onyx": onyx}


def resolve(path: str, base_dir: str | None) -> str:
    """``path`` made absolute: as given, or below ``base_dir`` (the inventory directory)."""
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded):
        return os.path.normpath(expanded)
    return os.path.normpath(os.path.join(base_dir or os.getcwd(), expanded))


def switch_name(filename: str) -> str:
    """``leaf01.json`` / ``leaf01.config_db.json`` / ``leaf01.txt`` -> ``leaf01``."""
    base = os.path.basename(filename)
    return base.split(".", 1)[0] or base


def _read(path: str) -> str:
    """A regular file's text, opened without following a link; at most MAX_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(f"{path}: is a symbolic link; give the file itself") from None
        raise StateError(f"{path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StateError(f"{path}: not a regular file")
        if info.st_size > MAX_BYTES:
            raise StateError(f"{path}: {info.st_size} bytes, more than {MAX_BYTES} for a switch state")
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(MAX_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StateError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def parse_file(os_name: str, path: str, name: str | None = None) -> State:
    parser = PARSERS.get(os_name)
    if parser is None:
        raise StateError(f"switch.os {os_name!r}: use one of {', '.join(sorted(PARSERS))}")
    text = _read(path)
    label = name or switch_name(path)
    if parser is sonic:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise StateError(f"{path}: not JSON ({exc}); a SONiC state is its config_db.json") from None
        return sonic.parse(doc, label, path)
    return parser.parse(text, label, path)


def load_states(os_name: str, path: str, base_dir: str | None = None) -> list[State]:
    """Every switch of a ``switch.state`` (a file: one switch; a directory: each regular file not
    starting with a dot, sorted; links are not followed)."""
    full = resolve(path, base_dir)
    try:
        info = os.lstat(full)
    except OSError as exc:
        raise StateError(f"switch.state {path}: {full}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        names = sorted(n for n in os.listdir(full) if not n.startswith("."))
        files = [os.path.join(full, n) for n in names if stat.S_ISREG(os.lstat(os.path.join(full, n)).st_mode)]
        if not files:
            raise StateError(f"switch.state {path}: {full} holds no switch file")
        states = [parse_file(os_name, f) for f in files]
        seen: dict[str, str] = {}
        for state in states:
            if state["name"] in seen:
                raise StateError(f"switch.state {path}: {seen[state['name']]} and {state['source']} both name "
                                 f"switch {state['name']}")
            seen[state["name"]] = state["source"]
        return states
    return [parse_file(os_name, full)]
