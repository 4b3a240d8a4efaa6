"""Helpers for the lab tests: a handle on a running lab and ansible-playbook runs with JSON results.

Imported by the tests as ``labtools`` (not from ``conftest``, whose module name is shared by every
conftest.py in the tree)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab"))

from datapath_lab import Lab  # noqa: E402

TEST_LAB = os.environ.get("DATAPATH_TEST_LAB", "dpt")
VENV_BIN = os.path.join(REPO, ".venv", "bin")


def _lab_possible() -> str | None:
    if os.geteuid() != 0:
        return "lab tests need root"
    if not os.path.exists("/usr/sbin/sshd"):
        return "sshd missing: run make bootstrap"
    return None


@dataclass
class PlayResult:
    rc: int
    stdout: str
    stderr: str
    data: dict[str, Any]

    def stats(self, host: str) -> dict[str, int]:
        return self.data.get("stats", {}).get(host, {})

    def changed_hosts(self) -> dict[str, int]:
        return {h: s.get("changed", 0) for h, s in self.data.get("stats", {}).items()}

    def failures(self) -> str:
        """Every failed or unreachable task result of the run, host and message (for assertion messages)."""
        lines = []
        for play in self.data.get("plays", []):
            for task in play.get("tasks", []):
                for host, row in task.get("hosts", {}).items():
                    if row.get("failed") or row.get("unreachable"):
                        lines.append(f"{host} [{task['task']['name']}]: {row.get('msg')}")
        return "\n".join(lines) or self.stdout[-3000:] + self.stderr[-2000:]

    def task_results(self, task_name: str) -> dict[str, dict[str, Any]]:
        """Per-host results of the (last) task with this name."""
        found: dict[str, dict[str, Any]] = {}
        for play in self.data.get("plays", []):
            for task in play.get("tasks", []):
                name = task.get("task", {}).get("name", "")
                if name == task_name or name.endswith(" : " + task_name):
                    found.update(task.get("hosts", {}))
        return found


class LabHandle:
    def __init__(self, lab: Lab, state: dict[str, Any]) -> None:
        self.lab = lab
        self.state = state
        self.inventory = os.path.join(state["inventory_dir"], "hosts.yml")
        self.nodes = list(state["nodes"])

    def sh(self, node: str, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.lab.run_in(node, ["/bin/sh", "-c", script], check=check)

    def playbook(self, playbook: str, *args: str, extra_vars: dict[str, Any] | None = None,
                 check: bool = False, diff: bool = False, limit: str | None = None,
                 env: dict[str, str] | None = None) -> PlayResult:
        argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", self.inventory, playbook, *args]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        if check:
            argv.append("--check")
        if diff:
            argv.append("--diff")
        if limit:
            argv += ["--limit", limit]
        full_env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
                    "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1",
                    "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", "")}
        full_env.update(env or {})
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=full_env, timeout=900, check=False)
        try:
            data = json.loads(proc.stdout[proc.stdout.index("{"):]) if "{" in proc.stdout else {}
        except ValueError:
            data = {}
        return PlayResult(proc.returncode, proc.stdout, proc.stderr, data)


# What applying the lab spec changes: node files, the model cache mount and fstab, and the
# global kernel values every lab on this machine shares with the host.
CACHE_MOUNT = "/mnt/model-cache"
NODE_FILES = ("/etc/sysctl.d/90-aiinfra-datapath.conf", "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf",
              "/etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath")
GLOBAL_FILES = [f"/proc/sys/{k}" for k in ("fs/aio-max-nr", "fs/inotify/max_user_instances",
                                           "fs/inotify/max_user_watches", "kernel/pid_max", "vm/max_map_count",
                                           "vm/min_free_kbytes")] + [
    "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"]
THP = "/sys/kernel/mm/transparent_hugepage"


def read_text(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip()


def thp_mode(name: str) -> str:
    text = read_text(f"{THP}/{name}")
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else text


def blank_device_script(dev: str) -> str:
    """Shell that returns a lab loop device to blank: every signature gone AND every byte zero.

    wipefs only erases magic numbers: a filesystem made on the whole device leaves its group
    descriptors and inode tables in the first MiB, which nvme_layout rightly refuses as unknown
    data. BLKZEROOUT (a hole punched in the loop device's backing file) zeroes the rest, and drops
    the block device's cached pages with it; dd of both ends where the kernel refuses it."""
    assert dev.startswith("/dev/loop"), dev
    return (f"for p in {dev}p*; do [ -b \"$p\" ] && wipefs -aq \"$p\"; done; "
            f"sgdisk --zap-all {dev} >/dev/null 2>&1; wipefs -aq {dev}; "
            f"blkdiscard -f -z {dev} 2>/dev/null || {{ dd if=/dev/zero of={dev} bs=1M count=1 conv=fsync status=none; "
            f"dd if=/dev/zero of={dev} bs=1M count=1 seek=$(( $(blockdev --getsize64 {dev}) / 1048576 - 1 )) "
            f"conv=fsync status=none; }}; blockdev --flushbufs {dev}; partprobe {dev} 2>/dev/null; true")


@contextmanager
def spec_applied_then_restored(lab: LabHandle, extra_files: tuple[str, ...] = ()) -> Iterator[LabHandle]:
    """Run the body (which applies the lab spec); afterwards unmount and wipe each node's cache
    device, remove the files the roles write, restore fstab and the host's global kernel values."""
    saved = {path: read_text(path) for path in GLOBAL_FILES}
    saved_thp = {name: thp_mode(name) for name in ("enabled", "defrag")}
    fstabs = {n: lab.sh(n, "cat /etc/fstab", check=False).stdout for n in lab.nodes}
    try:
        yield lab
    finally:
        for node in lab.nodes:
            dev = lab.state["nodes"][node]["nvme"]
            files = " ".join(NODE_FILES + tuple(extra_files))
            lab.sh(node, f"umount {CACHE_MOUNT} 2>/dev/null; rm -f {files}; {blank_device_script(dev)}", check=False)
            lab.lab.run_in(node, ["/bin/sh", "-c", "cat > /etc/fstab"], check=False, input=fstabs[node])
        for path, value in saved.items():
            if read_text(path) != value:
                with open(path, "w") as handle:
                    handle.write(value)
        for name, value in saved_thp.items():
            if thp_mode(name) != value:
                with open(f"{THP}/{name}", "w") as handle:
                    handle.write(value)
