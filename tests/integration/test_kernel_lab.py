"""sysctl_profile, hugepages and kernel_cmdline through real ansible-playbook on lab nodes.

The kernel is real: net.* keys live in each node's network namespace, vm.* keys and the
HugePage pool are the host's (restored at the end of each test and again by `lab down`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from labtools import REPO, LabHandle

pytestmark = pytest.mark.lab

PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "kernel_roles.yml")
SYSCTL_FILE = "/etc/sysctl.d/90-aiinfra-datapath.conf"
HP_2M = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
SYSCTL_TASK = "Apply and persist the sysctl profile in one call"
HP_TASK = "Size the HugePage pools, THP and hugetlbfs mounts in one call"
CMDLINE_TASK = "Persist the kernel command line arguments (never reboots)"


def read(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


def write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def plan(sysctl: dict[str, Any] | None = None, pages: list[dict[str, Any]] | None = None,
         thp: dict[str, Any] | None = None, args: list[str] | None = None) -> dict[str, Any]:
    return {
        "sysctl_profile": {"file": SYSCTL_FILE, "keys": sysctl or {}},
        "hugepages": {"pages": pages or [], "thp": thp, "mounts": []},
        "kernel_cmdline": {"args": args or []},
    }


@pytest.fixture
def global_state() -> Iterator[None]:
    """Restore the global keys these tests touch, whatever happens."""
    saved = {p: read(p) for p in ("/proc/sys/vm/swappiness", HP_2M)}
    try:
        yield
    finally:
        for path, value in saved.items():
            if read(path) != value:
                write(path, value)


@pytest.fixture
def clean_nodes(lab: LabHandle) -> Iterator[None]:
    yield
    for node in lab.nodes:
        lab.sh(node, f"rm -f {SYSCTL_FILE} /etc/sysctl.d/90-aiinfra-datapath-hugepages.conf", check=False)


def test_sysctl_per_namespace_and_global_keys(lab: LabHandle, global_state: None, clean_nodes: None) -> None:
    swappiness = read("/proc/sys/vm/swappiness")
    want_swap = "11" if swappiness != "11" else "12"
    plans = {
        "node1": plan({"net.ipv4.tcp_rmem": {"value": "4096 131072 16777216", "mode": "exact"},
                       "net.core.somaxconn": {"value": "4096", "mode": "minimum"},
                       "vm.swappiness": {"value": want_swap, "mode": "exact"}}),
        "node2": plan({"net.ipv4.tcp_rmem": {"value": "4096 262144 33554432", "mode": "exact"},
                       "net.core.somaxconn": {"value": "8192", "mode": "minimum"}}),
    }
    before = {n: lab.sh(n, "cat /proc/sys/net/ipv4/tcp_rmem /proc/sys/net/core/somaxconn").stdout
              for n in ("node1", "node2")}

    # Check mode: predicts the change, touches nothing (kernel and files read before/after).
    result = lab.playbook(PLAYBOOK, check=True, diff=True, limit="node1,node2",
                          extra_vars={"test_plans": plans})
    assert result.rc == 0, result.stdout[-3000:]
    assert result.task_results(SYSCTL_TASK)["node1"]["changed"] is True
    for node in ("node1", "node2"):
        assert lab.sh(node, "cat /proc/sys/net/ipv4/tcp_rmem /proc/sys/net/core/somaxconn").stdout == before[node]
        assert lab.sh(node, f"test -e {SYSCTL_FILE}", check=False).returncode != 0
    assert read("/proc/sys/vm/swappiness") == swappiness

    # Real run: each node gets its own net.* values; the global key lands on the host kernel.
    result = lab.playbook(PLAYBOOK, limit="node1,node2", extra_vars={"test_plans": plans})
    assert result.rc == 0, result.stdout[-3000:]
    assert lab.sh("node1", "cat /proc/sys/net/ipv4/tcp_rmem").stdout.split() == ["4096", "131072", "16777216"]
    assert lab.sh("node2", "cat /proc/sys/net/ipv4/tcp_rmem").stdout.split() == ["4096", "262144", "33554432"]
    assert int(lab.sh("node1", "cat /proc/sys/net/core/somaxconn").stdout) >= 4096
    assert int(lab.sh("node2", "cat /proc/sys/net/core/somaxconn").stdout) >= 8192
    assert read("/proc/sys/vm/swappiness") == want_swap
    keys = result.task_results(SYSCTL_TASK)["node1"]["keys"]
    assert keys["net.ipv4.tcp_rmem"]["scope"] == "netns"
    assert keys["vm.swappiness"]["scope"] == "global"

    # The managed file is exactly the keys, one per line.
    content = lab.sh("node1", f"cat {SYSCTL_FILE}").stdout
    lines = [line for line in content.splitlines() if line and not line.startswith("#")]
    somaxconn1 = lab.sh("node1", "cat /proc/sys/net/core/somaxconn").stdout.strip()
    assert sorted(lines) == sorted([
        "net.core.somaxconn = " + somaxconn1,
        "net.ipv4.tcp_rmem = 4096 131072 16777216",
        f"vm.swappiness = {want_swap}",
    ])
    assert lab.sh("node1", f"stat -c %a {SYSCTL_FILE}").stdout.strip() == "644"

    # Second run: nothing to do anywhere.
    result = lab.playbook(PLAYBOOK, limit="node1,node2", extra_vars={"test_plans": plans})
    assert result.rc == 0
    assert result.changed_hosts() == {"node1": 0, "node2": 0}


def test_sysctl_read_only_key_in_a_namespace_fails_before_any_change(lab: LabHandle, clean_nodes: None) -> None:
    # net.core.rmem_max is global and read-only inside a child network namespace on this
    # kernel: the whole call must fail naming it, before tcp_rmem is touched.
    before = lab.sh("node3", "cat /proc/sys/net/ipv4/tcp_rmem").stdout
    plans = {"node3": plan({"net.ipv4.tcp_rmem": "4096 65536 8388608",
                            "net.core.rmem_max": {"value": "67108864", "mode": "minimum"}})}
    result = lab.playbook(PLAYBOOK, limit="node3", extra_vars={"test_plans": plans})
    assert result.rc != 0
    msg = result.task_results(SYSCTL_TASK)["node3"]["msg"]
    assert "net.core.rmem_max" in msg
    assert lab.sh("node3", "cat /proc/sys/net/ipv4/tcp_rmem").stdout == before
    assert lab.sh("node3", f"test -e {SYSCTL_FILE}", check=False).returncode != 0


def test_hugepages_up_and_back(lab: LabHandle, global_state: None, clean_nodes: None) -> None:
    start = int(read(HP_2M))
    target = start + 64
    pages = [{"size": "2M", "count": target, "per_node": None, "persist": "sysctl"}]
    result = lab.playbook(PLAYBOOK, check=True, limit="node1",
                          extra_vars={"test_plans": {"node1": plan(pages=pages)}})
    assert result.rc == 0, result.stdout[-3000:]
    assert result.task_results(HP_TASK)["node1"]["changed"] is True
    assert int(read(HP_2M)) == start

    result = lab.playbook(PLAYBOOK, limit="node1", extra_vars={"test_plans": {"node1": plan(pages=pages)}})
    assert result.rc == 0, result.stdout[-3000:]
    assert int(read(HP_2M)) == target
    assert lab.sh("node1", "grep HugePages_Total /proc/meminfo").stdout.split()[1] == str(target)
    persisted = lab.sh("node1", "cat /etc/sysctl.d/90-aiinfra-datapath-hugepages.conf").stdout
    assert f"vm.nr_hugepages = {target}" in persisted

    result = lab.playbook(PLAYBOOK, limit="node1", extra_vars={"test_plans": {"node1": plan(pages=pages)}})
    assert result.changed_hosts() == {"node1": 0}

    back = [{"size": "2M", "count": start, "per_node": None, "persist": "none"}]
    result = lab.playbook(PLAYBOOK, limit="node1", extra_vars={"test_plans": {"node1": plan(pages=back)}})
    assert result.rc == 0, result.stdout[-3000:]
    assert int(read(HP_2M)) == start


def test_hugepages_request_beyond_memory_fails_with_figures(lab: LabHandle, global_state: None) -> None:
    start = read(HP_2M)
    mem_kb = int(next(line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal:")))
    too_many = mem_kb // 2048 * 2
    pages = [{"size": "2M", "count": too_many, "per_node": None, "persist": "none"}]
    result = lab.playbook(PLAYBOOK, limit="node2", extra_vars={"test_plans": {"node2": plan(pages=pages)}})
    assert result.rc != 0
    msg = result.task_results(HP_TASK)["node2"]["msg"]
    assert str(too_many) in msg
    assert read(HP_2M) == start


def test_kernel_cmdline_without_bootloader_reports_and_writes_nothing(lab: LabHandle) -> None:
    plans = {"node4": plan(args=["iommu=pt", "hugepagesz=1G", "hugepages=4"])}
    result = lab.playbook(PLAYBOOK, limit="node4", extra_vars={"test_plans": plans})
    assert result.rc == 0, result.stdout[-3000:]
    res = result.task_results(CMDLINE_TASK)["node4"]
    assert res["bootloader"] == "none"
    assert res["changed"] is False
    assert "iommu=pt" in res["missing"]
    assert lab.sh("node4", "ls /etc/default/grub.d/90-aiinfra-datapath.cfg", check=False).returncode != 0
