"""plugin_utils/plan_cache.py: each host's validated plan kept between runs, used only while the
spec, the code, the host's groups and the facts the plan reads are what they were.

The plans are real: cluster_spec's ``node_plan`` of the example spec and of the small test spec."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import plan_cache as pc
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import node_plan, validate_spec
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.controller_cache import ENV

from .cluster_spec._specs import base, example

FACTS = {"datapath_facts": {"memory_bytes": 64 << 30, "numa_nodes": 2}}


@pytest.fixture(name="env")
def _env(tmp_path: Path) -> dict[str, str]:
    return {ENV: str(tmp_path / "cache")}


def _keys(spec: Any, host: str = "h1", groups: tuple[str, ...] = ("gpu",),
          facts: dict[str, Any] | None = None) -> tuple[str | None, str | None]:
    key = pc.spec_key(spec)
    return key, pc.plan_key(key, host, list(groups), FACTS if facts is None else facts)


def _keep(env: dict[str, str], spec: Any, host: str = "h1", groups: tuple[str, ...] = ("gpu",),
          facts: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    facts = FACTS if facts is None else facts
    plan = node_plan(spec, host, list(groups), facts)
    return pc.PlanCache(host, env).keep(*_keys(spec, host, groups, facts), plan), plan


def test_a_kept_plan_comes_back_equal_to_a_fresh_one_in_a_new_process_view(env: dict[str, str]) -> None:
    spec = example()
    assert validate_spec(spec) == []
    host = "gpu-a01"
    status, plan = _keep(env, spec, host, ("gpu",))
    assert status == "kept"
    fresh = pc.PlanCache(host, env)  # a later run: reads the file
    spec_key, plan_key = _keys(spec, host, ("gpu",))
    assert fresh.spec_valid(spec_key)
    assert fresh.plan(plan_key) == plan == node_plan(example(), host, ["gpu"], FACTS)
    assert pc.PlanCache(host, env).keep(spec_key, plan_key, plan) == "current"


@pytest.mark.parametrize("change", ["spec", "host", "groups", "facts", "group order"])
def test_any_input_of_the_plan_that_changes_misses(env: dict[str, str], change: str) -> None:
    spec = base()
    assert _keep(env, spec)[0] == "kept"
    host, groups, facts = "h1", ("gpu",), dict(FACTS)
    if change == "spec":
        spec["profiles"][0]["sysctl"]["vm.swappiness"] = 10
    elif change == "host":
        host = "h2"
    elif change == "groups":
        groups = ("gpu", "rack1")
    elif change == "group order":
        groups = ("rack1", "gpu")
    else:
        facts = {"datapath_facts": {"memory_bytes": 128 << 30, "numa_nodes": 2}}
    spec_key, plan_key = _keys(spec, host, groups, facts)
    kept = pc.PlanCache("h1", env)
    assert kept.plan(plan_key) is None
    assert kept.spec_valid(spec_key) is (change != "spec")


def test_the_key_follows_the_code(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = base()
    assert _keep(env, spec)[0] == "kept"
    assert pc.warm(env)
    spec_key, plan_key = _keys(spec)
    monkeypatch.setattr(pc, "_CODE", ["another version of this collection"])
    assert _keys(spec) != (spec_key, plan_key)
    assert pc.PlanCache("h1", env).plan(_keys(spec)[1]) is None
    assert not pc.warm(env)  # the code marker names the old code: pydantic is imported before the forks


def test_only_plain_json_is_kept_and_a_plan_that_cannot_be_kept_marks_the_cache_cold(env: dict[str, str]) -> None:
    spec = base()
    spec["note"] = datetime.date(2026, 12, 5)  # an unquoted YAML date
    assert pc.spec_key(spec) is None
    assert pc.plan_key(None, "h1", [], {}) is None
    cache = pc.PlanCache("h1", env)
    assert not cache.spec_valid(None) and cache.plan(None) is None
    assert cache.keep(None, None, {}) == "not json"
    assert not pc.warm(env)
    spec_key, plan_key = _keys(base())
    # a plan that would come back different from JSON: a tuple, an integer key
    assert cache.keep(spec_key, plan_key, {"a": (1, 2)}) == "not json"
    assert cache.keep(spec_key, plan_key, {"a": {1: "x"}}) == "not json"
    assert cache.keep(spec_key, plan_key, {"a": float("nan")}) == "not json"
    assert cache.plan(plan_key) is None
    # kept plans of this code do not make the cache warm while a plan of this code could not be kept
    assert _keep(env, base())[0] == "kept"
    assert not pc.warm(env)
    os.unlink(os.path.join(env[ENV], "plans", "cold"))
    assert pc.warm(env)


def test_off_keeps_nothing(tmp_path: Path) -> None:
    env = {ENV: "off"}
    status = _keep(env, base())[0]
    assert status == "off"
    assert not pc.warm(env)
    assert pc.PlanCache("h1", env).plan(_keys(base())[1]) is None


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_a_directory_others_can_write_is_neither_read_nor_written(env: dict[str, str], mode: int) -> None:
    assert _keep(env, base())[0] == "kept"
    plans = os.path.join(env[ENV], "plans")
    os.chmod(plans, mode)
    try:
        spec_key, plan_key = _keys(base())
        cache = pc.PlanCache("h1", env)
        assert cache.plan(plan_key) is None and not cache.spec_valid(spec_key)
        assert not pc.warm(env)
        assert cache.keep(spec_key, plan_key, {"x": 1}) == "unsafe"
    finally:
        os.chmod(plans, 0o700)


def test_a_link_in_place_of_the_directory_is_not_followed(env: dict[str, str], tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.makedirs(env[ENV], mode=0o700)
    os.symlink(elsewhere, os.path.join(env[ENV], "plans"))
    assert _keep(env, base())[0] == "unsafe"
    assert not list(elsewhere.iterdir())


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"host": "h2", "spec": "x"}', b"\xff\xfe"])
def test_a_damaged_or_foreign_file_is_a_miss_and_is_replaced(env: dict[str, str], content: bytes) -> None:
    assert _keep(env, base())[0] == "kept"
    path = pc.PlanCache("h1", env).path
    assert path is not None
    Path(path).write_bytes(content)
    spec_key, plan_key = _keys(base())
    assert pc.PlanCache("h1", env).plan(plan_key) is None
    status, plan = _keep(env, base())
    assert status == "kept"
    assert pc.PlanCache("h1", env).plan(plan_key) == plan


def test_files_are_private_and_one_per_host(env: dict[str, str]) -> None:
    for host in ("h1", "h2", "h3"):
        assert _keep(env, base(), host)[0] == "kept"
    assert _keep(env, base(), "h1", ("gpu", "rack1"))[0] == "kept"  # replaces h1's
    plans = Path(env[ENV], "plans")
    assert oct(plans.stat().st_mode & 0o777) == "0o700"
    files = sorted(p.name for p in plans.iterdir())
    assert len([f for f in files if f.endswith(".json")]) == 3 and "code" in files
    for name in files:
        assert oct((plans / name).stat().st_mode & 0o777) == "0o600"
    entry = json.loads(Path(pc.PlanCache("h1", env).path or "").read_text())
    assert entry["host"] == "h1" and entry["code"] == pc.code_digest()


def test_the_plan_reads_no_gathered_fact_but_memtotal_mb() -> None:
    """datapath_apply keys the plan on ansible_facts.memtotal_mb alone: every other gathered fact
    (uptime, dates, addresses) must leave the plan as it is."""
    spec = base()
    spec["profiles"][0]["hugepages"] = {"pages": [{"size": "2M", "memory_share": 0.25}]}
    gathered = {"memtotal_mb": 257_000, "processor_vcpus": 96, "uptime_seconds": 12345,
                "date_time": {"epoch": "1764921600"}, "default_ipv4": {"address": "198.18.0.2"},
                "datapath_addresses": {"rdma": "198.18.1.2"}, "memfree_mb": 1000,
                "datapath_lab_interfaces": {"rdma": "lab0"}, "numa_nodes": 8}
    full = node_plan(spec, "h1", ["gpu"], {"ansible_facts": gathered})
    assert full == node_plan(spec, "h1", ["gpu"], {"ansible_facts": {"memtotal_mb": 257_000}})
    assert full != node_plan(spec, "h1", ["gpu"], {"ansible_facts": {"memtotal_mb": 128_000}})


def test_the_node_facts_of_a_kept_plan_come_back_only_for_the_same_other_inputs(env: dict[str, str]) -> None:
    """datapath_apply assumes the kept facts (and lets the node check them) only where the spec,
    the host, its groups and its variables are those of the kept plan."""
    spec, gathered = base(), {"gathered": ["memory"], "memory_bytes": 64 << 30, "numa_nodes": 2}
    variables = {"datapath_backend": "files"}
    spec_key = pc.spec_key(spec)
    inputs = pc.plan_key(spec_key, "h1", ["gpu"], variables)
    facts = dict(variables, datapath_facts=gathered)
    key = pc.plan_key(spec_key, "h1", ["gpu"], facts)
    plan = node_plan(spec, "h1", ["gpu"], facts)
    assert pc.PlanCache("h1", env).keep(spec_key, key, plan, inputs, gathered) == "kept"
    kept = pc.PlanCache("h1", env)
    assert kept.facts(inputs) == gathered
    assert kept.plan(pc.plan_key(spec_key, "h1", ["gpu"], dict(variables, datapath_facts=kept.facts(inputs)))) == plan
    for other in (pc.plan_key(spec_key, "h1", ["gpu", "rack1"], variables),
                  pc.plan_key(spec_key, "h1", ["gpu"], {"datapath_backend": "tuned"}),
                  pc.plan_key(pc.spec_key(example()), "h1", ["gpu"], variables), None):
        assert kept.facts(other) is None
    # an entry kept without facts (by a caller that passes none) assumes nothing
    assert pc.PlanCache("h2", env).keep(spec_key, pc.plan_key(spec_key, "h2", ["gpu"], facts),
                                        node_plan(spec, "h2", ["gpu"], facts)) == "kept"
    assert pc.PlanCache("h2", env).facts(pc.plan_key(spec_key, "h2", ["gpu"], variables)) is None
