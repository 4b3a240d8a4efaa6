"""QoS warnings: a fabric's RoCE DSCP on a lossy class of its switches' default maps
(:mod:`.switch_defaults`), when the spec records no switch state to check instead."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .errors import join_path
from .roce_presets import presets_for
from .switch_defaults import default_class
from .warnings import SpecWarning, spec_warning

if TYPE_CHECKING:
    from .models import DatapathSpec


def _classes(values: object) -> str:
    return ", ".join(str(v) for v in sorted(values))  # type: ignore[call-overload]


@spec_warning("switch-default-map-lossy")
def warn_default_map_lossy(spec: DatapathSpec) -> Iterator[SpecWarning]:
    """A RoCE fabric whose switch.os default maps put the RoCE DSCP on a lossy class, or on a lossless class
    other than the RoCE priority (switch.state not given: the defaults are all there is to check)."""
    from .models import Roce

    for index, fabric in enumerate(spec.fabrics):
        switch = fabric.switch
        if switch is None or switch.state is not None or fabric.kind != "roce":
            continue
        roce = fabric.roce or Roce()
        if roce.trust != "dscp":
            continue
        found = default_class(switch.os, roce.dscp)
        if found is None:
            continue
        maps, cls = found
        where = join_path(("fabrics", index, "roce", "dscp"))
        presets = [p for p in presets_for(switch.os) if p.values.get("dscp") != roce.dscp]
        host_fix = (f"on the host: roce.preset: {presets[0].name} (DSCP {presets[0].values['dscp']})"
                    if presets else "on the host: a DSCP the switch maps to a lossless class")
        record = "record the switch's configuration in switch.state so that verify and audit check it"
        if cls not in maps.lossless:
            yield SpecWarning(
                where,
                f"DSCP {roce.dscp} -> {maps.class_word} {cls} (lossy) in {switch.os}'s default maps "
                f"({maps.map_name}): only {maps.class_word} {_classes(maps.lossless)} "
                f"{'is' if len(maps.lossless) == 1 else 'are'} lossless there, so RoCE traffic is dropped "
                "instead of paused",
                f"{host_fix}; or on the switch: map DSCP {roce.dscp} to {maps.class_word} {roce.priority} "
                f"with PFC on it; {record}")
        elif cls != roce.priority:
            yield SpecWarning(
                where,
                f"DSCP {roce.dscp} -> {maps.class_word} {cls} in {switch.os}'s default maps ({maps.map_name}), "
                f"lossless, but the host's RoCE priority is {roce.priority}: the switch pauses priority {cls}, "
                f"which the host does not honour",
                f"set roce.priority: {cls} (and pfc_priorities) or map DSCP {roce.dscp} to {maps.class_word} "
                f"{roce.priority} on the switch; {record}")
