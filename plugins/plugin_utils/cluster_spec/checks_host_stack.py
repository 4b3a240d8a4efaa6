"""Cross-checks of the host-stack sections ``nic_affinity`` and ``ebpf`` (docs/host-stack.md), registered like
those in :mod:`.checks`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .checks import _layers
from .errors import Issue
from .registry import cross_check

if TYPE_CHECKING:
    from .models import DatapathSpec, Ebpf, NicAffinity, NicChannels, NicRings


def cpus_of(text: str) -> set[int] | None:
    """The CPUs of a spec CPU list (``8-15,24``); None when a range runs backwards."""
    out: set[int] = set()
    for part in text.split(","):
        low, _sep, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            return None
        out.update(range(first, last + 1))
    return out


@cross_check("NicChannels", "nic-channels-given")
def check_channels(channels: NicChannels) -> Iterator[Issue]:
    """A channels section sets at least one count."""
    if channels.combined is None and channels.rx is None and channels.tx is None:
        yield Issue((), "channels sets no count", "give combined (mlx5, ice), or rx and tx, or remove channels")


@cross_check("NicRings", "nic-rings-given")
def check_rings(rings: NicRings) -> Iterator[Issue]:
    """A rings section sets at least one size."""
    if rings.rx is None and rings.tx is None:
        yield Issue((), "rings sets no size", "give rx and/or tx, or remove rings")


@cross_check("NicAffinity", "nic-affinity-cpus", reads=("cpus", "exclude_cpus"))
def check_affinity_cpus(affinity: NicAffinity) -> Iterator[Issue]:
    """cpus and exclude_cpus run forwards (8-15, not 15-8), and cpus keeps a CPU that exclude_cpus does not take."""
    found: dict[str, set[int]] = {}
    for name in ("cpus", "exclude_cpus"):
        text = getattr(affinity, name)
        if text is None:
            continue
        cpus = cpus_of(text)
        if cpus is None:
            yield Issue((name,), f"{text!r} has a range that runs backwards", "write each range low-high, e.g. 8-15")
        else:
            found[name] = cpus
    if "cpus" in found and "exclude_cpus" in found and not found["cpus"] - found["exclude_cpus"]:
        yield Issue(("exclude_cpus",), "exclude_cpus takes out every CPU of cpus: no CPU is left for the IRQs",
                    "exclude fewer CPUs, or widen cpus")


@cross_check("Ebpf", "ebpf-features", reads=("features",))
def check_ebpf_features(ebpf: Ebpf) -> Iterator[Issue]:
    """Each feature once; netkit and BIG TCP run with BPF host routing, BIG TCP with native routing (no tunnel),
    as Cilium's tuning guide requires."""
    seen: set[str] = set()
    for index, feature in enumerate(ebpf.features):
        if feature in seen:
            yield Issue(("features", index), f"{feature} is listed twice", "list each feature once")
        seen.add(feature)
    needs = {"netkit": ("bpf-host-routing",), "big-tcp": ("bpf-host-routing", "native-routing")}
    for name, required in needs.items():
        if name not in seen:
            continue
        for other in required:
            if other not in seen:
                yield Issue(("features",), f"{name} needs {other} (Cilium's performance tuning guide)",
                            f"add {other} to features, or remove {name}")


@cross_check("DatapathSpec", "host-stack-fabrics", reads=(
    "fabrics.*.name", "profiles.<item>.nic_affinity", "profiles.<item>.ebpf", "hosts.<item>.nic_affinity",
    "hosts.<item>.ebpf"))
def check_host_stack_fabrics(spec: DatapathSpec) -> Iterator[Issue]:
    """nic_affinity.fabrics and ebpf.fabric name fabrics that are defined."""
    fabrics = {f.name for f in spec.fabrics}
    for base, body in _layers(spec):
        affinity: Any = body.nic_affinity
        for index, name in enumerate(affinity.fabrics or [] if affinity is not None else []):
            if name not in fabrics:
                yield Issue((*base, "nic_affinity", "fabrics", index), f"fabric {name!r} is not defined",
                            f"use one of {sorted(fabrics)} or add it under fabrics")
        ebpf: Any = body.ebpf
        if ebpf is not None and ebpf.fabric is not None and ebpf.fabric not in fabrics:
            yield Issue((*base, "ebpf", "fabric"), f"fabric {ebpf.fabric!r} is not defined",
                        f"use one of {sorted(fabrics)} or add it under fabrics")
