"""KServe's local model cache (``k8s.kserve``, issue 42): the three things KServe's node agent needs of a node
and KServe never checks, each a node validation error with its fix (checks_kserve.py)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import (
    SpecValidationError,
    node_plan,
    validate_spec,
)
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.api import validate_inventory

from ._specs import SHA_A, SHA_B, base, model

PROFILE = "datapath.profiles[0]"
MIB = 1 << 20


def spec_with(kserve: dict[str, Any] | None = None, directories: list[dict[str, Any]] | None = None,
              models: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec = base()
    profile = spec["profiles"][0]
    profile["k8s"]["kserve"] = {"agent_host_path": "/mnt/model-cache/kserve", **(kserve or {})}
    profile["storage"]["directories"] = directories if directories is not None else [
        {"path": "models", "mode": "0755"}, {"path": "kserve", "owner": "1000", "group": "1000", "mode": "0755"}]
    spec["models"] = models or []
    return spec


def node_errors(spec: dict[str, Any]) -> dict[str, Any]:
    assert validate_spec(spec) == []  # each layer is valid on its own: these are node errors
    with pytest.raises(SpecValidationError) as info:
        node_plan(spec, "gpu-1", ["gpu"])
    errors = {e.path: e for e in info.value.errors}
    assert all(e.hint and e.host == "gpu-1" for e in errors.values()), "every error names the host and a fix"
    return errors


def test_a_node_as_kserve_needs_it_plans() -> None:
    plan = node_plan(spec_with(), "gpu-1", ["gpu"])
    assert plan["nvme_layout"]["mount"]["path"] == "/mnt/model-cache"


def test_no_kserve_section_no_kserve_checks() -> None:
    spec = base()  # no k8s.kserve: the directory list need not name one
    node_plan(spec, "gpu-1", ["gpu"])


def test_the_agents_host_path_must_be_the_volumes_local_path() -> None:
    errors = node_errors(spec_with({"agent_host_path": "/mnt/models"}))  # KServe's chart default
    err = errors[f"{PROFILE}.k8s.kserve.agent_host_path"]
    assert "/mnt/models" in err.message and "local.path is /mnt/model-cache/kserve" in err.message
    assert "starts them again" in err.message
    assert "agent_host_path: /mnt/model-cache/kserve" in err.hint and "kserve.localmodel.agent.hostPath" in err.hint


def test_the_default_host_path_is_kserves_chart_default() -> None:
    spec = spec_with()
    del spec["profiles"][0]["k8s"]["kserve"]["agent_host_path"]
    err = node_errors(spec)[f"{PROFILE}.k8s.kserve.agent_host_path"]
    assert "watches hostPath /mnt/models" in err.message
    spec["profiles"][0]["storage"]["mount"]["path"] = "/srv/nvme"  # the fix the hint gives, for another mount
    spec["profiles"][0]["k8s"]["kserve"]["agent_host_path"] = "/srv/nvme/kserve"
    node_plan(spec, "gpu-1", ["gpu"])


def test_the_directory_must_exist_and_belong_to_the_agent() -> None:
    errors = node_errors(spec_with(directories=[{"path": "models"}]))
    err = errors[f"{PROFILE}.storage.directories"]
    assert "/mnt/model-cache/kserve is not among storage.directories" in err.message
    assert "{path: kserve, owner: '1000', group: '1000', mode: '0755'}" in err.hint


@pytest.mark.parametrize(("owner", "group"), [("root", "root"), ("1000", "0"), ("kserve", "kserve"), ("0", "1000")])
def test_a_directory_not_owned_by_1000_1000_is_refused(owner: str, group: str) -> None:
    errors = node_errors(spec_with(directories=[{"path": "kserve", "owner": owner, "group": group}]))
    err = errors[f"{PROFILE}.storage.directories[0]"]
    assert f"owned by {owner}:{group}" in err.message and "runs as 1000:1000" in err.message
    assert "owner: '1000'" in err.hint and "group: '1000'" in err.hint


def test_other_agent_ids_are_followed() -> None:
    spec = spec_with({"agent_uid": 2000, "agent_gid": 3000},
                     directories=[{"path": "kserve", "owner": "2000", "group": "3000"}])
    node_plan(spec, "gpu-1", ["gpu"])
    spec["profiles"][0]["storage"]["directories"][0]["owner"] = "1000"
    assert "runs as 2000:3000" in node_errors(spec)[f"{PROFILE}.storage.directories[0]"].message


def test_kserves_volume_never_overlaps_the_model_cache_directory() -> None:
    spec = spec_with({"subdir": "models", "agent_host_path": "/mnt/model-cache/models"},
                     directories=[{"path": "models", "owner": "1000", "group": "1000"}])
    err = node_errors(spec)[f"{PROFILE}.k8s.kserve.subdir"]
    assert "overlaps the model_cache directory /mnt/model-cache/models" in err.message


def sized(name: str, mib: int) -> dict[str, Any]:
    return model(name=name, files=[{"path": "config.json", "sha256": SHA_A, "size": 512},
                                   {"path": "model.safetensors", "sha256": SHA_B, "size": mib * MIB - 512}])


def test_the_models_a_node_holds_must_fit_the_storage_limit() -> None:
    models = [sized("llama", 600), sized("mistral", 500)]
    node_plan(spec_with({"storage_limit": "1100MiB"}, models=models), "gpu-1", ["gpu"])  # exactly fits
    err = node_errors(spec_with({"storage_limit": "1GiB"}, models=models))[f"{PROFILE}.k8s.kserve.storage_limit"]
    assert f"take {1100 * MIB} bytes, more than k8s.kserve.storage_limit {1 << 30}" in err.message
    assert f"llama@v1 {600 * MIB}, mistral@v1 {500 * MIB}" in err.message
    assert f"at least {1100 * MIB}" in err.hint


def test_sizes_count_in_whole_mib_as_kserve_compares_them() -> None:
    one = model(name="a", files=[{"path": "w", "sha256": SHA_A, "size": MIB + 1}])
    err = node_errors(spec_with({"storage_limit": MIB + 1}, models=[one]))[f"{PROFILE}.k8s.kserve.storage_limit"]
    assert f"take {2 * MIB} bytes" in err.message


def test_only_models_the_node_holds_count() -> None:
    models = [sized("llama", 600), {**sized("other", 900), "groups": ["elsewhere"]}]
    node_plan(spec_with({"storage_limit": "700MiB"}, models=models), "gpu-1", ["gpu"])


def test_kserve_without_storage_is_an_error() -> None:
    spec = spec_with()
    spec["hosts"] = {"gpu-1": {"k8s": {"kserve": {}}}}
    spec["profiles"][0].pop("storage")
    spec["profiles"][0]["k8s"].pop("local_volume_class")
    with pytest.raises(SpecValidationError) as info:
        node_plan(spec, "gpu-1", ["gpu"])
    assert any(e.path.endswith("k8s.kserve") and "without a storage section" in e.message
               for e in info.value.errors)


def test_validate_inventory_reports_every_host() -> None:
    errors = validate_inventory(spec_with({"agent_host_path": "/mnt/models"}),
                                {"g1": (["gpu"], {}), "g2": (["gpu"], {})})
    assert sorted((e.host, e.path) for e in errors) == [
        ("g1", f"{PROFILE}.k8s.kserve.agent_host_path"), ("g2", f"{PROFILE}.k8s.kserve.agent_host_path")]
