"""Rails in the plan: every NIC of a host on a fabric is a rail (docs/plan.md, docs/network.md).

A host's rails of a fabric are its interfaces on that fabric in the order the spec lists them:
``rail0``, ``rail1``, ... Built in two steps like the measure part: :func:`rails_template` from the
spec and the host's merged settings (shared by the hosts of one shape), then :func:`resolve` adds
the host's own addresses from its variables (``datapath_addresses``) over those of the spec, and
the GPU each rail serves where the host's facts know its topology. Nothing here reads another host
or a lab variable.

``datapath_addresses`` takes, per fabric:

* one address (``rdma: 10.0.0.11``): rail0's (the form before rails);
* a list in rail order (``rdma: [10.0.0.11, 10.0.0.12]``);
* a mapping by interface name (``rdma: {ens1f0np0: 10.0.0.11, ens2f0np0: 10.0.0.12}``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .checks import interface_key
from .checks_rails import RAILS_PER_FABRIC, parse_address, rail_networks, routed_fabrics, table_range
from .errors import SpecError

if TYPE_CHECKING:
    from .merge import Effective
    from .models import DatapathSpec, Fabric

# What rail_routing sets on every rail's interface (docs/network.md): answer ARP only for the
# interface's own addresses (arp_ignore 1), announce the interface's own address in ARP requests
# (arp_announce 2), loose reverse-path filtering (rp_filter 2: a reply that comes back on another
# rail of the same subnet is not dropped; 2 is also the largest value, so conf/all cannot make it strict).
ARP_IGNORE = 1
ARP_ANNOUNCE = 2
RP_FILTER = 2


def _name_of(iface: Any) -> str | None:
    return iface.name if iface.name is not None else (iface.match.name if iface.match else None)


def _plain_address(text: str | None) -> str | None:
    address = parse_address(text)
    return None if address is None else str(address)


def _subnet_of(address: str | None, networks: Sequence[Any]) -> str | None:
    ip = parse_address(address)
    if ip is None:
        return None
    for net in networks:
        if ip.version == net.version and ip in net:
            return str(net)
    return None


def fabric_rails(spec: DatapathSpec, eff: Effective) -> dict[str, list[dict[str, Any]]]:
    """{fabric: [rail]} of every fabric the host has interfaces on, rails in interface order, without the
    host's own addresses (those of the spec only)."""
    fabrics = {f.name: f for f in spec.fabrics}
    out: dict[str, list[dict[str, Any]]] = {}
    for iface in eff.interfaces[0] if eff.interfaces else []:
        fabric = fabrics.get(iface.fabric)
        if fabric is None:
            continue
        rails = out.setdefault(fabric.name, [])
        index = len(rails)
        key, value = interface_key(iface)
        networks = rail_networks(fabric, index)
        address = _plain_address(iface.address)
        rails.append({"fabric": fabric.name, "rail": index, "name": f"rail{index}", "interface": _name_of(iface),
                      "match": {key: value}, "address": address, "subnets": [str(n) for n in networks],
                      "subnet": _fixed_subnet(fabric, index, networks, address),
                      "gateway": fabric.rails[index].gateway if fabric.addressing == "per-rail-subnet"
                      and index < len(fabric.rails) else None})
    return out


def _fixed_subnet(fabric: Fabric, rail: int, networks: Sequence[Any], address: str | None) -> str | None:
    if fabric.addressing == "per-rail-subnet" or len(networks) == 1:
        return str(networks[0]) if networks else None
    return _subnet_of(address, networks)


def _gateway_routes(fabric: Fabric, subnet: str | None, gateway: str | None) -> list[dict[str, str]]:
    """Routes of a routed rail's table: the fabric's subnets (so the other rails' subnets) via its gateway."""
    if not gateway:
        return []
    return [{"to": text, "via": gateway} for text in fabric.subnets if text != subnet]


def rails_template(spec: DatapathSpec, eff: Effective) -> dict[str, Any]:
    """The host-independent ``rail_routing`` part (addresses and GPUs are added by :func:`resolve`)."""
    first, last = table_range(spec)
    slots = {name: index for index, name in enumerate(routed_fabrics(spec))}
    fabrics = {f.name: f for f in spec.fabrics}
    rails = []
    for name, items in fabric_rails(spec, eff).items():
        if name not in slots:
            continue  # the management fabric is never touched
        for rail in items:
            table = first + RAILS_PER_FABRIC * slots[name] + rail["rail"]
            rails.append({**rail, "addressing": fabrics[name].addressing,
                          "routes": _gateway_routes(fabrics[name], rail["subnet"], rail["gateway"]),
                          "table": table, "priority": table, "gpu": None})
    return {"rails": rails, "table_range": [first, last], "arp_ignore": ARP_IGNORE, "arp_announce": ARP_ANNOUNCE,
            "rp_filter": RP_FILTER}


# --------------------------------------------------------------------------- the host's own addresses
def host_addresses(facts: Mapping[str, Any] | None, fabric: str,
                   rails: Sequence[Mapping[str, Any]]) -> tuple[dict[int, str], list[str]]:
    """The addresses ``datapath_addresses[fabric]`` gives the rails: ({rail: address}, problems)."""
    if not isinstance(facts, Mapping):
        return {}, []
    addresses = facts.get("datapath_addresses")
    if not isinstance(addresses, Mapping):
        return {}, []
    value = addresses.get(fabric)
    where = f"datapath_addresses.{fabric}"
    found: dict[int, str] = {}
    problems: list[str] = []
    if value is None or value == "":
        return {}, []
    if isinstance(value, str):
        items: list[tuple[int | None, str, Any]] = [(0, where, value)]
    elif isinstance(value, (list, tuple)):
        items = [(index, f"{where}[{index}]", item) for index, item in enumerate(value)]
    elif isinstance(value, Mapping):
        by_name = {r["interface"]: r["rail"] for r in rails if r.get("interface")}
        items = [(by_name.get(str(k)), f"{where}.{k}", v) for k, v in value.items()]
        problems += [f"{where}.{k}: the host has no interface {k} on fabric {fabric} in its plan (rails: "
                     f"{', '.join(sorted(by_name)) or 'none named'})" for k in value if str(k) not in by_name]
    else:
        return {}, [f"{where}: give an address, a list of addresses in rail order or {{interface: address}}"]
    for rail, label, item in items:
        if rail is None:
            continue
        address = _plain_address(item) if isinstance(item, str) else None
        if address is None:
            problems.append(f"{label}: {item!r} is not an IP address")
        else:
            found[rail] = address
    return found, problems


def rail_gpu(facts: Mapping[str, Any] | None, interface: str | None) -> int | None:
    """The GPU whose nearest NIC the rail's interface is, from the host's topology facts
    (``datapath_facts.topology`` or a registered ``node_topology_result``); None where unknown."""
    if not interface or not isinstance(facts, Mapping):
        return None
    topology = None
    for holder in (facts.get("datapath_facts"), facts.get("node_topology_result")):
        if isinstance(holder, Mapping) and isinstance(holder.get("topology"), Mapping):
            topology = holder["topology"]
            break
    if topology is None:
        return None
    names = {interface}
    for nic in topology.get("nics") or []:
        if isinstance(nic, Mapping) and interface in (nic.get("netdevs") or []):
            names.add(str(nic.get("name")))
            names.update(str(r) for r in nic.get("rdma") or [])
    for gpu in topology.get("gpus") or []:
        if isinstance(gpu, Mapping) and names.intersection(str(n) for n in gpu.get("nearest_nics") or []):
            index = gpu.get("index")
            return index if isinstance(index, int) and not isinstance(index, bool) else None
    return None


def resolve(rails: Sequence[Mapping[str, Any]],
            facts: Mapping[str, Any] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The rails with the host's addresses (its variables over the spec), the subnet of each address, whether
    the address lies in its rail's subnets (``address_ok``) and the GPU; plus the problems of the variables."""
    by_fabric: dict[str, list[Mapping[str, Any]]] = {}
    for rail in rails:
        by_fabric.setdefault(str(rail["fabric"]), []).append(rail)
    given: dict[tuple[str, int], str] = {}
    problems: list[str] = []
    for fabric, items in by_fabric.items():
        found, wrong = host_addresses(facts, fabric, items)
        problems += wrong
        given.update(((fabric, rail), address) for rail, address in found.items())
        extra = sorted(r for r in found if r >= len(items))
        if extra:
            problems.append(f"datapath_addresses.{fabric} gives {len(found)} address(es) but the host has "
                            f"{len(items)} rail(s) on {fabric} in its plan")
    out = []
    for rail in rails:
        entry = dict(rail)
        address = given.get((str(rail["fabric"]), int(rail["rail"])), rail.get("address"))
        networks = [ipaddress.ip_network(t) for t in rail.get("subnets") or []]
        entry["address"] = address
        entry["address_ok"] = address is not None and (not networks or _subnet_of(address, networks) is not None)
        if address is not None and entry.get("subnet") is None:
            entry["subnet"] = _subnet_of(address, networks)
        if "gpu" in entry:
            entry["gpu"] = rail_gpu(facts, rail.get("interface"))
        out.append(entry)
    return out, problems


def rails_part(template: Mapping[str, Any], facts: Mapping[str, Any] | None) -> dict[str, Any]:
    """The host's ``rail_routing`` part: the template with its addresses and GPUs."""
    rails, _problems = resolve(template.get("rails") or [], facts)
    return {**template, "rails": rails}


def address_errors(host: str, template: Mapping[str, Any], facts: Mapping[str, Any] | None,
                   fabrics: Sequence[Mapping[str, Any]] = ()) -> list[SpecError]:
    """Node errors of the host's rail addresses: the variable's form, an address outside its rail's
    subnets (``datapath validate INVENTORY`` lists them; rail_routing refuses such a rail)."""
    rails, problems = resolve([*(template.get("rails") or []), *fabrics], facts)
    errors = [SpecError(text.split(":", 1)[0], text.split(":", 1)[1].strip(),
                        "fix the host variable datapath_addresses (docs/network.md)", host) for text in problems]
    for rail in rails:
        if rail.get("address") is not None and not rail["address_ok"]:
            errors.append(SpecError(f"datapath_addresses.{rail['fabric']}",
                                    f"{rail['name']} ({rail.get('interface') or 'interface matched by the node'}) "
                                    f"address {rail['address']} is outside its subnets "
                                    f"({', '.join(rail.get('subnets') or [])})",
                                    "give the rail an address inside its subnet", host))
    return errors


def duplicate_errors(addresses: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[SpecError]:
    """Addresses used twice across the cluster ({host: resolved rails}), each named with both owners."""
    seen: dict[str, tuple[str, Mapping[str, Any]]] = {}
    errors = []
    for host in sorted(addresses):
        for rail in addresses[host]:
            address = rail.get("address")
            if not address:
                continue
            first = seen.get(address)
            if first is None:
                seen[address] = (host, rail)
                continue
            other, theirs = first
            errors.append(SpecError(f"datapath_addresses.{rail['fabric']}",
                                    f"{rail['name']} has address {address}, which is also {other}'s "
                                    f"{theirs['name']} on {theirs['fabric']}",
                                    "give every rail of every host its own address", host))
    return errors
