"""docs/spec.md and docs/schema/datapath.schema.json are generated and committed; keep them fresh."""

from __future__ import annotations

import json
import os

import jsonschema
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import docgen, json_schema
from ruamel.yaml import YAML

from ._specs import EXAMPLE, REPO

DOCS = os.path.join(REPO, "docs")


def test_committed_docs_match_a_fresh_generation() -> None:
    for rel, text in docgen.outputs().items():
        with open(os.path.join(DOCS, rel), encoding="utf-8") as handle:
            assert handle.read() == text, f"docs/{rel} is stale: python -m aiinfra_datapath_spec.docgen --write docs"
    assert docgen.main(["--check", DOCS]) == 0


def test_spec_md_lists_every_field_and_check() -> None:
    text = docgen.spec_markdown()
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.models import MODELS
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.registry import all_checks
    for model in MODELS:
        assert f"### {model.__name__}" in text
        for name in model.model_fields:
            assert f"| `{name}` |" in text
    for check in all_checks():
        assert f"| `{check.name}` |" in text


def test_example_validates_against_the_json_schema() -> None:
    with open(os.path.join(EXAMPLE, "group_vars", "all", "datapath.yml"), encoding="utf-8") as handle:
        data = YAML(typ="safe", pure=True).load(handle)
    jsonschema.validate(json.loads(json.dumps(data)), json_schema())
