"""datapath_apply: capability selection by tags, old names, the kubelet decision and the summary."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.aiinfra.datapath.plugins.action import datapath_apply as action
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import capabilities as caps

ORDER = list(caps.ORDER)


@pytest.mark.parametrize("run_tags, skip_tags, expected", [
    ([], [], ORDER),
    (["all"], [], ORDER),
    (["kernel"], [], ["sysctl_profile", "hugepages", "kernel_cmdline", "tuned_profile"]),
    (["sysctl", "mtu"], [], ["sysctl_profile", "link_mtu"]),
    (["sysctl_profile", "link_mtu"], [], ["sysctl_profile", "link_mtu"]),
    (["network"], ["firmware"], ["link_mtu", "rail_routing", "roce_qos", "nic_affinity", "ebpf_readiness"]),
    (["all"], ["storage"], [c for c in ORDER if c != "nvme_layout"]),
    (["all"], ["nvme_cache"], [c for c in ORDER if c != "nvme_layout"]),
    (["tagged"], [], ORDER),
    (["untagged"], [], []),
    (["all"], ["tagged"], []),
    (["k8s"], [], ["nfd_labels"]),
    (["k8s_node"], [], ["nfd_labels"]),
    (["nvme_layout", "roce_qos"], [], ["roce_qos", "nvme_layout"]),
    (["always"], [], []),
])
def test_tags_select_capabilities_as_ansible_selects_tasks(run_tags: list[str], skip_tags: list[str],
                                                           expected: list[str]) -> None:
    got = [c for c in ORDER if caps.selected_by_tags(caps.CAPABILITIES[c].tags, run_tags, skip_tags)]
    assert got == expected


def test_old_capability_names_map_to_todays() -> None:
    apply = action.ActionModule.__new__(action.ActionModule)
    assert apply._wanted(["sysctl", "k8s_node", "link_mtu"]) == ["sysctl_profile", "nfd_labels", "link_mtu"]
    assert apply._wanted(None) == ORDER
    with pytest.raises(AnsibleActionFail, match="unknown capabilities \\['nope'\\]"):
        apply._wanted(["nope"])
    # site.yml skips the role's argument-spec task: the action itself refuses what it would refuse
    for given in ("sysctl_profile", {"sysctl_profile": True}, 3):
        with pytest.raises(AnsibleActionFail, match="capabilities must be a list of names"):
            apply._wanted(given)


def _settings(hugepages: object = False, labels: object = False) -> dict:
    return {"hugepages": {"restart_kubelet": hugepages}, "nfd_labels": {"restart_kubelet": labels}}


@pytest.mark.parametrize("settings, results, expected", [
    (_settings(), {"hugepages": {"pools_changed": True}}, False),
    (_settings(hugepages=True), {"hugepages": {"pools_changed": True}}, True),
    (_settings(hugepages="yes"), {"hugepages": {"pools_changed": False}}, False),
    (_settings(labels=True), {"nfd_labels": {"hugepages_changed": True}}, True),
    (_settings(labels=False), {"nfd_labels": {"hugepages_changed": True}}, False),
    (_settings(hugepages="false"), {"hugepages": {"pools_changed": True}}, False),
])
def test_kubelet_restart_reads_the_structured_flags(settings: dict, results: dict, expected: bool) -> None:
    assert action.kubelet_restart_needed(settings, results) is expected


def test_summary_reads_structured_results() -> None:
    results = {name: {} for name in ORDER}
    results["sysctl_profile"] = {"changed": True}
    results["kernel_cmdline"] = {"changed": False, "bootloader": "none", "missing": ["iommu=pt"],
                                 "still_present": [], "reboot_required": False}
    results["roce_qos"] = {"changed": False, "interfaces": [
        {"interface": "ens1f0np0", "supported": False, "reason": "virtual interface"}]}
    results["nic_firmware"] = {"compliance": [{"interface": "eno1", "status": "unknown", "reason": "veth"},
                                              {"interface": "ens1", "status": "noncompliant", "reason": "old"}]}
    results["hugepages"] = {"changed": True, "reboot_required": True}
    assert action.summary(results) == {
        "changed": ["sysctl_profile", "hugepages"],
        "failed": [],
        "reboot_required": True,
        "reboot_reasons": ["iommu=pt"],
        "unsupported": ["roce_qos ens1f0np0: virtual interface",
                        "kernel_cmdline: no boot loader found; not persisted: iommu=pt",
                        "nic_firmware eno1: veth"],
        "noncompliant_firmware": ["ens1"],
        "nic_config_not_applied": [],
    }


def test_summary_reads_nic_configs_reboot_and_what_a_reboot_did_not_apply() -> None:
    results = {name: {} for name in ORDER}
    results["nic_config"] = {"changed": True, "reboot_required": True,
                             "reboot_reasons": ["0000:3b:00.0 LINK_TYPE_P1: IB(1) -> ETH(2)",
                                                "0000:3b:00.0 SRIOV_EN: False(0) -> True(1)"],
                             "pending": [{"pci": "0000:3b:00.0", "param": "LINK_TYPE_P1", "current": "IB(1)",
                                          "next_boot": "ETH(2)", "state": "set"},
                                         {"pci": "0000:3b:00.0", "param": "SRIOV_EN", "current": "False(0)",
                                          "next_boot": "True(1)", "state": "pending"}],
                             "unsupported": [{"pci": "0000:3b:00.0", "param": "MAX_ACC_OUT_READ",
                                              "reason": "hidden: the tool shows MAX_ACC_OUT_READ only while "
                                                        "ADVANCED_PCI_SETTINGS is True(1) (Current False(0))"}],
                             "not_applied": [{"pci": "0000:5e:00.0", "text": "..."}]}
    summary = action.summary(results)
    assert summary["reboot_required"] is True
    # one reason per device, its parameters grouped: readable in the summary line, which joins reasons by blanks
    assert summary["reboot_reasons"] == ["nic_config 0000:3b:00.0 (LINK_TYPE_P1 IB(1) -> ETH(2), "
                                         "SRIOV_EN False(0) -> True(1))"]
    assert summary["unsupported"] == ["nic_config 0000:3b:00.0 MAX_ACC_OUT_READ: hidden: the tool shows "
                                      "MAX_ACC_OUT_READ only while ADVANCED_PCI_SETTINGS is True(1) (Current False(0))"]
    assert summary["nic_config_not_applied"] == ["0000:5e:00.0"]
    assert summary["changed"] == ["nic_config"]


def test_the_batch_module_dispatches_every_capability_in_order() -> None:
    from ansible_collections.aiinfra.datapath.plugins.module_utils import _batch

    assert list(_batch.BACKENDS) == ORDER


def test_the_documented_choices_are_the_capabilities_and_their_old_names() -> None:
    from ansible_collections.aiinfra.datapath.plugins.modules import datapath_apply as docs

    spec = yaml.safe_load(docs.DOCUMENTATION)
    choices = ORDER + list(caps.ROLE_ALIASES)
    assert spec["options"]["capabilities"]["choices"] == choices
    assert spec["options"]["capabilities"]["default"] == ORDER
    with open(f"{caps.__file__.rsplit('/plugins/', 1)[0]}/roles/datapath/meta/argument_specs.yml",
              encoding="utf-8") as handle:
        role = yaml.safe_load(handle)
    option = role["argument_specs"]["main"]["options"]["datapath_capabilities"]
    assert option["choices"] == choices and option["default"] == ORDER


def test_the_spec_from_its_argument_or_from_the_variable_spec_var_names() -> None:
    spec = {"hosts": {"node1": {}}}
    # the role's default, as ansible loads it from defaults/main.yml (trusted as a template)
    task_vars = {"datapath": spec, "datapath_spec": trust_as_template("{{ datapath | default(none) }}"),
                 "nothing": trust_as_template("{{ undefined_here | default(none) }}")}
    templar = Templar(loader=DataLoader(), variables=task_vars)
    assert action.ActionModule._spec({"spec": spec}, task_vars, templar, "node1") is spec
    # the role passes spec_var: datapath_spec (the spec stays out of the task's arguments)
    assert action.ActionModule._spec({"spec_var": "datapath_spec"}, task_vars, templar, "node1") == spec
    with pytest.raises(AnsibleActionFail, match="mutually exclusive"):
        action.ActionModule._spec({"spec": spec, "spec_var": "datapath"}, task_vars, templar, "node1")
    with pytest.raises(AnsibleActionFail, match="spec_var 'datapth' names no variable of node1"):
        action.ActionModule._spec({"spec_var": "datapth"}, task_vars, templar, "node1")
    with pytest.raises(AnsibleActionFail, match="spec_var 3 names no variable"):
        action.ActionModule._spec({"spec_var": 3}, task_vars, templar, "node1")
    for args in ({}, {"spec_var": "nothing"}):
        with pytest.raises(AnsibleActionFail, match="no cluster spec"):
            action.ActionModule._spec(args, task_vars, templar, "node1")


def test_the_role_passes_the_spec_by_variable_name() -> None:
    with open(f"{caps.__file__.rsplit('/plugins/', 1)[0]}/roles/datapath/tasks/main.yml", encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    (apply,) = [task["aiinfra.datapath.datapath_apply"] for task in tasks if "aiinfra.datapath.datapath_apply" in task]
    assert apply["spec_var"] == "datapath_spec" and "spec" not in apply


def _example_vars(host: str = "gpu-node-01") -> tuple[dict, Templar]:
    """A host's variables as ansible-playbook gives them to the action: the example inventory read
    by ansible's own InventoryManager and VariableManager, the role's defaults read by its DataLoader."""
    from ansible.inventory.manager import InventoryManager
    from ansible.vars.manager import VariableManager
    root = caps.__file__.rsplit("/plugins/", 1)[0]
    loader = DataLoader()
    inventory = InventoryManager(loader, sources=[f"{root}/inventories/example/hosts.yml"])
    variables = dict(VariableManager(loader=loader, inventory=inventory).get_vars(host=inventory.get_host(host)))
    defaults = loader.load_from_file(f"{root}/roles/datapath/defaults/main.yml", trusted_as_template=True)
    variables["datapath_spec"] = defaults["datapath_spec"]
    return variables, Templar(loader=loader, variables=variables)


def test_a_plain_spec_is_copied_and_equals_what_templating_gives() -> None:
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils import plan_cache
    task_vars, templar = _example_vars()
    assert isinstance(task_vars["datapath_spec"], str)  # the role's "{{ datapath | default(none) }}"
    copied = action.plain_variable(task_vars, "datapath_spec")
    assert copied is not action.NOT_PLAIN
    templated = templar.template(task_vars["datapath_spec"])
    assert copied == templated and plan_cache.spec_key(copied) == plan_cache.spec_key(templated)
    assert action.ActionModule._spec({"spec_var": "datapath_spec"}, task_vars, templar, "gpu-node-01") == templated

    class NoTemplating:
        def template(self, value: object) -> object:
            raise AssertionError(f"templated although plain: {value!r}")
    # the action copies it: templating is not even asked
    assert action.ActionModule._spec({"spec_var": "datapath_spec"}, task_vars, NoTemplating(), "gpu-node-01") == copied

    def types(value: object) -> set[type]:
        if isinstance(value, dict):
            return {dict}.union(*(types(k) | types(v) for k, v in value.items()))
        if isinstance(value, list):
            return {list}.union(*(types(v) for v in value))
        return {type(value)}
    # ansible's tagged subclasses become plain data
    assert types(copied) <= {dict, list, str, int, float, bool, type(None)}


def test_a_spec_with_a_template_in_it_is_templated() -> None:
    task_vars, templar = _example_vars()
    spec = dict(task_vars["datapath"])
    spec["note"] = trust_as_template("built for {{ inventory_hostname }}")
    task_vars["datapath"] = spec
    assert action.plain_variable(task_vars, "datapath_spec") is action.NOT_PLAIN
    got = action.ActionModule._spec({"spec_var": "datapath_spec"}, task_vars, templar, "gpu-node-01")
    assert got["note"] == "built for gpu-node-01"


def test_variable_references_are_followed_as_templating_would() -> None:
    import datetime
    task_vars = {"a": trust_as_template("{{ b }}"), "b": trust_as_template("{{c|default(none)}}"),
                 "c": {"k": "v"}, "d": trust_as_template("{{ missing | default(none) }}"),
                 "e": trust_as_template("{{ missing }}"), "f": datetime.date(2026, 12, 7),
                 "g": trust_as_template("{{ c | default({}) }}")}
    assert action.plain_variable(task_vars, "a") == {"k": "v"}
    assert action.plain_variable(task_vars, "d") is None  # undefined, with default(none)
    for name in ("e", "f", "g"):  # undefined without a default, a date, another filter: templated
        assert action.plain_variable(task_vars, name) is action.NOT_PLAIN
