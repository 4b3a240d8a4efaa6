"""One run reports the structural errors and every cross-check that does not depend on a broken field.

Before, one broken field hid every cross-check above it (pydantic runs a model's checks only
when the whole model validated), so a user fixed a file in rounds. partial.py prunes the broken
parts and runs the remaining checks; these tests hold it to "all of them, and none that depends
on a broken field".
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import validate_spec
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec._pydantic import ValidationError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.errors import join_path, translate
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.models import DatapathSpec, fields_at
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.registry import all_checks, structure_only
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._specs import base, example
from .test_checks import CASES as CHECK_CASES
from .test_properties import valid_specs

CASES: Counter[str] = Counter()
FAST = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def _paths(errors: list[Any]) -> list[str]:
    return [e.path for e in errors]


def test_structural_error_in_a_profile_and_cross_check_errors_in_fabrics_in_one_run() -> None:
    spec = base()
    spec["profiles"][0]["storage"]["mount"]["path"] = "mnt/model-cache"          # structural, in a profile
    spec["fabrics"].append({"name": "rail1", "purpose": "rdma", "kind": "roce",    # overlaps rail0 (spec-wide)
                            "subnets": ["10.100.8.0/24"]})
    spec["fabrics"][1]["roce"].update(pfc_priorities=[], ecn=False)                # a RoCE check
    errors = validate_spec(spec)
    assert _paths(errors) == ["datapath.fabrics[1].roce.pfc_priorities", "datapath.fabrics[2].subnets[0]",
                              "datapath.profiles[0].storage.mount.path"]
    assert "overlaps 10.100.0.0/20 of fabric rail0" in errors[1].message


def test_a_failed_cross_check_no_longer_hides_the_spec_wide_ones() -> None:
    spec = base()
    spec["fabrics"][1]["roce"].update(tos=104)                        # roce-tos-consistent
    spec["profiles"].append({"name": "gpu"})                          # names-unique
    spec["profiles"][0]["interfaces"][0]["fabric"] = "nope"           # interface-fabric
    assert _paths(validate_spec(spec)) == ["datapath.fabrics[1].roce.tos", "datapath.profiles[0].interfaces[0].fabric",
                                           "datapath.profiles[1].name"]


@pytest.mark.parametrize(("name", "mutate", "forbidden"), [
    # the fabric's MTU is broken: the interface's MTU cannot be compared with it
    ("fabric mtu", lambda s: s["fabrics"][1].update(mtu=99999) or s["profiles"][0]["interfaces"][1].update(mtu=4200),
     "differs from fabric"),
    # the fabric's name is broken: an interface naming it is not "not defined"
    ("fabric name", lambda s: s["fabrics"][1].update(name="Rail 0"), "is not defined"),
    # a typo of storage: local_volume_class is not "without a storage section"
    ("storage typo", lambda s: s["profiles"][0].update(storag=s["profiles"][0].pop("storage")), "without a storage"),
    # a broken select: the storage is not "give either devices or select"
    ("broken select", lambda s: s["profiles"][0]["storage"].update(select={"count": "two"}, devices=None),
     "give either devices or select"),
    # a broken pool: the 1G mount is not "without a pool"
    ("broken pool", lambda s: s["profiles"][0]["hugepages"]["pages"][0].update(size="3G"), "but no 1G pool"),
    # a broken RoCE priority: no RoCE relation is judged on it
    ("roce priority", lambda s: s["fabrics"][1]["roce"].update(priority=9, pfc_priorities=[9]), "priority"),
    # a broken version: nothing else is reported about it
    ("version", lambda s: s.update(version="1"), "version"),
])
def test_no_cross_check_error_about_a_broken_field(name: str, mutate: Callable[[Any], Any], forbidden: str) -> None:
    spec = base()
    mutate(spec)
    errors = validate_spec(spec)
    structural = _structural(spec)
    assert structural and set(structural) <= set(errors), name
    assert not [e for e in errors if e not in structural and forbidden in e.message], [e.render() for e in errors]


def _structural(spec: Any) -> list[Any]:
    """The structural errors alone (the models without their cross-checks)."""
    with structure_only():
        try:
            DatapathSpec.model_validate(spec)
        except ValidationError as exc:
            return translate(exc, fields_at)
    return []


@pytest.mark.parametrize("case", CHECK_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CHECK_CASES)])
@pytest.mark.parametrize("where", ["model_cache", "builtin_profile", "hosts"])
def test_every_cross_check_still_runs_beside_a_structural_error(case: Any, where: str) -> None:
    """Each cross-check's bad case (test_checks.py) is still reported when another part is broken."""
    check, mutate, path, message = case
    spec = base()
    mutate(spec)
    if where == "model_cache":
        spec["model_cache"] = {"colour": "blue"}
    elif where == "builtin_profile":
        spec["builtin_profile"] = "ai-gpu"
    else:
        spec.setdefault("hosts", {})["bad/host"] = {"sysctl": {"vm.x": 1}}
    errors = validate_spec(spec)
    assert any(e.path == path and message in e.message for e in errors), [e.render() for e in errors]
    assert any(e.path.startswith(f"datapath.{where}") for e in errors)
    CASES["check beside a structural error"] += 1


def test_cases_cover_every_check() -> None:
    assert {c.name for c in all_checks()} <= {c[0] for c in CHECK_CASES}


# --------------------------------------------------------------------------- soundness, by property
BREAKS = ["wrong type", "bad key", "drop required"]


def _locations(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path] if path else []
    if isinstance(data, dict):
        for key, value in data.items():
            out.extend(_locations(value, (*path, key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out.extend(_locations(value, (*path, index)))
    return out


def _under(error_path: str, where: str) -> bool:
    return error_path == where or error_path.startswith((where + ".", where + "["))


@st.composite
def broken_once(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid spec with one structural break; the rendered path of the break."""
    # a JSON copy: the example shares one roce mapping between two fabrics (a YAML alias)
    spec = json.loads(json.dumps(draw(st.one_of(valid_specs(), st.sampled_from([base(), example()])))))
    where = draw(st.sampled_from(_locations(spec)))
    parent = spec
    for part in where[:-1]:
        parent = parent[part]
    kind = draw(st.sampled_from(BREAKS))
    if kind == "wrong type":
        parent[where[-1]] = [["x"]]  # no field of the spec is a list of lists
        return spec, join_path(where)
    if kind == "bad key" and isinstance(parent[where[-1]], dict):
        parent[where[-1]]["Bad Key!"] = 1
        return spec, join_path((*where, "Bad Key!"))
    if isinstance(parent, dict):
        del parent[where[-1]]
        return spec, join_path(where)
    parent[where[-1]] = {"Bad Key!": 1} if not isinstance(parent[where[-1]], dict) else [["x"]]
    return spec, join_path(where)


@FAST
@given(broken_once())
def test_a_valid_spec_with_one_break_reports_errors_only_at_the_break(drawn: tuple[dict[str, Any], str]) -> None:
    """Pruning never invents an error: every error of a valid spec broken in one place is at that place
    (a removed required key is reported at its own path)."""
    spec, where = drawn
    if not _structural(spec):  # a removed optional key: not a structural break
        CASES["one break (not structural: skipped)"] += 1
        return
    errors = validate_spec(spec)
    CASES["one break"] += 1
    elsewhere = [e.render() for e in errors if not _under(e.path, where)]
    assert not elsewhere, f"broken at {where}: {elsewhere}"


def test_zz_report_case_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\npartial validation cases: {dict(CASES)}")
