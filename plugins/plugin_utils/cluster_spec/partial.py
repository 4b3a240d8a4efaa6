"""Every error of a broken spec in one run: structural errors plus every cross-check they do not touch.

pydantic runs a model's cross-checks only when the whole model validated, so one broken field
would hide every check above it (the spec-wide ones included) until it is fixed. Here:

1. the document is validated for its structure alone (cross-checks off): the structural errors;
2. the broken parts are pruned: a broken list item, map entry or optional field is removed (its
   default applies), a missing or broken required field removes the object that holds it, an
   unknown key is removed and the field it was probably meant to be (the "did you mean") counts
   as broken; this repeats until the rest validates;
3. every cross-check runs on every model of what is left, except a check that reads a pruned
   part (:attr:`.registry.CrossCheck.reads`; for a finding about one item of a list, the
   ``<item>`` paths of that item), so no error is reported that depends on a field which is
   itself broken;
4. the paths of what is left are mapped back to the original document's (list indexes shift
   when an item is pruned).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ._pydantic import BaseModel, ValidationError
from .errors import SpecError, join_path, translate
from .models import DatapathSpec, fields_at
from .registry import CHECKS, ITEM, CrossCheck, structure_only

Path = tuple[Any, ...]
MAX_ROUNDS = 64
_ROOT_PATCHES = {"version": 1}  # a required root field that is broken: validate the rest as version 1


def _clean(loc: Path) -> Path:
    return tuple(p for p in loc if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]")))


def _child(node: Any, part: Any) -> tuple[bool, Any, Any]:
    """``(found, key, value)`` of ``part`` in ``node`` (a digit-string key matches an int part)."""
    if isinstance(node, dict):
        if part in node:
            return True, part, node[part]
        if isinstance(part, int):
            for key in node:
                if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) < 4 and int(key) == part:
                    return True, key, node[key]
    elif isinstance(node, list) and isinstance(part, int) and not isinstance(part, bool) and 0 <= part < len(node):
        return True, part, node[part]
    return False, None, None


def _existing(doc: Any, path: Path) -> Path:
    """The longest prefix of ``path`` that exists in ``doc``, with the document's own keys."""
    out: list[Any] = []
    node = doc
    for part in path:
        found, key, node = _child(node, part)
        if not found:
            break
        out.append(key)
    return tuple(out)


class _Pruned:
    """The original document without the removed paths, and the index maps back to it."""

    def __init__(self, doc: dict[str, Any], removed: set[Path], patches: dict[str, Any]) -> None:
        self.kept: dict[Path, list[int]] = {}
        self.doc = self._build(doc, (), removed)
        self.doc.update(patches)

    def _build(self, node: Any, path: Path, removed: set[Path]) -> Any:
        below = {p for p in removed if len(p) > len(path) and p[:len(path)] == path}
        if not below:
            return node
        if isinstance(node, dict):
            return {k: self._build(v, (*path, k), below) for k, v in node.items() if (*path, k) not in below}
        if isinstance(node, list):
            keep = [i for i in range(len(node)) if (*path, i) not in below]
            self.kept[path] = keep
            return [self._build(node[i], (*path, i), below) for i in keep]
        return node

    def original(self, path: Path) -> Path:
        """A path in the pruned document -> the same place in the original one."""
        out: list[Any] = []
        for part in path:
            keep = self.kept.get(tuple(out))
            if keep is not None and isinstance(part, int) and not isinstance(part, bool) and part < len(keep):
                part = keep[part]
            out.append(part)
        return tuple(out)


def _overlaps(path: Path, pattern: Path) -> bool:
    return all(p == "*" or p == q for p, q in zip(pattern, path, strict=False))


def _blocked(check: CrossCheck, where: Path, broken: set[Path], issue: Path | None = None) -> bool:
    """Whether ``check`` at ``where`` reads a broken part: with ``issue`` None, through its plain
    and ``*`` paths (the whole check is skipped); else through its ``<item>`` paths, bound to the
    item ``issue`` (its path below ``where``) is about (that finding is dropped)."""
    for path in broken:
        if path[:len(where)] != where:
            continue
        rest = path[len(where):]
        if not rest or check.reads is None:
            return issue is None
        for pattern in check.reads:
            if ITEM not in pattern:
                if issue is None and _overlaps(rest, pattern):
                    return True
                continue
            if issue is None:
                continue
            at = pattern.index(ITEM)
            if issue[:at] == pattern[:at] and len(issue) > at:
                if _overlaps(rest, (*pattern[:at], issue[at], *pattern[at + 1:])):
                    return True
    return False


_INDEXED = re.compile(r"\b(fabrics|profiles|models)\[(\d+)\]")


def _reindex(message: str, pruned: _Pruned) -> str:
    """Indexes a spec-wide check names in its message (``already used by fabrics[2]``), as in the
    original document."""
    def original(match: re.Match[str]) -> str:
        path = pruned.original((match.group(1), int(match.group(2))))
        return f"{match.group(1)}[{path[1]}]"
    return _INDEXED.sub(original, message)


def _models(obj: Any, path: Path = ()) -> Iterator[tuple[Path, BaseModel]]:
    if isinstance(obj, BaseModel):
        yield path, obj
        for name in type(obj).model_fields:
            yield from _models(getattr(obj, name), (*path, name))
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            yield from _models(value, (*path, index))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _models(value, (*path, key))


def _targets(doc: dict[str, Any], exc: ValidationError, pruned: _Pruned,
             ) -> tuple[set[Path], set[Path], dict[str, Any]] | None:
    """What to remove for ``exc``'s errors, what else counts as broken, root patches; None: give up."""
    remove: set[Path] = set()
    broken: set[Path] = set()
    patches: dict[str, Any] = {}
    for err in exc.errors(include_url=False):
        loc = pruned.original(_clean(tuple(err["loc"])))
        kind = err["type"]
        if kind == "extra_forbidden" and loc:
            close = difflib.get_close_matches(str(loc[-1]), fields_at(loc[:-1]), n=1, cutoff=0.6)
            if close:
                broken.add(_existing(doc, loc[:-1]) + (close[0],))
        if kind == "missing" and len(loc) > 1:
            target = _existing(doc, loc[:-1])  # the object that lacks a required field
        else:
            target = _existing(doc, loc) if len(loc) > 1 else loc
        if not target:
            return None
        if len(target) == 1 and target[0] in _ROOT_PATCHES:
            patches[target[0]] = _ROOT_PATCHES[target[0]]
            broken.add(target)
            continue
        remove.add(target)
    return remove, broken, patches


@dataclass
class Partial:
    """What :func:`partial_check` found: the errors, the model of what is intact, and what is not."""

    errors: list[SpecError]
    model: DatapathSpec | None
    """The document without its broken parts (cross-checks not run); None: nothing could be kept."""
    broken: set[Path] = field(default_factory=set)
    """Paths of the original document that were removed, patched or are probably misspelt."""
    pruned: _Pruned | None = None

    def original(self, path: Path) -> Path:
        """A path of :attr:`model` -> the same place in the original document."""
        return self.pruned.original(path) if self.pruned is not None else path


def partial_errors(doc: dict[str, Any]) -> list[SpecError] | None:
    """Structural errors plus every cross-check on the parts they do not touch (also when only
    cross-checks failed: one failed check hides the checks of the models above it); None when the
    document cannot be pruned into a valid one (the caller's own errors stand)."""
    found = partial_check(doc)
    return None if found is None else found.errors


def partial_check(doc: dict[str, Any]) -> Partial | None:
    """:func:`partial_errors`, with the intact model and the broken paths (for the host checks that
    can still run, api.check_inventory); None as there."""
    removed: set[Path] = set()
    broken: set[Path] = set()
    patches: dict[str, Any] = {}
    structural: list[SpecError] | None = None
    model: DatapathSpec | None = None
    pruned = _Pruned(doc, removed, patches)
    for _round in range(MAX_ROUNDS):
        try:
            with structure_only():
                model = DatapathSpec.model_validate(pruned.doc)
            break
        except ValidationError as exc:
            if structural is None:
                structural = translate(exc, fields_at)
            found = _targets(doc, exc, pruned)
            if found is None or (found[0] <= removed and found[2].items() <= patches.items()):
                return Partial(structural, None, broken | (found[0] if found else set()))
            removed |= found[0]
            broken |= found[0] | found[1]
            patches.update(found[2])
            pruned = _Pruned(doc, removed, patches)
    if model is None:
        return None
    out = list(structural or ())  # none: only cross-checks failed, and some hid others
    for path, obj in _models(model):
        where = pruned.original(path)
        for check in CHECKS.get(type(obj).__name__, ()):
            if _blocked(check, where, broken):
                continue
            for issue in check.fn(obj):
                full = pruned.original((*path, *issue.path))
                if _blocked(check, where, broken, full[len(where):]):
                    continue
                message = _reindex(issue.message, pruned) if not path else issue.message
                out.append(SpecError(join_path(full), message, issue.hint))
    return Partial(out, model, broken, pruned)
