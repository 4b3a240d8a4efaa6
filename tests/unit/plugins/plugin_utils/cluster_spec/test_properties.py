"""Property-based tests: no input makes validation or planning fail with anything but SpecError(s).

Case counts are printed at the end of the module (``pytest -s`` or the terminal summary).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import (
    SpecError,
    SpecValidationError,
    dumps_plan,
    node_plan,
    parse_spec,
    validate_spec,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._specs import base, example

CASES: Counter[str] = Counter()
FAST = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**80), max_value=2**80)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
           | st.sampled_from(["2M", "1G", "roce", "rdma", "/mnt/x", "10GiB", "eno1", "mgmt", "v2", "dscp"]))
json_like = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=12) | st.integers(), inner, max_size=4), max_leaves=20)


def _check_errors(errors: list[SpecError]) -> None:
    assert isinstance(errors, list)
    for err in errors:
        assert isinstance(err, SpecError)
        assert err.path.startswith("datapath")
        assert isinstance(err.render(), str)


@FAST
@given(json_like)
def test_random_documents_never_raise(data: Any) -> None:
    CASES["random documents"] += 1
    _check_errors(validate_spec(data))
    _check_errors(validate_spec({"version": 1, "fabrics": data}))
    _check_errors(validate_spec({"version": 1, "profiles": [{"name": "p", "sysctl": data}]}))


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            out.extend(_paths(value, (*prefix, index)))
    return out


SOURCES = [base(), example()]
SOURCE_PATHS = [_paths(s)[1:] for s in SOURCES]


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    which = draw(st.integers(0, len(SOURCES) - 1))
    spec = copy.deepcopy(SOURCES[which])
    for _step in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(SOURCE_PATHS[which]))
        parent: Any = spec
        try:
            for part in path[:-1]:
                parent = parent[part]
            action = draw(st.sampled_from(["replace", "delete", "add"]))
            if action == "replace":
                parent[path[-1]] = draw(json_like)
            elif action == "delete":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=8))] = draw(json_like)
            elif isinstance(parent, list):
                parent.append(draw(json_like))
        except (KeyError, IndexError, TypeError):
            continue
    return spec


@FAST
@given(mutated(), st.lists(st.sampled_from(["gpu", "gpu_nodes", "rack_a", "rack_b", "x"]), max_size=3),
       st.fixed_dictionaries({}, optional={"datapath_numa_nodes": st.integers(-2, 80) | st.text(max_size=3),
                                           "ansible_memtotal_mb": st.integers(-5, 2**50) | st.none()}))
def test_mutated_specs_give_errors_or_plans(spec: dict[str, Any], groups: list[str], facts: dict[str, Any]) -> None:
    CASES["mutated specs"] += 1
    errors = validate_spec(spec)
    _check_errors(errors)
    if errors:
        CASES["mutated specs (invalid)"] += 1
        with pytest.raises(SpecValidationError):
            node_plan(spec, "h1", groups, facts)
        return
    try:
        plan = node_plan(spec, "gpu-node-16", groups, facts)
    except SpecValidationError as exc:  # node checks (memory, NUMA) may still fail, with a host
        _check_errors(exc.errors)
        assert all(e.host == "gpu-node-16" for e in exc.errors)
        return
    json.dumps(plan)


priorities = st.integers(0, 7)


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    fabrics: list[dict[str, Any]] = [{"name": "mgmt", "purpose": "management", "mtu": draw(st.integers(576, 9216)),
                                      "subnets": ["192.0.2.0/24"]}]
    for rail in range(draw(st.integers(0, 3))):
        prio = draw(priorities)
        cnp = draw(st.sampled_from([p for p in range(8) if p != prio]))
        dscp = draw(st.integers(0, 63))
        cnp_dscp = draw(st.sampled_from([d for d in range(64) if d != dscp]))
        ecn = draw(st.booleans())
        others = draw(st.lists(st.sampled_from([p for p in range(8) if p != cnp]), max_size=3))
        pfc = sorted({prio} | set(others))
        if ecn and draw(st.booleans()):
            pfc = [p for p in pfc if p != prio]
        fabrics.append({"name": f"rail{rail}", "purpose": "rdma", "kind": "roce", "mtu": draw(st.integers(352, 9216)),
                        "subnets": [f"10.{rail}.0.0/16"],
                        "roce": {"priority": prio, "dscp": dscp, "ecn": ecn, "pfc_priorities": pfc,
                                 "cnp": {"dscp": cnp_dscp, "priority": cnp},
                                 "ets": {"prio_tc": [0] * 8, "tsa": ["ets"] * 8, "bw": [100, 0, 0, 0, 0, 0, 0, 0]}}})
    interfaces = [{"name": f"eth{i}", "fabric": f["name"]} for i, f in enumerate(fabrics)]
    pages = []
    if draw(st.booleans()):
        pages.append({"size": "2M", "count": draw(st.integers(0, 4096))})
    if draw(st.booleans()):
        pages.append({"size": "1G", "count": draw(st.integers(0, 64)),
                      "numa_split": draw(st.sampled_from(["kernel", "even"]))})
    profile: dict[str, Any] = {"name": "gpu", "interfaces": interfaces, "hugepages": {"pages": pages},
                               "kernel_args": draw(st.lists(st.sampled_from(["iommu=pt", "quiet", "pci=realloc"]),
                                                            unique=True, max_size=2)),
                               "sysctl": draw(st.dictionaries(st.sampled_from(["vm.a", "net.core.b", "kernel.c"]),
                                                              st.integers(0, 2**31), max_size=3))}
    return {"version": 1, "fabrics": fabrics, "profiles": [profile]}


@FAST
@given(valid_specs(), st.integers(1, 8))
def test_valid_specs_plan_deterministically(spec: dict[str, Any], numa: int) -> None:
    CASES["valid specs planned"] += 1
    assert validate_spec(spec) == []
    facts = {"datapath_numa_nodes": numa}
    first = dumps_plan(node_plan(spec, "h", ["gpu"], facts))
    again = dumps_plan(node_plan(copy.deepcopy(spec), "h", ["gpu"], dict(facts)))
    fresh = dumps_plan(node_plan(parse_spec(json.loads(json.dumps(spec))), "h", ["gpu"], facts))
    assert first == again == fresh
    plan = json.loads(first)
    assert plan["reboot_required"] == bool(plan["kernel_cmdline"]["args"])
    for q in plan["roce_qos"]["interfaces"]:
        assert q["roce_tos"] >> 2 == int(next(k for k, v in q["dscp2prio"].items() if v != q["cnp"]["priority"]))
    total = sum(plan["hugepages"]["bytes_per_node"].values())
    assert total == sum(p["count"] * (2**21 if p["size"] == "2M" else 2**30) for p in plan["hugepages"]["pages"])


def test_zz_report_case_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\nhypothesis cases: {dict(CASES)} total={sum(v for k, v in CASES.items() if '(' not in k)}")
