"""systemd files the collection writes, read by systemd 252's own offline tools.

- the roce_qos boot unit, its script and its enable link, written by the roce_qos backend's own
  persistence code into a temporary root that also holds the distribution's unit files (for
  the targets it orders itself against): ``systemd-analyze verify --root`` prints nothing (every
  key known, the ExecStart is an executable, the start transaction has no ordering cycle) and
  ``systemctl --root is-enabled`` says ``enabled`` (the link is where WantedBy= puts it);
- the pcie_acs boot unit (ACS off on GPU to NIC bridges), written by the module itself: verify prints
  nothing, it is enabled, and a boot transaction with a kubelet-like service has no cycle;
- the hugepages tmpfiles.d file, written by the hugepages backend: ``systemd-tmpfiles --root
  --create --boot`` (what systemd-tmpfiles-setup.service runs at boot) parses it without a word
  and writes the planned values into fake sysfs files.

Nothing talks to the host's systemd (no bus, no PID 1): both tools read and write below --root.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _hugepages, _hugepages_files
from ansible_collections.aiinfra.datapath.plugins.module_utils import _roce_qos_boot as boot
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, apply_file, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._roce_qos import RoceQos

from .sys_common import run as run_tool
from .sys_common import tool

pytestmark = pytest.mark.interop

SYSTEM_UNITS = "/usr/lib/systemd/system"
UNIT = os.path.basename(boot.UNIT_FILE)


def _systemd_root(root: Path) -> None:
    """A root with the distribution's unit files (targets, udev, networkd ...), as a node has."""
    if not os.path.isfile(os.path.join(SYSTEM_UNITS, "network-online.target")):
        pytest.skip(f"{SYSTEM_UNITS} has no systemd unit files")
    (root / "usr" / "lib" / "systemd").mkdir(parents=True)
    shutil.copytree(SYSTEM_UNITS, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    (root / "lib").symlink_to("usr/lib")     # merged /usr: absolute links inside resolve below --root


def _persist(root: Path) -> list[str]:
    """The roce_qos backend's persistence (files, then the enable link), into ``root``."""
    node = Node(None, str(root))
    backend = RoceQos({"interfaces": [], "persist": True, "root": str(root)}, node)
    actions = backend.persist_actions({"ens1f0np0": {"backend": "dcb", "steps": [
        {"op": "run", "argv": ["/usr/sbin/dcb", "apptrust", "set", "dev", "ens1f0np0", "order", "dscp", "pcp"]}]}})
    for action in actions:
        if action.kind == "file":
            apply_file(node.root, action)
        else:
            backend._enable_unit(action)
    return [a.kind for a in actions]


def test_roce_qos_unit_passes_systemd_analyze_verify_and_is_enabled(tmp_path: Path) -> None:
    analyze, systemctl = tool("systemd-analyze"), tool("systemctl")
    root = tmp_path / "root"
    _systemd_root(root)
    assert _persist(root) == ["file", "file", "file", "link"]
    assert os.access(root / boot.APPLY_SCRIPT.lstrip("/"), os.X_OK)

    env = dict(os.environ, SYSTEMD_LOG_LEVEL="notice", SYSTEMD_PAGER="", LC_ALL="C.UTF-8")
    done = run_tool([analyze, "verify", f"--root={root}", "--man=no", UNIT], env=env)
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), done.stdout + done.stderr
    enabled = run_tool([systemctl, f"--root={root}", "is-enabled", UNIT], env=env)
    assert enabled.stdout.strip() == "enabled", enabled.stdout + enabled.stderr

    # the reader is not asleep: without the script it names the ExecStart
    (root / boot.APPLY_SCRIPT.lstrip("/")).unlink()
    broken = run_tool([analyze, "verify", f"--root={root}", "--man=no", UNIT], env=env)
    assert broken.returncode != 0 and boot.APPLY_SCRIPT in broken.stdout + broken.stderr


def _boot_transaction(root: Path, unit_text: str) -> str:
    """``systemd-analyze verify`` of a boot-like transaction: a test target that pulls in the unit,
    multi-user.target, network.target (as a network manager does), network-online.target and an
    RDMA workload ordered after it, so that every unit our unit orders itself against is in the
    transaction; returns what it prints."""
    (root / boot.UNIT_FILE.lstrip("/")).write_text(unit_text)
    system = root / "etc" / "systemd" / "system"
    (system / "dpi-sys-workload.service").write_text(
        "[Unit]\nDescription=an RDMA workload (kubelet orders itself so)\nWants=network-online.target\n"
        "After=network-online.target\n[Service]\nType=oneshot\nExecStart=%s\n" % boot.APPLY_SCRIPT)
    (system / "dpi-sys-boot.target").write_text(
        "[Unit]\nDescription=a boot\nWants=multi-user.target network.target network-online.target %s "
        "dpi-sys-workload.service\n" % UNIT)
    env = dict(os.environ, SYSTEMD_LOG_LEVEL="notice", SYSTEMD_PAGER="", LC_ALL="C.UTF-8")
    done = run_tool([tool("systemd-analyze"), "verify", f"--root={root}", "--man=no", "dpi-sys-boot.target"], env=env)
    return done.stdout + done.stderr


def test_roce_qos_unit_orders_inside_a_boot_transaction_without_a_cycle(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _systemd_root(root)
    _persist(root)
    assert _boot_transaction(root, boot.UNIT_TEXT) == ""
    # the check is live: a unit ordered after network-online.target but before network.target
    # (network-online.target is after network.target) is a cycle systemd prints
    wrong = boot.UNIT_TEXT.replace("After=network.target", "After=network-online.target").replace(
        "Before=network-online.target", "Before=network.target")
    assert "ordering cycle" in _boot_transaction(root, wrong)


# --------------------------------------------------------------------------- tmpfiles.d
NODE_1G = "/sys/devices/system/node/node%s/hugepages/hugepages-1048576kB"
POOL = "/sys/kernel/mm/hugepages/hugepages-%dkB"
THP = "/sys/kernel/mm/transparent_hugepage"


def _sysfs(root: Path, empty: bool) -> None:
    """Fake sysfs: 2M and 1G pools, two NUMA nodes, THP; ``empty``: the files as tmpfiles finds them."""
    files = {"proc/meminfo": "MemAvailable: 64000000 kB\nHugepagesize: 2048 kB\n", "proc/mounts": ""}
    for kb in (2048, 1048576):
        for name in ("nr_hugepages", "free_hugepages", "resv_hugepages"):
            files[(POOL % kb).lstrip("/") + "/" + name] = "0\n"
        for node in ("0", "1"):
            base = (NODE_1G % node).replace("1048576", str(kb)).lstrip("/")
            files[base + "/nr_hugepages"] = "0\n"
            files[base + "/free_hugepages"] = "0\n"
    files[THP.lstrip("/") + "/enabled"] = "always [madvise] never\n"
    files[THP.lstrip("/") + "/defrag"] = "always defer defer+madvise [madvise] never\n"
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("" if empty and rel.startswith("sys/") else content)


def test_hugepages_tmpfiles_file_is_applied_by_systemd_tmpfiles(tmp_path: Path) -> None:
    tmpfiles = tool("systemd-tmpfiles")
    node_root = tmp_path / "node"
    _sysfs(node_root, empty=False)
    params = {"pages": [{"size": "1G", "count": 6, "per_node": {"0": 4, "1": 2}, "persist": "boot_unit"},
                        {"size": "2M", "count": 512, "per_node": None, "persist": "boot_unit"}],
              "on_shortfall": "fail", "thp": {"enabled": "never", "defrag": "defer+madvise"}, "mounts": [],
              "sysctl_file": _hugepages_files.DEFAULT_SYSCTL_FILE,
              "boot_unit_file": _hugepages_files.DEFAULT_BOOT_UNIT_FILE, "fstab": "/etc/fstab",
              "root": str(node_root)}
    result = run(_hugepages.HugePages, params, Node(None, str(node_root)))
    assert not result.get("failed"), result.get("msg")
    conf = (node_root / _hugepages_files.DEFAULT_BOOT_UNIT_FILE.lstrip("/")).read_text()

    # a node after a reboot: the pools are empty, tmpfiles writes them
    boot_root = tmp_path / "boot"
    _sysfs(boot_root, empty=True)
    target = boot_root / _hugepages_files.DEFAULT_BOOT_UNIT_FILE.lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_text(conf)
    done = run_tool([tmpfiles, f"--root={boot_root}", "--create", "--boot"],
                    env=dict(os.environ, SYSTEMD_LOG_LEVEL="notice", LC_ALL="C.UTF-8"))
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), done.stdout + done.stderr
    written = {
        NODE_1G % "0" + "/nr_hugepages": "4",
        NODE_1G % "1" + "/nr_hugepages": "2",
        POOL % 2048 + "/nr_hugepages": "512",
        THP + "/enabled": "never",
        THP + "/defrag": "defer+madvise",
    }
    for path, value in written.items():
        assert (boot_root / path.lstrip("/")).read_text() == value, path
    # nothing else: the total of the 1G pool and the per-node 2M files stay as the kernel has them
    assert (boot_root / (POOL % 1048576).lstrip("/") / "nr_hugepages").read_text() == ""
    assert len([line for line in conf.splitlines() if line.startswith("w ")]) == len(written)


# --------------------------------------------------------------------------- pcie_acs boot unit
def _pcie_acs_root(root: Path) -> str:
    """The pcie_acs module run for real over the constructed switch box (topofakes.switch_box(): a GPU
    and a NIC below one PCIe switch, ACS redirect on) with its root at ``root``; setpci is a stand-in
    executable below the root (systemd-analyze checks that ExecStart= names an executable)."""
    from ansible_collections.aiinfra.datapath.plugins.module_utils._pcie_acs import DEFAULT_UNIT_FILE, PcieAcs
    from netfakes import FakeRunner
    from topofakes import SysRoot, switch_box, switch_lspci

    switch_box(SysRoot(root))
    setpci = root / "usr" / "bin" / "setpci"
    setpci.parent.mkdir(parents=True, exist_ok=True)
    setpci.write_text("#!/bin/sh\nexit 0\n")
    setpci.chmod(0o755)

    def answer(argv: list[str]):
        if argv == ["/usr/bin/lspci", "-vvv", "-D"]:
            return 0, switch_lspci(acs_redirect=True), ""
        return (0, "", "") if argv[0] == "/usr/bin/setpci" else None

    result = run(PcieAcs, {"state": "off", "nvme": False, "runtime": True, "unit_file": DEFAULT_UNIT_FILE,
                           "root": str(root)},
                 Node(FakeRunner([answer], which={"lspci": "/usr/bin/lspci", "setpci": "/usr/bin/setpci"}), str(root)))
    assert result["changed"] and [b["pci"] for b in result["bridges"]] == ["0000:17:00.0", "0000:17:01.0"], result
    return os.path.basename(DEFAULT_UNIT_FILE)


def test_pcie_acs_unit_passes_systemd_analyze_verify_is_enabled_and_runs_before_kubelet(tmp_path: Path) -> None:
    analyze, systemctl = tool("systemd-analyze"), tool("systemctl")
    root = tmp_path / "root"
    _systemd_root(root)
    unit = _pcie_acs_root(root)
    env = dict(os.environ, SYSTEMD_LOG_LEVEL="notice", SYSTEMD_PAGER="", LC_ALL="C.UTF-8")
    done = run_tool([analyze, "verify", f"--root={root}", "--man=no", unit], env=env)
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), done.stdout + done.stderr
    enabled = run_tool([systemctl, f"--root={root}", "is-enabled", unit], env=env)
    assert enabled.stdout.strip() == "enabled", enabled.stdout + enabled.stderr
    # a boot: sysinit.target, the unit, and a kubelet-like service (default dependencies: after
    # sysinit.target); no ordering cycle, and the unit is ordered before sysinit.target
    system = root / "etc" / "systemd" / "system"
    (system / "dpi-kubelet.service").write_text(
        "[Unit]\nDescription=kubelet stand-in\n[Service]\nType=oneshot\nExecStart=/usr/bin/setpci\n")
    (system / "dpi-acs-boot.target").write_text(
        "[Unit]\nDescription=a boot\nWants=sysinit.target %s dpi-kubelet.service\n" % unit)
    boot_done = run_tool([analyze, "verify", f"--root={root}", "--man=no", "dpi-acs-boot.target"], env=env)
    assert boot_done.stdout + boot_done.stderr == ""
    assert "Before=sysinit.target" in (system / unit).read_text()
    # the reader is live: an ExecStart that is not there is named
    (root / "usr" / "bin" / "setpci").unlink()
    broken = run_tool([analyze, "verify", f"--root={root}", "--man=no", unit], env=env)
    assert broken.returncode != 0 and "setpci" in broken.stdout + broken.stderr
