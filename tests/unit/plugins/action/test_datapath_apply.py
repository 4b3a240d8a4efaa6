"""datapath_apply: the capability selection by tags, the kubelet decision, the role files it reads."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible_collections.aiinfra.datapath.plugins.action import datapath_apply as action

ROLES = action.ROLES_DIR


@pytest.mark.parametrize("run_tags, skip_tags, expected", [
    ([], [], list(action.ORDER)),
    (["all"], [], list(action.ORDER)),
    (["kernel"], [], ["sysctl", "hugepages", "kernel_cmdline"]),
    (["sysctl", "mtu"], [], ["sysctl", "link_mtu"]),
    (["network"], ["firmware"], ["link_mtu", "roce_qos"]),
    (["all"], ["storage"], [c for c in action.ORDER if c != "nvme_cache"]),
    (["tagged"], [], list(action.ORDER)),
    (["untagged"], [], []),
    (["all"], ["tagged"], []),
    (["k8s"], [], ["k8s_node"]),
    (["nvme_cache", "roce_qos"], [], ["roce_qos", "nvme_cache"]),
    (["always"], [], []),
])
def test_tags_select_capabilities_as_ansible_selects_tasks(run_tags: list[str], skip_tags: list[str],
                                                           expected: list[str]) -> None:
    got = [c for c in action.ORDER if action.selected_by_tags(action.CAPABILITIES[c][3], run_tags, skip_tags)]
    assert got == expected


def test_tags_match_the_documented_role_tags() -> None:
    """The tags README and the datapath role defaults name are exactly the ones the action knows."""
    with open(os.path.join(ROLES, "datapath", "defaults", "main.yml"), encoding="utf-8") as handle:
        text = handle.read()
    for tag in ("kernel", "sysctl", "hugepages", "kernel_cmdline", "network", "mtu", "qos", "firmware",
                "storage", "k8s"):
        assert any(tag in tags for _r, _m, _v, tags in action.CAPABILITIES.values()), tag
        assert tag in text


@pytest.mark.parametrize("variables, results, expected", [
    ({}, {"hugepages": {"actions": ["/sys/.../nr_hugepages: 0 -> 64"]}}, False),
    ({"hugepages_restart_kubelet": True}, {"hugepages": {"actions": ["nr_hugepages 2048kB /nr_hugepages: 0 -> 64"]}},
     True),
    ({"hugepages_restart_kubelet": "yes"}, {"hugepages": {"actions": ["thp enabled: always -> madvise"]}}, False),
    ({"k8s_node_restart_kubelet": True}, {"k8s_node": {"hugepages_changed": True}}, True),
    ({"k8s_node_restart_kubelet": False}, {"k8s_node": {"hugepages_changed": True}}, False),
    ({"hugepages_restart_kubelet": "false"}, {"hugepages": {"actions": ["a /nr_hugepages: 0 -> 64"]}}, False),
])
def test_kubelet_restart_follows_the_roles_handlers(variables: dict, results: dict, expected: bool) -> None:
    assert action.kubelet_restart_needed(variables, results) is expected


@pytest.mark.parametrize("cap", list(action.ORDER))
def test_every_capability_role_has_the_module_task_the_action_templates(cap: str) -> None:
    role, module, result_var, _tags = action.CAPABILITIES[cap]
    with open(os.path.join(ROLES, role, "tasks", "main.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    found = [t for t in tasks if f"aiinfra.datapath.{module}" in t]
    assert len(found) == 1, f"{role}: one {module} task"
    assert found[0].get("register") == result_var
    assert os.path.isfile(os.path.join(ROLES, role, "defaults", "main.yml"))


def test_the_batch_module_knows_every_capability_module() -> None:
    from ansible_collections.aiinfra.datapath.plugins.modules import datapath_run

    assert sorted(datapath_run.MAINS) == sorted(m for _r, m, _v, _t in action.CAPABILITIES.values())


def test_the_documented_choices_are_the_capabilities() -> None:
    from ansible_collections.aiinfra.datapath.plugins.modules import datapath_apply as docs

    spec = yaml.safe_load(docs.DOCUMENTATION)
    assert spec["options"]["capabilities"]["choices"] == list(action.ORDER)
    with open(os.path.join(ROLES, "datapath", "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        role = yaml.safe_load(handle)
    assert role["argument_specs"]["main"]["options"]["datapath_capabilities"]["choices"] == list(action.ORDER)
