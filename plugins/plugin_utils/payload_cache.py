# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A controller cache of the ``datapath_run`` AnsiballZ payload across runs.

ansible-core builds the payload of a module once per run: it parses the module and every
``module_utils`` file it imports (about 100 files for ``datapath_run``) and zips them, a third
of a second of controller CPU that every host of the play waits for (the forks wait on one
lock), on every run, although the sources rarely change between runs. ansible keeps the built
payload for the rest of the run in its per-run directory (``<local_tmp>/ansiballz_cache/<fqn>-
<compression>-<extensions>``) and uses it when the file exists there.

This module keeps a copy of that file between runs and puts it back into the next run's
directory before the module is executed, after checking that it still is what ansible would
build: every file in the payload is compared, byte for byte, with the source it came from on
this controller (the module, this collection's module_utils, ansible's module_utils), and the
key names the ansible-core version, the module's path and the compression. A single differing
byte, a file that is gone or a file from another collection means no copy: ansible builds the
payload as usual and the copy is replaced after the run. A payload with extensions (the
debugger, coverage) has another file name, which this cache never writes.

The kept copy also carries the payload's ``module_utils`` (this collection's and ansible's)
compiled to bytecode (checked hash-based ``.pyc`` files, PEP 552), when the node's Python
reported the controller's bytecode magic number: Python's zipimport then loads them instead of
compiling about 100 source files on every node and every run (0.15 s of CPU per node, most of
what the node's Python spends before the first capability runs). The node checks each ``.pyc``
against the hash of the ``.py`` next to it in the payload (which is checked against this
controller's source here), and a Python of another version rejects the magic number and
compiles the source as before. The module itself stays source. Where no copy is kept (a first
run), ``add_bytecode`` compiles the module_utils into the payload ansible built in this run before
any node runs it, so that the first run's nodes load bytecode too. Compiled code names its file
``<datapath_run bytecode>/<path in the payload>`` (zipimport does not rename it to the node's
temporary path): tracebacks read the same; ansible's own fallback attribution of a deprecation
by the caller's file (used only where the caller names no collection) reads this collection's
files as before and ansible's as undetermined instead of ansible-core.

The cached file is ansible's own pickle, so it is only used from a directory owned by this user
and not writable by others, and written there with mode 0600 by write-then-rename
(controller_cache.py: ``$AIINFRA_DATAPATH_CACHE/ansiballz``, ``off`` turns it off).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import fcntl
import functools
import hashlib
import importlib.util
import io
import marshal
import os
import pickle
import types
import zipfile
from collections.abc import Callable
from typing import Any

import ansible
from ansible import constants as C
from ansible.release import __version__ as ANSIBLE_VERSION
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import controller_cache

# the bytecode magic number of this controller's Python: nodes that report it get compiled module_utils
MAGIC = importlib.util.MAGIC_NUMBER.hex()
# the file name compiled code carries (tracebacks, deprecations: the collection's path is what counts)
CODE_PREFIX = "<datapath_run bytecode>/"
# the zip comment of a kept payload with bytecode (read back from the last bytes alone)
BYTECODE_COMMENT = b"aiinfra.datapath: module_utils compiled"
ANSIBLE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ansible.__file__)))


def cache_dir(environ: Any = None) -> str | None:
    """The cache directory, or None when turned off."""
    return controller_cache.directory("ansiballz", environ)


def run_file(fqn: str, compression: str) -> str:
    """The file ansible looks for in this run (no extensions: the debugger or coverage name theirs)."""
    return os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache", f"{fqn}-{compression}-none")


def _key(fqn: str, module_path: str, compression: str) -> str:
    text = "\0".join((ANSIBLE_VERSION, fqn, os.path.realpath(module_path), compression))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _collection_root(module_path: str, fqn: str) -> tuple[str, str]:
    """(the payload's prefix of this collection, its root on disk) from the module's path and fqn."""
    parts = fqn.split(".")  # ansible_collections.<ns>.<name>.plugins.modules.<module>
    prefix = "/".join(parts[:3]) + "/"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(module_path))))
    return prefix, root


def matches_sources(zip_data: bytes, fqn: str, module_path: str) -> bool:
    """Whether every file of the payload is, byte for byte, the source on this controller."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data, validate=True)))
        names = archive.namelist()
    except (binascii.Error, ValueError, zipfile.BadZipFile):
        return False
    prefix, root = _collection_root(module_path, fqn)
    if not names:
        return False
    for name in names:
        if name.endswith(".pyc") and name.startswith((prefix, "ansible/")) and name[:-1] in names:
            continue  # compiled here from the .py next to it; the node checks it against that file's hash
        if name.startswith("ansible/"):
            if name.endswith("__init__.py"):
                continue  # package markers ansible writes itself (the version is in the key)
            source = os.path.join(ANSIBLE_ROOT, name)
        elif name.startswith(prefix):
            source = os.path.join(root, name[len(prefix):])
        elif name.endswith("__init__.py") and name.count("/") <= 2:
            continue  # ansible_collections/__init__.py and the namespace's, written empty by ansible
        else:
            return False  # another collection's module_utils: not checked here, so not cached
        try:
            with open(source, "rb") as handle:
                disk = handle.read()
        except FileNotFoundError:
            if name.endswith("__init__.py") and not archive.read(name):
                continue  # a package without __init__.py on disk gets an empty one in the payload
            return False
        except OSError:
            return False
        if disk != archive.read(name):
            return False
    return True


def _load(path: str) -> Any:
    with open(path, "rb") as handle:
        return pickle.load(handle)


def prime(fqn: str, module_path: str, compression: str, environ: Any = None) -> str:
    """Put the kept payload where this run's ansible looks, when it still matches the sources.
    Returns what happened: ``off``, ``present`` (already built in this run), ``primed``, ``missing``,
    ``stale`` or ``unsafe`` (a cache directory others could write)."""
    directory = cache_dir(environ)
    if directory is None:
        return "off"
    target = run_file(fqn, compression)
    if os.path.exists(target):
        return "present"
    kept = os.path.join(directory, _key(fqn, module_path, compression))
    if not os.path.exists(kept):
        return "missing"
    if not controller_cache.private_dir(directory):
        return "unsafe"
    os.makedirs(os.path.dirname(target), exist_ok=True)
    # the forks of one run start together: one checks the copy against the sources, the others
    # wait for it and find the file in place, as ansible's own build does (module_common's lock)
    with open(target + ".prime.lock", "w", encoding="utf-8") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        try:
            if os.path.exists(target):
                return "present"
            if os.path.exists(target + ".stale"):
                return "stale"  # another fork of this run found the copy stale: ansible builds
            outcome = _prime(fqn, module_path, kept, target)
            if outcome == "stale":
                open(target + ".stale", "w", encoding="utf-8").close()
            return outcome
        finally:
            fcntl.lockf(lock, fcntl.LOCK_UN)


def _prime(fqn: str, module_path: str, kept: str, target: str) -> str:
    try:
        cached = _load(kept)
        zip_data = cached.zip_data
    except Exception:  # noqa: BLE001 - any broken or foreign file is only a cache miss
        return "stale"
    if not isinstance(zip_data, bytes) or not matches_sources(zip_data, fqn, module_path):
        return "stale"
    _write(target, kept)
    return "primed"


def keep(fqn: str, module_path: str, compression: str, environ: Any = None, node_magic: str | None = None) -> str:
    """After the module ran: keep this run's payload for the next runs, when it is not kept yet; with
    the module_utils compiled when ``node_magic`` (the node's bytecode magic number, hex) is this
    controller's. Returns ``off``, ``kept``, ``kept with bytecode``, ``current`` (the copy holds this
    payload already), ``absent`` or ``unsafe``.

    The forks of a run call this together: one keeps (and compiles) under a lock, and the copy
    names the payload it was made from (``<copy>.from``: the sha256 of ansible's file), so the
    others, and later runs, know it as current without decoding either."""
    directory = cache_dir(environ)
    if directory is None:
        return "off"
    built = run_file(fqn, compression)
    if not os.path.exists(built):
        return "absent"
    kept = os.path.join(directory, _key(fqn, module_path, compression))
    if not controller_cache.make_private_dir(directory):
        return "unsafe"  # before anything there is read: the copy is a pickle
    if _current(built, kept, node_magic):
        return "current"
    with open(kept + ".lock", "w", encoding="utf-8") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        try:
            if _current(built, kept, node_magic):
                return "current"  # another fork of this run kept it meanwhile
            return _keep(fqn, module_path, built, kept, node_magic)
        finally:
            fcntl.lockf(lock, fcntl.LOCK_UN)


def add_bytecode(fqn: str, module_path: str, compression: str, environ: Any = None) -> str:
    """Before the nodes run a payload ansible built in this run (no copy was kept, or it was
    stale): the module_utils compiled into it (with_bytecode), in this run's file, which ansible
    reads for every host, and in the copy kept for later runs. The nodes of a first run then load
    the bytecode instead of each compiling about 100 files; a node whose Python is another
    version rejects its magic number and compiles the sources, as before. Returns ``off``,
    ``absent``, ``unsafe``, ``present`` (the payload has bytecode: another fork of this run added
    it), ``stale`` (not this controller's sources: left as ansible built it, nothing kept) or
    ``added``. The forks of a run call this together: one compiles, under the lock keep() takes."""
    directory = cache_dir(environ)
    if directory is None:
        return "off"
    built = run_file(fqn, compression)
    if not os.path.exists(built):
        return "absent"
    if not controller_cache.make_private_dir(directory):
        return "unsafe"
    kept = os.path.join(directory, _key(fqn, module_path, compression))
    with open(kept + ".lock", "w", encoding="utf-8") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        try:
            payload = _load(built)  # ansible's own file of this run, read as ansible reads it
            zip_data = payload.zip_data
            if not isinstance(zip_data, bytes):
                return "absent"
            if _has_bytecode(zip_data):
                return "present"
            if not matches_sources(zip_data, fqn, module_path):
                return "stale"
            data = pickle.dumps(dataclasses.replace(payload, zip_data=_compiled(zip_data, fqn, module_path)))
            controller_cache.write_bytes(built, data)
            controller_cache.write_bytes(kept, data)
            controller_cache.write_bytes(kept + ".from", hashlib.sha256(data).hexdigest().encode() + b"\n")
            return "added"
        finally:
            fcntl.lockf(lock, fcntl.LOCK_UN)


def _current(built: str, kept: str, node_magic: str | None) -> bool:
    """Whether the kept copy is this run's payload (the file itself, primed, or the copy made from
    it), with bytecode where the node could use it."""
    try:
        with open(built, "rb") as handle:
            data = handle.read()
        with open(kept, "rb") as handle:
            copy = handle.read()
        if copy != data:
            with open(kept + ".from", encoding="ascii") as handle:
                if handle.read().strip() != hashlib.sha256(data).hexdigest():
                    return False
        return node_magic != MAGIC or _has_bytecode(pickle.loads(copy).zip_data)
    except Exception:  # noqa: BLE001 - missing, broken or foreign: not current
        return False


def _keep(fqn: str, module_path: str, built: str, kept: str, node_magic: str | None) -> str:
    try:
        with open(built, "rb") as handle:
            raw = handle.read()
        payload = pickle.loads(raw)
        zip_data = payload.zip_data
    except Exception:  # noqa: BLE001 - not a payload ansible wrote: nothing to keep
        return "absent"
    source = hashlib.sha256(raw).hexdigest().encode() + b"\n"
    try:
        if os.path.exists(kept):
            old = _load(kept).zip_data
            if old == zip_data or _sources(old) == _sources(zip_data):
                if node_magic != MAGIC or _has_bytecode(old):
                    controller_cache.write_bytes(kept + ".from", source)
                    return "current"
    except Exception:  # noqa: BLE001 - a broken copy is replaced below
        pass
    if not isinstance(zip_data, bytes) or not matches_sources(zip_data, fqn, module_path):
        return "absent"  # the sources changed during the run: keep nothing
    if node_magic == MAGIC and not _has_bytecode(zip_data):
        data = pickle.dumps(dataclasses.replace(payload, zip_data=_compiled(zip_data, fqn, module_path)))
        outcome = "kept with bytecode"
    else:
        data, outcome = raw, "kept"
    controller_cache.write_bytes(kept, data)
    controller_cache.write_bytes(kept + ".from", source)
    return outcome


def _has_bytecode(zip_data: bytes) -> bool:
    """Whether a kept payload carries bytecode, from its zip comment (the archive's last bytes),
    without decoding the whole payload."""
    return len(zip_data) % 4 == 0 and BYTECODE_COMMENT in base64.b64decode(zip_data[-88:])


def _sources(zip_data: bytes) -> dict[str, bytes]:
    """The payload's files other than the compiled ones."""
    archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data)))
    return {name: archive.read(name) for name in archive.namelist() if not name.endswith(".pyc")}


def with_bytecode(zip_data: bytes, prefix: str | tuple[str, ...],
                  origin: Callable[[str], str | None] | None = None) -> bytes:
    """The payload with a checked hash-based ``.pyc`` (PEP 552) next to every ``.py`` under
    ``prefix`` (one or several), compiled as zipimport compiles the source; every other entry as it was.

    ``origin`` names the file on this controller an entry came from: where that file is the
    entry byte for byte and Python's own cache (``__pycache__``, written when the file was
    installed or imported) holds its bytecode, valid for this source as the import system checks
    it, that code is used, renamed, instead of compiling the file again (most of ansible's)."""
    raw = base64.b64decode(zip_data)
    source = zipfile.ZipFile(io.BytesIO(raw))
    infos = source.infolist()
    recompile = any(info.filename.endswith(".pyc") for info in infos)
    # the .pyc entries appended to the archive as it is (its entries are not compressed again),
    # or, where it holds .pyc files of a copy kept by an earlier version of this cache, rewritten
    out = io.BytesIO(b"" if recompile else raw)
    with zipfile.ZipFile(out, "w" if recompile else "a") as target:
        target.comment = BYTECODE_COMMENT
        for info in infos:
            if info.filename.endswith(".pyc"):
                continue  # compiled again below
            wanted = info.filename.startswith(prefix) and info.filename.endswith(".py")
            data = source.read(info) if recompile or wanted else b""
            if recompile:
                target.writestr(info, data)
            if wanted:
                name = CODE_PREFIX + info.filename
                code = _installed_code(origin(info.filename) if origin else None, data, name)
                if code is None:
                    text = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")  # as zipimport does
                    code = compile(text, name, "exec", dont_inherit=True)
                compiled = zipfile.ZipInfo(info.filename + "c", date_time=info.date_time)
                compiled.compress_type = info.compress_type
                # magic, flags (hash-based, check the source), the source's hash, the code
                target.writestr(compiled, importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little")
                                + importlib.util.source_hash(data) + marshal.dumps(code))
    return base64.b64encode(out.getvalue())


def _installed_code(path: str | None, data: bytes, name: str) -> types.CodeType | None:
    """The code of ``path`` from Python's cache beside it, named ``name``, when ``path`` holds
    ``data`` and the cached file is valid for it (magic number; its source's mtime and size, or
    its source's hash), as the import system would load it; otherwise None (compile instead)."""
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            if handle.read() != data:
                return None
        stat = os.stat(path)
        with open(importlib.util.cache_from_source(path), "rb") as handle:
            cached = handle.read()
    except (OSError, ValueError, NotImplementedError):
        return None
    if len(cached) < 16 or cached[:4] != importlib.util.MAGIC_NUMBER:
        return None
    flags = int.from_bytes(cached[4:8], "little")
    if flags == 0:  # timestamp-based: the source's mtime and size, as the import system checks them
        if (int.from_bytes(cached[8:12], "little") != int(stat.st_mtime) & 0xFFFFFFFF
                or int.from_bytes(cached[12:16], "little") != stat.st_size & 0xFFFFFFFF):
            return None
    elif flags & ~0b11 or cached[8:16] != importlib.util.source_hash(data):
        return None
    try:
        code = marshal.loads(cached[16:])
    except (EOFError, ValueError, TypeError):
        return None
    return _renamed(code, name) if isinstance(code, types.CodeType) else None


def _renamed(code: types.CodeType, name: str) -> types.CodeType:
    """``code`` and every code object in it with the file name ``name``."""
    consts = tuple(_renamed(const, name) if isinstance(const, types.CodeType) else const for const in code.co_consts)
    return code.replace(co_filename=name, co_consts=consts)


def _origin(fqn: str, module_path: str, name: str) -> str | None:
    """The file on this controller a payload entry came from (this collection's or ansible's)."""
    prefix, root = _collection_root(module_path, fqn)
    if name.startswith("ansible/"):
        return os.path.join(ANSIBLE_ROOT, name)
    if name.startswith(prefix):
        return os.path.join(root, name[len(prefix):])
    return None


def _compiled(zip_data: bytes, fqn: str, module_path: str) -> bytes:
    """The payload with this collection's and ansible's module_utils compiled (with_bytecode)."""
    prefixes = (_collection_root(module_path, fqn)[0] + "plugins/module_utils/", "ansible/module_utils/")
    return with_bytecode(zip_data, prefixes, functools.partial(_origin, fqn, module_path))


def _write(target: str, source: str) -> None:
    """Copy ``source`` to ``target`` by write-then-rename (mode 0600)."""
    with open(source, "rb") as handle:
        controller_cache.write_bytes(target, handle.read())
