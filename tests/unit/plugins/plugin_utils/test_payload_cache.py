"""plugin_utils/payload_cache.py: datapath_run's AnsiballZ payload kept across runs, used only
while every file in it is still, byte for byte, the source on this controller.

The payloads are built by ansible-core itself (``modify_module``, the function the action
plugins call), in a child process that installs ansible's collection loader, so this test
process keeps its plain imports."""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import io
import json
import marshal
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from ansible import constants as C
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import payload_cache as pc
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.controller_cache import ENV

REPO = Path(__file__).resolve().parents[4]
COLLECTIONS = REPO / ".collections"
MODULE = str(COLLECTIONS / "ansible_collections/aiinfra/datapath/plugins/modules/datapath_run.py")
FQN = "ansible_collections.aiinfra.datapath.plugins.modules.datapath_run"
ZIP = "ZIP_DEFLATED"

# One ansible run in a child process: prime (optional), build the payload as ansible does, keep it.
_RUN = r"""
import json, sys
from ansible import constants as C
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
collections, local_tmp, module, prime, magic, add = sys.argv[1:7]
_AnsibleCollectionFinder(paths=[collections])._install()
C.DEFAULT_LOCAL_TMP = local_tmp
from ansible.executor.module_common import modify_module
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import payload_cache as pc
fqn = "ansible_collections.aiinfra.datapath.plugins.modules.datapath_run"
primed = pc.prime(fqn, module, "ZIP_DEFLATED") if prime == "yes" else None
def build():
    return modify_module(module_name="datapath_run", module_path=module, module_args={},
                         templar=Templar(loader=DataLoader()), module_compression="ZIP_DEFLATED",
                         task_vars={"ansible_python_interpreter": "/usr/bin/python3"})
built = build()
added = None
if add == "yes":  # as datapath_apply does where nothing was primed: bytecode in, then the module's own build
    added = pc.add_bytecode(fqn, module, "ZIP_DEFLATED")
    built = build()
print(json.dumps({"primed": primed, "added": added,
                  "kept": pc.keep(fqn, module, "ZIP_DEFLATED", node_magic=magic or None),
                  "module": built.b_module_data.decode()}))
"""


def _ansible_run(tmp: Path, name: str, cache: Path, prime: bool, magic: str = pc.MAGIC,
                 add: bool = False) -> dict[str, Any]:
    """One run with ``cache`` as the payload directory (``<AIINFRA_DATAPATH_CACHE>/ansiballz``);
    ``add``: with the bytecode added after ansible's build, before the module is sent."""
    local_tmp = tmp / name
    local_tmp.mkdir()
    env = dict(os.environ, **{ENV: str(cache.parent)})
    out = subprocess.run([sys.executable, "-c", _RUN, str(COLLECTIONS), str(local_tmp), MODULE,
                          "yes" if prime else "no", magic, "yes" if add else "no"],
                         env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    result["file"] = local_tmp / "ansiballz_cache" / f"{FQN}-{ZIP}-none"
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("payload")
    cache = tmp / "root" / "ansiballz"
    first = _ansible_run(tmp, "first", cache, prime=True)
    second = _ansible_run(tmp, "second", cache, prime=True)
    return {"cache": cache, "first": first, "second": second}


def _zip_data(path: Path) -> bytes:
    with path.open("rb") as handle:
        data = pickle.load(handle).zip_data
    assert isinstance(data, bytes)
    return data


def _rezip(zip_data: bytes, change: dict[str, bytes]) -> bytes:
    """The payload with entries replaced or added."""
    source = zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            target.writestr(name, change.pop(name, source.read(name)))
        for name, data in change.items():
            target.writestr(name, data)
    return base64.b64encode(out.getvalue())


def test_the_first_run_builds_and_keeps_the_second_runs_the_kept_payload(runs: dict[str, Any]) -> None:
    first, second = runs["first"], runs["second"]
    assert (first["primed"], first["kept"]) == ("missing", "kept with bytecode")
    assert (second["primed"], second["kept"]) == ("primed", "current")
    kept = _zip_data(_kept_file(runs["cache"]))
    # ansible used the primed file: the module it sent carries the kept zip (with the bytecode)
    assert kept.decode() in second["module"]
    assert _zip_data(second["file"]) == kept
    assert pc.matches_sources(kept, FQN, MODULE)
    files = sorted(p.name for p in runs["cache"].iterdir())
    name = _kept_file(runs["cache"]).name
    # the copy, the sha256 of the payload it was made from and the lock the forks of a run take
    assert files == [name, name + ".from", name + ".lock"]
    assert all((runs["cache"] / f).stat().st_mode & 0o777 == 0o600 for f in files[:2])
    assert runs["cache"].stat().st_mode & 0o077 == 0


def test_the_payload_holds_this_collection_and_ansible_module_utils(runs: dict[str, Any]) -> None:
    names = zipfile.ZipFile(io.BytesIO(base64.b64decode(_zip_data(runs["first"]["file"])))).namelist()
    assert "ansible_collections/aiinfra/datapath/plugins/modules/datapath_run.py" in names
    assert "ansible/module_utils/basic.py" in names
    assert not any(name.endswith(".pyc") for name in names), "ansible builds source only"
    assert pc.matches_sources(_zip_data(runs["first"]["file"]), FQN, MODULE)


def test_the_kept_copy_compiles_the_module_utils_not_the_module(runs: dict[str, Any]) -> None:
    kept = zipfile.ZipFile(io.BytesIO(base64.b64decode(_zip_data(_kept_file(runs["cache"])))))
    built = zipfile.ZipFile(io.BytesIO(base64.b64decode(_zip_data(runs["first"]["file"]))))
    compiled = [name for name in kept.namelist() if name.endswith(".pyc")]
    utils = [name + "c" for name in built.namelist() if name.endswith(".py") and name.startswith(
        ("ansible_collections/aiinfra/datapath/plugins/module_utils/", "ansible/module_utils/"))]
    assert sorted(compiled) == sorted(utils)
    assert len([n for n in compiled if n.startswith("ansible_collections/")]) > 30
    assert "ansible/module_utils/basic.pyc" in compiled
    # marked as compiled in the zip comment, which keep() reads from the payload's last bytes alone
    assert kept.comment == pc.BYTECODE_COMMENT and built.comment == b""
    assert pc._has_bytecode(_zip_data(_kept_file(runs["cache"])))
    assert not pc._has_bytecode(_zip_data(runs["first"]["file"]))
    assert not any("/modules/" in name for name in compiled)
    for name in built.namelist():  # every other entry as ansible built it
        assert kept.read(name) == built.read(name)
    assert kept.read(compiled[0])[:4] == importlib.util.MAGIC_NUMBER


def test_nodes_of_another_python_get_the_source_only(tmp_path: Path, runs: dict[str, Any]) -> None:
    cache = tmp_path / "root" / "ansiballz"
    other = _ansible_run(tmp_path, "other", cache, prime=True, magic="550d0d0a")
    assert (other["primed"], other["kept"]) == ("missing", "kept")
    assert not any(name.endswith(".pyc") for name in
                   zipfile.ZipFile(io.BytesIO(base64.b64decode(_zip_data(_kept_file(cache))))).namelist())
    # a node of the controller's Python later: the copy gains the bytecode, once
    same = _ansible_run(tmp_path, "same", cache, prime=True)
    assert (same["primed"], same["kept"]) == ("primed", "kept with bytecode")
    again = _ansible_run(tmp_path, "again", cache, prime=True, magic="550d0d0a")
    assert (again["primed"], again["kept"]) == ("primed", "current")


PROBE = "ansible_collections/aiinfra/datapath/plugins/module_utils/_probe.py"
_IMPORT = r"""
import sys, traceback
sys.path.insert(0, sys.argv[1])
from ansible_collections.aiinfra.datapath.plugins.module_utils import _probe
try:
    _probe.boom()
except ValueError:
    lines = traceback.format_exc().splitlines()
print(_probe.__file__.rpartition(".")[2], _probe.VALUE, lines[-3].strip(), lines[-2].strip())
"""


def _probe_zip(tmp_path: Path, source: bytes, change: dict[str, bytes] | None = None) -> str:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name in ("ansible_collections/__init__.py", "ansible_collections/aiinfra/__init__.py",
                     "ansible_collections/aiinfra/datapath/__init__.py",
                     "ansible_collections/aiinfra/datapath/plugins/__init__.py",
                     "ansible_collections/aiinfra/datapath/plugins/module_utils/__init__.py"):
            archive.writestr(name, b"")
        archive.writestr(PROBE, source)
    data = pc.with_bytecode(base64.b64encode(out.getvalue()), PROBE.rpartition("/")[0] + "/")
    path = tmp_path / "payload.zip"
    path.write_bytes(base64.b64decode(_rezip(data, dict(change or {}))))
    return str(path)


def _import(path: str) -> str:
    return subprocess.run([sys.executable, "-c", _IMPORT, path], capture_output=True, text=True,
                          check=True).stdout.strip()


SOURCE = b"VALUE = 1\r\n\n\ndef boom():\n    raise ValueError('x')\n"


def test_the_node_imports_the_bytecode_with_the_source_in_tracebacks(tmp_path: Path) -> None:
    shown = _import(_probe_zip(tmp_path, SOURCE))
    assert shown == ("pyc 1 File \"<datapath_run bytecode>/ansible_collections/aiinfra/datapath/plugins/"
                     "module_utils/_probe.py\", line 5, in boom raise ValueError('x')")


def test_a_stale_or_foreign_pyc_falls_back_to_the_source(tmp_path: Path) -> None:
    # the .py changed after the .pyc was compiled: the hash check rejects the .pyc
    stale = _import(_probe_zip(tmp_path, SOURCE, {PROBE: SOURCE.replace(b"VALUE = 1", b"VALUE = 2")}))
    assert stale.startswith("py 2 ")
    # another Python's bytecode (another magic number): compiled from the source
    archive = zipfile.ZipFile(_probe_zip(tmp_path, SOURCE))
    foreign = b"\x55\x0d\x0d\x0a" + archive.read(PROBE + "c")[4:]
    assert _import(_probe_zip(tmp_path, SOURCE, {PROBE + "c": foreign})).startswith("py 1 ")


@pytest.mark.parametrize("change", [
    {"ansible_collections/aiinfra/datapath/plugins/modules/datapath_run.py": b"# another module\n"},
    {"ansible/module_utils/basic.py": b"# another basic.py\n"},
    {"ansible_collections/aiinfra/datapath/plugins/module_utils/gone.py": b"x = 1\n"},
    {"ansible_collections/other/coll/plugins/module_utils/x.py": b"x = 1\n"},
], ids=["module", "ansible-basic", "file-not-on-disk", "another-collection"])
def test_a_payload_that_differs_from_the_sources_does_not_match(runs: dict[str, Any],
                                                                change: dict[str, bytes]) -> None:
    assert not pc.matches_sources(_rezip(_zip_data(runs["first"]["file"]), dict(change)), FQN, MODULE)


def test_one_changed_byte_does_not_match(runs: dict[str, Any]) -> None:
    name = "ansible_collections/aiinfra/datapath/plugins/module_utils/_batch.py"
    archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(_zip_data(runs["first"]["file"]))))
    data = bytearray(archive.read(name))
    data[len(data) // 2] ^= 1
    assert not pc.matches_sources(_rezip(_zip_data(runs["first"]["file"]), {name: bytes(data)}), FQN, MODULE)


@pytest.mark.parametrize("data", [b"", b"not base64 !", base64.b64encode(b"not a zip")])
def test_not_a_payload_does_not_match(data: bytes) -> None:
    assert not pc.matches_sources(data, FQN, MODULE)


@pytest.fixture
def local_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path / "run"))
    return tmp_path / "run"


def _kept_file(cache: Path) -> Path:
    """The kept payload in a cache directory (next to it: ``.from`` and ``.lock``)."""
    (kept,) = [p for p in cache.iterdir() if "." not in p.name]
    return kept


def _kept_copy(runs: dict[str, Any], cache: Path) -> Path:
    """The first run's kept payload in a fresh cache directory of this test."""
    cache.mkdir(mode=0o700, parents=True)
    source = _kept_file(runs["cache"])
    target = cache / source.name
    target.write_bytes(source.read_bytes())
    return target


def test_a_stale_copy_is_not_primed_and_is_replaced_after_the_run(runs: dict[str, Any], tmp_path: Path,
                                                                  local_tmp: Path) -> None:
    cache = tmp_path / "root" / "ansiballz"
    kept = _kept_copy(runs, cache)
    env = {ENV: str(cache.parent)}
    with kept.open("rb") as handle:
        payload = pickle.load(handle)
    name = "ansible_collections/aiinfra/datapath/plugins/modules/datapath_run.py"
    stale = type(payload)(zip_data=_rezip(payload.zip_data, {name: b"# old\n"}),
                          metadata=payload.metadata, source_mapping=payload.source_mapping)
    kept.write_bytes(pickle.dumps(stale))
    assert pc.prime(FQN, MODULE, ZIP, env) == "stale"
    assert not Path(pc.run_file(FQN, ZIP)).exists()
    # the other forks of this run do not check the copy again: they find it marked stale for this run
    kept.write_bytes(pickle.dumps(payload))
    assert pc.prime(FQN, MODULE, ZIP, env) == "stale"
    kept.write_bytes(pickle.dumps(stale))
    # this run's ansible builds the payload (here: the first run's file stands for it), kept after the run
    Path(pc.run_file(FQN, ZIP)).write_bytes(runs["first"]["file"].read_bytes())
    assert pc.prime(FQN, MODULE, ZIP, env) == "present"
    assert pc.keep(FQN, MODULE, ZIP, env) == "kept"
    assert kept.read_bytes() == runs["first"]["file"].read_bytes()


def test_a_broken_copy_is_a_miss(runs: dict[str, Any], tmp_path: Path, local_tmp: Path) -> None:
    cache = tmp_path / "root" / "ansiballz"
    _kept_copy(runs, cache).write_bytes(b"\x80\x04 not a pickle")
    assert pc.prime(FQN, MODULE, ZIP, {ENV: str(cache.parent)}) == "stale"
    assert not Path(pc.run_file(FQN, ZIP)).exists()


def test_a_directory_others_can_write_is_never_used(runs: dict[str, Any], tmp_path: Path,
                                                    local_tmp: Path) -> None:
    cache = tmp_path / "root" / "ansiballz"
    _kept_copy(runs, cache)
    cache.chmod(0o777)
    env = {ENV: str(cache.parent)}
    assert pc.prime(FQN, MODULE, ZIP, env) == "unsafe"
    assert not Path(pc.run_file(FQN, ZIP)).exists()
    Path(pc.run_file(FQN, ZIP)).parent.mkdir(parents=True)
    # a run file byte for byte the copy there: still unsafe (the copy, a pickle, is not even read)
    Path(pc.run_file(FQN, ZIP)).write_bytes(_kept_file(cache).read_bytes())
    assert pc.keep(FQN, MODULE, ZIP, env, node_magic=pc.MAGIC) == "unsafe"
    Path(pc.run_file(FQN, ZIP)).write_bytes(runs["first"]["file"].read_bytes())
    for entry in cache.iterdir():
        entry.unlink()
    assert pc.keep(FQN, MODULE, ZIP, env) == "unsafe"
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "no"])
def test_off_turns_it_off(value: str, local_tmp: Path) -> None:
    assert pc.cache_dir({ENV: value}) is None
    assert pc.prime(FQN, MODULE, ZIP, {ENV: value}) == "off"
    assert pc.keep(FQN, MODULE, ZIP, {ENV: value}) == "off"


def test_the_default_directory_follows_xdg_cache_home() -> None:
    assert pc.cache_dir({"XDG_CACHE_HOME": "/c"}) == "/c/aiinfra-datapath/ansiballz"
    assert pc.cache_dir({}) == os.path.expanduser("~/.cache/aiinfra-datapath/ansiballz")
    assert pc.cache_dir({ENV: "/x/y", "XDG_CACHE_HOME": "/c"}) == "/x/y/ansiballz"


def test_nothing_to_keep_without_a_payload_of_this_run(tmp_path: Path, local_tmp: Path) -> None:
    assert pc.keep(FQN, MODULE, ZIP, {ENV: str(tmp_path / "root")}) == "absent"
    assert pc.prime(FQN, MODULE, ZIP, {ENV: str(tmp_path / "root")}) == "missing"


def test_a_copy_compiled_without_the_mark_is_compiled_again_once(runs: dict[str, Any], tmp_path: Path,
                                                                 local_tmp: Path) -> None:
    """A copy with .pyc files but no zip comment (kept by the first version of this cache) is not
    taken for a marked one: the run that used it keeps a marked copy, the next run finds it current."""
    cache = tmp_path / "root" / "ansiballz"
    kept = _kept_copy(runs, cache)
    env = {ENV: str(cache.parent)}
    with kept.open("rb") as handle:
        payload = pickle.load(handle)
    unmarked = _rezip(payload.zip_data, {})  # the same entries, .pyc included, without the comment
    assert not pc._has_bytecode(unmarked)
    kept.write_bytes(pickle.dumps(dataclasses.replace(payload, zip_data=unmarked)))
    assert pc.prime(FQN, MODULE, ZIP, env) == "primed"
    assert pc.keep(FQN, MODULE, ZIP, env, node_magic=pc.MAGIC) == "kept with bytecode"
    with kept.open("rb") as handle:
        again = pickle.load(handle).zip_data
    assert pc._has_bytecode(again)
    names = zipfile.ZipFile(io.BytesIO(base64.b64decode(again))).namelist()
    assert len(names) == len(set(names)), "each .pyc once"
    Path(pc.run_file(FQN, ZIP)).unlink()  # the next run
    assert pc.prime(FQN, MODULE, ZIP, env) == "primed"
    assert pc.keep(FQN, MODULE, ZIP, env, node_magic=pc.MAGIC) == "current"


def test_the_forks_of_a_cold_run_compile_once(runs: dict[str, Any], tmp_path: Path, local_tmp: Path) -> None:
    """Every fork of a run keeps after its host's call, at about the same time: one compiles and
    keeps, the others find its copy current (the lock, then the copy's .from) without compiling."""
    import multiprocessing

    cache = tmp_path / "root" / "ansiballz"
    env = {ENV: str(cache.parent)}
    Path(pc.run_file(FQN, ZIP)).parent.mkdir(parents=True)
    Path(pc.run_file(FQN, ZIP)).write_bytes(runs["first"]["file"].read_bytes())  # ansible's build of this run
    context = multiprocessing.get_context("fork")
    outcomes = context.Queue()
    start = context.Event()

    def fork() -> None:
        start.wait()
        outcomes.put(pc.keep(FQN, MODULE, ZIP, env, node_magic=pc.MAGIC))

    workers = [context.Process(target=fork) for _index in range(6)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(60)
    got = sorted(outcomes.get(timeout=5) for _worker in workers)
    assert got == ["current"] * 5 + ["kept with bytecode"]
    assert pc._has_bytecode(_zip_data(_kept_file(cache)))
    # the next run's forks: the copy is current for each, by its bytes (primed) and its zip comment
    Path(pc.run_file(FQN, ZIP)).unlink()
    assert pc.prime(FQN, MODULE, ZIP, env) == "primed"
    assert pc.keep(FQN, MODULE, ZIP, env, node_magic=pc.MAGIC) == "current"


def test_a_first_run_sends_the_nodes_the_bytecode(tmp_path: Path, runs: dict[str, Any]) -> None:
    """Where no copy is kept, the bytecode goes into this run's file before any node runs it: the
    module ansible then builds carries it, the copy for later runs is kept before the call, and
    after the call there is nothing left to keep."""
    cache = tmp_path / "root" / "ansiballz"
    first = _ansible_run(tmp_path, "first", cache, prime=True, add=True)
    assert (first["primed"], first["added"], first["kept"]) == ("missing", "added", "current")
    sent = _zip_data(first["file"])
    assert pc._has_bytecode(sent) and sent.decode() in first["module"]
    assert _zip_data(_kept_file(cache)) == sent
    # the same entries as a copy compiled after the call (runs: the earlier way), the same code
    late = zipfile.ZipFile(io.BytesIO(base64.b64decode(_zip_data(_kept_file(runs["cache"])))))
    early = zipfile.ZipFile(io.BytesIO(base64.b64decode(sent)))
    assert sorted(early.namelist()) == sorted(late.namelist())
    for name in early.namelist():
        if name.endswith(".pyc"):
            assert early.read(name)[:16] == late.read(name)[:16]  # magic, flags, the source's hash
            assert marshal.loads(early.read(name)[16:]) == marshal.loads(late.read(name)[16:])
        else:
            assert early.read(name) == late.read(name)
    second = _ansible_run(tmp_path, "second", cache, prime=True, add=True)
    assert (second["primed"], second["added"], second["kept"]) == ("primed", "present", "current")


def test_the_forks_of_a_first_run_compile_once(runs: dict[str, Any], tmp_path: Path, local_tmp: Path) -> None:
    import multiprocessing

    cache = tmp_path / "root" / "ansiballz"
    env = {ENV: str(cache.parent)}
    Path(pc.run_file(FQN, ZIP)).parent.mkdir(parents=True)
    Path(pc.run_file(FQN, ZIP)).write_bytes(runs["first"]["file"].read_bytes())  # ansible's build of this run
    context = multiprocessing.get_context("fork")
    outcomes = context.Queue()
    start = context.Event()

    def fork() -> None:
        start.wait()
        outcomes.put(pc.add_bytecode(FQN, MODULE, ZIP, env))

    workers = [context.Process(target=fork) for _index in range(6)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(60)
    assert sorted(outcomes.get(timeout=5) for _worker in workers) == ["added"] + ["present"] * 5
    assert pc._has_bytecode(_zip_data(Path(pc.run_file(FQN, ZIP))))
    assert pc.keep(FQN, MODULE, ZIP, env, node_magic=pc.MAGIC) == "current"


def test_a_run_file_that_is_not_the_sources_gets_no_bytecode(runs: dict[str, Any], tmp_path: Path,
                                                             local_tmp: Path) -> None:
    cache = tmp_path / "root" / "ansiballz"
    env = {ENV: str(cache.parent)}
    with runs["first"]["file"].open("rb") as handle:
        payload = pickle.load(handle)
    name = "ansible_collections/aiinfra/datapath/plugins/modules/datapath_run.py"
    other = pickle.dumps(dataclasses.replace(payload, zip_data=_rezip(payload.zip_data, {name: b"# other\n"})))
    Path(pc.run_file(FQN, ZIP)).parent.mkdir(parents=True)
    Path(pc.run_file(FQN, ZIP)).write_bytes(other)
    assert pc.add_bytecode(FQN, MODULE, ZIP, env) == "stale"
    assert Path(pc.run_file(FQN, ZIP)).read_bytes() == other
    assert [p.name for p in cache.iterdir() if "." not in p.name] == []  # nothing kept
    assert pc.add_bytecode(FQN, MODULE, ZIP, {ENV: "off"}) == "off"
    Path(pc.run_file(FQN, ZIP)).unlink()
    assert pc.add_bytecode(FQN, MODULE, ZIP, env) == "absent"


def test_installed_bytecode_is_used_only_for_its_very_source(tmp_path: Path) -> None:
    """Python's own cache beside a file is used, renamed, where it is valid for the payload's
    bytes as the import system checks it; any doubt compiles the source."""
    import py_compile

    source = tmp_path / "mod.py"
    data = b"X = 1\n\n\ndef f():\n    return [i for i in range(3)]\n"
    source.write_bytes(data)
    name = pc.CODE_PREFIX + "ansible/module_utils/mod.py"
    expected = compile(data, name, "exec", dont_inherit=True)
    assert pc._installed_code(str(source), data, name) is None  # no cache beside it

    def names(code: Any) -> set[str]:
        found = {code.co_filename}
        for const in code.co_consts:
            if hasattr(const, "co_filename"):
                found |= names(const)
        return found

    for mode in (py_compile.PycInvalidationMode.TIMESTAMP, py_compile.PycInvalidationMode.CHECKED_HASH):
        py_compile.compile(str(source), invalidation_mode=mode, doraise=True)
        code = pc._installed_code(str(source), data, name)
        assert code == expected and names(code) == {name}, mode
        assert pc._installed_code(str(source), data.replace(b"X = 1", b"X = 2"), name) is None  # not the payload's
    cached = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(str(source), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP, doraise=True)
    os.utime(source, (1, 1))  # the source's mtime is not the one the cache was made for
    assert pc._installed_code(str(source), data, name) is None
    py_compile.compile(str(source), invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH, doraise=True)
    cached.write_bytes(b"\x55\x0d\x0d\x0a" + cached.read_bytes()[4:])  # another Python's
    assert pc._installed_code(str(source), data, name) is None
    cached.write_bytes(importlib.util.MAGIC_NUMBER + b"\x03\0\0\0" + b"\0" * 8 + b"broken")
    assert pc._installed_code(str(source), data, name) is None
    assert pc._installed_code(None, data, name) is None
