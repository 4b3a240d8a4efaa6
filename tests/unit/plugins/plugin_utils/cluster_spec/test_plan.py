"""The per-host plan: shape, merge order, derived values, node checks, determinism."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import (
    Planner,
    SpecValidationError,
    dumps_plan,
    node_plan,
    parse_spec,
    roce_mtu,
    roce_tos,
    sysctl_scope,
    validate_inventory,
)
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.loader import load_inventory
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.merge import (
    matching_models,
    matching_profiles,
)

from ._specs import EXAMPLE, base, example, model

PLAN_KEYS = {"version", "host", "profiles", "reboot_required", "sysctl_profile", "hugepages", "kernel_cmdline",
             "link_mtu", "roce_qos", "nic_firmware", "nvme_layout", "nfd_labels", "model_cache", "measure",
             "node_topology", "backend", "tuned_profile", "nic_config", "rail_routing", "nic_affinity",
             "ebpf_readiness"}


def test_plan_has_exactly_the_documented_shape() -> None:
    plan = node_plan(base(), "h1", ["gpu"], {"datapath_numa_nodes": 2})
    assert set(plan) == PLAN_KEYS
    assert set(plan["sysctl_profile"]) == {"file", "keys", "persist"}
    for entry in plan["sysctl_profile"]["keys"].values():
        assert set(entry) == {"value", "mode", "scope", "ignore_missing"}
        assert isinstance(entry["value"], str)
        assert entry["mode"] in ("exact", "minimum") and entry["scope"] in ("netns", "global")
    assert set(plan["hugepages"]) == {"pages", "bytes_per_node", "thp", "mounts", "thp_persist"}
    for page in plan["hugepages"]["pages"]:
        assert set(page) == {"size", "count", "per_node", "persist"}
    assert set(plan["hugepages"]["thp"]) == {"enabled", "defrag"}
    assert set(plan["kernel_cmdline"]) == {"args", "backend"}
    assert plan["backend"] == "files" and plan["tuned_profile"] is None  # datapath_backend unset
    assert set(plan["link_mtu"]) == {"interfaces"} and set(plan["roce_qos"]) == {"interfaces"}
    for iface in plan["link_mtu"]["interfaces"]:
        assert set(iface) == {"name", "match", "fabric", "mtu"}
        assert len(iface["match"]) == 1
    assert set(plan["roce_qos"]["interfaces"][0]) == {"interface", "match", "fabric", "trust", "pfc_priorities",
                                                      "dscp2prio", "ets", "ecn", "cnp", "roce_tos", "roce_mode",
                                                      "roce_mtu"}
    assert set(plan["nic_firmware"]) == {"policies"}
    assert set(plan["nic_firmware"]["policies"][0]) == {"driver", "psid", "min_version", "allowed"}
    assert set(plan["nvme_layout"]) == {"devices", "select", "raid", "filesystem", "mount", "directories",
                                        "reserve_bytes", "wipe_serials"}
    assert set(plan["nfd_labels"]) == {"labels", "local_volume_class"}
    assert set(plan["rail_routing"]) == {"rails", "table_range", "arp_ignore", "arp_announce", "rp_filter"}
    assert [set(r) for r in plan["rail_routing"]["rails"]] == [{
        "fabric", "rail", "name", "interface", "match", "address", "address_ok", "subnets", "subnet", "gateway",
        "addressing", "routes", "table", "priority", "gpu"}]  # rail0 only: the management fabric is not routed
    assert plan["model_cache"] is None  # the base spec has no models (tests/.../test_model_cache_spec.py)
    # no nic_affinity or ebpf section in the base spec (tests/.../test_plan_host_stack.py)
    assert plan["nic_affinity"] is None and plan["ebpf_readiness"] is None
    assert plan["node_topology"] is None  # the base spec has no topology section
    json.dumps(plan)  # plain data


@pytest.mark.parametrize(("dscp", "ecn", "tos"), [(26, True, 106), (26, False, 104), (0, True, 2), (63, False, 252)])
def test_roce_tos(dscp: int, ecn: bool, tos: int) -> None:
    assert roce_tos(dscp, ecn) == tos


MTUS = [(9000, 4096), (4192, 4096), (4191, 2048), (2144, 2048), (2143, 1024), (1500, 1024), (1120, 1024),
        (1119, 512), (608, 512), (607, 256), (352, 256), (351, None), (68, None)]


@pytest.mark.parametrize(("mtu", "expected"), MTUS)
def test_roce_mtu(mtu: int, expected: int | None) -> None:
    assert roce_mtu(mtu) == expected


def test_qos_derivations() -> None:
    spec = base()
    spec["profiles"][0]["interfaces"][1]["mtu"] = 1500
    spec["profiles"][0]["interfaces"][1]["mtu_override"] = True
    (qos,) = node_plan(spec, "h1", ["gpu"])["roce_qos"]["interfaces"]
    assert qos["roce_tos"] == 106 and qos["roce_mtu"] == 1024
    assert qos["dscp2prio"] == {"26": 3, "48": 6}
    assert qos["ecn"] == {"rp": [3], "np": [3]}
    assert qos["match"] == {"pci": "0000:e6:00.0"} and qos["interface"] is None
    spec["fabrics"][1]["roce"].update(ecn=False, dscp2prio={10: 1})
    (qos,) = node_plan(spec, "h1", ["gpu"])["roce_qos"]["interfaces"]
    assert qos["roce_tos"] == 104 and qos["ecn"] == {"rp": [], "np": []}
    assert qos["dscp2prio"] == {"10": 1, "26": 3, "48": 6}


def test_hugepages_bytes_per_node_and_cmdline() -> None:
    plan = node_plan(base(), "h1", ["gpu"], {"datapath_numa_nodes": 2})
    hp = plan["hugepages"]
    assert hp["pages"] == [{"size": "1G", "count": 8, "per_node": {"0": 4, "1": 4}, "persist": "cmdline"}]
    assert hp["bytes_per_node"] == {"0": 4 * 2**30, "1": 4 * 2**30}
    assert plan["kernel_cmdline"]["args"] == ["hugepagesz=1G", "hugepages=0:4,1:4"]
    assert plan["reboot_required"] is True


def test_2m_pool_by_memory_share_persists_by_sysctl() -> None:
    spec = base()
    spec["profiles"][0]["hugepages"] = {"pages": [{"size": "2M", "memory_share": 0.25}]}
    plan = node_plan(spec, "h1", ["gpu"], {"ansible_memtotal_mb": 4096})
    assert plan["hugepages"]["pages"] == [{"size": "2M", "count": 512, "per_node": None, "persist": "sysctl"}]
    assert plan["hugepages"]["bytes_per_node"] == {"0": 2**30}
    assert plan["kernel_cmdline"]["args"] == [] and plan["reboot_required"] is False


def test_memory_share_without_memory_names_the_host() -> None:
    spec = base()
    spec["profiles"][0]["hugepages"] = {"pages": [{"size": "2M", "memory_share": 0.25}]}
    with pytest.raises(SpecValidationError) as info:
        node_plan(spec, "gpu-7", ["gpu"])
    (err,) = info.value.errors
    assert err.host == "gpu-7"
    assert err.path == "datapath.profiles[0].hugepages.pages[0].memory_share"
    assert err.render().endswith("(host gpu-7)")


def test_hugepages_must_fit_memory_from_facts() -> None:
    with pytest.raises(SpecValidationError) as info:
        node_plan(base(), "small", ["gpu"], {"ansible_facts": {"memtotal_mb": 8192}})
    (err,) = info.value.errors
    assert err.path == "datapath.profiles[0].hugepages.pages"
    assert "more than 0.5 of the node's 8589934592 bytes" in err.message
    assert err.host == "small"


def test_numa_nodes_from_facts_are_checked() -> None:
    spec = base()
    spec["profiles"][0]["hugepages"]["pages"][0] = {"size": "1G", "per_node": {0: 2, 3: 2}}
    with pytest.raises(SpecValidationError) as info:
        node_plan(spec, "h", ["gpu"], {"datapath_facts": {"numa_nodes": 2}})
    assert info.value.errors[0].path == "datapath.profiles[0].hugepages.pages[0].per_node[3]"


def test_merge_order_and_per_key_sysctl() -> None:
    spec = base()
    spec["profiles"].append({"name": "rack", "groups": ["rack_b"], "sysctl": {"vm.zone_reclaim_mode": 0,
                                                                              "net.core.somaxconn": None},
                             "k8s": {"labels": {"aiinfra.io/rack": "b", "aiinfra.io/nvme-cache": None}}})
    spec["hosts"] = {"h2": {"sysctl": {"vm.zone_reclaim_mode": 2}, "thp": {"enabled": "madvise"}}}
    p1 = node_plan(spec, "h1", ["gpu", "rack_b"])
    assert p1["profiles"] == ["builtin:ai-gpu-node", "gpu", "rack"]
    assert p1["sysctl_profile"]["keys"]["vm.zone_reclaim_mode"]["value"] == "0"
    assert "net.core.somaxconn" not in p1["sysctl_profile"]["keys"]
    assert p1["nfd_labels"]["labels"] == {"aiinfra.io/rack": "b"}
    p2 = node_plan(spec, "h2", ["gpu", "rack_b"])
    assert p2["profiles"] == ["builtin:ai-gpu-node", "gpu", "rack", "host:h2"]
    assert p2["sysctl_profile"]["keys"]["vm.zone_reclaim_mode"]["value"] == "2"
    assert p2["hugepages"]["thp"] == {"enabled": "madvise", "defrag": None}
    p3 = node_plan(spec, "h3", [])
    assert p3["profiles"] == ["builtin:ai-gpu-node"]
    assert p3["link_mtu"]["interfaces"] == [] and p3["nvme_layout"] is None


def test_topology_section_is_carried_whole_and_the_last_layer_wins() -> None:
    spec = base()
    spec["profiles"][0]["topology"] = {"gpus": 8, "rdma_nics": 8, "max_gpu_nic_relation": "PXB",
                                       "gpudirect": ["rdma", "storage"], "golden": "h100-sxm"}
    spec["profiles"].append({"name": "old", "groups": ["old_rack"], "topology": {"gpus": 4}})
    spec["hosts"] = {"h2": {"topology": {"gpus": 7, "min_link_width": 16}}}
    wanted = {"gpus": 8, "rdma_nics": 8, "max_gpu_nic_relation": "PXB", "min_link_width": None,
              "min_link_gen": None, "acs_off": True, "gpudirect": ["rdma", "storage"], "min_max_read_req": 4096,
              "golden": "h100-sxm"}
    assert node_plan(spec, "h1", ["gpu"])["node_topology"] == wanted
    # a later layer replaces the section: its unset fields are the defaults, not the earlier layer's
    assert node_plan(spec, "h1", ["gpu", "old_rack"])["node_topology"] == {
        **wanted, "gpus": 4, "rdma_nics": None, "max_gpu_nic_relation": "NODE", "gpudirect": None, "golden": None}
    assert node_plan(spec, "h2", ["gpu"])["node_topology"] == {
        **wanted, "gpus": 7, "rdma_nics": None, "max_gpu_nic_relation": "NODE", "gpudirect": None,
        "min_link_width": 16, "golden": None}
    assert node_plan(spec, "h3", [])["node_topology"] is None


def test_profile_selected_by_host_list() -> None:
    spec = base()
    spec["profiles"][0]["groups"] = []
    spec["profiles"][0]["hosts"] = ["special"]
    assert node_plan(spec, "special", [])["profiles"][-1] == "gpu"
    assert node_plan(spec, "other", ["gpu"])["profiles"] == ["builtin:ai-gpu-node"]


def test_builtin_none() -> None:
    spec = base()
    spec["builtin_profile"] = "none"
    assert node_plan(spec, "h", [])["sysctl_profile"]["keys"] == {}


def test_builtin_profile_only_raises_limits() -> None:
    keys = node_plan({"version": 1}, "h", [])["sysctl_profile"]["keys"]
    assert keys and all(entry["mode"] == "minimum" for entry in keys.values())


@pytest.mark.parametrize(("key", "scope"), [("net.ipv4.tcp_rmem", "netns"), ("net.core.somaxconn", "netns"),
                                            ("net.core.rmem_max", "global"), ("vm.swappiness", "global"),
                                            ("net.netfilter.nf_conntrack_max", "global"), ("kernel.shmmax", "global")])
def test_sysctl_scope(key: str, scope: str) -> None:
    assert sysctl_scope(key) == scope


def test_plan_is_deterministic_and_independent_of_input_order() -> None:
    spec = base()
    text = dumps_plan(node_plan(spec, "h1", ["gpu"], {"datapath_numa_nodes": 2}))
    reordered: dict[str, Any] = dict(reversed(list(base().items())))
    reordered["profiles"][0]["sysctl"] = dict(reversed(list(reordered["profiles"][0]["sysctl"].items())))
    assert dumps_plan(node_plan(reordered, "h1", ["gpu"], {"datapath_numa_nodes": 2})) == text
    assert dumps_plan(Planner(parse_spec(spec)).plan("h1", ("gpu",), {"datapath_numa_nodes": 2})) == text


def test_node_plan_returns_independent_copies_and_planner_shares() -> None:
    spec = base()
    first = node_plan(spec, "a", ["gpu"])
    first["sysctl_profile"]["keys"].clear()
    assert node_plan(spec, "b", ["gpu"])["sysctl_profile"]["keys"]
    planner = Planner(parse_spec(spec))
    one, two = planner.plan("a", ["gpu"]), planner.plan("b", ["gpu"])
    assert (one["host"], two["host"]) == ("a", "b")
    assert one["sysctl_profile"] is two["sysctl_profile"] and planner.templates == 1


def test_host_names_are_escaped_in_plans() -> None:
    plan = node_plan(base(), 'we"ird\\host', ["gpu"])
    assert plan["host"] == 'we"ird\\host'


def test_example_inventory_plans() -> None:
    inv = load_inventory(EXAMPLE)
    assert len(inv.hosts) == 16
    planner = Planner(parse_spec(example()))
    plans = {h: planner.plan(h, *inv.hosts[h]) for h in inv.hosts}
    p1 = plans["gpu-node-01"]
    assert len(p1["link_mtu"]["interfaces"]) == 10 and len(p1["roce_qos"]["interfaces"]) == 8
    qos = p1["roce_qos"]["interfaces"]
    assert {q["roce_tos"] for q in qos} == {106} and {q["roce_mtu"] for q in qos} == {4096}
    assert p1["hugepages"]["bytes_per_node"] == {"0": 80 * 2**30, "1": 80 * 2**30}
    assert plans["gpu-node-09"]["nic_firmware"]["policies"][0]["allowed"] == ["28.39.3560", "28.40.1000"]
    assert plans["gpu-node-16"]["sysctl_profile"]["keys"]["net.ipv4.tcp_rmem"]["value"] == "4096 262144 67108864"
    assert plans["gpu-node-16"]["nfd_labels"]["labels"]["aiinfra.io/canary"] == "true"


def test_bad_host_argument() -> None:
    with pytest.raises(SpecValidationError):
        node_plan(base(), "", [])
    with pytest.raises(SpecValidationError):
        node_plan(base(), None, [])


def test_invalid_spec_raises_with_all_errors() -> None:
    spec = base()
    spec["fabrics"][0]["mtu"] = 1
    spec["fabrics"][1]["mtu"] = 1
    with pytest.raises(SpecValidationError) as info:
        node_plan(spec, "h", [])
    assert len(info.value.errors) == 2


def test_derived_values_come_from_the_one_node_file() -> None:
    """The plan, the cross-checks and the modules use the same functions of module_utils/_derived.py."""
    from ansible_collections.aiinfra.datapath.plugins.module_utils import _derived, _sysctl
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import checks
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import plan as spec_plan

    assert spec_plan.sysctl_scope is _derived.sysctl_scope is _sysctl.sysctl_scope
    assert checks.roce_mtu is _derived.roce_mtu and checks.roce_tos is _derived.roce_tos


def _listing_spec() -> dict[str, Any]:
    """Profiles and models selected by groups, by host lists (one host listed twice) or both;
    profile `bare` has no storage, so the hosts that models name but that only `bare` selects fail."""
    spec = base()
    spec["profiles"][0]["groups"] = ["gpu"]
    spec["profiles"].append({"name": "listed", "hosts": ["h2", "h9", "h2x"], "sysctl": {"vm.swappiness": 1}})
    spec["profiles"].append({"name": "bare", "groups": ["cpu"], "hosts": ["h9"], "sysctl": {"vm.swappiness": 5}})
    spec["models"] = [model(groups=["cpu", "gpu"], hosts=["h9", "h1"]), model(version="v2", groups=[], hosts=["h3"])]
    return spec


CASES = [("h1", ["gpu"]), ("h2", ["gpu"]), ("h2", []), ("h9", []), ("h9", ["cpu", "gpu"]), ("h3", ["cpu"]),
         ("h4", ["cpu"]), ("h5", ["other"]), ("h3", ["gpu", "cpu"]), ("h1", ("gpu",)), ("h6", {"cpu"})]


def test_planner_selects_what_merge_selects() -> None:
    """Planner looks profiles and models up by host name and by group list; merge scans the lists."""
    spec = parse_spec(_listing_spec())
    planner = Planner(spec)
    for host, groups in CASES * 2:  # the second round from the cache
        group_list = list(groups)
        assert planner._selected(host, group_list) == (tuple(matching_profiles(spec, host, group_list)),
                                                       tuple(matching_models(spec, host, group_list))), host


def test_check_raises_what_template_raises() -> None:
    """check (validation) and template (plans) give the same errors, host by host, also for the
    hosts of a shape already seen broken; a shape check saw is planned the same afterwards."""
    spec = parse_spec(_listing_spec())

    def outcome(call: Any, host: str, groups: Any, facts: Any) -> Any:
        try:
            call(host, groups, facts)
        except SpecValidationError as exc:
            return [e.as_dict() for e in exc.errors]
        return None

    checker, planner = Planner(spec), Planner(spec)
    facts = [None, {"datapath_memory_bytes": 2**30}, {"datapath_backend": "x"}, {"datapath_numa_nodes": 1}]
    seen = []
    for host, groups in CASES * 2:
        for fact in facts:
            got = outcome(checker.check, host, groups, fact)
            assert got == outcome(planner.template, host, groups, fact), (host, groups, fact)
            seen.append(got)
    errors = [e for found in seen if found for e in found]
    assert any("must hold model llama@v1 (it is listed in hosts)" in e["message"] for e in errors)
    assert any(e["path"] == "datapath.models[0].hosts[0]" and e["host"] == "h9" for e in errors)
    assert any("(it is in group cpu)" in e["message"] and e["host"] == "h4" for e in errors)
    assert any("more than 0.5 of the node's 1073741824 bytes" in e["message"] for e in errors)
    assert checker.templates == 0 and planner.templates > 0
    assert checker.template("h1", ["gpu"]) == planner.template("h1", ["gpu"])


def test_many_listed_hosts_are_looked_up_not_scanned() -> None:
    """A profile and a model may list 100,000 hosts: validating them is linear (it was quadratic)."""
    names = [f"node-{n:05d}" for n in range(20000)]
    spec = base()
    spec["profiles"][0]["groups"] = []
    spec["profiles"][0]["hosts"] = names
    spec["models"] = [model(groups=[], hosts=names)]
    hosts = {name: ([], {"datapath_numa_nodes": 2}) for name in names}
    start = time.process_time()
    assert validate_inventory(spec, hosts) == []
    assert time.process_time() - start < 5  # about 0.2 s; scanning the lists took 10 s
