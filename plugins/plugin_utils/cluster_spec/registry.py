"""Named cross-checks: registered per model, run by that model's validator, documented in docs/spec.md.

A check may say which fields of its model it reads (``reads``: field names, or dotted paths with
``*`` for every item of a list or map, e.g. ``fabrics.*.mtu``, or ``<item>`` for the one item a
finding is about, e.g. ``profiles.<item>.interfaces``: a finding about an item depends on that
item, and on the other items only as far as they are present, so a pruned item can hide a
finding but never cause one). When a document has structural errors, :func:`.api.validate_spec`
still runs every check whose inputs are intact (partial.py); ``reads`` is how it knows (a check
without it reads the whole model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ._pydantic import PydanticCustomError
from .errors import Issue

CheckFn = Callable[[Any], Iterator[Issue]]
ReadPath = tuple[str, ...]


@dataclass(frozen=True)
class CrossCheck:
    name: str
    scope: str
    doc: str
    fn: CheckFn
    reads: tuple[ReadPath, ...] | None = None
    """Paths below the model this check reads; None: all of it."""


ITEM = "<item>"
CHECKS: dict[str, list[CrossCheck]] = {}
_ENABLED: ContextVar[bool] = ContextVar("aiinfra_datapath_cross_checks", default=True)


def cross_check(scope: str, name: str, reads: Sequence[str] | None = None) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the cross-check ``name`` for the model named ``scope``."""
    paths = None if reads is None else tuple(tuple(path.split(".")) for path in reads)

    def register(fn: CheckFn) -> CheckFn:
        doc = " ".join((fn.__doc__ or "").split())
        CHECKS.setdefault(scope, []).append(CrossCheck(name, scope, doc, fn, paths))
        return fn

    return register


@contextmanager
def structure_only() -> Iterator[None]:
    """Validate the structure only: models skip their cross-checks inside this block."""
    token = _ENABLED.set(False)
    try:
        yield
    finally:
        _ENABLED.reset(token)


def run_checks(scope: str, obj: Any) -> Any:
    """Run every check of ``scope``; raise one pydantic error carrying all issues, or return obj."""
    if not _ENABLED.get():
        return obj
    issues: list[Issue] = []
    for check in CHECKS.get(scope, ()):
        issues.extend(check.fn(obj))
    if issues:
        raise PydanticCustomError("cross_check", "{summary}",
                                  {"summary": "; ".join(i.message for i in issues), "issues": issues})
    return obj


def all_checks() -> list[CrossCheck]:
    return [c for scope in CHECKS.values() for c in scope]
