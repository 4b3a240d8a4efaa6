# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each host's validated plan, kept between runs, so that a run whose inputs did not change
neither imports pydantic nor validates the spec again.

``datapath_apply`` validates the cluster spec and computes the host's plan with the pydantic
models of cluster_spec/. Importing them costs about 0.2 s of controller CPU, spent in ansible's
main process before the first host's task starts, on every run, although the spec rarely
changes between runs. This module keeps, per host, the plan and the keys it was computed from:

- the *spec key*: this controller's code (every ``.py`` file of this collection's
  ``plugin_utils`` and ``module_utils``, pydantic's version file, the Python version) and the spec
  itself, as canonical JSON;
- the *plan key*: the spec key, the host's name, its groups and the facts the plan reads
  (memory, NUMA nodes, backend), also as canonical JSON;
- the *inputs key*: the plan key without the node's own facts (memory bytes and NUMA nodes as
  ``datapath_apply`` reads them from the node). The entry keeps those facts too: a run whose
  inputs key matches assumes them, and datapath_run checks them on the node before its first
  call (``expect_facts``); where they changed, nothing runs and the action plans again.

A spec whose key is a host's kept spec key was valid when it was kept (only plans of valid specs
are kept), and a plan whose key matches is the plan ``node_plan`` returns for these inputs: both
are pure functions of what the keys hold. Anything that is not plain JSON (a date, a custom
object), or a plan that does not come back from JSON as it was (tuples, integer keys), is never
kept: those runs compute as before. One file per host (``plans/<hash of the host>.json``), so the
directory holds as many files as the inventory has hosts. ``AIINFRA_DATAPATH_CACHE`` names the
directory (controller_cache.py), ``off`` turns it off.

Where pydantic is imported: ansible imports this action in its main process before it forks the
workers that run the hosts. When plans of this code were kept (the ``code`` marker), the action
leaves pydantic unimported there, and a worker whose host misses (the spec, its groups or its
memory changed) imports it itself: on the first run after a change each fork pays the 0.2 s once.
A plan that cannot be kept would miss on every run, so it leaves a ``cold`` marker, and while that
names this code the main process imports pydantic once per run, as it did before this cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.aiinfra.datapath.plugins.plugin_utils import controller_cache

COLLECTION_PLUGINS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CODE: list[str] = []


def code_digest() -> str:
    """What the plan is computed by: this collection's plugin_utils and module_utils, pydantic's
    version and Python's (computed once per process)."""
    if _CODE:
        return _CODE[0]
    digest = hashlib.sha256(sys.version.encode())
    for sub in ("plugin_utils", "module_utils"):
        top = os.path.join(COLLECTION_PLUGINS, sub)
        for folder, dirs, files in sorted(os.walk(top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    digest.update(b"\0" + os.path.relpath(path, top).encode() + b"\0")
                    with open(path, "rb") as handle:
                        digest.update(handle.read())
    spec = importlib.util.find_spec("pydantic")
    version = os.path.join(os.path.dirname(spec.origin), "version.py") if spec and spec.origin else ""
    try:
        with open(version, "rb") as handle:
            digest.update(b"\0pydantic\0" + handle.read())
    except OSError:
        digest.update(b"\0no pydantic")
    _CODE.append(digest.hexdigest())
    return _CODE[0]


def canonical(value: Any) -> str | None:
    """``value`` as canonical JSON, or None when it is not plain JSON data."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def spec_key(spec: Any) -> str | None:
    text = canonical(spec)
    return None if text is None else _hash("spec", code_digest(), text)


def plan_key(key: str | None, host: str, groups: Sequence[str], facts: Mapping[str, Any]) -> str | None:
    if key is None:
        return None
    text = canonical([host, list(groups), facts])
    return None if text is None else _hash("plan", key, text)


class PlanCache:
    """The kept plan of one host."""

    def __init__(self, host: str, environ: Any = None) -> None:
        self.host = host
        self.directory = controller_cache.directory("plans", environ)
        self.path = (os.path.join(self.directory, _hash("host", host)[:32] + ".json")
                     if self.directory else None)
        self._entry: dict[str, Any] | None = None

    def _read(self) -> dict[str, Any]:
        if self._entry is None:
            self._entry = {}
            if self.path and self.directory and controller_cache.private_dir(self.directory):
                try:
                    with open(self.path, encoding="utf-8") as handle:
                        entry = json.load(handle)
                    if isinstance(entry, dict) and entry.get("host") == self.host:
                        self._entry = entry
                except (OSError, ValueError):
                    pass
        return self._entry

    def spec_valid(self, key: str | None) -> bool:
        """Whether this spec (its key) was valid when this host's plan was kept."""
        return key is not None and self._read().get("spec") == key

    def plan(self, key: str | None) -> dict[str, Any] | None:
        """The kept plan for these inputs (their plan key), or None."""
        entry = self._read()
        if key is None or entry.get("plan_key") != key or not isinstance(entry.get("plan"), dict):
            return None
        plan: dict[str, Any] = entry["plan"]
        return plan

    def facts(self, inputs: str | None) -> dict[str, Any] | None:
        """The node facts (``datapath_facts``) the kept plan was computed from, when its other inputs
        (``inputs``: the plan key without the node facts) are these; None otherwise."""
        entry = self._read()
        if inputs is None or entry.get("inputs") != inputs or not isinstance(entry.get("facts"), dict):
            return None
        return dict(entry["facts"])

    def keep(self, spec: str | None, key: str | None, plan: Mapping[str, Any], inputs: str | None = None,
             facts: Mapping[str, Any] | None = None) -> str:
        """Keep the plan of a valid spec, with the node facts it was computed from and the key of its
        other inputs. Returns ``off``, ``kept``, ``current``, ``not json`` or ``unsafe``."""
        if not self.path or not self.directory:
            return "off"
        if not controller_cache.make_private_dir(self.directory):
            return "unsafe"
        if spec is None or key is None:
            return self._cold()
        if self.plan(key) is not None:
            return "current"
        text = canonical([plan, facts])
        if text is None or json.loads(text) != [plan, facts]:
            return self._cold()  # would not come back as it is (tuples, integer keys, NaN)
        entry = {"host": self.host, "spec": spec, "plan_key": key, "code": code_digest(), "plan": plan,
                 "inputs": inputs, "facts": dict(facts) if facts is not None else None}
        controller_cache.write_bytes(self.path, json.dumps(entry, sort_keys=True).encode())
        self._entry = entry
        if not _marked(self.directory, "code"):
            controller_cache.write_bytes(os.path.join(self.directory, "code"), code_digest().encode() + b"\n")
        return "kept"

    def _cold(self) -> str:
        """A plan that cannot be kept is computed again on every run: mark the directory, so that
        later runs import pydantic once in ansible's main process, not once per fork."""
        if self.directory and not _marked(self.directory, "cold"):
            controller_cache.write_bytes(os.path.join(self.directory, "cold"), code_digest().encode() + b"\n")
        return "not json"


def warm(environ: Any = None) -> bool:
    """Whether the hosts' plans are likely kept: this code kept plans (the ``code`` marker names its
    digest) and none of its plans failed to be kept (no ``cold`` marker naming it). Then the
    action leaves pydantic unimported until a host misses; else ansible's main process imports
    it once, before the forks."""
    directory = controller_cache.directory("plans", environ)
    return (bool(directory) and controller_cache.private_dir(directory)
            and _marked(directory, "code") and not _marked(directory, "cold"))


def _marked(directory: str, marker: str) -> bool:
    try:
        with open(os.path.join(directory, marker), encoding="utf-8") as handle:
            return handle.read().strip() == code_digest()
    except OSError:
        return False
