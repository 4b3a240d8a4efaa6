"""plugin_utils/capabilities.py: one table of names and role variables, one builder of module arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.aiinfra.datapath.plugins.filter.arguments import capability_args as filter_args
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import capabilities as caps
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import node_plan

from .cluster_spec._specs import base

REPO = Path(__file__).resolve().parents[4]
PLAN = node_plan(base(), "h1", ["gpu"], {"datapath_numa_nodes": 2})


def _role(name: str, *parts: str) -> Any:
    return yaml.safe_load((REPO / "roles" / name / Path(*parts)).read_text())


@pytest.mark.parametrize("name", list(caps.CAPABILITIES))
def test_one_name_for_role_module_plan_part_and_result(name: str) -> None:
    cap = caps.CAPABILITIES[name]
    assert name in PLAN, "the plan part carries the capability's name"
    assert (REPO / "plugins" / "modules" / f"{name}.py").is_file()
    task = _role(name, "tasks", "main.yml")[0]
    assert f"aiinfra.datapath.{name}" in task and task["register"] == cap.result_var
    assert cap.tags[0] == name


@pytest.mark.parametrize("name", list(caps.CAPABILITIES))
def test_role_defaults_and_the_filter_call_list_every_knob(name: str) -> None:
    """The role's defaults equal the table's (null: from the plan or derived), and its task hands
    every module option to the filter, so the role and site.yml send the same arguments."""
    cap = caps.CAPABILITIES[name]
    defaults = _role(name, "defaults", "main.yml")
    expected = cap.role_defaults()
    if name in ("link_mtu", "rail_routing"):  # derived in Jinja for the role, in Python for the action (below)
        assert defaults.pop(f"{name}_connection_address").startswith("{{ datapath_connection_address")
        expected.pop(f"{name}_connection_address")
    assert defaults == expected
    task = (REPO / "roles" / name / "tasks" / "main.yml").read_text()
    for knob in cap.knobs:
        if knob.module and knob.variable:
            assert f"'{knob.option}': {cap.var(knob)}" in task, (name, knob.option)


def test_arguments_come_from_the_plan_part_unless_a_variable_is_set() -> None:
    args = caps.capability_args("sysctl_profile", PLAN)
    assert args == {"keys": PLAN["sysctl_profile"]["keys"], "file": PLAN["sysctl_profile"]["file"],
                    "persist": True, "apply": True, "on_override": "warn"}
    mine = {"vm.swappiness": "10"}
    assert caps.capability_args("sysctl_profile", PLAN, {"keys": mine, "apply": False})["keys"] == mine
    assert filter_args(PLAN, "sysctl_profile", {"keys": mine}) == caps.capability_args("sysctl_profile", PLAN,
                                                                                       {"keys": mine})


def test_nothing_planned_skips_the_capability() -> None:
    assert caps.capability_args("nvme_layout", dict(PLAN, nvme_layout=None)) is None
    assert caps.capability_args("link_mtu", dict(PLAN, link_mtu={"interfaces": []})) is None
    assert caps.capability_args("hugepages", dict(PLAN, hugepages={"pages": [], "mounts": [],
                                                                   "thp": {"enabled": None, "defrag": None}})) is None
    assert caps.capability_args("kernel_cmdline", {}) == {"update_bootloader": True,
                                                          "drop_in": "/etc/default/grub.d/90-aiinfra-datapath.cfg",
                                                          "when_no_bootloader": "skip"}  # backend: the module's auto
    assert caps.capability_args("tuned_profile", PLAN) is None  # the files backend has no profile


def test_the_tuned_backend_moves_boot_state_into_one_profile() -> None:
    tuned = node_plan(base(), "h1", ["gpu"], {"datapath_numa_nodes": 2, "datapath_backend": "tuned"})
    assert tuned["backend"] == "tuned"
    assert caps.capability_args("sysctl_profile", tuned)["persist"] is False
    assert caps.capability_args("hugepages", tuned)["thp_persist"] is False
    assert caps.capability_args("kernel_cmdline", tuned)["backend"] == "tuned"
    profile = caps.capability_args("tuned_profile", tuned)
    assert profile == {"name": "aiinfra-datapath", "sysctl": tuned["sysctl_profile"]["keys"],
                       "thp": tuned["hugepages"]["thp"], "kernel_args": tuned["kernel_cmdline"]["args"],
                       "activate": True}
    # the live parts are the same as under the files backend
    files = node_plan(base(), "h1", ["gpu"], {"datapath_numa_nodes": 2})
    assert tuned["sysctl_profile"]["keys"] == files["sysctl_profile"]["keys"]
    assert caps.capability_args("sysctl_profile", files)["persist"] is True


def test_an_unknown_backend_is_a_spec_error_naming_the_host() -> None:
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import SpecValidationError

    with pytest.raises(SpecValidationError) as raised:
        node_plan(base(), "h1", ["gpu"], {"datapath_backend": "tuneD"})
    assert "datapath_backend must be one of files, tuned, got 'tuneD'" in str(raised.value.errors[0].render())


def test_derived_arguments() -> None:
    nfd = caps.capability_args("nfd_labels", PLAN)
    assert nfd["cache_mount"] == PLAN["nvme_layout"]["mount"]["path"]
    assert nfd["interfaces"] == PLAN["link_mtu"]["interfaces"] and nfd["qos"] == PLAN["roce_qos"]["interfaces"]
    assert "restart_kubelet" not in nfd, "role settings are not module arguments"
    for variables, address in (({"inventory_hostname": "n1"}, "n1"),
                               ({"inventory_hostname": "n1", "ansible_host": "198.18.0.1"}, "198.18.0.1"),
                               ({"inventory_hostname": "n1", "ansible_host": "198.18.0.1",
                                 "datapath_connection_address": "198.18.0.9"}, "198.18.0.9")):
        assert caps.capability_args("link_mtu", PLAN, {}, variables)["connection_address"] == address


def test_old_variable_names_still_work_with_a_warning() -> None:
    warnings: list[str] = []
    given = {"nvme_cache_wipe_serials": ["S1"], "nvme_layout_partition": False, "k8s_node_label_prefix": "x.io"}
    values = caps.values_from_variables("nvme_layout", given.get, warnings.append)
    assert values["wipe_serials"] == ["S1"] and values["partition"] is False
    assert warnings == ["the variable nvme_cache_wipe_serials is deprecated; use nvme_layout_wipe_serials "
                        "(role aiinfra.datapath.nvme_layout). It will stop working in 1.0.0."]
    assert caps.values_from_variables("nfd_labels", given.get)["prefix"] == "x.io"


def test_unknown_capability_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown capability 'sysctl'; known: sysctl_profile, hugepages"):
        caps.capability_args("sysctl", PLAN)
