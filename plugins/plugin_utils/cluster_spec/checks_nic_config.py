"""Cross-checks of ``nic_config`` (NV settings of the NICs; docs/network.md), registered like those in
:mod:`.checks`. Which parameters an intent sets is the node's own table
(``plugins/module_utils/_nic_config_intents.py``), so the spec and the module never disagree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ._node import _load
from .errors import Issue
from .registry import cross_check

if TYPE_CHECKING:
    from .models import DatapathSpec, NicConfig, NicSriov

intents = _load("_nic_config_intents")


def set_intents(entry: NicConfig) -> set[str]:
    """The intents an entry sets (``link_type``, ``sriov``, ``ats``, ``roce``)."""
    found = set()
    if entry.link_type is not None:
        found.add("link_type")
    if entry.sriov is not None:
        found.add("sriov")
    if entry.ats is not None:
        found.add("ats")
    if entry.roce_fabric is not None:
        found.add("roce")
    return found


@cross_check("NicConfig", "nic-config-match", reads=("psid", "part_number", "driver"))
def check_match(entry: NicConfig) -> Iterator[Issue]:
    """An entry says which NICs it is for: psid, part_number and/or driver."""
    if entry.psid is None and entry.part_number is None and entry.driver is None:
        yield Issue(("psid",), "the entry matches no NIC",
                    "set psid (the board id, preferred), part_number and/or driver")


@cross_check("NicConfig", "nic-config-sets-something", reads=(
    "link_type", "sriov", "ats", "max_read_request", "roce_fabric", "raw"))
def check_something(entry: NicConfig) -> Iterator[Issue]:
    """An entry sets at least one thing."""
    if not set_intents(entry) and entry.max_read_request is None and not entry.raw:
        yield Issue(("raw",), "the entry sets nothing",
                    "give link_type, sriov, ats, max_read_request, roce_fabric or raw parameters, or remove it")


@cross_check("NicConfig", "nic-config-raw-not-intent", reads=("link_type", "sriov", "ats", "roce_fabric", "raw"))
def check_raw(entry: NicConfig) -> Iterator[Issue]:
    """A raw parameter is none that a named intent of the same entry sets (LINK_TYPE_P<n> with link_type,
    SRIOV_EN/NUM_OF_VFS with sriov, ATS_ENABLED with ats, ROCE_CC_PRIO_MASK_P<n>/CNP_DSCP_P<n>/
    CNP_802P_PRIO_P<n> with roce_fabric): one value per key."""
    for param, intent in intents.raw_clashes(dict(entry.raw), set_intents(entry)):
        field = "roce_fabric" if intent == "roce" else intent
        yield Issue(("raw", param), f"{param} is also set by {field} of this entry",
                    f"remove {param} from raw, or remove {field} and set the parameters in raw")


@cross_check("NicSriov", "sriov-vfs", reads=("enabled", "num_vfs"))
def check_sriov(sriov: NicSriov) -> Iterator[Issue]:
    """With SR-IOV on, num_vfs is 1 or more; with it off, num_vfs is 0 or not given."""
    if sriov.enabled and not sriov.num_vfs:
        yield Issue(("num_vfs",), "SR-IOV on without VFs" if sriov.num_vfs == 0 else "num_vfs is missing",
                    "set num_vfs to the VFs each PF needs (1 or more), or enabled: false")
    if not sriov.enabled and sriov.num_vfs:
        yield Issue(("num_vfs",), f"num_vfs {sriov.num_vfs} with SR-IOV off",
                    "set enabled: true, or num_vfs: 0")


@cross_check("DatapathSpec", "nic-config-fabric", reads=(
    "fabrics.*.name", "fabrics.*.kind", "profiles.<item>.nic_config", "hosts.<item>.nic_config"))
def check_fabric(spec: DatapathSpec) -> Iterator[Issue]:
    """An entry's roce_fabric is a defined fabric of kind roce; no two entries of one layer match the same
    NICs (psid, part_number and driver all equal)."""
    from .checks import _layers

    fabrics = {f.name: f for f in spec.fabrics}
    for base, body in _layers(spec):
        seen: dict[tuple[str | None, ...], int] = {}
        for index, entry in enumerate(body.nic_config or []):
            key = ((entry.psid or "").lower() or None, (entry.part_number or "").upper() or None, entry.driver)
            if key in seen:
                yield Issue((*base, "nic_config", index), f"entry {index} matches the same NICs as entry {seen[key]}",
                            "merge the two entries")
            seen.setdefault(key, index)
            if entry.roce_fabric is None:
                continue
            fabric = fabrics.get(entry.roce_fabric)
            if fabric is None:
                yield Issue((*base, "nic_config", index, "roce_fabric"), f"fabric {entry.roce_fabric!r} is not defined",
                            f"use one of {sorted(name for name, f in fabrics.items() if f.kind == 'roce')}")
            elif fabric.kind != "roce":
                yield Issue((*base, "nic_config", index, "roce_fabric"),
                            f"fabric {entry.roce_fabric!r} is of kind {fabric.kind}: it has no RoCE settings",
                            "name a fabric of kind roce, or leave roce_fabric out")
