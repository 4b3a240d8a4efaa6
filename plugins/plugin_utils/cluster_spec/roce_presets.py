"""The built-in RoCE presets (``roce.preset``): classification values that match a switch family's
default maps, each with its source.

A preset fills the keys of a fabric's ``roce`` block that the spec leaves out (a key the spec gives
wins, the block is merged one level deep: ``cnp`` as a whole). What each preset matches is checked
against the switch family's own default maps in :mod:`.switch_defaults` (tests/unit/.../test_switch_presets.py):
DSCP -> class, that class lossless (PFC on), the CNP DSCP on a class of its own.

Standard library only (the ``datapath`` CLI installs this package on its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RocePreset:
    """A named set of ``roce`` keys; ``switches``: the ``switch.os`` families whose default maps it matches."""

    name: str
    values: Mapping[str, Any]
    switches: tuple[str, ...]
    source: str
    notes: tuple[str, ...] = field(default_factory=tuple)


ROCE_PRESETS: dict[str, RocePreset] = {preset.name: preset for preset in (
    RocePreset(
        "nvidia",
        {"trust": "dscp", "dscp": 26, "priority": 3, "pfc_priorities": [3], "cnp": {"dscp": 48, "priority": 6}},
        ("cumulus-nvue",),
        "NVIDIA Cumulus Linux RoCE defaults (`nv set qos roce`, lossless): DSCP 26 -> switch priority 3 -> "
        "traffic class 3 with PFC, CNP DSCP 48 -> switch priority 6 -> traffic class 6 strict "
        "(CumulusNetworks/docs content/cumulus-linux-512/Layer-1-and-Switch-Ports/Quality-of-Service/"
        "RDMA-over-Converged-Ethernet-RoCE.md). These are also the values of a roce block without a preset.",
        ("SONiC's default maps send DSCP 26 to traffic class 1, which is lossy: use sonic there",),
    ),
    RocePreset(
        "sonic",
        {"trust": "dscp", "dscp": 3, "priority": 3, "pfc_priorities": [3], "cnp": {"dscp": 48, "priority": 6}},
        ("sonic",),
        "SONiC's default QoS maps (sonic-net/sonic-buildimage files/build_templates/qos_config.j2): "
        "DSCP_TO_TC_MAP AZURE sends DSCP 3 -> TC 3 and 4 -> TC 4, the two lossless classes (pfc_enable 3,4), "
        "every other DSCP but 8, 5, 46 and 48 to TC 1; DSCP 48 -> TC 6.",
        ("RDMA-CM's ToS becomes 14 (DSCP 3 << 2 | ECT(0)); applications that set their own traffic class must "
         "use DSCP 3 as well",),
    ),
)}

PRESET_NAMES = tuple(ROCE_PRESETS)


def apply_preset(data: Any) -> Any:
    """``data`` (a raw ``roce`` mapping) with the keys of its ``preset`` filled in where absent; anything
    else (no mapping, no or an unknown preset: the model reports it) unchanged."""
    if not isinstance(data, Mapping):
        return data
    name = data.get("preset")
    preset = ROCE_PRESETS.get(name) if isinstance(name, str) else None
    if preset is None:
        return data
    filled = dict(data)
    for key, value in preset.values.items():
        if key not in filled:
            filled[key] = list(value) if isinstance(value, list) else dict(value) if isinstance(value, Mapping) \
                else value
    return filled


def presets_for(switch_os: str) -> list[RocePreset]:
    """The presets that match ``switch_os``'s default maps."""
    return [preset for preset in ROCE_PRESETS.values() if switch_os in preset.switches]
