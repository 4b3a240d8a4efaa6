"""One bad case per cross-check (message and path asserted); the base spec is the good case."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import validate_spec
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.registry import all_checks

from ._specs import SHA_A, base, model

Spec = dict[str, Any]


def roce(spec: Spec) -> dict[str, Any]:
    return spec["fabrics"][1]["roce"]


def prof(spec: Spec) -> dict[str, Any]:
    return spec["profiles"][0]


def _set(fn: Callable[[Spec], None]) -> Callable[[Spec], None]:
    return fn


CASES: list[tuple[str, Callable[[Spec], Any], str, str]] = [
    # (check name, mutation, expected path, expected message fragment)
    ("roce-priority-protected", lambda s: roce(s).update(pfc_priorities=[], ecn=False),
     "datapath.fabrics[1].roce.pfc_priorities",
     "RoCE priority 3 has PFC off and ECN off — traffic would be lossy"),
    ("cnp-not-lossless", lambda s: roce(s).update(pfc_priorities=[3, 6]),
     "datapath.fabrics[1].roce.cnp.priority", "CNP priority 6 has PFC on"),
    ("cnp-not-lossless", lambda s: roce(s).update(cnp={"dscp": 48, "priority": 3}, pfc_priorities=[], ecn=True),
     "datapath.fabrics[1].roce.cnp.priority", "CNP priority 3 equals the RoCE data priority"),
    ("pfc-priorities-unique", lambda s: roce(s).update(pfc_priorities=[3, 3]),
     "datapath.fabrics[1].roce.pfc_priorities", "a priority is listed twice"),
    ("dscp2prio-unique", lambda s: roce(s).update(dscp2prio={26: 4}),
     "datapath.fabrics[1].roce.dscp2prio[26]", "DSCP 26 maps to priority 4 here but to 3 as the RoCE DSCP"),
    ("dscp2prio-unique", lambda s: roce(s).update(cnp={"dscp": 26, "priority": 6}),
     "datapath.fabrics[1].roce.cnp.dscp", "CNP DSCP 26 equals the RoCE DSCP"),
    ("ets-bandwidth", lambda s: roce(s).update(ets={"bw": [10, 10, 10, 50, 10, 10, 0, 10]}),
     "datapath.fabrics[1].roce.ets.bw", "sum to 110, not 100"),
    ("ets-bandwidth", lambda s: roce(s).update(ets={"bw": [10, 10, 10, 50, 10, 0, 10, 0]}),
     "datapath.fabrics[1].roce.ets.bw[6]", "traffic class 6 is strict but has bandwidth 10"),
    ("ets-bandwidth", lambda s: roce(s).update(ets={"bw": [20, 20, 20, 0, 20, 0, 0, 20]}),
     "datapath.fabrics[1].roce.ets.bw[3]", "carries RoCE priority 3 but has 0% bandwidth"),
    ("roce-tos-consistent", lambda s: roce(s).update(tos=104),
     "datapath.fabrics[1].roce.tos", "tos 104 does not match DSCP 26 with ECN"),
    ("roce-settings-match-kind", lambda s: s["fabrics"][0].update(roce={}),
     "datapath.fabrics[0].roce", "RoCE settings on a fabric of kind ethernet"),
    ("roce-settings-match-kind", lambda s: s["fabrics"][1].update(kind="ethernet", roce=None),
     "datapath.fabrics[1].kind", "an rdma fabric of kind ethernet carries no RDMA"),
    ("roce-mtu-possible", lambda s: s["fabrics"][1].update(mtu=351),
     "datapath.fabrics[1].mtu", "MTU 351 is below 352: the kernel derives no RoCE MTU from it"),
    ("management-not-rdma", lambda s: s["fabrics"][0].update(kind="roce"),
     "datapath.fabrics[0].kind", "the management fabric is of kind roce"),
    ("subnets-valid", lambda s: s["fabrics"][0].update(subnets=["192.0.2.1/24"]),
     "datapath.fabrics[0].subnets[0]", "is not a network"),
    ("subnets-disjoint", lambda s: s["fabrics"][1].update(subnets=["192.0.2.128/25"]),
     "datapath.fabrics[1].subnets[0]", "192.0.2.128/25 overlaps 192.0.2.0/24 of fabric mgmt"),
    ("names-unique", lambda s: s["fabrics"][1].update(name="mgmt"),
     "datapath.fabrics[1].name", "name 'mgmt' is already used by fabrics[0]"),
    ("names-unique", lambda s: s["profiles"].append({"name": "gpu"}),
     "datapath.profiles[1].name", "name 'gpu' is already used by profiles[0]"),
    ("minimum-needs-integers", lambda s: prof(s)["sysctl"].update({"kernel.x": {"value": "abc", "mode": "minimum"}}),
     'datapath.profiles[0].sysctl["kernel.x"].value', "'abc' is not numeric but mode is minimum"),
    ("pool-amount", lambda s: prof(s)["hugepages"]["pages"][0].update(memory_share=0.1),
     "datapath.profiles[0].hugepages.pages[0].count", "pool 1G gives count, memory_share"),
    ("pool-amount", lambda s: prof(s)["hugepages"]["pages"][0].update(count=None, per_node={0: 4}),
     "datapath.profiles[0].hugepages.pages[0].numa_split", "numa_split: even with an explicit per_node"),
    ("pool-amount", lambda s: prof(s)["hugepages"]["pages"][0].update(persist="sysctl", size="2M"),
     "datapath.profiles[0].hugepages.pages[0].persist", "vm.nr_hugepages cannot persist a per-NUMA split"),
    ("pools-and-mounts", lambda s: prof(s)["hugepages"]["pages"].append({"size": "1G", "count": 1}),
     "datapath.profiles[0].hugepages.pages[1].size", "a second 1G pool"),
    ("pools-and-mounts", lambda s: prof(s)["hugepages"]["pages"][0].update(persist="sysctl", numa_split="kernel"),
     "datapath.profiles[0].hugepages.pages[0].persist", "persists only the default page size (2M)"),
    ("pools-and-mounts", lambda s: prof(s)["hugepages"]["mounts"].append({"size": "2M", "path": "/dev/hugepages"}),
     "datapath.profiles[0].hugepages.mounts[1].size", "a hugetlbfs mount for 2M pages but no 2M pool"),
    ("pools-and-mounts", lambda s: prof(s)["hugepages"]["mounts"].append({"size": "1G", "path": "/dev/hugepages-1G"}),
     "datapath.profiles[0].hugepages.mounts[1].path", "/dev/hugepages-1G is mounted twice"),
    ("match-one", lambda s: prof(s)["interfaces"][1].update(match={"pci": "0000:e6:00.0", "mac": "00:11:22:33:44:55"}),
     "datapath.profiles[0].interfaces[1].match", "match gives mac, pci"),
    ("name-or-match", lambda s: prof(s)["interfaces"][1].update(name="ens1"),
     "datapath.profiles[0].interfaces[1].name", "both name and match are set"),
    ("name-or-match", lambda s: prof(s)["interfaces"][0].update(mtu_override=True),
     "datapath.profiles[0].interfaces[0].mtu_override", "mtu_override without an mtu"),
    ("profile-consistent", lambda s: prof(s)["interfaces"].append({"name": "eno1", "fabric": "rail0"}),
     "datapath.profiles[0].interfaces[2]", "name eno1 is already listed as interfaces[0]"),
    ("profile-consistent", lambda s: prof(s).update(kernel_args=["iommu=pt", "iommu=off"]),
     "datapath.profiles[0].kernel_args[1]", "iommu is set twice"),
    ("profile-consistent", lambda s: s.update(hosts={"h1": {"interfaces": [
        {"match": {"mac": "00:11:22:33:44:55"}, "fabric": "mgmt"},
        {"match": {"mac": "00:11:22:33:44:55"}, "fabric": "rail0"}]}}),
     "datapath.hosts.h1.interfaces[1]", "mac 00:11:22:33:44:55 is already listed"),
    ("interface-fabric", lambda s: prof(s)["interfaces"][0].update(fabric="nope"),
     "datapath.profiles[0].interfaces[0].fabric", "fabric 'nope' is not defined"),
    ("interface-mtu", lambda s: prof(s)["interfaces"][1].update(mtu=4200),
     "datapath.profiles[0].interfaces[1].mtu", "MTU 4200 differs from fabric rail0's MTU 9000"),
    ("interface-mtu", lambda s: prof(s)["interfaces"][1].update(mtu=300, mtu_override=True),
     "datapath.profiles[0].interfaces[1].mtu", "MTU 300 on RoCE fabric rail0 is below 352"),
    ("bond-members", lambda s: prof(s)["interfaces"].append({"name": "ens2f0np0", "fabric": "rail0", "bond": "bond0"}),
     "datapath.profiles[0].interfaces[2].bond", "ens2f0np0 is a member of bond bond0, which these interfaces do not"),
    ("bond-members", lambda s: prof(s)["interfaces"].extend([
        {"name": "bond0", "fabric": "rail0", "members": ["ens2f0np0", "ens2f1np1"]},
        {"name": "ens2f0np0", "fabric": "rail0", "mtu": 4200, "mtu_override": True}]),
     "datapath.profiles[0].interfaces[3].mtu", "MTU 4200 on ens2f0np0, a member of bond bond0 (MTU 9000)"),
    ("bond-members", lambda s: prof(s)["interfaces"].extend([
        {"name": "bond0", "fabric": "rail0"}, {"name": "ens2f0np0", "fabric": "mgmt", "bond": "bond0"}]),
     "datapath.profiles[0].interfaces[3].fabric", "member of bond bond0 on fabric rail0, but carries fabric mgmt"),
    ("bond-members", lambda s: s.update(hosts={"h1": {"interfaces": [
        {"name": "bond0", "fabric": "rail0", "members": ["ens2f0np0"]}, {"name": "bond1", "fabric": "rail0"},
        {"name": "ens2f0np0", "fabric": "rail0", "bond": "bond1"}]}}),
     "datapath.hosts.h1.interfaces[2].bond", "ens2f0np0 says bond bond1, but bond0 lists it as a member"),
    ("firmware-rule", lambda s: prof(s)["firmware"][0].update(driver=None, psid=None),
     "datapath.profiles[0].firmware[0].psid", "policy matches no device"),
    ("firmware-rule", lambda s: prof(s)["firmware"][0].update(allowed=["28.1.1"]),
     "datapath.profiles[0].firmware[0].min_version", "both min_version and allowed are set"),
    ("storage-devices", lambda s: prof(s)["storage"].update(select={"count": 2}),
     "datapath.profiles[0].storage.devices", "give either devices or select"),
    ("storage-devices", lambda s: prof(s)["storage"].update(devices=["/dev/nvme0n1"]),
     "datapath.profiles[0].storage.raid", "RAID0 needs at least 2 devices, got 1"),
    ("storage-devices", lambda s: prof(s)["storage"].update(raid=None),
     "datapath.profiles[0].storage.raid", "2 devices but no raid"),
    ("storage-devices", lambda s: prof(s)["storage"].update(devices=["/dev/nvme0n1", "/dev/nvme0n1"]),
     "datapath.profiles[0].storage.devices[1]", "/dev/nvme0n1 is listed twice"),
    ("storage-devices",
     lambda s: prof(s)["storage"].update(devices=None, select={"min_size": "1G", "count": 2}, reserve="2G"),
     "datapath.profiles[0].storage.reserve", "does not fit"),
    ("storage-devices", lambda s: prof(s)["storage"].update(filesystem={"label": "thirteen-char"}),
     "datapath.profiles[0].storage.filesystem.label", "an XFS label has at most 12 characters"),
    ("storage-devices", lambda s: prof(s)["storage"]["directories"].append({"path": "models"}),
     "datapath.profiles[0].storage.directories[1].path", "models is listed twice"),
    ("wipe-serials-stable", lambda s: prof(s)["storage"].update(wipe_serials=["S64RNE0R800002:1", "/dev/nvme1n1"]),
     "datapath.profiles[0].storage.wipe_serials[1]", "/dev/nvme1n1 is a kernel name"),
    ("layer-settings", lambda s: prof(s)["sysctl"].update({"net.ipv4.tcp_rmem": "4096 87380 67108864",
                                                          "net.core.rmem_max": 16777216}),
     'datapath.profiles[0].sysctl["net.ipv4.tcp_rmem"]',
     "net.ipv4.tcp_rmem (67108864) is larger than net.core.rmem_max (16777216)"),
    ("layer-settings", lambda s: prof(s)["sysctl"].update({"net.ipv4.tcp_wmem": "4096 87380"}),
     'datapath.profiles[0].sysctl["net.ipv4.tcp_wmem"].value', "is not 'min default max'"),
    ("layer-settings", lambda s: prof(s)["storage"]["mount"].update(path="/mnt/model-cache/sub") or
     prof(s)["hugepages"]["mounts"].append({"size": "1G", "path": "/mnt/model-cache"}),
     "datapath.profiles[0].hugepages.mounts[1].path", "collides with /mnt/model-cache/sub"),
    ("layer-settings", lambda s: prof(s).pop("storage"),
     "datapath.profiles[0].k8s.local_volume_class", "local_volume_class without a storage section"),
    ("layer-settings", lambda s: prof(s).update(node={"memory": "8GiB"}),
     "datapath.profiles[0].hugepages.pages", "more than 0.5 of the node's"),
    ("layer-settings", lambda s: prof(s).update(node={"numa_nodes": 1}) or prof(s)["hugepages"]["pages"][0].update(
        count=None, numa_split="kernel", per_node={1: 4}),
     "datapath.profiles[0].hugepages.pages[0].per_node[1]", "NUMA node 1 does not exist"),
    ("layer-settings", lambda s: prof(s).update(kernel_args=["hugepages=4"]),
     "datapath.profiles[0].kernel_args[0]", "hugepages=4 is also derived from hugepages"),
    ("model-files", lambda s: s.update(models=[model(manifest="SHA256SUMS")]),
     "datapath.models[0].files", "model llama@v1 gives both files and a manifest"),
    ("model-files", lambda s: s.update(models=[model(files=[])]),
     "datapath.models[0].files", "model llama@v1 gives neither files nor a manifest"),
    ("model-files", lambda s: s.update(models=[model(manifest_sha256=SHA_A)]),
     "datapath.models[0].manifest_sha256", "manifest_sha256 without a manifest"),
    ("model-files", lambda s: s.update(models=[model(files=[{"path": "a", "sha256": SHA_A}] * 2)]),
     "datapath.models[0].files[1].path", "a is already listed as files[0]"),
    ("model-files", lambda s: s.update(models=[model(files=[{"path": "w/x/y", "sha256": SHA_A},
                                                            {"path": "w", "sha256": SHA_A}])]),
     "datapath.models[0].files[0].path", "w/x/y is below file w"),
    ("model-files", lambda s: s.update(models=[model(files=[{"path": "a", "sha256": SHA_A},
                                                            {"path": "a.part", "sha256": SHA_A}])]),
     "datapath.models[0].files[1].path", "a.part is the staging name of file a"),
    ("model-targets", lambda s: s.update(models=[model(groups=["gpu", "gpu"])]),
     "datapath.models[0].groups[1]", "gpu is listed twice"),
    ("model-targets", lambda s: s.update(models=[model(hosts=["h1", "h2", "h1"])]),
     "datapath.models[0].hosts[2]", "h1 is listed twice"),
    ("models-unique", lambda s: s.update(models=[model(), model(version="v2"), model(groups=["other"])]),
     "datapath.models[2].version", "llama@v1 is already listed as models[0]"),
    ("measure-fabrics", lambda s: s.update(measure={"fabrics": ["rail9"]}),
     "datapath.measure.fabrics[0]", "fabric 'rail9' is not defined"),
    ("measure-fabrics", lambda s: s.update(measure={"fabrics": ["rail0", "rail0"]}),
     "datapath.measure.fabrics[1]", "fabric 'rail0' is listed twice"),
    ("measure-fabrics", lambda s: (s["fabrics"][1].update(subnets=[]), s.update(measure={"fabrics": ["rail0"]})),
     "datapath.measure.fabrics[0]", "fabric 'rail0' has no subnets"),
    ("measure-fabrics", lambda s: s.update(measure={"gates": {"fabrics": {"mgmt": {"min_gbit_s": 1.0}}}}),
     "datapath.measure.gates.fabrics.mgmt", "fabric 'mgmt' has gates but is not measured"),
    ("measure-fabrics", lambda s: s.update(measure={"gates": {"fabrics": {"rail9": {}}}}),
     "datapath.measure.gates.fabrics.rail9", "fabric 'rail9' is not defined"),
    ("measure-model", lambda s: s.update(models=[model()], measure={"storage": {"model": "llama@v2"}}),
     "datapath.measure.storage.model", "model llama@v2 is not listed under models"),
    ("topology-consistent", lambda s: prof(s).update(topology={"gpus": 0, "gpudirect": ["rdma"]}),
     "datapath.profiles[0].topology.gpudirect", "GPUDirect rdma is expected on a node with gpus: 0"),
    ("topology-consistent", lambda s: prof(s).update(topology={"rdma_nics": 0, "gpudirect": ["rdma", "storage"]}),
     "datapath.profiles[0].topology.gpudirect", "GPUDirect RDMA is expected on a node with rdma_nics: 0"),
    # rails (checks_rails.py): a per-rail-subnet fabric and the addresses of the spec
    ("rail-subnets", lambda s: s["fabrics"][1].update(rails=[{"subnet": "10.100.1.0/24"}]),
     "datapath.fabrics[1].rails", "rails are listed but addressing is shared-subnet"),
    ("rail-subnets", lambda s: s["fabrics"][1].update(addressing="per-rail-subnet"),
     "datapath.fabrics[1].rails", "addressing is per-rail-subnet but no rail lists its subnet"),
    ("rail-subnets", lambda s: s["fabrics"][1].update(addressing="per-rail-subnet", rails=[
        {"subnet": "10.100.0.0/24"}, {"subnet": "10.100.0.128/25"}]),
     "datapath.fabrics[1].rails[1].subnet", "rail1's subnet 10.100.0.128/25 overlaps rail0's 10.100.0.0/24"),
    ("rail-subnets", lambda s: s["fabrics"][1].update(addressing="per-rail-subnet",
                                                      rails=[{"subnet": "10.101.0.0/24"}]),
     "datapath.fabrics[1].rails[0].subnet", "rail0's subnet 10.101.0.0/24 is outside the fabric's subnets"),
    ("rail-subnets", lambda s: s["fabrics"][1].update(addressing="per-rail-subnet", rails=[
        {"subnet": "10.100.0.0/24", "gateway": "10.100.1.1"}]),
     "datapath.fabrics[1].rails[0].gateway", "gateway 10.100.1.1 is not a host address of rail0's subnet"),
    ("rail-subnets", lambda s: s["fabrics"][0].update(addressing="per-rail-subnet", rails=[{"subnet": "192.0.2.0/25"}]),
     "datapath.fabrics[0].addressing", "the management fabric is never routed per rail"),
    ("rail-table-range", lambda s: s.update(rail_routing={"table_base": 1995}),
     "datapath.rail_routing.table_base", "include 2004-2005 (Cilium)"),
    ("rail-addresses", lambda s: s.update(hosts={"h1": {"interfaces": [
        {"name": "ens1f0np0", "fabric": "rail0", "address": "10.200.0.5"}]}}),
     "datapath.hosts.h1.interfaces[0].address", "10.200.0.5 is outside the subnet of rail0 of fabric rail0"),
    ("rail-addresses", lambda s: s.update(hosts={
        "h1": {"interfaces": [{"name": "ens1f0np0", "fabric": "rail0", "address": "10.100.0.5"}]},
        "h2": {"interfaces": [{"name": "ens1f0np0", "fabric": "rail0", "address": "10.100.0.5/20"}]}}),
     "datapath.hosts.h2.interfaces[0].address", "10.100.0.5 is already the address of hosts.h1.interfaces[0]"),
    ("rail-addresses", lambda s: (s["fabrics"][1].update(addressing="per-rail-subnet",
                                                         rails=[{"subnet": "10.100.0.0/24"}]),
                                  s.update(hosts={"h1": {"interfaces": [{"name": "a0", "fabric": "rail0"},
                                                                        {"name": "a1", "fabric": "rail0"}]}})),
     "datapath.hosts.h1.interfaces[1]", "this is rail1 of fabric rail0, which lists the subnets of 1 rail(s) only"),
    ("rail-addresses", lambda s: s.update(hosts={"h1": {"interfaces": [
        {"name": "a0", "fabric": "rail0", "address": "ten"}]}}),
     "datapath.hosts.h1.interfaces[0].address", "'ten' is not an IP address"),
    ("measure-gates-not-empty", lambda s: s.update(measure={"gates": {
        "outlier_ratio": 0, "default": {"max_retransmit_share": None, "max_loss_pct": None}}}),
     "datapath.measure.gates.outlier_ratio", "outlier_ratio is 0 and no gate is set"),
    ("nic-config-match", lambda s: prof(s).update(nic_config=[{"ats": False}]),
     "datapath.profiles[0].nic_config[0].psid", "the entry matches no NIC"),
    ("nic-config-sets-something", lambda s: prof(s).update(nic_config=[{"psid": "MT_0000000838"}]),
     "datapath.profiles[0].nic_config[0].raw", "the entry sets nothing"),
    ("nic-config-raw-not-intent", lambda s: prof(s).update(nic_config=[{
        "psid": "MT_0000000838", "link_type": "eth", "raw": {"LINK_TYPE_P2": "IB"}}]),
     "datapath.profiles[0].nic_config[0].raw.LINK_TYPE_P2", "LINK_TYPE_P2 is also set by link_type of this entry"),
    ("nic-config-raw-not-intent", lambda s: prof(s).update(nic_config=[{
        "psid": "MT_0000000838", "roce_fabric": "rail0", "raw": {"CNP_DSCP_P1": 24}}]),
     "datapath.profiles[0].nic_config[0].raw.CNP_DSCP_P1", "CNP_DSCP_P1 is also set by roce_fabric of this entry"),
    ("sriov-vfs", lambda s: prof(s).update(nic_config=[{"psid": "MT_0000000838", "sriov": {"enabled": True}}]),
     "datapath.profiles[0].nic_config[0].sriov.num_vfs", "num_vfs is missing"),
    ("sriov-vfs", lambda s: prof(s).update(nic_config=[{"psid": "MT_0000000838",
                                                       "sriov": {"enabled": False, "num_vfs": 4}}]),
     "datapath.profiles[0].nic_config[0].sriov.num_vfs", "num_vfs 4 with SR-IOV off"),
    ("nic-config-fabric", lambda s: prof(s).update(nic_config=[{"psid": "MT_0000000838", "roce_fabric": "mgmt"}]),
     "datapath.profiles[0].nic_config[0].roce_fabric", "fabric 'mgmt' is of kind ethernet: it has no RoCE settings"),
    ("nic-config-fabric", lambda s: prof(s).update(nic_config=[{"psid": "MT_0000000838", "roce_fabric": "rail9"}]),
     "datapath.profiles[0].nic_config[0].roce_fabric", "fabric 'rail9' is not defined"),
    ("nic-config-fabric", lambda s: prof(s).update(nic_config=[
        {"psid": "MT_0000000838", "ats": False}, {"psid": "mt_0000000838", "ats": True}]),
     "datapath.profiles[0].nic_config[1]", "entry 1 matches the same NICs as entry 0"),
    ("switch-dcbx-roce", lambda s: s["fabrics"][0].update(switch={"os": "sonic", "dcbx": True}),
     "datapath.fabrics[0].switch.dcbx", "DCBX is compared with the RoCE settings, but the fabric is of kind"),
    ("measure-saturation-blocks", lambda s: s.update(measure={"saturation": {"min_block_kib": 64, "max_block_kib": 8}}),
     "datapath.measure.saturation.max_block_kib", "max_block_kib 8 is below min_block_kib 64"),
    ("nic-channels-given", lambda s: prof(s).update(nic_affinity={"channels": {}}),
     "datapath.profiles[0].nic_affinity.channels", "channels sets no count"),
    ("nic-rings-given", lambda s: prof(s).update(nic_affinity={"rings": {}}),
     "datapath.profiles[0].nic_affinity.rings", "rings sets no size"),
    ("nic-affinity-cpus", lambda s: prof(s).update(nic_affinity={"cpus": "15-8"}),
     "datapath.profiles[0].nic_affinity.cpus", "has a range that runs backwards"),
    ("nic-affinity-cpus", lambda s: prof(s).update(nic_affinity={"cpus": "8-15", "exclude_cpus": "0-31"}),
     "datapath.profiles[0].nic_affinity.exclude_cpus", "no CPU is left for the IRQs"),
    ("ebpf-features", lambda s: prof(s).update(ebpf={"features": ["netkit"]}),
     "datapath.profiles[0].ebpf.features", "netkit needs bpf-host-routing"),
    ("ebpf-features", lambda s: prof(s).update(ebpf={"features": ["bpf-host-routing", "big-tcp"]}),
     "datapath.profiles[0].ebpf.features", "big-tcp needs native-routing"),
    ("ebpf-features", lambda s: prof(s).update(ebpf={"features": ["native-routing", "native-routing"]}),
     "datapath.profiles[0].ebpf.features[1]", "native-routing is listed twice"),
    ("host-stack-fabrics", lambda s: prof(s).update(nic_affinity={"fabrics": ["rail9"]}),
     "datapath.profiles[0].nic_affinity.fabrics[0]", "fabric 'rail9' is not defined"),
    ("host-stack-fabrics", lambda s: prof(s).update(ebpf={"fabric": "rail9"}),
     "datapath.profiles[0].ebpf.fabric", "fabric 'rail9' is not defined"),
]


@pytest.mark.parametrize(("name", "mutate", "path", "message"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_cross_check_bad_case(name: str, mutate: Callable[[Spec], Any], path: str, message: str) -> None:
    assert validate_spec(base()) == []  # the good case
    spec = base()
    mutate(spec)
    errors = validate_spec(spec)
    matching = [e for e in errors if e.path == path and message in e.message]
    assert matching, "\n".join(e.render() for e in errors)
    assert matching[0].hint, "every error carries a fix"


def test_every_registered_check_has_a_bad_case() -> None:
    covered = {c[0] for c in CASES}
    assert {c.name for c in all_checks()} <= covered


def test_rendered_roce_error_matches_the_documented_format() -> None:
    spec = base()
    spec["fabrics"].append({"name": "rail1", "purpose": "rdma", "kind": "roce", "mtu": 9000,
                            "roce": {"pfc_priorities": [], "ecn": False}})
    spec["fabrics"][1], spec["fabrics"][2] = spec["fabrics"][2], spec["fabrics"][1]
    (err,) = validate_spec(spec)
    assert err.render() == ("datapath.fabrics[1].roce.pfc_priorities: RoCE priority 3 has PFC off and ECN off — "
                            "traffic would be lossy; enable PFC on 3 or set ecn: true")


def test_lossy_roce_with_ecn_is_allowed() -> None:
    spec = base()
    spec["fabrics"][1]["roce"].update(pfc_priorities=[], ecn=True)
    assert validate_spec(spec) == []


def test_cross_checks_of_valid_sections_run_despite_errors_elsewhere() -> None:
    spec = base()
    spec["fabrics"][1]["roce"].update(pfc_priorities=[], ecn=False)
    spec["fabrics"][0]["mtu"] = 1
    expected = {"datapath.fabrics[0].mtu", "datapath.fabrics[1].roce.pfc_priorities"}
    assert {e.path for e in validate_spec(spec)} == expected


def test_bond_members_with_their_bond_at_its_mtu_are_valid() -> None:
    spec = base()
    prof(spec)["interfaces"].extend([{"name": "bond0", "fabric": "rail0", "members": ["ens2f0np0", "ens2f1np1"]},
                                     {"name": "ens2f0np0", "fabric": "rail0"},
                                     {"name": "ens2f1np1", "fabric": "rail0", "bond": "bond0", "mtu": 9000}])
    assert validate_spec(spec) == []
