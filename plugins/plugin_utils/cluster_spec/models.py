"""The cluster data-path spec (key ``datapath``), version 1: one pydantic model per concept.

Every model forbids unknown keys and uses strict scalar types. Cross-checks that involve more
than one field are named functions in :mod:`.checks`, run by the model they belong to.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from ._pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, model_validator
from ._types import (
    DevicePath,
    DnsName,
    DriverName,
    Dscp,
    FabricName,
    FileMode,
    HostName,
    HugeMountPath,
    IfName,
    KernelArg,
    LabelKey,
    LabelValue,
    MacAddress,
    ModelFilePath,
    ModelName,
    ModelSource,
    MountOption,
    MountPath,
    Mtu,
    PageSize,
    PciAddress,
    Percent,
    Priority,
    ProfileName,
    RelPath,
    Serial,
    Sha256,
    Share,
    Size,
    SysctlKey,
    TrafficClass,
    UserName,
    Version,
    parse_size,
)
from .registry import run_checks
from .roce_presets import apply_preset

Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]


def _no_bool(value: Any) -> Any:
    """Literal[1] takes True (True == 1 in Python); YAML's `true` is not the integer 1."""
    if isinstance(value, bool):
        raise ValueError("must be the integer 1, not a boolean")
    return value


class SpecModel(BaseModel):
    """Base: unknown keys are errors, values are not coerced, models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, hide_input_in_errors=False,
                              use_attribute_docstrings=True)

    @model_validator(mode="after")
    def _cross_checks(self) -> Any:
        return run_checks(type(self).__name__, self)


# --------------------------------------------------------------------------- fabrics
class RoceCnp(SpecModel):
    """Congestion Notification Packets (DCQCN): their own DSCP and priority, never lossless."""

    dscp: Dscp = 48
    """DSCP of CNPs (NVIDIA Cumulus RoCE default 48)."""
    priority: Priority = 6
    """Priority of CNPs (NVIDIA Cumulus RoCE default 6, strict priority)."""


def _default_prio_tc() -> list[int]:
    return list(range(8))


def _default_tsa() -> list[Literal["ets", "strict", "vendor"]]:
    return ["ets", "ets", "ets", "ets", "ets", "ets", "strict", "ets"]


class RoceEts(SpecModel):
    """ETS: priority -> traffic class, scheduling (tsa) and bandwidth share per class."""

    prio_tc: Annotated[list[TrafficClass], Field(min_length=8, max_length=8)] = Field(
        default_factory=_default_prio_tc)
    """Traffic class for priorities 0..7."""
    tsa: Annotated[list[Literal["ets", "strict", "vendor"]], Field(min_length=8, max_length=8)] = Field(
        default_factory=_default_tsa)
    """Transmission selection per traffic class 0..7."""
    bw: Annotated[list[Percent], Field(min_length=8, max_length=8)] = Field(
        default_factory=lambda: [10, 10, 10, 50, 10, 0, 0, 10])
    """Bandwidth percent per traffic class 0..7; the ETS classes sum to 100, strict ones are 0."""


def _int_keys(value: Any) -> Any:
    # JSON and some Ansible paths turn integer mapping keys into strings; accept "26" too.
    if isinstance(value, dict):
        return {int(k) if isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 4 else k: v
                for k, v in value.items()}
    return value


class Roce(SpecModel):
    """Lossless (PFC) or lossy (ECN only) RoCE v2 settings for every interface on the fabric."""

    mode: Literal["v2"] = "v2"
    """RoCE mode written to rdma_cm default_roce_mode; only v2 (routable) is supported."""
    trust: Literal["dscp", "pcp"] = "dscp"
    """Which header field the NIC trusts to classify traffic."""
    dscp: Dscp = 26
    """DSCP of RoCE data traffic (NVIDIA/Cumulus default 26)."""
    priority: Priority = 3
    """Priority of RoCE data traffic (default 3)."""
    pfc_priorities: Annotated[list[Priority], Field(max_length=8)] = Field(default_factory=lambda: [3])
    """Priorities with Priority Flow Control on (lossless)."""
    ecn: Bool = True
    """ECN marking / DCQCN on for the RoCE priority."""
    cnp: RoceCnp = Field(default_factory=RoceCnp)
    tos: Annotated[int, Strict(), Field(ge=0, le=255)] | None = None
    """rdma_cm default_roce_tos; derived as DSCP<<2 | ECT(0) (106 for DSCP 26 with ECN) when null."""
    dscp2prio: Annotated[dict[Dscp, Priority], BeforeValidator(_int_keys)] = Field(default_factory=dict)
    """Extra DSCP -> priority entries; the RoCE and CNP entries are always added."""
    ets: RoceEts = Field(default_factory=RoceEts)
    preset: Literal["nvidia", "sonic"] | None = None
    """A built-in RoCE preset whose classification matches a switch family's default maps (docs/spec.md
    "Built-in RoCE presets"): nvidia (NVIDIA Cumulus NVUE RoCE defaults, the values without a preset) or
    sonic (SONiC's default AZURE maps: DSCP 3, priority 3). Keys given here win over the preset's."""

    @model_validator(mode="before")
    @classmethod
    def _fill_preset(cls, data: Any) -> Any:
        return apply_preset(data)


SwitchStatePath = Annotated[str, Strict(), Field(
    pattern=r"^[^\x00-\x1f\x7f]{1,4096}$",
    description="A file or directory path; a relative path is relative to the inventory directory.")]
PortPattern = Annotated[str, Strict(), Field(
    pattern=r"^[A-Za-z0-9_./:*?\[\]-]{1,64}$",
    description="A switch port name or a shell-style pattern, e.g. Ethernet0, swp1*, Eth1/*.")]


class FabricSwitch(SpecModel):
    """The fabric's switches as their own recorded configuration (no switch login): verify and the audit
    compare it with the fabric's RoCE settings (qos_consistency; docs/network.md "Host and switch agree")."""

    os: Literal["cumulus-nvue", "sonic", "onyx"]
    """The switches' network OS: cumulus-nvue, sonic or onyx; selects the parser of state and the default
    maps `datapath validate` warns about when state is not given."""
    state: SwitchStatePath | None = None
    """The switches' recorded configuration: a file (one switch) or a directory with one file per switch
    (the file name, without its extension, names the switch); relative to the inventory directory. SONiC:
    config_db.json; cumulus-nvue: the text of `nv show qos roce` (and `nv show interface`); onyx: the text
    of `show dcb priority-flow-control` (docs/network.md lists what each parser reads). null: only the
    default-map warning of `datapath validate`."""
    ports: Annotated[list[PortPattern], Field(max_length=256)] | None = None
    """The switch ports the fabric's nodes use (names or shell patterns); null: every port of the state."""
    dcbx: Bool = False
    """The switch ports send DCBX in LLDP: verify and the audit capture one LLDP frame on each RoCE interface
    of the fabric (module lldp_dcbx) and compare what the switch advertises with the plan."""


class RailSubnet(SpecModel):
    """One rail of a per-rail-subnet fabric: the subnet of rail i on every host (and its gateway when routed)."""

    subnet: Str
    """The rail's network in CIDR form (e.g. 10.200.1.0/24); inside one of the fabric's subnets."""
    gateway: Str | None = None
    """The rail's router inside the subnet; the rail's table then reaches the fabric's other subnets through it."""


class Fabric(SpecModel):
    """A network the nodes attach to."""

    name: FabricName
    """Unique name; interfaces refer to it."""
    purpose: Literal["management", "storage", "rdma", "service"]
    kind: Literal["ethernet", "roce", "infiniband"] = "ethernet"
    mtu: Mtu = 1500
    """MTU every interface on this fabric uses unless it overrides it on purpose."""
    subnets: Annotated[list[Str], Field(max_length=64)] = Field(default_factory=list)
    """IPv4/IPv6 networks in CIDR form; networks of different fabrics must not overlap."""
    roce: Roce | None = None
    """RoCE settings; only for kind roce (defaults apply when omitted)."""
    description: Annotated[str, Strict(), Field(max_length=200)] | None = None
    addressing: Literal["shared-subnet", "per-rail-subnet"] = "shared-subnet"
    """How the host's NICs (rails) on this fabric are addressed: shared-subnet, every rail in the fabric's
    subnets; per-rail-subnet, rail i in rails[i].subnet (docs/network.md, "Several NICs on one fabric")."""
    rails: Annotated[list[RailSubnet], Field(max_length=16)] = Field(default_factory=list)
    """per-rail-subnet only: the subnet (and gateway) of rail0, rail1, ... in this order."""
    switch: FabricSwitch | None = None
    """The fabric's switches (OS, recorded state, ports, DCBX): host and switch checked against each other."""


# --------------------------------------------------------------------------- node settings
def _sysctl_shorthand(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ({"value": v} if isinstance(v, (int, str)) and not isinstance(v, bool) else v)
                for k, v in value.items()}
    return value


def _sysctl_value(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


class SysctlSetting(SpecModel):
    """One kernel parameter. Shorthand: ``key: value`` means an exact value."""

    value: Annotated[str, BeforeValidator(_sysctl_value, json_schema_input_type=int | str), Strict(),
                     Field(pattern=r"^-?[0-9A-Za-z_.:/ -]{1,256}$")]
    """Value; integers or space-separated integers (e.g. '4096 131072 16777216')."""
    mode: Literal["exact", "minimum"] = "exact"
    """minimum: only raise (element-wise for multi-value keys), never lower a larger value."""
    ignore_missing: Bool = False
    """Do not fail when the key does not exist on the node's kernel."""
    source: Annotated[str, Strict(), Field(max_length=300)] | None = None
    """Where the value comes from (shown in docs)."""


SysctlMap = Annotated[dict[SysctlKey, SysctlSetting | None],
                      BeforeValidator(_sysctl_shorthand,
                                      json_schema_input_type=dict[str, int | str | SysctlSetting | None])]


class HugePagePool(SpecModel):
    """A pool of HugePages of one size: ``count``, a ``memory_share`` or an explicit ``per_node``."""

    size: PageSize
    count: Annotated[int, Strict(), Field(ge=0, le=2**40)] | None = None
    """Number of pages (total over all NUMA nodes)."""
    memory_share: Share | None = None
    """Share of node memory (0-1] to reserve as pages of this size; needs the node's memory."""
    per_node: Annotated[dict[Annotated[int, Field(ge=0, le=1023)], Annotated[int, Strict(), Field(ge=0, le=2**40)]],
                        BeforeValidator(_int_keys)] | None = None
    """Pages per NUMA node, e.g. {0: 4, 1: 4}."""
    numa_split: Literal["kernel", "even"] = "kernel"
    """kernel: let the kernel spread the pages; even: request the same count on every NUMA node."""
    persist: Literal["auto", "sysctl", "cmdline", "boot_unit"] = "auto"
    """How the pool survives a reboot; auto: 1G -> cmdline, per-node 2M -> boot_unit, else sysctl."""


class HugeMount(SpecModel):
    """A hugetlbfs mount for one page size."""

    size: PageSize
    path: HugeMountPath
    owner: UserName = "root"
    group: UserName = "root"
    mode: FileMode = "0770"


class HugePages(SpecModel):
    """HugePage pools and hugetlbfs mounts."""

    default_size: PageSize | None = None
    """default_hugepagesz= on the kernel command line (needs a reboot)."""
    max_memory_share: Annotated[float, Strict(), Field(gt=0, le=0.95, allow_inf_nan=False)] = 0.5
    """Upper bound of all pools together as a share of node memory."""
    pages: Annotated[list[HugePagePool], Field(max_length=2)] = Field(default_factory=list)
    mounts: Annotated[list[HugeMount], Field(max_length=8)] = Field(default_factory=list)


class Thp(SpecModel):
    """Transparent HugePages (sysfs /sys/kernel/mm/transparent_hugepage); null leaves it as is."""

    enabled: Literal["always", "madvise", "never"] | None = None
    defrag: Literal["always", "defer", "defer+madvise", "madvise", "never"] | None = None


class InterfaceMatch(SpecModel):
    """How to find the NIC: exactly one of name, mac, pci, driver."""

    name: IfName | None = None
    mac: MacAddress | None = None
    pci: PciAddress | None = None
    driver: DriverName | None = None


class Interface(SpecModel):
    """A NIC and the fabric it carries. Give ``name`` or ``match``."""

    name: IfName | None = None
    """Interface name (shorthand for match: {name: ...})."""
    match: InterfaceMatch | None = None
    fabric: FabricName
    mtu: Mtu | None = None
    """Defaults to the fabric's MTU."""
    mtu_override: Bool = False
    """Set true when mtu differs from the fabric's on purpose."""
    bond: IfName | None = None
    """The bond this NIC is a member of. The kernel gives members the bond's MTU, so the bond is listed too,
    with the MTU; the member's own entry (for its QoS, say) has the same MTU or none."""
    members: Annotated[list[IfName], Field(max_length=64)] = Field(default_factory=list)
    """For a bond: the names of its member NICs (their MTU follows the bond's)."""
    address: Str | None = None
    """The interface's address on its fabric (e.g. 10.100.0.11, optionally with /prefix), usually in
    hosts.<host>; the host variable datapath_addresses wins; null: read from the node."""


class FirmwarePolicy(SpecModel):
    """NIC firmware compliance: a minimum version or an allowed list, per driver and/or PSID."""

    driver: DriverName | None = None
    psid: Annotated[str, Strict(), Field(pattern=r"^[A-Za-z0-9_]{4,32}$")] | None = None
    """Board id (PSID), e.g. MT_0000000838; match on it, never on the product name."""
    min_version: Version | None = None
    allowed: Annotated[list[Version], Field(max_length=64)] = Field(default_factory=list)


NvParamName = Annotated[str, Strict(), Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\[[0-9]{1,4}\])?$",
                                             description="An mlxconfig parameter name, e.g. PCI_ATOMIC_MODE or "
                                                         "ESWITCH_HAIRPIN_DESCRIPTORS[2].")]
NvParamValue = (Annotated[bool, Strict()] | Annotated[int, Strict(), Field(ge=0, le=2**32 - 1)]
                | Annotated[str, Strict(), Field(pattern=r"^[A-Za-z0-9_.:+-]{1,64}$")])


class NicSriov(SpecModel):
    """SR-IOV in the NIC's firmware: SRIOV_EN and NUM_OF_VFS."""

    enabled: Bool
    """SRIOV_EN."""
    num_vfs: Annotated[int, Strict(), Field(ge=0, le=1024)] | None = None
    """NUM_OF_VFS (the VFs the firmware offers per PF); required when enabled, 0 or null when not."""


class NicConfig(SpecModel):
    """Settings a NIC keeps in firmware (non-volatile, applied at the next boot), for the NICs an entry
    matches (module nic_config, docs/network.md). Give psid, part_number and/or driver; the most
    specific matching entry wins (PSID, then part number, then driver)."""

    psid: Annotated[str, Strict(), Field(pattern=r"^[A-Za-z0-9_]{4,32}$")] | None = None
    """Board id (PSID), e.g. MT_0000000838: the NICs this entry is for."""
    part_number: Annotated[str, Strict(), Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{2,63}$")] | None = None
    """Part number as mlxconfig's Name: line shows it, with or without the board revision (MCX755106AS-HEAT)."""
    driver: DriverName | None = None
    """Kernel driver, e.g. mlx5_core."""
    link_type: Literal["eth", "ib"] | None = None
    """LINK_TYPE_P<n> of every port (VPI cards); null: left as it is."""
    sriov: NicSriov | None = None
    """SRIOV_EN and NUM_OF_VFS; null: left as they are."""
    ats: Bool | None = None
    """ATS_ENABLED (Address Translation Services; false for GPUDirect RDMA on bare metal); null: left as it is."""
    max_read_request: Literal[128, 256, 512, 1024, 2048, 4096] | None = None
    """PCIe Max Read Request Size of each function in bytes. Not a firmware setting: set at run time,
    lost at a reboot, set again by the next site.yml run."""
    roce_fabric: FabricName | None = None
    """A RoCE fabric whose roce section gives ROCE_CC_PRIO_MASK_P<n> (its ECN priorities), CNP_DSCP_P<n>
    and CNP_802P_PRIO_P<n> (its cnp), so that they cannot disagree with roce_qos; null: left as they are."""
    raw: dict[NvParamName, NvParamValue] = Field(default_factory=dict)
    """Further mlxconfig parameters by name (NAME or NAME[index]); none may be one an intent above sets."""
    firmware_reset: Bool = False
    """Run mlxfwreset after a change, for devices a warm reboot does not apply (e.g. some DGX systems);
    never on a NIC that carries the Ansible connection."""


class DeviceSelect(SpecModel):
    """Select NVMe namespaces by property instead of by path."""

    model: Annotated[str, Strict(), Field(pattern=r"^[A-Za-z0-9 _.*?-]{1,64}$")] | None = None
    """Model glob, e.g. 'SAMSUNG MZWLO3T8*'."""
    min_size: Size | None = None
    transport: Literal["pcie", "tcp", "rdma", "fc"] | None = "pcie"
    count: Annotated[int, Strict(), Field(ge=1, le=64)] | None = None
    """Exact number of devices expected; null: all that match."""


class Raid(SpecModel):
    """Software RAID (md) across the devices."""

    level: Literal[0] = 0
    chunk_kib: Annotated[int, Strict(), Field(ge=4, le=65536)] = 512
    name: Annotated[str, Strict(), Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")] = "md-cache"


class Filesystem(SpecModel):
    """Filesystem created on the array or device (only on a device listed for wiping or empty)."""

    type: Literal["xfs", "ext4"] = "xfs"
    label: Annotated[str, Strict(), Field(pattern=r"^[A-Za-z0-9_-]{1,16}$")] = "model-cache"


class StorageMount(SpecModel):
    """Where and how the cache is mounted."""

    path: MountPath
    options: Annotated[list[MountOption], Field(max_length=32)] = Field(
        default_factory=lambda: ["noatime", "nodiratime"])


class Directory(SpecModel):
    """A directory created below the mount point."""

    path: RelPath
    """Relative to the mount point."""
    owner: UserName = "root"
    group: UserName = "root"
    mode: FileMode = "0755"


class Storage(SpecModel):
    """Local NVMe model cache: devices, optional RAID0, filesystem, mount, directories."""

    devices: Annotated[list[DevicePath], Field(max_length=64)] | None = None
    select: DeviceSelect | None = None
    raid: Raid | None = None
    """null: a single device."""
    filesystem: Filesystem = Field(default_factory=Filesystem)
    mount: StorageMount
    directories: Annotated[list[Directory], Field(max_length=256)] = Field(default_factory=list)
    reserve: Size = 0
    """Space kept free for the system (bytes or '10GiB')."""
    wipe_serials: Annotated[list[Serial], Field(max_length=64)] = Field(default_factory=list)
    """Devices that may be wiped; nothing else is ever overwritten. An NVMe namespace by its own identity:
    '<controller serial>:<nsid>', its EUI-64, NGUID or WWN (/sys/block/nvmeXnY/wwid); other disks by serial or
    WWN; never a kernel name such as /dev/nvme1n1."""


class KServe(SpecModel):
    """KServe's local model cache on the NVMe cache (docs/models.md): what its node agent expects of the node.

    KServe does not check these itself; the spec checks them on every node that sets this section."""

    subdir: RelPath = "kserve"
    """The LocalModelNodeGroup's local volume, below the storage mount (its local.path is <mount>/<subdir>);
    never the model_cache directory (KServe's agent deletes folders it does not know)."""
    agent_host_path: MountPath = "/mnt/models"
    """The hostPath of KServe's node agent DaemonSet (Helm value kserve.localmodel.agent.hostPath); it must equal
    local.path, or the agent never sees what its download jobs wrote and starts them again."""
    agent_uid: Annotated[int, Strict(), Field(ge=0, le=4294967294)] = 1000
    """The node agent's user (securityContext.runAsUser; 1000 in KServe's chart): owner of <mount>/<subdir>."""
    agent_gid: Annotated[int, Strict(), Field(ge=0, le=4294967294)] = 1000
    """The download jobs' group (the localModel fsGroup; 1000 by default): group of <mount>/<subdir>."""
    storage_limit: Size | None = None
    """The LocalModelNodeGroup's storageLimit (bytes or '1600GiB'); the sizes of the models a node holds must fit
    it. null: the smallest cache of the class less model_cache.reserve, checked when the manifests are rendered."""


class K8s(SpecModel):
    """Kubernetes integration: node-feature-discovery labels, local volume class."""

    labels: dict[LabelKey, LabelValue | None] = Field(default_factory=dict)
    """Node labels (written to NFD features.d); null removes an inherited label."""
    local_volume_class: DnsName | None = None
    """StorageClass name for local volumes on the NVMe cache mount."""
    kserve: KServe | None = None
    """KServe's local model cache on this node's NVMe cache; null: not used (no KServe checks)."""


class Topology(SpecModel):
    """What the node's GPU, NIC and PCIe topology must be (read by node_topology; docs/topology.md)."""

    gpus: Annotated[int, Strict(), Field(ge=0, le=64)] | None = None
    """Number of GPUs the node must have; null: not checked."""
    rdma_nics: Annotated[int, Strict(), Field(ge=0, le=64)] | None = None
    """Number of physical NICs with an RDMA device (the rails); null: not checked."""
    max_gpu_nic_relation: Literal["PIX", "PXB", "PHB", "NODE", "SYS"] = "NODE"
    """The farthest each GPU's nearest RDMA NIC may be, as nvidia-smi topo -m ranks it (PIX nearest)."""
    min_link_width: Literal[1, 2, 4, 8, 16, 32] | None = None
    """Lowest trained PCIe width of a GPU or RDMA NIC; null: the device's own capability."""
    min_link_gen: Literal[1, 2, 3, 4, 5, 6] | None = None
    """Lowest trained PCIe generation of an RDMA NIC (GPUs lower theirs when idle); null: not checked."""
    acs_off: Bool = True
    """ACS redirect must be off on every bridge between a GPU and its nearest NIC and NVMe."""
    gpudirect: Annotated[list[Literal["rdma", "storage"]], Field(max_length=2)] | None = None
    """GPUDirect pieces that must be present; null: rdma on a node with GPUs and an RDMA NIC."""
    min_max_read_req: Literal[128, 256, 512, 1024, 2048, 4096] = 4096
    """Lowest MaxReadReq (bytes) of an RDMA NIC."""
    golden: DnsName | None = None
    """Node class whose golden topology the node must match (topology-golden/<golden>.json; docs/topology.md)."""


# --------------------------------------------------------------------------- host stack (docs/host-stack.md)
CpuList = Annotated[str, Strict(), Field(pattern=r"^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?){0,255}$",
                                         description="CPU numbers and ranges, as the kernel lists them (8-15,24).")]
NodeFilePath = Annotated[str, Strict(), Field(pattern=r"^/[A-Za-z0-9._/+-]{1,4095}$",
                                              description="An absolute path on the node.")]
QueueCount = Annotated[int, Strict(), Field(ge=1, le=4096)]
RingSize = Annotated[int, Strict(), Field(ge=1, le=65536)]
EbpfFeature = Literal["native-routing", "bpf-host-routing", "big-tcp", "netkit"]


def _default_ip_families() -> list[Literal["ipv4", "ipv6"]]:
    return ["ipv4"]


class NicChannels(SpecModel):
    """Queue counts of each data NIC (ethtool -L); a count left out is not changed."""

    combined: QueueCount | None = None
    """Combined receive and transmit channels (mlx5 and ice have only these)."""
    rx: QueueCount | None = None
    """Receive-only channels."""
    tx: QueueCount | None = None
    """Transmit-only channels."""


class NicRings(SpecModel):
    """Ring sizes of each data NIC (ethtool -G); a size left out is not changed."""

    rx: RingSize | None = None
    """Receive ring entries."""
    tx: RingSize | None = None
    """Transmit ring entries."""


class NicAffinity(SpecModel):
    """IRQ and queue placement of the data NICs (module nic_affinity; docs/host-stack.md): each NIC's completion
    IRQs on its own NUMA node's CPUs that kubelet does not reserve and TuneD does not isolate, kept there when
    links come up."""

    fabrics: Annotated[list[FabricName], Field(max_length=64)] | None = None
    """The fabrics whose interfaces are placed; null: every fabric whose purpose is not management."""
    irqs: Bool = True
    """Place the completion IRQs; false: queues, RPS and XPS only."""
    cpus: CpuList | None = None
    """Only these CPUs (intersected with each NIC's local CPUs); null: the NIC's local CPUs."""
    exclude_cpus: CpuList | None = None
    """CPUs the IRQs never use, besides kubelet's reserved and the isolated ones."""
    kubelet_config: NodeFilePath = "/var/lib/kubelet/config.yaml"
    """kubelet's configuration file (YAML or JSON); its reservedSystemCPUs are taken out."""
    kubelet_reserved: Bool = True
    """Take kubelet's reservedSystemCPUs out."""
    tuned_isolated: Bool = True
    """Take the CPUs TuneD (isolated_cores) and the kernel (isolcpus=, nohz_full=) isolate out."""
    channels: NicChannels | None = None
    """Queue counts; null: leave them."""
    rings: NicRings | None = None
    """Ring sizes; null: leave them."""
    rps: Bool = False
    """Receive packet steering: each receive queue's rps_cpus is the NIC's CPUs."""
    xps: Bool = False
    """Transmit packet steering: transmit queue k sends from the CPU of completion IRQ k."""
    irqbalance: Literal["ban", "ignore"] = "ban"
    """ban: irqbalance leaves the placed NICs' IRQs alone (its policy script, persisted); ignore: not configured."""
    reapply: Bool = True
    """Install the link-up unit that applies the saved placement again when a link comes up (and at boot)."""


class Ebpf(SpecModel):
    """The eBPF datapath the node must be ready for (module ebpf_readiness, read only; docs/host-stack.md)."""

    datapath: Literal["cilium"] = "cilium"
    """The eBPF datapath (its kernel requirements and routing tables are checked)."""
    features: Annotated[list[EbpfFeature], Field(max_length=4)] = Field(default_factory=list)
    """Datapath features the nodes must support: native-routing, bpf-host-routing, big-tcp, netkit."""
    ip_families: Annotated[list[Literal["ipv4", "ipv6"]], Field(min_length=1, max_length=2)] = Field(
        default_factory=_default_ip_families)
    """Address families BIG TCP is enabled for (IPv4 BIG TCP needs kernel 6.3, IPv6 5.19)."""
    fabric: FabricName | None = None
    """The fabric pod traffic runs on: the datapath's device must carry its MTU; null: the fabric of that device."""
    device: IfName | None = None
    """The interface the datapath uses; null: the one of the fabric (when it has one named interface), else the
    interface of the default route (what Cilium picks)."""
    persist_bpffs: Bool = False
    """Opt-in: mount bpffs at /sys/fs/bpf now and at every boot (an /etc/fstab line)."""


class NodeHardware(SpecModel):
    """What the inventory knows about the node; facts gathered from the node take precedence."""

    memory: Size | None = None
    numa_nodes: Annotated[int, Strict(), Field(ge=1, le=64)] | None = None


class ProfileBody(SpecModel):
    """Settings applied to a node. Later layers replace a field; sysctl and labels merge per key."""

    node: NodeHardware | None = None
    """Memory and NUMA layout, when the inventory knows them (facts win)."""
    sysctl: SysctlMap | None = None
    """Kernel parameters by key; merged per key over earlier layers, null removes one."""
    hugepages: HugePages | None = None
    """HugePage pools and hugetlbfs mounts (replaces the inherited section)."""
    thp: Thp | None = None
    """Transparent HugePages; enabled and defrag merge separately."""
    kernel_args: Annotated[list[KernelArg], Field(max_length=128)] | None = None
    """Extra kernel command-line arguments (HugePage arguments are derived, not listed here)."""
    interfaces: Annotated[list[Interface], Field(max_length=64)] | None = None
    """NICs and the fabric each carries."""
    firmware: Annotated[list[FirmwarePolicy], Field(max_length=64)] | None = None
    """NIC firmware compliance policies."""
    nic_config: Annotated[list[NicConfig], Field(max_length=64)] | None = None
    """Settings the NICs keep in firmware (NV configuration), per PSID, part number or driver; plan: nic_config."""
    storage: Storage | None = None
    """Local NVMe model cache."""
    k8s: K8s | None = None
    """Kubernetes node labels and local volume class."""
    topology: Topology | None = None
    """GPU/NIC/NVMe topology and direct-path expectations (replaces the inherited one); plan: node_topology."""
    nic_affinity: NicAffinity | None = None
    """IRQ and queue placement of the data NICs (replaces the inherited one); plan: nic_affinity."""
    ebpf: Ebpf | None = None
    """eBPF datapath readiness (replaces the inherited one); plan: ebpf_readiness."""


class Profile(ProfileBody):
    """A named profile, applied to the hosts of the listed inventory groups (or listed hosts)."""

    name: ProfileName
    groups: Annotated[list[ProfileName], Field(max_length=64)] | None = None
    """Inventory groups; default: the group named like the profile."""
    hosts: Annotated[list[HostName], Field(max_length=100000)] = Field(default_factory=list)
    """Hosts the profile applies to regardless of their groups."""


# --------------------------------------------------------------------------- model cache
class ModelCache(SpecModel):
    """Where and how models are placed on each node's local NVMe cache, and how hard the source is hit."""

    directory: RelPath = "models"
    """Models directory, relative to storage.mount.path (the module refuses unless the cache is mounted)."""
    reserve: Size | None = Field(default=None, description="Free bytes kept on the cache filesystem (bytes or "
                                 "'200GiB'); least-recently-used unpinned versions are evicted to keep it. null: "
                                 "the module's default, 1 % of the filesystem (64 MiB to 4 GiB), never 0.")
    bandwidth_limit: Size | None = Field(default=None, description="Per-node download cap in bytes per second "
                                                                   "(e.g. '500MiB'); null: unlimited.")
    concurrency: Annotated[int, Strict(), Field(ge=1, le=100000)] | None = None
    """Nodes warming up at the same time, cluster-wide (Ansible throttle); null: unlimited."""


class ModelFile(SpecModel):
    """One file of a model version: path below the source, SHA-256 and (optionally) size."""

    path: ModelFilePath
    """Relative to the model's source; the same path below the version directory on the node."""
    sha256: Sha256
    size: Annotated[int, Strict(), Field(ge=0, le=2**60)] | None = None
    """Bytes; lets the node check free space before it downloads (else HEAD / stat)."""


class Model(SpecModel):
    """A model version to place on nodes' caches: its files (or a manifest) and the hosts that hold it."""

    name: ModelName
    """Model name: letters, digits, '.', '_', '-' (at most 128); a directory below the cache root."""
    version: ModelName
    """Version label, e.g. '2024-06-01' or 'v3'; name@version is unique in the spec."""
    source: ModelSource
    files: Annotated[list[ModelFile], Field(max_length=100000)] = Field(default_factory=list)
    """The files with their SHA-256; give files or manifest."""
    manifest: ModelFilePath | None = None
    """sha256sum-format file below source ('<hex>  <path>' lines), read when files is empty."""
    manifest_sha256: Sha256 | None = None
    """Pins the manifest itself (recommended with a manifest)."""
    groups: Annotated[list[ProfileName], Field(max_length=256)] = Field(default_factory=list)
    """Inventory groups whose hosts hold the model; with hosts also empty: every host with storage."""
    hosts: Annotated[list[HostName], Field(max_length=100000)] = Field(default_factory=list)
    """Hosts that hold the model regardless of their groups."""


# --------------------------------------------------------------------------- measurement
Gbit = Annotated[float, Strict(), Field(gt=0, le=100000, allow_inf_nan=False)]
Pct = Annotated[float, Strict(), Field(ge=0, le=100, allow_inf_nan=False)]
Positive = Annotated[float, Strict(), Field(gt=0, le=10**9, allow_inf_nan=False)]
_MODEL_REF = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}@[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
ModelRef = Annotated[str, Strict(), Field(pattern=_MODEL_REF, description="A model version as name@version.")]


class MeasureFabricGate(SpecModel):
    """Gates of one fabric's pairs; null: no such gate (the relative gate outlier_ratio still applies)."""

    min_gbit_s: Gbit | None = None
    """Lowest Gbit/s a pair may reach (all streams together). Also the fabric's expected rate for the
    socket-buffer check (bandwidth-delay product)."""
    max_retransmit_share: Annotated[float, Strict(), Field(ge=0, lt=0.5, allow_inf_nan=False)] | None = 0.002
    """Highest share of TCP segments in a pair retransmitted to repair a loss: a share, not a percentage
    (0.002 = 0.2 %). Retransmissions the receiver reported as duplicates (DSACK: reordering, not loss) are
    not counted."""
    max_loss_pct: Pct | None = 1.0
    """Highest loss in percent of the small latency probe sent while the load runs."""
    max_p99_ms: Annotated[float, Strict(), Field(ge=0.01, le=60000, allow_inf_nan=False)] | None = None
    """Highest p99 round-trip time in ms of the latency probe under load."""


class MeasureStorageGate(SpecModel):
    """Gates of every node's storage probes; null: no such gate (outlier_ratio still applies)."""

    min_read_mib_s: Positive | None = None
    """Lowest sequential read MiB/s of each target (cache file and raw device)."""
    max_p99_us_qd1: Positive | None = None
    """Highest p99 latency in µs of 4 KiB random reads at queue depth 1."""
    max_p99_us_qd32: Positive | None = None
    """Highest p99 latency in µs of 4 KiB random reads at queue depth 32."""
    min_iops_qd32: Positive | None = None
    """Lowest 4 KiB random-read IOPS at queue depth 32."""


class MeasureGates(SpecModel):
    """Absolute gates per fabric and for storage, and the relative gate against the fabric's peers."""

    fabrics: dict[FabricName, MeasureFabricGate] = Field(default_factory=dict)
    """Gates of the named fabrics (each replaces default for its fabric)."""
    default: MeasureFabricGate = Field(default_factory=MeasureFabricGate)
    """Gates of every measured fabric not named under fabrics."""
    storage: MeasureStorageGate = Field(default_factory=MeasureStorageGate)
    outlier_ratio: Annotated[float, Strict(), Field(ge=0, lt=1, allow_inf_nan=False)] = 0.5
    """A pair or node below outlier_ratio x its fabric's typical rate (the median of the nodes' best pairs),
    or a storage target below outlier_ratio x the median of the same target on the other nodes, fails;
    0 turns the relative gate off."""


class MeasureStorage(SpecModel):
    """What the storage probe reads on each node with an NVMe cache (storage section)."""

    test_file: RelPath = ".aiinfra-measure/probe.bin"
    """The probe's file, relative to the cache mount; created with test_file_size bytes when missing
    (the only file the probe ever writes)."""
    test_file_size: Annotated[int, BeforeValidator(parse_size, json_schema_input_type=int | str), Strict(),
                              Field(ge=1024 * 1024, le=2**40)] = 512 * 1024 * 1024
    """Size of the test file (bytes or '512MiB'); larger than the node's page cache makes cold reads honest."""
    raw_device: Bool = True
    """Also read the raw cache device (read only): the md array, or the single device of storage.devices."""
    model: ModelRef | None = None
    """A model version of the spec (name@version) to load cold from the cache on the nodes that hold it."""


class MeasureSaturation(SpecModel):
    """Saturation sweeps (docs/measure.md#saturation): each fabric's pairs at 1, 2, 4 ... max_streams TCP
    streams; each storage target's 4 KiB random reads at queue depth 1 ... max_queue_depth and sequential
    reads at block sizes min_block_kib ... max_block_kib. The knee is the load before the first doubling
    that gains less than knee_share."""

    enabled: Bool = False
    """Run the sweeps (they multiply the run's time; the role's measure_saturation replaces this for one run)."""
    max_streams: Annotated[int, Strict(), Field(ge=1, le=64)] = 16
    """Top of the streams sweep (1, 2, 4 ... up to it)."""
    step_duration: Annotated[float, Strict(), Field(ge=0.5, le=300, allow_inf_nan=False)] = 3.0
    """Seconds of load per pair and stream count."""
    max_queue_depth: Annotated[int, Strict(), Field(ge=1, le=256)] = 256
    """Top of the queue-depth sweep (1, 2, 4 ... up to it)."""
    random_seconds: Annotated[float, Strict(), Field(gt=0, le=300, allow_inf_nan=False)] = 2.0
    """Seconds of random reads per queue depth."""
    min_block_kib: Annotated[int, Strict(), Field(ge=4, le=65536, multiple_of=4)] = 4
    """Smallest block of the block-size sweep, KiB."""
    max_block_kib: Annotated[int, Strict(), Field(ge=4, le=65536, multiple_of=4)] = 4096
    """Largest block of the block-size sweep, KiB (doubling from min_block_kib)."""
    knee_share: Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)] = 0.05
    """A doubling that gains less than this share of the figure is past the knee (0.05 = 5 %)."""


class MeasureBaseline(SpecModel):
    """Baselines per node class (docs/measure.md#baselines): measure.yml -e measure_baseline=record adds a run
    to each class's baseline, -e measure_baseline=compare fails a node whose figure regressed."""

    runs: Annotated[int, Strict(), Field(ge=1, le=50)] = 3
    """Runs kept per class: the baseline of a figure is their median (record k times on known-good nodes)."""
    tolerance: Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)] = 0.1
    """A figure below baseline x (1 - tolerance) is a regression (0.1 = 10 %)."""


class MeasureCheckpoint(SpecModel):
    """The checkpoint burst (docs/measure.md#checkpoint-burst): writers on the cache filesystem write a
    checkpoint with fsync, its pages are dropped per file, it is read back; a reader runs meanwhile."""

    enabled: Bool = False
    """Run the burst (the role's measure_checkpoint replaces this for one run)."""
    writers: Annotated[int, Strict(), Field(ge=1, le=64)] = 4
    """Writer processes, one file each (the ranks of a job saving a checkpoint)."""
    size: Annotated[int, BeforeValidator(parse_size, json_schema_input_type=int | str), Strict(),
                    Field(ge=1024 * 1024, le=2**44)] = 1024 * 1024 * 1024
    """Bytes of the whole checkpoint (bytes or '4GiB'), split evenly over the writers."""
    direct: Bool = False
    """Write with O_DIRECT (else through the page cache, then fsync)."""
    max_free_share: Annotated[float, Strict(), Field(gt=0, le=0.9, allow_inf_nan=False)] = 0.2
    """The burst is refused when it would take more than this share of the cache's free space."""
    directory: RelPath = ".aiinfra-measure/checkpoint"
    """The burst's own directory, relative to the cache mount: created for the burst, removed afterwards."""


class MeasureFileSet(SpecModel):
    """One set of small files: N files of one size."""

    name: DnsName
    """The set's name in the reports."""
    files: Annotated[int, Strict(), Field(ge=1, le=1000000)]
    """Number of files."""
    size: Annotated[int, BeforeValidator(parse_size, json_schema_input_type=int | str), Strict(),
                    Field(ge=0, le=2**30)]
    """Bytes per file (bytes or '4KiB')."""


class MeasureSmallFiles(SpecModel):
    """Small files and metadata (docs/measure.md#small-files-and-metadata): create, stat, read and unlink
    N files per set in a tree on the cache; operations per second and latency percentiles."""

    enabled: Bool = False
    """Run the probe (the role's measure_small_files replaces this for one run)."""
    sets: Annotated[list[MeasureFileSet], Field(min_length=1, max_length=16)] = Field(default_factory=lambda: [
        MeasureFileSet(name="shards", files=64, size=4 * 1024 * 1024),
        MeasureFileSet(name="dataset", files=2000, size=4096)])
    """The sets; default a model's shard set (64 x 4 MiB) and a dataset of small files (2,000 x 4 KiB)."""
    width: Annotated[int, Strict(), Field(ge=1, le=4096)] = 64
    """Directories the files are spread over."""
    max_free_share: Annotated[float, Strict(), Field(gt=0, le=0.9, allow_inf_nan=False)] = 0.2
    """A set is refused when it would take more than this share of the cache's free space."""
    directory: RelPath = ".aiinfra-measure/metadata"
    """The probe's own directory, relative to the cache mount: created for the run, removed afterwards."""


class Measure(SpecModel):
    """Measurement of the data path (playbooks/measure.yml, docs/measure.md): pairs, probes and gates."""

    mode: Literal["all-pairs", "ring", "sample"] = "ring"
    """all-pairs: every pair (N-1 rounds); ring: each node to the next (2 or 3 rounds); sample: sample_peers
    distinct random peers per node (sample_peers rounds)."""
    sample_peers: Annotated[int, Strict(), Field(ge=1, le=64)] = 3
    """Peers per node in sample mode."""
    seed: Annotated[int, Strict(), Field(ge=0, le=2**31)] = 0
    """Seed of the sample schedule (the same seed, hosts and fabric give the same pairs)."""
    streams: Annotated[int, Strict(), Field(ge=1, le=64)] = 4
    """Parallel TCP streams per pair."""
    duration: Annotated[float, Strict(), Field(ge=0.5, le=300, allow_inf_nan=False)] = 5.0
    """Seconds of load per pair."""
    tool: Literal["builtin", "iperf3"] = "builtin"
    """builtin: the probe in the module (standard library); iperf3: iperf3 --json when installed (else builtin)."""
    port: Annotated[int, Strict(), Field(ge=1024, le=65534)] = 5201
    """TCP port of the load; the latency probe uses port + 1 (UDP)."""
    fabrics: Annotated[list[FabricName], Field(max_length=64)] | None = None
    """Fabrics to measure; null: every fabric with subnets except the management ones."""
    storage: MeasureStorage = Field(default_factory=MeasureStorage)
    gates: MeasureGates = Field(default_factory=MeasureGates)
    saturation: MeasureSaturation = Field(default_factory=MeasureSaturation)
    """Saturation sweeps with knee detection (off unless enabled)."""
    baseline: MeasureBaseline = Field(default_factory=MeasureBaseline)
    """How baselines are kept and compared (the role's measure_baseline picks record or compare)."""
    checkpoint: MeasureCheckpoint = Field(default_factory=MeasureCheckpoint)
    """The checkpoint burst on the cache filesystem (off unless enabled)."""
    small_files: MeasureSmallFiles = Field(default_factory=MeasureSmallFiles)
    """Small files and metadata on the cache filesystem (off unless enabled)."""


class RailRouting(SpecModel):
    """Per-rail host routing (the rail_routing capability, docs/network.md): where its tables and rules go."""

    table_base: Annotated[int, Strict(), Field(ge=256, le=9000)] = 3100
    """First routing table id and rule priority of rail routing: rail r of the k-th routed (non-management)
    fabric gets table and priority table_base + 16 k + r. The range must avoid the ids other software owns
    (Cilium 200, 202, 2004, 2005; 253-255; cloud network utilities 10000 and above)."""


class DatapathSpec(SpecModel):
    """The cluster data-path spec (the value of the ``datapath`` variable)."""

    version: Annotated[Literal[1], BeforeValidator(_no_bool)]
    builtin_profile: Literal["ai-gpu-node", "none"] = "ai-gpu-node"
    """The built-in base profile (docs/spec.md lists its values and sources)."""
    fabrics: Annotated[list[Fabric], Field(max_length=64)] = Field(default_factory=list)
    profiles: Annotated[list[Profile], Field(max_length=256)] = Field(default_factory=list)
    """Applied in list order to matching hosts; later profiles win."""
    hosts: dict[HostName, ProfileBody] = Field(default_factory=dict)
    """Per-host overrides, applied last."""
    model_cache: ModelCache = Field(default_factory=ModelCache)
    """Model cache settings (docs/models.md)."""
    models: Annotated[list[Model], Field(max_length=4096)] = Field(default_factory=list)
    """Model versions placed on the nodes' local NVMe caches (docs/models.md)."""
    measure: Measure = Field(default_factory=Measure)
    """Measurement of the data path: schedule, probes and gates (docs/measure.md)."""
    rail_routing: RailRouting = Field(default_factory=RailRouting)
    """Per-rail routing tables and rules (docs/network.md, "Several NICs on one fabric")."""


MODELS: tuple[type[SpecModel], ...] = (
    DatapathSpec, Fabric, Roce, RoceCnp, RoceEts, Profile, ProfileBody, NodeHardware, SysctlSetting,
    HugePages, HugePagePool, HugeMount, Thp, Interface, InterfaceMatch, FirmwarePolicy, Storage,
    DeviceSelect, Raid, Filesystem, StorageMount, Directory, K8s, Topology, ModelCache, Model, ModelFile, Measure,
    MeasureStorage, MeasureGates, MeasureFabricGate, MeasureStorageGate, NicConfig, NicSriov, RailSubnet, RailRouting,
    FabricSwitch,
    MeasureSaturation,
    MeasureBaseline, MeasureCheckpoint, MeasureSmallFiles, MeasureFileSet,
    KServe,
    NicAffinity, NicChannels, NicRings, Ebpf,
)


def known_fields() -> set[str]:
    return {name for model in MODELS for name in model.model_fields}


def _models_in(tp: Any) -> list[type[SpecModel]]:
    if isinstance(tp, type) and issubclass(tp, SpecModel):
        return [tp]
    return [m for arg in get_args(tp) for m in _models_in(arg)]


def fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model at ``loc`` (the parent of an unknown key), for "did you mean"."""
    model: type[SpecModel] = DatapathSpec
    for part in loc:
        if isinstance(part, str) and part in model.model_fields:
            found = _models_in(model.model_fields[part].annotation)
            if not found:
                return []
            model = found[0]
    return sorted(model.model_fields)


from . import checks as _checks  # noqa: E402,F401  (registers the cross-checks)
from . import checks_host_stack as _checks_host_stack  # noqa: E402,F401  (registers the host-stack cross-checks)
from . import checks_measure as _checks_measure  # noqa: E402,F401  (registers the measure cross-checks)
from . import checks_nic_config as _checks_nic_config  # noqa: E402,F401  (registers the nic_config cross-checks)
from . import checks_rails as _checks_rails  # noqa: E402,F401  (registers the rail cross-checks)
from . import checks_security as _checks_security  # noqa: E402,F401  (registers the security cross-checks)
from . import checks_switch as _checks_switch  # noqa: E402,F401  (registers the switch cross-checks)
