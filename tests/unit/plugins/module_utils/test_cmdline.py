"""The kernel_cmdline backend alone: helpers, boot loaders as data, the plan as actions."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.aiinfra.datapath.plugins.module_utils import _cmdline
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, render_diff, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from netfakes import FakeRunner

PARAMS = {"args": [], "remove": [], "backend": "auto", "drop_in": _cmdline.DEFAULT_DROP_IN,
          "update_bootloader": True, "when_no_bootloader": "skip"}


def test_helpers():
    assert _cmdline.is_subsequence(["a", "b"], ["x", "a", "y", "b"])
    assert not _cmdline.is_subsequence(["b", "a"], ["a", "b"])
    assert _cmdline.matches("hugepages", "hugepages=8")
    assert not _cmdline.matches("hugepages", "hugepagesz=1G")
    assert not _cmdline.matches("hugepages=4", "hugepages=8")
    assert _cmdline.split_cmdline('a="b c" d') == ["a=b c", "d"]
    assert _cmdline.grub_assignments('GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX x=1 y"\n') == ["x=1", "y"]


def _put(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_drop_in_backends_differ_in_data(tmp_path):
    _put(tmp_path, "etc/default/grub", 'GRUB_CMDLINE_LINUX="quiet splash"\n')
    runner = FakeRunner(which={"update-grub": "/usr/sbin/update-grub"})
    params = dict(PARAMS, args=["iommu=pt"])
    grub = _cmdline.GrubDropIn(HostRoot(str(tmp_path)), runner, params)
    grub.find_tool()
    state = grub.read()
    actions = grub.plan(state, ["iommu=pt"], ["splash"])
    assert [(a.kind, a.target, a.reboot, a.diff) for a in actions] == [
        ("file", _cmdline.DEFAULT_DROP_IN, True, "file"), ("command", "update-grub", True, False)]
    assert actions[1].data["argv"] == ["/usr/sbin/update-grub"]
    assert grub.not_removable(state, ["splash"]) == ["splash (in /etc/default/grub)"]
    image = _cmdline.DropInOnly(HostRoot(str(tmp_path)), runner, params)
    actions = image.plan(image.read(), ["iommu=pt"], [])
    assert [(a.kind, a.reboot) for a in actions] == [("file", False)]   # no regeneration, no reboot
    assert image.reboot_flag is None and image.persists is False


def test_grubby_remove_then_add_shows_the_arguments_around_each_command(tmp_path):
    _put(tmp_path, _cmdline.STATE_FILE.lstrip("/"), json.dumps({"args": ["old=1"], "added": ["old=1"]}))
    runner = FakeRunner([lambda argv: (0, 'args="ro old=1 rhgb"\n', "") if argv[1] == "--info=DEFAULT" else None],
                        which={"grubby": "/usr/sbin/grubby"})
    grubby = _cmdline.Grubby(HostRoot(str(tmp_path)), runner, PARAMS)
    actions = grubby.plan(grubby.read(), ["iommu=pt"], ["rhgb"])
    assert [a.text for a in actions] == [
        "run grubby --update-kernel=ALL --remove-args=old=1 rhgb",
        "run grubby --update-kernel=ALL --args=iommu=pt",
        "write %s" % _cmdline.STATE_FILE]
    assert [(a.before, a.after) for a in actions[:2]] == [("ro old=1 rhgb", "ro"), ("ro", "ro iommu=pt")]
    assert actions[0].data["argv"][0] == "/usr/sbin/grubby"
    assert json.loads(actions[2].after) == {"args": ["iommu=pt"], "added": ["iommu=pt"]}
    section = render_diff(actions)[0]
    assert section["before_header"] == "grubby default kernel args"
    assert section["before"] == "default kernel args = ro old=1 rhgb\ndefault kernel args = ro\n"
    assert section["after"] == "default kernel args = ro\ndefault kernel args = ro iommu=pt\n"


def test_capability_reboot_flag_and_check_mode(tmp_path):
    _put(tmp_path, "proc/cmdline", "ro quiet\n")
    _put(tmp_path, "boot/grub/grub.cfg", "")
    runner = FakeRunner([lambda argv: (0, "", "")], which={"update-grub": "/usr/sbin/update-grub"})
    params = dict(PARAMS, args=["iommu=pt"], root=str(tmp_path))
    predicted = run(_cmdline.KernelCmdline, params, Node(runner, str(tmp_path), check_mode=True))
    assert [a["kind"] for a in predicted["actions"]] == ["file", "command", "flag"]
    assert predicted["reboot_required"] is True and predicted["missing"] == ["iommu=pt"]
    assert runner.commands == [] and not (tmp_path / "run/reboot-required").exists()
    real = run(_cmdline.KernelCmdline, params, Node(runner, str(tmp_path)))
    assert real["actions"] == predicted["actions"]
    assert runner.commands == [["/usr/sbin/update-grub"]]
    assert (tmp_path / "run/reboot-required").read_text() == ""
    again = run(_cmdline.KernelCmdline, params, Node(runner, str(tmp_path)))
    assert again["changed"] is False and again["reboot_required"] is True


def test_bad_arguments_fail_before_reading(tmp_path):
    params = dict(PARAMS, args=["x=$(id)"], root=str(tmp_path))
    result = run(_cmdline.KernelCmdline, params, Node(FakeRunner(), str(tmp_path)))
    assert result["failed"] is True and "args[0] 'x=$(id)'" in result["msg"]
    assert result["problems"] and not (tmp_path / "run").exists()
