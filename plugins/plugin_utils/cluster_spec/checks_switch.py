"""Cross-checks of a fabric's ``switch`` block, registered like those in :mod:`.checks`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .errors import Issue
from .registry import cross_check

if TYPE_CHECKING:
    from .models import Fabric


@cross_check("Fabric", "switch-dcbx-roce", reads=("switch", "kind"))
def check_switch_dcbx(fabric: Fabric) -> Iterator[Issue]:
    """switch.dcbx (capture what the switch advertises in DCBX) only on a fabric of kind roce."""
    if fabric.switch is not None and fabric.switch.dcbx and fabric.kind != "roce":
        yield Issue(("switch", "dcbx"), f"DCBX is compared with the RoCE settings, but the fabric is of kind "
                    f"{fabric.kind}", "set kind: roce or remove switch.dcbx")
