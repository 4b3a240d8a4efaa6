"""The generator of docs/schema/datapath.schema.json: nothing the validator checks is left out by accident.

The schema against check-jsonschema itself (property tests, the table of documents it must
reject) is tests/interop/test_spec_schema.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import json_schema, models, schema
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.registry import all_checks


def _before_validators(core: Any, seen: set[int] | None = None) -> set[Any]:
    """Every function-before validator in a pydantic core schema."""
    seen = set() if seen is None else seen
    found: set[Any] = set()
    if isinstance(core, dict):
        if id(core) in seen:
            return found
        seen.add(id(core))
        if core.get("type") == "function-before":
            found.add(core["function"]["function"])
        for value in core.values():
            found |= _before_validators(value, seen)
    elif isinstance(core, (list, tuple)):
        for value in core:
            found |= _before_validators(value, seen)
    return found


def test_every_before_validator_has_a_json_schema() -> None:
    found = set()
    for model in models.MODELS:
        found |= _before_validators(model.__pydantic_core_schema__)
    missing = sorted(f.__qualname__ for f in found if f not in schema.BEFORE)
    assert not missing, (f"before-validators without a JSON Schema: {missing}; add each to schema.BEFORE "
                         "(the JSON Schema of exactly the values it accepts)")


@pytest.mark.parametrize(("bounds", "pattern"), list(schema.INT_KEYS.items()))
def test_integer_key_patterns_are_exact(bounds: tuple[int, int], pattern: str) -> None:
    low, high = bounds
    digits = [str(n) for n in range(10000)] + [f"{n:0{w}d}" for w in (2, 3, 4) for n in range(10 ** (w - 1))]
    for text in {*digits, "-1", "+1", " 1", ""}:
        # what the validator accepts: an integer key (str(n) when a reader makes it a string) or a
        # digit string of at most 3 characters (_int_keys), within the key's range
        wanted = text.isdigit() and low <= int(text) <= high and (len(text) < 4 or text == str(int(text)))
        assert bool(re.search(pattern, text)) == wanted, text


def test_port_pattern_is_exact() -> None:
    port = re.compile(f"^{schema.PORT}$")
    for width in range(1, 6):
        for n in range(10**width):
            text = f"{n:0{width}d}"
            assert bool(port.match(text)) == (1 <= n <= 65535), text
    assert not port.match("065536") and not port.match("000001")


def test_check_fragments_belong_to_registered_checks() -> None:
    registered = {(c.name, c.scope) for c in all_checks()}
    for name, (scope, coverage, fragments) in schema.CHECK_SCHEMAS.items():
        assert (name, scope) in registered, name
        assert coverage == "yes" or coverage.startswith("partly: "), name
        assert fragments, name
    assert schema.check_coverage("names-unique") == "no"


def test_every_model_rejects_unknown_keys_and_maps_constrain_their_keys() -> None:
    defs = json_schema()["$defs"]
    assert {m.__name__ for m in models.MODELS} <= set(defs)
    for name, body in defs.items():
        assert body.get("additionalProperties") is False, name

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" not in node:  # a keyed map
                assert "propertyNames" in node, where
                assert "patternProperties" not in node, where
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}/{index}")

    walk(defs, "$defs")


def test_no_pydantic_pseudo_keywords() -> None:
    text = schema.schema_text()
    assert '"ge":' not in text and '"le":' not in text
