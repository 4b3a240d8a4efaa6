# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the measure role: measure_schedule (the pairs in rounds) and measure_report (aggregation,
findings and the report files), both once on the controller.

Thin wrappers: the work is in plugins/plugin_utils/measure (standard library only).
Documentation: measure_schedule.yml and measure_report.yml next to this file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure import baseline as _baseline
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure import report as _report
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.measure import schedule as _schedule
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.plain import plain as _plain


def _get(mapping: Any, key: str) -> Any:
    try:
        value = mapping[key]
    except Exception:  # missing key, or an undefined variable in hostvars raises on access
        return None
    return value


def _registered(value: Any) -> Any:
    """A registered result, or None when the task was skipped or did not run."""
    if not isinstance(value, Mapping) or value.get("skipped"):
        return None
    return _plain(value)


def _m_skipped(value: Any) -> bool:
    """A registered result of a task that was skipped (its condition was false)."""
    return isinstance(value, Mapping) and bool(value.get("skipped"))


def _hosts(hosts: Any, name: str) -> list[str]:
    if hosts is None or isinstance(hosts, (str, Mapping)):
        raise AnsibleFilterError(f"{name}: hosts must be a list of inventory host names (ansible_play_hosts_all)")
    return [str(h) for h in hosts]


def measure_schedule(hostvars: Any, hosts: Any, forks: Any = None, plan_var: str = "datapath_plan",
                     overrides: Any = None, wait: Any = _schedule.DEFAULT_WAIT_S,
                     overhead: Any = _schedule.ROUND_OVERHEAD_S) -> dict[str, Any]:
    """The schedule from every host's plan ``measure`` part."""
    order = _hosts(hosts, "measure_schedule")
    parts = {}
    for host in order:
        plan = _get(_get(hostvars, host), plan_var)
        part = _get(plan, "measure") if plan is not None else None
        if isinstance(part, Mapping):
            parts[host] = _plain(part)
    try:
        max_pairs = None if forks in (None, "", 0) else max(1, int(forks) // 2)
        return _schedule.build_schedule(parts, order, max_pairs, float(wait), float(overhead),
                                        _plain(overrides) if isinstance(overrides, Mapping) else None)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"measure_schedule: {exc}") from None


def measure_report(hostvars: Any, hosts: Any, schedule: Any, reached: Any = None, generated_at: Any = None,
                   plan_var: str = "datapath_plan", prefix: str = "measure", options: Any = None,
                   baseline: Any = None) -> dict[str, Any]:
    """The report files and the verdict from every host's registered probe results; with ``baseline``
    (``{mode: record | compare, dir, tolerance, runs}``) also the baselines' comparison or new documents."""
    order = _hosts(hosts, "measure_report")
    if not isinstance(schedule, Mapping):
        raise AnsibleFilterError("measure_report: schedule must be the measure_schedule result")
    alive = set(order if reached is None else _hosts(reached, "measure_report"))
    data: dict[str, dict[str, Any]] = {}
    for host in order:
        hv = _get(hostvars, host)
        plan = _plain(_get(hv, plan_var)) if isinstance(_get(hv, plan_var), Mapping) else {}
        measure = plan.get("measure") if isinstance(plan.get("measure"), Mapping) else None
        data[host] = {
            "reached": host in alive,
            "measure": measure,
            "roce": (plan.get("roce_qos") or {}).get("interfaces") or [],
            # not when the run left the storage probe out (measure_storage: false): a skipped task
            "storage_planned": bool(measure and measure.get("storage"))
            and not _m_skipped(_get(hv, f"{prefix}_storage_result")),
            "net": _plain(_get(hv, f"{prefix}_net")) or [],
            "paths": _registered(_get(hv, f"{prefix}_paths_result")),
            "storage": _registered(_get(hv, f"{prefix}_storage_result")),
            "cache_unmounted": (_registered(_get(hv, f"{prefix}_cache_state")) or {}).get("stdout") == "unmounted",
            "counters_before": _registered(_get(hv, f"{prefix}_counters_before")),
            "counters_after": _registered(_get(hv, f"{prefix}_counters_after")),
            "sweep_net": _plain(_get(hv, f"{prefix}_sweep_net")) or [],
            "sweep_storage": _registered(_get(hv, f"{prefix}_sweep_storage_result")),
            "checkpoint": _registered(_get(hv, f"{prefix}_checkpoint_result")),
            "metadata": _registered(_get(hv, f"{prefix}_metadata_result")),
        }
    base = _baseline_input(hostvars, order, plan_var, prefix, baseline)
    try:
        return _report.reports(_plain(schedule), data, None if generated_at is None else str(generated_at),
                               _plain(options) if isinstance(options, Mapping) else None, base)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"measure_report: {type(exc).__name__}: {exc}") from None


def _baseline_input(hostvars: Any, order: list[str], plan_var: str, prefix: str,
                    baseline: Any) -> dict[str, Any] | None:
    """Each host's class, plan hash, kernel and firmware, and the class documents already in ``dir``."""
    if not isinstance(baseline, Mapping) or baseline.get("mode") in (None, "", "none", False):
        return None
    mode = str(baseline["mode"])
    if mode not in ("record", "compare"):
        raise AnsibleFilterError(f"measure_report: measure_baseline must be record or compare, got {mode!r}")
    info = {}
    for host in order:
        hv = _get(hostvars, host)
        plan = _plain(_get(hv, plan_var)) if isinstance(_get(hv, plan_var), Mapping) else {}
        versions = _baseline.parse_versions((_registered(_get(hv, f"{prefix}_versions")) or {}).get("stdout"))
        info[host] = {"class": _baseline.node_class(plan, host), "plan_hash": _baseline.plan_hash(plan), **versions}
    existing: dict[str, Any] = {}
    directory = baseline.get("dir")
    if directory:
        path = os.path.abspath(os.path.expanduser(str(directory)))
        for cls in sorted({i["class"] for i in info.values()}):
            name = os.path.join(path, f"{cls}.json")
            if not os.path.isfile(name):
                continue
            try:
                with open(name, encoding="utf-8") as handle:
                    existing[cls] = json.load(handle)
            except (OSError, ValueError) as exc:
                raise AnsibleFilterError(f"measure_report: baseline {name}: {exc}") from None
    return {"mode": mode, "tolerance": baseline.get("tolerance"), "runs": baseline.get("runs"), "info": info,
            "existing": existing}


class FilterModule:
    """aiinfra.datapath measure filters."""

    def filters(self) -> dict[str, Any]:
        return {"measure_schedule": measure_schedule, "measure_report": measure_report}
