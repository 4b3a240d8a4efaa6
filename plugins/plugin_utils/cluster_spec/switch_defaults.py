"""The switch families' default QoS maps, each with its source: what a switch of ``switch.os`` does
with a DSCP when nobody changed its maps (``datapath validate`` warns from these; the recorded
``switch.state`` replaces them in verify and audit, plugins/plugin_utils/switch_qos).

Standard library only (the ``datapath`` CLI installs this package on its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SWITCH_OS = ("cumulus-nvue", "sonic", "onyx")


@dataclass(frozen=True)
class DefaultMaps:
    """``dscp_to_class``: the class a DSCP lands in (SONiC: traffic class; NVUE: switch priority);
    ``lossless``: the classes with PFC on (and lossless buffers) by default."""

    os: str
    map_name: str
    class_word: str
    dscp_to_class: Mapping[int, int]
    lossless: frozenset[int]
    source: str


def _sonic_azure() -> dict[int, int]:
    table = dict.fromkeys(range(64), 1)
    table.update({3: 3, 4: 4, 5: 2, 8: 0, 46: 5, 48: 6})
    return table


DEFAULTS: dict[str, DefaultMaps] = {
    "sonic": DefaultMaps(
        "sonic", "DSCP_TO_TC_MAP|AZURE", "TC", _sonic_azure(), frozenset({3, 4}),
        "sonic-net/sonic-buildimage files/build_templates/qos_config.j2: DSCP_TO_TC_MAP AZURE, "
        "PORT_QOS_MAP pfc_enable \"3,4\" (LOSSLESS_TC)"),
    "cumulus-nvue": DefaultMaps(
        "cumulus-nvue", "NVUE RoCE defaults (nv set qos roce): DSCP -> switch priority", "switch priority",
        {dscp: dscp // 8 for dscp in range(64)}, frozenset({3}),
        "CumulusNetworks/docs content/cumulus-linux-512/Layer-1-and-Switch-Ports/Quality-of-Service/"
        "RDMA-over-Converged-Ethernet-RoCE.md (Default RoCE Configuration; nv show qos roce)"),
}


def default_class(switch_os: str, dscp: int) -> tuple[DefaultMaps, int] | None:
    """(the maps, the class) DSCP ``dscp`` lands in on a ``switch_os`` switch with its default maps;
    None when the collection knows no sourced default map of that family (onyx)."""
    maps = DEFAULTS.get(switch_os)
    if maps is None or dscp not in maps.dscp_to_class:
        return None
    return maps, maps.dscp_to_class[dscp]
