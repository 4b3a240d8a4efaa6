"""Validation errors: one :class:`SpecError` per problem, each with a dotted path and a fix."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._pydantic import ValidationError

ROOT = "datapath"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
PathPart = str | int


@dataclass(frozen=True, order=True)
class SpecError:
    """One problem in the spec: where it is, what is wrong, how to fix it."""

    path: str
    message: str
    hint: str = ""
    host: str | None = None
    file: str | None = None
    """The file the spec part came from, when the caller located it (``datapath validate``)."""
    line: int | None = None

    def render(self) -> str:
        text = f"{self.path}: {self.message}"
        if self.hint:
            text += f"; {self.hint}"
        if self.host:
            text += f" (host {self.host})"
        return text

    def location(self) -> str:
        """``file:line`` (or ``file``), empty when not located."""
        return f"{self.file}:{self.line}" if self.file and self.line else self.file or ""

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "hint": self.hint, "host": self.host,
                "file": self.file, "line": self.line}

    def __str__(self) -> str:
        return self.render()


class SpecValidationError(ValueError):
    """Raised by the API when a spec or a host plan has errors; ``errors`` holds all of them."""

    def __init__(self, errors: Sequence[SpecError]) -> None:
        self.errors = list(errors)
        super().__init__(render_errors(self.errors))


def render_errors(errors: Iterable[SpecError]) -> str:
    return "\n".join(e.render() for e in errors)


def join_path(parts: Iterable[PathPart], root: str = ROOT) -> str:
    """``("fabrics", 1, "roce", "pfc_priorities")`` -> ``datapath.fabrics[1].roce.pfc_priorities``."""
    out = root
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and _IDENT.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{_short(part)}]" if not isinstance(part, str) else f"[{part!r}]".replace("'", '"')
    return out


@dataclass(frozen=True)
class Issue:
    """A cross-check finding relative to the model that raised it."""

    path: tuple[PathPart, ...]
    message: str
    hint: str


def _short(value: Any, limit: int = 40) -> str:
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not turn an error report into a traceback
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", int: "an integer",
             float: "a number", bool: "a boolean", type(None): "null"}
    return names.get(type(value), type(value).__name__)


_EXPECTED = {"int_type": "an integer", "string_type": "a string", "bool_type": "true or false",
             "float_type": "a number", "list_type": "a list", "dict_type": "a mapping",
             "model_type": "a mapping", "model_attributes_type": "a mapping",
             "int_from_float": "an integer", "literal_error": None}


def translate(exc: ValidationError, fields_at: Callable[[tuple[Any, ...]], list[str]] | None = None,
              ) -> list[SpecError]:
    """Turn pydantic's errors into :class:`SpecError` with dotted paths and fix hints."""
    out: list[SpecError] = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"]
                    if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]")))
        kind = err["type"]
        ctx = err.get("ctx") or {}
        value = err.get("input")
        if kind == "cross_check":
            for issue in ctx.get("issues", ()):
                out.append(SpecError(join_path(loc + issue.path), issue.message, issue.hint))
            continue
        path = join_path(loc)
        if kind == "extra_forbidden":
            key = loc[-1] if loc else "?"
            fields = fields_at(loc[:-1]) if fields_at else []
            close = difflib.get_close_matches(str(key), fields, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "remove it (see docs/spec.md for the keys)"
            out.append(SpecError(path, f"unknown key {str(key)!r}", hint))
        elif kind == "missing":
            out.append(SpecError(path, "required key is missing", f"add {loc[-1]!s}:" if loc else ""))
        elif kind == "literal_error":
            out.append(SpecError(path, f"{_short(value)} is not allowed",
                                 f"use one of {ctx.get('expected', '')}"))
        elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
            bounds = {"greater_than_equal": ">=", "less_than_equal": "<=",
                      "greater_than": ">", "less_than": "<"}[kind]
            limit = next(iter(ctx.values()), "")
            out.append(SpecError(path, f"{_short(value)} is out of range", f"must be {bounds} {limit}"))
        elif kind == "string_pattern_mismatch":
            out.append(SpecError(path, f"{_short(value)} has an invalid format",
                                 f"must match {ctx.get('pattern', '')}"))
        elif kind in ("too_short", "too_long"):
            out.append(SpecError(path, err["msg"].rstrip("."), "fix the number of items"))
        elif kind == "string_too_long":
            out.append(SpecError(path, f"string is too long ({len(str(value))} characters)",
                                 f"at most {ctx.get('max_length')} characters"))
        elif kind in _EXPECTED:
            want = _EXPECTED[kind] or "another value"
            hint = "quote it" if want == "a string" and isinstance(value, (int, float, bool)) else \
                f"write {want}"
            out.append(SpecError(path, f"expected {want}, got {_type_name(value)} {_short(value)}", hint))
        elif kind == "value_error":
            msg = str(ctx.get("error", err["msg"]))
            message, _sep, hint = msg.partition("; ")
            out.append(SpecError(path, message, hint or "fix the value"))
        elif "Keys should be strings" in err["msg"]:
            out.append(SpecError(path, "keys must be strings", "quote the key"))
        else:
            out.append(SpecError(path, err["msg"], "fix the value"))
    return out
