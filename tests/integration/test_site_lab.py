"""playbooks/site.yml on the lab: one datapath_apply task per host, tags, check mode, role variables.

The datapath role applies every capability through aiinfra.datapath.datapath_apply (facts,
plan and one module call per capability, run in one Python process on the node). These tests
run the real playbook against the session lab and read the nodes back: --check changes
nothing, tags select capabilities inside the task, a capability role's variable given on the
command line reaches its module, a second run changes nothing, and the summary file is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import CACHE_MOUNT, NODE_FILES, REPO, LabHandle, PlayResult, spec_applied_then_restored

pytestmark = pytest.mark.lab

SITE = os.path.join(REPO, "playbooks", "site.yml")
APPLY_TASK = "Facts, plan and every capability module, once each, in dependency order"
SYSCTL_FILE, _HUGEPAGES_FILE, FEATURES = NODE_FILES
ALL = ["sysctl_profile", "hugepages", "kernel_cmdline", "tuned_profile", "link_mtu", "rail_routing", "roce_qos",
       "nic_firmware", "nic_config", "nic_affinity", "ebpf_readiness", "nvme_layout", "nfd_labels"]


@pytest.fixture(scope="module")
def site_lab(lab: LabHandle) -> Iterator[LabHandle]:
    with spec_applied_then_restored(lab):
        yield lab


def failures(result: PlayResult) -> str:
    return result.failures()


def applied(result: PlayResult) -> dict[str, dict]:
    rows = result.task_results(APPLY_TASK)
    assert rows, result.stdout[-3000:]
    return rows


def node_state(lab: LabHandle, node: str) -> str:
    return lab.sh(node, f"cat {SYSCTL_FILE} {FEATURES} 2>&1; findmnt -no SOURCE {CACHE_MOUNT}; "
                        "sysctl -n net.ipv4.tcp_rmem; ip -o link show ens1f0np0 | grep -o 'mtu [0-9]*'",
                  check=False).stdout


def test_check_mode_reports_changes_and_changes_nothing(site_lab: LabHandle) -> None:
    before = {n: node_state(site_lab, n) for n in site_lab.nodes}
    result = site_lab.playbook(SITE, check=True, diff=True)
    assert result.rc == 0, failures(result)
    rows = applied(result)
    for node in site_lab.nodes:
        row = rows[node]
        assert row["changed"], row
        assert row["capabilities"] == ALL
        assert row["results"]["sysctl_profile"]["changed"]
        assert row["diff"], "the capability modules' diffs are returned"
        assert row["ansible_facts"]["datapath_plan"]["host"] == node
        assert row["ansible_facts"]["datapath_facts"]["memory_bytes"] > 0
    assert {n: node_state(site_lab, n) for n in site_lab.nodes} == before


def test_tags_select_capabilities_inside_the_one_task(site_lab: LabHandle) -> None:
    node = site_lab.nodes[0]
    result = site_lab.playbook(SITE, "--tags", "sysctl_profile,k8s", limit=node,
                               extra_vars={"nfd_labels_prefix": "example.org"})
    assert result.rc == 0, failures(result)
    row = applied(result)[node]
    assert row["capabilities"] == ["sysctl_profile", "nfd_labels"]
    assert row["results"]["nvme_layout"] == {} and row["results"]["link_mtu"] == {}
    assert set(row["seconds"]) == {"sysctl_profile", "nfd_labels"}
    state = node_state(site_lab, node)
    assert "net.ipv4.tcp_rmem" in state                 # the sysctl drop-in is written
    assert "example.org/" in state                      # a role variable reached nfd_labels
    assert "aiinfra.io/fabric-" not in state and "example.org/nvme-cache=false" in state
    assert not site_lab.sh(node, f"findmnt -n {CACHE_MOUNT}", check=False).stdout  # storage untouched


def test_full_run_converges_then_changes_nothing(site_lab: LabHandle, tmp_path: Path) -> None:
    summary = tmp_path / "out" / "summary.json"
    cache = {"AIINFRA_DATAPATH_CACHE": str(tmp_path / "cache")}  # the controller's kept payload and plans
    result = site_lab.playbook(SITE, "--skip-tags", "firmware", extra_vars={"datapath_summary_file": str(summary)},
                               env=cache)
    assert result.rc == 0, failures(result)
    rows = applied(result)
    for node in site_lab.nodes:
        assert rows[node]["capabilities"] == [c for c in ALL if c not in ("nic_firmware", "nic_config")]
        assert site_lab.sh(node, f"findmnt -n {CACHE_MOUNT}", check=False).stdout, "cache mounted"
    written = json.loads(summary.read_text())
    assert sorted(written) == sorted(site_lab.nodes)
    assert "nvme_layout" in written[site_lab.nodes[0]]["changed"]
    assert any(line.startswith("roce_qos ens1f0np0") for line in written[site_lab.nodes[0]]["unsupported"])

    kept = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache" / "plans").iterdir() if p.suffix == ".json"}
    assert len(kept) == len(site_lab.nodes)  # one plan per host

    again = site_lab.playbook(SITE, env=cache)
    assert again.rc == 0, failures(again)
    # the second run used the kept plans (a miss would have rewritten its host's file)
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    used = {json.loads(p.read_text())["host"]: json.loads(p.read_text())["plan"] for p in kept}
    assert used == {node: row["ansible_facts"]["datapath_plan"] for node, row in applied(again).items()}

    # a kept plan whose node facts are no longer the node's (more memory, say): the node refuses to
    # run it (datapath_run's expect_facts), the plan is made again for the node's facts and applied
    first = next(iter(kept))
    entry = json.loads(first.read_text())
    real = dict(entry["facts"])
    first.write_text(json.dumps(dict(entry, facts=dict(real, memory_bytes=real["memory_bytes"] * 2))))
    fixed = site_lab.playbook(SITE, limit=entry["host"], env=cache)
    assert fixed.rc == 0, failures(fixed)
    row = applied(fixed)[entry["host"]]
    assert row["ansible_facts"]["datapath_facts"] == real and not row["changed"]
    assert row["ansible_facts"]["datapath_plan"] == used[entry["host"]]
    assert json.loads(first.read_text())["facts"] == real
    assert set(again.changed_hosts().values()) == {0}, again.changed_hosts()
    for node, row in applied(again).items():
        assert row["capabilities"] == ALL
        assert not any(r.get("changed") for r in row["results"].values()), (node, row["results"])

    # --check --diff on the converged node: no capability predicts a change, and no diff reads
    # like one (the unchanged NVMe cache once showed "before: block devices ... after: (empty)")
    # and with no cache the plan is computed again: the same plan as the one kept
    preview = site_lab.playbook(SITE, check=True, diff=True, env={"AIINFRA_DATAPATH_CACHE": "off"})
    assert preview.rc == 0, failures(preview)
    for node, row in applied(preview).items():
        assert row["ansible_facts"]["datapath_plan"] == applied(again)[node]["ansible_facts"]["datapath_plan"]
        assert not row.get("diff"), (node, row.get("diff"))
        assert all(not r.get("actions") for r in row["results"].values() if isinstance(r, dict)), node


def test_a_failing_capability_stops_the_host_and_names_it(site_lab: LabHandle) -> None:
    node = site_lab.nodes[-1]
    result = site_lab.playbook(SITE, "--tags", "kernel", limit=node,
                               extra_vars={"sysctl_profile_keys": {"net.core.no_such_key": {"value": "1"}}})
    assert result.rc != 0
    row = applied(result)[node]
    assert row["failed"]
    assert row["msg"].startswith("sysctl_profile: "), row["msg"]
    assert "no_such_key" in row["msg"]
    assert row["results"]["hugepages"] == {}, "nothing runs after the failed capability"


def test_an_invalid_spec_is_reported_once_in_full_and_nothing_changes(site_lab: LabHandle) -> None:
    before = {n: node_state(site_lab, n) for n in site_lab.nodes}
    broken = {"version": 1, "fabrics": [{"name": "rail0", "purpose": "bogus", "mtu": 90000}]}
    result = site_lab.playbook(SITE, extra_vars={"datapath": broken})
    assert result.rc != 0
    rows = applied(result)
    first, *others = site_lab.nodes
    assert "error(s); nothing was changed" in rows[first]["msg"]
    assert "datapath.fabrics[0].purpose" in rows[first]["msg"]
    assert "datapath.fabrics[0].mtu" in rows[first]["msg"]
    for node in others:
        assert rows[node]["msg"].endswith(f"listed under {first}; nothing was changed"), rows[node]["msg"]
    assert {n: node_state(site_lab, n) for n in site_lab.nodes} == before
