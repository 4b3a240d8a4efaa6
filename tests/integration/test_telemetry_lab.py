"""Node metrics on the lab: site.yml, audit.yml, measure.yml and model_cache.yml write the textfiles, a real
node_exporter inside a node exposes them, a scrape from another node reads the audit's figures (and the
measurement's, and the cached versions).

Debian's prometheus-node-exporter runs inside the first node (its mount, UTS and network
namespaces: its own /var, its lab address), listening only on that node's management address,
with only the textfile collector. It is started and stopped by this test, by PID; the host's own
network namespace never has a listener on its port (checked). The scrape runs inside the second
node over the lab fabric. The scraped values must equal what audit.json and the node say: drift
per capability, HugePages planned and present, the cache size, the converge result.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from labtools import CACHE_MOUNT, REPO, LabHandle, spec_applied_then_restored

pytestmark = pytest.mark.lab

SITE = os.path.join(REPO, "playbooks", "site.yml")
AUDIT = os.path.join(REPO, "playbooks", "audit.yml")
MEASURE = os.path.join(REPO, "playbooks", "measure.yml")
MODEL_CACHE = os.path.join(REPO, "playbooks", "model_cache.yml")
SOURCE_DIR = "/srv/aiinfra-telemetry-models/tiny/v1"  # inside the node's own root
DIRECTORY = "/var/lib/node_exporter/textfile_collector"
FILES = tuple(f"{DIRECTORY}/aiinfra_datapath_{s}.prom" for s in ("site", "audit", "measure", "model_cache"))
EXPORTER = "/usr/bin/prometheus-node-exporter"
PORT = 19100  # not node_exporter's default: a stray exporter of someone else's is never what we read
WRITE_TASK = "Write the converge metrics where the converge could not (aiinfra_datapath_site.prom)"
APPLY_TASK = "Facts, plan and every capability module, once each, in dependency order"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Exposition text -> {(name, sorted labels): value}."""
    out = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = tuple(sorted(LABEL.findall(match.group(3) or "")))
            out[(match.group(1), labels)] = float(match.group(4))
    return out


def address(lab: LabHandle, node: str) -> str:
    mgmt = lab.state["fabrics"][0]["name"]
    return str(lab.state["nodes"][node]["interfaces"][mgmt]["address"])


def host_listens(port: int) -> bool:
    done = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=False)
    return bool(done.stdout.strip())


@pytest.fixture(scope="module")
def telemetry_lab(lab: LabHandle) -> Iterator[LabHandle]:
    if not os.access(EXPORTER, os.X_OK) or shutil.which("ss") is None:
        pytest.skip("prometheus-node-exporter (or ss) is not installed: scripts/bootstrap.sh installs it")
    with spec_applied_then_restored(lab, extra_files=FILES):
        # converged before the first test, so that each test also runs alone (-k) or in any order:
        # the model cache needs the NVMe cache mounted, measure.yml the fabrics at their MTU
        site = lab.playbook(SITE)
        assert site.rc == 0, site.failures()
        yield lab


@pytest.fixture
def exporter(telemetry_lab: LabHandle) -> Iterator[str]:
    """node_exporter inside the first node, on its lab address only; stopped by PID afterwards."""
    lab, node = telemetry_lab, telemetry_lab.nodes[0]
    listen = f"{address(lab, node)}:{PORT}"
    assert not host_listens(PORT)
    started = lab.sh(node, f"setsid {EXPORTER} --web.listen-address={listen} --collector.disable-defaults "
                           f"--collector.textfile --collector.textfile.directory={DIRECTORY} "
                           "</dev/null >/tmp/aiinfra-node-exporter.log 2>&1 & echo $!")
    pid = int(started.stdout.strip())
    try:
        for _attempt in range(50):
            if lab.sh(node, f"ss -Hltn 'sport = :{PORT}'", check=False).stdout.strip():
                break
            time.sleep(0.1)
        else:
            raise AssertionError(lab.sh(node, "cat /tmp/aiinfra-node-exporter.log", check=False).stdout)
        yield listen
    finally:
        lab.sh(node, f"kill {pid}; for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 {pid} 2>/dev/null || break; "
                     "sleep 0.2; done; rm -f /tmp/aiinfra-node-exporter.log", check=False)
        assert lab.sh(node, f"kill -0 {pid}", check=False).returncode != 0


def changed_lines(result: Any) -> list[str]:
    """Every changed task of a run, and for the metrics task the lines that differ (assertion messages)."""
    lines = []
    for play in result.data.get("plays", []):
        for task in play.get("tasks", []):
            for host, row in task.get("hosts", {}).items():
                if not row.get("changed"):
                    continue
                lines.append(f"{host} [{task['task']['name']}]")
                for action in row.get("actions") or []:
                    before = set((action.get("before") or "").splitlines())
                    after = set((action.get("after") or "").splitlines())
                    lines += [f"  - {x}" for x in sorted(before - after)] + [f"  + {x}" for x in sorted(after - before)]
    return lines


def scrape(lab: LabHandle, node: str, listen: str) -> str:
    code = (f"import urllib.request; "
            f"print(urllib.request.urlopen('http://{listen}/metrics', timeout=10).read().decode())")
    return lab.sh(node, f'python3 -c "{code}"').stdout


def test_site_and_audit_metrics_scraped_from_another_node(telemetry_lab: LabHandle, tmp_path: Path,
                                                          exporter: str) -> None:
    lab = telemetry_lab
    node, other = lab.nodes[0], lab.nodes[1]
    site = lab.playbook(SITE)
    assert site.rc == 0, site.failures()
    # written on every node by the converge's own module call (datapath_run's batch, after its calls);
    # the metrics task of its own (the block's rescue) does not run
    applied = site.task_results(APPLY_TASK)
    assert set(applied) == set(lab.nodes) and all(r.get("metrics_written") is True for r in applied.values())
    assert site.task_results(WRITE_TASK) == {}
    # with no capability selected, the call writes the metrics alone
    before = lab.sh(node, f"cat {DIRECTORY}/aiinfra_datapath_site.prom").stdout
    nothing = lab.playbook(SITE, "--tags", "no_such_tag", limit=node)
    assert nothing.rc == 0, nothing.failures()
    row = nothing.task_results(APPLY_TASK)[node]
    assert row["capabilities"] == [] and row["metrics_written"] is True and nothing.task_results(WRITE_TASK) == {}
    after = lab.sh(node, f"cat {DIRECTORY}/aiinfra_datapath_site.prom").stdout
    assert "\naiinfra_datapath_converge_success 1\n" in after and after != before  # a new heartbeat
    again = lab.playbook(SITE)
    assert again.rc == 0, again.stdout[-3000:]
    assert set(again.changed_hosts().values()) == {0}, (again.changed_hosts(), changed_lines(again))
    report_dir = tmp_path / "reports"
    audit = lab.playbook(AUDIT, extra_vars={"audit_report_dir": str(report_dir), "audit_fail_on": "never"})
    assert audit.rc == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
    report: dict[str, Any] = json.loads((report_dir / "audit.json").read_text())

    text = scrape(lab, other, exporter)
    assert not host_listens(PORT)  # the listener is in the node's network namespace only
    metrics = parse(text)
    ours = {k: v for k, v in metrics.items() if k[0].startswith("aiinfra_datapath_")}
    assert ours, text[-3000:]
    # node_exporter read both files without error
    for source in ("site", "audit"):
        key = ("node_textfile_mtime_seconds", (("file", f"{DIRECTORY}/aiinfra_datapath_{source}.prom"),))
        alt = ("node_textfile_mtime_seconds", (("file", f"aiinfra_datapath_{source}.prom"),))
        assert key in metrics or alt in metrics, sorted(k for k in metrics if k[0] == "node_textfile_mtime_seconds")
    assert metrics[("node_textfile_scrape_error", ())] == 0

    # converge: the second run succeeded, no capability failed, and its heartbeat is recent
    assert ours[("aiinfra_datapath_converge_success", ())] == 1
    assert abs(ours[("aiinfra_datapath_converge_last_run_timestamp_seconds", ())] - time.time()) < 900
    for capability in ("sysctl_profile", "hugepages", "link_mtu", "nvme_layout", "nfd_labels"):
        assert ours[("aiinfra_datapath_converge_capability_failed", (("capability", capability),))] == 0

    # drift per capability equals the audit's, for this node
    for capability in ("sysctl_profile", "hugepages", "kernel_cmdline", "link_mtu", "roce_qos", "nic_firmware",
                       "nvme_layout", "nfd_labels"):
        want = sum(1 for f in report["findings"]
                   if f["host"] == node and f["capability"] == capability and f["kind"] == "drift")
        assert ours[("aiinfra_datapath_audit_drift_findings", (("capability", capability),))] == want, capability
    for (name, labels), value in ours.items():
        if name == "aiinfra_datapath_audit_findings":
            cap, sev = dict(labels)["capability"], dict(labels)["severity"]
            assert value == sum(1 for f in report["findings"]
                                if f["host"] == node and f["capability"] == cap and f["severity"] == sev)

    # HugePages present: what the node's kernel holds (the pool is global in the lab); without
    # hugepages drift in the audit, present equals planned for every planned size
    for (name, labels), value in ours.items():
        if name == "aiinfra_datapath_hugepages_present_pages":
            size_kb = int(dict(labels)["page_size_bytes"]) // 1024
            nr = lab.sh(node, f"cat /sys/kernel/mm/hugepages/hugepages-{size_kb}kB/nr_hugepages").stdout
            assert value == int(nr)
    planned = {k: v for k, v in ours.items() if k[0] == "aiinfra_datapath_hugepages_planned_pages"}
    assert planned
    hugepages_drift = ours[("aiinfra_datapath_audit_drift_findings", (("capability", "hugepages"),))]
    if hugepages_drift == 0:
        for (_name, labels), value in planned.items():
            assert ours[("aiinfra_datapath_hugepages_present_pages", labels)] == value, labels

    # the cache: mounted, its size as the node's statvfs gives it
    mounted = (("mountpoint", CACHE_MOUNT),)
    assert ours[("aiinfra_datapath_cache_filesystem_mounted", mounted)] == 1
    size = lab.sh(node, f"python3 -c \"import os; s=os.statvfs('{CACHE_MOUNT}'); print(s.f_blocks*s.f_frsize)\"")
    assert ours[("aiinfra_datapath_cache_filesystem_size_bytes", mounted)] == int(size.stdout)
    assert ("aiinfra_datapath_cache_reserve_bytes", mounted) in ours

    # a converge that fails before the node's batch (a broken spec): site.yml's own metrics task
    # writes the failure on every node (a record of the run, changed=false)
    broken = lab.playbook(SITE, extra_vars={"datapath": {"version": 999}})
    assert broken.rc != 0
    wrote = broken.task_results(WRITE_TASK)
    assert set(wrote) == set(lab.nodes) and all(
        any(a["kind"] == "file" for a in r["actions"]) and not r["changed"] for r in wrote.values()), wrote
    prom = lab.sh(node, f"cat {DIRECTORY}/aiinfra_datapath_site.prom").stdout
    assert "\naiinfra_datapath_converge_success 0\n" in prom, prom


def test_measured_figures_scraped_equal_measure_json(telemetry_lab: LabHandle, tmp_path: Path, exporter: str) -> None:
    """measure.yml on the lab spec (all pairs, 3 s loads): the pairs the first node was the client of and
    its storage targets, scraped from the second node, equal measure.json (rounded as written)."""
    lab = telemetry_lab
    node, other = lab.nodes[0], lab.nodes[1]
    report_dir = tmp_path / "reports"
    result = lab.playbook(MEASURE, extra_vars={"measure_report_dir": str(report_dir)})
    report: dict[str, Any] = json.loads((report_dir / "measure.json").read_text())  # written also when it fails
    assert lab.sh(node, f"test -s {DIRECTORY}/aiinfra_datapath_measure.prom", check=False).returncode == 0, \
        result.stdout[-3000:]
    ours = {k: v for k, v in parse(scrape(lab, other, exporter)).items() if k[0].startswith("aiinfra_datapath_")}
    status = next(h["status"] for h in report["hosts"] if h["name"] == node)
    assert ours[("aiinfra_datapath_measure_success", ())] == (1 if status == "pass" else 0)
    pairs = [p for p in report["pairs"] if p["client"] == node]
    assert pairs
    for pair in pairs:
        labels = tuple(sorted({"fabric": pair["fabric"], "client": node, "server": pair["server"]}.items()))
        assert ours[("aiinfra_datapath_pair_gate_passed", labels)] == (1 if pair["status"] == "pass" else 0)
        if pair["gbit_per_s"] is not None:
            got = ours[("aiinfra_datapath_pair_throughput_bytes_per_second", labels)]
            assert got == pytest.approx(pair["gbit_per_s"] * 1e9 / 8, rel=1e-9)
        if pair["retransmit_share"] is not None:
            assert ours[("aiinfra_datapath_pair_retransmit_ratio", labels)] == pytest.approx(pair["retransmit_share"])
    assert not any(k[0].startswith("aiinfra_datapath_pair_") and dict(k[1])["client"] != node for k in ours)
    for row in (r for r in report["storage"] if r["host"] == node and r["seq_read_mib_s"] is not None):
        labels = tuple(sorted({"target": row["name"], "kind": row["kind"]}.items()))
        got = ours[("aiinfra_datapath_storage_read_bytes_per_second", labels)]
        assert got == pytest.approx(row["seq_read_mib_s"] * 1048576, rel=1e-9)


def test_model_versions_scraped_after_model_cache(telemetry_lab: LabHandle, exporter: str) -> None:
    """playbooks/model_cache.yml places a one-file version (source: a directory on the node) on the first
    node's cache; the scrape shows it as present with its size, and a second run changes nothing."""
    lab = telemetry_lab
    node, other = lab.nodes[0], lab.nodes[1]
    content = '{"model_type": "tiny"}\n'
    with open(os.path.join(lab.state["inventory_dir"], "group_vars", "all", "datapath.yml")) as handle:
        spec = yaml.safe_load(handle)["datapath"]  # the spec site.yml applied, plus one model
    spec["models"] = [{"name": "tiny", "version": "v1", "source": SOURCE_DIR, "hosts": [node],
                       "files": [{"path": "config.json", "sha256": hashlib.sha256(content.encode()).hexdigest(),
                                  "size": len(content)}]}]
    lab.lab.run_in(node, ["/bin/sh", "-c", f"mkdir -p {SOURCE_DIR} && cat > {SOURCE_DIR}/config.json"],
                   input=content)
    try:
        first = lab.playbook(MODEL_CACHE, extra_vars={"datapath": spec}, limit=node)
        assert first.rc == 0, first.stdout[-3000:] + first.stderr[-2000:]
        again = lab.playbook(MODEL_CACHE, extra_vars={"datapath": spec}, limit=node)
        assert again.rc == 0 and again.changed_hosts() == {node: 0}, (again.changed_hosts(), changed_lines(again))
        ours = {k: v for k, v in parse(scrape(lab, other, exporter)).items() if k[0].startswith("aiinfra_datapath_")}
        assert ours[("aiinfra_datapath_model_cache_success", ())] == 1
        info = (("model", "tiny"), ("status", "present"), ("version", "v1"))
        assert ours[("aiinfra_datapath_cached_model_info", info)] == 1
        size = ("aiinfra_datapath_cached_model_size_bytes", (("model", "tiny"), ("version", "v1")))
        assert ours[size] == len(content)
    finally:
        lab.sh(node, f"rm -rf {SOURCE_DIR} {CACHE_MOUNT}/models/tiny", check=False)
