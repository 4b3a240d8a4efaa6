"""The plan parts of the host stack: ``nic_affinity`` and ``ebpf_readiness`` (docs/plan.md, docs/host-stack.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .merge import Effective
from .models import DatapathSpec


def affinity_fabrics(spec: DatapathSpec, chosen: Sequence[str] | None) -> list[str]:
    """The fabrics whose interfaces nic_affinity places: ``chosen``, else every non-management fabric."""
    if chosen is not None:
        return list(dict.fromkeys(chosen))
    return [f.name for f in spec.fabrics if f.purpose != "management"]


def nic_affinity_part(spec: DatapathSpec, eff: Effective, interfaces: Sequence[Mapping[str, Any]]
                      ) -> dict[str, Any] | None:
    """The ``nic_affinity`` part from the merged section and the host's planned interfaces (link_mtu's items);
    None without the section, or when no interface of the chosen fabrics is on the host."""
    if eff.nic_affinity is None:
        return None
    section = eff.nic_affinity[0]
    fabrics = affinity_fabrics(spec, section.fabrics)
    chosen = [{"name": item["name"], "match": dict(item["match"]), "fabric": item["fabric"]}
              for item in interfaces if item["fabric"] in fabrics]
    if not chosen:
        return None
    return {
        "interfaces": chosen,
        "irqs": section.irqs,
        "cpus": section.cpus,
        "exclude_cpus": section.exclude_cpus,
        "kubelet_config": section.kubelet_config,
        "kubelet_reserved": section.kubelet_reserved,
        "tuned_isolated": section.tuned_isolated,
        "channels": section.channels.model_dump(mode="json") if section.channels is not None else None,
        "rings": section.rings.model_dump(mode="json") if section.rings is not None else None,
        "rps": section.rps,
        "xps": section.xps,
        "irqbalance": section.irqbalance,
        "reapply": section.reapply,
    }


def ebpf_part(spec: DatapathSpec, eff: Effective, interfaces: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ``ebpf_readiness`` part: the datapath, its features, and the device and MTU to check. The device is
    ``ebpf.device``, else the interface of ``ebpf.fabric`` when the host has one (and it is named), else null
    (the node's default-route interface, decided on the node); the MTU it must carry is the one the plan gives
    that interface on the fabric, else the fabric's."""
    if eff.ebpf is None:
        return None
    section = eff.ebpf[0]
    fabrics = {f.name: f for f in spec.fabrics}
    device = section.device
    fabric = section.fabric
    if device is None and fabric is not None:
        on_fabric = [item for item in interfaces if item["fabric"] == fabric]
        device = on_fabric[0]["name"] if len(on_fabric) == 1 else None
    if fabric is None and device is not None:
        fabric = next((item["fabric"] for item in interfaces if item["name"] == device), None)
    mtu = None
    if fabric is not None:
        on_device = [item["mtu"] for item in interfaces if item["name"] == device and item["fabric"] == fabric]
        mtu = on_device[0] if on_device else fabrics[fabric].mtu
    order = ("native-routing", "bpf-host-routing", "big-tcp", "netkit")
    return {
        "datapath": section.datapath,
        "features": [f for f in order if f in section.features],
        "ip_families": list(dict.fromkeys(section.ip_families)),
        "device": device,
        "fabric": fabric,
        "fabric_mtu": mtu,
        "persist_bpffs": section.persist_bpffs,
    }
