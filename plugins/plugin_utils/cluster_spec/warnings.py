"""Warnings of a valid spec: what is allowed but probably not meant (``datapath validate`` prints them).

A warning never makes a spec invalid and never changes an exit code: it has a path, a message and a
fix, like an error (:class:`.errors.SpecError`), and is printed after the errors (text), listed under
``warnings`` (JSON) or in the spec test case's ``system-out`` (JUnit). Checks register with
:func:`spec_warning`, one function per warning, and read the validated :class:`.models.DatapathSpec`;
:func:`spec_warnings` runs them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import DatapathSpec


@dataclass(frozen=True, order=True)
class SpecWarning:
    """One warning: where (dotted path), what, and how to fix it (on either side)."""

    path: str
    message: str
    fix: str = ""
    name: str = ""
    """The warning check that raised it (docs/spec.md lists them)."""

    def render(self) -> str:
        return f"warning: {self.path}: {self.message}" + (f"; {self.fix}" if self.fix else "")

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "fix": self.fix, "name": self.name}

    def __str__(self) -> str:
        return self.render()


WarningFn = Callable[["DatapathSpec"], Iterable[SpecWarning]]


@dataclass(frozen=True)
class WarningCheck:
    name: str
    doc: str
    fn: WarningFn


WARNING_CHECKS: list[WarningCheck] = []


def spec_warning(name: str) -> Callable[[WarningFn], WarningFn]:
    """Register ``fn`` as the warning check ``name``; it yields :class:`SpecWarning` for a valid spec."""
    def register(fn: WarningFn) -> WarningFn:
        WARNING_CHECKS.append(WarningCheck(name, " ".join((fn.__doc__ or "").split()), fn))
        return fn
    return register


def spec_warnings(spec: DatapathSpec) -> list[SpecWarning]:
    """Every warning of a validated spec, sorted by path, each once."""
    found: set[SpecWarning] = set()
    for check in WARNING_CHECKS:
        for warning in check.fn(spec):
            named = warning.name or check.name
            found.add(SpecWarning(warning.path, warning.message, warning.fix, named))
    return sorted(found)


from . import warnings_qos as _warnings_qos  # noqa: E402,F401  (registers the QoS warnings)
