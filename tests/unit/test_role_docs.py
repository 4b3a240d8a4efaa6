"""docs/roles/ is generated from each role's meta/argument_specs.yml: a stale page fails here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("role_docs", REPO / "scripts" / "role_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["role_docs"] = module
    spec.loader.exec_module(module)
    return module


role_docs = _generator()
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_an_argument_spec_with_a_main_entry_point(role: str) -> None:
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    assert "main" in specs["argument_specs"]
    for name, opt in (specs["argument_specs"]["main"].get("options") or {}).items():
        assert opt.get("description"), f"{role}: {name} has no description"
        assert opt.get("type"), f"{role}: {name} has no type"


def test_committed_role_docs_match_a_fresh_generation() -> None:
    assert role_docs.stale(REPO) == [], "docs/roles/ is stale: run .venv/bin/python scripts/role_docs.py"


def test_every_role_has_a_page_with_its_variables() -> None:
    for role in ROLES:
        page = (REPO / "docs" / "roles" / f"{role}.md").read_text()
        specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
        for var in specs["argument_specs"]["main"].get("options") or {}:
            assert f"| `{var}` |" in page, (role, var)
        assert "```yaml" in page


def test_page_examples_are_valid_yaml_using_the_role() -> None:
    for role in ROLES:
        page = (REPO / "docs" / "roles" / f"{role}.md").read_text()
        block = page.split("```yaml\n", 1)[1].split("```", 1)[0]
        play = yaml.safe_load(block)
        assert play[0]["tasks"][0]["ansible.builtin.include_role"]["name"] == f"aiinfra.datapath.{role}"


def test_a_changed_spec_makes_the_page_stale(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "roles" / "demo" / "meta").mkdir(parents=True)
    (repo / "roles" / "demo" / "tasks").mkdir()
    (repo / "roles" / "demo" / "defaults").mkdir()
    spec = {"argument_specs": {"main": {"short_description": "Demo", "options": {
        "demo_mode": {"type": "str", "choices": ["a", "b"], "default": "a", "description": "C(a) or C(b)"}}}}}
    (repo / "roles" / "demo" / "meta" / "argument_specs.yml").write_text(yaml.safe_dump(spec))
    (repo / "roles" / "demo" / "defaults" / "main.yml").write_text("demo_mode: a\n")
    (repo / "docs" / "roles").mkdir(parents=True)
    for name, text in role_docs.render_all(repo).items():
        (repo / "docs" / "roles" / name).write_text(text)
    assert role_docs.stale(repo) == []
    page = (repo / "docs" / "roles" / "demo.md").read_text()
    assert '| `demo_mode` | str | no | `"a"` | `a`, `b` | `a` or `b` |' in page
    spec["argument_specs"]["main"]["options"]["demo_mode"]["description"] = "changed"
    (repo / "roles" / "demo" / "meta" / "argument_specs.yml").write_text(yaml.safe_dump(spec))
    assert role_docs.stale(repo) == ["demo.md"]


def test_defaults_without_spec_or_with_another_default_are_errors(tmp_path: Path) -> None:
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": {"main": {"options": {
        "demo_a": {"type": "int", "default": 1, "description": "x"}}}}}))
    (role / "defaults" / "main.yml").write_text("demo_a: 2\n")
    with pytest.raises(role_docs.RoleDocError, match="differs"):
        role_docs.load_role(role)
    (role / "defaults" / "main.yml").write_text("demo_a: 1\ndemo_b: 3\n")
    with pytest.raises(role_docs.RoleDocError, match="demo_b"):
        role_docs.load_role(role)
