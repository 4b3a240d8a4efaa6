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


def fabric_address(hostvars: Any, host: str, fabric: str, addresses_var: str = "datapath_addresses") -> str | None:
    """A host's address on a fabric: ``datapath_addresses[fabric]``, else the lab's
    ``datapath_lab_interfaces[fabric].address``."""
    hv = _host(hostvars, host)
    address = _get(_get(hv, addresses_var, {}), fabric)
    if address:
        return str(address)
    lab = _get(_get(hv, "datapath_lab_interfaces", {}), fabric, {})
    address = _get(lab, "address")
    return str(address) if address else None


def fabric_subnets(hostvars: Any, host: str, fabric: str, spec_var: str = "datapath") -> list[str]:
    """The fabric's subnets from the spec the host sees (``datapath``): path_check pings only inside
    them (empty: the module refuses the target, naming the fix)."""
    for entry in _get(_get(_host(hostvars, host), spec_var, {}), "fabrics", []) or []:
        if _get(entry, "name") == fabric:
            return [str(s) for s in _get(entry, "subnets", []) or []]
    return []


def _fabric_ifname(hostvars: Any, host: str, fabric: str) -> str | None:
    lab = _get(_get(_host(hostvars, host), "datapath_lab_interfaces", {}), fabric, {})
    name = _get(lab, "ifname")
    return str(name) if name else None


def path_targets(interfaces: Any, hostvars: Any, hosts: Any, host: str, mode: str = "full",
                 neighbours: int = 2, fabrics: Any = None,
                 addresses_var: str = "datapath_addresses") -> list[dict[str, Any]]:
    """The ``targets`` argument of ``path_check`` for ``host``.

    ``interfaces`` is the host's plan part (``[{name, fabric, mtu, ...}]``); one target per
    fabric (the first interface of a fabric wins). Peers are the other ``hosts`` with an
    address on that fabric: all of them (``full``) or the next ``neighbours`` in a ring of
    the hosts in the given order (``ring``).
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
    targets: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in interfaces:
        fabric = _get(item, "fabric")
        if not fabric or fabric in seen or (only is not None and fabric not in only):
            continue
        seen.add(fabric)
        mine = fabric_address(hostvars, host, fabric, addresses_var)
        ring = [h for h in order if h == host or fabric_address(hostvars, h, fabric, addresses_var)]
        if host not in ring:
            ring.append(host)
        others = [h for h in ring if h != host]
        if mode == "ring" and len(others) > neighbours:
            start = ring.index(host)
            others = [ring[(start + k) % len(ring)] for k in range(1, neighbours + 1)]
        peers = [{"name": h, "address": fabric_address(hostvars, h, fabric, addresses_var)} for h in others]
        interface = _get(item, "name") or _fabric_ifname(hostvars, host, fabric)
        targets.append({"fabric": fabric, "mtu": int(_get(item, "mtu", 1500)), "interface": interface,
                        "source": mine, "peers": peers, "subnets": fabric_subnets(hostvars, host, fabric)})
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
    return {"version": REPORT_VERSION, "ok": all(f["ok"] for f in fabrics.values()) and not missing,
            "fabrics": fabrics, "summary": summary, "failures": failures, "paths": paths, "missing": missing}


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
