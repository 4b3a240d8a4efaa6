"""The roce_qos backend alone: validation, sysfs/configfs actions, RoCE MTU notes, lldpad, boot replay."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.module_utils import _roce_qos
from ansible_collections.aiinfra.datapath.plugins.module_utils import _roce_qos_boot as boot
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node as CapNode
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import render_diff, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._derived import roce_tos
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from netfakes import FakeDcb, FakeRunner, Node, nic, rdma_cm

NET = "/sys/class/net/ens1f0np0"
CM = "/sys/kernel/config/rdma_cm/mlx5_0"


def test_tos_round_trip():
    assert roce_tos(26) == 106 and roce_tos(26, ecn=False) == 104
    assert _roce_qos.dscp_from_tos(106) == 26 and _roce_qos.dscp_from_tos(104) == 26


def test_normalize_keeps_only_given_settings():
    want, errors = _roce_qos.normalize({"pfc_priorities": [3], "dscp2prio": {"26": "3"},
                                        "ecn": {"rp": [3]}, "ets": {"prio_tc": [0] * 8, "tsa": ["ETS"] * 8,
                                                                    "bw": [100] + [0] * 7}}, "interfaces[0]")
    assert errors == []
    assert want["pfc"] == [False, False, False, True, False, False, False, False]
    assert want["dscp2prio"] == {26: 3}
    assert want["ecn"] == {"rp": [False, False, False, True, False, False, False, False]}
    assert want["ets"]["tsa"] == ["ets"] * 8
    assert want["trust"] is None and want["cnp"] is None and want["roce_tos"] is None


def test_consistency_warnings():
    want, dummy = _roce_qos.normalize({"roce_tos": 106, "dscp2prio": {"48": 6}}, "q")
    assert _roce_qos.consistency_warnings("ens1f0np0", want) == [
        "ens1f0np0: RoCE ToS 106 carries DSCP 26, which dscp2prio does not map"]
    want, dummy = _roce_qos.normalize({"roce_tos": 106, "dscp2prio": {"26": 3}, "pfc_priorities": [3]}, "q")
    assert _roce_qos.consistency_warnings("ens1f0np0", want) == []


@pytest.mark.parametrize(("link_mtu", "note"), [
    ("9000", None),
    ("4200", None),
    ("1500", "roce_mtu: MTU 1500 of ens1f0np0 gives RoCE MTU 1024, plan expects 4096; set the link MTU first"),
    ("351", "roce_mtu: MTU 351 of ens1f0np0 is below 352, where the kernel has no RoCE at all, plan expects 4096; "
            "set the link MTU first"),
    ("68", "roce_mtu: MTU 68 of ens1f0np0 is below 352, where the kernel has no RoCE at all, plan expects 4096; "
           "set the link MTU first"),
])
def test_roce_mtu_note(link_mtu, note):
    assert _roce_qos.roce_mtu_note("ens1f0np0", link_mtu, 4096) == note


def test_sysfs_steps_are_actions_with_before_and_after(tmp_path):
    node = Node(tmp_path)
    nic(node, "ens1f0np0")
    node.path("/sys/kernel/config/rdma_cm").mkdir(parents=True)
    dev = _roce_qos.RoceDevice(HostRoot(str(node.root)), "ens1f0np0")
    want, dummy = _roce_qos.normalize({"ecn": {"np": [3]}, "cnp": {"dscp": 48}, "roce_tos": 106}, "q")
    notes = []
    before, after, actions, full = _roce_qos.sysfs_steps(dev, want, notes)
    assert notes == []
    assert [(a.kind, a.target, a.before, a.after) for a in actions] == [
        ("sysfs", "%s/ecn/roce_np/enable/%d" % (NET, p), "1", "0") for p in (0, 1, 2, 4, 5, 6, 7)
    ] + [("sysfs", NET + "/ecn/roce_np/cnp_dscp", "0", "48"),
         ("sysfs", CM, None, "directory"),
         ("sysfs", CM + "/ports/1/default_roce_tos", None, "106")]
    assert actions[-2].text == "mkdir " + CM and actions[-2].diff is False
    assert actions[-1].text == "write %s/ports/1/default_roce_tos = 106" % CM
    assert actions[-1].data["step"] == {"op": "write", "path": CM + "/ports/1/default_roce_tos", "value": "106"}
    # the replay holds every step, also those already right
    assert len(full) == 8 + 1 + 1 + 1
    assert before["cnp.dscp"] == "0" and after["cnp.dscp"] == "48"
    diff = render_diff(actions)
    assert [d["before_header"] for d in diff] == ["sysfs and configfs"]
    assert "%s/ports/1/default_roce_tos = 106\n" % CM in diff[0]["after"]


def test_pick_backend():
    class Dev:
        def __init__(self, vendor):
            self.vendor = vendor

        def has_vendor_qos(self):
            return self.vendor

    both = {"dcb": "/usr/sbin/dcb", "mlnx_qos": "/usr/bin/mlnx_qos"}
    assert _roce_qos.pick_backend("auto", Dev(True), both, None)[0].name == "mlnx_qos"
    assert _roce_qos.pick_backend("auto", Dev(False), both, None)[0].name == "dcb"
    assert _roce_qos.pick_backend("auto", Dev(False), {"mlnx_qos": "/usr/bin/mlnx_qos"}, None)[0].name == "mlnx_qos"
    assert _roce_qos.pick_backend("auto", Dev(True), {}, None) == (
        None, "neither iproute2 dcb nor mlnx_qos is installed")
    assert _roce_qos.pick_backend("dcb", Dev(True), {"mlnx_qos": "x"}, None) == (None, "dcb is not installed")


def capability(node, runner, items, check_mode=False, diff=False, **args):
    checked = ArgumentSpecValidator(**_roce_qos.RoceQos.module_spec()).validate(
        dict(args, interfaces=items, root=str(node.root)))
    assert not checked.error_messages, checked.error_messages
    return run(_roce_qos.RoceQos, checked.validated_parameters, CapNode(runner, str(node.root), check_mode, diff))


def test_roce_mtu_on_a_link_without_roce_is_a_note(tmp_path):
    node = Node(tmp_path)
    nic(node, "ens1f0np0", mtu=300)
    runner = FakeRunner([FakeDcb("ens1f0np0")], which={"dcb": "/usr/sbin/dcb"})
    result = capability(node, runner, [{"interface": "ens1f0np0", "roce_mtu": 4096}], persist=False)
    assert "failed" not in result and result["changed"] is False
    assert result["interfaces"][0]["notes"] == [
        "roce_mtu: MTU 300 of ens1f0np0 is below 352, where the kernel has no RoCE at all, plan expects 4096; "
        "set the link MTU first"]
    assert any("no RoCE at all" in w for w in result["warnings"])


def test_command_actions_carry_the_setting(tmp_path):
    node = Node(tmp_path)
    nic(node, "ens1f0np0")
    rdma_cm(node)
    runner = FakeRunner([FakeDcb("ens1f0np0")], which={"dcb": "/usr/sbin/dcb"})
    result = capability(node, runner, [{"interface": "ens1f0np0", "pfc_priorities": [3], "trust": "dscp"}],
                        check_mode=True, diff=True)
    commands = [a for a in result["actions"] if a["kind"] == "command"]
    assert [(a["target"], a["before"], a["after"]) for a in commands] == [
        ("ens1f0np0 trust", "pcp", "dscp"),
        ("ens1f0np0 pfc", [False] * 8, [False, False, False, True, False, False, False, False])]
    assert commands[0]["text"] == "/usr/sbin/dcb apptrust set dev ens1f0np0 order dscp pcp"
    assert [a["kind"] for a in result["actions"][2:]] == ["file", "file", "file", "link"]
    assert result["actions"][-1] == {"kind": "link", "target": boot.UNIT_LINK, "before": None,
                                     "after": boot.UNIT_FILE, "destructive": False, "reboot": False,
                                     "text": "enable aiinfra-roce-qos.service (link %s)" % boot.UNIT_LINK}
    assert result["persist"]["changes"] == [a["text"] for a in result["actions"][2:]]
    assert result["interfaces"][0]["actions"] == [a["text"] for a in commands]


class ExitingProcesses(HostRoot):
    """/proc/2 and /proc/4 exit or hide while the scan reads them (ESRCH and EACCES from the kernel)."""

    def read(self, path, default=None):  # type: ignore[no-untyped-def]
        if path == "/proc/2/comm":
            raise OSError(errno.ESRCH, "No such process")
        if path == "/proc/4/comm":
            raise OSError(errno.EACCES, "Permission denied")
        return super().read(path, default)


def test_running_lldpad_skips_processes_that_exit_during_the_scan(tmp_path: Path) -> None:
    for pid, comm in ((1, "systemd"), (2, "lldpad"), (3, "lldpad"), (4, "sshd"), (7, "bash"), (12, "lldpad")):
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "comm").write_text(comm + "\n")
    (tmp_path / "proc" / "5").mkdir()          # exited: no comm any more
    (tmp_path / "proc" / "self").mkdir()
    assert _roce_qos.running_lldpad(ExitingProcesses(str(tmp_path))) == [3, 12]


@pytest.mark.skipif(not os.path.isdir("/proc/self") or not shutil.which("sleep"), reason="needs procfs and sleep")
def test_running_lldpad_finds_a_live_process_by_its_comm(tmp_path: Path) -> None:
    # the kernel names a process after the file it executes: a link called lldpad to sleep
    fake = tmp_path / "lldpad"
    os.symlink(os.path.realpath(shutil.which("sleep")), fake)
    proc = subprocess.Popen([str(fake), "30"])
    try:
        deadline = time.time() + 10
        while time.time() < deadline and proc.pid not in _roce_qos.running_lldpad(HostRoot("/")):
            time.sleep(0.05)
        found = _roce_qos.running_lldpad(HostRoot("/"))
        assert proc.pid in found
        assert all(isinstance(pid, int) for pid in found) and found == sorted(found)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.pid not in _roce_qos.running_lldpad(HostRoot("/"))


def test_boot_script_replays_steps(tmp_path):
    script = tmp_path / "apply"
    script.write_text(boot.APPLY_SCRIPT_TEXT)
    target = tmp_path / "cfg"
    steps = [{"op": "mkdir", "path": str(target)},
             {"op": "write", "path": str(target / "tos"), "value": "106"},
             {"op": "run", "argv": [sys.executable, "-c", "pass"]}]
    state = tmp_path / "state.json"
    state.write_text(boot.state_document({"lo": {"backend": "dcb", "steps": steps}}))
    subprocess.run([sys.executable, str(script), str(state)], check=True, timeout=30)
    assert (target / "tos").read_text() == "106"
    bad = tmp_path / "bad.json"
    bad.write_text(boot.state_document({"lo": {"steps": [{"op": "run", "argv": ["/nonexistent-tool"]}]}}))
    done = subprocess.run([sys.executable, str(script), str(bad)], timeout=30, stderr=subprocess.DEVNULL, check=False)
    assert done.returncode == 1


def test_unit_runs_the_script_on_the_state_file():
    assert "ExecStart=%s %s" % (boot.APPLY_SCRIPT, boot.STATE_FILE) in boot.UNIT_TEXT
    assert "ConditionPathExists=%s" % boot.STATE_FILE in boot.UNIT_TEXT


def test_unit_orders_itself_without_pulling_in_network_targets():
    """After network.target, before network-online.target; network-pre.target is for units that
    run before the network (systemd.special(7)), udev-settle is deprecated: neither is named."""
    lines = [line for line in boot.UNIT_TEXT.splitlines() if not line.startswith("#")]
    assert "After=network.target" in lines and "Before=network-online.target" in lines
    assert not any(line.startswith(("Wants=", "Requires=")) for line in lines)
    assert "network-pre.target" not in "\n".join(lines) and "udev-settle" not in boot.UNIT_TEXT
    assert "WantedBy=multi-user.target" in lines
    assert boot.UNIT_LINK.startswith("/etc/systemd/system/multi-user.target.wants/")
