"""nvme_layout and nfd_labels through real ansible-playbook on lab nodes (real loop devices).

Each lab node has one loop device (``datapath_lab_nvme``, visible at the same /dev/loopN
path inside the node) and its own mount namespace and /etc (overlay): the cache is mounted
*inside* the node and its fstab entry lands in the node's /etc/fstab. Every test wipes the
loop devices it used, unmounts and restores the node's fstab in ``finally``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from labtools import REPO, VENV_BIN, LabHandle, blank_device_script

pytestmark = pytest.mark.lab

PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "storage_roles.yml")
LAYOUT_TASK = "Lay out the local NVMe cache in one call"
NFD_TASK = "Write the node-feature-discovery labels in one call"
MOUNT = "/mnt/model-cache"
FEATURES = "/etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath"
HEADER = "# Written by aiinfra.datapath (nfd_labels). Do not edit: changes are overwritten.\n"


def plan(devices: list[str], wipe: list[str] | None = None, raid: dict[str, Any] | None = None,
         labels: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "nvme_layout": {
            "devices": devices, "select": None, "raid": raid,
            "filesystem": {"type": "xfs", "label": "model-cache"},
            "mount": {"path": MOUNT, "options": ["noatime", "nodiratime"]},
            "directories": [{"path": "models", "owner": "root", "group": "root", "mode": "0755"},
                            {"path": "checkpoints", "owner": "root", "group": "root", "mode": "0750"}],
            "reserve_bytes": 0,
            "wipe_serials": wipe or [],
        },
        "link_mtu": {"interfaces": [
            {"name": "eno1", "match": {"name": "eno1"}, "fabric": "mgmt", "mtu": 1500},
            {"name": "ens1f0np0", "match": {"name": "ens1f0np0"}, "fabric": "rdma", "mtu": 9000}]},
        "roce_qos": {"interfaces": [{"interface": "ens1f0np0", "match": {"name": "ens1f0np0"}, "fabric": "rdma"}]},
        "nfd_labels": {"labels": labels if labels is not None else {"aiinfra.io/pool": "lab"},
                       "local_volume_class": "local-nvme"},
    }


def nvme(lab: LabHandle, node: str) -> str:
    dev = lab.state["nodes"][node]["nvme"]
    assert dev.startswith("/dev/loop"), dev  # never anything but the lab's loop device
    return dev


def on_disk(lab: LabHandle, node: str, dev: str) -> str:
    """Partition table and every signature of the device, as the tools print them."""
    out = lab.sh(node, f"for c in 'sgdisk -p {dev}' 'wipefs -n {dev}' 'blkid -p {dev}' 'wipefs -n {dev}p1' "
                       f"'blkid -p {dev}p1'; do echo \"== $c\"; $c 2>&1; echo \"rc=$?\"; done",
                 check=False).stdout
    if "Creating new GPT entries" in out:  # no GPT: sgdisk invents a new disk GUID on every call
        out = "\n".join(line for line in out.splitlines() if not line.startswith("Disk identifier (GUID)"))
    return out


def findmnt(lab: LabHandle, node: str) -> str:
    return lab.sh(node, f"findmnt -n -o SOURCE,FSTYPE,OPTIONS {MOUNT}", check=False).stdout.strip()


def wipe_script(devs: list[str]) -> str:
    parts = [f"umount {MOUNT} 2>/dev/null; rm -f {FEATURES}; rmdir {MOUNT}/models {MOUNT}/checkpoints "
             f"{MOUNT} 2>/dev/null"]
    parts.extend(blank_device_script(dev) for dev in devs)
    return "; ".join(parts)


@pytest.fixture
def clean(lab: LabHandle) -> Iterator[None]:
    """Restore every node: unmount, wipe its loop device, restore its fstab."""
    fstabs = {n: lab.sh(n, "cat /etc/fstab", check=False).stdout for n in lab.nodes}
    for node in lab.nodes:
        lab.sh(node, wipe_script([nvme(lab, node)]))
    try:
        yield
    finally:
        for node in lab.nodes:
            lab.sh(node, wipe_script([nvme(lab, node)]), check=False)
            lab.lab.run_in(node, ["/bin/sh", "-c", "cat > /etc/fstab"], check=False, input=fstabs[node])


def features_expected(lab: LabHandle, node: str, labels: dict[str, str]) -> str:
    pools = {}
    for entry in sorted(os.listdir("/sys/kernel/mm/hugepages")):  # the pools are global: the host's
        kib = int(entry.split("-")[1][:-2])
        name = f"{kib // 1048576}Gi" if kib % 1048576 == 0 else f"{kib // 1024}Mi"
        with open(f"/sys/kernel/mm/hugepages/{entry}/nr_hugepages") as fh:
            pools[name] = int(fh.read())
    derived = {"aiinfra.io/fabric-mgmt-mtu": "1500", "aiinfra.io/fabric-rdma-mtu": "9000",
               "aiinfra.io/fabric-rdma-roce-ready": "true", "aiinfra.io/roce-ready": "true",
               "aiinfra.io/nvme-cache": "true", "aiinfra.io/nvme-cache-size": "1G"}
    derived.update({f"aiinfra.io/hugepages-{k}": "true" for k, v in pools.items() if v > 0})
    every = dict(labels, **derived)
    record = "# hugepages: " + (" ".join(f"{k}={pools[k]}" for k in sorted(pools)) or "none") + "\n"
    return HEADER + record + "".join(f"{k}={every[k]}\n" for k in sorted(every))


def run(lab: LabHandle, node: str, plans: dict[str, Any], check: bool = False, **extra: Any) -> Any:
    return lab.playbook(PLAYBOOK, check=check, diff=True, limit=node,
                        extra_vars={"test_plans": plans, "nfd_labels_roce_ready": {"rdma": True}, **extra})


def test_single_device_layout_check_mode_idempotence_features_manifests(
        lab: LabHandle, clean: None, tmp_path: Path) -> None:
    node, dev = "node1", nvme(lab, "node1")
    plans = {node: plan([dev])}
    before = on_disk(lab, node, dev)
    fstab_before = lab.sh(node, "cat /etc/fstab").stdout

    # Check mode predicts the layout and touches nothing.
    result = run(lab, node, plans, check=True)
    assert result.rc == 0, result.stdout[-3000:]
    layout = result.task_results(LAYOUT_TASK)[node]
    assert layout["changed"] is True
    assert [a["kind"] for a in layout["actions"]][0] == "partition"
    assert {"mkfs", "mount", "fstab", "directory"} <= {a["kind"] for a in layout["actions"]}
    assert on_disk(lab, node, dev) == before
    assert lab.sh(node, "cat /etc/fstab").stdout == fstab_before
    assert findmnt(lab, node) == ""
    assert lab.sh(node, f"test -e {FEATURES}", check=False).returncode == 1

    # Real run: GPT partition from 1 MiB, xfs, mounted inside the node, fstab by UUID + nofail.
    result = run(lab, node, plans)
    assert result.rc == 0, result.stdout[-3000:]
    gpt = lab.sh(node, f"sgdisk -p {dev}").stdout
    assert any(line.split()[:2] == ["1", "2048"] and line.rstrip().endswith("aiinfra-cache")
               for line in gpt.splitlines()), gpt
    info = dict(line.split("=", 1) for line in lab.sh(node, f"blkid -p -o export {dev}p1").stdout.split())
    assert info["TYPE"] == "xfs" and info["LABEL"] == "model-cache"
    source, fstype, options = findmnt(lab, node).split()
    assert (source, fstype) == (f"{dev}p1", "xfs")
    assert "noatime" in options.split(",") and "nodiratime" in options.split(",")
    with open("/proc/self/mountinfo") as fh:  # the host does not see the node's mount
        assert f"{dev}p1" not in fh.read()
    fstab = lab.sh(node, "cat /etc/fstab").stdout
    ours = [line for line in fstab.splitlines() if f" {MOUNT} " in line]
    assert ours == [f"UUID={info['UUID']} {MOUNT} xfs noatime,nodiratime,nofail 0 2"], fstab
    assert fstab.replace(ours[0] + "\n", "") == fstab_before
    modes = lab.sh(node, f"stat -c '%n %a %U' {MOUNT}/models {MOUNT}/checkpoints").stdout.split("\n")
    assert modes[:2] == [f"{MOUNT}/models 755 root", f"{MOUNT}/checkpoints 750 root"]

    # NFD features file: exact content, 0644, no temporary dot-file left.
    labels = {"aiinfra.io/pool": "lab"}
    assert lab.sh(node, f"cat {FEATURES}").stdout == features_expected(lab, node, labels)
    listing = lab.sh(node, f"ls -a {os.path.dirname(FEATURES)}; stat -c '%a %i' {FEATURES}").stdout.split()
    assert listing[:3] == [".", "..", "aiinfra-datapath"] and listing[3] == "644"
    inode = listing[4]

    # Second run: nothing changes; check mode agrees.
    again = run(lab, node, plans)
    assert again.rc == 0 and again.changed_hosts() == {node: 0}, again.stdout[-3000:]
    checked = run(lab, node, plans, check=True)
    assert checked.rc == 0 and checked.changed_hosts() == {node: 0}
    assert checked.task_results(LAYOUT_TASK)[node]["actions"] == []

    # A label change rewrites the features file by rename (new inode), atomically.
    labels = {"aiinfra.io/pool": "lab", "aiinfra.io/tier": "gold"}
    relabel = run(lab, node, {node: plan([dev], labels=labels)})
    assert relabel.rc == 0
    assert relabel.task_results(LAYOUT_TASK)[node]["changed"] is False
    assert relabel.task_results(NFD_TASK)[node]["changed"] is True
    assert lab.sh(node, f"cat {FEATURES}").stdout == features_expected(lab, node, labels)
    listing = lab.sh(node, f"ls -a {os.path.dirname(FEATURES)}; stat -c '%i' {FEATURES}").stdout.split()
    assert listing[:3] == [".", "..", "aiinfra-datapath"] and len(listing) == 4 and listing[3] != inode

    # Kubernetes manifests for the lab, rendered on the controller from the measured cache.
    out = tmp_path / "k8s"
    rendered = run(lab, node, {node: plan([dev], labels=labels)}, manifests_dir=str(out))
    assert rendered.rc == 0, rendered.stdout[-3000:]
    files = sorted(os.listdir(out))
    assert files == ["configmap-local-provisioner-config.yaml", "persistentvolume-local-nvme-node1.yaml",
                     "storageclass-local-nvme.yaml"]
    pv = yaml.safe_load((out / "persistentvolume-local-nvme-node1.yaml").read_text())
    size = lab.sh(node, f"stat -f -c '%b %S' {MOUNT}").stdout.split()
    assert pv["spec"]["capacity"]["storage"] == f"{int(size[0]) * int(size[1]) // 1048576}Mi"
    # a directory beside the published models, never the cache root that holds them (docs/security.md)
    assert pv["spec"]["local"]["path"] == f"{MOUNT}/volume"
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [node]
    sc = yaml.safe_load((out / "storageclass-local-nvme.yaml").read_text())
    assert (sc["provisioner"], sc["volumeBindingMode"]) == ("kubernetes.io/no-provisioner", "WaitForFirstConsumer")


def test_foreign_filesystem_is_refused_then_wiped_when_named(lab: LabHandle, clean: None) -> None:
    node, dev = "node2", nvme(lab, "node2")
    lab.sh(node, f"mkfs.ext4 -q -F -L olddata {dev} && mkdir -p /tmp/old && mount {dev} /tmp/old && "
                 "head -c 1048576 /dev/urandom > /tmp/old/weights.bin && sync && umount /tmp/old")

    def checksum() -> str:
        return lab.sh(node, f"mount -o ro {dev} /tmp/old && sha256sum /tmp/old/weights.bin; umount /tmp/old").stdout
    digest = checksum()
    before = on_disk(lab, node, dev)

    for check in (True, False):  # check mode reports the same refusal
        result = run(lab, node, {node: plan([dev])}, check=check)
        assert result.rc != 0
        failed = result.task_results(LAYOUT_TASK)[node]
        assert failed.get("failed") is True
        assert dev in failed["msg"] and "ext4" in failed["msg"], failed["msg"]
        assert on_disk(lab, node, dev) == before
        assert checksum() == digest
    assert findmnt(lab, node) == ""

    # Named in wipe_serials (a loop device has no serial: its path), the layout proceeds.
    result = run(lab, node, {node: plan([dev], wipe=[dev])})
    assert result.rc == 0, result.stdout[-3000:]
    actions = [a["kind"] for a in result.task_results(LAYOUT_TASK)[node]["actions"]]
    assert actions[0] == "wipe" and "mkfs" in actions
    assert findmnt(lab, node).split()[:2] == [f"{dev}p1", "xfs"]
    assert "ext4" not in lab.sh(node, f"wipefs -n {dev}; blkid -p {dev}p1", check=False).stdout


def test_interrupted_after_partitioning_converges(lab: LabHandle, clean: None) -> None:
    """The state a run killed right after the partition step leaves: a GPT with our partition."""
    node, dev = "node3", nvme(lab, "node3")
    lab.sh(node, f"sgdisk -n 1:2048:0 -t 1:8300 -c 1:aiinfra-cache {dev} >/dev/null && partprobe {dev}")
    result = run(lab, node, {node: plan([dev])})
    assert result.rc == 0, result.stdout[-3000:]
    actions = [a["kind"] for a in result.task_results(LAYOUT_TASK)[node]["actions"]]
    assert "partition" not in actions and "wipe" not in actions and "mkfs" in actions
    assert findmnt(lab, node).split()[:2] == [f"{dev}p1", "xfs"]
    again = run(lab, node, {node: plan([dev])})
    assert again.rc == 0 and again.changed_hosts() == {node: 0}


def test_killed_playbook_then_rerun_converges(lab: LabHandle, clean: None) -> None:
    """Kill ansible-playbook as soon as the partition exists; whatever it left, a re-run converges."""
    node, dev = "node4", nvme(lab, "node4")
    plans = {node: plan([dev])}
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
           "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", "")}
    argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", lab.inventory, PLAYBOOK, "--limit", node,
            "-e", json.dumps({"test_plans": plans})]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    killed = False
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if "aiinfra-cache" in lab.sh(node, f"sgdisk -p {dev} 2>/dev/null", check=False).stdout:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert killed, "the playbook ended before the partition appeared"
    # The orphaned module on the node may still be running: the re-run waits for its node lock.
    result = run(lab, node, plans)
    assert result.rc == 0, result.stdout[-3000:]
    assert findmnt(lab, node).split()[:2] == [f"{dev}p1", "xfs"]
    again = run(lab, node, plans)
    assert again.rc == 0 and again.changed_hosts() == {node: 0}


@pytest.mark.skipif(not os.path.exists("/proc/mdstat"),
                    reason="this kernel has no md driver (/proc/mdstat is missing): RAID0 cannot be built here")
def test_raid0_across_two_loop_devices(lab: LabHandle, clean: None, tmp_path: Path) -> None:
    node, dev = "node1", nvme(lab, "node1")
    image = tmp_path / "second.img"
    with open(image, "wb") as fh:
        fh.truncate(1024 ** 3)
    second = subprocess.run(["losetup", "-f", "-P", "--show", str(image)], capture_output=True, text=True,
                            check=True).stdout.strip()
    raid = {"level": 0, "chunk_kib": 512, "name": "md-cache"}
    plans = {node: plan([dev, second], raid=raid)}
    try:
        result = run(lab, node, plans)
        assert result.rc == 0, result.stdout[-3000:]
        assert lab.sh(node, "cat /proc/mdstat").stdout.count("raid0") == 1
        source, fstype = findmnt(lab, node).split()[:2]
        assert fstype == "xfs" and source.startswith("/dev/md")
        assert "ARRAY /dev/md/md-cache" in lab.sh(node, "cat /etc/mdadm/mdadm.conf").stdout
        again = run(lab, node, plans)
        assert again.rc == 0 and again.changed_hosts() == {node: 0}
    finally:
        lab.sh(node, f"umount {MOUNT} 2>/dev/null; mdadm --stop /dev/md/md-cache 2>/dev/null; "
                     f"{wipe_script([second])}", check=False)
        subprocess.run(["losetup", "-d", second], check=False)
