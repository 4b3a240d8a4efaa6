"""Named cross-checks: registered per model, run by that model's validator, documented in docs/spec.md."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ._pydantic import PydanticCustomError
from .errors import Issue

CheckFn = Callable[[Any], Iterator[Issue]]


@dataclass(frozen=True)
class CrossCheck:
    name: str
    scope: str
    doc: str
    fn: CheckFn


CHECKS: dict[str, list[CrossCheck]] = {}


def cross_check(scope: str, name: str) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the cross-check ``name`` for the model named ``scope``."""

    def register(fn: CheckFn) -> CheckFn:
        doc = " ".join((fn.__doc__ or "").split())
        CHECKS.setdefault(scope, []).append(CrossCheck(name, scope, doc, fn))
        return fn

    return register


def run_checks(scope: str, obj: Any) -> Any:
    """Run every check of ``scope``; raise one pydantic error carrying all issues, or return obj."""
    issues: list[Issue] = []
    for check in CHECKS.get(scope, ()):
        issues.extend(check.fn(obj))
    if issues:
        raise PydanticCustomError("cross_check", "{summary}",
                                  {"summary": "; ".join(i.message for i in issues), "issues": issues})
    return obj


def all_checks() -> list[CrossCheck]:
    return [c for scope in CHECKS.values() for c in scope]
