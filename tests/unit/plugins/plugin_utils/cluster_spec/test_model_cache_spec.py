"""Spec and plan of the model cache (`model_cache`, `models`): fields, targets, the plan's `models` part."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import (
    Planner,
    SpecError,
    SpecValidationError,
    dumps_plan,
    node_plan,
    parse_spec,
    validate_spec,
)
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.api import validate_inventory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._specs import SHA_A, SHA_B, base, example, model

FAST = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
ITEM_KEYS = {"name", "version", "source", "files", "manifest", "manifest_sha256"}


def with_models(*models: dict[str, Any], **cache: Any) -> dict[str, Any]:
    spec = base()
    spec["models"] = list(models)
    if cache:
        spec["model_cache"] = cache
    return spec


def errors_at(spec: dict[str, Any], path: str) -> list[SpecError]:
    errors = validate_spec(spec)
    found = [e for e in errors if e.path == path]
    assert found, "\n".join(e.render() for e in errors) or "no errors"
    assert all(e.hint for e in found), "every error carries a fix"
    return found


# --------------------------------------------------------------------------- fields
GOOD_SOURCES = ["/srv/models/llama", "file:///srv/models/llama", "http://10.0.0.5:8080/m", "https://models.example.com",
                "https://models.example.com/a/b_c-1.2", "s3://ml-artifacts/llama/v1", "s3://ml.artifacts",
                "http://[fd00::5]:8000/m", "/", "https://h/p%20q~r"]
BAD_SOURCES = [
    ("models/llama", "neither an absolute path nor a URL"),
    ("ftp://host/m", "scheme 'ftp' is not supported"),
    ("file://srv/m", "a file URL names an absolute path"),
    ("https://user:secret@host/m", "carries no user or password"),
    ("https://host/m?token=x", "no query or fragment"),
    ("https://host/m#frag", "no query or fragment"),
    ("https://host/m/", "trailing '/'"),
    ("https://host/a/../b", "not normalised"),
    ("https://host//a", "not normalised"),
    ("/srv/./m", "not normalised"),
    ("https://host:0/m", "is not a host[:port]"),
    ("https://host:70000/m", "is not a host[:port]"),
    ("https://ho st/m", "without spaces"),
    ("https:///m", "is not a host[:port]"),
    ("s3://Bad_Bucket/x", "is not an S3 bucket name"),
    ("https://host/m\n", "without spaces"),
    ("https://h\u00e9/m", "printable ASCII"),
    ("/" + "a" * 2048, "at most 2048"),
]


@pytest.mark.parametrize("source", GOOD_SOURCES)
def test_good_sources(source: str) -> None:
    assert validate_spec(with_models(model(source=source))) == []


@pytest.mark.parametrize(("source", "fragment"), BAD_SOURCES)
def test_bad_sources_name_the_problem(source: str, fragment: str) -> None:
    (err,) = errors_at(with_models(model(source=source)), "datapath.models[0].source")
    assert fragment in err.render()


@pytest.mark.parametrize("path", ["config.json", "weights/model-00001-of-00004.safetensors", "a/b/c", ".hidden",
                                  "tokenizer@v2+x=1,y.json", "a..b"])
def test_good_file_paths(path: str) -> None:
    assert validate_spec(with_models(model(files=[{"path": path, "sha256": SHA_A}]))) == []


@pytest.mark.parametrize("path", ["/etc/passwd", "../up", "a/../../b", "a/./b", "./a", "a//b", "a/", ".", "..", "",
                                  "a b", "a\nb", "a;rm", "x" * 1025, "caf\u00e9"])
def test_unsafe_file_paths_are_refused(path: str) -> None:
    (err,) = errors_at(with_models(model(files=[{"path": path, "sha256": SHA_A}])), "datapath.models[0].files[0].path")
    assert "not a safe relative file path" in err.message and "no leading '/'" in err.hint


def test_manifest_path_is_a_safe_relative_path() -> None:
    errors_at(with_models(model(files=[], manifest="../SHA256SUMS")), "datapath.models[0].manifest")


@pytest.mark.parametrize("sha", [SHA_A.upper(), SHA_A[:63], SHA_A + "a", "g" * 64, "", 12])
def test_sha256_is_64_lowercase_hex(sha: Any) -> None:
    errors_at(with_models(model(files=[{"path": "a", "sha256": sha}])), "datapath.models[0].files[0].sha256")
    errors_at(with_models(model(files=[], manifest="SUMS", manifest_sha256=sha)), "datapath.models[0].manifest_sha256")


@pytest.mark.parametrize(("field", "value"), [("name", "-x"), ("name", "a/b"), ("name", "x" * 129), ("name", ""),
                                              ("version", ".."), ("version", "v 1"), ("version", "v1/2")])
def test_names_and_versions_are_safe_directory_names(field: str, value: str) -> None:
    errors_at(with_models(model(**{field: value})), f"datapath.models[0].{field}")


def test_a_yaml_number_or_date_as_version_asks_for_quotes() -> None:
    (err,) = errors_at(with_models(model(version=2)), "datapath.models[0].version")
    assert err.hint == "quote it"


def test_file_size_is_a_non_negative_integer() -> None:
    assert validate_spec(with_models(model(files=[{"path": "a", "sha256": SHA_A, "size": 0}]))) == []
    errors_at(with_models(model(files=[{"path": "a", "sha256": SHA_A, "size": -1}])),
              "datapath.models[0].files[0].size")
    errors_at(with_models(model(files=[{"path": "a", "sha256": SHA_A, "size": "1GiB"}])),
              "datapath.models[0].files[0].size")


def test_unknown_model_key_suggests_the_right_one() -> None:
    (err,) = errors_at(with_models(model(group=["gpu"])), "datapath.models[0].group")
    assert "did you mean 'groups'" in err.hint


def test_model_cache_fields() -> None:
    assert validate_spec(with_models(model(), directory="cache/models", reserve="200GiB", bandwidth_limit="1GiB",
                                     concurrency=1)) == []
    spec = with_models(model(), directory="../models", reserve=-1, bandwidth_limit="fast", concurrency=0, extra=1)
    paths = {e.path for e in validate_spec(spec)}
    assert paths == {f"datapath.model_cache.{k}" for k in ("directory", "reserve", "bandwidth_limit", "concurrency",
                                                           "extra")}


def test_every_model_error_at_once() -> None:
    spec = with_models(model(name="-bad", files=[{"path": "/abs", "sha256": "X"}]), model(source="ftp://x/y"))
    assert {e.path for e in validate_spec(spec)} == {
        "datapath.models[0].name", "datapath.models[0].files[0].path", "datapath.models[0].files[0].sha256",
        "datapath.models[1].source"}


# --------------------------------------------------------------------------- plan
def test_models_part_has_exactly_the_documented_shape() -> None:
    spec = with_models(model(), model(name="emb", files=[], manifest="SHA256SUMS", manifest_sha256=SHA_B),
                       reserve="100GiB", bandwidth_limit="500MiB", concurrency=16)
    part = node_plan(spec, "h1", ["gpu"])["model_cache"]
    assert set(part) == {"cache_dir", "require_mount", "reserve_bytes", "bandwidth_limit", "concurrency", "models"}
    assert part["cache_dir"] == "/mnt/model-cache/models" and part["require_mount"] == "/mnt/model-cache"
    assert (part["reserve_bytes"], part["bandwidth_limit"], part["concurrency"]) == (100 * 2**30, 500 * 2**20, 16)
    first, second = part["models"]
    assert set(first) == set(second) == ITEM_KEYS
    assert first["files"] == [{"path": "config.json", "sha256": SHA_A, "size": 512},
                              {"path": "weights/model-00001.safetensors", "sha256": SHA_B, "size": None}]
    assert (first["manifest"], first["manifest_sha256"]) == (None, None)
    assert second == {"name": "emb", "version": "v1", "source": "https://models.example.com/llama/v1", "files": [],
                      "manifest": "SHA256SUMS", "manifest_sha256": SHA_B}


def test_defaults_no_bandwidth_cap_no_concurrency_limit() -> None:
    part = node_plan(with_models(model()), "h1", ["gpu"])["model_cache"]
    # reserve None: the module's default reserve (1 % of the cache filesystem, never 0) applies
    assert (part["reserve_bytes"], part["bandwidth_limit"], part["concurrency"]) == (None, 0, None)


def test_directory_is_joined_to_the_mount_of_the_host() -> None:
    spec = with_models(model(), directory="cache/models")
    spec["hosts"] = {"h2": {"storage": {"devices": ["/dev/nvme0n1"], "mount": {"path": "/srv/nvme"}}}}
    assert node_plan(spec, "h1", ["gpu"])["model_cache"]["cache_dir"] == "/mnt/model-cache/cache/models"
    part = node_plan(spec, "h2", ["gpu"])["model_cache"]
    assert (part["cache_dir"], part["require_mount"]) == ("/srv/nvme/cache/models", "/srv/nvme")


def test_no_models_means_null() -> None:
    assert node_plan(base(), "h1", ["gpu"])["model_cache"] is None
    assert node_plan(with_models(model(groups=["other"])), "h1", ["gpu"])["model_cache"] is None


def test_targets_groups_hosts_and_everyone_with_storage() -> None:
    spec = with_models(model(name="by-group", groups=["rack_b"]), model(name="by-host", groups=[], hosts=["h2"]),
                       model(name="everyone", groups=[]), model(name="both", groups=["rack_a"], hosts=["h3"]))

    def names(host: str, groups: list[str]) -> list[str] | None:
        part = node_plan(spec, host, groups)["model_cache"]
        return None if part is None else [i["name"] for i in part["models"]]

    assert names("h1", ["gpu", "rack_b"]) == ["by-group", "everyone"]
    assert names("h2", ["gpu"]) == ["by-host", "everyone"]
    assert names("h3", ["gpu"]) == ["everyone", "both"]
    assert names("h4", ["gpu", "rack_a"]) == ["everyone", "both"]
    assert names("h5", ["gpu"]) == ["everyone"]
    assert names("nostorage", []) is None  # "everyone" means every host with storage: no error


def test_a_host_without_storage_that_must_hold_a_model_is_a_plan_error() -> None:
    spec = with_models(model(groups=["rack_b"]), model(name="emb", groups=[], hosts=["cpu-1"]))
    with pytest.raises(SpecValidationError) as info:
        node_plan(spec, "cpu-1", ["rack_b"])
    by_path = {e.path: e for e in info.value.errors}
    assert set(by_path) == {"datapath.models[0].groups[0]", "datapath.models[1].hosts[0]"}
    group_err, host_err = by_path["datapath.models[0].groups[0]"], by_path["datapath.models[1].hosts[0]"]
    assert "llama@v1" in group_err.message and "group rack_b" in group_err.message
    assert "emb@v1" in host_err.message and "listed in hosts" in host_err.message
    assert all(e.host == "cpu-1" and "storage" in e.hint for e in info.value.errors)
    assert group_err.render().endswith("(host cpu-1)")
    node_plan(spec, "gpu-1", ["gpu", "rack_b"])  # the same model on a host with storage is fine


def test_validate_inventory_reports_hosts_without_storage() -> None:
    spec = with_models(model(groups=["cpu"]))
    errors = validate_inventory(spec, {"g1": (["gpu"], {}), "c1": (["cpu"], {}), "c2": (["cpu"], {})})
    assert [(e.host, e.path) for e in errors] == [
        ("c1", "datapath.models[0].groups[0]"), ("c2", "datapath.models[0].groups[0]")]


def test_planner_keys_its_cache_by_the_models_a_host_holds() -> None:
    spec = with_models(model(groups=[], hosts=["h1"]))
    planner = Planner(parse_spec(spec))
    one, two, three = planner.plan("h1", ["gpu"]), planner.plan("h2", ["gpu"]), planner.plan("h3", ["gpu"])
    assert one["model_cache"] is not None and two["model_cache"] is None and three["model_cache"] is None
    assert planner.templates == 2 and two["sysctl_profile"] is three["sysctl_profile"]


def test_models_plan_is_deterministic() -> None:
    spec = with_models(model(), model(name="emb", groups=[]))
    text = dumps_plan(node_plan(spec, "h1", ["gpu"]))
    reordered = json.loads(json.dumps(spec))
    reordered["models"] = [dict(reversed(list(m.items()))) for m in reordered["models"]]
    reordered = dict(reversed(list(reordered.items())))
    assert dumps_plan(node_plan(reordered, "h1", ["gpu"])) == text
    assert dumps_plan(Planner(parse_spec(spec)).plan("h1", ("gpu",))) == text


def test_example_inventory_models() -> None:
    planner = Planner(parse_spec(example()))
    p1 = planner.plan("gpu-node-01", ["gpu_nodes", "rack_a"])["model_cache"]
    p16 = planner.plan("gpu-node-16", ["gpu_nodes", "rack_b"])["model_cache"]
    assert [i["name"] for i in p1["models"]] == ["llama-3.1-8b-instruct"]
    assert [i["name"] for i in p16["models"]] == ["llama-3.1-8b-instruct", "reranker"]
    assert p16["cache_dir"] == "/mnt/model-cache/models" and p16["concurrency"] == 32


# --------------------------------------------------------------------------- properties
names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,10}", fullmatch=True)
segments = st.from_regex(r"[A-Za-z0-9_@+=,-][A-Za-z0-9._@+=,-]{0,8}", fullmatch=True).filter(
    lambda s: s not in (".", ".."))
rel_paths = st.lists(segments, min_size=1, max_size=3).map("/".join)
shas = st.text("0123456789abcdef", min_size=64, max_size=64)
sources = st.one_of(rel_paths.map(lambda p: "/srv/" + p), rel_paths.map(lambda p: "file:///data/" + p),
                    st.tuples(st.sampled_from(["http", "https"]), st.integers(1, 65535), rel_paths).map(
                        lambda t: f"{t[0]}://models.example.com:{t[1]}/{t[2]}"),
                    rel_paths.map(lambda p: "s3://ml-artifacts/" + p))


@st.composite
def model_specs(draw: st.DrawFn) -> dict[str, Any]:
    models = []
    seen: set[tuple[str, str]] = set()
    for _index in range(draw(st.integers(0, 4))):
        name, version = draw(names), draw(names)
        if (name, version) in seen:
            continue
        seen.add((name, version))
        entry: dict[str, Any] = {"name": name, "version": version, "source": draw(sources),
                                 "groups": draw(st.lists(st.sampled_from(["gpu", "rack_a", "rack_b"]), unique=True,
                                                         max_size=2)),
                                 "hosts": draw(st.lists(st.sampled_from(["h1", "h2"]), unique=True, max_size=1))}
        if draw(st.booleans()):
            paths = draw(st.lists(rel_paths, min_size=1, max_size=4, unique=True))
            # a file may not be the directory of another, nor another's <path>.part
            paths = [p for p in paths if not any(q.startswith(p + "/") or q == p + ".part"
                                                 or p.startswith(q + "/") for q in paths if q != p)]
            entry["files"] = [{"path": p, "sha256": draw(shas), "size": draw(st.none() | st.integers(0, 2**50))}
                              for p in paths] or [{"path": "only", "sha256": SHA_A}]
        else:
            entry["manifest"] = draw(rel_paths)
            if draw(st.booleans()):
                entry["manifest_sha256"] = draw(shas)
        models.append(entry)
    spec = base()
    spec["models"] = models
    spec["model_cache"] = {"concurrency": draw(st.none() | st.integers(1, 512)),
                           "bandwidth_limit": draw(st.none() | st.integers(0, 2**40))}
    return spec


@FAST
@given(model_specs(), st.lists(st.sampled_from(["gpu", "rack_a", "rack_b"]), unique=True, max_size=3),
       st.sampled_from(["h1", "h2", "h3"]))
def test_valid_model_specs_plan_deterministically(spec: dict[str, Any], groups: list[str], host: str) -> None:
    assert validate_spec(spec) == []
    try:
        first = dumps_plan(node_plan(spec, host, groups))
    except SpecValidationError as exc:  # named by a model but outside group gpu: no storage
        assert "gpu" not in groups
        assert all(e.host == host and e.path.startswith("datapath.models[") for e in exc.errors)
        return
    assert first == dumps_plan(node_plan(copy.deepcopy(spec), host, list(groups)))
    assert first == dumps_plan(node_plan(parse_spec(json.loads(json.dumps(spec))), host, groups))
    part = json.loads(first)["model_cache"]
    member = set(groups)
    expected = [m["name"] + "@" + m["version"] for m in spec["models"]
                if "gpu" in member and (host in m["hosts"] or member & set(m["groups"])
                                        or not (m["groups"] or m["hosts"]))]
    got = [] if part is None else [i["name"] + "@" + i["version"] for i in part["models"]]
    assert got == expected
    if part is not None:
        assert part["bandwidth_limit"] == (spec["model_cache"]["bandwidth_limit"] or 0)
        assert all(set(i) == ITEM_KEYS for i in part["models"])


@FAST
@given(st.text(max_size=40) | st.integers() | st.none() | st.lists(st.text(max_size=5), max_size=2),
       st.sampled_from(["source", "name", "version", "manifest", "manifest_sha256", "groups", "hosts", "files"]))
def test_random_model_values_give_errors_never_exceptions(value: Any, field: str) -> None:
    spec = with_models(model(**{field: value}))
    for err in validate_spec(spec):
        assert isinstance(err, SpecError) and err.path.startswith("datapath.models[0]")
        assert err.hint


@FAST
@given(st.text(alphabet=st.sampled_from("ab/.:@?#%[]- \\s3fhtpx"), max_size=30))
def test_accepted_sources_are_well_formed(source: str) -> None:
    if validate_spec(with_models(model(source=source))):
        return
    assert source.startswith(("/", "file:///", "http://", "https://", "s3://"))
    assert not any(c in source for c in " ?#\\") and "/../" not in source + "/" and not source.endswith("/.")
