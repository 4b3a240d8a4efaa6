"""The public API used by the filters, the roles and the CLI."""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ._pydantic import ValidationError
from .errors import SpecError, SpecValidationError, translate
from .models import DatapathSpec, fields_at
from .partial import partial_errors
from .plan import Planner, deep_copy
from .warnings import SpecWarning, spec_warnings

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
    try:
        plain = _plain(data)
    except (_TooDeep, RecursionError):
        return None, [SpecError("datapath", f"the spec is nested deeper than {MAX_DEPTH} levels or too large",
                                "simplify the document")]
    if not isinstance(plain, dict):
        kind = "null" if plain is None else type(plain).__name__
        return None, [SpecError("datapath", f"the spec must be a mapping, got {kind}",
                                "write `datapath:` followed by `version: 1`, `fabrics:`, `profiles:`")]
    try:
        return DatapathSpec.model_validate(plain), []
    except ValidationError as exc:
        errors = translate(exc, fields_at)
    except Exception as exc:  # defensive: hostile objects (broken __eq__/__repr__), never a traceback
        return None, [SpecError("datapath", f"the spec could not be read: {type(exc).__name__}",
                                "pass plain YAML data (mappings, lists, strings, numbers)")]
    try:
        # the cross-checks that the broken parts do not touch, in the same run (partial.py)
        errors.extend(partial_errors(plain) or ())
    except Exception:  # defensive: the errors pydantic gave are still right, only fewer
        pass
    return None, sorted(set(errors), key=_order)


def _order(err: SpecError) -> tuple[Any, ...]:
    """By path, numbers as numbers (``fabrics[2]`` before ``fabrics[10]``), then message."""
    parts = re.split(r"([0-9]+)", err.path)
    return (tuple((1, int(p), "") if p.isascii() and p.isdigit() else (0, 0, p) for p in parts), err.message)


def validate_spec(data: Any) -> list[SpecError]:
    """All errors of the spec (the value of ``datapath``); an empty list when it is valid."""
    return _load(data)[1]


def validate_warnings(data: Any) -> list[SpecWarning]:
    """The warnings of the spec (the value of ``datapath``, or a model) when it is valid; [] when it has
    errors (those come first: a spec with errors gets no warnings)."""
    if isinstance(data, DatapathSpec):
        return spec_warnings(data)
    spec, _errors = _load(data)
    return spec_warnings(spec) if spec is not None else []


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
    spec, errors = _load(data)
    if spec is None:
        return errors
    plan = Planner(spec)
    out: list[SpecError] = []
    for host in sorted(hosts):
        groups, facts = hosts[host]
        try:
            plan.check(host, groups, facts)  # node errors come from here; the host's own part has none
        except SpecValidationError as exc:
            out.extend(exc.errors)
    return out


def plans(data: Any, hosts: Mapping[str, tuple[Sequence[str], Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Plans of many hosts at once (raises on the first host with errors); nested parts are shared."""
    plan = Planner(parse_spec(data))
    return {host: plan.plan(host, *hosts[host]) for host in sorted(hosts)}


def dumps_plan(plan: Mapping[str, Any]) -> str:
    """Canonical JSON of a plan: the same input gives byte-identical output."""
    return json.dumps(plan, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
