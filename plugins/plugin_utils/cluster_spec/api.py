"""The public API used by the filters, the roles and the CLI."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._pydantic import ValidationError, require_pydantic
from .errors import SpecError, SpecValidationError, join_path, translate
from .models import DatapathSpec, fields_at
from .partial import Partial, partial_check
from .plan import Planner, deep_copy
from .sources import parse_path

MAX_DEPTH = 64
MAX_NODES = 2_000_000


class _TooDeep(Exception):
    pass


def _plain(value: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """Copy ``value`` into plain dict/list/str/int/float/bool/None, bounded in depth and size.

    Ansible hands over its own mapping and string subclasses (tagged values, HostVars); this
    makes them ordinary types. Anything else is kept as is and rejected by the models' strict types.
    """
    if budget is None:
        budget = [MAX_NODES]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise _TooDeep
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {(str(k) if isinstance(k, str) else k): _plain(v, depth + 1, budget) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1, budget) for v in value]
    return value


def _load(data: Any) -> tuple[DatapathSpec | None, list[SpecError]]:
    spec, errors, _plain_doc, _partial = _load_all(data)
    return spec, errors


def _load_all(data: Any) -> tuple[DatapathSpec | None, list[SpecError], Any, Partial | None]:
    """The model (None when invalid), every error, the plain document and, for an invalid one, what
    partial.py kept of it."""
    try:
        plain = _plain(data)
    except (_TooDeep, RecursionError):
        return None, [SpecError("datapath", f"the spec is nested deeper than {MAX_DEPTH} levels or too large",
                                "simplify the document")], None, None
    if not isinstance(plain, dict):
        kind = "null" if plain is None else type(plain).__name__
        return None, [SpecError("datapath", f"the spec must be a mapping, got {kind}",
                                "write `datapath:` followed by `version: 1`, `fabrics:`, `profiles:`")], plain, None
    require_pydantic()  # a missing pydantic is the controller's problem, not an error of the spec
    try:
        return DatapathSpec.model_validate(plain), [], plain, None
    except ValidationError as exc:
        errors = translate(exc, fields_at)
    except Exception as exc:  # defensive: hostile objects (broken __eq__/__repr__), never a traceback
        return None, [SpecError("datapath", f"the spec could not be read: {type(exc).__name__}",
                                "pass plain YAML data (mappings, lists, strings, numbers)")], plain, None
    part: Partial | None = None
    try:
        # the cross-checks that the broken parts do not touch, in the same run (partial.py)
        part = partial_check(plain)
        errors.extend(part.errors if part is not None else ())
    except Exception:  # defensive: the errors pydantic gave are still right, only fewer
        pass
    return None, sorted(set(errors), key=_order), plain, part


def _order(err: SpecError) -> tuple[Any, ...]:
    """By path, numbers as numbers (``fabrics[2]`` before ``fabrics[10]``), then message."""
    parts = re.split(r"([0-9]+)", err.path)
    return (tuple((1, int(p), "") if p.isascii() and p.isdigit() else (0, 0, p) for p in parts), err.message)


def validate_spec(data: Any) -> list[SpecError]:
    """All errors of the spec (the value of ``datapath``); an empty list when it is valid."""
    return _load(data)[1]


def parse_spec(data: Any) -> DatapathSpec:
    """The validated model; raises :class:`SpecValidationError` with every error."""
    if isinstance(data, DatapathSpec):
        return data
    spec, errors = _load(data)
    if spec is None:
        raise SpecValidationError(errors)
    return spec


_PLANNERS: OrderedDict[str, Planner] = OrderedDict()
_PLANNER_CACHE_SIZE = 8


def planner(data: Any) -> Planner:
    """A :class:`Planner` for ``data``; raw specs are validated once and cached by content.

    Filters call this once per host with the same spec; the cache keeps that to one validation.
    """
    if isinstance(data, DatapathSpec):
        return Planner(data)
    try:
        plain = _plain(data)
        canonical = json.dumps(plain, sort_keys=True, default=repr)
    except (_TooDeep, RecursionError, TypeError, ValueError):
        return Planner(parse_spec(data))
    found = _PLANNERS.get(canonical)
    if found is None:
        found = Planner(parse_spec(plain))
        _PLANNERS[canonical] = found
        while len(_PLANNERS) > _PLANNER_CACHE_SIZE:
            _PLANNERS.popitem(last=False)
    else:
        _PLANNERS.move_to_end(canonical)
    return found


def node_plan(spec: Any, host: str, groups: Sequence[str] = (),
              facts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The plan of one host (docs/plan.md). ``spec`` is the raw ``datapath`` value or a model.

    ``groups`` are the host's inventory groups (``group_names``); ``facts`` is hostvars-like
    (``datapath_memory_bytes``, ``datapath_numa_nodes``, ``ansible_memtotal_mb``, ``datapath_facts``).
    Raises :class:`SpecValidationError` with every error.
    """
    result: dict[str, Any] = deep_copy(planner(spec).plan(host, groups, facts))
    return result


def validate_inventory(data: Any, hosts: Mapping[str, tuple[Sequence[str], Mapping[str, Any]]]) -> list[SpecError]:
    """Spec errors, then the node errors of every host (``{host: (groups, facts)}``)."""
    return check_inventory(data, hosts).errors


@dataclass
class InventoryCheck:
    """What :func:`check_inventory` found."""

    errors: list[SpecError]
    """Spec errors, then the node errors of every host that could be checked."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Hosts whose node checks did not run, each with the reason (a part of the spec it needs is broken)."""


def check_inventory(data: Any, hosts: Mapping[str, tuple[Sequence[str], Mapping[str, Any]]]) -> InventoryCheck:
    """Spec errors and the node errors of every host (``{host: (groups, facts)}``). A spec error does
    not hide the hosts' errors: with a broken spec each host is checked against what is intact
    (partial.py), unless a part that applies to it is broken; then it is in ``skipped``."""
    spec, errors, plain, part = _load_all(data)
    if spec is not None:
        plan = Planner(spec)
        out: list[SpecError] = []
        for host in sorted(hosts):
            groups, facts = hosts[host]
            try:
                plan.check(host, groups, facts)  # node errors come from here; the host's own part has none
            except SpecValidationError as exc:
                out.extend(exc.errors)
        return InventoryCheck(out)
    if part is None or part.model is None or not isinstance(plain, dict):
        why = "not checked: the spec has errors that leave nothing to plan"
        return InventoryCheck(errors, {host: why for host in hosts})
    return _check_partial(errors, plain, part, part.model, hosts)


def _check_partial(errors: list[SpecError], doc: dict[str, Any], part: Partial, model: DatapathSpec,
                   hosts: Mapping[str, tuple[Sequence[str], Mapping[str, Any]]]) -> InventoryCheck:
    plan = Planner(model)
    broken = sorted(part.broken, key=repr)
    everyone = next((p for p in broken if p and p[0] not in _NODE_INDEPENDENT), None)
    out = list(errors)
    skipped: dict[str, str] = {}
    for host in sorted(hosts):
        groups, facts = hosts[host]
        why = _broken_layer(doc, broken, host, groups) if everyone is None else join_path(everyone)
        if why is not None:
            skipped[host] = f"not checked: {why}, which applies to the host, has errors"
            continue
        try:
            plan.check(host, groups, facts)
        except SpecValidationError as exc:
            for err in exc.errors:
                path = parse_path(err.path)
                if path is None:
                    out.append(err)
                    continue
                path = part.original(path)
                if not any(p[:len(path)] == path or path[:len(p)] == p for p in broken):
                    out.append(dataclasses.replace(err, path=join_path(path)))
        except Exception:  # a part the cross-checks refused (an unknown fabric): planning cannot say more
            skipped[host] = "not checked in full: its plan cannot be built until the spec's errors are fixed"
    return InventoryCheck(sorted(set(out), key=_order_host), skipped)


# Top-level parts whose breakage changes no host's merged settings (node checks do not read them).
_NODE_INDEPENDENT = frozenset({"version", "fabrics", "measure", "model_cache", "models", "profiles", "hosts"})


def _broken_layer(doc: dict[str, Any], broken: Sequence[tuple[Any, ...]], host: str,
                  groups: Sequence[str]) -> str | None:
    """The first broken profile or host override that applies (or may apply) to ``host``, as a path."""
    member = set(groups)
    found = doc.get("profiles")
    profiles: list[Any] = found if isinstance(found, list) else []
    for path in broken:
        if not path:
            return "datapath"
        if path[0] == "hosts" and (len(path) == 1 or path[1] == host):
            return join_path(path[:2])
        if path[0] == "profiles":
            if len(path) == 1 or not isinstance(path[1], int) or path[1] >= len(profiles):
                return join_path(path[:2])
            prof = profiles[path[1]]
            if not isinstance(prof, dict) or (len(path) > 2 and path[2] in ("name", "groups", "hosts")):
                return join_path(path[:2])  # which hosts it is for is itself broken
            wanted: Any = prof.get("groups") if prof.get("groups") is not None else [prof.get("name")]
            listed: Any = prof.get("hosts", [])
            if not _names(wanted) or not _names(listed, empty=True):
                return join_path(path[:2])
            if any(name in member for name in wanted) or host in listed:
                return join_path(path[:2])
        # a broken model: the host errors about it are dropped by the caller (they overlap its path)
    return None


def _names(value: Any, empty: bool = False) -> bool:
    return isinstance(value, list) and (empty or bool(value)) and all(isinstance(v, str) for v in value)


def _order_host(err: SpecError) -> tuple[Any, ...]:
    return (err.host or "", *_order(err))


def plans(data: Any, hosts: Mapping[str, tuple[Sequence[str], Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Plans of many hosts at once (raises on the first host with errors); nested parts are shared."""
    plan = Planner(parse_spec(data))
    return {host: plan.plan(host, *hosts[host]) for host in sorted(hosts)}


def dumps_plan(plan: Mapping[str, Any]) -> str:
    """Canonical JSON of a plan: the same input gives byte-identical output."""
    return json.dumps(plan, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
