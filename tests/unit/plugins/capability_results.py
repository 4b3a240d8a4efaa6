"""Read the capability contract's results in tests: action texts and kinds, diff entries."""

from __future__ import annotations

from typing import Any


def texts(result: dict[str, Any]) -> list[str]:
    """The actions of a result as the lines a person reads."""
    return [action["text"] for action in result.get("actions") or []]


def kinds(result: dict[str, Any]) -> list[str]:
    return [action["kind"] for action in result.get("actions") or []]


def diff_entry(result: dict[str, Any], header: str) -> dict[str, Any]:
    """The diff entry whose header is ``header`` (a file path or a section title)."""
    entries = [d for d in result.get("diff") or [] if d.get("before_header") == header]
    assert len(entries) == 1, f"no single diff entry {header!r} in {result.get('diff')!r}"
    return entries[0]
