# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side filters of the network roles: path_targets, path_report, firmware_violations.

They read other hosts' variables and registered results through ``hostvars`` so that the
roles can build per-host probe lists and aggregate across hosts in one task each.
Documentation: one YAML file per filter next to this file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

REPORT_VERSION = 1


def _get(mapping: Any, key: str, default: Any = None) -> Any:
    try:
        value = mapping[key]
    except (KeyError, TypeError, IndexError):
        return default
    except Exception:  # an undefined variable in hostvars raises on access
        return default
    return default if value is None else value


def _host(hostvars: Any, host: str) -> Any:
    return _get(hostvars, str(host), {})


def _addresses(hv: Any, fabric: str, addresses_var: str) -> list[tuple[str | None, str]]:
    """[(interface or None, address)] in rail order from the host variable: one address (rail0), a list
    in rail order, or {interface: address}."""
    value = _get(_get(hv, addresses_var, {}), fabric)
    if isinstance(value, str) and value:
        return [(None, value)]
    if isinstance(value, (list, tuple)):
        return [(None, str(v)) for v in value if v]
    if isinstance(value, Mapping):
        return [(str(k), str(v)) for k, v in value.items() if v]
    return []


def host_rails(hostvars: Any, host: str, fabric: str, addresses_var: str = "datapath_addresses"
               ) -> list[dict[str, Any]]:
    """A host's rails on a fabric, ``[{rail, interface, address, addressing}]``: from its plan
    (``datapath_plan``: rail_routing, else measure) where the playbook computed it, else from the host
    variable ``addresses_var``. Lab-only variables are never read (the lab writes datapath_addresses)."""
    hv = _host(hostvars, host)
    plan = _get(hv, "datapath_plan", {})
    if addresses_var == "datapath_addresses" and isinstance(plan, Mapping):
        for part, key in (("rail_routing", "rails"), ("measure", "fabrics")):
            entries = _get(_get(plan, part, {}), key, [])
            if part == "measure":
                entries = next((e.get("rails") or [] for e in entries if isinstance(e, Mapping)
                                and e.get("name") == fabric), [])
            else:
                entries = [r for r in entries if isinstance(r, Mapping) and r.get("fabric") == fabric]
            found = [{"rail": int(r.get("rail") or 0), "interface": r.get("interface"), "address": r.get("address"),
                      "addressing": r.get("addressing")} for r in entries if isinstance(r, Mapping)]
            if any(r["address"] for r in found):
                return found
    return [{"rail": index, "interface": name, "address": address, "addressing": None}
            for index, (name, address) in enumerate(_addresses(hv, fabric, addresses_var))]


def fabric_subnets(hostvars: Any, host: str, fabric: str, spec_var: str = "datapath") -> list[str]:
    """The fabric's subnets from the spec the host sees (``datapath``): path_check pings only inside
    them (empty: the module refuses the target, naming the fix)."""
    for entry in _get(_get(_host(hostvars, host), spec_var, {}), "fabrics", []) or []:
        if _get(entry, "name") == fabric:
            return [str(s) for s in _get(entry, "subnets", []) or []]
    return []


def fabric_address(hostvars: Any, host: str, fabric: str, addresses_var: str = "datapath_addresses") -> str | None:
    """A host's address on a fabric: rail0's (``datapath_addresses[fabric]``, its first entry in rail order,
    or the host's plan). Lab-only variables are never read."""
    rails = host_rails(hostvars, host, fabric, addresses_var)
    return str(rails[0]["address"]) if rails and rails[0]["address"] else None


def path_targets(interfaces: Any, hostvars: Any, hosts: Any, host: str, mode: str = "full",
                 neighbours: int = 2, fabrics: Any = None,
                 addresses_var: str = "datapath_addresses") -> list[dict[str, Any]]:
    """The ``targets`` argument of ``path_check`` for ``host``.

    ``interfaces`` is the host's plan part (``[{name, fabric, mtu, ...}]``): its interfaces on a fabric
    are the host's rails there, in order. One target per rail with an address (rail i of this host);
    peers are rail i of the other ``hosts`` with an address on that fabric: all of them (``full``) or
    the next ``neighbours`` in a ring of the hosts in the given order (``ring``). On a shared-subnet
    fabric a target also lists the peers' other rails (``cross_peers``: route checks only).
    """
    if mode not in ("full", "ring"):
        raise AnsibleFilterError(f"path_targets: mode must be full or ring, not {mode!r}")
    try:
        neighbours = int(neighbours)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"path_targets: neighbours must be a number, not {neighbours!r}")
    if neighbours < 1:
        raise AnsibleFilterError("path_targets: neighbours must be at least 1")
    if not isinstance(interfaces, Iterable) or isinstance(interfaces, (str, Mapping)):
        raise AnsibleFilterError("path_targets: input must be the plan's interfaces list")
    only = set(fabrics) if fabrics else None
    host = str(host)
    order = [str(h) for h in (hosts or [])]
    by_fabric: dict[str, list[Any]] = {}
    for item in interfaces:
        fabric = _get(item, "fabric")
        if fabric and (only is None or fabric in only):
            by_fabric.setdefault(str(fabric), []).append(item)
    targets: list[dict[str, Any]] = []
    for fabric, items in by_fabric.items():
        rails = {h: [r for r in host_rails(hostvars, h, fabric, addresses_var) if r["address"]] for h in order}
        mine = host_rails(hostvars, host, fabric, addresses_var)
        ring = [h for h in order if h == host or rails.get(h)]
        if host not in ring:
            ring.append(host)
        others = [h for h in ring if h != host]
        if mode == "ring" and len(others) > neighbours:
            start = ring.index(host)
            others = [ring[(start + k) % len(ring)] for k in range(1, neighbours + 1)]
        if not mine:
            mine = [{"rail": 0, "interface": None, "address": None, "addressing": None}]
        for rail in mine:
            index = rail["rail"]
            if index > 0 and not rail["address"]:
                continue
            item = items[index] if index < len(items) else items[0]
            shared = rail.get("addressing") == "shared-subnet" and len(mine) > 1
            peers, cross = [], []
            for h in others:
                for theirs in rails.get(h, []):
                    if theirs["rail"] == index:
                        peers.append({"name": h, "address": str(theirs["address"]), "rail": index})
                    elif shared:
                        cross.append({"name": h, "address": str(theirs["address"]), "rail": theirs["rail"]})
            interface = rail.get("interface") or _get(item, "name")
            targets.append({"fabric": fabric, "mtu": int(_get(item, "mtu", 1500)), "interface": interface,
                            "source": rail["address"], "rail": index, "peers": peers, "cross_peers": cross,
                            "subnets": fabric_subnets(hostvars, host, fabric)})
    return targets


def path_report(hostvars: Any, hosts: Any, result_var: str = "verify_result") -> dict[str, Any]:
    """Aggregate every host's ``path_check`` result: per-fabric summary, every path, ok."""
    fabrics: dict[str, dict[str, Any]] = {}
    paths: list[dict[str, Any]] = []
    missing: list[str] = []
    for host in [str(h) for h in (hosts or [])]:
        result = _get(_host(hostvars, host), result_var)
        if not isinstance(result, Mapping) or "paths" not in result:
            missing.append(host)
            continue
        for path in result["paths"]:
            keys = ("fabric", "peer", "address", "interface", "mtu", "largest_mtu", "ok", "probes")
            row: dict[str, Any] = {"source": host}
            row.update((k, path.get(k)) for k in keys)
            # the rail checks (path_check of this version): only where present, so older results read the same
            row.update((k, path[k]) for k in ("rail", "peer_rail", "route_dev", "route_ok", "arp") if k in path)
            paths.append(row)
            entry = fabrics.setdefault(row["fabric"], {"mtu": row["mtu"], "pairs": 0, "passed": 0,
                                                       "failed": [], "ok": True})
            entry["pairs"] += 1
            if row["ok"]:
                entry["passed"] += 1
                continue
            entry["ok"] = False
            top: dict[str, Any] = (row["probes"] or [{}])[0]
            entry["failed"].append({"source": host, "peer": row["peer"], "mtu": row["mtu"],
                                    "largest_mtu": row["largest_mtu"], "loss": top.get("loss"),
                                    "error": top.get("error")})
    fabrics = dict(sorted(fabrics.items()))
    summary = []
    failures = []
    for name, entry in fabrics.items():
        line = "%s: MTU %s, %d/%d paths pass" % (name, entry["mtu"], entry["passed"], entry["pairs"])
        if entry["failed"]:
            line += "; failing: " + ", ".join("%s -> %s" % (f["source"], f["peer"]) for f in entry["failed"])
        summary.append(line)
        for f in entry["failed"]:
            failures.append("%s -> %s on %s (MTU %s): largest passing MTU %s%s" % (
                f["source"], f["peer"], name, f["mtu"], f["largest_mtu"] or "none",
                ", " + f["error"] if f["error"] else ", %s%% loss at %s" % (f["loss"], f["mtu"])))
    summary.extend("%s: no path_check result (failed or unreachable before verify)" % h for h in missing)
    failures.extend("%s: no path_check result" % h for h in missing)
    rails = rail_report(hostvars, hosts, paths, result_var)
    summary.extend(rails["summary"])
    return {"version": REPORT_VERSION, "ok": all(f["ok"] for f in fabrics.values()) and not missing,
            "fabrics": fabrics, "summary": summary, "failures": failures, "paths": paths, "missing": missing,
            "rails": rails}


def rail_report(hostvars: Any, hosts: Any, paths: list[dict[str, Any]], result_var: str) -> dict[str, Any]:
    """The rail checks of every host: wrong egress (``ip route get PEER from SELF`` names another device than
    the rail's; also for the cross-rail peers of a shared subnet) and ARP flux (more than one NIC, or another
    NIC than the peer's rail's, answers ARP for its rail address). ``ok`` is false on either."""
    nics: dict[str, dict[str, str]] = {}
    cross: list[dict[str, Any]] = []
    for host in [str(h) for h in (hosts or [])]:
        result = _get(_host(hostvars, host), result_var)
        if isinstance(result, Mapping):
            nics[host] = {str(k): str(v).lower() for k, v in (_get(result, "nics", {}) or {}).items()}
            cross.extend(dict(c, source=host) for c in _get(result, "cross_rails", []) or [])
    owner = {mac: (host, name) for host, table in nics.items() for name, mac in table.items() if mac}
    rail_if = {(p["source"], p.get("fabric"), p.get("rail")): p.get("interface") for p in paths if "rail" in p}
    egress, flux = [], []
    checked = 0
    for path in paths + cross:
        if path.get("route_ok") is not None:
            checked += 1
        if path.get("route_ok") is False:
            egress.append({"host": path["source"], "fabric": path.get("fabric"), "rail": path.get("rail"),
                           "interface": path.get("interface"), "peer": path.get("peer"),
                           "peer_rail": path.get("peer_rail"), "address": path.get("address"),
                           "route_dev": path.get("route_dev")})
        macs = list((path.get("arp") or {}).get("macs") or [])
        if not macs:
            continue
        expected = rail_if.get((path.get("peer"), path.get("fabric"), path.get("peer_rail")))
        answered = [{"mac": m, "host": owner.get(m, (None, None))[0], "interface": owner.get(m, (None, None))[1]}
                    for m in macs]
        wrong = [a for a in answered if a["interface"] is not None
                 and (a["host"] != path.get("peer") or (expected and a["interface"] != expected))]
        if len(macs) > 1 or wrong:
            flux.append({"host": path.get("peer"), "fabric": path.get("fabric"), "rail": path.get("peer_rail"),
                         "interface": expected, "address": path.get("address"), "asked_by": path["source"],
                         "answered_by": answered})
    summary = []
    lines = []
    for item in egress:
        lines.append("wrong-egress: %s %s rail%s (%s): ip route get %s from its address leaves by %s" % (
            item["host"], item["fabric"], item["rail"], item["interface"], item["address"], item["route_dev"]))
    for item in flux:
        lines.append("arp-flux: %s %s rail%s (%s): %d NIC(s) answer ARP for %s (%s)" % (
            item["host"], item["fabric"], item["rail"], item["interface"] or "?", len(item["answered_by"]),
            item["address"], ", ".join("%s %s" % (a["host"] or "?", a["interface"] or a["mac"])
                                       for a in item["answered_by"])))
    if checked:
        summary.append("rails: %d route check(s), %d leave by another NIC; %d address(es) with ARP flux"
                       % (checked, len(egress), len({(f['host'], f['address']) for f in flux})))
    return {"ok": not egress and not flux, "route_checks": checked, "wrong_egress": egress, "arp_flux": flux,
            "cross_rails": cross, "summary": summary, "failures": lines}


def _policies_of(hv: Any, default: Any) -> list[Any]:
    """The host's own plan policies when its plan is a host variable/fact, else ``default``."""
    plan = _get(hv, "datapath_plan", {})
    policies = _get(_get(plan, "nic_firmware", {}), "policies")
    return list(policies if policies is not None else (default or []))


def firmware_violations(hostvars: Any, hosts: Any, result_var: str = "nic_firmware_result",
                        fail_on_unknown: bool = False, policies: Any = None) -> list[dict[str, Any]]:
    """Every noncompliant NIC of every host, plus the NICs of unknown status that a policy
    demands (a policy names their driver) or all unknown ones with ``fail_on_unknown``.

    The policies of a host are its ``datapath_plan.nic_firmware.policies`` host variable when set,
    else ``policies`` (registered results do not carry the module arguments)."""
    found: list[dict[str, Any]] = []
    for host in [str(h) for h in (hosts or [])]:
        hv = _host(hostvars, host)
        result = _get(hv, result_var)
        if not isinstance(result, Mapping) or "compliance" not in result:
            continue
        drivers = {_get(p, "driver") for p in _policies_of(hv, policies) if _get(p, "driver")}
        for row in result["compliance"]:
            status = row.get("status")
            if status == "noncompliant":
                pass
            elif status == "unknown" and (fail_on_unknown or row.get("driver") in drivers):
                pass
            else:
                continue
            has = row.get("firmware_version") or "no firmware version"
            needs = row.get("needs") or ("firmware information (a policy for driver %s)" % row.get("driver")
                                         if row.get("driver") in drivers else "firmware information")
            text = "%s %s (%s, driver %s, PSID %s): has %s, needs %s — %s" % (
                host, row.get("interface"), row.get("bus_info") or "no bus address", row.get("driver") or "?",
                row.get("psid") or "?", has, needs, row.get("reason"))
            found.append({"host": host, "interface": row.get("interface"), "bus_info": row.get("bus_info"),
                          "driver": row.get("driver"), "psid": row.get("psid"), "status": status,
                          "has": has, "needs": needs, "reason": row.get("reason"), "text": text})
    return found


def nic_config_violations(hostvars: Any, hosts: Any, result_var: str = "nic_config_result") -> list[dict[str, Any]]:
    """Every NIC of every host whose firmware settings did not take effect after the reboot they were set
    for (nic_config's ``not_applied``): the ``nvconfig-not-applied-after-reboot`` gate, listed once."""
    found: list[dict[str, Any]] = []
    for host in [str(h) for h in (hosts or [])]:
        result = _get(_host(hostvars, host), result_var)
        if not isinstance(result, Mapping):
            continue
        for row in result.get("not_applied") or []:
            if not isinstance(row, Mapping):
                continue
            params = [p.get("param") for p in row.get("params") or [] if isinstance(p, Mapping)]
            found.append({"host": host, "pci": row.get("pci"), "psid": row.get("psid"),
                          "part_number": row.get("part_number"), "params": params,
                          "check": "nvconfig-not-applied-after-reboot",
                          "text": "%s %s" % (host, row.get("text") or ", ".join(str(p) for p in params))})
    return found


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "path_targets": path_targets,
            "path_report": path_report,
            "firmware_violations": firmware_violations,
            "nic_config_violations": nic_config_violations,
        }
