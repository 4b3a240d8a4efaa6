"""Issue 38, point 6: the EXAMPLES of every read-only module run against a lab node (lab "dp38").

The modules are discovered: every module whose capability is read-only (``Capability.read_only``:
it changes nothing) has its EXAMPLES run, unchanged, by ansible-playbook on a 2-node lab, after the
host's plan is computed into ``datapath_plan`` as the roles do. An example that names hardware the lab
has (its fabric NICs ens1f0np0/eno1, its addresses) must succeed; one that names a device the lab does
not have (an NVMe namespace, a GPU) must fail cleanly, with a message and without a traceback. The
syntax of every EXAMPLES block, the state-changing modules' too, is checked without a lab in
tests/unit/plugins/modules/test_examples.py.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from datapath_lab import Lab, LabConfig
from labtools import LabHandle, _lab_possible

pytestmark = pytest.mark.lab

LAB = "dp38"
REPO = Path(__file__).resolve().parents[2]


def _read_only_modules() -> list[str]:
    capability = importlib.import_module("ansible_collections.aiinfra.datapath.plugins.module_utils._capability")
    out = []
    for path in sorted((REPO / "plugins" / "modules").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.aiinfra.datapath.plugins.modules.{path.stem}")
        backends = [v for v in vars(module).values()
                    if inspect.isclass(v) and issubclass(v, capability.Capability) and v is not capability.Capability]
        if backends and all(b.read_only for b in backends):
            out.append(path.stem)
    return out


def _examples(name: str) -> list[dict[str, Any]]:
    import ast
    text = (REPO / "plugins" / "modules" / f"{name}.py").read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "EXAMPLES":
            return list(yaml.safe_load(ast.literal_eval(node.value)))
    raise AssertionError(f"{name} has no EXAMPLES")


READ_ONLY = _read_only_modules()


@pytest.fixture(scope="module")
def dp38(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    lab = Lab(LAB)
    inventory_dir = str(tmp_path_factory.mktemp("dp38-inventory"))
    try:
        state = lab.up(LabConfig(name=LAB, nodes=2, nvme_size="64M", inventory_dir=inventory_dir),
                       log=lambda *_: None)
        yield LabHandle(lab, state)
    finally:
        lab.down(log=lambda *_: None)


def test_the_read_only_modules_are_found() -> None:
    assert {"datapath_facts", "node_topology", "rdma_counters", "nic_firmware", "path_check"} <= set(READ_ONLY)


def test_read_only_examples_run_on_the_lab(dp38: LabHandle, tmp_path: Path) -> None:
    plays: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for module in READ_ONLY:
        tasks = []
        for index, task in enumerate(_examples(module)):
            task = dict(task, ignore_errors=True)
            label = f"{module} example {index}: {task.get('name', '')}"
            names[label] = module if any(k in task for k in (f"aiinfra.datapath.{module}", module)) else ""
            task["name"] = label
            tasks.append(task)
        plays.append({"name": f"EXAMPLES of {module}", "hosts": "all", "gather_facts": False,
                      "pre_tasks": [{"name": "The host's plan, as the roles compute it",
                                     "ansible.builtin.set_fact": {"datapath_plan": (
                                         "{{ datapath | aiinfra.datapath.node_plan(inventory_hostname, group_names, "
                                         "hostvars[inventory_hostname]) }}")}}],
                      "tasks": tasks})
    playbook = tmp_path / "examples.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    result = dp38.playbook(str(playbook))
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-2000:]
    ran = 0
    for label, module in names.items():
        if not module:
            continue  # a debug task that shows a result
        hosts = result.task_results(label)
        assert hosts, f"{label} did not run"
        for host, res in hosts.items():
            ran += 1
            if res.get("failed") or res.get("unreachable"):
                text = str(res.get("msg", "")) + str(res.get("module_stderr", "")) + str(res.get("exception", ""))
                assert res.get("msg") and "Traceback" not in text and "MODULE FAILURE" not in text, (label, host, res)
    assert ran >= 2 * len(READ_ONLY)
