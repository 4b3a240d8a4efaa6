"""QoS warnings of ``datapath validate`` (checks of :mod:`.spec_warnings`): a fabric's RoCE DSCP on a lossy
class of its switches' default maps (:mod:`.switch_defaults`), when the spec records no switch state that
verify and the audit could check instead (``plugins/plugin_utils/switch_qos``).

Like every warning check, it reads the plain document defensively: a fabric it cannot read is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .errors import join_path
from .roce_presets import apply_preset, presets_for
from .spec_warnings import SpecWarning, WarningContext, warning_check
from .switch_defaults import default_class


def _classes(values: Any) -> str:
    return ", ".join(str(v) for v in sorted(values))


def _roce(raw: Any) -> Any:
    """The fabric's RoCE settings as the model fills them (defaults, preset), or None when they do not validate."""
    from pydantic import ValidationError

    from .models import Roce

    try:
        return Roce.model_validate(apply_preset(raw if isinstance(raw, Mapping) else {}))
    except (ValidationError, TypeError, ValueError):
        return None


@warning_check("switch-default-map-lossy")
def warn_default_map_lossy(ctx: WarningContext) -> Iterator[SpecWarning]:
    """A RoCE fabric whose `switch.os` default maps put the RoCE DSCP on a lossy class, or on a lossless class
    other than the RoCE priority (SONiC's default maps send DSCP 26, this collection's default, to TC 1, which
    is lossy); only when `switch.state` is not given (then verify and the audit check the recorded state)."""
    spec = ctx.spec if isinstance(ctx.spec, Mapping) else {}
    fabrics = spec.get("fabrics")
    for index, fabric in enumerate(fabrics if isinstance(fabrics, list) else []):
        if not isinstance(fabric, Mapping) or fabric.get("kind") != "roce":
            continue
        switch = fabric.get("switch")
        if not isinstance(switch, Mapping) or switch.get("state") is not None or not isinstance(switch.get("os"), str):
            continue
        roce = _roce(fabric.get("roce"))
        if roce is None or roce.trust != "dscp":
            continue
        found = default_class(switch["os"], roce.dscp)
        if found is None:
            continue
        maps, cls = found
        raw = fabric.get("roce")
        given = isinstance(raw, Mapping) and "dscp" in raw
        where = join_path(("fabrics", index, "roce", "dscp") if given else ("fabrics", index, "switch", "os"))
        presets = [p for p in presets_for(switch["os"]) if p.values.get("dscp") != roce.dscp]
        host_fix = (f"on the host: roce.preset: {presets[0].name} (DSCP {presets[0].values['dscp']})"
                    if presets else "on the host: a DSCP the switch maps to a lossless class")
        record = "record the switch's configuration in switch.state so that verify and the audit check it"
        origin = "" if given else " (the default roce.dscp)"
        if cls not in maps.lossless:
            yield SpecWarning(
                where,
                f"DSCP {roce.dscp}{origin} -> {maps.class_word} {cls} (lossy) in {switch['os']}'s default maps "
                f"({maps.map_name}): only {maps.class_word} {_classes(maps.lossless)} "
                f"{'is' if len(maps.lossless) == 1 else 'are'} lossless there, so RoCE traffic is dropped "
                "instead of paused",
                f"{host_fix}; or on the switch: map DSCP {roce.dscp} to {maps.class_word} {roce.priority} "
                f"with PFC on it; {record}")
        elif cls != roce.priority:
            yield SpecWarning(
                where,
                f"DSCP {roce.dscp}{origin} -> {maps.class_word} {cls} in {switch['os']}'s default maps "
                f"({maps.map_name}), lossless, but the host's RoCE priority is {roce.priority}: the switch pauses "
                f"priority {cls}, which the host does not honour",
                f"set roce.priority: {cls} (and pfc_priorities) or map DSCP {roce.dscp} to {maps.class_word} "
                f"{roce.priority} on the switch; {record}")
