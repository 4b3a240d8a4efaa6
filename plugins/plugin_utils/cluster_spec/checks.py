"""Cross-checks: each a named function, registered for the model it checks.

A check yields :class:`Issue` objects whose path is relative to the model; the model's
validator turns them into errors at ``<model path>.<issue path>``. Checks that need the whole
spec (fabric references, subnets, the merged settings of a node) run on ``DatapathSpec``,
which pydantic only validates once every section is well-formed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._node import derived
from ._types import PAGE_BYTES
from .errors import Issue
from .registry import cross_check

if TYPE_CHECKING:
    from .merge import Effective, Origin
    from .models import (
        DatapathSpec,
        Fabric,
        FirmwarePolicy,
        HugePagePool,
        HugePages,
        Interface,
        InterfaceMatch,
        Model,
        ProfileBody,
        Roce,
        RoceEts,
        Storage,
        SysctlSetting,
        Topology,
    )

PROFILE_SCOPES = ("Profile", "ProfileBody")


roce_tos = derived.roce_tos
roce_mtu = derived.roce_mtu


# --------------------------------------------------------------------------- RoCE
@cross_check("Roce", "roce-priority-protected", reads=("priority", "pfc_priorities", "ecn"))
def check_roce_priority_protected(roce: Roce) -> Iterator[Issue]:
    """The RoCE priority has PFC on (lossless) or ECN on (lossy RoCE with DCQCN)."""
    if roce.priority not in roce.pfc_priorities and not roce.ecn:
        yield Issue(("pfc_priorities",),
                    f"RoCE priority {roce.priority} has PFC off and ECN off — traffic would be lossy",
                    f"enable PFC on {roce.priority} or set ecn: true")


@cross_check("Roce", "cnp-not-lossless", reads=("cnp", "pfc_priorities", "priority"))
def check_cnp_not_pfc(roce: Roce) -> Iterator[Issue]:
    """The CNP priority is not a PFC priority (CNPs must not be paused), and differs from RoCE's."""
    if roce.cnp.priority in roce.pfc_priorities:
        yield Issue(("cnp", "priority"),
                    f"CNP priority {roce.cnp.priority} has PFC on — congestion notifications could be paused",
                    f"use a priority without PFC for CNPs (default 6) or remove {roce.cnp.priority} "
                    "from pfc_priorities")
    elif roce.cnp.priority == roce.priority:
        yield Issue(("cnp", "priority"), f"CNP priority {roce.cnp.priority} equals the RoCE data priority",
                    "give CNPs their own priority (default 6)")


@cross_check("Roce", "pfc-priorities-unique", reads=("pfc_priorities",))
def check_pfc_unique(roce: Roce) -> Iterator[Issue]:
    """pfc_priorities lists each priority once."""
    if len(set(roce.pfc_priorities)) != len(roce.pfc_priorities):
        yield Issue(("pfc_priorities",), "a priority is listed twice", "list each priority once")


@cross_check("Roce", "dscp2prio-unique", reads=("dscp", "priority", "cnp", "dscp2prio"))
def check_dscp2prio_unique(roce: Roce) -> Iterator[Issue]:
    """Each DSCP maps to one priority: RoCE DSCP, CNP DSCP and extra dscp2prio entries agree."""
    if roce.dscp == roce.cnp.dscp:
        yield Issue(("cnp", "dscp"), f"CNP DSCP {roce.cnp.dscp} equals the RoCE DSCP",
                    "give CNPs their own DSCP (default 48)")
    for dscp, want, name in ((roce.dscp, roce.priority, "RoCE"), (roce.cnp.dscp, roce.cnp.priority, "CNP")):
        have = roce.dscp2prio.get(dscp)
        if have is not None and have != want:
            yield Issue(("dscp2prio", dscp),
                        f"DSCP {dscp} maps to priority {have} here but to {want} as the {name} DSCP",
                        f"remove the entry or map it to {want}")


@cross_check("Roce", "ets-bandwidth", reads=("ets", "priority"))
def check_ets(roce: Roce) -> Iterator[Issue]:
    """ETS bandwidths of the ets classes sum to 100, strict classes get 0, RoCE's class gets a share."""
    yield from _ets_issues(roce.ets, roce.priority)


def _ets_issues(ets: RoceEts, priority: int) -> Iterator[Issue]:
    total = sum(bw for bw, tsa in zip(ets.bw, ets.tsa, strict=True) if tsa == "ets")
    if total != 100:
        yield Issue(("ets", "bw"), f"ETS bandwidths of the ets traffic classes sum to {total}, not 100",
                    "adjust ets.bw so the ets classes add up to 100")
    for tc, (bw, tsa) in enumerate(zip(ets.bw, ets.tsa, strict=True)):
        if tsa == "strict" and bw:
            yield Issue(("ets", "bw", tc), f"traffic class {tc} is strict but has bandwidth {bw}",
                        "set its bw to 0 (strict classes are not shared)")
    tc = ets.prio_tc[priority]
    if ets.tsa[tc] == "ets" and ets.bw[tc] == 0:
        yield Issue(("ets", "bw", tc), f"traffic class {tc} carries RoCE priority {priority} but has 0% bandwidth",
                    "give the RoCE class a bandwidth share (e.g. 50)")


@cross_check("Roce", "roce-tos-consistent", reads=("tos", "dscp", "ecn"))
def check_tos(roce: Roce) -> Iterator[Issue]:
    """An explicit tos carries the RoCE DSCP and, with ECN on, ECT(0) (106 for DSCP 26, not 104)."""
    if roce.tos is None:
        return
    want = roce_tos(roce.dscp, roce.ecn)
    if roce.tos >> 2 != roce.dscp or (roce.ecn and roce.tos & 3 == 0):
        yield Issue(("tos",), f"tos {roce.tos} does not match DSCP {roce.dscp}"
                    + (" with ECN" if roce.ecn else ""),
                    f"use {want} (DSCP<<2 | ECT(0)) or leave tos unset to derive it")


# --------------------------------------------------------------------------- fabric
@cross_check("Fabric", "roce-settings-match-kind", reads=("roce", "kind", "purpose"))
def check_roce_kind(fabric: Fabric) -> Iterator[Issue]:
    """RoCE settings only on kind roce; rdma fabrics are roce or infiniband."""
    if fabric.roce is not None and fabric.kind != "roce":
        yield Issue(("roce",), f"RoCE settings on a fabric of kind {fabric.kind}",
                    "set kind: roce or remove the roce block")
    if fabric.purpose == "rdma" and fabric.kind == "ethernet":
        yield Issue(("kind",), "an rdma fabric of kind ethernet carries no RDMA", "set kind: roce or infiniband")


@cross_check("Fabric", "roce-mtu-possible", reads=("kind", "mtu"))
def check_roce_mtu(fabric: Fabric) -> Iterator[Issue]:
    """A RoCE fabric's MTU leaves room for the smallest RoCE MTU: 256 + 96 bytes of headers = 352
    (below it the kernel gives the link no RoCE MTU at all)."""
    if fabric.kind == "roce" and roce_mtu(fabric.mtu) is None:
        yield Issue(("mtu",), f"MTU {fabric.mtu} is below {derived.ROCE_MIN_LINK_MTU}: the kernel derives no "
                    "RoCE MTU from it, so RoCE cannot run on this fabric",
                    f"use an MTU of at least {derived.ROCE_MIN_LINK_MTU} (1500, or 4200/9000 for 4096-byte RoCE)")


@cross_check("Fabric", "management-not-rdma", reads=("purpose", "kind"))
def check_management(fabric: Fabric) -> Iterator[Issue]:
    """The management fabric is not an RDMA fabric (QoS and PFC changes could cut off Ansible)."""
    if fabric.purpose == "management" and fabric.kind != "ethernet":
        yield Issue(("kind",), f"the management fabric is of kind {fabric.kind}",
                    "keep management on an ethernet fabric and put RDMA on its own fabric")


@cross_check("Fabric", "subnets-valid", reads=("subnets",))
def check_subnets(fabric: Fabric) -> Iterator[Issue]:
    """Subnets are valid networks in CIDR form without host bits."""
    for index, text in enumerate(fabric.subnets):
        try:
            ipaddress.ip_network(text, strict=True)
        except ValueError as exc:
            yield Issue(("subnets", index), f"{text!r} is not a network: {exc}",
                        "write a network in CIDR form, e.g. 10.10.0.0/16")


# --------------------------------------------------------------------------- sysctl / hugepages
def _ints(value: str) -> list[int] | None:
    try:
        return [int(part) for part in value.split()]
    except ValueError:
        return None


@cross_check("SysctlSetting", "minimum-needs-integers", reads=("mode", "value"))
def check_sysctl_minimum(setting: SysctlSetting) -> Iterator[Issue]:
    """mode minimum compares numbers, so its value is one or more integers."""
    if setting.mode == "minimum" and _ints(setting.value) is None:
        yield Issue(("value",), f"{setting.value!r} is not numeric but mode is minimum",
                    "use mode: exact for non-numeric values")


@cross_check("HugePagePool", "pool-amount")
def check_pool_amount(pool: HugePagePool) -> Iterator[Issue]:
    """A pool gives exactly one of count, memory_share, per_node; even split needs count or share."""
    given = [name for name in ("count", "memory_share", "per_node") if getattr(pool, name) is not None]
    if len(given) != 1:
        yield Issue(("count",), f"pool {pool.size} gives {', '.join(given) or 'no amount'}",
                    "give exactly one of count, memory_share, per_node")
    if pool.per_node is not None and pool.numa_split == "even":
        yield Issue(("numa_split",), "numa_split: even with an explicit per_node", "remove numa_split")
    if pool.persist == "sysctl" and (pool.per_node is not None or pool.numa_split == "even"):
        yield Issue(("persist",), "vm.nr_hugepages cannot persist a per-NUMA split",
                    "use persist: boot_unit or cmdline (or auto)")


@cross_check("HugePages", "pools-and-mounts", reads=("pages", "mounts", "default_size"))
def check_hugepages(hp: HugePages) -> Iterator[Issue]:
    """One pool per page size; each mount's size has a pool; mount paths are unique;
    sysctl persists only the default size."""
    sizes = [pool.size for pool in hp.pages]
    for index, size in enumerate(sizes):
        if size in sizes[:index]:
            yield Issue(("pages", index, "size"), f"a second {size} pool", "merge the pools of one size")
    default = hp.default_size or "2M"
    for index, pool in enumerate(hp.pages):
        if pool.persist == "sysctl" and pool.size != default:
            yield Issue(("pages", index, "persist"),
                        f"vm.nr_hugepages persists only the default page size ({default})",
                        f"set default_size: {pool.size} or use persist: cmdline / boot_unit")
    paths: list[str] = []
    for index, mount in enumerate(hp.mounts):
        if mount.size not in sizes:
            yield Issue(("mounts", index, "size"), f"a hugetlbfs mount for {mount.size} pages but no {mount.size} pool",
                        f"add a {mount.size} pool under pages")
        if mount.path in paths:
            yield Issue(("mounts", index, "path"), f"{mount.path} is mounted twice", "use one path per mount")
        paths.append(mount.path)


# --------------------------------------------------------------------------- interfaces / firmware
@cross_check("InterfaceMatch", "match-one")
def check_match(match: InterfaceMatch) -> Iterator[Issue]:
    """A match names exactly one of name, mac, pci, driver."""
    given = [k for k in ("name", "mac", "pci", "driver") if getattr(match, k) is not None]
    if len(given) != 1:
        yield Issue((), f"match gives {', '.join(given) or 'nothing'}", "give exactly one of name, mac, pci, driver")


@cross_check("Interface", "name-or-match", reads=("name", "match", "mtu", "mtu_override"))
def check_interface(iface: Interface) -> Iterator[Issue]:
    """An interface gives name or match, not both; mtu_override needs an mtu."""
    if (iface.name is None) == (iface.match is None):
        yield Issue(("name",), "give either name or match" if iface.name is None else "both name and match are set",
                    "use name: for a known name, match: {mac|pci|driver} otherwise")
    if iface.mtu_override and iface.mtu is None:
        yield Issue(("mtu_override",), "mtu_override without an mtu", "set mtu or remove mtu_override")


def interface_key(iface: Interface) -> tuple[str, str]:
    if iface.name is not None:
        return ("name", iface.name)
    for key in ("name", "mac", "pci", "driver"):
        value = getattr(iface.match, key, None)
        if value is not None:
            return (key, value.lower() if key == "mac" else value)
    return ("", "")


def _interfaces_issues(interfaces: list[Interface] | None) -> Iterator[Issue]:
    seen: dict[tuple[str, str], int] = {}
    for index, iface in enumerate(interfaces or []):
        key = interface_key(iface)
        if key in seen:
            first = seen[key]
            yield Issue(("interfaces", index),
                        f"{key[0]} {key[1]} is already listed as interfaces[{first}] (fabric {iface.fabric} "
                        f"vs {(interfaces or [])[first].fabric})",
                        "one interface carries one fabric; remove one entry")
        seen.setdefault(key, index)


@cross_check("FirmwarePolicy", "firmware-rule")
def check_firmware(policy: FirmwarePolicy) -> Iterator[Issue]:
    """A policy matches on driver and/or PSID and gives a min_version or an allowed list (not both)."""
    if policy.driver is None and policy.psid is None:
        yield Issue(("psid",), "policy matches no device", "set psid (preferred: the board id) and/or driver")
    if (policy.min_version is None) == (not policy.allowed):
        yield Issue(("min_version",), "give either min_version or allowed" if policy.min_version is None
                    else "both min_version and allowed are set", "use one of them")


# --------------------------------------------------------------------------- topology
@cross_check("Topology", "topology-consistent", reads=("gpus", "rdma_nics", "gpudirect"))
def check_topology(topo: Topology) -> Iterator[Issue]:
    """GPUDirect needs GPUs, and GPUDirect RDMA needs RDMA NICs, where the counts are given."""
    wanted = topo.gpudirect or []
    if wanted and topo.gpus == 0:
        yield Issue(("gpudirect",), "GPUDirect %s is expected on a node with gpus: 0" % "/".join(wanted),
                    "drop gpudirect, or set gpus to the node's GPU count")
    if "rdma" in wanted and topo.rdma_nics == 0:
        yield Issue(("gpudirect",), "GPUDirect RDMA is expected on a node with rdma_nics: 0",
                    "drop rdma from gpudirect, or set rdma_nics to the node's RDMA NIC count")


# --------------------------------------------------------------------------- storage
@cross_check("Storage", "storage-devices")
def check_storage(storage: Storage) -> Iterator[Issue]:
    """devices or select (not both); RAID0 needs >= 2 devices; a device is used once; the reserve fits."""
    if (storage.devices is None) == (storage.select is None):
        yield Issue(("devices",), "give either devices or select", "list devices by /dev/disk/by-id or select them")
    count = len(storage.devices) if storage.devices is not None else (storage.select.count if storage.select else None)
    if storage.devices is not None:
        seen: set[str] = set()
        for index, dev in enumerate(storage.devices):
            if dev in seen:
                yield Issue(("devices", index), f"{dev} is listed twice", "use each device once")
            seen.add(dev)
        if not storage.devices:
            yield Issue(("devices",), "no devices", "list at least one device")
    if storage.raid is not None and count is not None and count < 2:
        yield Issue(("raid",), f"RAID0 needs at least 2 devices, got {count}", "add a device or set raid: null")
    if storage.raid is None and count is not None and count > 1:
        yield Issue(("raid",), f"{count} devices but no raid", "set raid: {level: 0} or use a single device")
    if storage.select is not None and storage.select.min_size is not None and storage.reserve:
        capacity = storage.select.min_size * (storage.select.count or 1)
        if storage.reserve >= capacity:
            yield Issue(("reserve",), f"reserve {storage.reserve} bytes does not fit {capacity} bytes of devices",
                        "lower reserve")
    if storage.filesystem.type == "xfs" and len(storage.filesystem.label) > 12:
        yield Issue(("filesystem", "label"), "an XFS label has at most 12 characters", "shorten the label")
    dirs: set[str] = set()
    for index, directory in enumerate(storage.directories):
        if directory.path in dirs:
            yield Issue(("directories", index, "path"), f"{directory.path} is listed twice", "list it once")
        dirs.add(directory.path)
    for index, serial in enumerate(storage.wipe_serials):
        if serial in storage.wipe_serials[:index]:
            yield Issue(("wipe_serials", index), f"{serial} is listed twice", "list it once")


# --------------------------------------------------------------------------- models
@cross_check("Model", "model-files", reads=("files", "manifest", "manifest_sha256"))
def check_model_files(model: Model) -> Iterator[Issue]:
    """A model gives files or a manifest (not both); manifest_sha256 needs a manifest; file paths are
    unique, none is the directory of another, and none is another's staging name (its path + '.part')."""
    label = f"{model.name}@{model.version}"
    if bool(model.files) == (model.manifest is not None):
        given = "both files and a manifest" if model.files else "neither files nor a manifest"
        yield Issue(("files",), f"model {label} gives " + given,
                    "list files with their sha256, or name a sha256sum manifest below the source")
    if model.manifest_sha256 is not None and model.manifest is None:
        yield Issue(("manifest_sha256",), "manifest_sha256 without a manifest", "set manifest or remove it")
    seen: dict[str, int] = {}
    for index, item in enumerate(model.files):
        if item.path in seen:
            yield Issue(("files", index, "path"), f"{item.path} is already listed as files[{seen[item.path]}]",
                        "list each file once")
        seen.setdefault(item.path, index)
    for path in sorted(seen):
        if path + ".part" in seen:
            yield Issue(("files", seen[path + ".part"], "path"), f"{path}.part is the staging name of file {path}",
                        "rename one of them; the node stages a file as <path>.part")
        parts = path.split("/")
        parent = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in seen), None)
        if parent is not None:
            yield Issue(("files", seen[path], "path"), f"{path} is below file {parent}",
                        "rename one of them; a file cannot also be a directory")


@cross_check("Model", "model-targets", reads=("groups", "hosts"))
def check_model_targets(model: Model) -> Iterator[Issue]:
    """A model lists each group and host once."""
    for what, items in (("groups", model.groups), ("hosts", model.hosts)):
        seen: set[str] = set()  # not items[:index]: a model may list 100,000 hosts
        for index, name in enumerate(items):
            if name in seen:
                yield Issue((what, index), f"{name} is listed twice", "list it once")
            seen.add(name)


# --------------------------------------------------------------------------- profiles
def _kernel_arg_issues(args: list[str] | None) -> Iterator[Issue]:
    seen: dict[str, str] = {}
    for index, arg in enumerate(args or []):
        key, _sep, value = arg.partition("=")
        if key in seen and seen[key] != value and key not in ("hugepagesz", "hugepages"):
            yield Issue(("kernel_args", index), f"{key} is set twice ({seen[key]!r} and {value!r})",
                        "keep one value")
        seen.setdefault(key, value)


@cross_check("Profile", "profile-consistent", reads=("interfaces", "kernel_args"))
@cross_check("ProfileBody", "profile-consistent", reads=("interfaces", "kernel_args"))
def check_profile(body: ProfileBody) -> Iterator[Issue]:
    """Within one profile: one interface carries one fabric; kernel arguments do not contradict each other."""
    yield from _interfaces_issues(body.interfaces)
    yield from _kernel_arg_issues(body.kernel_args)


# --------------------------------------------------------------------------- whole spec
@cross_check("DatapathSpec", "names-unique", reads=("fabrics.<item>.name", "profiles.<item>.name"))
def check_names(spec: DatapathSpec) -> Iterator[Issue]:
    """Fabric and profile names are unique."""
    for what, items in (("fabrics", [f.name for f in spec.fabrics]), ("profiles", [p.name for p in spec.profiles])):
        names: dict[str, int] = {}
        for index, name in enumerate(items):
            if name in names:
                yield Issue((what, index, "name"), f"name {name!r} is already used by {what}[{names[name]}]",
                            "use a unique name")
            names.setdefault(name, index)


@cross_check("DatapathSpec", "models-unique", reads=("models.<item>.name", "models.<item>.version"))
def check_models_unique(spec: DatapathSpec) -> Iterator[Issue]:
    """Each model version (name@version) is listed once."""
    seen: dict[tuple[str, str], int] = {}
    for index, model in enumerate(spec.models):
        key = (model.name, model.version)
        if key in seen:
            yield Issue(("models", index, "version"),
                        f"{model.name}@{model.version} is already listed as models[{seen[key]}]",
                        "list each version once; give it more groups or hosts instead")
        seen.setdefault(key, index)


@cross_check("DatapathSpec", "subnets-disjoint", reads=("fabrics.<item>.name", "fabrics.<item>.subnets"))
def check_overlap(spec: DatapathSpec) -> Iterator[Issue]:
    """Subnets of different fabrics do not overlap."""
    nets: list[tuple[Any, int, int]] = []
    for fi, fabric in enumerate(spec.fabrics):
        for si, text in enumerate(fabric.subnets):
            try:
                nets.append((ipaddress.ip_network(text, strict=True), fi, si))
            except ValueError:
                continue
    for i, (net, fi, si) in enumerate(nets):
        for other, fj, _index in nets[:i]:
            if fj != fi and net.version == other.version and net.overlaps(other):
                yield Issue(("fabrics", fi, "subnets", si),
                            f"{net} overlaps {other} of fabric {spec.fabrics[fj].name}",
                            "give every fabric its own address range")


def _layers(spec: DatapathSpec) -> Iterator[tuple[tuple[Any, ...], ProfileBody]]:
    for index, prof in enumerate(spec.profiles):
        yield ("profiles", index), prof
    for host, body in spec.hosts.items():
        yield ("hosts", host), body


@cross_check("DatapathSpec", "interface-fabric", reads=(
    "fabrics.*.name", "profiles.<item>.interfaces", "hosts.<item>.interfaces"))
def check_interface_fabric_defined(spec: DatapathSpec) -> Iterator[Issue]:
    """An interface's fabric exists (reads only the fabrics' names: a fabric whose MTU or kind is broken
    still has its name, so this runs in the same run as that error)."""
    fabrics = {f.name for f in spec.fabrics}
    for base, body in _layers(spec):
        for index, iface in enumerate(body.interfaces or []):
            if iface.fabric not in fabrics:
                yield Issue((*base, "interfaces", index, "fabric"), f"fabric {iface.fabric!r} is not defined",
                            f"use one of {sorted(fabrics)} or add it under fabrics")


@cross_check("DatapathSpec", "interface-mtu", reads=(
    "fabrics.*.name", "fabrics.*.mtu", "fabrics.*.kind", "profiles.<item>.interfaces", "hosts.<item>.interfaces"))
def check_interface_fabrics(spec: DatapathSpec) -> Iterator[Issue]:
    """An interface's MTU differs from its fabric's only with mtu_override: true, and leaves RoCE room on a
    RoCE fabric."""
    fabrics = {f.name: f for f in spec.fabrics}
    for base, body in _layers(spec):
        for index, iface in enumerate(body.interfaces or []):
            fabric = fabrics.get(iface.fabric)
            if fabric is None:
                continue  # interface-fabric says so
            elif iface.mtu is not None and iface.mtu != fabric.mtu and not iface.mtu_override:
                yield Issue((*base, "interfaces", index, "mtu"),
                            f"MTU {iface.mtu} differs from fabric {fabric.name}'s MTU {fabric.mtu}",
                            "use the fabric's MTU, or set mtu_override: true if this is on purpose")
            elif iface.mtu is not None and fabric.kind == "roce" and roce_mtu(iface.mtu) is None:
                yield Issue((*base, "interfaces", index, "mtu"),
                            f"MTU {iface.mtu} on RoCE fabric {fabric.name} is below {derived.ROCE_MIN_LINK_MTU}: "
                            "the kernel derives no RoCE MTU from it",
                            f"use an MTU of at least {derived.ROCE_MIN_LINK_MTU}")


_LAYER_READS = ("node", "sysctl", "hugepages", "kernel_args", "storage", "k8s")


@cross_check("Profile", "layer-settings", reads=_LAYER_READS)
@cross_check("ProfileBody", "layer-settings", reads=_LAYER_READS)
def check_layers(body: ProfileBody) -> Iterator[Issue]:
    """Each profile and host override is consistent on its own (sysctl relations, mounts, HugePages).

    The same node checks run again on every host's merged settings when an inventory is planned
    (``datapath validate INVENTORY``, the node_plan filter), where they name the host.
    """
    from .merge import Effective, apply_layer
    eff = Effective()
    apply_layer(eff, body, ("datapath", ()), "")
    yield from (_as_issue(o, m, h) for o, m, h in effective_issues(eff, None))


def _as_issue(origin: Origin, message: str, hint: str) -> Issue:
    root, path = origin
    if root != "datapath":
        return Issue(("builtin_profile",), f"{message} (from {root})", hint)
    return Issue(path, message, hint)


# --------------------------------------------------------------------------- node checks
SYSCTL_RELATIONS = (
    ("net.ipv4.tcp_rmem", 2, "net.core.rmem_max"),
    ("net.ipv4.tcp_wmem", 2, "net.core.wmem_max"),
    ("net.core.rmem_default", 0, "net.core.rmem_max"),
    ("net.core.wmem_default", 0, "net.core.wmem_max"),
    ("net.ipv4.neigh.default.gc_thresh1", 0, "net.ipv4.neigh.default.gc_thresh2"),
    ("net.ipv4.neigh.default.gc_thresh2", 0, "net.ipv4.neigh.default.gc_thresh3"),
)
TRIPLES = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_mem", "net.ipv4.udp_mem")


def _pick(a: Origin, b: Origin) -> Origin:
    """Report at the user's key rather than at the built-in one."""
    return a if a[0] == "datapath" or b[0] != "datapath" else b


def effective_issues(eff: Effective, host: str | None) -> Iterator[tuple[Origin, str, str]]:
    """Checks on a node's merged settings: sysctl relations, mounts, HugePages vs memory, cmdline."""
    sysctl = eff.sysctl
    for key in TRIPLES:
        if key in sysctl:
            setting, origin = sysctl[key]
            nums = _ints(setting.value)
            if nums is None or len(nums) != 3 or not nums[0] <= nums[1] <= nums[2]:
                yield ((origin[0], (*origin[1], "value")), f"{key} {setting.value!r} is not 'min default max'",
                       "give three integers, min <= default <= max")
    for key, pos, limit in SYSCTL_RELATIONS:
        if key in sysctl and limit in sysctl:
            (s_a, o_a), (s_b, o_b) = sysctl[key], sysctl[limit]
            a, b = _ints(s_a.value), _ints(s_b.value)
            if a and b and len(a) > pos and a[pos] > b[0]:
                yield (_pick(o_a, o_b), f"{key} ({a[pos]}) is larger than {limit} ({b[0]})",
                       f"raise {limit} to at least {a[pos]} or lower {key}")
    mounts: list[tuple[str, Origin]] = []
    if eff.storage is not None:
        storage, origin = eff.storage
        mounts.append((storage.mount.path, (origin[0], (*origin[1], "mount", "path"))))
    if eff.hugepages is not None:
        hp, origin = eff.hugepages
        mounts.extend((m.path, (origin[0], (*origin[1], "mounts", i, "path"))) for i, m in enumerate(hp.mounts))
    for i, (path, origin) in enumerate(mounts):
        for other, _origin in mounts[:i]:
            if path == other or path.startswith(other + "/") or other.startswith(path + "/"):
                yield (origin, f"mount point {path} collides with {other}", "use separate, non-nested mount points")
    if eff.local_volume_class is not None and eff.storage is None:
        yield (eff.local_volume_class[1], "local_volume_class without a storage section",
               "add storage (the NVMe cache) or remove local_volume_class")
    if eff.hugepages is not None:
        yield from _hugepage_node_issues(eff, host)


def _hugepage_node_issues(eff: Effective, host: str | None) -> Iterator[tuple[Origin, str, str]]:
    if eff.hugepages is None:
        return
    hp, origin = eff.hugepages
    total = 0
    for index, pool in enumerate(hp.pages):
        where = (origin[0], (*origin[1], "pages", index))
        if pool.per_node is not None and eff.numa_nodes is not None:
            for node in sorted(pool.per_node):
                if node >= eff.numa_nodes:
                    yield ((where[0], (*where[1], "per_node", node)),
                           f"NUMA node {node} does not exist (the node has {eff.numa_nodes})",
                           "use nodes 0.." + str(eff.numa_nodes - 1))
        if pool.memory_share is not None and eff.memory is None and host is not None:
            yield ((where[0], (*where[1], "memory_share")), "memory_share needs the node's memory",
                   "set node.memory in a profile or gather facts (ansible_memtotal_mb)")
        total += pool_count(pool, eff.memory) * PAGE_BYTES[pool.size]
    if eff.memory is not None and total > hp.max_memory_share * eff.memory:
        yield ((origin[0], (*origin[1], "pages")),
               f"HugePages take {total} bytes, more than {hp.max_memory_share:g} of the node's {eff.memory} bytes",
               "lower the page counts or raise hugepages.max_memory_share")
    boot_pools = any(p.persist in ("cmdline", "auto") and p.size == "1G" for p in hp.pages)
    if eff.kernel_args is not None and (hp.default_size or boot_pools):
        args, korigin = eff.kernel_args
        for index, arg in enumerate(args):
            if arg.partition("=")[0] in ("hugepagesz", "hugepages", "default_hugepagesz"):
                yield ((korigin[0], (*korigin[1], index)), f"{arg} is also derived from hugepages",
                       "remove it from kernel_args; the hugepages section sets it")


def pool_count(pool: HugePagePool, memory: int | None) -> int:
    if pool.count is not None:
        return pool.count
    if pool.per_node is not None:
        return sum(pool.per_node.values())
    if pool.memory_share is not None and memory is not None:
        return int(pool.memory_share * memory) // PAGE_BYTES[pool.size]
    return 0
