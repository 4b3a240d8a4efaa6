# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible's lazy containers and tagged values as plain Python, for the filters and the action (standard
library only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def plain(value: Any) -> Any:
    """Mappings -> dict with str keys, lists/tuples -> list, bool/int/float/None as their own plain type,
    anything else (tagged strings included) -> str: JSON- and YAML-ready."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None:
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


NOT_PLAIN = object()
TEMPLATE_MARKERS = ("{{", "{%", "{#")


class _NotPlain(Exception):
    """A value that templating could change (a template string, a type that is not plain data)."""


def _untemplated(value: Any) -> Any:
    # tagged values (ansible's subclasses) become plain ones
    if isinstance(value, str):
        text = str(value)
        if any(marker in text for marker in TEMPLATE_MARKERS):
            raise _NotPlain
        return text
    if value is None or isinstance(value, (bool, int, float)):
        return plain(value)  # the scalars as plain() gives them
    if isinstance(value, dict):
        return {_untemplated(key): _untemplated(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_untemplated(item) for item in value]
    raise _NotPlain


def plain_data(value: Any) -> Any:
    """``value`` as plain dicts, lists and scalars where templating would return it unchanged (no
    string holds ``{{``, ``{%`` or ``{#``, every value is JSON-like data, keys keep their type);
    else NOT_PLAIN. Unlike :func:`plain`, nothing is turned into a string."""
    try:
        return _untemplated(value)
    except (_NotPlain, RecursionError):
        return NOT_PLAIN
