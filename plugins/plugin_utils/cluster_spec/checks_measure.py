"""Cross-checks of the ``measure`` section (docs/measure.md), registered like those in :mod:`.checks`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .errors import Issue
from .registry import cross_check

if TYPE_CHECKING:
    from .models import DatapathSpec, MeasureGates, MeasureSaturation


def measured_fabrics(spec: DatapathSpec) -> list[str]:
    """The fabrics ``measure`` covers: its ``fabrics`` list, or every fabric with subnets that is not
    a management fabric, in spec order."""
    if spec.measure.fabrics is not None:
        known = {f.name for f in spec.fabrics}
        return [name for name in dict.fromkeys(spec.measure.fabrics) if name in known]
    return [f.name for f in spec.fabrics if f.subnets and f.purpose != "management"]


@cross_check("DatapathSpec", "measure-fabrics", reads=(
    "fabrics.*.name", "fabrics.*.subnets", "fabrics.*.purpose", "measure.fabrics", "measure.gates.fabrics"))
def check_measure_fabrics(spec: DatapathSpec) -> Iterator[Issue]:
    """measure.fabrics names each defined fabric once, each with subnets (measurement traffic stays inside
    them); measure.gates.fabrics names fabrics that are measured."""
    fabrics = {f.name: f for f in spec.fabrics}
    seen: set[str] = set()
    for index, name in enumerate(spec.measure.fabrics or []):
        fabric = fabrics.get(name)
        if fabric is None:
            yield Issue(("measure", "fabrics", index), f"fabric {name!r} is not defined",
                        f"use one of {sorted(fabrics)} or add it under fabrics")
        elif name in seen:
            yield Issue(("measure", "fabrics", index), f"fabric {name!r} is listed twice", "list each fabric once")
        elif not fabric.subnets:
            yield Issue(("measure", "fabrics", index),
                        f"fabric {name!r} has no subnets: measurement traffic is only sent inside a fabric's subnets",
                        f"add the subnets of {name} under fabrics, or leave it out of measure.fabrics")
        seen.add(name)
    measured = set(measured_fabrics(spec))
    for name in spec.measure.gates.fabrics:
        if name not in fabrics:
            yield Issue(("measure", "gates", "fabrics", name), f"fabric {name!r} is not defined",
                        f"use one of {sorted(fabrics)}")
        elif name not in measured:
            yield Issue(("measure", "gates", "fabrics", name), f"fabric {name!r} has gates but is not measured",
                        "add it to measure.fabrics (a management fabric or one without subnets is not measured "
                        "unless listed) or remove its gates")


@cross_check("DatapathSpec", "measure-model", reads=("models.*.name", "models.*.version", "measure.storage.model"))
def check_measure_model(spec: DatapathSpec) -> Iterator[Issue]:
    """measure.storage.model is a model version (name@version) listed under models."""
    ref = spec.measure.storage.model
    if ref is None:
        return
    versions = [f"{m.name}@{m.version}" for m in spec.models]
    if ref not in versions:
        yield Issue(("measure", "storage", "model"), f"model {ref} is not listed under models",
                    f"use one of {sorted(versions)[:8]}" if versions else "add it under models or leave model out")


@cross_check("MeasureGates", "measure-gates-not-empty", reads=("fabrics", "default", "storage", "outlier_ratio"))
def check_gates(gates: MeasureGates) -> Iterator[Issue]:
    """With outlier_ratio 0 at least one absolute gate is set (else nothing could ever fail)."""
    if gates.outlier_ratio:
        return
    values = [gates.default, *gates.fabrics.values(), gates.storage]
    if not any(value is not None for gate in values for value in gate.model_dump().values()):
        yield Issue(("outlier_ratio",), "outlier_ratio is 0 and no gate is set: every measurement would pass",
                    "keep outlier_ratio (default 0.5) or set a gate such as default.min_gbit_s")


@cross_check("MeasureSaturation", "measure-saturation-blocks", reads=("min_block_kib", "max_block_kib"))
def check_saturation_blocks(sat: MeasureSaturation) -> Iterator[Issue]:
    """The block-size sweep runs from min_block_kib up to max_block_kib."""
    if sat.max_block_kib < sat.min_block_kib:
        yield Issue(("max_block_kib",), f"max_block_kib {sat.max_block_kib} is below min_block_kib {sat.min_block_kib}",
                    "give max_block_kib >= min_block_kib (default 4 to 4096)")
