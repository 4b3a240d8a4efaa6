"""Cross-checks of rails: several NICs of a host on one fabric (docs/network.md, "Several NICs on one
fabric"), registered like those in :mod:`.checks`.

A fabric is ``shared-subnet`` (every rail in the fabric's subnets) or ``per-rail-subnet`` (rail i in
``rails[i].subnet``); the addresses the spec gives (``interfaces[].address``) lie in their rail's
subnet and are unique; the routing tables and rule priorities of rail routing stay out of the ranges
other software owns. Addresses from host variables are checked when a host is planned
(:mod:`.plan_rails`), and their uniqueness across the cluster by ``datapath validate INVENTORY``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .errors import Issue, join_path
from .registry import cross_check

if TYPE_CHECKING:
    from .models import DatapathSpec, Fabric

# Routing table ids (and rule priorities) that other software owns: a rail table there could take
# over or lose their routes (docs/network.md). Cilium: 200 (route table of its ENI/Azure IPAM), 202
# (its VTEP table), 2004 and 2005 (proxy and egress-gateway tables); the kernel's default, main and
# local tables; cloud network utilities (amazon-ec2-net-utils, Azure/GCP guest agents) from 10000 up.
RESERVED_TABLES: tuple[tuple[int, int, str], ...] = (
    (200, 200, "Cilium"), (202, 202, "Cilium"), (2004, 2005, "Cilium"),
    (253, 255, "the kernel (default, main, local)"), (10000, 2**32 - 1, "cloud network utilities"),
)
RAILS_PER_FABRIC = 16  # table ids per routed fabric: rail r of the k-th routed fabric is base + 16 k + r


def routed(fabric: Fabric) -> bool:
    """Rail routing covers every fabric but the management one (which is never touched)."""
    return fabric.purpose != "management"


def routed_fabrics(spec: DatapathSpec) -> list[str]:
    """Names of the fabrics rail routing covers, in spec order (their position gives their table slot)."""
    return [f.name for f in spec.fabrics if routed(f)]


def table_range(spec: DatapathSpec) -> tuple[int, int]:
    """The table ids (= rule priorities) rail routing may use: first and last, inclusive."""
    base = spec.rail_routing.table_base
    return base, base + RAILS_PER_FABRIC * max(1, len(routed_fabrics(spec))) - 1


def reserved_overlap(first: int, last: int) -> list[str]:
    """The reserved ranges [first, last] touches, as text (empty: none)."""
    return [f"{low}" + (f"-{high}" if high != low and high < 2**32 - 1 else "+" if high != low else "")
            + f" ({owner})" for low, high, owner in RESERVED_TABLES if low <= last and first <= high]


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError:
        return None


def _networks(texts: list[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [net for net in (_network(t) for t in texts) if net is not None]


def parse_address(text: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An interface address ``10.0.0.1`` or ``10.0.0.1/24`` as an address; None when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return ipaddress.ip_interface(text).ip
    except ValueError:
        return None


def inside(address: Any, networks: list[Any]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


@cross_check("Fabric", "rail-subnets", reads=("addressing", "rails", "subnets", "purpose"))
def check_rail_subnets(fabric: Fabric) -> Iterator[Issue]:
    """per-rail-subnet lists each rail's subnet (inside the fabric's subnets, not overlapping one another,
    the gateway inside its subnet); shared-subnet lists no rails; the management fabric is not routed per
    rail."""
    if fabric.addressing == "shared-subnet":
        if fabric.rails:
            yield Issue(("rails",), "rails are listed but addressing is shared-subnet (every rail uses the "
                        "fabric's subnets)", "set addressing: per-rail-subnet, or remove rails")
        return
    if fabric.purpose == "management":
        yield Issue(("addressing",), "the management fabric is never routed per rail",
                    "keep addressing: shared-subnet on the management fabric")
    if not fabric.rails:
        yield Issue(("rails",), "addressing is per-rail-subnet but no rail lists its subnet",
                    "list rails: [{subnet: ...}, ...], one entry per NIC of a host on this fabric, in interface order")
    if not fabric.subnets:
        yield Issue(("subnets",), "a per-rail-subnet fabric lists no subnets",
                    "list the fabric's address range(s) under subnets; each rail's subnet lies inside them")
    ranges = _networks(list(fabric.subnets))
    seen: list[tuple[Any, int]] = []
    for index, rail in enumerate(fabric.rails):
        net = _network(rail.subnet)
        if net is None:
            yield Issue(("rails", index, "subnet"), f"{rail.subnet!r} is not a network in CIDR form without host bits",
                        "write it like 10.200.1.0/24")
            continue
        if ranges and not any(net.version == r.version and net.subnet_of(r) for r in ranges):  # type: ignore[arg-type]
            yield Issue(("rails", index, "subnet"), f"rail{index}'s subnet {net} is outside the fabric's subnets "
                        f"({', '.join(str(r) for r in ranges)})", "widen the fabric's subnets or fix the rail's")
        for other, other_index in seen:
            if net.version == other.version and net.overlaps(other):
                yield Issue(("rails", index, "subnet"), f"rail{index}'s subnet {net} overlaps rail{other_index}'s "
                            f"{other}", "give every rail its own subnet")
        seen.append((net, index))
        if rail.gateway is not None:
            gateway = parse_address(rail.gateway)
            if gateway is None or "/" in rail.gateway:
                yield Issue(("rails", index, "gateway"), f"{rail.gateway!r} is not an IP address",
                            "give the router's address, e.g. 10.200.1.1")
            elif gateway.version != net.version or gateway not in net or gateway in (
                    net.network_address, getattr(net, "broadcast_address", None)):
                yield Issue(("rails", index, "gateway"), f"gateway {gateway} is not a host address of rail{index}'s "
                            f"subnet {net}", "give the router's address inside the rail's subnet")


@cross_check("DatapathSpec", "rail-table-range", reads=("rail_routing", "fabrics.*.purpose"))
def check_table_range(spec: DatapathSpec) -> Iterator[Issue]:
    """The table ids and rule priorities of rail routing (table_base + 16 per routed fabric) avoid the
    ranges other software owns and stay below main's rule priority 32766."""
    first, last = table_range(spec)
    clash = reserved_overlap(first, last)
    if clash:
        yield Issue(("rail_routing", "table_base"), f"rail routing would use tables {first}-{last}, which "
                    f"include {', '.join(clash)}",
                    f"choose a table_base whose range of {last - first + 1} ids avoids them (default 3100)")


def _layers(spec: DatapathSpec) -> Iterator[tuple[tuple[Any, ...], Any, bool]]:
    for index, prof in enumerate(spec.profiles):
        yield ("profiles", index), prof, False
    for host, body in spec.hosts.items():
        yield ("hosts", host), body, True


@cross_check("DatapathSpec", "rail-addresses", reads=(
    "fabrics.*.name", "fabrics.*.subnets", "fabrics.*.addressing", "fabrics.*.rails",
    "profiles.<item>.interfaces", "hosts.<item>.interfaces"))
def check_rail_addresses(spec: DatapathSpec) -> Iterator[Issue]:
    """Each interfaces[].address is an IP address inside its rail's subnet (rail i: the i-th interface of
    its fabric in the list; per-rail-subnet: rails[i].subnet, else the fabric's subnets); a per-rail-subnet
    fabric has no more interfaces in a list than rails; an address is given once across the hosts."""
    fabrics = {f.name: f for f in spec.fabrics}
    owners: dict[Any, tuple[Any, ...]] = {}
    for base, body, is_host in _layers(spec):
        counts: dict[str, int] = {}
        for index, iface in enumerate(body.interfaces or []):
            fabric = fabrics.get(iface.fabric)
            if fabric is None:
                continue  # interface-fabric names it
            rail = counts.get(iface.fabric, 0)
            counts[iface.fabric] = rail + 1
            where = (*base, "interfaces", index)
            if fabric.addressing == "per-rail-subnet" and fabric.rails and rail >= len(fabric.rails):
                yield Issue(where, f"this is rail{rail} of fabric {fabric.name}, which lists the subnets of "
                            f"{len(fabric.rails)} rail(s) only", f"add rails[{rail}] to fabric {fabric.name}")
                continue
            if iface.address is None:
                continue
            address = parse_address(iface.address)
            if address is None:
                yield Issue((*where, "address"), f"{iface.address!r} is not an IP address",
                            "write the interface's address, e.g. 10.100.0.11 (optionally with /prefix)")
                continue
            nets = rail_networks(fabric, rail)
            if nets and not inside(address, nets):
                yield Issue((*where, "address"), f"{address} is outside the subnet of rail{rail} of fabric "
                            f"{fabric.name} ({', '.join(str(n) for n in nets)})",
                            "give the rail an address inside its subnet")
            if is_host:
                first = owners.get(address)
                if first is not None:
                    yield Issue((*where, "address"), f"{address} is already the address of {_path(first)}",
                                "give every rail of every host its own address")
                owners.setdefault(address, where)


def _path(parts: tuple[Any, ...]) -> str:
    return join_path(parts, "")


def rail_networks(fabric: Fabric, rail: int) -> list[Any]:
    """The networks rail ``rail`` of ``fabric`` is addressed in (empty when the spec names none)."""
    if fabric.addressing == "per-rail-subnet":
        if rail < len(fabric.rails):
            net = _network(fabric.rails[rail].subnet)
            return [net] if net is not None else []
        return []
    return _networks(list(fabric.subnets))


__all__ = ["RESERVED_TABLES", "RAILS_PER_FABRIC", "table_range", "routed_fabrics", "rail_networks",
           "parse_address", "inside"]
