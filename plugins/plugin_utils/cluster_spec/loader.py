"""Read spec files and YAML inventories safely (size, depth and alias limits).

YAML inventories only: ``hosts.yml``/``hosts.yaml`` (``all: {hosts:, children:}``), plus
``group_vars/<group>.yml``, ``group_vars/<group>/*.yml`` and ``host_vars/<host>[.yml|/]``.
Jinja expressions are not evaluated; INI inventories are not read.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

try:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent
except ImportError:  # pragma: no cover - only the CLI needs ruamel.yaml (requirements.txt)
    YAML = None  # type: ignore[assignment,misc]

    class YAMLError(Exception):  # type: ignore[no-redef]
        """Never raised: stands in so that this module imports without ruamel.yaml."""

    AliasEvent = CollectionEndEvent = CollectionStartEvent = YAMLError  # type: ignore[assignment,misc]

MAX_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_ALIASES = 1000
MAX_NODES = 2_000_000
HOST_LIMIT = 200_000


def _yaml(**kwargs: Any) -> Any:
    if YAML is None:
        raise ImportError("the datapath CLI needs ruamel.yaml: pip install -r requirements.txt")
    return YAML(**kwargs)


class LoadError(Exception):
    """The input cannot be used (CLI exit 2)."""


def _check_events(text: str, name: str) -> None:
    depth = aliases = 0
    yaml = _yaml(typ="safe", pure=True)
    try:
        for event in yaml.parse(io.StringIO(text)):
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise LoadError(f"{name}: nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
            elif isinstance(event, AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise LoadError(f"{name}: more than {MAX_ALIASES} aliases")
    except YAMLError as exc:
        raise LoadError(f"{name}: not valid YAML: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def _expanded_size(root: Any) -> int:
    """Number of nodes once aliases are expanded; raises LoadError on cycles, bombs, deep nesting."""
    memo: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        if len(on_stack) > MAX_DEPTH:
            raise LoadError(f"nested deeper than {MAX_DEPTH} levels")
        obj, done = stack.pop()
        if not isinstance(obj, (dict, list)):
            continue
        key = id(obj)
        if done:
            on_stack.discard(key)
            children = obj.values() if isinstance(obj, dict) else obj
            total = 1 + sum(memo.get(id(c), 1) for c in children)
            if total > MAX_NODES:
                raise LoadError(f"document expands to more than {MAX_NODES} nodes (alias bomb?)")
            memo[key] = total
            continue
        if key in memo:
            continue
        if key in on_stack:
            raise LoadError("document refers to itself (recursive alias)")
        on_stack.add(key)
        stack.append((obj, True))
        for child in (obj.values() if isinstance(obj, dict) else obj):
            if isinstance(child, (dict, list)) and id(child) not in memo:
                if id(child) in on_stack:
                    raise LoadError("document refers to itself (recursive alias)")
                stack.append((child, False))
    return memo.get(id(root), 1)


def _bracket_depth(text: str) -> int:
    """Rough flow-collection nesting depth (quotes ignored): decides whether to pre-scan events."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def load_yaml_text(text: str, name: str = "<input>") -> Any:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise LoadError(f"{name}: larger than {MAX_BYTES} bytes")
    if "&" in text or _bracket_depth(text) > MAX_DEPTH // 2:
        # Anchors (alias bombs) or enough brackets to nest deeply: count events before building
        # anything. Plain block YAML skips this pass; its depth is checked after loading.
        _check_events(text, name)
    yaml = _yaml(typ="safe")  # the C loader when ruamel.yaml.clib is installed
    try:
        data = yaml.load(text)
    except YAMLError as exc:
        raise LoadError(f"{name}: not valid YAML: {_first_line(exc)}") from None
    except RecursionError:
        raise LoadError(f"{name}: nested deeper than the parser can follow") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise LoadError(f"{name}: cannot be loaded: {type(exc).__name__}") from None
    _expanded_size(data)
    return data


def load_yaml_file(path: str) -> Any:
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise LoadError(f"{path}: larger than {MAX_BYTES} bytes")
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_BYTES + 1)
    except UnicodeDecodeError:
        raise LoadError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    return load_yaml_text(text, path)


@dataclass
class Inventory:
    """What the CLI needs from an inventory: the spec and each host's groups and vars."""

    spec: Any
    spec_source: str
    hosts: dict[str, tuple[list[str], dict[str, Any]]] = field(default_factory=dict)


def _yaml_files(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory))
            if n.endswith((".yml", ".yaml")) and not n.startswith(".")]


def _vars_of(base: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    candidates = [os.path.join(base, name + ext) for ext in (".yml", ".yaml")]
    candidates += _yaml_files(os.path.join(base, name))
    for path in candidates:
        if os.path.isfile(path):
            data = load_yaml_file(path)
            if data is None:
                continue
            if not isinstance(data, dict):
                raise LoadError(f"{path}: a vars file must be a mapping")
            out.update(data)
    return out


def _walk_groups(name: str, body: Any, parents: list[str], hosts: dict[str, set[str]],
                 group_vars: dict[str, dict[str, Any]], host_vars: dict[str, dict[str, Any]], depth: int) -> None:
    if depth > 32:
        raise LoadError("inventory groups nest deeper than 32 levels")
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise LoadError(f"inventory group {name!r} must be a mapping")
    chain = [*parents, name]
    if isinstance(body.get("vars"), dict):
        group_vars.setdefault(name, {}).update(body["vars"])
    members = body.get("hosts") or {}
    if not isinstance(members, dict):
        raise LoadError(f"inventory group {name!r}: hosts must be a mapping")
    for host, hvars in members.items():
        host = str(host)
        hosts.setdefault(host, set()).update(chain)
        if isinstance(hvars, dict):
            host_vars.setdefault(host, {}).update(hvars)
        if len(hosts) > HOST_LIMIT:
            raise LoadError(f"more than {HOST_LIMIT} hosts")
    children = body.get("children") or {}
    if not isinstance(children, dict):
        raise LoadError(f"inventory group {name!r}: children must be a mapping")
    for child, child_body in children.items():
        _walk_groups(str(child), child_body, chain, hosts, group_vars, host_vars, depth + 1)


def load_inventory(directory: str) -> Inventory:
    """Read a YAML inventory directory (see the module docstring)."""
    source = next((os.path.join(directory, n) for n in ("hosts.yml", "hosts.yaml")
                   if os.path.isfile(os.path.join(directory, n))), None)
    if source is None:
        raise LoadError(f"{directory}: no hosts.yml or hosts.yaml (only YAML inventories are read)")
    data = load_yaml_file(source)
    if not isinstance(data, dict):
        raise LoadError(f"{source}: an inventory is a mapping of groups (all: {{hosts:, children:}})")
    hosts: dict[str, set[str]] = {}
    inline_group_vars: dict[str, dict[str, Any]] = {}
    inline_host_vars: dict[str, dict[str, Any]] = {}
    for group, body in data.items():
        _walk_groups(str(group), body, [] if group == "all" else ["all"], hosts, inline_group_vars,
                     inline_host_vars, 0)
    gv_dir = os.path.join(directory, "group_vars")
    hv_dir = os.path.join(directory, "host_vars")
    all_groups = sorted({g for groups in hosts.values() for g in groups} | {"all"})
    group_vars = {g: {**inline_group_vars.get(g, {}), **_vars_of(gv_dir, g)} for g in all_groups}
    spec_source = ""
    spec: Any = None
    if "datapath" in group_vars["all"]:
        spec, spec_source = group_vars["all"]["datapath"], os.path.join(gv_dir, "all")
    else:
        raise LoadError(f"{directory}: no `datapath` variable in group_vars/all")
    inv = Inventory(spec=spec, spec_source=spec_source)
    for host in sorted(hosts):
        groups = sorted(g for g in hosts[host] if g != "all")
        hvars: dict[str, Any] = dict(group_vars["all"])
        for group in groups:  # Ansible merges by depth, then name; by name is close enough for facts
            hvars.update(group_vars.get(group, {}))
        hvars.update(inline_host_vars.get(host, {}))
        hvars.update(_vars_of(hv_dir, host))
        hvars.pop("datapath", None)
        inv.hosts[host] = (groups, hvars)
    return inv


def load_spec_file(path: str) -> Any:
    """The ``datapath`` value of a vars file."""
    data = load_yaml_file(path)
    if not isinstance(data, Mapping) or "datapath" not in data:
        raise LoadError(f"{path}: no top-level `datapath` key")
    return data["datapath"]
