"""Short, human-readable summaries of plans (for playbook output and the CLI)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import SpecValidationError
from .plan import Planner


def plan_summary(plan: Mapping[str, Any]) -> dict[str, Any]:
    """One line per capability of a plan."""
    pages = ", ".join(f"{p['count']}x{p['size']} ({p['persist']})" for p in plan["hugepages"]["pages"]) or "none"
    storage = plan.get("nvme_layout")
    fabrics = sorted({i["fabric"] for i in plan["link_mtu"]["interfaces"]})
    return {
        "profiles": list(plan["profiles"]),
        "reboot_required": plan["reboot_required"],
        "sysctl_profile": f"{len(plan['sysctl_profile']['keys'])} keys",
        "hugepages": pages,
        "kernel_cmdline": " ".join(plan["kernel_cmdline"]["args"]) or "unchanged",
        "link_mtu": f"{len(plan['link_mtu']['interfaces'])} interfaces on {', '.join(fabrics) or 'no fabric'}",
        "roce_qos": sorted({f"{q['fabric']}: tos {q['roce_tos']}, roce_mtu {q['roce_mtu']}, pfc {q['pfc_priorities']}"
                            for q in plan["roce_qos"]["interfaces"]}),
        "nic_firmware": f"{len(plan['nic_firmware']['policies'])} policies",
        "nic_config": f"{len((plan.get('nic_config') or {}).get('configs') or [])} entries",
        "nvme_layout": "none" if not storage else f"{storage['mount']['path']} "
                       f"({'raid0' if storage['raid'] else 'single'}, {storage['filesystem']['type']})",
        "nfd_labels": f"{len(plan['nfd_labels']['labels'])} labels",
    }


def group_summary(planner: Planner, groups: Mapping[str, Any], hostvars: Mapping[str, Any] | None) -> dict[str, Any]:
    """Per inventory group: host count and the distinct plan summaries of its hosts."""
    member_of: dict[str, list[str]] = {}
    for group, hosts in groups.items():
        for host in hosts or []:
            member_of.setdefault(str(host), []).append(str(group))
    summaries: dict[str, dict[str, Any]] = {}
    errors = []
    for host in sorted(member_of):
        facts = hostvars.get(host) if hostvars is not None else None
        try:
            summaries[host] = plan_summary(planner.plan(host, sorted(member_of[host]), facts))
        except SpecValidationError as exc:
            errors.extend(exc.errors)
    if errors:
        raise SpecValidationError(errors)
    out: dict[str, Any] = {}
    for group in sorted(groups):
        hosts = sorted(str(h) for h in groups[group] or [])
        if not hosts or group == "ungrouped":
            continue
        variants: list[dict[str, Any]] = []
        for host in hosts:
            if summaries[host] not in variants:
                variants.append(summaries[host])
        out[group] = {"hosts": len(hosts), "plans": variants if len(variants) > 1 else variants[0]}
    return out
