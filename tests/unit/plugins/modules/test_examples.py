"""Issue 38, point 6: every module's EXAMPLES is a block a user can paste, and its docs match the code.

Modules are discovered (plugins/modules/*.py), so a module added later is covered without a change
here. For each: EXAMPLES is a YAML list of tasks that `ansible-playbook --syntax-check` accepts (the
module names resolve to this collection); the options an example gives are the module's documented
options; every plan part an example reads (`datapath_plan.<part>...`, also in the node_plan filter's
docs) exists in a real plan of today's version; DOCUMENTATION lists `requirements` (the node tools
the module calls); `version_added` names a version the changelog has released, or the galaxy.yml
version about to be released. The read-only modules' examples also run against a lab node
(tests/integration/test_examples_lab.py).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import node_plan
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.loader import load_target

REPO = Path(__file__).resolve().parents[4]
MODULES = sorted(p for p in (REPO / "plugins" / "modules").glob("*.py") if not p.name.startswith("_"))
FILTER_DOCS = sorted((REPO / "plugins" / "filter").glob("*.yml"))
PLAN_REF = re.compile(r"datapath_plan((?:\.[A-Za-z_][A-Za-z0-9_]*|\[['\"][^'\"]+['\"]\])+)")


def docs(path: Path) -> dict[str, str]:
    """DOCUMENTATION, EXAMPLES and RETURN of a module file, read as ansible-doc reads them (literals)."""
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


def module_tasks(examples: str) -> list[dict[str, Any]]:
    tasks = yaml.safe_load(examples)
    assert isinstance(tasks, list) and tasks, "EXAMPLES is a YAML list of tasks"
    out = []
    for task in tasks:
        out.extend(task.get("block", [task]) if isinstance(task, dict) else [task])
    return out


@cache
def example_plan() -> dict[str, Any]:
    inv = load_target(str(REPO / "inventories" / "example"))
    host = sorted(inv.hosts)[0]
    groups, variables = inv.hosts[host]
    return node_plan(inv.spec_of(host), host, groups, variables)


def _walk(plan: Any, ref: str) -> str | None:
    """None when ``datapath_plan<ref>`` exists in the plan, else the part that does not."""
    node, seen = plan, "datapath_plan"
    for name, key in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[['\"]([^'\"]+)['\"]\]", ref):
        part = name or key
        if isinstance(node, dict) and part in node:
            node, seen = node[part], f"{seen}.{part}"
            continue
        if node is None or isinstance(node, list) or (isinstance(node, dict) and name in ("keys", "items")):
            return None  # below a list, a null part or a dict method: Jinja's business
        return f"{seen}.{part}"
    return None


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_examples_give_documented_options(path: Path) -> None:
    doc = docs(path)
    documentation = yaml.safe_load(doc["DOCUMENTATION"])
    options = documentation.get("options") or {}
    known = set(options) | {a for o in options.values() for a in (o or {}).get("aliases", [])}
    known |= {"root"}  # the shared option of the doc fragment aiinfra.datapath.node
    for fragment in documentation.get("extends_documentation_fragment") or []:
        if fragment.startswith("aiinfra.datapath."):  # aiinfra.datapath.node or aiinfra.datapath.node.lock
            module = fragment.split(".")[2]
            text = (REPO / "plugins" / "doc_fragments" / f"{module}.py").read_text()
            known |= set(re.findall(r"^  (\w+):\s*$", text, re.M))
    used = 0
    for task in module_tasks(doc["EXAMPLES"]):
        args = task.get(f"aiinfra.datapath.{path.stem}", task.get(path.stem, "absent"))
        if args == "absent":
            continue
        used += 1
        if isinstance(args, dict):
            assert set(args) <= known, (task.get("name"), set(args) - known)
        extra = task.get("args")
        if isinstance(extra, dict):
            assert set(extra) <= known, (task.get("name"), set(extra) - known)
    assert used, f"EXAMPLES of {path.stem} never call aiinfra.datapath.{path.stem}"


@pytest.mark.parametrize("path", [*MODULES, *FILTER_DOCS], ids=lambda p: p.name)
def test_examples_read_todays_plan_parts(path: Path) -> None:
    text = docs(path)["EXAMPLES"] if path.suffix == ".py" else path.read_text()
    text += docs(path).get("DOCUMENTATION", "") if path.suffix == ".py" else ""
    stale = [(m.group(0), missing) for m in PLAN_REF.finditer(text)
             if (missing := _walk(example_plan(), m.group(1))) is not None]
    assert not stale, f"{path.name}: plan parts that do not exist (docs/plan.md has today's names): {stale}"
    # the old plan names of plan version 1 are not mentioned as plan parts either
    assert not re.findall(r"\bplan\.(?:sysctl|interfaces|qos|firmware|storage|k8s|models)\b", text), path.name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_docs_list_their_requirements(path: Path) -> None:
    documentation = yaml.safe_load(docs(path)["DOCUMENTATION"])
    requirements = documentation.get("requirements")
    assert isinstance(requirements, list) and requirements, f"{path.stem}: DOCUMENTATION has no requirements"
    assert all(isinstance(r, str) and r.strip() for r in requirements), path.stem


def _versions() -> tuple[str, set[str]]:
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    released = set(yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text()).get("releases") or {})
    return str(galaxy), {str(v) for v in released}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


@pytest.mark.parametrize("path", [*MODULES, *FILTER_DOCS], ids=lambda p: p.name)
def test_version_added_is_released_or_the_next_release(path: Path) -> None:
    galaxy, released = _versions()
    text = docs(path)["DOCUMENTATION"] if path.suffix == ".py" else path.read_text()
    found = re.findall(r"^\s*version_added:\s*['\"]?([0-9.]+)['\"]?\s*$", text, re.M)
    assert found, f"{path.name}: no version_added"
    for version in found:
        assert version in released | {galaxy}, (path.name, version, sorted(released), galaxy)
        assert _key(version) <= _key(galaxy), (path.name, version, galaxy)


def test_all_examples_pass_ansible_playbook_syntax_check(tmp_path: Path) -> None:
    tasks: list[Any] = []
    for path in MODULES:
        tasks.extend(yaml.safe_load(docs(path)["EXAMPLES"]))
    for path in FILTER_DOCS:
        tasks.extend(yaml.safe_load(yaml.safe_load(path.read_text())["EXAMPLES"]) or [])
    playbook = tmp_path / "examples.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Every EXAMPLES block", "hosts": "localhost",
                                         "gather_facts": False, "tasks": tasks}], sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "--syntax-check",
                           "-i", "localhost,", str(playbook)], capture_output=True, text=True, env=env, check=False,
                          cwd=str(REPO), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(tasks) >= 2 * len(MODULES)


def test_node_plan_docs_name_every_part_of_todays_plan() -> None:
    doc = yaml.safe_load((REPO / "plugins" / "filter" / "node_plan.yml").read_text())
    description = doc["RETURN"]["_value"]["description"]
    text = " ".join(description) if isinstance(description, list) else description
    listed = set(re.findall(r"\b([a-z_]+)(?=[,(]| \()", text.split("keys", 1)[1]))
    assert listed == set(example_plan()), (listed ^ set(example_plan()))


def yaml_errors(path: Path) -> list[str]:
    """Every documentation block of a module or doc fragment that ``yaml.safe_load`` refuses.

    A colon followed by a space inside a plain (unquoted) scalar, e.g. ``- ... that MTU: the kernel
    ...`` in an option's description, makes YAML read a mapping and fail; ansible-doc and
    ansible-test sanity then fail too, but only in their slow runs. This finds it in the unit tests.
    Modules: DOCUMENTATION, EXAMPLES and RETURN; doc fragments: every upper-case attribute of the
    ModuleDocFragment class (DOCUMENTATION and each named fragment such as LOCK).
    """
    tree = ast.parse(path.read_text())
    body: list[ast.stmt] = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModuleDocFragment":
            body.extend(node.body)
    errors = []
    for node in body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name not in ("DOCUMENTATION", "EXAMPLES", "RETURN") and not (node not in tree.body and name.isupper()):
            continue
        text = ast.literal_eval(node.value)
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as exc:
            errors.append(f"{path.name} {name}: {exc}")
    return errors


DOC_FRAGMENTS = sorted((REPO / "plugins" / "doc_fragments").glob("*.py"))


@pytest.mark.parametrize("path", [*MODULES, *DOC_FRAGMENTS], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_documentation_examples_and_return_parse_as_yaml(path: Path) -> None:
    assert not yaml_errors(path)


@pytest.mark.parametrize("path", FILTER_DOCS, ids=lambda p: p.name)
def test_filter_docs_parse_as_yaml(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict) and {"DOCUMENTATION", "EXAMPLES", "RETURN"} <= set(doc), path.name
    if isinstance(doc["EXAMPLES"], str):
        yaml.safe_load(doc["EXAMPLES"])


def test_a_colon_space_in_a_plain_scalar_is_caught(tmp_path: Path) -> None:
    # the failure that broke main's CI (plugins/modules/link_mtu.py, an option description)
    broken = tmp_path / "broken.py"
    broken.write_text('DOCUMENTATION = r"""\nmodule: broken\noptions:\n  mtu:\n    description:\n'
                      '      - A bond member follows its bond, so it keeps\n'
                      '        that MTU: the kernel refuses another.\n'
                      '    type: int\n"""\n'
                      'RETURN = r"""\n{}\n"""\n')
    errors = yaml_errors(broken)
    assert len(errors) == 1 and errors[0].startswith("broken.py DOCUMENTATION: mapping values are not allowed")
