# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node metrics for Prometheus: the catalogue and, per source, the families from what a playbook has.

Controller side, standard library only. :data:`CATALOGUE` names every metric the collection
emits, with its source, type, labels and help; docs/telemetry.md, the alert rules, the dashboard
and their tests are checked against it. :func:`module_args` turns the data of one source into the
arguments of ``aiinfra.datapath.metrics_textfile`` for one host:

* ``site``: the registered ``datapath_apply`` result (converge time, result per capability,
  reboot required, NIC firmware compliance). What a run *changed* is not a metric: it differs
  between a converge and the next one that finds nothing to do, so writing it would make every
  second run change the file;
* ``audit``: the host's audit findings, plan and ``datapath_facts`` (drift per capability,
  HugePages planned and present per size and NUMA node, the cache filesystem measured on the node);
* ``measure``: the parsed ``measure.json`` and the host (pairs the host was the client of,
  storage targets, gates);
* ``model_cache``: the registered ``model_cache`` result (the versions on the cache).

Names follow the Prometheus conventions: the ``aiinfra_datapath_`` prefix, base units (bytes,
seconds, bytes per second, ratios 0..1) in the name, ``_info`` gauges of value 1 for labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.aiinfra.datapath.plugins.module_utils import _site_metrics

PREFIX = "aiinfra_datapath_"
SOURCES = ("site", "audit", "measure", "model_cache")
# the capabilities a converge and an audit report on (plugin_utils/audit/compare.py CAPABILITIES)
CAPABILITIES = _site_metrics.CAPABILITIES
# an audit also reports the read-only topology (plugin_utils/audit/compare.py CAPABILITIES)
AUDIT_CAPABILITIES = (*CAPABILITIES, "node_topology")
PAGE_BYTES = {"2M": 2 * 1024 ** 2, "1G": 1024 ** 3}


@dataclass(frozen=True)
class Metric:
    name: str
    source: str
    labels: tuple[str, ...]
    help: str
    origin: str  # where the figure comes from, for docs/telemetry.md
    type: str = "gauge"


_M = Metric
SITE_ORIGINS = {
    "aiinfra_datapath_converge_success": "datapath_apply: failed or not",
    "aiinfra_datapath_converge_capability_failed": "datapath_apply results[capability].failed (capabilities that ran)",
    "aiinfra_datapath_reboot_required": "datapath_apply results of kernel_cmdline, hugepages and nic_config "
                                        "(reboot_required)",
    "aiinfra_datapath_nic_firmware_compliant": "nic_firmware compliance rows of datapath_apply (status compliant / "
                                               "noncompliant)",
    "aiinfra_datapath_nic_firmware_info": "nic_firmware compliance rows of datapath_apply",
    "aiinfra_datapath_nic_config_reboot_required": "nic_config devices[].params of datapath_apply (state set or "
                                                   "pending), per device the plan has an entry for",
    "aiinfra_datapath_nic_config_apply_failed": "nic_config devices[].params of datapath_apply (state not_applied: "
                                                "nvconfig-not-applied-after-reboot)",
    "aiinfra_datapath_nic_affinity_compliant": "nic_affinity interfaces[].irqs of datapath_apply: every placed "
                                               "(effective_affinity_list read back after the write)",
    "aiinfra_datapath_nic_affinity_misplaced_ratio": "nic_affinity interfaces[].irqs of datapath_apply: placed "
                                                     "false / those it planned a CPU for",
    "aiinfra_datapath_ebpf_readiness_passed": "ebpf_readiness ready of datapath_apply (no error finding)",
    "aiinfra_datapath_ebpf_feature_passed": "ebpf_readiness features of datapath_apply",
}
CATALOGUE: tuple[Metric, ...] = (
    # -- site.yml --------------------------------------------------------------------------------
    _M("aiinfra_datapath_converge_last_run_timestamp_seconds", "site", (),
       "Unix time of the last site run that wrote this file.",
       "the clock of the node when metrics_textfile ran at the end of site.yml (the heartbeat)"),
    # the converge's own families: names, labels and help from module_utils/_site_metrics.py (the node
    # writes them at the end of its batch)
    *(_M(name, "site", labels, help_text, SITE_ORIGINS[name]) for name, labels, help_text in _site_metrics.METRICS),
    # -- audit.yml -------------------------------------------------------------------------------
    _M("aiinfra_datapath_audit_last_run_timestamp_seconds", "audit", (),
       "Unix time of the last audit run that wrote this file.",
       "the clock of the node when metrics_textfile ran at the end of audit.yml (the heartbeat)"),
    _M("aiinfra_datapath_audit_drift_findings", "audit", ("capability",),
       "Drift findings of the last audit per capability: live state differs from the plan (0: none).",
       "audit findings of kind drift (reports/audit.json by_capability, per host)"),
    _M("aiinfra_datapath_audit_findings", "audit", ("capability", "severity"),
       "Findings of the last audit per capability and severity (error, warning, info), drift included.",
       "audit findings (reports/audit.json findings, per host)"),
    _M("aiinfra_datapath_hugepages_planned_pages", "audit", ("page_size_bytes",),
       "HugePages of this size the plan gives the node.",
       "plan hugepages.pages[].count"),
    _M("aiinfra_datapath_hugepages_present_pages", "audit", ("page_size_bytes",),
       "HugePages of this size allocated on the node (nr_hugepages).",
       "datapath_facts hugepages.pools[size].total"),
    _M("aiinfra_datapath_hugepages_node_planned_pages", "audit", ("page_size_bytes", "numa_node"),
       "HugePages of this size the plan gives one NUMA node.",
       "plan hugepages.pages[].per_node"),
    _M("aiinfra_datapath_hugepages_node_present_pages", "audit", ("page_size_bytes", "numa_node"),
       "HugePages of this size allocated on one NUMA node.",
       "datapath_facts hugepages.pools[size].per_node[node].total"),
    _M("aiinfra_datapath_cache_filesystem_mounted", "audit", ("mountpoint",),
       "1 when the model cache path is a mount point (its own filesystem), 0 when not.",
       "/proc/self/mountinfo on the node, read by metrics_textfile (option filesystems)"),
    _M("aiinfra_datapath_cache_filesystem_size_bytes", "audit", ("mountpoint",),
       "Size of the model cache filesystem in bytes.",
       "statvfs of the cache mount on the node (f_blocks x f_frsize)"),
    _M("aiinfra_datapath_cache_filesystem_free_bytes", "audit", ("mountpoint",),
       "Bytes of the model cache filesystem available to unprivileged writers (statvfs f_bavail).",
       "statvfs of the cache mount on the node (f_bavail x f_frsize)"),
    _M("aiinfra_datapath_cache_reserve_bytes", "audit", ("mountpoint",),
       "Free bytes the model cache keeps on its filesystem (model_cache.reserve_bytes of the plan).",
       "plan model_cache.reserve_bytes, else nvme_layout.reserve_bytes"),
    # -- measure.yml -----------------------------------------------------------------------------
    _M("aiinfra_datapath_measure_last_run_timestamp_seconds", "measure", (),
       "Unix time of the last measure run that wrote this file.",
       "the clock of the node when metrics_textfile ran at the end of measure.yml (the heartbeat)"),
    _M("aiinfra_datapath_measure_success", "measure", (),
       "1 when the last measurement found no failing gate or probe error on this node.",
       "measure.json hosts[].status (pass)"),
    _M("aiinfra_datapath_pair_throughput_bytes_per_second", "measure", ("fabric", "client", "server"),
       "TCP throughput of the last measurement of a node pair, client to server, in bytes per second (x 8: bit/s).",
       "measure.json pairs[].gbit_per_s x 1e9 / 8, written on the pair's client"),
    _M("aiinfra_datapath_pair_retransmit_ratio", "measure", ("fabric", "client", "server"),
       "Share of the segments sent that were retransmitted to repair a loss in the last measurement of a node "
       "pair (0..1; retransmissions reported as duplicates by DSACK are left out).",
       "measure.json pairs[].retransmit_share"),
    _M("aiinfra_datapath_pair_latency_p99_seconds", "measure", ("fabric", "client", "server"),
       "99th percentile UDP round-trip latency under load of the last measurement of a node pair.",
       "measure.json pairs[].p99_ms / 1000"),
    _M("aiinfra_datapath_pair_gate_passed", "measure", ("fabric", "client", "server"),
       "1 when the node pair passed every gate of the last measurement, 0 when a gate failed or the probe erred.",
       "measure.json pairs[].status"),
    _M("aiinfra_datapath_rail_throughput_bytes_per_second", "measure", ("fabric", "client", "server", "rail"),
       "TCP throughput of one rail of the last measurement of a node pair (rail i of the client to rail i of the "
       "server, all rails at once), in bytes per second; the pair_ metrics are its rail0's.",
       "measure.json pairs[].gbit_per_s x 1e9 / 8 of the pair's row of that rail, written on the pair's client"),
    _M("aiinfra_datapath_rail_gate_passed", "measure", ("fabric", "client", "server", "rail"),
       "1 when one rail of a node pair passed every gate of the last measurement, 0 when a gate failed or the probe "
       "erred.", "measure.json pairs[].status of the pair's row of that rail"),
    _M("aiinfra_datapath_storage_read_bytes_per_second", "measure", ("target", "kind"),
       "Sequential (or model-load) read throughput of a storage target in the last measurement, bytes per second.",
       "measure.json storage[].seq_read_mib_s x 1048576"),
    _M("aiinfra_datapath_storage_read_latency_p99_seconds", "measure", ("target", "kind", "queue_depth"),
       "99th percentile random 4 KiB read latency of a storage target at a queue depth.",
       "measure.json storage[].p99_us_qd1 and p99_us_qd32 / 1e6"),
    _M("aiinfra_datapath_storage_gate_passed", "measure", ("target", "kind"),
       "1 when the storage target passed every gate of the last measurement, 0 when not.",
       "measure.json storage[].status"),
    # -- model_cache.yml -------------------------------------------------------------------------
    _M("aiinfra_datapath_model_cache_last_run_timestamp_seconds", "model_cache", (),
       "Unix time of the last model_cache run that wrote this file.",
       "the clock of the node when metrics_textfile ran at the end of model_cache.yml (the heartbeat)"),
    _M("aiinfra_datapath_model_cache_success", "model_cache", (),
       "1 when the last model cache run of the node succeeded.",
       "the model_cache module result: failed or not"),
    _M("aiinfra_datapath_cached_model_info", "model_cache", ("model", "version", "status"),
       "A model version on the node's cache (status present; would_publish in check mode); value 1.",
       "model_cache result models[] (name, version; status published or present: present)"),
    _M("aiinfra_datapath_cached_model_size_bytes", "model_cache", ("model", "version"),
       "Bytes of a model version on the node's cache.",
       "model_cache result models[].files[].size, summed"),
)
BY_NAME = {m.name: m for m in CATALOGUE}
HEARTBEATS = {"site": "aiinfra_datapath_converge_last_run_timestamp_seconds",
              "audit": "aiinfra_datapath_audit_last_run_timestamp_seconds",
              "measure": "aiinfra_datapath_measure_last_run_timestamp_seconds",
              "model_cache": "aiinfra_datapath_model_cache_last_run_timestamp_seconds"}
# measured on the node by metrics_textfile itself (option filesystems)
NODE_MEASURED = ("aiinfra_datapath_cache_filesystem_mounted", "aiinfra_datapath_cache_filesystem_size_bytes",
                 "aiinfra_datapath_cache_filesystem_free_bytes", "aiinfra_datapath_cache_reserve_bytes")


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _l(value: Any) -> Sequence[Any]:
    return value if isinstance(value, (list, tuple)) else []


def _num(value: Any) -> float | int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        return float(str(value))
    except ValueError:
        return None


def _scaled(value: Any, factor: float) -> float | None:
    number = _num(value)
    return None if number is None else round(float(number) * factor, 9)


class _Families:
    """Samples collected per catalogue metric, rendered in catalogue order."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.samples: dict[str, list[dict[str, Any]]] = {}

    def add(self, name: str, value: Any, **labels: Any) -> None:
        metric = BY_NAME[name]
        if metric.source != self.source:
            raise ValueError(f"{name} belongs to source {metric.source}, not {self.source}")
        if set(labels) != set(metric.labels):
            raise ValueError(f"{name} takes labels {metric.labels}, got {tuple(labels)}")
        self.samples.setdefault(name, []).append(
            {"labels": {k: "" if v is None else str(v) for k, v in labels.items()}, "value": value})

    def render(self) -> list[dict[str, Any]]:
        return [{"name": m.name, "help": m.help, "type": m.type, "samples": self.samples[m.name]}
                for m in CATALOGUE if m.name in self.samples]


def site_families(apply_result: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """From the registered ``datapath_apply`` result (the node computes the same at the end of its batch)."""
    return _site_metrics.site_families(dict(apply_result) if isinstance(apply_result, Mapping) else None)


def _page_bytes(size: Any, facts_pool: Mapping[str, Any]) -> int | None:
    if facts_pool.get("size_kb"):
        return int(facts_pool["size_kb"]) * 1024
    return PAGE_BYTES.get(str(size))


def audit_families(findings: Any, plan: Any, facts: Any) -> list[dict[str, Any]]:
    """From the host's audit findings (``audit_host_findings``), plan and ``datapath_facts``."""
    out = _Families("audit")
    rows = [_m(f) for f in _l(findings)]
    if findings is not None:
        for cap in AUDIT_CAPABILITIES:
            out.add("aiinfra_datapath_audit_drift_findings",
                    sum(1 for f in rows if f.get("capability") == cap and f.get("kind") == "drift"), capability=cap)
        for cap in (*AUDIT_CAPABILITIES, "facts"):
            for severity in ("error", "warning", "info"):
                count = sum(1 for f in rows if f.get("capability") == cap and f.get("severity") == severity)
                if count or cap != "facts":
                    out.add("aiinfra_datapath_audit_findings", count, capability=cap, severity=severity)
    pools = _m(_m(_m(facts).get("hugepages")).get("pools"))
    planned_sizes = set()
    for page in _l(_m(_m(plan).get("hugepages")).get("pages")):
        page = _m(page)
        size = str(page.get("size"))
        planned_sizes.add(size)
        page_bytes = _page_bytes(size, _m(pools.get(size)))
        out.add("aiinfra_datapath_hugepages_planned_pages", page.get("count"), page_size_bytes=page_bytes)
        for node, count in sorted(_m(page.get("per_node")).items(), key=lambda kv: int(kv[0])):
            out.add("aiinfra_datapath_hugepages_node_planned_pages", count, page_size_bytes=page_bytes,
                    numa_node=node)
    for size in sorted(pools, key=lambda s: _page_bytes(s, _m(pools[s])) or 0):
        pool = _m(pools[size])
        if size not in planned_sizes and not pool.get("total"):
            continue  # a size the plan does not use and the node does not hold: nothing to say
        page_bytes = _page_bytes(size, pool)
        out.add("aiinfra_datapath_hugepages_present_pages", pool.get("total"), page_size_bytes=page_bytes)
        for node, numa in sorted(_m(pool.get("per_node")).items(), key=lambda kv: int(kv[0])):
            out.add("aiinfra_datapath_hugepages_node_present_pages", _m(numa).get("total"),
                    page_size_bytes=page_bytes, numa_node=node)
    return out.render()


def cache_filesystems(plan: Any) -> list[dict[str, Any]]:
    """The ``filesystems`` option: the plan's cache mount and reserve."""
    storage = _m(_m(plan).get("nvme_layout"))
    path = _m(storage.get("mount")).get("path")
    if not path:
        return []
    reserve = _m(_m(plan).get("model_cache")).get("reserve_bytes")
    if reserve is None:
        reserve = storage.get("reserve_bytes")
    return [{"path": str(path), "reserve_bytes": None if reserve is None else int(reserve)}]


def measure_families(report: Any, host: str) -> list[dict[str, Any]]:
    """From the parsed measure.json: the pairs ``host`` was the client of, its storage targets."""
    out = _Families("measure")
    doc = _m(report)
    for row in _l(doc.get("hosts")):
        if _m(row).get("name") == host:
            out.add("aiinfra_datapath_measure_success", int(_m(row).get("status") == "pass"))
    for pair in _l(doc.get("pairs")):
        pair = _m(pair)
        if pair.get("client") != host:
            continue
        labels = {"fabric": pair.get("fabric"), "client": pair.get("client"), "server": pair.get("server")}
        rail = pair.get("rail") or 0
        out.add("aiinfra_datapath_rail_throughput_bytes_per_second", _scaled(pair.get("gbit_per_s"), 1e9 / 8),
                rail=f"rail{rail}", **labels)
        out.add("aiinfra_datapath_rail_gate_passed", int(pair.get("status") == "pass"), rail=f"rail{rail}", **labels)
        if rail:
            continue  # the pair's own metrics are its rail0's (one sample per pair, as before rails)
        out.add("aiinfra_datapath_pair_throughput_bytes_per_second", _scaled(pair.get("gbit_per_s"), 1e9 / 8), **labels)
        out.add("aiinfra_datapath_pair_retransmit_ratio", _num(pair.get("retransmit_share")), **labels)
        out.add("aiinfra_datapath_pair_latency_p99_seconds", _scaled(pair.get("p99_ms"), 1e-3), **labels)
        out.add("aiinfra_datapath_pair_gate_passed", int(pair.get("status") == "pass"), **labels)
    for row in _l(doc.get("storage")):
        row = _m(row)
        if row.get("host") != host:
            continue
        labels = {"target": row.get("name"), "kind": row.get("kind")}
        out.add("aiinfra_datapath_storage_read_bytes_per_second", _scaled(row.get("seq_read_mib_s"), 1048576),
                **labels)
        for depth in ("1", "32"):
            out.add("aiinfra_datapath_storage_read_latency_p99_seconds", _scaled(row.get(f"p99_us_qd{depth}"), 1e-6),
                    queue_depth=depth, **labels)
        out.add("aiinfra_datapath_storage_gate_passed", int(row.get("status") == "pass"), **labels)
    return out.render()


def model_cache_families(result: Any) -> list[dict[str, Any]]:
    """From the registered ``model_cache`` result (skipped or missing: nothing but the heartbeat)."""
    out = _Families("model_cache")
    r = _m(result)
    if not r or r.get("skipped"):
        return out.render()
    out.add("aiinfra_datapath_model_cache_success", 0 if r.get("failed") else 1)
    for model in _l(r.get("models")):
        model = _m(model)
        name, version = model.get("name"), model.get("version")
        # published (this run) and present (an earlier one) are the same state: one label value,
        # so that the run after a download does not change the file
        status = "present" if model.get("status") in ("published", "present") else model.get("status")
        out.add("aiinfra_datapath_cached_model_info", 1, model=name, version=version, status=status)
        files = _l(model.get("files"))
        if files:
            out.add("aiinfra_datapath_cached_model_size_bytes",
                    sum(int(_num(_m(f).get("size")) or 0) for f in files), model=name, version=version)
    return out.render()


def module_args(source: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``metrics_textfile`` arguments of one host for ``source`` (directory not included)."""
    if source == "site":
        metrics = site_families(_m(data.get("result")) or None)
        filesystems: list[dict[str, Any]] = []
    elif source == "audit":
        metrics = audit_families(data.get("findings"), data.get("plan"), data.get("facts"))
        filesystems = cache_filesystems(data.get("plan"))
    elif source == "measure":
        metrics = measure_families(data.get("report"), str(data.get("host")))
        filesystems = []
    elif source == "model_cache":
        metrics = model_cache_families(data.get("result"))
        filesystems = []
    else:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    return {"source": source, "heartbeat": HEARTBEATS[source], "metrics": metrics, "filesystems": filesystems}
