"""bench/conventional_site.yml, the baseline bench_site.py times site.yml against, on the lab.

`make bench` is not part of `make test`; this keeps its baseline runnable: it reads the plan
through the same filter as site.yml, so a renamed plan part breaks it (as the capability
renames once did, unnoticed until `make bench` failed). On one lab node it must converge and do
the work site.yml does: the plan's sysctl keys in its file, the cache mounted with the plan's
filesystem, the plan's labels written.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from labtools import CACHE_MOUNT, REPO, LabHandle, spec_applied_then_restored

pytestmark = pytest.mark.lab

CONVENTIONAL = os.path.join(REPO, "bench", "conventional_site.yml")
FILES = ("/etc/sysctl.d/90-conventional.conf", "/etc/sysctl.d/91-conventional-hugepages.conf",
         "/etc/kubernetes/node-feature-discovery/features.d/conventional")
PLAN_TASK = "Compute the plan (same values as site.yml)"


@pytest.fixture(scope="module")
def conventional_lab(lab: LabHandle) -> Iterator[LabHandle]:
    with spec_applied_then_restored(lab, extra_files=FILES):
        yield lab


def test_the_conventional_baseline_converges_the_lab(conventional_lab: LabHandle) -> None:
    lab = conventional_lab
    node = lab.nodes[0]
    result = lab.playbook(CONVENTIONAL, limit=node)
    assert result.rc == 0, result.failures()
    plan = result.task_results(PLAN_TASK)[node]["ansible_facts"]["plan"]
    keys = {k: v for k, v in plan["sysctl_profile"]["keys"].items() if not v.get("ignore_missing")}
    assert keys, plan["sysctl_profile"]
    written = lab.sh(node, f"cat {FILES[0]}").stdout
    for key, entry in keys.items():
        assert f"{key}={entry['value']}" in written.replace(" = ", "="), (key, written)
    storage = plan["nvme_layout"]
    mounted = lab.sh(node, f"findmnt -no FSTYPE,LABEL {CACHE_MOUNT}", check=False).stdout.split()
    assert mounted == [storage["filesystem"]["type"], storage["filesystem"]["label"]], mounted
    labels = lab.sh(node, f"cat {FILES[2]}").stdout.splitlines()
    assert labels == [f"{k}={v}" for k, v in plan["nfd_labels"]["labels"].items()], labels
