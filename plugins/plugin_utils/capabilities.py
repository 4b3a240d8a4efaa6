"""The capabilities on the controller: names, tags, role variables, and their module arguments.

One table says, for every capability, what its role, module, tag, plan part and registered
result are called (one name for all of them), which variables its role has, and how the
module's arguments follow from the host's plan and those variables.
:func:`capability_args` builds them; the capability roles call it through the
``aiinfra.datapath.capability_args`` filter and the ``datapath_apply`` action calls it
directly, so a role alone and ``site.yml`` send a module the same arguments.

Precedence of one argument: the role variable ``<capability>_<option>`` when it is set (not
null) > the host's plan part > the role's default. A variable of a capability's old name
(``sysctl_keys``, ``nvme_cache_wipe_serials``, ``k8s_node_label_prefix`` ...) still works, with
a deprecation warning, where the new one is not set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

PLAN = object()  # the knob's value comes from the host's plan part unless its variable is set


@dataclass(frozen=True)
class Knob:
    """One module option (or role setting) of a capability and where its value comes from."""

    option: str
    default: Any = None  # the role default; PLAN: the plan part's key of the same name
    derive: Callable[[Mapping[str, Any], Mapping[str, Any]], Any] | None = None  # (plan, variables) -> value
    old: tuple[str, ...] = ()  # variable names of the capability's old role
    module: bool = True  # False: a setting of the role, not an argument of the module
    variable: bool = True  # False: fixed, the role has no variable for it
    var: str | None = None  # the role variable when it is not <capability>_<option>


@dataclass(frozen=True)
class Capability:
    name: str  # the module; also its role, tag, plan part and result key (<name>_result)
    group_tags: tuple[str, ...]  # kernel, network, storage, k8s
    old_names: tuple[str, ...] = ()  # earlier role names and tags, kept as aliases
    knobs: tuple[Knob, ...] = ()
    planned: Callable[[Mapping[str, Any]], bool] = field(default=lambda args: True)  # False: skip
    site: bool = True  # applied by site.yml (the datapath role); model_cache has its own playbook

    @property
    def tags(self) -> tuple[str, ...]:
        return (self.name, *self.old_names, *self.group_tags)

    @property
    def result_var(self) -> str:
        return f"{self.name}_result"

    def var(self, knob: Knob) -> str:
        return knob.var or f"{self.name}_{knob.option}"

    def knob(self, option: str) -> Knob:
        return next(k for k in self.knobs if k.option == option)

    def role_defaults(self) -> dict[str, Any]:
        """The role's defaults/main.yml (null: from the plan, or derived)."""
        return {self.var(k): None if k.default is PLAN else k.default for k in self.knobs if k.variable}


def _part(plan: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = plan.get(name) if isinstance(plan, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _connection_address(plan: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
    """The address Ansible reaches the node on: datapath_connection_address, ansible_host, the name."""
    for name in ("datapath_connection_address", "ansible_host", "inventory_hostname"):
        value = variables.get(name)
        if value not in (None, ""):
            return value
    return None


def _cache_mount(plan: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
    return _part(_part(plan, "nvme_layout"), "mount").get("path")


def _fabric_interfaces(plan: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
    return _part(plan, "link_mtu").get("interfaces") or []


def _roce_interfaces(plan: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
    return _part(plan, "roce_qos").get("interfaces") or []


def _ebpf_part(plan: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
    """The plan's ebpf_readiness part, for the ebpf-* labels nfd_labels derives (None without one)."""
    part = _part(plan, "ebpf_readiness")
    return dict(part) if part else None


def _some(*options: str) -> Callable[[Mapping[str, Any]], bool]:
    """Planned when any of ``options`` holds something (a non-empty list, a dict with a value)."""
    def planned(args: Mapping[str, Any]) -> bool:
        for option in options:
            value = args.get(option)
            if isinstance(value, Mapping) and any(v is not None for v in value.values()):
                return True
            if value and not isinstance(value, Mapping):
                return True
        return False
    return planned


CAPABILITIES: dict[str, Capability] = {cap.name: cap for cap in (
    Capability("sysctl_profile", ("kernel",), ("sysctl",), (
        Knob("keys", PLAN, old=("sysctl_keys",)),
        Knob("file", PLAN, old=("sysctl_file",)),
        Knob("persist", PLAN),  # false under datapath_backend tuned: the TuneD profile persists the keys
        Knob("apply", True, old=("sysctl_apply",)),
        Knob("on_override", "warn", old=("sysctl_on_override",)),
    ), _some("keys")),
    Capability("hugepages", ("kernel",), (), (
        Knob("pages", PLAN),
        Knob("thp", PLAN),
        Knob("mounts", PLAN),
        Knob("on_shortfall", "fail"),
        Knob("thp_persist", PLAN),  # false under datapath_backend tuned: the TuneD profile's [vm] sets THP
        Knob("sysctl_file", "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf"),
        Knob("boot_unit_file", "/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf"),
        Knob("restart_kubelet", False, module=False),
        Knob("kubelet_service", "kubelet", module=False),
    ), _some("pages", "thp", "mounts")),
    Capability("kernel_cmdline", ("kernel",), (), (
        Knob("args", PLAN),
        Knob("remove", PLAN),
        Knob("backend", PLAN),  # null: auto; tuned under datapath_backend tuned
        Knob("drop_in", "/etc/default/grub.d/90-aiinfra-datapath.cfg"),
        Knob("update_bootloader", True),
        Knob("when_no_bootloader", "skip"),
    )),
    Capability("tuned_profile", ("kernel",), (), (
        Knob("name", PLAN),
        Knob("include", None),  # null: the profiles active before ours
        Knob("sysctl", PLAN),
        Knob("thp", PLAN),
        Knob("kernel_args", PLAN),
        Knob("activate", True),
    ), lambda args: bool(args.get("name"))),  # planned only under datapath_backend tuned
    Capability("link_mtu", ("network",), ("mtu",), (
        Knob("interfaces", PLAN),
        Knob("persist", "auto"),
        Knob("connection_address", None, derive=_connection_address),
        Knob("allow_connection_interface", False),
        Knob("verify_after", []),
    ), _some("interfaces")),
    Capability("rail_routing", ("network",), (), (
        Knob("rails", PLAN),
        Knob("table_range", PLAN),
        Knob("arp_ignore", PLAN),
        Knob("arp_announce", PLAN),
        Knob("rp_filter", PLAN),
        Knob("persist", "auto"),
        Knob("sysctl_file", "/etc/sysctl.d/90-aiinfra-datapath-rails.conf"),
        Knob("connection_address", None, derive=_connection_address),
    ), _some("rails")),
    Capability("roce_qos", ("network",), ("qos",), (
        Knob("interfaces", PLAN),
        Knob("backend", "auto"),
        Knob("persist", True),
    ), _some("interfaces")),
    Capability("nic_firmware", ("network",), ("firmware",), (
        Knob("interfaces", None),  # null: every physical NIC
        Knob("policies", PLAN),
        Knob("fail_on_noncompliant", False, variable=False),  # the role's gate fails once, for all hosts
        Knob("fail", True, module=False),
        Knob("fail_on_unknown", False, module=False),
    )),
    Capability("nic_config", ("network", "firmware"), (), (  # --tags firmware: nic_firmware and nic_config
        Knob("configs", PLAN),
        Knob("pci_dir", "/sys/bus/pci/devices"),  # where the node lists its PCI functions (sysfs)
        Knob("tool", "auto"),  # mlxconfig, else mstconfig
        Knob("state_file", "/var/lib/aiinfra-datapath/nic_config.json"),
        Knob("connection_address", None, derive=_connection_address),  # never a firmware reset on this NIC
        Knob("fail_not_applied", True, module=False),  # the role's gate fails once, for every such host
    ), _some("configs")),
    Capability("nic_affinity", ("network",), (), (
        Knob("interfaces", PLAN),
        Knob("irqs", PLAN),
        Knob("cpus", PLAN),
        Knob("exclude_cpus", PLAN),
        Knob("kubelet_config", PLAN),
        Knob("kubelet_reserved", PLAN),
        Knob("tuned_isolated", PLAN),
        Knob("channels", PLAN),
        Knob("rings", PLAN),
        Knob("rps", PLAN),
        Knob("xps", PLAN),
        Knob("irqbalance", PLAN),
        Knob("reapply", PLAN),
        Knob("persist", "auto"),
        Knob("on_misplaced", "warn"),
    ), _some("interfaces")),
    Capability("ebpf_readiness", ("network",), (), (
        Knob("datapath", PLAN),
        Knob("features", PLAN),
        Knob("ip_families", PLAN),
        Knob("device", PLAN),
        Knob("fabric", PLAN),
        Knob("fabric_mtu", PLAN),
        Knob("interfaces", None, derive=_fabric_interfaces),  # the device's fabric and MTU when it is not named
        Knob("persist_bpffs", PLAN),
        Knob("fstab", "/etc/fstab"),
        Knob("fail", False, module=False),  # the role fails once, for every host, on an error finding
    ), lambda args: bool(args.get("datapath"))),  # planned where the plan has an ebpf section
    Capability("nvme_layout", ("storage",), ("nvme_cache",), (
        Knob("devices", PLAN, old=("nvme_cache_devices",)),
        Knob("select", PLAN, old=("nvme_cache_select",)),
        Knob("raid", PLAN, old=("nvme_cache_raid",)),
        Knob("filesystem", PLAN, old=("nvme_cache_filesystem",)),
        Knob("mount", PLAN, old=("nvme_cache_mount",)),
        Knob("directories", PLAN, old=("nvme_cache_directories",)),
        Knob("reserve_bytes", PLAN, old=("nvme_cache_reserve_bytes",)),
        Knob("wipe_serials", PLAN, old=("nvme_cache_wipe_serials",)),
        Knob("partition", True, old=("nvme_cache_partition",)),
        Knob("partition_label", "aiinfra-cache", old=("nvme_cache_partition_label",)),
        Knob("fstab", "/etc/fstab", old=("nvme_cache_fstab",)),
        Knob("mdadm_conf", "/etc/mdadm/mdadm.conf", old=("nvme_cache_mdadm_conf",)),
    ), _some("mount")),
    Capability("nfd_labels", ("k8s",), ("k8s_node",), (
        Knob("labels", PLAN, old=("k8s_node_labels",)),
        Knob("cache_mount", None, derive=_cache_mount, old=("k8s_node_cache_mount",)),
        Knob("hugepages", True, old=("k8s_node_hugepages",)),
        Knob("interfaces", None, derive=_fabric_interfaces, old=("k8s_node_interfaces",)),
        Knob("qos", None, derive=_roce_interfaces, old=("k8s_node_qos",)),
        Knob("roce_ready", {}, old=("k8s_node_roce_ready",)),
        Knob("prefix", "aiinfra.io", old=("k8s_node_label_prefix",)),
        Knob("extra_label_ns", []),  # the namespaces the cluster's nfd-master lists in extraLabelNs
        Knob("path", "/etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath",
             old=("k8s_node_features_file",)),
        Knob("topology", True),  # GPU/NIC labels from node_topology's read (none on a node without GPUs)
        Knob("nccl_env", "/etc/aiinfra-datapath/nccl.env"),  # NCCL hints; null: not written
        Knob("ebpf", None, derive=_ebpf_part),  # the ebpf-* labels from ebpf_readiness's checks; null: none
        Knob("restart_kubelet", False, old=("k8s_node_restart_kubelet",), module=False),
        Knob("kubelet_service", "kubelet", old=("k8s_node_kubelet_service",), module=False),
    )),
    Capability("model_cache", (), (), (
        Knob("cache_dir", PLAN, var="model_cache_dir", old=("model_cache_root",)),
        Knob("require_mount", PLAN),
        Knob("models", PLAN, old=("model_cache_items",)),
        Knob("reserve_bytes", PLAN),
        Knob("bandwidth_limit", PLAN),
        Knob("concurrency", PLAN, module=False),  # the role task's throttle
        Knob("pinned", []),
        Knob("evict", True),
        Knob("verify_existing", "size"),
        Knob("headers", {}),
        Knob("s3", None),
        Knob("timeout", 30),
        Knob("retries", 3),
        Knob("validate_certs", True),
        Knob("ca_path", None),
    ), lambda args: bool(args.get("cache_dir") and args.get("models")), site=False),
)}

# The order site.yml applies them: kernel and memory -> network -> storage -> Kubernetes.
ORDER: tuple[str, ...] = tuple(name for name, cap in CAPABILITIES.items() if cap.site)

# Role names before 0.3.0: deprecated alias roles, also accepted in datapath_capabilities.
ROLE_ALIASES = {"sysctl": "sysctl_profile", "nvme_cache": "nvme_layout", "k8s_node": "nfd_labels"}


def unknown(name: str) -> ValueError:
    return ValueError(f"unknown capability {name!r}; known: {', '.join(ORDER)}")


def capability(name: str) -> Capability:
    try:
        return CAPABILITIES[name]
    except KeyError:
        raise unknown(name) from None


def settings(name: str, plan: Mapping[str, Any], values: Mapping[str, Any] | None = None,
             variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every knob of ``name`` resolved: ``values`` (by option) > the plan part > derived > default."""
    cap = capability(name)
    values = values or {}
    variables = variables or {}
    part = _part(plan, name)
    out: dict[str, Any] = {}
    for knob in cap.knobs:
        value = values.get(knob.option)
        if value is None and knob.default is PLAN:
            value = part.get(knob.option)
        if value is None and knob.derive is not None:
            value = knob.derive(plan, variables)
        if value is None and knob.default is not PLAN:
            value = knob.default
        out[knob.option] = value
    return out


def capability_args(name: str, plan: Mapping[str, Any], values: Mapping[str, Any] | None = None,
                    variables: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The module arguments of capability ``name`` for a host, or None when nothing is planned.

    ``values``: the role's variables by option name (``{"persist": link_mtu_persist, ...}``);
    null means "not set". ``variables``: other host variables a derivation reads
    (``ansible_host``, ``inventory_hostname``, ``datapath_connection_address``). An option whose
    value is null is left out, so the module's own default applies.
    """
    cap = capability(name)
    resolved = settings(name, plan, values, variables)
    args = {k.option: resolved[k.option] for k in cap.knobs if k.module and resolved[k.option] is not None}
    return args if cap.planned(args) else None


def values_from_variables(name: str, lookup: Callable[[str], Any],
                          warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """A capability's role variables, by option, read with ``lookup(variable name)`` (None: unset).

    Old variable names are read where the new one is unset, with a deprecation warning.
    """
    cap = capability(name)
    values: dict[str, Any] = {}
    for knob in cap.knobs:
        value = lookup(cap.var(knob)) if knob.variable else None
        if value is None:
            for old in knob.old:
                value = lookup(old)
                if value is not None:
                    if warn is not None:
                        warn(f"the variable {old} is deprecated; use {cap.var(knob)} "
                             f"(role aiinfra.datapath.{cap.name}). It will stop working in 1.0.0.")
                    break
        values[knob.option] = value
    return values


def selected_by_tags(tags: tuple[str, ...], run_tags: Any, skip_tags: Any) -> bool:
    """Ansible's tag rules for a task tagged ``tags``: selected by ``--tags`` (all, tagged or one
    of its tags; nothing given means all) and not deselected by ``--skip-tags``."""
    run = {str(t) for t in (run_tags or ())} or {"all"}
    skip = {str(t) for t in (skip_tags or ())}
    if skip & (set(tags) | {"tagged"}):
        return False
    return bool(run & ({"all", "tagged"} | set(tags)))
