"""The plan's ``measure`` part: what the measure role asks of one host (docs/measure.md, docs/plan.md).

Built in two steps: :func:`measure_template` from the spec and the host's merged settings (shared by
hosts of the same shape), then :func:`measure_part` adds the host's own fabric addresses from its
variables. Nothing here reads another host: the schedule (pairs across hosts) is made on the
controller by the ``measure_schedule`` filter.
"""

from __future__ import annotations

import ipaddress
import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .checks_measure import measured_fabrics
from .plan_rails import fabric_rails, resolve

if TYPE_CHECKING:
    from .merge import Effective
    from .models import DatapathSpec, MeasureFabricGate


def in_subnets(address: str | None, subnets: Sequence[str]) -> bool:
    """``address`` (optionally with a /prefix) lies inside one of ``subnets``."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_interface(str(address)).ip
    except ValueError:
        return False
    for text in subnets:
        try:
            if ip in ipaddress.ip_network(text, strict=False):
                return True
        except ValueError:
            continue
    return False


def _gate(gate: MeasureFabricGate) -> dict[str, Any]:
    return gate.model_dump(mode="json")


def gates_of(spec: DatapathSpec) -> dict[str, Any]:
    """The effective gates: one entry per measured fabric (its own or the default), storage, outlier_ratio."""
    gates = spec.measure.gates
    return {"fabrics": {name: _gate(gates.fabrics.get(name, gates.default)) for name in measured_fabrics(spec)},
            "storage": gates.storage.model_dump(mode="json"), "outlier_ratio": gates.outlier_ratio}


def _raw_device(storage: Any) -> str | None:
    if storage.raid is not None:
        return f"/dev/md/{storage.raid.name}"
    if storage.devices:
        return str(storage.devices[0])
    return None  # devices chosen by `select`: known only on the node


def _model(spec: DatapathSpec, held: Sequence[int], cache_dir: str) -> dict[str, Any] | None:
    ref = spec.measure.storage.model
    for index in held:
        model = spec.models[index]
        if f"{model.name}@{model.version}" == ref:
            return {"name": model.name, "version": model.version,
                    "path": posixpath.join(cache_dir, model.name, model.version)}
    return None


def measure_template(spec: DatapathSpec, eff: Effective, held: Sequence[int]) -> dict[str, Any]:
    """The host-independent part of ``measure`` (addresses are added by :func:`measure_part`)."""
    m = spec.measure
    fabrics = {f.name: f for f in spec.fabrics}
    interfaces: dict[str, str | None] = {}
    for iface in eff.interfaces[0] if eff.interfaces else []:
        name = iface.name if iface.name is not None else (iface.match.name if iface.match else None)
        interfaces.setdefault(iface.fabric, name)
    rails = fabric_rails(spec, eff)
    storage: dict[str, Any] | None = None
    if eff.storage is not None:
        st = eff.storage[0]
        mount = st.mount.path
        storage = {"mount": mount, "test_file": posixpath.join(mount, m.storage.test_file),
                   "test_file_size": m.storage.test_file_size,
                   "raw_device": _raw_device(st) if m.storage.raw_device else None,
                   "model": _model(spec, held, posixpath.join(mount, spec.model_cache.directory))}
    return {
        "mode": m.mode, "sample_peers": m.sample_peers, "seed": m.seed, "streams": m.streams,
        "duration": m.duration, "tool": m.tool, "port": m.port,
        "fabrics": [{"name": name, "subnets": list(fabrics[name].subnets), "mtu": fabrics[name].mtu,
                     "carried": name in interfaces, "interface": interfaces.get(name),
                     "rails": [{k: r[k] for k in ("rail", "name", "interface", "address", "subnets", "fabric")}
                               for r in rails.get(name, [])]}
                    for name in measured_fabrics(spec)],
        "storage": storage,
        "gates": gates_of(spec),
        "saturation": saturation_of(spec),
        "baseline": spec.measure.baseline.model_dump(mode="json"),
        # the checkpoint burst runs on the cache filesystem: none without one
        "checkpoint": {**m.checkpoint.model_dump(mode="json"),
                       "directory": posixpath.join(storage["mount"], m.checkpoint.directory)} if storage else None,
        "small_files": {**m.small_files.model_dump(mode="json"),
                        "directory": posixpath.join(storage["mount"], m.small_files.directory)} if storage else None,
    }


def _address_rails(facts: Mapping[str, Any] | None, fabric: str) -> list[dict[str, Any]]:
    """Rails of a fabric the host has no interface on in its plan, from the addresses of its variables."""
    value = (facts or {}).get("datapath_addresses") if isinstance(facts, Mapping) else None
    value = value.get(fabric) if isinstance(value, Mapping) else None
    count = len(value) if isinstance(value, (list, tuple, Mapping)) else (1 if value else 0)
    names = list(value) if isinstance(value, Mapping) else [None] * count
    return [{"rail": index, "name": f"rail{index}", "interface": names[index], "address": None, "subnets": [],
             "fabric": fabric} for index in range(count)]


def _doublings(low: int, high: int) -> list[int]:
    out = [low]
    while out[-1] * 2 <= high:
        out.append(out[-1] * 2)
    return out if out[-1] == high else [*out, high]


def saturation_of(spec: DatapathSpec) -> dict[str, Any]:
    """The saturation settings with the loads of each sweep spelled out (1, 2, 4 ... up to each top)."""
    sat = spec.measure.saturation
    return {**sat.model_dump(mode="json"), "streams": _doublings(1, sat.max_streams),
            "queue_depths": _doublings(1, sat.max_queue_depth),
            "block_sizes_kib": _doublings(sat.min_block_kib, max(sat.min_block_kib, sat.max_block_kib))}


def measure_part(template: Mapping[str, Any], facts: Mapping[str, Any] | None) -> dict[str, Any]:
    """The host's ``measure`` part: the template plus its addresses on each fabric it carries (an
    interface in its plan, or an address in its variables), per rail; ``address_ok`` is false for an
    address outside the fabric's subnets, which is never used. ``address`` and ``interface`` of a
    fabric are its rail0's."""
    part = {k: v for k, v in template.items() if k != "fabrics"}
    fabrics = []
    for entry in template["fabrics"]:
        planned = [dict(r) for r in entry.get("rails") or []] or _address_rails(facts, entry["name"])
        for rail in planned:
            rail["subnets"] = list(entry["subnets"])
        rails, _problems = resolve(planned, facts)
        if not entry["carried"] and not any(r["address"] for r in rails):
            continue
        rows = [{"rail": r["rail"], "name": r["name"], "interface": r["interface"], "address": r["address"],
                 "address_ok": in_subnets(r["address"], entry["subnets"])} for r in rails]
        first = rows[0] if rows else {"interface": None, "address": None}
        fabrics.append({"name": entry["name"], "subnets": list(entry["subnets"]), "mtu": entry["mtu"],
                        "interface": entry["interface"] or first["interface"],
                        "address": first["address"], "address_ok": in_subnets(first["address"], entry["subnets"]),
                        "rails": rows})
    part["fabrics"] = fabrics
    return part
