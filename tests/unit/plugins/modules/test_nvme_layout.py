"""nvme_layout, the module: its arguments, its docs, and whole runs of main() over recorded
devices (the Inspector answers from tests/fixtures/storage, the runner is a fake)."""

from __future__ import annotations

import pytest
from ansible_collections.aiinfra.datapath.plugins.doc_fragments.node import ModuleDocFragment
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout import layout as layout_mod
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.layout import NvmeLayout
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.plan import LayoutPlan
from ansible_collections.aiinfra.datapath.plugins.modules import nvme_layout
from capability_results import diff_entry, kinds, texts
from netfakes import use
from storagefakes import DEV, FSTAB, FakeRunner, RecordedInspector, fx, raw_device

# --------------------------------------------------------------------------- arguments


def _args(tmp_path, **over):
    args = dict(devices=["/dev/loopX"], filesystem=dict(label="model-cache"),
                mount=dict(path=str(tmp_path / "mnt")), root=str(tmp_path))
    args.update(over)
    return args


@pytest.mark.parametrize("over,message", [
    (dict(devices=None), "one of devices or select is required"),
    (dict(select=dict(model="x*")), "devices and select are mutually exclusive"),
    (dict(raid=dict(name="md-cache", chunk_kib=500)), "raid.chunk_kib must be a power of two"),
    (dict(raid=dict(name="md/cache")), "raid.name must be a plain name"),
    (dict(directories=[dict(path="models", mode="rwx")]), "mode 'rwx' of models is not octal"),
    (dict(mount=dict(path="/")), "mount.path must be an absolute path other than /"),
    (dict(filesystem=dict(label="model-cache-too-long")), "xfs labels have 1 to 12 characters"),
    # a GPT name holds 36 characters; sfdisk reads it between double quotes
    *[(dict(partition_label=label), "a GPT partition name has 1 to 36 characters, without quotes, backslashes "
                                    "or control characters")
      for label in ("", "x" * 37, 'a"b', "a\\b", "a\nb", "a\tb")],
])
def test_module_rejects_bad_input(tmp_path, run_module, over, message):
    result = run_module(nvme_layout.main, _args(tmp_path, **over), expect_failure=True)
    assert message in result["msg"]


def test_module_rejects_argument_spec_violations(tmp_path, run_module):
    result = run_module(nvme_layout.main, _args(tmp_path, filesystem=dict(type="btrfs", label="x")),
                        expect_failure=True)
    assert "btrfs" in result["msg"]


def test_module_names_a_path_that_is_not_a_block_device(tmp_path, run_module):
    missing = run_module(nvme_layout.main, _args(tmp_path, devices=["/dev/dpz-nonexistent"]), expect_failure=True)
    assert missing["msg"] == "device /dev/dpz-nonexistent does not exist"
    result = run_module(nvme_layout.main, _args(tmp_path, devices=["/dev/null"]), expect_failure=True)
    assert "is not a block device" in result["msg"] and "/dev/null" in result["msg"]


@pytest.mark.parametrize("devices,message", [
    (["/dev/loop\x00x"], "devices must not contain a NUL character"),
    (["relative/loop0"], "is not a device path (an absolute path under /dev/)"),
    (["/tmp/disk.img"], "is not a device path (an absolute path under /dev/)"),
    (["/dev/"], "is not a device path"),
])
def test_module_rejects_device_paths_outside_dev(tmp_path, run_module, devices, message):
    result = run_module(nvme_layout.main, _args(tmp_path, devices=devices), expect_failure=True)
    assert message in result["msg"]


def test_module_rejects_nul_in_any_path_and_a_relative_root(tmp_path, run_module, monkeypatch):
    result = run_module(nvme_layout.main, _args(tmp_path, mount=dict(path="/mnt/x\x00y")), expect_failure=True)
    assert "mount must not contain a NUL character" in result["msg"]
    monkeypatch.chdir(tmp_path)
    result = run_module(nvme_layout.main, _args(tmp_path, root="relative/dir"), expect_failure=True)
    assert "root must be an absolute path" in result["msg"]
    assert not (tmp_path / "relative").exists()


def test_module_without_raid_needs_exactly_one_device(tmp_path, run_module):
    result = run_module(nvme_layout.main, _args(tmp_path, devices=["/dev/null", "/dev/zero"]), expect_failure=True)
    assert "exactly one device" in result["msg"]


def test_documentation_matches_argument_spec():
    import yaml

    doc = yaml.safe_load(nvme_layout.DOCUMENTATION)
    spec_ = NvmeLayout.argument_spec()
    # root comes from the doc fragment aiinfra.datapath.node, as in every capability module
    assert doc["extends_documentation_fragment"] == ["aiinfra.datapath.node", "aiinfra.datapath.node.lock"]
    doc["options"].update(yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"])

    def compare(options, argspec, where):
        assert set(options) == set(argspec), where
        for name, opt in options.items():
            arg = argspec[name]
            assert opt.get("type", "str") == arg.get("type", "str"), (where, name)
            assert opt.get("default") == arg.get("default"), (where, name)
            assert bool(opt.get("required")) == bool(arg.get("required")), (where, name)
            assert opt.get("choices") == arg.get("choices"), (where, name)
            assert opt.get("elements") == arg.get("elements"), (where, name)
            if "suboptions" in opt or "options" in arg:
                compare(opt["suboptions"], arg["options"], "%s.%s" % (where, name))

    compare(doc["options"], spec_, "options")
    yaml.safe_load(nvme_layout.EXAMPLES)
    returned = yaml.safe_load(nvme_layout.RETURN)
    assert set(returned) == {"actions", "devices", "uuid", "mount", "fstab_line", "initramfs_update_needed"}


# --------------------------------------------------------------------------- whole runs


def recorded(monkeypatch, raws, mounts=None, outputs=None) -> FakeRunner:
    """main() over recorded devices: the Inspector answers from ``raws``, commands from ``outputs``."""
    runner = use(monkeypatch, FakeRunner(outputs))
    monkeypatch.setattr(layout_mod, "Inspector", lambda runner, root: RecordedInspector(raws, mounts))
    return runner


def test_check_mode_over_an_empty_device_predicts_the_actions_and_the_diff(tmp_path, run_module, monkeypatch):
    runner = recorded(monkeypatch, [raw_device("empty")])
    fstab = tmp_path / "etc" / "fstab"
    fstab.parent.mkdir()
    fstab.write_text(FSTAB)
    mnt = str(tmp_path / "mnt")
    result = run_module(nvme_layout.main, _args(tmp_path), check_mode=True, diff=True)
    assert result["changed"] is True
    assert kinds(result) == ["partition", "mkfs", "mkdir", "mount", "fstab"]
    assert texts(result)[:2] == [
        "partition /dev/loopX: GPT, partition 1 from 1 MiB to the end, type 8300, name aiinfra-cache",
        "mkfs (new partition): xfs label=model-cache"]
    assert not any(a["destructive"] or a["reboot"] for a in result["actions"])
    line = "UUID=<uuid-of-the-new-filesystem> %s xfs noatime,nofail 0 2" % mnt
    assert result["fstab_line"] == line and result["uuid"] is None
    assert result["initramfs_update_needed"] is False
    assert result["devices"][0]["class"] == "empty"
    assert result["diff"][0]["before_header"] == "/etc/fstab"
    assert diff_entry(result, "/etc/fstab") == dict(
        before_header="/etc/fstab", after_header="/etc/fstab", before=FSTAB, after=FSTAB + line + "\n")
    block = diff_entry(result, "block devices")
    assert block["before"] == ""                                       # nothing on the device now
    assert block["after"] == ("/dev/loopX = GPT, partition 1 from 1 MiB to the end, type 8300, "
                              "name aiinfra-cache\n(new partition) = xfs label=model-cache\n")
    assert runner.commands == [] and fstab.read_text() == FSTAB and not (tmp_path / "mnt").exists()
    assert (tmp_path / "run" / "aiinfra-datapath.lock").exists()       # the runner's node lock, in check mode too


@pytest.mark.parametrize("check_mode", [True, False])
def test_a_complete_cache_changes_nothing_and_shows_no_diff(tmp_path, run_module, monkeypatch, check_mode):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    probe = ("blkid", "-p", "-o", "export", DEV + "p1")
    uuid = [v for v in fx("ours-xfs.blkid-p1.txt").split() if v.startswith("UUID=")][0][5:]
    mounts = [dict(majmin="7:10", target=str(mnt), source=DEV + "p1", fstype="xfs", options=["rw", "noatime"],
                   super_options="rw,attr2")]
    runner = recorded(monkeypatch, [raw_device("ours-xfs")], mounts, {probe: (0, fx("ours-xfs.blkid-p1.txt"), "")})
    monkeypatch.setattr(LayoutPlan, "_majmin_of", staticmethod(lambda node: "7:10"))
    fstab = tmp_path / "etc" / "fstab"
    fstab.parent.mkdir()
    fstab.write_text(FSTAB + "UUID=%s %s xfs noatime,nofail 0 2\n" % (uuid, mnt))
    result = run_module(nvme_layout.main, _args(tmp_path), check_mode=check_mode, diff=True)
    assert result["changed"] is False and result["actions"] == []
    assert "diff" not in result                                        # no entry that reads like destruction
    assert result["devices"][0]["class"] == "ours-exact" and result["uuid"] == uuid
    assert result["mount"] == dict(path=str(mnt), mounted=True, options=["noatime"], source=DEV + "p1")
    assert runner.commands == []


def test_a_foreign_device_is_refused_with_the_devices_and_no_actions(tmp_path, run_module, monkeypatch):
    runner = recorded(monkeypatch, [raw_device("foreign-ext4")])
    for check_mode in (True, False):
        result = run_module(nvme_layout.main, _args(tmp_path), check_mode=check_mode, expect_failure=True)
        assert "refusing to destroy data: /dev/loopX (/dev/loopX) holds ext4 filesystem label=data" in result["msg"]
        assert "wipe_serials" in result["msg"]
        assert result["devices"][0]["class"] == "foreign" and result["actions"] == []
        assert result["changed"] is False
    assert runner.commands == []
    allowed = run_module(nvme_layout.main, _args(tmp_path, wipe_serials=[DEV]), check_mode=True)
    assert kinds(allowed)[:3] == ["wipe", "partition", "mkfs"]
    assert [a["kind"] for a in allowed["actions"] if a["destructive"]] == ["wipe"]
    assert allowed["actions"][0]["before"] == "ext4 filesystem label=data"
