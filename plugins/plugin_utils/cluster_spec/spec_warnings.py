"""Warnings: what validates but is almost certainly not what was meant (``datapath validate``).

A warning check is a named function over a :class:`WarningContext` (the plain spec, the hosts of
the inventory when there is one, what YAML did while reading, the lines of the spec), registered
with :func:`warning_check` as the cross-checks are with :func:`.registry.cross_check`; one more
warning is one more function. Each :class:`SpecWarning` has a path, a message and a fix, like a
:class:`.errors.SpecError`, and the check's name. ``datapath validate`` prints them after the
errors (text), under ``warnings`` (JSON), in ``<system-out>`` (JUnit) and as results of level
``warning`` (SARIF); with ``--strict`` a warning fails the run (exit 1). docs/pipelines.md lists them.

Checks read the plain document defensively: a spec with errors still gets its warnings.
"""

from __future__ import annotations

import bisect
import difflib
import ipaddress
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Union, get_args, get_origin

from .errors import join_path
from .sources import SourceMap, YamlNote


@dataclass(frozen=True, order=True)
class SpecWarning:
    """One warning: where (path, and the file and line when known), what, how to fix it."""

    path: str
    message: str
    fix: str = ""
    check: str = ""
    host: str | None = None
    file: str | None = None
    line: int | None = None

    def render(self) -> str:
        text = f"warning: {self.path}: {self.message}"
        if self.fix:
            text += f"; {self.fix}"
        if self.host:
            text += f" (host {self.host})"
        if self.file:
            text += f" [{self.file}{':' + str(self.line) if self.line else ''}]"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "fix": self.fix, "check": self.check,
                "host": self.host, "file": self.file, "line": self.line}


@dataclass
class WarningContext:
    """What a warning check sees."""

    spec: Any
    """The plain ``datapath`` value (a mapping when usable; checks skip what they cannot read)."""
    hosts: Mapping[str, tuple[Sequence[str], Mapping[str, Any]]] | None = None
    """The inventory hosts this spec is for, ``{host: (groups, variables)}``; None for a spec file."""
    notes: Sequence[YamlNote] = ()
    """What YAML did while the files were read (duplicate keys), every file of the inventory."""
    source: SourceMap | None = None
    """The file and lines of this spec, and its YAML boolean words."""
    groups: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.hosts is not None and not self.groups:
            self.groups = {g for groups, _vars in self.hosts.values() for g in groups}


WarningFn = Callable[[WarningContext], Iterator[SpecWarning]]


@dataclass(frozen=True)
class WarningCheck:
    name: str
    doc: str
    fn: WarningFn


WARNING_CHECKS: dict[str, WarningCheck] = {}


def warning_check(name: str) -> Callable[[WarningFn], WarningFn]:
    """Register ``fn`` as the warning check ``name`` (its docstring documents it)."""
    def register(fn: WarningFn) -> WarningFn:
        WARNING_CHECKS[name] = WarningCheck(name, " ".join((fn.__doc__ or "").split()), fn)
        return fn
    return register


def run_warnings(ctx: WarningContext) -> list[SpecWarning]:
    """Every registered check on ``ctx``, each warning named by its check and located where the
    spec's lines are known; a check that fails on odd input is skipped (warnings never break a run)."""
    out: list[SpecWarning] = []
    for check in WARNING_CHECKS.values():
        try:
            found = list(check.fn(ctx))
        except Exception:  # defensive: hostile input must not turn a warning into a traceback
            continue
        for item in found:
            item = replace(item, check=item.check or check.name)
            if item.file is None and ctx.source is not None and item.path.startswith("datapath"):
                file, line = ctx.source.locate(item.path)
                item = replace(item, file=file, line=line)
            out.append(item)
    return sorted(set(out), key=lambda w: (w.file or "", w.line or 0, w.path, w.message))


# --------------------------------------------------------------------------- helpers
def _items(value: Any) -> list[tuple[int, Any]]:
    return list(enumerate(value)) if isinstance(value, list) else []


def _mapping(value: Any) -> Mapping[Any, Any]:
    return value if isinstance(value, Mapping) else {}


def _names(value: Any) -> list[tuple[int, str]]:
    return [(i, v) for i, v in _items(value) if isinstance(v, str)]


def _close(name: str, options: Sequence[str] | set[str]) -> str:
    """"did you mean 'x'? " for the closest option (one that ``name`` contains, e.g. gpu for gpu_nodes,
    or a near spelling), else empty."""
    choices = [o for o in options if o not in ("ungrouped", "all")]
    choices.sort()
    if len(choices) > 2000:  # 100,000 hosts: at most 200 names that share the longest prefix (>= 3) with it
        for end in range(len(name), 2, -1):
            low = bisect.bisect_left(choices, name[:end])
            high = bisect.bisect_left(choices, name[:end] + "\U0010ffff")
            if high > low:
                choices = choices[low:min(high, low + 200)]
                break
        else:
            choices = []
    found = difflib.get_close_matches(name, choices, n=1, cutoff=0.6) or \
        sorted((o for o in choices if len(o) >= 3 and o in name), key=len, reverse=True)[:1]
    return f"did you mean {found[0]!r}? " if found else ""


def _groups_text(groups: set[str]) -> str:
    shown = sorted(g for g in groups if g != "ungrouped")
    return ", ".join(shown[:8]) + (", ..." if len(shown) > 8 else "") if shown else "none"


def _has_group(ctx: WarningContext, group: str) -> bool:
    # `all` holds every host (ansible's implicit group; the readers leave it out of group lists)
    return group in ctx.groups or (group == "all" and bool(ctx.hosts))


# --------------------------------------------------------------------------- the inventory
@warning_check("profile-matches-no-host")
def check_profile_targets(ctx: WarningContext) -> Iterator[SpecWarning]:
    """A profile's group (its name when it lists no groups) or listed host is not in the inventory: the
    profile would silently apply to fewer hosts, or none."""
    if ctx.hosts is None:
        return
    for index, prof in _items(_mapping(ctx.spec).get("profiles")):
        prof = _mapping(prof)
        name = prof.get("name")
        groups = prof.get("groups")
        if groups is None and isinstance(name, str) and not _has_group(ctx, name):
            yield SpecWarning(
                join_path(("profiles", index, "name")),
                f"profile {name!r} applies to the inventory group {name!r} (it lists no groups), which has no host",
                f"{_close(name, ctx.groups)}list the groups it is for (groups: [...]; the inventory has "
                f"{_groups_text(ctx.groups)})")
        for gi, group in _names(groups):
            if not _has_group(ctx, group):
                yield SpecWarning(join_path(("profiles", index, "groups", gi)),
                                  f"group {group!r} has no host in the inventory",
                                  f"{_close(group, ctx.groups)}the inventory has {_groups_text(ctx.groups)}")
        for hi, host in _names(prof.get("hosts")):
            if host not in ctx.hosts:
                yield SpecWarning(join_path(("profiles", index, "hosts", hi)),
                                  f"host {host!r} is not in the inventory",
                                  f"{_close(host, set(ctx.hosts))}remove it or add the host to the inventory")


@warning_check("host-override-unknown")
def check_host_overrides(ctx: WarningContext) -> Iterator[SpecWarning]:
    """A host override (``hosts.<name>``) names a host the inventory does not have: it applies to nothing."""
    if ctx.hosts is None:
        return
    for host in _mapping(_mapping(ctx.spec).get("hosts")):
        if isinstance(host, str) and host not in ctx.hosts:
            yield SpecWarning(join_path(("hosts", host)), f"host {host!r} is not in the inventory",
                              f"{_close(host, set(ctx.hosts))}rename the override to an inventory host or remove it")


@warning_check("model-target-unknown")
def check_model_targets(ctx: WarningContext) -> Iterator[SpecWarning]:
    """A model names a group or host the inventory does not have: no node would hold it there."""
    if ctx.hosts is None:
        return
    for index, model in _items(_mapping(ctx.spec).get("models")):
        model = _mapping(model)
        label = f"{model.get('name')}@{model.get('version')}"
        for gi, group in _names(model.get("groups")):
            if not _has_group(ctx, group):
                yield SpecWarning(join_path(("models", index, "groups", gi)),
                                  f"model {label} is for group {group!r}, which has no host in the inventory",
                                  f"{_close(group, ctx.groups)}the inventory has {_groups_text(ctx.groups)}")
        for hi, host in _names(model.get("hosts")):
            if host not in ctx.hosts:
                yield SpecWarning(join_path(("models", index, "hosts", hi)),
                                  f"model {label} is for host {host!r}, which is not in the inventory",
                                  f"{_close(host, set(ctx.hosts))}remove it or add the host to the inventory")


@warning_check("address-outside-fabric")
def check_addresses(ctx: WarningContext) -> Iterator[SpecWarning]:
    """A host's ``datapath_addresses`` entry names a fabric the spec does not define, is not an address,
    or lies outside its fabric's subnets (measure and verify send traffic only inside them)."""
    if ctx.hosts is None:
        return
    fabrics = {f.get("name"): f for _i, f in _items(_mapping(ctx.spec).get("fabrics")) if isinstance(f, Mapping)}
    names = {n for n in fabrics if isinstance(n, str)}
    for host, (_groups, variables) in ctx.hosts.items():
        addresses = variables.get("datapath_addresses") if isinstance(variables, Mapping) else None
        if not addresses:
            continue
        for fabric, address in _mapping(addresses).items():
            path = f"datapath_addresses[{fabric!r}]".replace("'", '"')
            if fabric not in fabrics:
                yield SpecWarning(path, f"fabric {fabric!r} is not defined in the spec",
                                  f"{_close(str(fabric), names)}use one of {sorted(names)}", host=host)
                continue
            try:
                ip = ipaddress.ip_interface(str(address)).ip
            except ValueError:
                yield SpecWarning(path, f"{address!r} is not an IP address", "write an address such as 10.0.0.1",
                                  host=host)
                continue
            nets = []
            for text in fabrics[fabric].get("subnets") or []:
                try:
                    nets.append(ipaddress.ip_network(str(text), strict=False))
                except ValueError:
                    continue
            if nets and not any(ip.version == net.version and ip in net for net in nets):
                yield SpecWarning(path, f"{ip} is outside the subnets of fabric {fabric} "
                                  f"({', '.join(str(n) for n in nets)})",
                                  "give the host an address inside the fabric's subnets, or add its subnet to the "
                                  "fabric", host=host)


# --------------------------------------------------------------------------- YAML
@warning_check("yaml-duplicate-key")
def check_duplicate_keys(ctx: WarningContext) -> Iterator[SpecWarning]:
    """A YAML mapping gives the same key twice: YAML readers (PyYAML, ansible-core) keep the last value
    and drop the first without a word."""
    for note in ctx.notes:
        if note.kind != "duplicate-key":
            continue
        path = join_path(note.path[1:]) if note.path[:1] == ("datapath",) else \
            join_path(note.path, root="") or "(top level)"
        first = f" (first at line {note.first_line})" if note.first_line else ""
        yield SpecWarning(path, f"key {note.detail!r} is given twice{first}; the value at line {note.line} wins",
                          "remove one of them", file=note.file, line=note.line)


@warning_check("yaml-boolean-word")
def check_bool_words(ctx: WarningContext) -> Iterator[SpecWarning]:
    """An unquoted ``on``, ``off``, ``yes`` or ``no`` where the spec takes a number or a string: YAML 1.1
    (which Ansible reads) makes it the boolean true or false."""
    if ctx.source is None:
        return
    for note in ctx.source.notes:
        if note.kind != "bool-word" or accepts_bool(note.path):
            continue
        word = note.detail
        number = 1 if word.lower() in ("yes", "on", "y") else 0
        yield SpecWarning(join_path(note.path), f"{word} is read as the boolean {str(bool(number)).lower()} "
                          "(YAML 1.1), but a number or a string goes here",
                          f"write {number} for a number, or \"{word}\" (quoted) for the word", file=note.file,
                          line=note.line)


def accepts_bool(path: Sequence[Any]) -> bool:
    """Whether the spec takes a boolean at ``path`` (below ``datapath``); True where the path is unknown
    (its own error says so)."""
    from .models import DatapathSpec
    types: list[Any] = [DatapathSpec]
    for part in path:
        following: list[Any] = []
        for tp in _flatten(types):
            fields = getattr(tp, "model_fields", None)
            if fields is not None:
                if isinstance(part, str) and part in fields:
                    following.append(fields[part].annotation)
                continue
            origin = get_origin(tp)
            args = get_args(tp)
            if origin in (list, tuple) and args and isinstance(part, int):
                following.append(args[0])
            elif origin is dict and len(args) == 2:
                following.append(args[1])
        if not following:
            return True
        types = following
    return any(tp is bool for tp in _flatten(types))


def _flatten(types: Sequence[Any]) -> list[Any]:
    """Annotated[...] and unions opened up (pydantic keeps Annotated on field annotations)."""
    out: list[Any] = []
    todo = list(types)
    while todo:
        tp = todo.pop()
        origin = get_origin(tp)
        if origin is None:
            out.append(tp)
        elif str(origin).endswith("Annotated") or getattr(origin, "__name__", "") == "Annotated":
            todo.append(get_args(tp)[0])
        elif origin is Union or str(origin) in ("<class 'types.UnionType'>", "types.UnionType"):
            todo.extend(get_args(tp))
        else:
            out.append(tp)
    return out


# --------------------------------------------------------------------------- sysctl
def _layers(spec: Any) -> Iterator[tuple[tuple[Any, ...], Mapping[Any, Any]]]:
    for index, prof in _items(_mapping(spec).get("profiles")):
        yield ("profiles", index), _mapping(prof)
    for host, body in _mapping(_mapping(spec).get("hosts")).items():
        yield ("hosts", host), _mapping(body)


class _Keys:
    """The kernel's sysctl keys (_sysctl_keys.py), with ``*`` matching one component either way."""

    def __init__(self) -> None:
        from ._sysctl_keys import KEYS
        self.keys = KEYS
        self.by_shape: dict[tuple[str, int], list[tuple[str, ...]]] = {}
        for key in KEYS:
            parts = tuple(key.split("."))
            self.by_shape.setdefault((parts[0], len(parts)), []).append(parts)

    def known(self, key: str) -> bool:
        if key in self.keys:
            return True
        parts = key.split(".")
        for known in self.by_shape.get((parts[0], len(parts)), ()):
            if all(a == b or a == "*" or b == "*" for a, b in zip(parts, known, strict=True)):
                return True
        return False

    def suggest(self, key: str) -> str | None:
        parts = key.split(".")
        options = set()
        for known in self.keys:
            kparts = known.split(".")
            if len(kparts) == len(parts):
                options.add(".".join(p if k == "*" else k for k, p in zip(kparts, parts, strict=True)))
            else:
                options.add(known)
        found = difflib.get_close_matches(key, sorted(options), n=1, cutoff=0.8)
        return found[0] if found else None


_KEYS: list[_Keys] = []


@warning_check("sysctl-key-unknown")
def check_sysctl_keys(ctx: WarningContext) -> Iterator[SpecWarning]:
    """A sysctl key of a profile or host override that no kernel documents (the list ships with the
    collection, generated from the kernel's documentation; ``ignore_missing: true`` on the key is taken as
    meant): the node would fail on it, or a typo would leave the intended key unset."""
    if not _KEYS:
        _KEYS.append(_Keys())
    keys = _KEYS[0]
    for base, body in _layers(ctx.spec):
        for key, setting in _mapping(body.get("sysctl")).items():
            if not isinstance(key, str) or keys.known(key):
                continue
            if isinstance(setting, Mapping) and setting.get("ignore_missing") is True:
                continue
            close = keys.suggest(key)
            yield SpecWarning(join_path((*base, "sysctl", key)), f"no kernel has the sysctl key {key}",
                              f"did you mean {close}?" if close else
                              "check the name (sysctl -a on a node), or set ignore_missing: true if it is "
                              "a module's key")


__all__ = ["SpecWarning", "WARNING_CHECKS", "WarningCheck", "WarningContext", "accepts_bool", "run_warnings",
           "warning_check"]

from . import warnings_qos as _warnings_qos  # noqa: E402,F401  (registers the QoS warnings, issue 40)
