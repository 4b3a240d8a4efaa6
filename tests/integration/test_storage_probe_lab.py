"""storage_probe and rdma_counters through ansible-playbook on the lab (lab "dps").

Lab "dps" (2 nodes, 256M NVMe loop devices) is brought up for this module and always brought
down. node1's loop device is read raw (both tools) and must be bit-for-bit unchanged afterwards;
then it is formatted xfs inside the node (the lab's loop device is meant to be wiped), a test file
is created on it with create_size, read by both tools, and, with the filesystem remounted
read-only, the device must again be unchanged by the probes. The model load probe reads a
directory of files on it. rdma_counters on the lab's veth NICs reports them unsupported.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from datapath_lab import Lab, LabConfig
from labtools import LabHandle, _lab_possible

pytestmark = pytest.mark.lab

LAB = "dps"
MIB = 1024 * 1024
MOUNT = "/mnt/probe"
PROBE_TASK = "Probe the storage"
COUNTERS_TASK = "Read the NIC counters"
PLAYBOOK = """---
- name: storage_probe and rdma_counters on one lab node
  hosts: "{{ target_host }}"
  gather_facts: false
  tasks:
    - name: Probe the storage
      aiinfra.datapath.storage_probe: {}
      args: "{{ probe_args }}"
      when: probe_args is defined
    - name: Read the NIC counters
      aiinfra.datapath.rdma_counters: {}
      args: "{{ counters_args }}"
      when: counters_args is defined
"""
FAST = {"seq_bytes": 64 * MIB, "seq_block_kib": 1024, "random_seconds": 1.0, "queue_depths": [1, 32]}
# xfsprogs refuses filesystems below 300 MB unless it runs under the fs test suite's variables
MKFS = "TEST_DIR=1 TEST_DEV=1 QA_CHECK_FS=1 mkfs.xfs -f -q"


@pytest.fixture(scope="module")
def dps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    lab = Lab(LAB)
    inventory_dir = str(tmp_path_factory.mktemp("dps-inventory"))
    try:
        state = lab.up(LabConfig(name=LAB, nodes=2, nvme_size="256M", inventory_dir=inventory_dir),
                       log=lambda *_: None)
        yield LabHandle(lab, state)
    finally:
        lab.down(log=lambda *_: None)


@pytest.fixture(scope="module")
def playbook(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("dps-playbook") / "probe.yml"
    path.write_text(PLAYBOOK)
    return str(path)


def nvme(lab: LabHandle, node: str = "node1") -> str:
    dev = lab.state["nodes"][node]["nvme"]
    assert dev.startswith("/dev/loop"), dev  # never anything but the lab's own loop device
    return dev


def checksum(dev: str) -> str:
    digest = hashlib.sha256()
    with open(dev, "rb") as handle:
        for block in iter(lambda: handle.read(4 * MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def probe(lab: LabHandle, playbook: str, args: dict[str, Any], check: bool = False,
          node: str = "node1") -> dict[str, Any]:
    result = lab.playbook(playbook, extra_vars={"target_host": node, "probe_args": args}, check=check)
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result.task_results(PROBE_TASK)[node]


def sane(entry: dict[str, Any], tool: str, size: int) -> None:
    assert entry["ok"] is True, entry
    assert entry["error"] is None and entry["tool"] == tool and entry["size"] == size
    assert entry["seq_read_mib_s"] > 1 and entry["seq_bytes_read"] == 64 * MIB
    assert sorted(entry["random"]) == ["1", "32"]
    print("%s %s %s: seq %.1f MiB/s, random %s"
          % (entry["name"], entry["kind"], tool, entry["seq_read_mib_s"], entry["random"]))
    for depth in ("1", "32"):
        figures = entry["random"][depth]
        assert figures["iops"] > 50, figures
        assert 0 < figures["p50_us"] <= figures["p99_us"] < 1_000_000, figures


def test_raw_device_read_by_both_tools_writes_nothing(dps: LabHandle, playbook: str) -> None:
    dev = nvme(dps)
    with open(dev, "r+b") as handle:  # real data, not holes of the sparse backing file
        for _block in range(256):
            handle.write(os.urandom(MIB))
        handle.flush()
        os.fsync(handle.fileno())
    before = checksum(dev)
    for tool in ("builtin", "fio"):
        res = probe(dps, playbook, dict(FAST, tool=tool, targets=[{"name": "raw", "path": dev}]))
        assert res["changed"] is False and res["actions"] == []
        [entry] = res["targets"]
        assert entry["kind"] == "device" and entry["direct"] is True
        sane(entry, tool, 256 * MIB)
        assert checksum(dev) == before, "the %s probe changed the device" % tool


def test_check_mode_on_the_device_reads_nothing(dps: LabHandle, playbook: str) -> None:
    dev = nvme(dps)
    res = probe(dps, playbook, dict(FAST, targets=[{"name": "raw", "path": dev}]), check=True)
    [entry] = res["targets"]
    assert res["changed"] is False and entry["ok"] is True and entry["seq_read_mib_s"] is None
    assert entry["size"] == 256 * MIB and entry["would_read"]["seq_bytes"] == 64 * MIB


def test_bad_parameters_fail_before_reading(dps: LabHandle, playbook: str) -> None:
    dev = nvme(dps)
    result = dps.playbook(playbook, extra_vars={"target_host": "node1", "probe_args": {
        "targets": [{"name": "raw", "path": dev, "create_size": 64 * MIB}], "queue_depths": [0]}})
    assert result.rc != 0
    msg = result.task_results(PROBE_TASK)["node1"]["msg"]
    assert "is a device path, which the probe never writes" in msg and "queue depth 0 is out of 1-256" in msg


def test_file_on_xfs_and_model_load(dps: LabHandle, playbook: str) -> None:
    dev = nvme(dps)
    try:
        dps.sh("node1", f"wipefs -aq {dev} && {MKFS} {dev} && mkdir -p {MOUNT} && mount -o noatime {dev} {MOUNT}")
        target = {"name": "cache", "path": f"{MOUNT}/probe.dat", "create_size": 64 * MIB}
        planned = probe(dps, playbook, dict(FAST, targets=[target]), check=True)
        assert planned["changed"] is True and [a["kind"] for a in planned["actions"]] == ["file"]
        assert dps.sh("node1", f"ls -A {MOUNT}").stdout.split() == []  # check mode created nothing

        created = probe(dps, playbook, dict(FAST, targets=[target]))
        assert created["changed"] is True
        assert created["actions"][0]["target"] == f"{MOUNT}/probe.dat" and created["actions"][0]["kind"] == "file"
        sane(created["targets"][0], "builtin", 64 * MIB)
        assert dps.sh("node1", f"stat -c %s {MOUNT}/probe.dat").stdout.strip() == str(64 * MIB)
        assert dps.sh("node1", f"ls -A {MOUNT}").stdout.split() == ["probe.dat"]

        dps.sh("node1", f"mkdir -p {MOUNT}/model && for i in 1 2 3; do "
                        f"dd if=/dev/urandom of={MOUNT}/model/shard-$i bs=1M count=8 status=none; done && "
                        f"echo '{{}}' > {MOUNT}/model/config.json && sync")
        dps.sh("node1", f"mount -o remount,ro {MOUNT}")
        before = checksum(dev)
        for tool in ("fio", "builtin"):
            again = probe(dps, playbook, dict(FAST, tool=tool, targets=[target], model={"path": f"{MOUNT}/model"}))
            assert again["changed"] is False and again["actions"] == []
            sane(again["targets"][0], tool, 64 * MIB)
            model = again["model_load"]
            assert (model["ok"], model["files"], model["bytes"]) == (True, 4, 24 * MIB + 3), model
            assert model["seconds"] > 0 and model["mib_s"] > 0
            print("model load: %s" % model)
        assert checksum(dev) == before, "a read-only probe changed the device"
    finally:
        dps.sh("node1", f"umount {MOUNT} 2>/dev/null; rmdir {MOUNT} 2>/dev/null; wipefs -aq {dev}; true", check=False)


def test_rdma_counters_on_veth_nics_are_unsupported_not_errors(dps: LabHandle, playbook: str,
                                                               tmp_path: Path) -> None:
    interfaces = sorted(dps.sh("node1", "ls /sys/class/net").stdout.split())
    nics = [name for name in interfaces if name != "lo"]
    result = dps.playbook(playbook, extra_vars={"target_host": "node1", "counters_args": {"interfaces": nics}})
    assert result.rc == 0, result.stdout[-3000:]
    res = result.task_results(COUNTERS_TASK)["node1"]
    assert res["changed"] is False and sorted(res["counters"]) == nics
    for name in nics:
        entry = res["counters"][name]
        assert entry["supported"] is False and entry["ethtool"] == {}
        assert entry["reason"] == f"no /sys/class/net/{name}/device: virtual interface, no NIC counters"
    default = dps.playbook(playbook, extra_vars={"target_host": "node1", "counters_args": {}})
    assert default.rc == 0
    assert default.task_results(COUNTERS_TASK)["node1"]["counters"] == {}
