"""nvme_layout layout: the guard, the planned actions, apply, result and diff, over recorded
devices (no real device is touched: the runner is a fake, the devices are recorded scenarios)."""

from __future__ import annotations

import os

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.layout import NvmeLayout
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import (
    LayoutError,
    mkfs_argv,
    parse_blkid_export,
)
from storagefakes import (
    DEV,
    FSTAB,
    RAID,
    FakeInspector,
    FakeRunner,
    action,
    fx,
    kinds,
    layout,
    raid_member,
    raw_device,
    spec,
)

# --------------------------------------------------------------------------- planning


def test_plan_for_an_empty_device(tmp_path):
    lay, state = layout(tmp_path, [raw_device("empty")], directories=[dict(path="models", owner="0", group="0",
                                                                           mode="0755")])
    acts = lay.plan(state)
    assert kinds(acts) == ["partition", "mkfs", "mkdir", "mount", "fstab", "directory"]
    assert acts[0].text == ("partition /dev/loopX: GPT, partition 1 from 1 MiB to the end, type 8300, "
                            "name aiinfra-cache")
    assert action(acts, "fstab").after.endswith(" %s xfs noatime,nofail 0 2\n" % (tmp_path / "mnt"))
    assert lay.runner.commands == []                                     # planning runs nothing


def test_guard_names_every_refused_device_and_runs_nothing(tmp_path):
    lay, state = layout(tmp_path, [raw_device("foreign-ext4", "/dev/loop7"), raw_device("foreign-gpt2", "/dev/loop8"),
                                   raw_device("empty", "/dev/loop9")],
                        raid=dict(level=0, chunk_kib=512, name="md-cache"), wipe_serials=["/dev/loop9"])
    for step in (lay.guard, lay.plan):                                   # plan runs the guard first
        with pytest.raises(LayoutError) as err:
            step(state)
        msg = err.value.msg
        assert "nothing was changed" in msg
        assert "/dev/loop7 (/dev/loop7) holds ext4 filesystem label=data" in msg
        assert "/dev/loop8 (/dev/loop8) holds gpt partition table with 2 partitions (1:data1, 2:data2)" in msg
        assert "/dev/loop9" not in msg
        assert [d["class"] for d in err.value.result["devices"]] == ["foreign", "foreign", "empty"]
        assert err.value.result["actions"] == []
    assert lay.runner.commands == []


def test_plan_wipes_only_named_devices_first(tmp_path):
    lay, state = layout(tmp_path, [raw_device("foreign-ext4", "/dev/loop7")], wipe_serials=["/var/tmp/n1.img"])
    acts = lay.plan(state)
    assert kinds(acts)[:3] == ["wipe", "partition", "mkfs"]
    assert acts[0].text == "wipe /dev/loop7: erase ext4 filesystem label=data (allowed by wipe_serials)"
    assert acts[0].public() == dict(kind="wipe", target="/dev/loop7", before="ext4 filesystem label=data",
                                    after=None, destructive=True, reboot=False, text=acts[0].text)
    assert [a.kind for a in acts if a.destructive] == ["wipe"]


def test_plan_from_partition_only_skips_partitioning(tmp_path):
    lay, state = layout(tmp_path, [raw_device("ours-partition")])
    assert kinds(lay.plan(state)) == ["mkfs", "mkdir", "mount", "fstab"]


def test_plan_complete_single_device_is_empty_and_has_no_diff(tmp_path):
    (tmp_path / "mnt").mkdir()
    uuid = parse_blkid_export(fx("ours-xfs.blkid-p1.txt"))["UUID"]
    runner = FakeRunner({("blkid", "-p", "-o", "export", DEV + "p1"): (0, fx("ours-xfs.blkid-p1.txt"), "")})
    fstab = tmp_path / "root" / "etc" / "fstab"
    fstab.parent.mkdir(parents=True)
    fstab.write_text(FSTAB + "UUID=%s %s xfs noatime,nofail 0 2\n" % (uuid, tmp_path / "mnt"))
    lay, state = layout(tmp_path, [raw_device("ours-xfs")], runner=runner)
    majmin = "%d:%d" % (os.major(os.stat("/dev/null").st_rdev), os.minor(os.stat("/dev/null").st_rdev))
    lay._majmin_of = lambda node: majmin
    state.mounts = [dict(majmin=majmin, target=str(tmp_path / "mnt"), source=DEV + "p1", fstype="xfs",
                         options=["rw", "noatime"], super_options="rw,attr2")]
    assert lay.plan(state) == []
    assert state.uuid == uuid
    assert lay.diff(state, []) == []


def test_plan_refuses_a_mount_point_taken_by_something_else(tmp_path):
    lay, state = layout(tmp_path, [raw_device("empty")])
    state.mounts = [dict(majmin="0:55", target=str(tmp_path / "mnt"), source="tmpfs", fstype="tmpfs",
                         options=["rw"], super_options="")]
    with pytest.raises(LayoutError, match="already a mount point of tmpfs"):
        lay.plan(state)


def test_plan_raid_from_empty_devices(tmp_path):
    lay, state = layout(tmp_path, [raw_device("empty", "/dev/loop7"), raw_device("empty", "/dev/loop8")], raid=RAID)
    acts = lay.plan(state)
    assert kinds(acts) == ["partition", "partition", "create-array", "mkfs", "mkdir", "mount", "fstab",
                           "mdadm-conf"]
    assert acts[0].text.endswith("type FD00, name aiinfra-cache")
    assert acts[2].text == ("create-array /dev/md/md-cache: RAID0, chunk 512 KiB, metadata 1.2, "
                            "members /dev/loop7, /dev/loop8")
    assert "ARRAY /dev/md/md-cache" in action(acts, "mdadm-conf").after


def test_plan_raid_members_not_assembled_are_assembled_not_recreated(tmp_path):
    lay, state = layout(tmp_path, [raid_member("/dev/loop7"), raid_member("/dev/loop8")], raid=RAID)
    assert [d["class"] for d in state.devices] == ["ours-exact", "ours-exact"]
    acts = lay.plan(state)
    assert kinds(acts)[:2] == ["assemble-array", "mkfs"]
    assert "create-array" not in kinds(acts) and "partition" not in kinds(acts)
    assert "unless the assembled array already holds it" in acts[1].text
    assert not any(a.destructive for a in acts)


def test_plan_raid_members_without_partition_nodes_rescan_then_assemble(tmp_path):
    members = []
    for device in ("/dev/loop7", "/dev/loop8"):
        raw = raid_member(device)
        raw.update(partition_nodes={}, part_examine={})              # blkid probed at the offset only
        members.append(raw)
    lay, state = layout(tmp_path, members, raid=RAID)
    assert [d["needs_rescan"] for d in state.devices] == [True, True]
    assert kinds(lay.plan(state))[:4] == ["rescan", "rescan", "assemble-array", "mkfs"]


def test_plan_raid_assembled_and_complete_is_empty(tmp_path):
    (tmp_path / "mnt").mkdir()
    brief = "ARRAY /dev/md127 metadata=1.2 name=node1:md-cache UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9\n"
    fs = "DEVNAME=/dev/md127\nLABEL=model-cache\nUUID=u-1\nTYPE=xfs\nUSAGE=filesystem\n"
    runner = FakeRunner({("blkid", "-p", "-o", "export", "/dev/md127"): (0, fs, ""),
                         ("mdadm", "--detail", "--brief", "/dev/md127"): (0, brief, "")})
    etc = tmp_path / "root" / "etc"
    (etc / "mdadm").mkdir(parents=True)
    (etc / "mdadm" / "mdadm.conf").write_text(
        "MAILADDR root\nARRAY /dev/md/md-cache metadata=1.2 name=node1:md-cache "
        "UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9\n")
    (etc / "fstab").write_text("UUID=u-1 %s xfs noatime,nofail 0 2\n" % (tmp_path / "mnt"))
    inspector = FakeInspector({"loop7p1": ["md127"], "loop8p1": ["md127"]})
    lay, state = layout(tmp_path, [raid_member("/dev/loop7"), raid_member("/dev/loop8")], raid=RAID,
                        runner=runner, inspector=inspector)
    lay._majmin_of = lambda node: "9:127"
    state.mounts = [dict(majmin="9:127", target=str(tmp_path / "mnt"), source="/dev/md127", fstype="xfs",
                         options=["rw", "noatime"], super_options="rw")]
    assert lay.plan(state) == []
    assert state.uuid == "u-1"
    assert lay.diff(state, []) == []


def test_plan_raid_with_members_that_disagree_fails_before_acting(tmp_path):
    lay, state = layout(tmp_path, [raid_member("/dev/loop7"), raw_device("empty", "/dev/loop8")], raid=RAID)
    with pytest.raises(LayoutError, match="members of array md-cache disagree"):
        lay.plan(state)
    assert lay.runner.commands == []


def test_plan_remounts_for_missing_vfs_flags_and_warns_for_others(tmp_path):
    (tmp_path / "mnt").mkdir()
    runner = FakeRunner({("blkid", "-p", "-o", "export", DEV + "p1"): (0, fx("ours-xfs.blkid-p1.txt"), "")})
    lay, state = layout(tmp_path, [raw_device("ours-xfs")], runner=runner)
    lay.params["mount"]["options"] = ["noatime", "allocsize=64m"]
    lay._majmin_of = lambda node: "7:10"
    state.mounts = [dict(majmin="7:10", target=str(tmp_path / "mnt"), source=DEV + "p1", fstype="xfs",
                         options=["rw", "relatime"], super_options="rw,attr2")]
    acts = lay.plan(state)
    mnt = str(tmp_path / "mnt")
    assert (acts[0].kind, acts[0].target, acts[0].text) == ("remount", mnt, "remount %s: add mount options noatime"
                                                            % mnt)
    assert (acts[0].before, acts[0].after) == ("rw,relatime", "rw,relatime,noatime")
    assert "allocsize=64m" in lay.node.warnings[0]


def test_a_filesystem_of_another_kind_is_replaced_only_on_devices_named_for_wiping(tmp_path):
    ext4 = "DEVNAME=/dev/md127\nLABEL=data\nUUID=u-old\nTYPE=ext4\nUSAGE=filesystem\n"
    runner = FakeRunner({("blkid", "-p", "-o", "export", "/dev/md127"): (0, ext4, "")})
    members = [raid_member("/dev/loop7"), raid_member("/dev/loop8")]
    assembled = FakeInspector({"loop7p1": ["md127"], "loop8p1": ["md127"]})
    lay, state = layout(tmp_path, members, raid=RAID, runner=runner, inspector=assembled)
    with pytest.raises(LayoutError, match="/dev/md127 holds ext4 filesystem label=data, not xfs label=model-cache"):
        lay.plan(state)
    lay, state = layout(tmp_path, members, raid=RAID, runner=runner, inspector=assembled,
                        wipe_serials=["/dev/loop7", "/dev/loop8"])
    acts = lay.plan(state)
    mkfs = action(acts, "mkfs")
    assert mkfs.destructive and (mkfs.before, mkfs.after) == ("ext4 filesystem label=data", "xfs label=model-cache")
    assert mkfs.text == "mkfs /dev/md127: xfs label=model-cache"
    assert [a.kind for a in acts if a.destructive] == ["mkfs"]


def test_select_never_picks_the_root_disk(tmp_path):
    class Inspector(FakeInspector):
        def candidates(self):
            return [dict(name="vda", path="/dev/vda", type="disk", size=10 ** 12, tran="virtio"),
                    dict(name="nvme1n1", path="/dev/nvme1n1", type="disk", size=10 ** 12, tran="nvme"),
                    dict(name="nvme2n1", path="/dev/nvme2n1", type="disk", size=10 ** 12, tran="nvme")]

        def system_majmins(self, mounts):
            return {"254:1"}

        def majmin(self, name):
            return {"vda": "254:0", "vda1": "254:1", "nvme1n1": "259:0", "nvme2n1": "259:1"}[name]

        def partitions_of(self, name):
            return {1: "/dev/vda1"} if name == "vda" else {}

    lay = NvmeLayout(spec(devices=None, select=dict(min_size="500G")), Node(FakeRunner(), str(tmp_path)))
    lay.inspector = Inspector({"nvme2n1": ["dm-0"]})
    assert lay.resolve_paths([], set()) == ["/dev/nvme1n1"]
    lay.params["select"] = dict(transport="pcie")                   # the spec's word: lsblk says nvme
    assert lay.resolve_paths([], set()) == ["/dev/nvme1n1"]
    lay.params["select"] = dict(transport="sata")
    with pytest.raises(LayoutError, match="select matched no device"):
        lay.resolve_paths([], set())


def test_partition_size_difference_is_reported_not_resized(tmp_path):
    lay, state = layout(tmp_path, [raw_device("ours-partition")], reserve_bytes=100 * 1024 * 1024)
    acts = lay.plan(state)
    assert "partition" not in kinds(acts) and "wipe" not in kinds(acts)
    assert "ends at sector 1048542" in lay.node.warnings[0] and "not resized" in lay.node.warnings[0]
    same, state = layout(tmp_path, [raw_device("ours-partition")])
    same.plan(state)
    assert same.node.warnings == []


def test_xfs_below_its_minimum_size_is_refused_before_partitioning(tmp_path):
    small = raw_device("empty", lsblk=fx("empty.lsblk.txt").replace("536870912", str(256 * 1024 * 1024)))
    lay, state = layout(tmp_path, [small])
    with pytest.raises(LayoutError, match="xfs needs at least 300 MiB, the layout leaves 255 MiB"):
        lay.plan(state)
    ext4, state = layout(tmp_path, [small], filesystem=dict(type="ext4", label="model-cache"))
    assert kinds(ext4.plan(state))[:2] == ["partition", "mkfs"]


# --------------------------------------------------------------------------- result and diff


def test_diff_shows_the_files_then_only_the_block_devices_acted_on(tmp_path):
    fstab = tmp_path / "root" / "etc" / "fstab"
    fstab.parent.mkdir(parents=True)
    fstab.write_text(FSTAB)
    lay, state = layout(tmp_path, [raw_device("foreign-ext4", "/dev/loop7"), raw_device("empty", "/dev/loop8")],
                        raid=RAID, wipe_serials=["/dev/loop7"])
    acts = lay.plan(state)
    diff = lay.diff(state, acts)
    assert [d["before_header"] for d in diff] == [
        "/etc/fstab", "/etc/mdadm/mdadm.conf", "block devices", "directories", "mounts"]
    assert diff[0]["before"] == FSTAB and diff[0]["after"].startswith(FSTAB)
    assert "<uuid-of-the-new-filesystem> %s xfs noatime,nofail 0 2\n" % (tmp_path / "mnt") in diff[0]["after"]
    assert diff[1]["before"] == "" and diff[1]["after"].startswith("ARRAY /dev/md/md-cache metadata=1.2")
    block = diff[2]
    assert block["before"] == "/dev/loop7 = ext4 filesystem label=data\n"    # only what is there now
    assert block["after"] == (
        "/dev/loop7 = GPT, partition 1 from 1 MiB to the end, type FD00, name aiinfra-cache\n"
        "/dev/loop8 = GPT, partition 1 from 1 MiB to the end, type FD00, name aiinfra-cache\n"
        "/dev/md/md-cache = RAID0, chunk 512 KiB, metadata 1.2, members /dev/loop7, /dev/loop8\n"
        "(new array) = xfs label=model-cache\n")


def test_check_mode_result_says_the_initramfs_would_need_an_update(tmp_path):
    devices = [raw_device("empty", "/dev/loop7"), raw_device("empty", "/dev/loop8")]
    lay, state = layout(tmp_path, devices, raid=RAID, check_mode=True)
    acts = lay.plan(state)
    result = lay.result(state, acts)
    assert result["initramfs_update_needed"] is True
    assert result["uuid"] is None and result["mount"]["mounted"] is False
    assert result["fstab_line"] == "UUID=<uuid-of-the-new-filesystem> %s xfs noatime,nofail 0 2" % (tmp_path / "mnt")
    assert [d["class"] for d in result["devices"]] == ["empty", "empty"]
    lay, state = layout(tmp_path, devices, raid=RAID)                   # a real run, before apply
    assert lay.result(state, lay.plan(state))["initramfs_update_needed"] is False


# --------------------------------------------------------------------------- apply


def test_apply_raid_from_empty_devices_runs_the_planned_commands_in_order(tmp_path):
    """The RAID path end to end with a fake node (this CI kernel has no md driver)."""
    nodes = {}
    for name in ("loop7", "loop8"):
        nodes[name] = tmp_path / ("%sp1" % name)
    inspector = FakeInspector()

    def after_sfdisk(argv):            # the kernel learns about the new partition
        name = os.path.basename(argv[-1])
        nodes[name].write_text("")
        inspector._partitions[name] = {1: str(nodes[name])}

    def after_mdadm(argv):
        if argv[1] == "--create":
            for name in nodes:
                inspector._holders[os.path.basename(str(nodes[name]))] = ["md127"]

    fs = "DEVNAME=/dev/md127\nLABEL=model-cache\nUUID=u-new\nTYPE=xfs\nUSAGE=filesystem\n"
    brief = "ARRAY /dev/md/md-cache metadata=1.2 UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9 name=node1:md-cache\n"
    runner = FakeRunner(
        outputs={("blkid", "-p", "-o", "export", "/dev/md127"): [(2, "", ""), (0, fs, "")],
                 ("mdadm", "--detail", "--brief", "/dev/md127"): (0, brief, "")},
        hooks={"sfdisk": after_sfdisk, "mdadm": after_mdadm})
    conf = tmp_path / "root" / "etc" / "mdadm" / "mdadm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("MAILADDR root\n")
    lay, state = layout(tmp_path, [raw_device("empty", "/dev/loop7"), raw_device("empty", "/dev/loop8")],
                        runner=runner, inspector=inspector, raid=RAID,
                        directories=[dict(path="models", mode="0750")])
    acts = lay.plan(state)
    lay.apply(state, acts)
    p7, p8 = str(nodes["loop7"]), str(nodes["loop8"])
    mnt = str(tmp_path / "mnt")
    assert runner.commands == [
        ["sfdisk", "--no-reread", "--no-tell-kernel", "-q", "/dev/loop7"],
        ["partprobe", "/dev/loop7"],
        ["wipefs", "-a", p7],
        ["sfdisk", "--no-reread", "--no-tell-kernel", "-q", "/dev/loop8"],
        ["partprobe", "/dev/loop8"],
        ["wipefs", "-a", p8],
        ["mdadm", "--create", "/dev/md/md-cache", "--run", "--level=0", "--raid-devices=2", "--chunk=512K",
         "--metadata=1.2", "--name=md-cache", p7, p8],
        ["mkfs.xfs", "-L", "model-cache", "-d", "su=512k,sw=2", "-f", "/dev/md127"],
        ["mount", "-t", "xfs", "-o", "noatime", "/dev/md127", mnt],
    ]
    # 512 MiB devices of 512-byte sectors: 1 MiB to the last usable sector (1048575 - 33), type FD00
    table = 'label: gpt\nstart=2048, size=1046495, type=A19D880F-05FC-4D3B-A006-743F0F84911E, name="aiinfra-cache"\n'
    assert runner.stdin == [(runner.commands[0], table), (runner.commands[3], table)]
    line = "ARRAY /dev/md/md-cache metadata=1.2 UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9 name=node1:md-cache"
    assert conf.read_text() == "MAILADDR root\n" + line + "\n"
    assert state.initramfs_update_needed is True
    assert state.uuid == "u-new"
    fstab = (tmp_path / "root" / "etc" / "fstab").read_text()
    assert fstab == "UUID=u-new %s xfs noatime,nofail 0 2\n" % mnt
    assert oct(os.stat(os.path.join(mnt, "models")).st_mode & 0o777) == "0o750"
    assert kinds(acts) == ["partition", "partition", "create-array", "mkfs", "mkdir", "mount",
                           "fstab", "mdadm-conf", "directory"]
    # the returned actions say what was done: the real target, line and file contents
    assert action(acts, "mkfs").text == "mkfs /dev/md127: xfs label=model-cache"
    assert action(acts, "fstab").text == "fstab /etc/fstab: UUID=u-new %s xfs noatime,nofail 0 2" % mnt
    assert action(acts, "fstab").after == fstab
    assert action(acts, "mdadm-conf").text == "mdadm-conf /etc/mdadm/mdadm.conf: " + line
    assert action(acts, "mdadm-conf").after == conf.read_text()
    assert action(acts, "directory").text == "directory %s/models: create (owner -, group -, mode 0750)" % mnt
    assert lay.result(state, acts)["initramfs_update_needed"] is True


def test_apply_drops_what_turned_out_to_be_done_already(tmp_path):
    """An assembled array that already holds our filesystem gets no mkfs; a directory that is
    already right gets no change: neither is returned as done."""
    (tmp_path / "mnt" / "models").mkdir(parents=True)
    os.chmod(tmp_path / "mnt" / "models", 0o755)
    inspector = FakeInspector()

    def after_mdadm(argv):
        if argv[1] == "--assemble":
            for name in ("loop7p1", "loop8p1"):
                inspector._holders[name] = ["md127"]

    fs = "DEVNAME=/dev/md127\nLABEL=model-cache\nUUID=u-1\nTYPE=xfs\nUSAGE=filesystem\n"
    runner = FakeRunner({("blkid", "-p", "-o", "export", "/dev/md127"): (0, fs, ""),
                         ("mdadm", "--detail", "--brief", "/dev/md127"):
                             (0, "ARRAY /dev/md127 metadata=1.2 UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9\n", "")},
                        hooks={"mdadm": after_mdadm})
    lay, state = layout(tmp_path, [raid_member("/dev/loop7"), raid_member("/dev/loop8")], raid=RAID, runner=runner,
                        inspector=inspector, directories=[dict(path="models", mode="0755")])
    acts = lay.plan(state)
    assert kinds(acts) == ["assemble-array", "mkfs", "mount", "fstab", "mdadm-conf", "directory"]
    lay.apply(state, acts)
    assert kinds(acts) == ["assemble-array", "mount", "fstab", "mdadm-conf"]
    assert not any(c[0].startswith("mkfs") for c in runner.commands)
    assert state.uuid == "u-1"


@pytest.mark.parametrize("sector, reserve, start, size", [
    (512, 0, 2048, 1048542 - 2048 + 1),                           # last usable: 1048576 - 1 - 32 - 1
    (512, 64 << 20, 2048, 1048542 - 131072 - 2048 + 1),
    (4096, 0, 256, 131066 - 256 + 1),                              # 4Kn: the entries take 4 sectors
    (4096, (64 << 20) + 1000, 256, 131066 - 16384 - 256 + 1),      # a reserve that is no whole sector
])
def test_the_partition_table_is_written_in_the_devices_own_sectors(tmp_path, sector, reserve, start, size):
    """What sfdisk gets: 1 MiB to the end less reserve_bytes, as ``sgdisk -n 1:1MiB:-<reserve>K`` made it
    (and as _check_partition_sizes expects it), in logical sectors of the device."""
    class Sectors(FakeInspector):
        def logical_sector_size(self, name):
            return sector

    lay, state = layout(tmp_path, [raw_device("empty")], inspector=Sectors(), reserve_bytes=reserve,
                        partition_label="cache ä,=1")
    lay._reread = lambda device, expect=True: DEV + "p1"
    lay.apply(state, [a for a in lay.plan(state) if a.kind == "partition"])
    assert lay.runner.stdin == [(["sfdisk", "--no-reread", "--no-tell-kernel", "-q", DEV],
                                 'label: gpt\nstart=%d, size=%d, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, '
                                 'name="cache ä,=1"\n' % (start, size))]


def test_a_device_too_small_for_the_reserve_gets_no_table(tmp_path):
    lay, state = layout(tmp_path, [raw_device("empty")], reserve_bytes=512 << 20, filesystem=dict(
        type="ext4", label="model-cache"))
    with pytest.raises(LayoutError, match=r"nothing was changed on /dev/loopX: 536870912 bytes leave no room "
                                          r"for a partition from 1 MiB with reserve_bytes=536870912"):
        lay.apply(state, [a for a in lay.plan(state) if a.kind == "partition"])
    assert lay.runner.commands == []


def test_apply_ext4_whole_devices_uses_stride_and_reserve_is_ignored(tmp_path):
    runner = FakeRunner(outputs={("blkid", "-p", "-o", "export", "/dev/md127"): [(2, "", ""), (0, "UUID=u\n", "")]})
    lay, state = layout(tmp_path, [raw_device("empty", "/dev/loop7"), raw_device("empty", "/dev/loop8")],
                        runner=runner, inspector=FakeInspector(), raid=dict(RAID, chunk_kib=64), partition=False,
                        filesystem=dict(type="ext4", label="model-cache"), reserve_bytes=1 << 30)
    acts = lay.plan(state)
    assert kinds(acts)[:2] == ["create-array", "mkfs"]
    assert acts[0].text.endswith("members /dev/loop7, /dev/loop8")
    assert mkfs_argv(lay.params["filesystem"], lay.params["raid"], 2, "/dev/md127", True) == [
        "mkfs.ext4", "-L", "model-cache", "-E", "stride=16,stripe-width=32", "-F", "/dev/md127"]


def test_apply_stops_before_any_change_when_a_device_vanished_after_planning(tmp_path):
    class Gone(FakeInspector):
        def vanished(self, device):
            return "device vanished or has no media: %s has size 0" % device

    lay, state = layout(tmp_path, [raw_device("empty")], inspector=Gone())
    acts = lay.plan(state)
    with pytest.raises(LayoutError, match="nothing was changed on any device; device vanished or has no media: "
                                          "/dev/loopX has size 0"):
        lay.apply(state, acts)
    assert lay.runner.commands == []


def test_a_failed_blkid_of_the_filesystem_target_is_not_taken_for_blank(tmp_path):
    runner = FakeRunner({("blkid", "-p", "-o", "export", DEV + "p1"): (2, "", "blkid: error: Permission denied\n")})
    lay, state = layout(tmp_path, [raw_device("ours-partition")], runner=runner)
    acts = lay.plan(state)
    assert kinds(acts)[0] == "mkfs"
    with pytest.raises(LayoutError, match="cannot probe /dev/loopXp1: blkid -p failed"):
        lay.apply(state, acts)
    assert lay.runner.commands == []                                    # no mkfs


def test_a_failed_command_names_the_step_and_what_was_done_before(tmp_path):
    runner = FakeRunner({("mkfs.xfs", "-L", "model-cache", "-f", DEV + "p1"): (1, "", "mkfs.xfs: no space\n")})
    runner.commands.append(["sysctl", "-w", "earlier capability of the same batch"])
    lay, state = layout(tmp_path, [raw_device("empty")], runner=runner)
    lay._reread = lambda device, expect=True: DEV + "p1"                # the kernel shows the new partition
    acts = lay.plan(state)
    with pytest.raises(LayoutError) as err:
        lay.apply(state, acts)
    assert err.value.msg.startswith("mkfs.xfs -L model-cache -f /dev/loopXp1 failed (rc=1): mkfs.xfs: no space")
    assert err.value.msg.endswith("; actions done before: sfdisk /dev/loopX, wipefs /dev/loopXp1")
