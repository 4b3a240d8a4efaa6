"""JSON Schema of the spec file (a YAML document with a ``datapath`` key), for editors and CI."""

from __future__ import annotations

import json
from typing import Any

from .models import DatapathSpec

SCHEMA_ID = "https://github.com/aiinfra/datapath/blob/main/docs/schema/datapath.schema.json"


def json_schema() -> dict[str, Any]:
    inner = DatapathSpec.model_json_schema(ref_template="#/$defs/{model}", mode="validation")
    defs = inner.pop("$defs", {})
    defs["DatapathSpec"] = inner
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "aiinfra.datapath cluster spec",
        "description": "A variables file with the `datapath` key (e.g. group_vars/all/datapath.yml).",
        "type": "object",
        "properties": {"datapath": {"$ref": "#/$defs/DatapathSpec"}},
        "required": ["datapath"],
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
