"""The datapath CLI: exit codes, output formats, inventories, hostile YAML, both import names."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import cli, loader

from ._specs import EXAMPLE, REPO

SPEC_DIR = os.path.join(REPO, "plugins", "plugin_utils", "cluster_spec")
GOOD = "datapath:\n  version: 1\n  fabrics:\n    - {name: mgmt, purpose: management}\n"
BAD = ("datapath:\n  version: 1\n  fabrics:\n    - {name: mgmt, purpose: management}\n"
       "    - {name: rail0, purpose: rdma, kind: roce, mtu: 9000, roce: {pfc_priorities: [], ecn: false}}\n"
       "    - {name: x, purpose: storage, mtu: 99999, colour: blue}\n")


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.main(list(argv), out)
    return code, out.getvalue()


@pytest.fixture
def good(tmp_path: Path) -> str:
    path = tmp_path / "good.yml"
    path.write_text(GOOD)
    return str(path)


@pytest.fixture
def bad(tmp_path: Path) -> str:
    path = tmp_path / "bad.yml"
    path.write_text(BAD)
    return str(path)


def test_validate_ok(good: str) -> None:
    code, out = run("validate", good)
    assert code == 0 and out.strip().endswith("valid")


def test_validate_invalid_text(bad: str) -> None:
    code, out = run("validate", bad)
    assert code == 1
    lines = out.splitlines()
    assert ("datapath.fabrics[1].roce.pfc_priorities: RoCE priority 3 has PFC off and ECN off — traffic would be "
            f"lossy; enable PFC on 3 or set ecn: true [{bad}:5]") in lines  # each error with its file and line
    assert any(line.startswith("datapath.fabrics[2].colour: unknown key") for line in lines)
    assert any(line.startswith("datapath.fabrics[2].mtu:") for line in lines)
    assert lines[-1] == f"3 error(s) in {bad}"


def test_validate_json(bad: str) -> None:
    code, out = run("validate", bad, "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["valid"] is False and len(data["errors"]) == 3
    assert set(data["errors"][0]) == {"path", "message", "hint", "host", "file", "line"}
    assert [(e["file"], e["line"]) for e in data["errors"]] == [(bad, 5), (bad, 6), (bad, 6)]


def test_validate_junit(bad: str, good: str) -> None:
    code, out = run("validate", bad, "--format", "junit")
    suite = ET.fromstring(out)
    assert code == 1 and suite.tag == "testsuite"
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("1", "0", "0")
    failure = suite.find("testcase/failure")
    assert failure is not None and "pfc_priorities" in (failure.text or "")
    code, out = run("validate", good, "--format", "junit")
    assert code == 0 and ET.fromstring(out).get("failures") == "0"


def test_validate_inventory_dir() -> None:
    code, out = run("validate", EXAMPLE)
    assert code == 0 and "16 hosts planned" in out
    code, out = run("validate", EXAMPLE, "--format", "junit")
    suite = ET.fromstring(out)
    assert code == 0 and suite.get("tests") == "17"


def test_validate_inventory_with_host_errors(tmp_path: Path) -> None:
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu:\n      hosts:\n        n1: {datapath_memory_bytes: 1073741824}\n        n2:\n")
    (tmp_path / "group_vars" / "all" / "datapath.yml").write_text(
        "datapath:\n  version: 1\n  profiles:\n    - name: gpu\n      hugepages:\n"
        "        pages: [{size: 2M, count: 512}]\n")
    code, out = run("validate", str(tmp_path), "--format", "json")
    data = json.loads(out)
    assert code == 1
    assert [(e["host"], e["path"]) for e in data["errors"]] == [("n1", "datapath.profiles[0].hugepages.pages")]


@pytest.mark.parametrize("content", ["datapath: [", "just: text\n", "- a list\n", "", "datapath:\n"])
def test_unusable_or_non_spec_inputs(tmp_path: Path, content: str) -> None:
    path = tmp_path / "x.yml"
    path.write_text(content)
    code = run("validate", str(path))[0]
    assert code in (1, 2)
    if content != "datapath:\n":
        assert code == 2
    else:
        assert code == 1  # present but null: a spec error with a path


def test_unusable_input_still_writes_junit_and_json(tmp_path: Path) -> None:
    code, out = run("validate", str(tmp_path / "nope.yml"), "--format", "junit")
    suite = ET.fromstring(out)
    assert code == 2 and (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "1")
    error = suite.find("testcase/error")
    assert error is not None and "no such file or directory" in error.get("message", "")
    code, out = run("validate", str(tmp_path / "nope.yml"), "--format", "json")
    assert code == 2 and json.loads(out)["usable"] is False


def test_ini_inventory_and_readers(tmp_path: Path) -> None:
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "group_vars" / "all" / "datapath.yml").write_text(GOOD)
    (tmp_path / "hosts.ini").write_text("[gpu]\nn1 datapath_numa_nodes=2\nn2\n")
    code, out = run("validate", str(tmp_path / "hosts.ini"), "--format", "json")
    data = json.loads(out)
    assert code == 0 and (data["hosts"], data["reader"]) == (2, "ansible")
    code, out = run("validate", str(tmp_path), "--inventory-reader", "yaml")
    assert code == 2  # the fast reader reads YAML inventories only
    code, out = run("plan", str(tmp_path / "hosts.ini"), "--host", "n1")
    assert code == 0 and json.loads(out)["host"] == "n1"
    code, out = run("validate", EXAMPLE, "--inventory-reader", "ansible", "--format", "json")
    assert code == 0 and json.loads(out)["reader"] == "ansible"
    assert run("validate", EXAMPLE, "--inventory-reader", "nope")[0] == 2


def test_missing_file_and_bad_usage(tmp_path: Path) -> None:
    assert run("validate", str(tmp_path / "nope.yml"))[0] == 2
    assert run("validate", str(tmp_path))[0] == 2  # a directory without hosts.yml
    assert run("frobnicate")[0] == 2
    assert run("validate", "x", "--format", "xml")[0] == 2


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "x.yml"
    path.write_bytes(b"datapath: \xff\xfe\n")
    assert run("validate", str(path))[0] == 2


BILLION_LAUGHS = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]" for i in range(8)]
    + ["datapath: *i"]
) + "\n"


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yml"
    path.write_text(BILLION_LAUGHS)
    code = run("validate", str(path))[0]
    assert code == 2
    with pytest.raises(loader.LoadError, match="alias bomb"):
        loader.load_yaml_text(BILLION_LAUGHS)


def test_too_many_aliases_and_deep_nesting_and_recursion() -> None:
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * (loader.MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(loader.LoadError, match="aliases"):
        loader.load_yaml_text(many)
    with pytest.raises(loader.LoadError, match="nested deeper"):
        loader.load_yaml_text("[" * 10000 + "]" * 10000)
    with pytest.raises(loader.LoadError):
        loader.load_yaml_text("a: &a [*a]\n")


def test_too_large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "MAX_BYTES", 100)
    path = tmp_path / "big.yml"
    path.write_text(GOOD + "#" * 200 + "\n")
    assert run("validate", str(path))[0] == 2


def test_plan_command(good: str) -> None:
    code, out = run("plan", EXAMPLE, "--host", "gpu-node-03")
    plan = json.loads(out)
    assert code == 0 and plan["host"] == "gpu-node-03" and plan["profiles"][1] == "gpu_nodes"
    assert run("plan", EXAMPLE, "--host", "gpu-node-03")[1] == out  # byte-identical
    code, out = run("plan", good, "--host", "h", "--groups", "a,b", "--var", "datapath_numa_nodes=2")
    assert code == 0 and json.loads(out)["profiles"] == ["builtin:ai-gpu-node"]
    assert run("plan", EXAMPLE, "--host", "nope")[0] == 2
    assert run("plan", good, "--host", "h", "--var", "novalue")[0] == 2


def test_plan_of_invalid_spec_exits_1(bad: str) -> None:
    assert run("plan", bad, "--host", "h")[0] == 1


def test_schema_command() -> None:
    code, out = run("schema")
    schema = json.loads(out)
    assert code == 0 and schema["properties"]["datapath"] == {"$ref": "#/$defs/DatapathSpec"}
    assert "Fabric" in schema["$defs"]


def test_python_dash_m_under_another_top_level_name(tmp_path: Path, bad: str) -> None:
    # The console script imports the package as `aiinfra_datapath_spec` (setuptools package-dir,
    # installed by the bootstrap); outside ansible_collections, so without .collections on the path.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANSIBLE_COLLECTIONS_PATH")}
    found = subprocess.run([sys.executable, "-c", "import aiinfra_datapath_spec as m; print(m.__file__)"],
                           capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False)
    assert found.stdout.strip() == os.path.join(SPEC_DIR, "__init__.py"), found.stderr
    proc = subprocess.run([sys.executable, "-m", "aiinfra_datapath_spec", "validate", bad, "--format", "json"],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["valid"] is False
    proc = subprocess.run([sys.executable, "-c", "import sys; from aiinfra_datapath_spec.cli import main; "
                           "sys.exit(main(['schema']))"], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), check=False)
    assert proc.returncode == 0 and json.loads(proc.stdout)["title"]
