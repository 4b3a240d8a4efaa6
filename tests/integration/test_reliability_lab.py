"""Faults injected into a real lab (namespace nodes, real SSH, the real kernel).

Each case records a row of the reliability matrix (docs/reliability.md). Global kernel
state touched here (the 2 MiB HugePage pool, read only) is checked before/after; per-node
state (net.* sysctls, files in the node's overlay, mounts in its mount namespace) dies with
the lab. Loop devices made here are detached in ``finally`` blocks.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from labtools import REPO, VENV_BIN, LabHandle, PlayResult

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest_plugins = ["reliability_log"]

pytestmark = pytest.mark.lab

PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "reliability.yml")
SYSCTL_FILE = "/etc/sysctl.d/90-aiinfra-datapath.conf"
HP_2M = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
HP_MOUNT = "/mnt/hugepages-dpf"
NET_KEYS = ("net.core.somaxconn", "net.ipv4.tcp_rmem")


def _plan(somaxconn: int, rmem_max: int, mount: bool = True) -> dict[str, Any]:
    return {
        "sysctl_profile": {"file": SYSCTL_FILE, "keys": {
            "net.core.somaxconn": {"value": str(somaxconn), "mode": "exact"},
            "net.ipv4.tcp_rmem": {"value": f"4096 131072 {rmem_max}", "mode": "exact"}}},
        "hugepages": {"pages": [], "thp": None,
                      "mounts": [{"size": "2M", "path": HP_MOUNT}] if mount else []},
        "kernel_cmdline": {"args": []},
    }


def _live(lab: LabHandle, node: str) -> dict[str, str]:
    out = lab.sh(node, "cat /proc/sys/net/core/somaxconn /proc/sys/net/ipv4/tcp_rmem").stdout.split("\n")
    return {"net.core.somaxconn": out[0].strip(), "net.ipv4.tcp_rmem": " ".join(out[1].split())}


def _file_sha(lab: LabHandle, node: str, path: str) -> str:
    return lab.sh(node, f"sha256sum {path} 2>/dev/null || echo absent", check=False).stdout.split()[0]


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


def _run(lab: LabHandle, plan: dict[str, Any] | None = None, control_dir: str | None = None,
         inventory: str | None = None, limit: str | None = None, **extra: Any) -> PlayResult:
    env = {"ANSIBLE_SSH_CONTROL_PATH_DIR": control_dir} if control_dir else None
    if inventory:  # the same lab seen through another inventory file
        lab = copy.copy(lab)
        lab.inventory = inventory
    return lab.playbook(PLAYBOOK, extra_vars={"test_plan": plan or {}, **extra}, limit=limit, env=env)


def _recap(result: PlayResult) -> str:
    return "; ".join(f"{h}: ok={s.get('ok', 0)} changed={s.get('changed', 0)} unreachable={s.get('unreachable', 0)} "
                     f"failed={s.get('failures', 0)}" for h, s in sorted(result.data.get("stats", {}).items()))


def _msg(result: PlayResult, host: str) -> str:
    for play in result.data.get("plays", []):
        for task in play.get("tasks", []):
            res = task.get("hosts", {}).get(host)
            if res and (res.get("failed") or res.get("unreachable")):
                return " ".join(str(res.get("msg", "")).split())[:220]
    return ""


def _netns_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


@pytest.fixture
def clean(lab: LabHandle) -> Iterator[None]:
    """Per-node state this module's plays create: removed after each test."""
    yield
    for node in lab.nodes:
        try:
            lab.sh(node, f"umount {HP_MOUNT} 2>/dev/null; umount /proc/sys 2>/dev/null; "
                   f"rm -f {SYSCTL_FILE} /etc/sysctl.d/90-aiinfra-datapath-hugepages.conf; "
                   f"sed -i '\\#{HP_MOUNT}#d' /etc/fstab", check=False)
        except Exception:  # noqa: BLE001 - a node killed by a test is rebuilt later
            pass


@pytest.fixture
def hugepages_guard() -> Iterator[str]:
    before = _read(HP_2M)
    yield before
    if _read(HP_2M) != before:
        with open(HP_2M, "w") as fh:
            fh.write(before)


def _healthy(lab: LabHandle) -> None:
    """Rebuild the lab if a test left a node dead (same config, same inventory dir)."""
    if lab.lab.health(lab.lab.load_state()):
        from datapath_lab import LabConfig

        state = lab.lab.up(LabConfig(name=lab.lab.name, nodes=len(lab.nodes), nvme_size="1G",
                                     inventory_dir=lab.state["inventory_dir"]), log=lambda *_: None)
        lab.state = state


# --------------------------------------------------------------------------- nodes down


def test_node_unreachable_before_run(lab: LabHandle, clean: None, tmp_path: Path, reliability) -> None:
    victim = "node3"
    plan = _plan(4301, 8388608)
    inventory = Path(lab.inventory).read_text()
    dead = 2**22 + 12345  # no such pid (pid_max is 4194304 at most)
    while os.path.exists(f"/proc/{dead}"):
        dead += 1
    doc = json.loads(inventory[inventory.index("{"):])
    found = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == victim and isinstance(value, dict) and "ansible_ssh_common_args" in value:
                    value["ansible_ssh_common_args"] = re.sub(r"nsenter -t \d+", f"nsenter -t {dead}",
                                                              value["ansible_ssh_common_args"])
                    found.append(key)
                walk(value)

    walk(doc)
    broken = tmp_path / "hosts.yml"
    broken.write_text(json.dumps(doc))
    assert found, "could not find the victim's ProxyCommand in the inventory"
    with reliability.case("node-unreachable-before-run", f"{victim} unreachable before the run (its ProxyCommand "
                          "enters a dead pid); 4-node play sysctl + hugepages", area="nodes") as case:
        first = _run(lab, plan, control_dir=str(tmp_path / "cp1"), inventory=str(broken))
        stats = first.data.get("stats", {})
        case.did(f"rc={first.rc}; recap {_recap(first)}")
        assert first.rc != 0
        assert stats[victim].get("unreachable", 0) >= 1
        others = [n for n in lab.nodes if n != victim]
        for node in others:
            assert stats[node].get("failures", 0) == 0 and stats[node].get("unreachable", 0) == 0
            assert _live(lab, node)["net.core.somaxconn"] == "4301"
        assert _live(lab, victim)["net.core.somaxconn"] != "4301"
        case.checked(f"recap names {victim} unreachable; the other 3 nodes finished with the profile live")
        # the node comes back (real inventory): only it changes; then nothing changes anywhere
        second = _run(lab, plan, control_dir=str(tmp_path / "cp2"))
        third = _run(lab, plan, control_dir=str(tmp_path / "cp2"))
        changed2, changed3 = second.changed_hosts(), third.changed_hosts()
        case.did(f"recovered re-run rc={second.rc}, changed per host {changed2}; next run changed {changed3}")
        assert second.rc == 0 and third.rc == 0
        assert changed2[victim] > 0 and all(changed2[n] == 0 for n in others)
        assert all(v == 0 for v in changed3.values())
        case.checked("re-run after recovery changed only the recovered node (nothing applied twice on the "
                     "others); a further run changed=0 everywhere")


def test_node_killed_mid_play(lab: LabHandle, clean: None, tmp_path: Path, reliability) -> None:
    victim = "node2"
    plan = _plan(4302, 8388609)
    ns = f"{lab.lab.name}-{victim}"
    holder = lab.lab.holder_pid(victim)
    argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", lab.inventory, PLAYBOOK,
            "-e", json.dumps({"test_plan": plan, "fault_window": 6})]
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
           "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp1"),
           "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", "")}
    with reliability.case("node-killed-mid-play", f"every process of {victim}'s SSH session (sshd, module, "
                          "sleep) SIGKILLed while the play waits between the sysctl and hugepages steps",
                          area="nodes") as case:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        killed = 0
        deadline = time.time() + 60
        try:
            # wait until the victim is inside the fault window: its `sleep` runs in its namespace
            while time.time() < deadline:
                pids = [p for p in _netns_pids(ns) if p != holder]
                names = []
                for p in pids:
                    try:
                        names.append(Path(f"/proc/{p}/comm").read_text().strip())
                    except OSError:
                        pass
                if "sleep" in names:
                    break
                time.sleep(0.2)
            assert _live(lab, victim)["net.core.somaxconn"] == "4302", "sysctl step had not run yet"
            for p in _netns_pids(ns):
                if p != holder:
                    try:
                        os.kill(p, signal.SIGKILL)
                        killed += 1
                    except ProcessLookupError:
                        pass
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        data = json.loads(out[out.index("{"):]) if "{" in out else {}
        first = PlayResult(proc.returncode, out, err, data)
        stats = first.data.get("stats", {})
        case.did(f"killed {killed} process(es) in {ns}; rc={first.rc}; recap {_recap(first)}; "
                 f"{victim}: {_msg(first, victim)}")
        assert first.rc != 0
        assert stats[victim].get("unreachable", 0) + stats[victim].get("failures", 0) >= 1
        others = [n for n in lab.nodes if n != victim]
        for node in others:
            assert stats[node].get("failures", 0) == 0 and stats[node].get("unreachable", 0) == 0
            assert lab.sh(node, f"mountpoint -q {HP_MOUNT}", check=False).returncode == 0
        assert lab.sh(victim, f"mountpoint -q {HP_MOUNT}", check=False).returncode != 0
        case.checked(f"the other 3 nodes finished both steps; {victim} stopped after the sysctl step (mount absent)")
        second = _run(lab, plan, control_dir=str(tmp_path / "cp2"))
        third = _run(lab, plan, control_dir=str(tmp_path / "cp2"))
        changed2, changed3 = second.changed_hosts(), third.changed_hosts()
        case.did(f"re-run rc={second.rc}, changed {changed2}; next run changed {changed3}")
        assert second.rc == 0 and third.rc == 0
        assert changed2[victim] == 1 and all(changed2[n] == 0 for n in others)
        assert all(v == 0 for v in changed3.values())
        assert lab.sh(victim, f"grep -c '{HP_MOUNT}' /etc/fstab").stdout.strip() == "1"
        case.checked(f"re-run applied only the missing hugepages step on {victim} (changed=1, sysctl not "
                     "re-applied), fstab has the mount once; a further run changed=0 everywhere")


def test_node_holder_killed_then_lab_up(lab: LabHandle, clean: None, tmp_path: Path, reliability) -> None:
    victim = "node4"
    plan = _plan(4303, 8388610)
    with reliability.case("node-dead-recovered-by-up", f"{victim}'s holder process (the node itself) and "
                          "everything in it killed before the run; recovered with `datapath-lab up`",
                          area="nodes") as case:
        ns = f"{lab.lab.name}-{victim}"
        for p in _netns_pids(ns):
            os.kill(p, signal.SIGKILL)
        holder = lab.lab.holder_pid(victim)
        if holder:
            os.kill(holder, signal.SIGKILL)
        time.sleep(0.3)
        first = _run(lab, plan, control_dir=str(tmp_path / "cp1"))
        stats = first.data.get("stats", {})
        case.did(f"rc={first.rc}; recap {_recap(first)}")
        assert first.rc != 0 and stats[victim].get("unreachable", 0) >= 1
        assert all(stats[n].get("failures", 0) == 0 and stats[n].get("unreachable", 0) == 0
                   for n in lab.nodes if n != victim)
        problems = lab.lab.health(lab.lab.load_state())
        _healthy(lab)
        case.did("lab status before up: " + "; ".join(problems)[:150] + "; `up` rebuilt the lab")
        second = _run(lab, plan, control_dir=str(tmp_path / "cp2"))
        third = _run(lab, plan, control_dir=str(tmp_path / "cp2"))
        case.did(f"after up: run rc={second.rc} changed {second.changed_hosts()}; next run changed "
                 f"{third.changed_hosts()}")
        assert second.rc == 0 and third.rc == 0
        assert all(v == 0 for v in third.changed_hosts().values())
        assert all(_live(lab, n)["net.core.somaxconn"] == "4303" for n in lab.nodes)
        case.checked("recap named the dead node; the others finished; after `up` every node converged and a "
                     "second run changed=0 (up rebuilds the whole lab: there is no single-node restart)")


# --------------------------------------------------------------------------- kernel


def test_kernel_refuses_value_rolls_back(lab: LabHandle, clean: None, reliability) -> None:
    node = "node1"
    before = _live(lab, node)
    syn = lab.sh(node, "cat /proc/sys/net/ipv4/tcp_syn_retries").stdout.strip()
    want = str(int(before["net.core.somaxconn"]) + 7)
    with reliability.case("kernel-refuses-value", "net.ipv4.tcp_syn_retries=500 (kernel range 1-127) in a "
                          "profile whose first key (net.core.somaxconn) the kernel accepts", area="kernel") as case:
        result = _run(lab, module_case="sysctl_profile", limit=node, module_args={"keys": {
            "net.core.somaxconn": {"value": want, "mode": "exact"},
            "net.ipv4.tcp_syn_retries": {"value": "500", "mode": "exact"}}, "file": SYSCTL_FILE})
        msg = _msg(result, node)
        case.did(f"rc={result.rc}: {msg}")
        after = _live(lab, node)
        assert result.rc != 0 and "tcp_syn_retries" in msg and "rolled back 1" in msg
        assert after == before
        assert lab.sh(node, "cat /proc/sys/net/ipv4/tcp_syn_retries").stdout.strip() == syn
        assert _file_sha(lab, node, SYSCTL_FILE) == "absent"
        case.checked("somaxconn back to its value (rolled back), tcp_syn_retries unchanged, managed file not written")


def test_missing_key(lab: LabHandle, clean: None, reliability) -> None:
    node = "node1"
    before = _live(lab, node)
    with reliability.case("sysctl-missing-key", "net.core.no_such_key (absent on this kernel) next to a valid "
                          "key", area="kernel") as case:
        result = _run(lab, module_case="sysctl_profile", limit=node, module_args={"keys": {
            "net.core.somaxconn": {"value": str(int(before["net.core.somaxconn"]) + 3), "mode": "exact"},
            "net.core.no_such_key": {"value": "1", "mode": "exact"}}, "file": SYSCTL_FILE})
        msg = _msg(result, node)
        case.did(f"rc={result.rc}: {msg}")
        assert result.rc != 0 and "no_such_key does not exist" in msg and "nothing was changed" in msg
        assert _live(lab, node) == before and _file_sha(lab, node, SYSCTL_FILE) == "absent"
        case.checked("live values equal before/after; managed file not written")


def test_read_only_proc_sys(lab: LabHandle, clean: None, reliability) -> None:
    node = "node1"
    before = _live(lab, node)
    lab.sh(node, "mount -o bind,ro /proc/sys /proc/sys")
    try:
        with reliability.case("read-only-proc-sys", "/proc/sys bind-mounted read-only in the node (as in "
                              "containers); sysctl_profile role with 2 keys", area="kernel") as case:
            result = _run(lab, _plan(int(before["net.core.somaxconn"]) + 5, 8388611, mount=False), limit=node)
            msg = _msg(result, node)
            case.did(f"rc={result.rc}: {msg}")
            assert result.rc != 0 and "Read-only file system" in msg
            assert _live(lab, node) == before and _file_sha(lab, node, SYSCTL_FILE) == "absent"
            case.checked("both keys read back unchanged; managed file not written")
            if "rejected by the kernel" in msg:
                case.finding("sysctl_profile reports a read-only /proc/sys as 'rejected by the kernel (Read-only "
                             "file system)'; _read_key() only looks at mode bits, so the read-only mount is found "
                             "on the first write instead of being reported up front like a 0444 key")
    finally:
        lab.sh(node, "umount /proc/sys", check=False)


def test_hugepages_shortfall(lab: LabHandle, clean: None, hugepages_guard: str, reliability) -> None:
    node = "node1"
    with reliability.case("hugepages-shortfall", "100,000,000 x 2 MiB HugePages requested (190 TiB, far above "
                          "MemAvailable)", area="kernel") as case:
        result = _run(lab, module_case="hugepages", limit=node, module_args={
            "pages": [{"size": "2M", "count": 100_000_000}], "on_shortfall": "fail"})
        msg = _msg(result, node)
        case.did(f"rc={result.rc}: {msg}")
        assert result.rc != 0 and "fewer HugePages than requested" in msg and "not attempted" in msg
        assert _read(HP_2M) == hugepages_guard
        assert _file_sha(lab, node, "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf") == "absent"
        case.checked(f"global 2 MiB pool unchanged ({hugepages_guard}); persist file not written")


# --------------------------------------------------------------------------- network


def _mtu(lab: LabHandle, node: str, ifname: str) -> str:
    return lab.sh(node, f"cat /sys/class/net/{ifname}/mtu").stdout.strip()


def _netconf_sha(lab: LabHandle, node: str) -> str:
    return lab.sh(node, "find /etc/systemd/network /etc/NetworkManager/system-connections /etc/netplan "
                  "/etc/network -type f 2>/dev/null | sort | xargs -r sha256sum | sha256sum", check=False).stdout


def test_mtu_on_connection_interface(lab: LabHandle, clean: None, reliability) -> None:
    node = "node1"
    peer = lab.state["nodes"]["node2"]["interfaces"]["mgmt"]["address"]
    conn = lab.state["nodes"][node]["interfaces"]["mgmt"]["address"]
    before, files = _mtu(lab, node, "eno1"), _netconf_sha(lab, node)
    with reliability.case("mtu-connection-interface-refused", "MTU 1400 on eno1, the interface carrying the "
                          "connection address, without allow_connection_interface", area="network") as case:
        result = _run(lab, module_case="link_mtu", limit=node, module_args={
            "interfaces": [{"name": "eno1", "mtu": 1400}], "connection_address": conn})
        msg = _msg(result, node)
        case.did(f"rc={result.rc}: {msg}")
        assert result.rc != 0 and "eno1" in msg
        assert _mtu(lab, node, "eno1") == before and _netconf_sha(lab, node) == files
        case.checked(f"eno1 MTU still {before}; network config files unchanged")
    with reliability.case("mtu-breaks-connectivity-reverted", "MTU 68 on eno1 allowed "
                          f"(allow_connection_interface) with verify_after {peer}: the peer stops answering",
                          area="network") as case:
        result = _run(lab, module_case="link_mtu", limit=node, module_args={
            "interfaces": [{"name": "eno1", "mtu": 68}], "connection_address": conn,
            "allow_connection_interface": True, "verify_after": [peer]})
        msg = _msg(result, node)
        case.did(f"rc={result.rc}: {msg}")
        assert result.rc != 0 and "reverted" in msg and "stopped answering" in msg
        assert _mtu(lab, node, "eno1") == before and _netconf_sha(lab, node) == files
        assert lab.sh(node, f"ping -c1 -W2 {peer}", check=False).returncode == 0
        case.checked(f"eno1 MTU back to {before}, nothing persisted (config files unchanged), peer answers again")


# --------------------------------------------------------------------------- disks


def _sha_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _loop(tmp_path: Path, data: bool) -> Iterator[tuple[str, str]]:
    image = str(tmp_path / ("data.img" if data else "blank.img"))
    with open(image, "wb") as fh:
        fh.truncate(64 << 20)
    if data:
        subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "userdata", image], check=True)
        subprocess.run(["debugfs", "-w", "-R", f"write {REPO}/README.md README.md", image], check=True,
                       capture_output=True)
    loop = subprocess.run(["losetup", "-f", "--show", image], check=True, capture_output=True,
                          text=True).stdout.strip()
    try:
        yield loop, image
    finally:
        subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)


@pytest.fixture
def data_disk(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A 64 MiB loop device holding an ext4 filesystem with a data file."""
    yield from _loop(tmp_path, data=True)


@pytest.fixture
def blank_disk(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A 64 MiB loop device of zeros (the guard lets it be used)."""
    yield from _loop(tmp_path, data=False)


def _nvme_args(device: str) -> dict[str, Any]:
    return {"devices": [device], "filesystem": {"type": "ext4", "label": "dpf-cache"},
            "mount": {"path": "/mnt/dpf-cache"}, "partition": False}


def test_disk_with_data_refused(lab: LabHandle, data_disk: tuple[str, str], reliability) -> None:
    loop, image = data_disk
    node = "node1"
    before = _sha_file(image)
    fstab = _file_sha(lab, node, "/etc/fstab")
    with reliability.case("disk-holds-data", f"nvme_layout (real run, not check mode) on {loop}: ext4 "
                          "'userdata' with a file, not named in wipe_serials", area="storage") as case:
        result = _run(lab, module_case="nvme_layout", limit=node, module_args=_nvme_args(loop))
        msg = _msg(result, node)
        case.did(f"rc={result.rc}: {msg}")
        after = _sha_file(image)
        if after != before:
            case.lost(os.path.getsize(image))
        assert result.rc != 0 and loop in msg and "ext4" in msg
        assert after == before and _file_sha(lab, node, "/etc/fstab") == fstab
        case.checked("sha256 of the whole backing image equal before/after; node fstab unchanged")


def test_root_disk_refused(lab: LabHandle, reliability) -> None:
    node = "node1"
    src = subprocess.run(["findmnt", "-no", "SOURCE", "/"], capture_output=True, text=True, check=False).stdout.strip()
    disk = subprocess.run(["lsblk", "-no", "PKNAME", src], capture_output=True, text=True,
                          check=False).stdout.strip() if src.startswith("/dev/") else ""
    root_disk = f"/dev/{disk}" if disk else (src if src.startswith("/dev/") else "/dev/vda")
    if not os.path.exists(root_disk):
        pytest.skip(f"root disk {root_disk} not found")

    def head_sha() -> str:
        try:
            with open(root_disk, "rb") as fh:
                return hashlib.sha256(fh.read(1 << 20)).hexdigest()
        except OSError as exc:  # some sandboxes refuse even reads of the root disk
            return f"unreadable ({exc.strerror})"

    head = head_sha()
    with reliability.case("root-disk", f"nvme_layout in CHECK MODE with devices=[{root_disk}] (the host's root "
                          "disk, mounted at /)", area="storage") as case:
        result = lab.playbook(PLAYBOOK, check=True, limit=node, extra_vars={
            "module_case": "nvme_layout", "module_args": _nvme_args(root_disk)})
        msg = _msg(result, node)
        res = result.task_results("NVMe layout (module case)").get(node, {})
        case.did(f"rc={result.rc} (check mode): {msg or 'NOT refused'}; devices seen "
                 f"{json.dumps(res.get('devices'))[:300]}; planned actions "
                 f"{[a.get('kind') for a in res.get('actions', [])]}")
        assert head_sha() == head
        assert result.rc != 0, f"nvme_layout planned {[a.get('kind') for a in res.get('actions', [])]} on {root_disk}"
        assert res.get("actions", []) == []
        assert result.rc != 0 and root_disk.split("/")[-1] in msg
        case.checked("refused in check mode (never run for real); first MiB of the root disk "
                     + ("identical before/after" if not head.startswith("unreadable") else
                        "not readable in this sandbox, so only check mode guarantees it was not written"))


def test_disk_vanished_between_plan_and_apply(lab: LabHandle, blank_disk: tuple[str, str], reliability) -> None:
    loop, image = blank_disk
    node = "node1"
    before = _sha_file(image)
    with reliability.case("disk-vanished", f"blank {loop} planned (check mode: guard passes, layout "
                          "planned), then detached (losetup -d) before the real run", area="storage") as case:
        args = _nvme_args(loop)
        planned = lab.playbook(PLAYBOOK, check=True, limit=node, extra_vars={"module_case": "nvme_layout",
                                                                             "module_args": args})
        case.did(f"plan (check mode) rc={planned.rc}: {_msg(planned, node) or 'ok, layout planned'}")
        assert planned.rc == 0, planned.stdout[-2000:]
        subprocess.run(["losetup", "-d", loop], check=True)
        result = _run(lab, module_case="nvme_layout", limit=node, module_args=args)
        msg = _msg(result, node)
        case.did(f"apply after detach rc={result.rc}: {msg}")
        after = _sha_file(image)
        if after != before:
            case.lost(os.path.getsize(image))
        assert result.rc != 0 and loop in msg
        assert after == before
        case.checked("failed naming the device; backing image sha256 unchanged")
        if "mkfs" in msg:
            case.finding(f"nvme_layout did not notice that {loop} had vanished: a detached loop device keeps its "
                         "/dev node with size 0, the guard classed it 'empty' and the module ran mkfs, which "
                         "failed. Refuse a device whose size is 0 (or below the plan's size) in the guard of "
                         "plugins/module_utils/_nvme_layout.py before any write")
        assert "vanished" in msg and "mkfs" not in msg, msg
        case.checked("refused by the guard as vanished (size 0) before any command ran")
