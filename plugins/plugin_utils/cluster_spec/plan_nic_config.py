"""The plan's ``nic_config`` part: the module arguments of each entry, with the RoCE congestion-control
values derived from the named fabric's ``roce`` section (docs/plan.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .merge import Effective
    from .models import DatapathSpec, Roce


def ecn_priorities(roce: Roce) -> list[int]:
    """The priorities with ECN (DCQCN) on: the RoCE priority when ecn is true. roce_qos sets these live
    (its ecn.rp / ecn.np) and nic_config keeps them in firmware (ROCE_CC_PRIO_MASK_P<n>): one rule."""
    return [roce.priority] if roce.ecn else []


def roce_values(roce: Roce, fabric: str) -> dict[str, Any]:
    """ROCE_CC_PRIO_MASK (bit p: congestion control on priority p), CNP_DSCP and CNP_802P_PRIO."""
    return {"prio_mask": sum(1 << p for p in ecn_priorities(roce)), "cnp_dscp": roce.cnp.dscp,
            "cnp_priority": roce.cnp.priority, "fabric": fabric}


def nic_config_part(spec: DatapathSpec, eff: Effective) -> dict[str, Any]:
    from .models import Roce

    fabrics = {f.name: f for f in spec.fabrics}
    configs = []
    for entry in eff.nic_config:
        roce = None
        if entry.roce_fabric is not None:
            roce = roce_values(fabrics[entry.roce_fabric].roce or Roce(), entry.roce_fabric)
        config = {
            "psid": entry.psid, "part_number": entry.part_number, "driver": entry.driver,
            "link_type": entry.link_type,
            "sriov": entry.sriov.model_dump(mode="json", exclude_none=True) if entry.sriov is not None else None,
            "ats": entry.ats, "max_read_request": entry.max_read_request, "roce": roce,
            "raw": dict(sorted(entry.raw.items())), "firmware_reset": entry.firmware_reset,
        }
        # only what the entry sets: the module's argument spec checks choices of every key it is given
        configs.append({key: value for key, value in config.items() if value is not None})
    return {"configs": configs}
