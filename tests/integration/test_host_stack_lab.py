"""nic_affinity and ebpf_readiness on the lab's real kernel: site.yml's batch (tags nic_affinity, ebpf_readiness),
then a reboot (the link-up unit started by the boot, bpffs mounted again from fstab), then a link flap.

One node ("dp43", `up --queues 4`): its NICs are veths with 4 transmit and 4 receive queues, which take
``ethtool -L rx N tx N`` and have rps_cpus/xps_cpus per queue. Veths have no IRQs: the lab proves the queue part
of the plan (channels, RPS, XPS) and the unit that re-applies it; the IRQ part is proven on recorded trees
(tests/unit/plugins/module_utils/test_nic_affinity.py). The kernel is the host's: its own configuration (no
CONFIG_NETKIT on this machine's kernel) is what ebpf_readiness reads.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity_host import (  # noqa: E402
    UNIT_FILE,
    UNIT_LINK,
    UNIT_NAME,
)
from datapath_lab import Lab, LabConfig  # noqa: E402
from datapath_lab.spec import lab_spec  # noqa: E402
from labtools import REPO, LabHandle, _lab_possible  # noqa: E402
from test_reboot_lab import lab_cli_named  # noqa: E402

pytestmark = pytest.mark.lab

LAB_NAME = "dp43"
SITE = os.path.join(REPO, "playbooks", "site.yml")
RDMA_IF = "ens1f0np0"
TAGS = "nic_affinity,ebpf_readiness"
STATE = "/etc/aiinfra-datapath/nic_affinity.json"
REAPPLY_BOUND = 2.0  # seconds: the issue's bound for the saved plan to be back after a link comes up


def spec(state: dict) -> dict:
    data = lab_spec(state)
    profile = data["datapath"]["profiles"][0]
    profile["nic_affinity"] = {"fabrics": ["rdma"], "channels": {"rx": 2, "tx": 2}, "rps": True, "xps": True}
    profile["ebpf"] = {"features": ["native-routing", "bpf-host-routing", "netkit"], "fabric": "rdma",
                       "persist_bpffs": True}
    return data


@pytest.fixture(scope="module")
def dp43(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LabHandle, dict]]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    lab = Lab(LAB_NAME)
    inventory_dir = str(tmp_path_factory.mktemp("dp43-inventory"))
    try:
        state = lab.up(LabConfig(name=LAB_NAME, nodes=1, fabrics=[("mgmt", 1500), ("rdma", 9000)], queues=4,
                                 inventory_dir=inventory_dir), log=lambda *_: None)
        yield LabHandle(lab, state), spec(state)
    finally:
        lab.down(log=lambda *_: None)


def converge(lab: LabHandle, data: dict) -> dict:
    result = lab.playbook(SITE, "--tags", TAGS, extra_vars=data)
    assert result.rc == 0, result.failures()
    (row,) = result.task_results("Facts, plan and every capability module, once each, in dependency order").values()
    return row["results"]


def channels(lab: LabHandle) -> tuple[int, int]:
    text = lab.sh("node1", f"ethtool -l {RDMA_IF}").stdout
    current = text.split("Current hardware settings:", 1)[1]
    values = dict(line.split(":", 1) for line in current.strip().splitlines() if ":" in line)
    return int(values["RX"]), int(values["TX"])


def queue_masks(lab: LabHandle) -> dict[str, int]:
    """Each queue's rps_cpus (rx) or xps_cpus (tx) mask, as a number (the kernel prints it unpadded here)."""
    script = (f"cd /sys/class/net/{RDMA_IF}/queues && for q in rx-* tx-*; do "
              "f=$q/rps_cpus; [ -e $f ] || f=$q/xps_cpus; printf '%s %s\\n' $q $(cat $f); done")
    return {q: int(mask.replace(",", ""), 16)
            for q, mask in (line.split() for line in lab.sh("node1", script).stdout.splitlines())}


def the_plan(lab: LabHandle) -> dict[str, int]:
    """What the saved plan gives the veth, from the node's CPUs: 2+2 queues, RPS over all, XPS one each."""
    cpus = [int(c) for c in lab.sh("node1", "seq 0 $(( $(nproc --all) - 1 ))").stdout.split()]
    every = sum(1 << c for c in cpus)
    return {"rx-0": every, "rx-1": every, "tx-0": 1 << cpus[0], "tx-1": 1 << cpus[1 % len(cpus)]}


def test_site_places_the_queues_installs_the_unit_and_checks_the_ebpf_datapath(dp43) -> None:
    lab, data = dp43
    results = converge(lab, data)
    affinity, ebpf = results["nic_affinity"], results["ebpf_readiness"]
    assert affinity["changed"] is True and not affinity.get("failed"), affinity
    assert channels(lab) == (2, 2)
    assert queue_masks(lab) == the_plan(lab)
    installed = lab.sh("node1", f"test -f {UNIT_FILE} && test -L {UNIT_LINK} && test -f {STATE}", check=False)
    assert installed.returncode == 0
    assert any(UNIT_NAME in note and "next boot" in note for note in affinity["notes"])  # no systemd in a lab node
    saved = json.loads(lab.sh("node1", f"cat {STATE}").stdout)
    assert saved["interfaces"][RDMA_IF]["channels"] == {"rx": 2, "tx": 2}
    # ebpf: the host kernel's own configuration has no CONFIG_NETKIT: netkit is an error finding
    netkit = [f for f in ebpf["findings"] if f["feature"] == "netkit" and f["severity"] == "error"]
    assert any(f["check"] == "kernel_config" and "CONFIG_NETKIT=y" in f["message"] for f in netkit), ebpf["findings"]
    assert ebpf["features"]["netkit"] is False and ebpf["ready"] is False
    assert ebpf["bpffs"] == {"mounted": True, "persisted": True}  # persist_bpffs: the fstab line and a mount now
    assert lab.sh("node1", "findmnt -n -o FSTYPE /sys/fs/bpf").stdout.strip() == "bpf"
    again = converge(lab, data)
    assert again["nic_affinity"]["changed"] is False, again["nic_affinity"]["actions"]
    assert again["ebpf_readiness"]["changed"] is False


def test_after_a_reboot_bpffs_is_mounted_and_the_unit_runs(dp43) -> None:
    lab, _data = dp43
    (report,) = json.loads(lab_cli_named(LAB_NAME, "reboot", "node1", "--json"))
    assert report["problems"] == [], report
    units = {u["unit"]: u for u in report["units"]}
    assert units[UNIT_NAME]["result"] == "started", units
    assert lab.sh("node1", "findmnt -n -o FSTYPE /sys/fs/bpf").stdout.strip() == "bpf"  # mount -a from fstab
    # the recreated NIC has 4+4 queues again; udev's .link (the boot) and the unit (at its start) set 2+2
    deadline = time.monotonic() + 10
    while channels(lab) != (2, 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert channels(lab) == (2, 2)
    assert queue_masks(lab) == the_plan(lab)


def test_a_link_flap_gets_the_saved_queue_plan_back_within_two_seconds(dp43) -> None:
    lab, _data = dp43
    wanted = the_plan(lab)
    # what a driver reset leaves: the default queues, RPS and XPS off; then the link goes down and up
    lab.sh("node1", f"ethtool -L {RDMA_IF} rx 1 tx 1 && echo 0 > /sys/class/net/{RDMA_IF}/queues/rx-0/rps_cpus")
    assert channels(lab) == (1, 1) and queue_masks(lab)["rx-0"] != wanted["rx-0"]
    lab.sh("node1", f"ip link set {RDMA_IF} down && ip link set {RDMA_IF} up")
    up = time.monotonic()
    while time.monotonic() - up < REAPPLY_BOUND:
        if channels(lab) == (2, 2) and queue_masks(lab) == wanted:
            print(f"saved queue plan back {time.monotonic() - up:.2f} s after the link came up (polled)")
            break
        time.sleep(0.05)
    assert channels(lab) == (2, 2) and queue_masks(lab) == wanted, \
        lab.sh("node1", f"cat /run/datapath-lab/units/{UNIT_NAME}.log", check=False).stdout


def test_a_device_mtu_below_the_fabrics_is_named(dp43) -> None:
    lab, data = dp43
    lab.sh("node1", f"ip link set {RDMA_IF} mtu 1500")
    try:
        result = lab.playbook(SITE, "--tags", "ebpf_readiness", extra_vars=data)
        assert result.rc == 0, result.failures()
        (row,) = result.task_results("Facts, plan and every capability module, once each, "
                                     "in dependency order").values()
        (mtu,) = [f for f in row["results"]["ebpf_readiness"]["findings"] if f["check"] == "mtu"]
        assert mtu["severity"] == "error"
        assert mtu["message"].startswith(f"device {RDMA_IF} has MTU 1500, below fabric rdma's MTU 9000")
    finally:
        lab.sh("node1", f"ip link set {RDMA_IF} mtu 9000")
