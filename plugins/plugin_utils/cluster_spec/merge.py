"""Resolve the effective settings of a node: built-in <- matching profiles <- host override."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import builtin
from .errors import PathPart
from .models import (
    DatapathSpec,
    Ebpf,
    FirmwarePolicy,
    HugePages,
    Interface,
    K8s,
    KServe,
    NicAffinity,
    NicConfig,
    ProfileBody,
    Storage,
    SysctlSetting,
    Thp,
    Topology,
)

Origin = tuple[str, tuple[PathPart, ...]]  # (root, path below root)


@dataclass
class Effective:
    """Merged settings plus where each one came from (for error paths)."""

    layers: list[str] = field(default_factory=list)
    memory: int | None = None
    numa_nodes: int | None = None
    sysctl: dict[str, tuple[SysctlSetting, Origin]] = field(default_factory=dict)
    hugepages: tuple[HugePages, Origin] | None = None
    thp_enabled: str | None = None
    thp_defrag: str | None = None
    kernel_args: tuple[list[str], Origin] | None = None
    interfaces: tuple[list[Interface], Origin] | None = None
    firmware: list[FirmwarePolicy] = field(default_factory=list)
    nic_config: list[NicConfig] = field(default_factory=list)
    storage: tuple[Storage, Origin] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    local_volume_class: tuple[str, Origin] | None = None
    kserve: tuple[KServe, Origin] | None = None
    topology: Topology | None = None
    nic_affinity: tuple[NicAffinity, Origin] | None = None
    ebpf: tuple[Ebpf, Origin] | None = None


def apply_layer(eff: Effective, body: ProfileBody, origin: Origin, label: str) -> None:
    """Apply one layer: set fields replace, sysctl and labels merge per key (null removes)."""
    eff.layers.append(label)
    root, base = origin
    if body.node is not None:
        if body.node.memory is not None:
            eff.memory = body.node.memory
        if body.node.numa_nodes is not None:
            eff.numa_nodes = body.node.numa_nodes
    if body.sysctl is not None:
        for key, setting in body.sysctl.items():
            if setting is None:
                eff.sysctl.pop(key, None)
            else:
                eff.sysctl[key] = (setting, (root, (*base, "sysctl", key)))
    if body.hugepages is not None:
        eff.hugepages = (body.hugepages, (root, (*base, "hugepages")))
    if body.thp is not None:
        eff.thp_enabled = body.thp.enabled if body.thp.enabled is not None else eff.thp_enabled
        eff.thp_defrag = body.thp.defrag if body.thp.defrag is not None else eff.thp_defrag
    if body.kernel_args is not None:
        eff.kernel_args = (list(body.kernel_args), (root, (*base, "kernel_args")))
    if body.interfaces is not None:
        eff.interfaces = (list(body.interfaces), (root, (*base, "interfaces")))
    if body.firmware is not None:
        eff.firmware = list(body.firmware)
    if body.nic_config is not None:
        eff.nic_config = list(body.nic_config)
    if body.storage is not None:
        eff.storage = (body.storage, (root, (*base, "storage")))
    if body.k8s is not None:
        _merge_k8s(eff, body.k8s, (root, (*base, "k8s")))
    if body.topology is not None:
        eff.topology = body.topology
    if body.nic_affinity is not None:
        eff.nic_affinity = (body.nic_affinity, (root, (*base, "nic_affinity")))
    if body.ebpf is not None:
        eff.ebpf = (body.ebpf, (root, (*base, "ebpf")))


def _merge_k8s(eff: Effective, k8s: K8s, origin: Origin) -> None:
    for key, value in k8s.labels.items():
        if value is None:
            eff.labels.pop(key, None)
        else:
            eff.labels[key] = value
    if k8s.local_volume_class is not None:
        eff.local_volume_class = (k8s.local_volume_class, (origin[0], (*origin[1], "local_volume_class")))
    if k8s.kserve is not None:
        eff.kserve = (k8s.kserve, (origin[0], (*origin[1], "kserve")))


def base_effective(spec: DatapathSpec) -> Effective:
    eff = Effective()
    if spec.builtin_profile != "none":
        apply_layer(eff, builtin.profile(), (f"builtin:{builtin.NAME}", ()), f"builtin:{builtin.NAME}")
    return eff


def matching_profiles(spec: DatapathSpec, host: str, groups: Sequence[str]) -> list[int]:
    """Indexes of the profiles that apply to ``host`` (member of ``groups``), in spec order.

    Every host is a member of ``all`` (Ansible's ``group_names`` never lists it): a profile named
    ``all``, or with ``groups: [all]``, applies to every host."""
    member = set(groups) | {"all"}
    out = []
    for index, prof in enumerate(spec.profiles):
        wanted = prof.groups if prof.groups is not None else [prof.name]
        if host in prof.hosts or member.intersection(wanted):
            out.append(index)
    return out


def matching_models(spec: DatapathSpec, host: str, groups: Sequence[str]) -> list[int]:
    """Indexes of the models that name ``host`` or one of its ``groups`` (models naming neither
    groups nor hosts go to every host with storage and are not listed here); ``all`` names every host."""
    member = set(groups) | {"all"}
    return [index for index, model in enumerate(spec.models)
            if host in model.hosts or member.intersection(model.groups)]


def effective(spec: DatapathSpec, profile_indexes: Sequence[int], host: str | None) -> Effective:
    eff = base_effective(spec)
    for index in profile_indexes:
        apply_layer(eff, spec.profiles[index], ("datapath", ("profiles", index)), spec.profiles[index].name)
    if host is not None and host in spec.hosts:
        apply_layer(eff, spec.hosts[host], ("datapath", ("hosts", host)), f"host:{host}")
    return eff


def thp_of(eff: Effective) -> Thp:
    return Thp(enabled=eff.thp_enabled, defrag=eff.thp_defrag)  # type: ignore[arg-type]


def plain(value: Any) -> Any:
    """Models -> plain dicts (used by the plan)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value
