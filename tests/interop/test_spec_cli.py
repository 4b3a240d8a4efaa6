"""`datapath validate` and `datapath plan` on inventories, read by ansible-core itself.

What this proves:

* an INI inventory with group_vars/all/datapath.yml validates and plans exactly like the
  equivalent YAML inventory (the CLI, every host's plan byte for byte);
* the fast YAML reader and ansible-core's InventoryManager/VariableManager give the same hosts,
  groups, variables and `datapath` (the example inventory, and generated inventories with nested
  groups, groups outside `all`, hosts in several groups or in none, inline vars, group_vars and
  host_vars files and directories, a group's own `datapath`);
* a broken INI file is a clear error and exit code 2 (also as a JUnit report);
* the loader's limits hold for what ansible-core reads: a file over 16 MiB, an alias bomb, a
  vaulted file without a secret all exit 2;
* the time both readers take on the example and on a generated 10,000-host inventory (printed).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import cli, loader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .spec_common import EXAMPLE, run, tool, yaml_text

pytestmark = pytest.mark.interop

CASES: Counter[str] = Counter()
FIGURES: dict[str, str] = {}
SPEC = os.path.join(EXAMPLE, "group_vars", "all", "datapath.yml")


def datapath(*argv: str) -> tuple[int, str, str]:
    proc = run([tool("datapath"), *argv])
    return proc.returncode, proc.stdout, proc.stderr


def _yaml_to_ini(data: dict[str, Any]) -> str:
    """The INI inventory that says what a YAML inventory says (hosts, children, vars)."""
    sections: dict[str, list[str]] = {}

    def value(v: Any) -> str:
        return json.dumps(v) if not isinstance(v, str) else v

    def group(name: str, body: Any) -> None:
        body = body or {}
        for host, hvars in (body.get("hosts") or {}).items():
            line = host + "".join(f" {k}={value(v)}" for k, v in (hvars or {}).items())
            sections.setdefault(name, []).append(line)
        for key, val in (body.get("vars") or {}).items():
            sections.setdefault(f"{name}:vars", []).append(f"{key}={value(val)}")
        for child, child_body in (body.get("children") or {}).items():
            sections.setdefault(f"{name}:children", []).append(child)
            group(child, child_body)

    for name, body in data.items():
        group(name, body)
    return "\n".join(f"[{section}]\n" + "\n".join(lines) + "\n" for section, lines in sections.items())


@pytest.fixture
def ini_example(tmp_path: Path) -> Path:
    """inventories/example as an INI inventory: hosts.ini + the same group_vars/all/datapath.yml."""
    data = loader.load_yaml_file(os.path.join(EXAMPLE, "hosts.yml"))
    (tmp_path / "hosts.ini").write_text(_yaml_to_ini(data))
    shutil.copytree(os.path.join(EXAMPLE, "group_vars"), tmp_path / "group_vars")
    return tmp_path


def _same_inventory(a: loader.Inventory, b: loader.Inventory) -> None:
    assert a.hosts == b.hosts
    assert a.spec == b.spec
    assert {h: a.spec_of(h) for h in a.hosts} == {h: b.spec_of(h) for h in b.hosts}


def test_ini_inventory_validates_and_plans_like_the_yaml_one(ini_example: Path) -> None:
    ini = str(ini_example / "hosts.ini")
    for target in (ini, str(ini_example)):  # the INI file, and its directory
        code_ini, out_ini, err_ini = datapath("validate", target, "--format", "json")
        code_yaml, out_yaml, _err = datapath("validate", EXAMPLE, "--format", "json")
        ours, theirs = json.loads(out_ini), json.loads(out_yaml)
        assert code_ini == code_yaml == 0, err_ini
        assert (ours["reader"], theirs["reader"]) == ("ansible", "yaml")
        assert {k: v for k, v in ours.items() if k not in ("target", "reader")} == \
            {k: v for k, v in theirs.items() if k not in ("target", "reader")}
    hosts = sorted(loader.load_inventory(EXAMPLE).hosts)
    assert len(hosts) == 16
    code_ini, plan_ini, err = datapath("plan", ini, "--host", hosts[0])  # the command itself, once
    assert code_ini == 0 and json.loads(plan_ini)["host"] == hosts[0], err
    for host in hosts:  # every host, in-process (the same main())
        plans = []
        for target in (ini, EXAMPLE):
            out = io.StringIO()
            assert cli.main(["plan", target, "--host", host], out) == 0
            plans.append(out.getvalue())
        assert plans[0] == plans[1], host
        CASES["hosts planned from INI and YAML (identical)"] += 1
    _same_inventory(loader.load_target(ini), loader.load_inventory(EXAMPLE))


def test_ini_inventory_with_errors_reports_like_the_yaml_one(ini_example: Path, tmp_path: Path) -> None:
    bad = loader.load_yaml_file(SPEC)
    bad["datapath"]["fabrics"][2]["roce"]["pfc_priorities"] = []  # a cross-check
    bad["datapath"]["fabrics"][2]["roce"]["ecn"] = False
    bad["datapath"]["profiles"][0]["hugepages"]["pages"][1]["count"] = 4096  # a node error (memory)
    (ini_example / "group_vars" / "all" / "datapath.yml").write_text(yaml_text(bad))
    yaml_inv = tmp_path / "yaml-inv"
    shutil.copytree(EXAMPLE, yaml_inv)
    (yaml_inv / "group_vars" / "all" / "datapath.yml").write_text(yaml_text(bad))
    code_ini, out_ini, _err_ini = datapath("validate", str(ini_example / "hosts.ini"), "--format", "json")
    code_yaml, out_yaml, _err_yaml = datapath("validate", str(yaml_inv), "--format", "json")
    assert code_ini == code_yaml == 1

    def relative(errors: list[dict[str, Any]], base: Path) -> list[dict[str, Any]]:  # the same file in each copy
        return [dict(e, file=os.path.relpath(e["file"], base)) for e in errors]

    assert relative(json.loads(out_ini)["errors"], ini_example) == relative(json.loads(out_yaml)["errors"], yaml_inv)
    assert json.loads(out_ini)["errors"][0]["path"] == "datapath.fabrics[2].roce.pfc_priorities"
    assert json.loads(out_ini)["errors"][0]["file"] == str(ini_example / "group_vars" / "all" / "datapath.yml")


@pytest.mark.parametrize(("name", "text", "reason"), [
    ("unknown section type", "[gpu:vars]\na=1\n[gpu:nonsense]\nx\n", "Section [gpu:nonsense] has unknown type"),
    ("variable without a value", "[gpu]\nnode1\n[gpu:vars]\nnovalue\n", "'ini' plugin"),
    ("bad host range", "[gpu]\nnode[01:\n", "'ini' plugin"),
])
def test_broken_ini_is_a_clear_error_and_exit_2(tmp_path: Path, name: str, text: str, reason: str) -> None:
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(SPEC, tmp_path / "group_vars" / "all" / "datapath.yml")
    path = tmp_path / "hosts.ini"
    path.write_text(text)
    code, out, err = datapath("validate", str(path))
    assert code == 2, (out, err)
    assert err.startswith(f"datapath: {path}: not an inventory ansible-core can read:"), err
    assert "ini" in err and reason in err, err
    assert "Traceback" not in err
    code, out, _err = datapath("validate", str(path), "--format", "junit")
    assert code == 2 and '<error message="' in out and 'name="input"' in out
    CASES["broken INI files (exit 2)"] += 1


def test_loader_limits_hold_for_what_ansible_core_reads(tmp_path: Path) -> None:
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(SPEC, tmp_path / "group_vars" / "all" / "datapath.yml")
    (tmp_path / "hosts.ini").write_text("[gpu]\nnode1\n")
    assert datapath("validate", str(tmp_path / "hosts.ini"))[0] == 0
    bomb = ("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
                      for i in range(8)) + "datapath_bomb: *i\n")
    (tmp_path / "group_vars" / "gpu.yml").write_text(bomb)
    code, _out, err = datapath("validate", str(tmp_path / "hosts.ini"))
    assert code == 2 and "alias bomb" in err, err
    (tmp_path / "group_vars" / "gpu.yml").unlink()
    big = tmp_path / "host_vars" / "node1.yml"
    big.parent.mkdir()
    big.write_text("x: " + "a" * (loader.MAX_BYTES + 10) + "\n")
    code, _out, err = datapath("validate", str(tmp_path / "hosts.ini"))
    assert code == 2 and "larger than" in err, err
    big.unlink()
    vaulted = tmp_path / "group_vars" / "gpu.yml"
    vaulted.write_text("$ANSIBLE_VAULT;1.1;AES256\n" + "6162636465666768\n" * 4)
    code, _out, err = datapath("validate", str(tmp_path / "hosts.ini"))
    assert code == 2 and "vault" in err.lower(), err
    CASES["limits on ansible-core's input (exit 2)"] += 3


def test_a_group_with_its_own_datapath_is_validated_on_its_own(tmp_path: Path) -> None:
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(SPEC, tmp_path / "group_vars" / "all" / "datapath.yml")
    (tmp_path / "hosts.ini").write_text("[gpu_nodes]\nnode1\nnode2\n[odd]\nnode3\n")
    (tmp_path / "group_vars" / "odd.yml").write_text("datapath: {version: 1, fabrics: [{name: x, purpose: lan}]}\n")
    code, out, err = datapath("validate", str(tmp_path), "--format", "json")
    errors = json.loads(out)["errors"]
    assert code == 1, err
    assert [(e["path"], e["host"]) for e in errors] == [("datapath.fabrics[0].purpose", "node3")]
    assert "the `datapath` of 1 host(s): node3" in errors[0]["message"]


# --------------------------------------------------------------------------- the two readers agree
def test_both_readers_read_the_example_alike() -> None:
    fast = loader.load_inventory(EXAMPLE, "yaml")
    slow = loader.load_inventory(EXAMPLE, "ansible")
    assert (fast.reader, slow.reader) == ("yaml", "ansible")
    _same_inventory(fast, slow)


GROUPS = [f"g{i}" for i in range(6)]
HOSTS = [f"h{i}" for i in range(8)]
small_vars = st.dictionaries(st.sampled_from(["a", "b", "datapath_numa_nodes", "ansible_host"]),
                             st.integers(0, 3) | st.sampled_from(["x", "yes", "0755"]), max_size=3)
SPEC_A = {"version": 1, "fabrics": [{"name": "mgmt", "purpose": "management"}]}
SPEC_B = {"version": 1, "builtin_profile": "none"}


@st.composite
def inventories(draw: st.DrawFn) -> dict[str, Any]:
    """A YAML inventory and its vars files: {"hosts.yml": data, "group_vars/...": data, ...}."""
    parents = {g: draw(st.lists(st.sampled_from(GROUPS[:i] or ["all"]), max_size=2, unique=True)) if i else []
               for i, g in enumerate(GROUPS)}
    members = {h: draw(st.lists(st.sampled_from(GROUPS), max_size=3, unique=True)) for h in HOSTS}
    outside = draw(st.sets(st.sampled_from(GROUPS)))  # declared at the top level, not under all
    bodies: dict[str, dict[str, Any]] = {g: {} for g in GROUPS}
    for g in GROUPS:
        gvars = draw(small_vars)
        if gvars:
            bodies[g]["vars"] = gvars
        hosts = {h: (draw(small_vars) or None) for h in HOSTS if g in members[h]}
        if hosts:
            bodies[g]["hosts"] = hosts
    tree: dict[str, Any] = {"all": {"children": {}}}
    for g in GROUPS:
        ps = [p for p in parents[g] if p != "all"]
        if not ps and g not in outside:
            tree["all"]["children"][g] = bodies[g]
        elif not ps:
            tree[g] = bodies[g]
        for index, p in enumerate(ps):
            holder = tree["all"]["children"].get(p) or tree.get(p) or bodies[p]
            holder.setdefault("children", {})[g] = bodies[g] if index == 0 else None
    loose = {h: (draw(small_vars) or None) for h in HOSTS if not members[h]}
    if loose:
        tree["all"]["hosts"] = loose
    all_vars = draw(small_vars)
    if all_vars:
        tree["all"]["vars"] = all_vars
    files: dict[str, Any] = {"hosts.yml": tree, "group_vars/all/datapath.yml": {"datapath": SPEC_A}}
    for name in draw(st.lists(st.sampled_from(["all", *GROUPS]), max_size=4, unique=True)):
        where = draw(st.sampled_from(["{}.yml", "{}/10-a.yml", "{}/20-b.yaml"]))
        path = "group_vars/" + where.format(name)
        if path != "group_vars/all.yml":  # Ansible reads group_vars/all/ or all.yml, not both
            files[path] = draw(small_vars) or None
    if draw(st.booleans()):
        files[f"group_vars/{draw(st.sampled_from(GROUPS))}.yml"] = {"datapath": SPEC_B, "b": 9}
    for host in draw(st.lists(st.sampled_from(HOSTS), max_size=3, unique=True)):
        files[draw(st.sampled_from(["host_vars/{}.yml", "host_vars/{}/vars.yml"])).format(host)] = draw(small_vars)
    return files


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(inventories())
def test_fast_reader_reads_generated_inventories_like_ansible_core(files: dict[str, Any]) -> None:
    directory = tempfile.mkdtemp(prefix="dpi-spec-inv-")
    try:
        for rel, data in files.items():
            path = os.path.join(directory, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(yaml_text(data) if data is not None else "")
        if os.path.isdir(os.path.join(directory, "group_vars", "all")) and \
                os.path.exists(os.path.join(directory, "group_vars", "all.yml")):
            os.unlink(os.path.join(directory, "group_vars", "all.yml"))
        try:
            slow = loader.load_inventory(directory, "ansible")
        except loader.LoadError as exc:
            with pytest.raises(loader.LoadError):
                loader.load_inventory(directory, "yaml")
            CASES[f"generated inventories both refuse ({str(exc).rsplit(':', maxsplit=1)[-1].strip()[:30]})"] += 1
            return
        fast = loader.load_inventory(directory, "yaml")
        _same_inventory(fast, slow)
        CASES["generated inventories read alike"] += 1
        CASES["hosts compared"] += len(slow.hosts)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _generate(directory: Path, hosts: int) -> None:
    racks = [f"        rack_{r:03d}:\n          hosts:\n" + "".join(
        f"            gpu-node-{r * 100 + h:05d}:\n              ansible_host: 10.{r}.0.{h}\n" for h in range(100))
        for r in range(hosts // 100)]
    (directory / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      vars:\n        datapath_memory_bytes: 2199023255552\n"
        "        datapath_numa_nodes: 2\n      children:\n" + "".join(racks))
    shutil.copytree(os.path.join(EXAMPLE, "group_vars"), directory / "group_vars")


def test_reader_figures_on_the_example_and_10000_hosts(tmp_path: Path) -> None:
    _generate(tmp_path, 10000)
    for reader in ("yaml", "ansible"):  # imports and caches warm, so that the figures are the reading
        loader.load_inventory(EXAMPLE, reader)
    for name, target in (("example (16 hosts)", EXAMPLE), ("generated (10000 hosts)", str(tmp_path))):
        took = {}
        results = {}
        for reader in ("yaml", "ansible"):
            start = time.perf_counter()
            results[reader] = loader.load_inventory(target, reader)
            took[reader] = time.perf_counter() - start
        _same_inventory(results["yaml"], results["ansible"])
        FIGURES[name] = (f"fast YAML reader {took['yaml']:.2f} s, ansible-core {took['ansible']:.2f} s "
                         f"({took['ansible'] / max(took['yaml'], 1e-6):.1f}x)")
    start = time.perf_counter()
    code = cli.main(["validate", str(tmp_path), "--format", "json"], out=_Sink())
    FIGURES["datapath validate, 10000 hosts (fast reader, plans included)"] = f"{time.perf_counter() - start:.2f} s"
    assert code == 0


class _Sink:
    def write(self, text: str) -> int:
        return len(text)


def test_zz_report(capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\ninventory cases: {dict(sorted(CASES.items()))}")
        for name, figure in FIGURES.items():
            print(f"inventory readers, {name}: {figure}")
