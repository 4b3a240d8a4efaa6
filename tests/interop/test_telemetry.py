"""The node metrics, the alert rules and the dashboard, read by Prometheus' own promtool.

* ``promtool check metrics`` (the exposition-format parser and the naming linter) on every file
  ``metrics_textfile`` writes: each source built by the ``datapath_metrics`` filter from
  realistic playbook data, then written by the module's engine below a temporary root;
* ``promtool check rules`` and ``promtool test rules`` on docs/prometheus;
* every metric name in the rules and the dashboard's queries is one the collection emits
  (plugin_utils/telemetry.py CATALOGUE) or a recording rule of the rules file, and every metric of
  the catalogue is documented in docs/telemetry.md.

promtool comes from Debian's prometheus package (scripts/bootstrap.sh installs it).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.aiinfra.datapath.plugins.filter.metrics import datapath_metrics
from ansible_collections.aiinfra.datapath.plugins.module_utils import _metrics_textfile as mt
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import telemetry

from .sys_common import run as run_tool
from .sys_common import tool

pytestmark = pytest.mark.interop

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "docs" / "prometheus" / "aiinfra-datapath.rules.yml"
RULE_TESTS = sorted((REPO / "docs" / "prometheus" / "tests").glob("*.yml"))
DASHBOARD = REPO / "docs" / "grafana" / "aiinfra-datapath.json"
DOC = REPO / "docs" / "telemetry.md"
DIRECTORY = "/var/lib/node_exporter/textfile_collector"

PLAN = {
    "hugepages": {"pages": [{"size": "2M", "count": 1024, "persist": "sysctl", "per_node": {"0": 512, "1": 512}},
                            {"size": "1G", "count": 16, "persist": "cmdline", "per_node": None}]},
    "nvme_layout": {"mount": {"path": "/mnt/model-cache", "options": ["noatime"]}, "reserve_bytes": 10737418240},
    "model_cache": {"reserve_bytes": 107374182400, "cache_dir": "/mnt/model-cache/models"},
}
FACTS = {"hugepages": {"default_size": "2M", "pools": {
    "2M": {"size_kb": 2048, "total": 1000, "free": 1000,
           "per_node": {"0": {"total": 512, "free": 512}, "1": {"total": 488, "free": 488}}},
    "1G": {"size_kb": 1048576, "total": 0, "free": 0,
           "per_node": {"0": {"total": 0, "free": 0}, "1": {"total": 0, "free": 0}}}}}}
FINDINGS = [
    {"host": "gpu-node-01", "capability": "kernel_cmdline", "check": "cmdline-pending", "key": "iommu=pt",
     "severity": "info", "kind": "drift"},
    {"host": "gpu-node-01", "capability": "hugepages", "check": "hugepages-short", "key": "2M.total",
     "severity": "error", "kind": "drift"},
    {"host": "gpu-node-01", "capability": "sysctl_profile", "check": "socket-buffers", "key": "net.core.rmem_max",
     "severity": "warning", "kind": "finding"},
]
APPLY = {"changed": True, "results": {
    "sysctl_profile": {"changed": True}, "hugepages": {"changed": False, "reboot_required": False},
    "kernel_cmdline": {"changed": True, "reboot_required": True}, "link_mtu": {"changed": False},
    "roce_qos": {"changed": False}, "nvme_layout": {"changed": False, "skipped": True},
    "nfd_labels": {"changed": False},
    "nic_firmware": {"changed": False, "compliance": [
        {"interface": "ens1f0np0", "driver": "mlx5_core", "psid": "MT_0000000359", "firmware_version": "22.36.1010",
         "status": "compliant"},
        {"interface": "ens2f0np0", "driver": "mlx5_core", "psid": "MT_0000000359", "firmware_version": "22.31.1014",
         "status": "noncompliant"},
        {"interface": "eth0", "driver": "veth", "psid": None, "firmware_version": None, "status": "unknown"}]}}}
REPORT = {
    "hosts": [{"name": "gpu-node-01", "status": "fail"}, {"name": "gpu-node-02", "status": "pass"}],
    "pairs": [
        {"fabric": "rail0", "client": "gpu-node-01", "server": "gpu-node-02", "gbit_per_s": 93.41,
         "retransmit_share": 0.00012, "p99_ms": 0.081, "status": "pass"},
        {"fabric": "rail1", "client": "gpu-node-01", "server": "gpu-node-03", "gbit_per_s": 41.2,
         "retransmit_share": 0.021, "p99_ms": 2.5, "status": "fail"},
        {"fabric": "rail0", "client": "gpu-node-02", "server": "gpu-node-01", "gbit_per_s": 94.0,
         "retransmit_share": 0.0, "p99_ms": None, "status": "pass"},
        {"fabric": "rail0", "client": "gpu-node-01", "server": "gpu-node-04", "gbit_per_s": None,
         "retransmit_share": None, "p99_ms": None, "status": "error"},
    ],
    "storage": [
        {"host": "gpu-node-01", "name": "cache", "kind": "file", "seq_read_mib_s": 6612.5, "p99_us_qd1": 94.0,
         "p99_us_qd32": 412.0, "status": "pass"},
        {"host": "gpu-node-01", "name": "model", "kind": "model", "seq_read_mib_s": 3100.0, "p99_us_qd1": None,
         "p99_us_qd32": None, "status": "fail"},
    ],
}
MODEL_CACHE = {"changed": True, "models": [
    {"name": "llama-3-8b", "version": "2024-07-01", "status": "published",
     "files": [{"path": "config.json", "size": 654}, {"path": "model.safetensors", "size": 16060522496}]},
    {"name": "odd \"model\"\\name", "version": "v1\nbeta", "status": "present", "files": []},
], "evicted": [{"name": "llama-2-7b", "version": "v1", "bytes": 13476839424}], "free_bytes": 3012844969984,
    "reserve_bytes": 107374182400}


def _node_root(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    (root / "proc" / "self").mkdir(parents=True)
    (root / "mnt" / "model-cache").mkdir(parents=True)
    (root / "proc" / "self" / "mountinfo").write_text(
        "22 1 259:1 / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
        "40 22 259:3 / /mnt/model-cache rw,noatime - xfs /dev/md127 rw\n")
    return root


def _write(root: Path, args: dict[str, Any]) -> Path:
    params = dict(args, directory=DIRECTORY, state="present", root=str(root))
    result = run(mt.MetricsTextfile, params, Node(None, str(root)))
    assert not result.get("failed"), result
    path = root / DIRECTORY.lstrip("/") / mt.file_name(args["source"])
    assert path.read_text() == result["content"]
    return path


def _stdin(path: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics < path`` (it reads the exposition text on stdin)."""
    with path.open() as handle:
        return subprocess.run([tool("promtool"), "check", "metrics"], stdin=handle, capture_output=True, text=True,
                              timeout=60, check=False)


def _promtool_check_metrics(path: Path) -> None:
    done = _stdin(path)
    # silent and 0: parsed, and the linter (names, units, HELP, counters) has nothing to say
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), (done.stdout + done.stderr
                                                                              + path.read_text())


CASES = {
    "site": {"result": APPLY},
    "site-failed": {"result": {"failed": True, "msg": "spec errors", "spec_errors": 2}},
    "audit": {"findings": FINDINGS, "plan": PLAN, "facts": FACTS},
    "audit-unreached": {"findings": None, "plan": PLAN, "facts": None},
    "measure": {"report": json.dumps(REPORT), "host": "gpu-node-01"},
    "measure-other": {"report": REPORT, "host": "gpu-node-02"},
    "model_cache": {"result": MODEL_CACHE},
    "model_cache-skipped": {"result": {"skipped": True, "changed": False}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_promtool_reads_every_file_the_module_writes(tmp_path: Path, case: str) -> None:
    source = case.split("-")[0]
    args = datapath_metrics(CASES[case], source)
    path = _write(_node_root(tmp_path), args)
    _promtool_check_metrics(path)
    text = path.read_text()
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert telemetry.HEARTBEATS[source] in names
    assert names <= set(telemetry.BY_NAME), names - set(telemetry.BY_NAME)
    assert all(telemetry.BY_NAME[n].source == source for n in names)


def test_figures_as_written(tmp_path: Path) -> None:
    root = _node_root(tmp_path)
    site = _write(root, datapath_metrics(CASES["site"], "site")).read_text()
    assert "aiinfra_datapath_converge_success 1\n" in site
    assert "aiinfra_datapath_reboot_required 1\n" in site
    assert 'aiinfra_datapath_converge_capability_failed{capability="kernel_cmdline"} 0\n' in site
    assert 'capability="nvme_layout"' not in site  # skipped: did not run
    assert 'aiinfra_datapath_nic_firmware_compliant{interface="ens2f0np0"} 0\n' in site
    assert 'aiinfra_datapath_nic_firmware_compliant{interface="eth0"}' not in site
    assert ('aiinfra_datapath_nic_firmware_info{driver="veth",firmware_version="",interface="eth0",psid="",'
            'status="unknown"} 1\n') in site
    audit = _write(root, datapath_metrics(CASES["audit"], "audit")).read_text()
    assert 'aiinfra_datapath_audit_drift_findings{capability="hugepages"} 1\n' in audit
    assert 'aiinfra_datapath_audit_drift_findings{capability="link_mtu"} 0\n' in audit
    assert 'aiinfra_datapath_audit_findings{capability="sysctl_profile",severity="warning"} 1\n' in audit
    assert 'aiinfra_datapath_hugepages_planned_pages{page_size_bytes="2097152"} 1024\n' in audit
    assert 'aiinfra_datapath_hugepages_present_pages{page_size_bytes="2097152"} 1000\n' in audit
    assert 'aiinfra_datapath_hugepages_node_present_pages{numa_node="1",page_size_bytes="2097152"} 488\n' in audit
    assert 'aiinfra_datapath_hugepages_planned_pages{page_size_bytes="1073741824"} 16\n' in audit
    assert 'aiinfra_datapath_hugepages_node_planned_pages{numa_node="0",page_size_bytes="1073741824"}' not in audit
    assert 'aiinfra_datapath_cache_reserve_bytes{mountpoint="/mnt/model-cache"} 107374182400\n' in audit
    assert 'aiinfra_datapath_cache_filesystem_mounted{mountpoint="/mnt/model-cache"} 1\n' in audit
    measure = _write(root, datapath_metrics(CASES["measure"], "measure")).read_text()
    pair = 'client="gpu-node-01",fabric="rail0",server="gpu-node-02"'
    assert f"aiinfra_datapath_pair_throughput_bytes_per_second{{{pair}}} 11676250000\n" in measure
    assert f"aiinfra_datapath_pair_retransmit_ratio{{{pair}}} 0.00012\n" in measure
    assert f"aiinfra_datapath_pair_latency_p99_seconds{{{pair}}} 8.1e-05\n" in measure
    assert 'aiinfra_datapath_pair_gate_passed{client="gpu-node-01",fabric="rail0",server="gpu-node-04"} 0\n' in measure
    assert 'client="gpu-node-02"' not in measure  # written on the client only
    assert "aiinfra_datapath_measure_success 0\n" in measure
    assert ('aiinfra_datapath_storage_read_latency_p99_seconds{kind="file",queue_depth="32",target="cache"} '
            '0.000412\n') in measure
    assert 'aiinfra_datapath_storage_read_bytes_per_second{kind="model",target="model"} 3250585600\n' in measure
    models = _write(root, datapath_metrics(CASES["model_cache"], "model_cache")).read_text()
    assert ('aiinfra_datapath_cached_model_info{model="llama-3-8b",status="present",version="2024-07-01"} 1\n'
            in models)
    assert 'model="odd \\"model\\"\\\\name",status="present",version="v1\\nbeta"} 1\n' in models
    assert 'aiinfra_datapath_cached_model_size_bytes{model="llama-3-8b",version="2024-07-01"} 16060523150\n' in models
    assert "evicted" not in models  # what a run did is not state


def test_the_linter_is_live(tmp_path: Path) -> None:
    """promtool check metrics fails a file that breaks the conventions (here: a counter without _total)."""
    path = tmp_path / "bad.prom"
    path.write_text("# HELP aiinfra_datapath_runs Runs.\n# TYPE aiinfra_datapath_runs counter\n"
                    "aiinfra_datapath_runs 1\n")
    done = _stdin(path)
    assert done.returncode != 0 and "_total" in done.stdout + done.stderr


def test_promtool_check_rules() -> None:
    done = run_tool([tool("promtool"), "check", "rules", str(RULES)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_test_rules() -> None:
    assert RULE_TESTS
    done = run_tool([tool("promtool"), "test", "rules", *[str(p) for p in RULE_TESTS]], cwd=str(REPO))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout


# ------------------------------------------------------------------ names used are names emitted
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, aggregations, keywords, label names,
    strings, durations and Grafana variables left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS or re.fullmatch(r"\d+[smhdwy]", name):
            continue
        names.add(name)
    return names


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def _label_values_metric(expr: str) -> str:
    match = re.fullmatch(r"label_values\((\w+)(?:\{[^}]*\})?,\s*\w+\)", expr)
    return match.group(1) if match else expr


def test_metric_name_extraction() -> None:
    assert metric_names('sum by (instance) (a_b{x=~"$v"}) / on(i) group_left c[5m] > bool 2 * 1e9') == {"a_b", "c"}
    assert metric_names("time() - x_seconds > 2 * 86400") == {"x_seconds"}


def test_rules_and_dashboard_use_only_metrics_the_collection_emits() -> None:
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    known = set(telemetry.BY_NAME) | recorded
    used: set[str] = set()
    for rule in _rules():
        names = metric_names(rule["expr"])
        assert names and names <= known, (rule.get("alert") or rule.get("record"), names - known)
        used |= names
    for expr in _dashboard_exprs():
        names = metric_names(_label_values_metric(expr)) if expr.startswith("label_values") else metric_names(expr)
        assert names and names <= set(telemetry.BY_NAME), (expr, names - set(telemetry.BY_NAME))
        used |= names
    # the alerts and panels are there
    alerts = {rule["alert"] for rule in _rules() if "alert" in rule}
    assert {"DatapathDrift", "DatapathConvergeStale", "DatapathCacheBelowReserve", "DatapathPairGateFailed",
            "DatapathFirmwareNonCompliant"} <= alerts
    assert {"aiinfra_datapath_audit_drift_findings", "aiinfra_datapath_pair_throughput_bytes_per_second",
            "aiinfra_datapath_cache_filesystem_free_bytes", "aiinfra_datapath_cached_model_info"} <= used


def test_alerts_are_unit_tested() -> None:
    tested = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            tested |= {t["alertname"] for t in case.get("alert_rule_test") or [] if t.get("exp_alerts")}
    alerts = {rule["alert"] for rule in _rules() if "alert" in rule}
    assert alerts - tested <= {"DatapathAuditStale"}, alerts - tested


def test_every_metric_is_documented() -> None:
    doc = DOC.read_text()
    for metric in telemetry.CATALOGUE:
        assert f"`{metric.name}`" in doc, metric.name
    documented = set(re.findall(r"`(aiinfra_datapath_[a-z0-9_]+)`", doc))
    assert documented <= set(telemetry.BY_NAME), documented - set(telemetry.BY_NAME)
