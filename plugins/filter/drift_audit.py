# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the drift audit: audit_findings (one host), audit_reports (all hosts).

Thin wrappers: the work is in plugins/plugin_utils/audit (standard library only).
Documentation: audit_findings.yml and audit_reports.yml next to this file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import audit as _audit
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import topology_golden as _golden
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.plain import plain as _plain


def audit_findings(plan: Any, facts: Any, verify: Any = None, rtt_us: Any = _audit.DEFAULT_RTT_US,
                   link_speed_mbps: Any = None, check_buffers: Any = True, host: Any = None,
                   golden: Any = None, k8s_node: Any = None) -> list[dict[str, Any]]:
    """Findings of one host: its plan compared with its datapath_facts (and verify results, the golden
    topologies by class, its Kubernetes Node object)."""
    if not isinstance(plan, Mapping):
        raise AnsibleFilterError("audit_findings: the input must be the host's plan (a mapping from node_plan)")
    try:
        options = _audit.options_from({"rtt_us": rtt_us, "link_speed_mbps": link_speed_mbps,
                                       "check_buffers": check_buffers})
    except ValueError as exc:
        raise AnsibleFilterError(f"audit_findings: {exc}") from None
    facts_plain = _plain(facts) if isinstance(facts, Mapping) else None
    if golden is not None and not isinstance(golden, Mapping):
        raise AnsibleFilterError("audit_findings: golden must map each node class to its golden topology")
    if k8s_node is not None and not isinstance(k8s_node, Mapping):
        raise AnsibleFilterError("audit_findings: k8s_node must be one Node object (kubectl get node NAME -o json)")
    return _audit.compare(_plain(plan), facts_plain, _plain(verify) if verify else None, options,
                          host=None if host is None else str(host),
                          golden=_plain(golden) if golden else None, k8s_node=_plain(k8s_node) if k8s_node else None)


def topology_fingerprint(topology: Any) -> dict[str, Any] | None:
    """The golden-topology fingerprint of one host's node_topology result (None: no PCI device)."""
    if topology is not None and not isinstance(topology, Mapping):
        raise AnsibleFilterError("topology_fingerprint: the input must be the topology section of datapath_facts")
    return _golden.fingerprint(_plain(topology) if topology else None)


def topology_golden_files(directory: Any) -> dict[str, Any]:
    """``{CLASS: golden topology}`` from the ``CLASS.json`` files of a controller directory; {} when the
    directory does not exist (no class has a golden topology yet)."""
    if not isinstance(directory, str) or not directory:
        raise AnsibleFilterError(f"topology_golden_files: expected a directory path, got {directory!r}")
    path = os.path.abspath(os.path.expanduser(directory))
    if not os.path.isdir(path):
        return {}
    out: dict[str, Any] = {}
    for name in sorted(os.listdir(path)):
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            with open(os.path.join(path, name), encoding="utf-8") as handle:
                out[name[:-len(".json")]] = json.load(handle)
        except (OSError, ValueError) as exc:
            raise AnsibleFilterError(f"topology_golden_files: {os.path.join(path, name)}: {exc}") from None
    return out


def k8s_node(nodes: Any, name: Any) -> dict[str, Any] | None:
    """The Node object called ``name`` in ``kubectl get nodes -o json`` output (a NodeList, or a list of
    Nodes); None when it is not there."""
    if isinstance(nodes, Mapping) and nodes.get("kind") == "Node":
        nodes = [nodes]
    items = nodes.get("items") if isinstance(nodes, Mapping) else nodes
    if items is None:
        return None
    if not isinstance(items, (list, tuple)):
        raise AnsibleFilterError("k8s_node: the input must be `kubectl get nodes -o json` output (a NodeList)")
    for item in items:
        if isinstance(item, Mapping) and isinstance(item.get("metadata"), Mapping) \
                and item["metadata"].get("name") == str(name):
            return _plain(item)
    return None


def audit_reports(results: Any, fail_on: Any = "drift", options: Any = None,
                  generated_at: Any = None, last_runs: Any = None) -> dict[str, Any]:
    """The three report texts and the verdict from {host: findings}; ``last_runs``: {host: the
    ``last_run`` section of its datapath_facts} (pulled nodes)."""
    if not isinstance(results, Mapping):
        raise AnsibleFilterError("audit_reports: the input must map each host to its findings")
    plain: dict[str, list[dict[str, Any]]] = {}
    for host, findings in results.items():
        if findings is None:
            findings = _audit.compare({"host": str(host)}, None)
        if not isinstance(findings, (list, tuple)):
            raise AnsibleFilterError(f"audit_reports: findings of {host} must be a list")
        plain[str(host)] = [_plain(f) for f in findings]
    try:
        runs = {str(h): _plain(r) for h, r in last_runs.items() if isinstance(r, Mapping)} \
            if isinstance(last_runs, Mapping) else None
        return _audit.reports(plain, str(fail_on), _plain(options) if isinstance(options, Mapping) else None,
                              None if generated_at is None else str(generated_at), runs)
    except ValueError as exc:
        raise AnsibleFilterError(f"audit_reports: {exc}") from None


class FilterModule:
    """aiinfra.datapath drift audit filters."""

    def filters(self) -> dict[str, Any]:
        return {"audit_findings": audit_findings, "audit_reports": audit_reports,
                "topology_fingerprint": topology_fingerprint, "topology_golden_files": topology_golden_files,
                "k8s_node": k8s_node}
