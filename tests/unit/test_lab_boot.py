"""`datapath-lab reboot`: the pieces that need no lab: systemd-sysctl's merged configuration as
the boot applies it, unit ordering by After=/Before=, which units count as the node's own, which
mounts survive a boot, and the node's shutdown/reboot shim (run with /bin/sh in a scratch root)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "lab"))

from datapath_lab import boot, cli  # noqa: E402
from datapath_lab.core import LabConfig, LabError  # noqa: E402

# systemd-sysctl --cat-config as systemd 252 prints it (the files in the order it applies them)
CAT_CONFIG = """# /usr/lib/sysctl.d/50-pid-max.conf
# Raise pid_max
kernel.pid_max = 4194304

# /etc/sysctl.d/90-aiinfra-datapath.conf
# Managed by aiinfra.datapath.sysctl_profile
net.ipv4.tcp_rmem = 4096 131072 16777216
-net.core.rmem_max = 16777216
vm/swappiness=10
; a comment

# /etc/sysctl.d/90-aiinfra-datapath-hugepages.conf
vm.nr_hugepages = 64
kernel.pid_max = 65536
not an assignment
"""


def test_cat_config_last_assignment_wins_with_its_file() -> None:
    found = boot.parse_cat_config(CAT_CONFIG)
    assert found["kernel.pid_max"] == ("65536", "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf")
    assert found["vm.nr_hugepages"] == ("64", "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf")
    assert found["vm.swappiness"] == ("10", "/etc/sysctl.d/90-aiinfra-datapath.conf")  # slashes are dots
    assert found["net.core.rmem_max"][0] == "16777216"  # '-' (ignore failure) is not part of the key
    assert found["net.ipv4.tcp_rmem"][0] == "4096 131072 16777216"
    assert "not an assignment" not in found and len(found) == 5


def _unit(text: str, tmp_path: Path, name: str) -> object:
    path = tmp_path / name
    path.write_text(text)
    return boot.read_unit(str(path))


def test_units_run_in_their_declared_order(tmp_path: Path) -> None:
    units = {
        "a-last.service": _unit("[Unit]\nAfter=network.target b-mid.service\n[Service]\nType=oneshot\n", tmp_path, "a"),
        "b-mid.service": _unit("[Unit]\nAfter=c-first.service\n[Service]\nType=oneshot\n", tmp_path, "b"),
        "c-first.service": _unit("[Unit]\nBefore=network-online.target\n[Service]\nType=oneshot\n", tmp_path, "c"),
        "d-free.service": _unit("[Unit]\nBefore=a-last.service\n[Service]\nType=oneshot\n", tmp_path, "d"),
    }
    order = boot.order_units(units)
    assert order.index("c-first.service") < order.index("b-mid.service") < order.index("a-last.service")
    assert order.index("d-free.service") < order.index("a-last.service")
    # a cycle is broken, never an endless loop
    cycle = {"x.service": _unit("[Unit]\nAfter=y.service\n", tmp_path, "x"),
             "y.service": _unit("[Unit]\nAfter=x.service\n", tmp_path, "y")}
    assert sorted(boot.order_units(cycle)) == ["x.service", "y.service"]


def test_exec_lines_keep_every_execstart(tmp_path: Path) -> None:
    unit = _unit("[Service]\nType=oneshot\nExecStart=/bin/true one\nExecStart=-/bin/false two\n", tmp_path, "u")
    assert boot._exec_lines(unit, "ExecStart") == ["/bin/true one", "-/bin/false two"]
    assert boot._exec_lines(unit, "ExecStartPre") == []


def test_only_units_enabled_in_the_nodes_own_layer_are_the_nodes(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    wants = upper / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (upper / "etc/systemd/system/aiinfra-roce-qos.service").write_text("[Service]\nType=oneshot\n")
    os.symlink("/etc/systemd/system/aiinfra-roce-qos.service", wants / "aiinfra-roce-qos.service")
    (upper / "etc/systemd/system/notes.txt").write_text("")
    assert boot.installed_units(str(upper)) == {
        "aiinfra-roce-qos.service": "/etc/systemd/system/aiinfra-roce-qos.service"}
    assert boot.installed_units(str(tmp_path / "empty")) == {}


@pytest.mark.parametrize(("point", "kept"), [
    ("/", True), ("/proc", True), ("/sys", True), ("/dev", True), ("/dev/pts", True), ("/dev/hugepages", True),
    (boot.BOOT_ID, True), ("/srv/checkout", True), ("/srv/checkout/sub", True),
    ("/mnt/model-cache", False), ("/dev2", False), ("/srv/checkout2", False), ("/mnt/huge-1G", False),
])
def test_mounts_a_boot_keeps(point: str, kept: bool) -> None:
    assert boot._kept(point, "/srv/checkout") is kept


def test_mountinfo_escapes_are_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("22 1 0:21 / / rw - overlay overlay rw\n"
                    "40 22 7:0 / /mnt/model\\040cache rw,noatime - xfs /dev/loop0p1 rw\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(
        info if path == "/proc/4242/mountinfo" else path, *a, **k))
    assert boot.mounts(4242) == ["/", "/mnt/model cache"]


def _shim(tmp_path: Path, name: str, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the shim as /usr/sbin/NAME with /run redirected into tmp_path."""
    run = tmp_path / "run"
    text = boot.SHIM.replace("/run/datapath-lab", str(run / "datapath-lab"))
    exe = tmp_path / name
    exe.write_text(text)
    exe.chmod(0o755)
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, check=False)
    return done, run / "datapath-lab" / "reboot"


@pytest.mark.parametrize(("name", "args", "delay"), [
    ("shutdown", ["-r", "0", "Reboot initiated by Ansible"], 0),  # what ansible.builtin.reboot runs
    ("shutdown", ["-r", "now"], 0),
    ("shutdown", ["-r", "+2", "in two minutes"], 120),
    ("shutdown", ["--reboot", "3"], 180),
    ("reboot", [], 0),
])
def test_shim_asks_the_lab_for_a_reboot(tmp_path: Path, name: str, args: list[str], delay: int) -> None:
    before = int(time.time())
    done, request = _shim(tmp_path, name, *args)
    assert done.returncode == 0, done.stderr
    due = int(request.read_text())
    assert before + delay <= due <= int(time.time()) + delay
    assert "Reboot scheduled (datapath-lab)" in done.stdout


def test_shim_cancels_and_refuses_power_off(tmp_path: Path) -> None:
    request = _shim(tmp_path, "shutdown", "-r", "+5")[1]
    assert request.exists()
    cancelled = _shim(tmp_path, "shutdown", "-c")[0]
    assert cancelled.returncode == 0 and not request.exists()
    for args in (["-h", "now"], ["-P"], ["now"]):
        refused, request = _shim(tmp_path, "shutdown", *args)
        assert refused.returncode == 1 and not request.exists(), args
        assert "lab node" in refused.stderr


def test_network_mode_is_checked() -> None:
    with pytest.raises(LabError, match="--network 'wicked'"):
        LabConfig(network="wicked").validate()
    args = cli.build_parser().parse_args(["up", "--network", "networkd"])
    assert args.network == "networkd"
    assert cli.build_parser().parse_args(["reboot"]).nodes == []
    assert cli.build_parser().parse_args(["reboot", "node2", "node3", "--json"]).nodes == ["node2", "node3"]


def test_global_tmpfiles_lines_are_compared_with_the_live_sysfs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """THP is written at boot by the node's own tmpfiles.d file; the boot does not run it on the shared
    kernel, it compares what it would write with the live choice ([madvise] -> madvise)."""
    upper, root = tmp_path / "run/nodes/node1/upper", tmp_path / "root"
    (upper / "etc/tmpfiles.d").mkdir(parents=True)
    (upper / "etc/tmpfiles.d/aiinfra-datapath-hugepages.conf").write_text(
        "# Managed by aiinfra.datapath.hugepages\n"
        "w /sys/kernel/mm/transparent_hugepage/enabled - - - - madvise\n"
        "w /sys/kernel/mm/transparent_hugepage/defrag - - - - defer+madvise\n"
        "w /sys/kernel/mm/gone - - - - 1\n"
        "d /run/aiinfra 0755 root root -\n")
    thp = root / "sys/kernel/mm/transparent_hugepage"
    thp.mkdir(parents=True)
    (thp / "enabled").write_text("always [madvise] never\n")
    (thp / "defrag").write_text("always defer [defer+madvise] madvise never\n")

    class FakeLab:
        run_dir = str(tmp_path / "run")

    monkeypatch.setattr(boot, "node_root", lambda lab, node, state: str(root))
    found = boot.global_tmpfiles(FakeLab(), "node1", {})
    assert found == {
        "/sys/kernel/mm/transparent_hugepage/enabled": {
            "boot": "madvise", "live": "madvise", "same": True,
            "file": "/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf"},
        "/sys/kernel/mm/transparent_hugepage/defrag": {
            "boot": "defer+madvise", "live": "defer+madvise", "same": True,
            "file": "/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf"},
    }
    (thp / "enabled").write_text("[always] madvise never\n")
    again = boot.global_tmpfiles(FakeLab(), "node1", {})
    assert again["/sys/kernel/mm/transparent_hugepage/enabled"]["same"] is False
