# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare one host's plan (docs/plan.md) with its ``datapath_facts``: a list of findings.

A finding is a plain dict (the ``findings[]`` items of docs/schema/audit.schema.json)::

    {host, capability, check, key, wanted, actual, severity, kind, reason, fix}

* ``kind: drift``: the node differs from its plan (a value the collection manages);
* ``kind: finding``: a problem beyond the plan (socket buffers below the bandwidth-delay
  product, lossy RoCE, THP defrag that stalls, path MTU, firmware below policy, the GPU/NIC/PCIe
  topology findings of plugin_utils/topology_findings.py, ...).

A finding beyond drift is dropped when a drift with the same capability and key is already
reported: one cause, one line. Sections that were not gathered (``null`` facts) are not
compared. Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.aiinfra.datapath.plugins.plugin_utils.audit.rails import rail_drift
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.topology_findings import topology_findings
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.topology_golden import golden_findings

# The capabilities findings belong to (named as the modules, roles and plan parts), in report order.
CAPABILITIES = ("sysctl_profile", "hugepages", "kernel_cmdline", "link_mtu", "rail_routing", "roce_qos", "nic_firmware",
                "nic_config", "nvme_layout", "nic_affinity", "ebpf_readiness", "nfd_labels", "node_topology")
SEVERITIES = ("error", "warning", "info")
KINDS = ("drift", "finding")
FAIL_ON = ("drift", "error", "never")

# Round-trip time used for the bandwidth-delay product when the caller states none: 100 µs
# covers a loaded multi-tier data-centre fabric (base RTT of a few µs plus switch queueing).
DEFAULT_RTT_US = 100.0
# Sysctl keys whose value (the last field for tcp_rmem/tcp_wmem) bounds a socket buffer.
BUFFER_KEYS = ("net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")

Finding = dict[str, Any]


@dataclass(frozen=True)
class AuditOptions:
    """Knobs of the comparison (role variables ``audit_*``)."""

    rtt_us: float = DEFAULT_RTT_US
    link_speed_mbps: int | None = None  # used when the facts have no interface speed
    check_buffers: bool = True


def options_from(raw: Mapping[str, Any] | None) -> AuditOptions:
    raw = raw or {}
    rtt = raw.get("rtt_us", DEFAULT_RTT_US)
    speed = raw.get("link_speed_mbps")
    if isinstance(rtt, bool) or not isinstance(rtt, (int, float, str)):
        raise ValueError(f"rtt_us must be a positive number of microseconds, got {rtt!r}")
    try:
        rtt_value = float(rtt)
    except ValueError:
        raise ValueError(f"rtt_us must be a positive number of microseconds, got {rtt!r}") from None
    if rtt_value <= 0:
        raise ValueError(f"rtt_us must be a positive number of microseconds, got {rtt!r}")
    speed_value: int | None = None
    if speed not in (None, ""):
        try:
            speed_value = int(speed)
        except (TypeError, ValueError):
            raise ValueError(f"link_speed_mbps must be an integer (Mb/s), got {speed!r}") from None
    return AuditOptions(rtt_us=rtt_value, link_speed_mbps=speed_value,
                        check_buffers=bool(raw.get("check_buffers", True)))


def is_failure(finding: Mapping[str, Any]) -> bool:
    """A finding that fails its JUnit test case: an error, or a drift of severity warning/error."""
    return finding.get("severity") == "error" or (
        finding.get("kind") == "drift" and finding.get("severity") in ("error", "warning"))


def fails(findings: Iterable[Mapping[str, Any]], fail_on: str = "drift") -> bool:
    """Whether the audit fails the pipeline.

    ``drift``: any failing finding (``is_failure``: drift of severity error/warning, or any
    error); ``error``: any finding of severity error; ``never``.
    """
    if fail_on not in FAIL_ON:
        raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON)}, got {fail_on!r}")
    items = list(findings)
    if fail_on == "never":
        return False
    if fail_on == "error":
        return any(f.get("severity") == "error" for f in items)
    return any(is_failure(f) for f in items)


class _Collector:
    def __init__(self, host: str) -> None:
        self.host = host
        self.items: list[Finding] = []

    def add(self, capability: str, check: str, key: str, wanted: Any, actual: Any, severity: str,
            kind: str, reason: str, fix: str) -> None:
        self.items.append({"host": self.host, "capability": capability, "check": check, "key": key,
                           "wanted": wanted, "actual": actual, "severity": severity, "kind": kind,
                           "reason": reason, "fix": fix})

    def drift(self, capability: str, check: str, key: str, wanted: Any, actual: Any, reason: str, fix: str,
              severity: str = "error") -> None:
        self.add(capability, check, key, wanted, actual, severity, "drift", reason, fix)

    def finding(self, capability: str, check: str, key: str, wanted: Any, actual: Any, severity: str,
                reason: str, fix: str) -> None:
        self.add(capability, check, key, wanted, actual, severity, "finding", reason, fix)

    def result(self) -> list[Finding]:
        drifted = {(f["capability"], f["key"]) for f in self.items if f["kind"] == "drift"}
        return [f for f in self.items
                if f["kind"] == "drift" or (f["capability"], f["key"]) not in drifted]


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _fields(value: Any) -> list[str]:
    return str(value).split()


def _ints(fields: Sequence[str]) -> list[int] | None:
    try:
        return [int(x) for x in fields]
    except ValueError:
        return None


# -- sysctl ---------------------------------------------------------------------------------
def _sysctl(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    live_all = facts.get("sysctl")
    if not isinstance(live_all, Mapping):
        return
    sysctl_plan = _map(plan.get("sysctl_profile"))
    keys = _map(sysctl_plan.get("keys"))
    fix_file = sysctl_plan.get("file") or "the managed sysctl file"
    for key in sorted(keys):
        spec = keys[key] if isinstance(keys[key], Mapping) else {"value": keys[key]}
        wanted = " ".join(_fields(spec.get("value", "")))
        mode = spec.get("mode") or "exact"
        ignore = bool(spec.get("ignore_missing"))
        entry = _map(live_all.get(key))
        state = entry.get("state", "missing")
        actual = entry.get("value")
        wanted_text = wanted if mode == "exact" else f">= {wanted}"
        if state in ("missing", "unreadable") or actual is None:
            why = "does not exist on this kernel" if state == "missing" else "cannot be read"
            if ignore:
                c.finding("sysctl_profile", "sysctl-missing", key, wanted_text, None, "info",
                          f"{key} {why}; the plan allows that (ignore_missing)",
                          "nothing to do, or load the kernel module that provides the key")
            else:
                c.drift("sysctl_profile", "sysctl-missing", key, wanted_text, None,
                        f"{key} {why}, but the plan sets it",
                        "load the module that provides it or set ignore_missing for this key")
            continue
        ok = _sysctl_ok(wanted, str(actual), mode)
        if ok:
            _sysctl_boot(c, key, entry, wanted, wanted_text, mode, fix_file)
            continue
        if state == "read_only" and ignore:
            c.finding("sysctl_profile", "sysctl-read-only", key, wanted_text, actual, "info",
                      f"{key} is read-only here (a network namespace shows the host's global value) "
                      "and the plan allows that (ignore_missing)",
                      "set the key in the initial network namespace (the host), not in the container")
            continue
        how = "below the minimum" if mode == "minimum" else "differs from the plan"
        c.drift("sysctl_profile", "sysctl-value", key, wanted_text, actual,
                f"{key} is {actual}: {how}" + _boot_cause(key, entry, wanted, mode),
                f"run site.yml (sysctl_profile role) to write it live and to {fix_file}; "
                "look for a later sysctl.d file or a tool overriding it")


def _boot_cause(key: str, entry: Mapping[str, Any], wanted: str, mode: str) -> str:
    """Why the value will not (or did not) come back at a boot, from the facts' ``boot``/``boot_file``."""
    if "boot" not in entry:  # facts of an older collection: not gathered
        return ""
    boot, source = entry.get("boot"), entry.get("boot_file")
    if boot is None:
        return "; no sysctl.d file (or active TuneD profile) sets it, so a boot does not restore it"
    if not _sysctl_ok(wanted, str(boot), mode):
        return f"; the next boot sets {boot} ({source})"
    return ""


def _sysctl_boot(c: _Collector, key: str, entry: Mapping[str, Any], wanted: str, wanted_text: str, mode: str,
                 fix_file: str) -> None:
    """A live value that is right but would not survive a reboot: drift of the persistence."""
    cause = _boot_cause(key, entry, wanted, mode)
    if cause:
        c.drift("sysctl_profile", "sysctl-boot", key, wanted_text, entry.get("boot"),
                f"{key} is right now{cause}",
                f"run site.yml (sysctl_profile role) to write {fix_file}; look for a later sysctl.d file "
                "that overrides it")


def _sysctl_ok(wanted: str, actual: str, mode: str) -> bool:
    want_f, have_f = _fields(wanted), _fields(actual)
    if mode != "minimum":
        return want_f == have_f
    floor, have = _ints(want_f), _ints(have_f)
    if floor is None or have is None or len(floor) != len(have):
        return False
    return all(h >= f for h, f in zip(have, floor, strict=True))


# -- socket buffers vs bandwidth-delay product ---------------------------------------------
def _buffers(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any], options: AuditOptions) -> None:
    live_all = facts.get("sysctl")
    if not options.check_buffers or not isinstance(live_all, Mapping):
        return
    ifaces = _map(facts.get("interfaces"))
    fastest: tuple[int, str] | None = None
    for planned in _list(_map(plan.get("link_mtu")).get("interfaces")):
        name = _resolve_interface(_map(planned), ifaces)
        speed = _map(ifaces.get(name)).get("speed_mbps") if name else None
        if isinstance(speed, int) and speed > 0 and (fastest is None or speed > fastest[0]):
            fastest = (speed, f"{name} on fabric {_map(planned).get('fabric')}")
    if fastest is None and options.link_speed_mbps:
        fastest = (options.link_speed_mbps, "audit_link_speed_mbps")
    if fastest is None:
        return
    speed, where = fastest
    bdp = int(speed * 1_000_000 / 8 * options.rtt_us / 1_000_000)
    for key in BUFFER_KEYS:
        entry = _map(live_all.get(key))
        value = entry.get("value")
        if value is None:
            continue
        numbers = _ints(_fields(value))
        if not numbers:
            continue
        limit = numbers[-1]  # tcp_rmem/tcp_wmem: the max field bounds autotuning
        if limit >= bdp:
            continue
        c.finding("sysctl_profile", "socket-buffer-bdp", key, f">= {bdp}", value, "warning",
                  f"{key} limits a socket buffer to {limit} bytes, below the bandwidth-delay product "
                  f"{bdp} bytes of {speed} Mb/s ({where}) x {options.rtt_us:g} µs RTT: one TCP stream "
                  "cannot fill the link",
                  f"raise {key} to at least {bdp} (mode minimum in the spec's sysctl section)")


# -- hugepages and THP -----------------------------------------------------------------------
def _hugepages(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    live = facts.get("hugepages")
    if not isinstance(live, Mapping):
        return
    pools = _map(live.get("pools"))
    for page in _list(_map(plan.get("hugepages")).get("pages")):
        page = _map(page)
        size = str(page.get("size"))
        count = page.get("count")
        pool = pools.get(size)
        if not isinstance(pool, Mapping):
            c.drift("hugepages", "hugepages-size", f"{size}.total", count, None,
                    f"the kernel has no {size} HugePage pool",
                    "enable HugeTLB support for this page size (1G needs pdpe1gb) or change the plan")
            continue
        total = int(pool.get("total") or 0)
        if isinstance(count, int) and total != count:
            if total < count:
                c.drift("hugepages", "hugepages-short", f"{size}.total", count, total,
                        f"{total} of {count} {size} HugePages allocated: short of the plan (the kernel "
                        "allocates fewer pages than asked when memory is fragmented)",
                        "run site.yml (hugepages role); if still short, reserve them at boot "
                        "(persist: cmdline) or drop caches and compact memory first")
            else:
                c.drift("hugepages", "hugepages-count", f"{size}.total", count, total,
                        f"{total} {size} HugePages allocated, more than the plan's {count}: the "
                        "difference is taken from application memory",
                        "run site.yml (hugepages role) or raise the plan", severity="warning")
        per_node = _map(page.get("per_node"))
        live_nodes = _map(pool.get("per_node"))
        for node in sorted(per_node, key=lambda n: int(n) if str(n).isdigit() else 0):
            want = per_node[node]
            have = _map(live_nodes.get(str(node))).get("total")
            if have != want:
                c.drift("hugepages", "hugepages-node", f"{size}.node{node}", want, have,
                        f"NUMA node {node} holds {have} {size} pages, the plan {want}",
                        "run site.yml (hugepages role); per-node pools persist with a boot unit")


def _thp(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    live = facts.get("thp")
    if not isinstance(live, Mapping):
        return
    wanted = _map(_map(plan.get("hugepages")).get("thp"))
    for name in ("enabled", "defrag"):
        want = wanted.get(name)
        have = live.get(name)
        if want is not None and have is not None and want != have:
            c.drift("hugepages", "thp-value", name, want, have,
                    f"transparent_hugepage/{name} is {have}, the plan {want}",
                    "run site.yml (hugepages role); check for a tuned profile or boot argument that sets it")
    if live.get("defrag") == "always":
        c.finding("hugepages", "thp-defrag-stalls", "defrag", "madvise or defer+madvise", "always", "warning",
                  "transparent_hugepage/defrag=always makes every faulting allocation compact memory "
                  "synchronously: large model loads and pinned buffers stall for milliseconds",
                  "set thp.defrag to madvise or defer+madvise in the spec")


# -- kernel command line ----------------------------------------------------------------------
def _cmdline(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    live = facts.get("cmdline")
    if not isinstance(live, list):
        return
    tokens = [str(t) for t in live]
    for arg in _list(_map(plan.get("kernel_cmdline")).get("args")):
        if str(arg) in tokens:
            continue
        name = str(arg).split("=", 1)[0]
        other = [t for t in tokens if t.split("=", 1)[0] == name]
        c.drift("kernel_cmdline", "cmdline-pending", str(arg), str(arg), " ".join(other) or None,
                f"the running kernel was booted without {arg}: a reboot is pending "
                "(or the bootloader configuration lacks it)",
                "run site.yml (kernel_cmdline role), then playbooks/rolling_reboot.yml", severity="info")


# -- interfaces and MTU -----------------------------------------------------------------------
def _resolve_interface(planned: Mapping[str, Any], ifaces: Mapping[str, Any]) -> str | None:
    if planned.get("name"):
        return str(planned["name"]) if planned["name"] in ifaces else None
    match = _map(planned.get("match"))
    for field, fact in (("name", "name"), ("mac", "mac"), ("pci", "bus_info"), ("driver", "driver")):
        want = match.get(field)
        if not want:
            continue
        for name in sorted(ifaces):
            value = name if fact == "name" else _map(ifaces[name]).get(fact)
            if value is not None and str(value).lower() == str(want).lower():
                return name
        return None
    return None


def _describe(planned: Mapping[str, Any]) -> str:
    if planned.get("name"):
        return str(planned["name"])
    match = _map(planned.get("match"))
    return ", ".join(f"{k}={v}" for k, v in sorted(match.items()) if v) or "?"


def _mtu(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    ifaces = facts.get("interfaces")
    if not isinstance(ifaces, Mapping):
        return
    for planned in _list(_map(plan.get("link_mtu")).get("interfaces")):
        planned = _map(planned)
        name = _resolve_interface(planned, ifaces)
        want = planned.get("mtu")
        if name is None:
            c.drift("link_mtu", "interface-missing", _describe(planned), want, None,
                    f"no interface matches {_describe(planned)} (fabric {planned.get('fabric')})",
                    "check cabling/driver or the interface match in the spec")
            continue
        have = _map(ifaces[name]).get("mtu")
        if want is not None and have != want:
            c.drift("link_mtu", "mtu-value", name, want, have,
                    f"{name} (fabric {planned.get('fabric')}) has MTU {have}, the plan {want}",
                    "run site.yml (link_mtu) to set it live and persist it")


def _verify_paths(verify: Any, host: str) -> list[Mapping[str, Any]]:
    """Path records of ``host`` from verify results (docs/audit.md: accepted shapes)."""
    if not isinstance(verify, Mapping):
        return []
    hosts = verify.get("hosts")
    paths: list[Any] = []
    if isinstance(hosts, Mapping):
        entry = hosts.get(host)
        if isinstance(entry, Mapping):
            paths = _list(entry.get("paths"))
        elif isinstance(entry, list):
            paths = entry
    elif isinstance(verify.get("paths"), list):
        paths = [p for p in verify["paths"]
                 if isinstance(p, Mapping) and (p.get("source") or p.get("host")) == host]
    return [p for p in paths if isinstance(p, Mapping)]


def _path_mtu(c: _Collector, verify: Any, host: str) -> None:
    for path in _verify_paths(verify, host):
        if path.get("ok", True):
            continue
        fabric, peer = path.get("fabric"), path.get("peer")
        mtu, largest = path.get("mtu"), path.get("largest_mtu")
        c.finding("link_mtu", "path-mtu", f"{fabric}:{peer}", mtu, largest, "error",
                  f"frames of {mtu} bytes do not reach {peer} on fabric {fabric} (largest that passes: "
                  f"{largest if largest is not None else 'none'}): an MTU mismatch along the path, "
                  "often a switch port",
                  "set the fabric MTU on every switch port and NIC of the path (datapath-lab: set-port-mtu)")


# -- QoS -------------------------------------------------------------------------------------
def _qos(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    live_all = facts.get("qos")
    ifaces = facts.get("interfaces")
    if not isinstance(live_all, Mapping):
        return
    for planned in _list(_map(plan.get("roce_qos")).get("interfaces")):
        planned = _map(planned)
        name = planned.get("interface") or (
            _resolve_interface(planned, ifaces) if isinstance(ifaces, Mapping) else None)
        if not name or name not in live_all:
            continue  # a missing interface is reported once, by the mtu check
        live = _map(live_all[name])
        if not live.get("supported"):
            c.finding("roce_qos", "qos-unsupported", str(name), "lossless RoCE", None, "info",
                      f"QoS not readable on {name}: {live.get('reason')}",
                      "nothing to do on virtual NICs; on real NICs install iproute2 dcb or mlnx_qos")
            continue
        _qos_values(c, str(name), planned, live)
        _roce_lossy(c, str(name), planned, live)


def _qos_values(c: _Collector, name: str, planned: Mapping[str, Any], live: Mapping[str, Any]) -> None:
    fix = "run site.yml (roce_qos); check that no DCBX agent (lldpad) rewrites it"
    if planned.get("trust") and live.get("trust") is not None and planned["trust"] != live["trust"]:
        c.drift("roce_qos", "qos-trust", f"{name}.trust", planned["trust"], live["trust"],
                f"{name} trusts {live['trust']}, the plan {planned['trust']}", fix)
    want_pfc = sorted(int(p) for p in _list(planned.get("pfc_priorities")))
    have_pfc = sorted(int(p) for p in _list(live.get("pfc_priorities")))
    if want_pfc != have_pfc:
        c.drift("roce_qos", "qos-pfc", f"{name}.pfc", want_pfc, have_pfc,
                f"{name} has PFC on priorities {have_pfc}, the plan {want_pfc}", fix)
    have_map = {str(k): v for k, v in _map(live.get("dscp2prio")).items()}
    for dscp, prio in sorted(_map(planned.get("dscp2prio")).items(), key=lambda kv: int(kv[0])):
        if have_map.get(str(dscp)) != prio:
            c.drift("roce_qos", "qos-dscp2prio", f"{name}.dscp{dscp}", prio, have_map.get(str(dscp)),
                    f"{name} maps DSCP {dscp} to {have_map.get(str(dscp))}, the plan to {prio}", fix)
    want_ets, have_ets = planned.get("ets"), live.get("ets")
    if isinstance(want_ets, Mapping) and isinstance(have_ets, Mapping):
        for field in ("prio_tc", "tsa", "bw"):
            if want_ets.get(field) is not None and want_ets.get(field) != have_ets.get(field):
                c.drift("roce_qos", "qos-ets", f"{name}.ets.{field}", want_ets.get(field), have_ets.get(field),
                        f"{name} ETS {field} differs from the plan", fix)
    want_ecn, have_ecn = _map(planned.get("ecn")), live.get("ecn")
    if isinstance(have_ecn, Mapping):
        for point in ("rp", "np"):
            want = sorted(int(p) for p in _list(want_ecn.get(point)))
            have = sorted(int(p) for p in _list(have_ecn.get(point)))
            if want != have:
                c.drift("roce_qos", "qos-ecn", f"{name}.ecn.{point}", want, have,
                        f"{name} has ECN ({point}) on priorities {have}, the plan {want}", fix)


def _roce_lossy(c: _Collector, name: str, planned: Mapping[str, Any], live: Mapping[str, Any]) -> None:
    tos = planned.get("roce_tos")
    if not isinstance(tos, int):
        return
    dscp = tos >> 2
    prio = _map(live.get("dscp2prio")).get(str(dscp))
    if prio is None:
        prio = _map(planned.get("dscp2prio")).get(str(dscp))
    if prio is None:
        return
    pfc = int(prio) in [int(p) for p in _list(live.get("pfc_priorities"))]
    ecn_live = live.get("ecn")
    ecn = isinstance(ecn_live, Mapping) and int(prio) in [int(p) for p in _list(ecn_live.get("rp"))] \
        and int(prio) in [int(p) for p in _list(ecn_live.get("np"))]
    if not pfc and not ecn:
        c.finding("roce_qos", "roce-lossy", f"{name}.priority{prio}", "PFC or ECN on priority %s" % prio,
                  "PFC off, ECN off", "error",
                  f"RoCE traffic (DSCP {dscp}) on {name} runs on priority {prio} with neither PFC nor ECN: "
                  "packet loss goes straight to RDMA retransmits (go-back-N) and collapses throughput",
                  f"enable PFC on priority {prio} (pfc_priorities) or ECN (roce.ecn: true) and run site.yml")


# -- firmware --------------------------------------------------------------------------------
def _firmware(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    ifaces = facts.get("interfaces")
    policies = _list(_map(plan.get("nic_firmware")).get("policies"))
    if not isinstance(ifaces, Mapping) or not policies:
        return
    from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_firmware import evaluate

    for name in sorted(ifaces):
        iface = _map(ifaces[name])
        fw = iface.get("firmware")
        if not iface.get("physical") or not isinstance(fw, Mapping):
            continue
        nic = {"interface": name, "bus_info": iface.get("bus_info"), "driver": iface.get("driver"),
               "psid": fw.get("psid"), "firmware_version": fw.get("version"), "physical": True}
        row = evaluate(nic, policies)
        if row["status"] == "noncompliant":
            c.finding("nic_firmware", "firmware-below-policy", name, row.get("needs"), fw.get("version"), "error",
                      f"{name} ({iface.get('driver')}, PSID {fw.get('psid')}): {row['reason']}",
                      "update the NIC firmware with the vendor's tool (mlxup / mlxfwmanager) in a "
                      "maintenance window, then reset the NIC or reboot")
        elif row["status"] == "unknown" and row.get("policy") is None and fw.get("version") is None:
            c.finding("nic_firmware", "firmware-unknown", name, None, None, "info",
                      f"{name}: {row['reason']}", "install ethtool or devlink on the node")
        if fw.get("stored") and fw.get("version") and fw.get("stored") != fw.get("version"):
            c.finding("nic_firmware", "firmware-pending", f"{name}.stored", fw.get("stored"), fw.get("version"),
                      "warning", f"{name} runs {fw.get('version')} but {fw.get('stored')} is flashed: "
                      "activation pending", "reset the NIC (mlxfwreset) or reboot the node")


# -- NIC firmware (NV) settings -----------------------------------------------------------------
def _nic_config(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    """Each planned parameter's live Current value (datapath_facts nic_config) per device: drift where
    neither Current nor Next Boot holds it, an info drift while a reboot is pending, and the finding
    nvconfig-not-applied-after-reboot where nic_config's record says it was set before this boot."""
    live = facts.get("nic_config")
    configs = _list(_map(plan.get("nic_config")).get("configs"))
    if not isinstance(live, Mapping) or not configs:
        return
    from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config_params import desired, matches, select
    from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config_query import parse_value

    boot_id = live.get("boot_id")
    record = _map(_map(live.get("record")).get("devices"))
    fix = "run site.yml (nic_config), then playbooks/rolling_reboot.yml"
    for pci in sorted(_map(live.get("devices"))):
        device = _map(_map(live.get("devices"))[pci])
        index, _why = select(device, configs)
        if index is None:
            continue
        config = _map(configs[index])
        if device.get("error") or not device.get("params"):
            c.finding("nic_config", "nvconfig-unreadable", pci, "NV configuration", None, "warning",
                      f"{pci}: the NV configuration could not be read: {device.get('error') or live.get('reason')}",
                      "install NVIDIA MFT (mlxconfig) or mstflint (mstconfig) on the node; check the device")
            continue
        rows = {name: {"values": {column: parse_value(text) for column, text in _map(values).items()
                                  if column != "read_only" and isinstance(text, str)}}
                for name, values in _map(device.get("params")).items()}
        wanted, unsupported = desired(dict(config), rows)
        recorded = _map(_map(record.get(pci)).get("params"))
        for param, want, _intent in wanted:
            values = rows[param]["values"]
            current, next_boot = matches(values.get("current"), want), matches(values.get("next_boot"), want)
            key = f"{pci}.{param}"
            have = _map(values.get("current")).get("text")
            wanted_text = _wanted_text(want)
            if current is True:
                continue
            entry = _map(recorded.get(param))
            was_set = bool(entry) and matches({"name": entry.get("name"), "number": entry.get("number")}, want) is True
            if next_boot is True and current is False and was_set and entry.get("boot_id") != boot_id:
                c.finding("nic_config", "nvconfig-not-applied-after-reboot", key, wanted_text, have, "error",
                          f"{pci} (PSID {device.get('psid')}): {param} is {have} after the reboot it was set for "
                          f"(Next Boot holds {wanted_text}); nic_config asks for no further reboot",
                          "power-cycle the node or reset the NIC (mlxfwreset; firmware_reset: true), check its "
                          "firmware; then remove the device from nic_config's state file to allow one more reboot")
            elif next_boot is True:
                c.drift("nic_config", "nvconfig-pending", key, wanted_text, have,
                        f"{pci}: {param} is {have}, Next Boot holds {wanted_text}: a reboot is pending",
                        "playbooks/rolling_reboot.yml", severity="info")
            else:
                c.drift("nic_config", "nvconfig-value", key, wanted_text, have,
                        f"{pci} (PSID {device.get('psid')}): {param} is {have}, Next Boot "
                        f"{_map(values.get('next_boot')).get('text')}, the plan {wanted_text}", fix)
        for entry in unsupported:
            c.finding("nic_config", "nvconfig-unsupported", f"{pci}.{entry['param']}", entry["param"], None, "info",
                      f"{pci}: {entry['reason']}", "nothing to do on this device, or take the parameter out of the "
                      "spec's nic_config entry for it")
        size = config.get("max_read_request")
        for bdf, have in sorted(_map(device.get("max_read_request")).items()):
            if size and have is not None and have != size:
                c.drift("nic_config", "pcie-max-read-request", f"{bdf}.max_read_request", size, have,
                        f"{bdf}: PCIe Max Read Request is {have} bytes, the plan {size} (a run-time setting: "
                        "a boot sets it back)", "run site.yml (nic_config)", severity="warning")


def _wanted_text(want: Mapping[str, Any]) -> str:
    if want.get("name") is not None and want.get("number") is not None:
        return f"{want['name']}({want['number']})"
    return str(want.get("number") if want.get("number") is not None else want.get("name"))


# -- storage ---------------------------------------------------------------------------------
def _storage(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    storage = plan.get("nvme_layout")
    live = facts.get("storage")
    if not isinstance(storage, Mapping) or not isinstance(live, Mapping):
        return
    devices = _map(live.get("devices"))
    for device in _list(storage.get("devices")):
        entry = devices.get(device)
        if isinstance(entry, Mapping) and not entry.get("exists"):
            c.drift("nvme_layout", "device-missing", str(device), "present", "missing",
                    f"{device} does not exist on the node", "check the device path (by-id) in the spec")
    mount = _map(storage.get("mount"))
    path = str(mount.get("path") or "").rstrip("/") or None
    if not path:
        return
    options = [str(o) for o in _list(mount.get("options"))]
    fs_type = _map(storage.get("filesystem")).get("type")
    fix = "run site.yml (nvme_layout role); it mounts the cache and writes fstab"
    live_mount = _map(live.get("mounts")).get(path)
    if isinstance(live_mount, Mapping):
        if not live_mount.get("mounted"):
            c.drift("nvme_layout", "mount-missing", path, "mounted", "not mounted",
                    f"the model cache {path} is not mounted: models load from the network or fill the root disk",
                    fix)
        else:
            have = [str(o) for o in _list(live_mount.get("options"))]
            missing = [o for o in options if o not in have]
            if missing:
                c.drift("nvme_layout", "mount-options", f"{path} options", options, have,
                        f"{path} is mounted without {', '.join(missing)}", fix)
            if fs_type and live_mount.get("fstype") != fs_type:
                c.drift("nvme_layout", "mount-fstype", f"{path} fstype", fs_type, live_mount.get("fstype"),
                        f"{path} is {live_mount.get('fstype')}, the plan {fs_type}", fix)
            if "noatime" not in have:
                c.finding("nvme_layout", "cache-atime", f"{path} options", "noatime", ",".join(have), "warning",
                          f"{path} is mounted without noatime: every model read also writes an access time",
                          "add noatime to storage.mount.options and remount")
    live_fstab = _map(live.get("fstab")).get(path)
    if isinstance(live_fstab, Mapping):
        if not live_fstab.get("present"):
            c.drift("nvme_layout", "fstab-missing", f"{path} fstab", "entry", None,
                    f"/etc/fstab has no entry for {path}: the cache is not mounted after a reboot",
                    fix, severity="warning")
        else:
            have = [str(o) for o in _list(live_fstab.get("options"))]
            missing = [o for o in options if o not in have]
            if missing:
                c.drift("nvme_layout", "fstab-options", f"{path} fstab options", options, have,
                        f"the fstab entry for {path} lacks {', '.join(missing)}", fix, severity="warning")


# -- Kubernetes (NFD labels) ------------------------------------------------------------------
def _k8s(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    nfd = facts.get("nfd")
    if not isinstance(nfd, Mapping):
        return
    labels = _map(nfd.get("labels"))
    for key, value in sorted(_map(_map(plan.get("nfd_labels")).get("labels")).items()):
        want = "true" if value is True else "false" if value is False else "" if value is None else str(value)
        have = labels.get(key)
        if have != want:
            c.drift("nfd_labels", "nfd-label", str(key), want, have,
                    f"node-feature-discovery label {key} is "
                    + (f"{have!r}" if have is not None else "missing") + f", the plan {want!r}",
                    "run site.yml (nfd_labels role) to rewrite the features.d file")


def _topology(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any],
              golden: Mapping[str, Any] | None = None) -> None:
    """The facts' topology against the plan's ``node_topology`` (docs/topology.md), plus an info
    finding on a node without GPUs whose plan does not say how many it has."""
    topology = facts.get("topology")
    if not isinstance(topology, Mapping):
        return
    expect = plan.get("node_topology")
    expect = expect if isinstance(expect, Mapping) else None
    if not _list(topology.get("gpus")) and (expect is None or expect.get("gpus") is None):
        nics = [str(n.get("name")) for n in _list(topology.get("nics")) if isinstance(n, Mapping)]
        c.finding("node_topology", "no-gpu", "gpus", None, 0, "info",
                  "no GPU on this node: nothing to pair or to check for GPUDirect; its NICs ("
                  + (", ".join(nics) or "none") + ") and NVMe devices are still checked",
                  "nothing to do on a node without GPUs; on a GPU node check `lspci -d 10de:` and set "
                  "topology.gpus in the spec so that a missing GPU is an error")
    found = topology_findings(c.host, topology, expect)
    name = expect.get("golden") if expect is not None else None
    if name:
        golden_file = _map(golden).get(str(name))
        found += golden_findings(c.host, topology, golden_file if isinstance(golden_file, Mapping) else None,
                                 str(name))
    for f in found:
        c.add(str(f["capability"]), str(f["check"]), str(f["key"]), f["wanted"], f["actual"], str(f["severity"]),
              str(f["kind"]), str(f["reason"]), str(f["fix"]))


# -- kubelet's view of the HugePage pools ----------------------------------------------------------
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}


def quantity_bytes(text: Any) -> int | None:
    """A Kubernetes resource quantity (``1Gi``, ``512Mi``, ``2048``, ``1G``) in bytes; None if unreadable."""
    match = _QUANTITY.match(str(text).strip()) if text is not None else None
    if not match:
        return None
    number, suffix = match.groups()
    scale = _BINARY.get(suffix or "") or _DECIMAL.get(suffix or "") or 1
    return int(float(number) * scale) if "." in number else int(number) * scale


def quantity_text(count: int) -> str:
    """Bytes in the canonical binary form Kubernetes prints (``2Mi``, ``1Gi``, ``0``)."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        if count and count % _BINARY[suffix] == 0:
            return "%d%s" % (count // _BINARY[suffix], suffix)
    return str(count)


def _kubelet(c: _Collector, facts: Mapping[str, Any], k8s_node: Mapping[str, Any] | None) -> None:
    """Each kernel HugePage pool against the capacity kubelet advertises on the Node object
    (``status.capacity["hugepages-2Mi"]``): kubelet reads the pools once, at its start."""
    live = facts.get("hugepages")
    if not isinstance(k8s_node, Mapping) or not isinstance(live, Mapping):
        return
    capacity = _map(_map(k8s_node.get("status")).get("capacity"))
    node_name = str(_map(k8s_node.get("metadata")).get("name") or c.host)
    for label, pool in sorted(_map(live.get("pools")).items()):
        pool = _map(pool)
        size_kb = pool.get("size_kb")
        if not isinstance(size_kb, int) or size_kb <= 0:
            continue
        resource = "hugepages-" + quantity_text(size_kb * 1024)
        kernel = int(pool.get("total") or 0) * size_kb * 1024
        raw = capacity.get(resource)
        advertised = quantity_bytes(raw) if raw is not None else None
        if advertised is None and raw is not None:
            continue  # unreadable quantity: nothing to compare
        if (advertised or 0) == kernel:
            continue
        c.finding("hugepages", "kubelet-hugepages", resource, quantity_text(kernel),
                  str(raw) if raw is not None else None, "error",
                  f"kubelet on Node {node_name} advertises {resource}: "
                  + (str(raw) if raw is not None else "nothing")
                  + f", the kernel holds {quantity_text(kernel)} ({pool.get('total')} x {label}): kubelet reads the "
                  "pools only when it starts, so pods are scheduled against a stale HugePage capacity "
                  "(kubernetes #72307)",
                  "restart kubelet (hugepages_restart_kubelet: true restarts it whenever site.yml changes a pool); "
                  "persist the pools at boot (persist: sysctl or boot_unit, 1G pages persist: cmdline) so they are "
                  "reserved in sysinit.target, before kubelet starts")


# -- host stack: nic_affinity, ebpf_readiness ---------------------------------------------------
NIC_AFFINITY_FIX = "run site.yml --tags nic_affinity (the link-up unit keeps it from then on)"


def _shown(value: Any) -> Any:
    """A file's content is shown as present/absent in a finding, not as its text."""
    if isinstance(value, str) and "\n" in value:
        return "present"
    return value


def _nic_affinity(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    """Each change nic_affinity would make now is drift (an IRQ off its CPU, a queue count, the unit, the
    irqbalance line); an IRQ the kernel keeps elsewhere while its smp_affinity is right is a finding."""
    section = facts.get("nic_affinity")
    if not plan.get("nic_affinity") or not isinstance(section, Mapping):
        return
    if section.get("error"):
        c.finding("nic_affinity", "nic-affinity-plan", "nic_affinity", "a plan the node can take", None, "error",
                  str(section["error"]), "fix what the message names (an interface, the CPUs left), then run "
                  "site.yml --tags nic_affinity")
        return
    for action in _list(section.get("actions")):
        action = _map(action)
        kind = str(action.get("kind"))
        if kind == "command":
            continue  # the restart that goes with a changed file: the file is the drift
        severity = "warning" if kind in ("irq", "rps", "xps", "channels", "rings") else "info"
        c.drift("nic_affinity", f"nic-affinity-{kind}", str(action.get("target")), _shown(action.get("after")),
                _shown(action.get("before")), str(action.get("text")), NIC_AFFINITY_FIX, severity=severity)
    for row in _list(section.get("interfaces")):
        row = _map(row)
        for item in _list(row.get("irqs")):
            item = _map(item)
            if item.get("placed") or item.get("smp_affinity") != str(item.get("cpu")):
                continue  # placed, or not set yet (that is the drift above)
            c.finding("nic_affinity", "irq-effective-elsewhere", f"IRQ {item.get('irq')}", str(item.get("cpu")),
                      item.get("effective"), "warning",
                      f"IRQ {item.get('irq')} ({item.get('name')} of {row.get('interface')}) is set to CPU "
                      f"{item.get('cpu')} but the interrupt controller runs it on {item.get('effective')}",
                      "managed interrupts and some virtual platforms ignore smp_affinity_list; on such a node set "
                      "nic_affinity.irqs: false")
    irqbalance = _map(section.get("irqbalance"))
    placed = any(_list(_map(r).get("irqs")) for r in _list(section.get("interfaces")))
    if irqbalance.get("installed") and not irqbalance.get("banned") and placed:
        c.finding("nic_affinity", "irqbalance-not-banned", "irqbalance", "banned", "rebalancing", "warning",
                  "irqbalance runs and is not told to leave the placed IRQs alone: it moves them within seconds",
                  "set nic_affinity.irqbalance: ban, or add the policy script to the node's IRQBALANCE_ARGS")


def _ebpf(c: _Collector, plan: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    """ebpf_readiness's findings, as the module reports them (one check, one finding)."""
    section = facts.get("ebpf")
    if not plan.get("ebpf_readiness") or not isinstance(section, Mapping):
        return
    for item in _list(section.get("findings")):
        item = _map(item)
        if item.get("severity") not in SEVERITIES:
            continue
        feature = item.get("feature")
        check = str(item.get("check")).replace("_", "-")
        key = f"{check}.{feature}" if feature else check
        c.finding("ebpf_readiness", f"ebpf-{check}", key, "ready", str(feature or "base"),
                  str(item["severity"]), str(item.get("message")), str(item.get("fix")))


def compare(plan: Mapping[str, Any], facts: Mapping[str, Any] | None, verify: Any = None,
            options: AuditOptions | Mapping[str, Any] | None = None, host: str | None = None,
            golden: Mapping[str, Any] | None = None, k8s_node: Mapping[str, Any] | None = None) -> list[Finding]:
    """Every finding for one host, in capability order (reports sort them worst first).

    ``golden``: the golden topologies by node class (``topology-golden/<class>.json``, read by the
    audit role); ``k8s_node``: this host's Node object (``kubectl get node -o json``) when the audit
    was given a kubeconfig or a saved node list."""
    opts = options if isinstance(options, AuditOptions) else options_from(options)
    name = str(host or plan.get("host") or "?")
    c = _Collector(name)
    if not isinstance(facts, Mapping):
        c.finding("facts", "no-facts", "datapath_facts", "facts", None, "error",
                  "no datapath_facts for this host (unreachable or the facts task failed)",
                  "make the host reachable and run the audit again")
        return c.result()
    _sysctl(c, plan, facts)
    _buffers(c, plan, facts, opts)
    _hugepages(c, plan, facts)
    _kubelet(c, facts, k8s_node)
    _thp(c, plan, facts)
    _cmdline(c, plan, facts)
    _mtu(c, plan, facts)
    rail_drift(c.drift, plan, facts, _resolve_interface)  # every rail's rule, table and ARP keys (audit/rails.py)
    _path_mtu(c, verify, name)
    _qos(c, plan, facts)
    _firmware(c, plan, facts)
    _nic_config(c, plan, facts)
    _storage(c, plan, facts)
    _k8s(c, plan, facts)
    _topology(c, plan, facts, golden)
    _nic_affinity(c, plan, facts)
    _ebpf(c, plan, facts)
    return c.result()
