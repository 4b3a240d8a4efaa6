"""nvme_layout: parsing, classification, guard, file editing and planning, without devices.

Tool outputs come from tests/fixtures/storage/, recorded from loop devices by
tests/fixtures/storage/record.sh (each file's header names the command). The md superblock
outputs below are written in the format of mdadm's ``export_examine_super1`` (super1.c),
because the kernel the fixtures were recorded on has no md driver.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nvme_layout as nl
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError
from ansible_collections.aiinfra.datapath.plugins.modules import nvme_layout

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "storage"
DEV = "/dev/loopX"

EXAMINE_OURS = "MD_LEVEL=raid0\nMD_DEVICES=2\nMD_NAME=node1:md-cache\n" \
               "MD_UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9\nMD_UPDATE_TIME=1764690000\n" \
               "MD_DEV_UUID=00112233:44556677:8899aabb:ccddeeff\nMD_EVENTS=0\n"
EXAMINE_OTHER = EXAMINE_OURS.replace("node1:md-cache", "db01:pgdata").replace("raid0", "raid1")
RAID_MEMBER_BLKID = "DEVNAME=/dev/loopXp1\nUUID=3a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9\n" \
                    "LABEL=node1:md-cache\nTYPE=linux_raid_member\nUSAGE=raid\n" \
                    "PART_ENTRY_SCHEME=gpt\nPART_ENTRY_NAME=aiinfra-cache\nPART_ENTRY_NUMBER=1\n"
RAID_MEMBER_WIPEFS = '{"signatures": [{"device": "loopXp1", "offset": "0x1000", ' \
                     '"type": "linux_raid_member", "uuid": "3a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", ' \
                     '"label": "node1:md-cache"}]}'


def fx(name: str) -> str:
    return (FIXTURES / name).read_text()


def raw_device(scenario: str, device: str = DEV, nodes: bool = True, **extra) -> dict:
    """The raw dict ``Inspector.inspect`` returns, built from one recorded scenario."""
    raw = dict(path=device, device=device, majmin="7:9", ro=False, backing_file="/var/tmp/n1.img",
               aliases=[], lsblk=fx("%s.lsblk.txt" % scenario), wipefs=fx("%s.wipefs.txt" % scenario),
               blkid=fx("%s.blkid.txt" % scenario), partition_nodes={}, part_blkid={}, part_wipefs={},
               part_examine={}, holders=[], mounts=[], swap=False)
    if "PTTYPE=gpt" in raw["blkid"]:
        raw["sgdisk"] = fx("%s.sgdisk.txt" % scenario)
    if (FIXTURES / ("%s.blkid-p1.txt" % scenario)).exists():
        raw["part_blkid"][1] = fx("%s.blkid-p1.txt" % scenario)
        raw["part_wipefs"][1] = fx("%s.wipefs-p1.txt" % scenario)
        if nodes:
            raw["partition_nodes"][1] = DEV + "p1"
    raw.update(extra)
    return raw


def spec(**over) -> dict:
    base = dict(devices=[DEV], select=None, raid=None, partition=True, partition_label="aiinfra-cache",
                filesystem=dict(type="xfs", label="model-cache"),
                mount=dict(path="/mnt/model-cache", options=["noatime"]),
                directories=[], wipe_serials=[], reserve_bytes=0,
                fstab="/etc/fstab", mdadm_conf="/etc/mdadm/mdadm.conf", root="/")
    base.update(over)
    return base


def classify(scenario: str, n: int = 1, **over):
    extra = over.pop("raw", {})
    return nl.classify(nl.build_device(raw_device(scenario, **extra)), spec(**over), n)


# --------------------------------------------------------------------------- parsers

def test_parse_recorded_gpt_with_two_partitions():
    info = nl.parse_sgdisk(fx("foreign-gpt2.sgdisk.txt"))
    assert info["sector_size"] == 512 and info["sectors"] == 1048576 and info["last_usable"] == 1048542
    assert info["partitions"] == [
        dict(number=1, start=2048, end=206847, code="8300", name="data1"),
        dict(number=2, start=206848, end=1048542, code="8300", name="data2"),
    ]
    assert nl.parse_sgdisk(fx("empty.sgdisk.txt"))["partitions"] == []


def test_parse_wipefs_and_blkid():
    assert nl.parse_wipefs_json(fx("empty.wipefs.txt")) == []
    assert [s["type"] for s in nl.parse_wipefs_json(fx("foreign-gpt2.wipefs.txt"))] == ["gpt", "gpt", "PMBR"]
    ext4 = nl.parse_wipefs_json(fx("foreign-ext4.wipefs.txt"))
    assert ext4[0]["type"] == "ext4" and ext4[0]["label"] == "data" and ext4[0]["offset"] == "0x438"
    assert nl.parse_blkid_export(fx("empty.blkid.txt")) == {}
    part = nl.parse_blkid_export(fx("ours-xfs.blkid-p1.txt"))
    assert part["TYPE"] == "xfs" and part["LABEL"] == "model-cache" and part["PART_ENTRY_NAME"] == "aiinfra-cache"


def test_parse_wipefs_text_output_of_older_util_linux():
    text = "DEVICE OFFSET TYPE UUID LABEL\nsdb    0x438  ext4 92920a13-6f19-455d-8357-df241c254464 data\n"
    assert nl.parse_wipefs_json(text) == [
        dict(type="ext4", offset="0x438", uuid="92920a13-6f19-455d-8357-df241c254464", label="data")]


def test_parse_mountinfo_unescapes_paths():
    text = ("36 25 259:3 / /mnt/model\\040cache rw,noatime shared:1 - xfs /dev/md127 rw,attr2,inode64\n"
            "25 1 0:31 / / rw,relatime - overlay overlay rw,lowerdir=/,upperdir=/x/u,workdir=/x/w\n")
    mounts = nl.parse_mountinfo(text)
    assert mounts[0]["target"] == "/mnt/model cache" and mounts[0]["majmin"] == "259:3"
    assert "noatime" in mounts[0]["options"] and mounts[0]["fstype"] == "xfs"
    assert nl.mount_options_missing(mounts[0], ["noatime", "nodiratime"]) == ["nodiratime"]


@pytest.mark.parametrize("value,expected", [
    (1000, 1000), ("512G", 512 * 1024 ** 3), ("3.84TB", 3840000000000), ("1TiB", 1024 ** 4),
    ("100", 100), ("2 MiB", 2 * 1024 ** 2),
])
def test_parse_size(value, expected):
    assert nl.parse_size(value) == expected


def test_parse_size_rejects_garbage():
    with pytest.raises(nl.LayoutError, match="cannot read size"):
        nl.parse_size("lots")


def test_mdadm_brief_and_name_matching():
    brief = "ARRAY /dev/md/md-cache metadata=1.2 name=node1:md-cache UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9\n"
    line = nl.parse_mdadm_brief(brief)
    assert nl._canonical_array_line("ARRAY /dev/md127" + line[len("ARRAY /dev/md/md-cache"):], "md-cache") == line
    assert nl._array_uuid(line) == "3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9"
    assert nl.md_name_matches("node1:md-cache", "md-cache") and nl.md_name_matches("md-cache", "md-cache")
    assert not nl.md_name_matches("node1:md-cache2", "md-cache") and not nl.md_name_matches(None, "x")


# --------------------------------------------------------------------------- classification

def test_empty_device():
    dev = classify("empty")
    assert (dev["class"], dev["member"], dev["member_state"]) == ("empty", None, "missing")
    whole = classify("empty", partition=False)
    assert (whole["class"], whole["member"], whole["member_state"]) == ("empty", DEV, "empty")


def test_our_partition_without_filesystem_is_partial():
    dev = classify("ours-partition")
    assert dev["class"] == "ours-partial" and dev["member"] == DEV + "p1" and dev["member_state"] == "empty"


def test_our_partition_with_our_filesystem_is_exact():
    dev = classify("ours-xfs")
    assert dev["class"] == "ours-exact" and dev["member_state"] == "fs-ours"
    assert dev["found"] == ["gpt partition aiinfra-cache with xfs filesystem label=model-cache"]


def test_kernel_without_partition_node_needs_rescan_not_mkfs():
    dev = classify("ours-xfs", raw=dict(nodes=False))
    assert dev["class"] == "ours-exact" and dev["needs_rescan"] and dev["member"] is None


def test_other_label_or_type_on_our_partition_is_foreign():
    dev = classify("ours-xfs", filesystem=dict(type="xfs", label="scratch"))
    assert dev["class"] == "foreign"
    assert dev["found"] == ["gpt partition aiinfra-cache holding xfs filesystem label=model-cache"]
    assert classify("ours-xfs", filesystem=dict(type="ext4", label="model-cache"))["class"] == "foreign"


def test_filesystem_where_an_array_member_is_wanted_is_foreign():
    dev = classify("ours-xfs", 2, raid=dict(level=0, chunk_kib=512, name="md-cache"))
    assert dev["class"] == "foreign" and "xfs filesystem label=model-cache" in dev["found"][0]


def test_foreign_partition_table_is_named_with_its_partitions():
    dev = classify("foreign-gpt2")
    assert dev["class"] == "foreign"
    assert dev["found"] == ["gpt partition table with 2 partitions (1:data1, 2:data2)"]


def test_foreign_whole_device_filesystem_in_both_modes():
    assert classify("foreign-ext4")["found"] == ["ext4 filesystem label=data"]
    whole = classify("foreign-ext4", partition=False)
    assert whole["class"] == "foreign" and whole["found"] == ["ext4 filesystem label=data"]


def test_whole_device_filesystem_is_ours_only_without_partitioning():
    assert classify("ours-xfs-whole", partition=False)["class"] == "ours-exact"
    assert classify("ours-xfs-whole")["class"] == "foreign"


def test_raid_members_ours_and_of_another_array():
    raid = dict(level=0, chunk_kib=512, name="md-cache")
    extra = dict(part_blkid={1: RAID_MEMBER_BLKID}, part_wipefs={1: RAID_MEMBER_WIPEFS},
                 part_examine={1: EXAMINE_OURS})
    ours = classify("ours-partition", 2, raid=raid, raw=extra)
    assert ours["class"] == "ours-exact" and ours["member_state"] == "raid-ours"
    # same superblock, but the plan now wants three devices: not ours any more
    assert classify("ours-partition", 3, raid=raid, raw=extra)["class"] == "foreign"
    other = classify("ours-partition", 2, raid=raid, raw=dict(extra, part_examine={1: EXAMINE_OTHER}))
    assert other["class"] == "foreign"
    assert "linux_raid_member of array db01:pgdata (level raid1, 2 devices)" in other["found"][0]


def test_lvm_member_is_foreign():
    wipefs = '{"signatures": [{"device": "sdb", "offset": "0x218", "type": "LVM2_member", ' \
             '"uuid": "k3Fq1x-...", "label": null}]}'
    dev = classify("empty", raw=dict(wipefs=wipefs, blkid="DEVNAME=/dev/sdb\nTYPE=LVM2_member\n"))
    assert dev["class"] == "foreign" and dev["found"] == ["LVM2_member"]


def test_mounted_elsewhere_swap_and_holders_are_in_use():
    mounts = [dict(majmin="7:9", target="/srv/data", source="/dev/loopXp1", fstype="xfs",
                   options=["rw"], super_options="")]
    dev = classify("ours-xfs", raw=dict(mounts=mounts))
    assert dev["class"] == "in-use" and dev["found"] == ["/dev/loopXp1 mounted at /srv/data"]
    # mounted at our own mount point is ours
    ours = [dict(mounts[0], target="/mnt/model-cache")]
    assert classify("ours-xfs", raw=dict(mounts=ours))["class"] == "ours-exact"
    assert classify("empty", raw=dict(swap=True))["class"] == "in-use"
    held = classify("foreign-ext4", raw=dict(holders=["dm-0"]))
    assert held["class"] == "in-use" and held["found"] == ["held by dm-0"]


def test_wipe_allowed_by_serial_wwn_path_alias_or_backing_file():
    dev = nl.build_device(raw_device("foreign-ext4", aliases=["/dev/disk/by-id/nvme-X_S1"]))
    dev.update(serial="S1", wwn="eui.0025388b01234567")
    for ident in ("S1", "eui.0025388b01234567", DEV, "/dev/disk/by-id/nvme-X_S1", "/var/tmp/n1.img"):
        assert nl.wipe_allowed(dev, [ident]), ident
    assert not nl.wipe_allowed(dev, ["S2", "/dev/loopY", "/var/tmp/n2.img"])
    assert not nl.wipe_allowed(dev, [])


# --------------------------------------------------------------------------- file editing

FSTAB = ("# /etc/fstab\n"
         "UUID=1111 /  ext4  errors=remount-ro 0 1\n"
         "tmpfs\t/scratch\ttmpfs\tdefaults,size=1g\t0 0\n")


def test_fstab_line_adds_nofail():
    assert nl.fstab_line("u1", "/mnt/c", "xfs", ["noatime"]) == "UUID=u1 /mnt/c xfs noatime,nofail 0 2"
    assert nl.fstab_line("u1", "/mnt/c", "xfs", []) == "UUID=u1 /mnt/c xfs defaults,nofail 0 2"
    assert nl.fstab_line("u1", "/mnt/c", "xfs", ["nofail", "noatime"]).endswith(" nofail,noatime 0 2")


def test_fstab_append_keeps_other_lines_byte_identical():
    line = nl.fstab_line("u1", "/mnt/c", "xfs", ["noatime"])
    after = nl.update_fstab(FSTAB, line, "/mnt/c", "u1")
    assert after == FSTAB + line + "\n"
    assert nl.update_fstab(after, line, "/mnt/c", "u1") == after
    assert nl.update_fstab("", line, "/mnt/c", "u1") == line + "\n"
    assert nl.update_fstab(None, line, "/mnt/c", "u1") == line + "\n"
    assert nl.update_fstab("# no newline", line, "/mnt/c", "u1") == "# no newline\n" + line + "\n"


def test_fstab_replaces_our_line_by_path_or_uuid_only():
    old_by_path = FSTAB.replace("# /etc/fstab\n", "# /etc/fstab\nUUID=old /mnt/c xfs defaults 0 2\n")
    line = nl.fstab_line("u2", "/mnt/c", "xfs", ["noatime"])
    assert nl.update_fstab(old_by_path, line, "/mnt/c", "u2") == FSTAB.replace(
        "# /etc/fstab\n", "# /etc/fstab\n" + line + "\n")
    old_by_uuid = FSTAB + "UUID=u2 /mnt/old xfs defaults 0 2\n"
    assert nl.update_fstab(old_by_uuid, line, "/mnt/c", "u2") == FSTAB + line + "\n"
    commented = FSTAB + "# UUID=u2 /mnt/c xfs defaults 0 2\n"
    assert nl.update_fstab(commented, line, "/mnt/c", "u2") == commented + line + "\n"


def test_mdadm_conf_adds_only_our_array_line():
    conf = "# mdadm.conf\nHOMEHOST <system>\nMAILADDR root\nARRAY /dev/md/other metadata=1.2 UUID=aa:bb:cc:dd\n"
    line = "ARRAY /dev/md/md-cache metadata=1.2 name=node1:md-cache UUID=11:22:33:44"
    after = nl.update_mdadm_conf(conf, line, "/dev/md/md-cache", "11:22:33:44")
    assert after == conf + line + "\n"
    assert nl.update_mdadm_conf(after, line, "/dev/md/md-cache", "11:22:33:44") == after
    stale = conf + "ARRAY /dev/md/md-cache metadata=1.2 UUID=99:99:99:99\n"
    assert nl.update_mdadm_conf(stale, line, "/dev/md/md-cache", "11:22:33:44") == conf + line + "\n"
    assert nl.update_mdadm_conf(None, line, "/dev/md/md-cache", "11:22:33:44") == line + "\n"


def test_mkfs_geometry():
    raid = dict(level=0, chunk_kib=512, name="md-cache")
    fs = dict(type="xfs", label="model-cache")
    assert nl.mkfs_argv(fs, raid, 4, "/dev/md127", False) == [
        "mkfs.xfs", "-L", "model-cache", "-d", "su=512k,sw=4", "/dev/md127"]
    assert nl.mkfs_argv(fs, None, 1, "/dev/nvme0n1p1", True) == [
        "mkfs.xfs", "-L", "model-cache", "-f", "/dev/nvme0n1p1"]
    ext4 = dict(type="ext4", label="model-cache")
    assert nl.mkfs_argv(ext4, raid, 2, "/dev/md127", False) == [
        "mkfs.ext4", "-L", "model-cache", "-E", "stride=128,stripe-width=256", "/dev/md127"]
    assert nl.mkfs_argv(ext4, None, 1, "/dev/sdb", True)[-2:] == ["-F", "/dev/sdb"]


# --------------------------------------------------------------------------- planning

class FakeRunner:
    """Answers read-only commands from ``outputs`` (a list = successive answers); state-changing
    commands (record=True) succeed and are kept in ``commands``; ``hooks`` run after one."""

    def __init__(self, outputs: dict | None = None, hooks: dict | None = None) -> None:
        self.outputs = outputs or {}
        self.hooks = hooks or {}
        self.commands: list[list[str]] = []
        self.calls: list[list[str]] = []

    def which(self, name, required=False):
        return "/usr/sbin/" + name

    def run(self, argv, check=True, data=None, record=False):
        self.calls.append(list(argv))
        if record:
            self.commands.append(list(argv))
        answer = self.outputs.get(tuple(argv), (0, "", "") if record else (2, "", ""))
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if argv[0] in self.hooks:
            self.hooks[argv[0]](argv)
        if check and answer[0] != 0:
            raise CommandError(argv, *answer)
        return answer


class FakeInspector:
    def __init__(self, holders: dict | None = None, partitions: dict | None = None) -> None:
        self._holders = holders or {}
        self._partitions = partitions or {}

    def holders(self, name):
        return self._holders.get(name, [])

    def partitions_of(self, name):
        return self._partitions.get(name, {})

    def vanished(self, device):
        return None


def layout(tmp_path: Path, devices: list[dict], runner: FakeRunner | None = None, mounts=None,
           inspector=None, **over) -> nl.NvmeLayout:
    params = spec(mount=dict(path=str(tmp_path / "mnt"), options=["noatime"]),
                  fstab="/etc/fstab", mdadm_conf="/etc/mdadm/mdadm.conf", **over)
    lay = nl.NvmeLayout(runner or FakeRunner(), params, HostRoot(str(tmp_path / "root")),
                        inspector=inspector or FakeInspector())
    lay.mounts = mounts or []
    n = len(devices)
    for raw in devices:
        dev = nl.classify(nl.build_device(raw), params, n)
        dev["wipe_allowed"] = nl.wipe_allowed(dev, params["wipe_serials"])
        lay.devices.append(dev)
    return lay


def kinds(actions):
    return [a["action"] for a in actions]


def test_plan_for_an_empty_device(tmp_path):
    lay = layout(tmp_path, [raw_device("empty")], directories=[dict(path="models", owner="0", group="0",
                                                                    mode="0755")])
    lay.guard()
    assert kinds(lay.plan()) == ["partition", "mkfs", "mkdir", "mount", "fstab", "directory"]
    assert lay.actions[0]["detail"] == "GPT, partition 1 from 1 MiB to the end, type 8300, name aiinfra-cache"
    assert lay.fstab["after"].endswith(" %s xfs noatime,nofail 0 2\n" % (tmp_path / "mnt"))
    assert lay.runner.commands == []                                     # planning runs nothing


def test_guard_names_every_refused_device_and_runs_nothing(tmp_path):
    lay = layout(tmp_path, [raw_device("foreign-ext4", "/dev/loop7"), raw_device("foreign-gpt2", "/dev/loop8"),
                            raw_device("empty", "/dev/loop9")],
                 raid=dict(level=0, chunk_kib=512, name="md-cache"), wipe_serials=["/dev/loop9"])
    with pytest.raises(nl.LayoutError) as err:
        lay.guard()
    msg = err.value.msg
    assert "nothing was changed" in msg
    assert "/dev/loop7 (/dev/loop7) holds ext4 filesystem label=data" in msg
    assert "/dev/loop8 (/dev/loop8) holds gpt partition table with 2 partitions (1:data1, 2:data2)" in msg
    assert "/dev/loop9" not in msg
    assert [d["class"] for d in err.value.result["devices"]] == ["foreign", "foreign", "empty"]
    assert lay.runner.commands == []


def test_plan_wipes_only_named_devices_first(tmp_path):
    lay = layout(tmp_path, [raw_device("foreign-ext4", "/dev/loop7")], wipe_serials=["/var/tmp/n1.img"])
    lay.guard()
    acts = lay.plan()
    assert kinds(acts)[:3] == ["wipe", "partition", "mkfs"]
    assert acts[0]["detail"] == "erase ext4 filesystem label=data (allowed by wipe_serials)"


def test_plan_from_partition_only_skips_partitioning(tmp_path):
    lay = layout(tmp_path, [raw_device("ours-partition")])
    lay.guard()
    assert kinds(lay.plan()) == ["mkfs", "mkdir", "mount", "fstab"]


def test_plan_complete_single_device_is_empty(tmp_path):
    (tmp_path / "mnt").mkdir()
    uuid = nl.parse_blkid_export(fx("ours-xfs.blkid-p1.txt"))["UUID"]
    runner = FakeRunner({("blkid", "-p", "-o", "export", DEV + "p1"): (0, fx("ours-xfs.blkid-p1.txt"), "")})
    fstab = tmp_path / "root" / "etc" / "fstab"
    fstab.parent.mkdir(parents=True)
    fstab.write_text(FSTAB + "UUID=%s %s xfs noatime,nofail 0 2\n" % (uuid, tmp_path / "mnt"))
    lay = layout(tmp_path, [raw_device("ours-xfs")], runner=runner)
    majmin = "%d:%d" % (os.major(os.stat("/dev/null").st_rdev), os.minor(os.stat("/dev/null").st_rdev))
    lay._majmin_of = lambda node: majmin
    lay.mounts = [dict(majmin=majmin, target=str(tmp_path / "mnt"), source=DEV + "p1", fstype="xfs",
                       options=["rw", "noatime"], super_options="rw,attr2")]
    lay.guard()
    assert lay.plan() == []
    assert lay.uuid == uuid


def test_plan_refuses_a_mount_point_taken_by_something_else(tmp_path):
    lay = layout(tmp_path, [raw_device("empty")])
    lay.mounts = [dict(majmin="0:55", target=str(tmp_path / "mnt"), source="tmpfs", fstype="tmpfs",
                       options=["rw"], super_options="")]
    with pytest.raises(nl.LayoutError, match="already a mount point of tmpfs"):
        lay.plan()


def _raid_member(device: str, examine: str = EXAMINE_OURS) -> dict:
    return raw_device("ours-partition", device, part_blkid={1: RAID_MEMBER_BLKID},
                      part_wipefs={1: RAID_MEMBER_WIPEFS}, part_examine={1: examine},
                      partition_nodes={1: device + "p1"})


RAID = dict(level=0, chunk_kib=512, name="md-cache")


def test_plan_raid_from_empty_devices(tmp_path):
    lay = layout(tmp_path, [raw_device("empty", "/dev/loop7"), raw_device("empty", "/dev/loop8")], raid=RAID)
    lay.guard()
    acts = lay.plan()
    assert kinds(acts) == ["partition", "partition", "create-array", "mkfs", "mkdir", "mount", "fstab",
                           "mdadm-conf"]
    assert acts[0]["detail"].endswith("type FD00, name aiinfra-cache")
    assert acts[2]["detail"] == "RAID0, chunk 512 KiB, metadata 1.2, members /dev/loop7, /dev/loop8"
    assert "ARRAY /dev/md/md-cache" in lay.mdadm["after"]


def test_plan_raid_members_not_assembled_are_assembled_not_recreated(tmp_path):
    lay = layout(tmp_path, [_raid_member("/dev/loop7"), _raid_member("/dev/loop8")], raid=RAID)
    assert [d["class"] for d in lay.devices] == ["ours-exact", "ours-exact"]
    lay.guard()
    acts = lay.plan()
    assert kinds(acts)[:2] == ["assemble-array", "mkfs"]
    assert "create-array" not in kinds(acts) and "partition" not in kinds(acts)
    assert "unless the assembled array already holds it" in acts[1]["detail"]


def test_plan_raid_members_without_partition_nodes_rescan_then_assemble(tmp_path):
    members = []
    for device in ("/dev/loop7", "/dev/loop8"):
        raw = _raid_member(device)
        raw.update(partition_nodes={}, part_examine={})              # blkid probed at the offset only
        members.append(raw)
    lay = layout(tmp_path, members, raid=RAID)
    assert [d["needs_rescan"] for d in lay.devices] == [True, True]
    lay.guard()
    assert kinds(lay.plan())[:4] == ["rescan", "rescan", "assemble-array", "mkfs"]


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
    lay = layout(tmp_path, [_raid_member("/dev/loop7"), _raid_member("/dev/loop8")], raid=RAID,
                 runner=runner, inspector=inspector)
    lay._majmin_of = lambda node: "9:127"
    lay.mounts = [dict(majmin="9:127", target=str(tmp_path / "mnt"), source="/dev/md127", fstype="xfs",
                       options=["rw", "noatime"], super_options="rw")]
    lay.guard()
    assert lay.plan() == []
    assert lay.uuid == "u-1"


def test_plan_raid_with_members_that_disagree_fails_before_acting(tmp_path):
    lay = layout(tmp_path, [_raid_member("/dev/loop7"), raw_device("empty", "/dev/loop8")], raid=RAID)
    lay.guard()
    with pytest.raises(nl.LayoutError, match="members of array md-cache disagree"):
        lay.plan()
    assert lay.runner.commands == []


def test_plan_remounts_for_missing_vfs_flags_and_warns_for_others(tmp_path):
    (tmp_path / "mnt").mkdir()
    runner = FakeRunner({("blkid", "-p", "-o", "export", DEV + "p1"): (0, fx("ours-xfs.blkid-p1.txt"), "")})
    lay = layout(tmp_path, [raw_device("ours-xfs")], runner=runner)
    lay.spec["mount"]["options"] = ["noatime", "allocsize=64m"]
    lay._majmin_of = lambda node: "7:10"
    lay.mounts = [dict(majmin="7:10", target=str(tmp_path / "mnt"), source=DEV + "p1", fstype="xfs",
                       options=["rw", "relatime"], super_options="rw,attr2")]
    acts = lay.plan()
    assert acts[0] == dict(action="remount", target=str(tmp_path / "mnt"), detail="add mount options noatime")
    assert "allocsize=64m" in lay.warnings[0]


def test_select_rule():
    disk = dict(name="nvme1n1", type="disk", size=3840755982336, model="SAMSUNG MZWLR3T8HBLS-00007 ",
                tran="nvme")
    assert nl.match_rule(disk, dict(model="samsung*", min_size="3TB", max_size="4TB", transport="nvme"))
    assert not nl.match_rule(disk, dict(transport="sata"))
    assert not nl.match_rule(disk, dict(min_size="4TB"))
    assert not nl.match_rule(dict(disk, type="loop"), dict())


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

    lay = nl.NvmeLayout(FakeRunner(), spec(devices=None, select=dict(min_size="500G")),
                        HostRoot(str(tmp_path)), inspector=Inspector({"nvme2n1": ["dm-0"]}))
    assert lay.resolve_paths([], set()) == ["/dev/nvme1n1"]
    lay.spec["select"] = dict(transport="sata")
    with pytest.raises(nl.LayoutError, match="select matched no device"):
        lay.resolve_paths([], set())


# --------------------------------------------------------------------------- the module

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
    spec_ = nvme_layout.argument_spec()

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


def test_apply_raid_from_empty_devices_runs_the_planned_commands_in_order(tmp_path):
    """The RAID path end to end with a fake node (this CI kernel has no md driver)."""
    nodes = {}
    for name in ("loop7", "loop8"):
        nodes[name] = tmp_path / ("%sp1" % name)
    inspector = FakeInspector()

    def after_sgdisk(argv):            # the kernel learns about the new partition
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
        hooks={"sgdisk": after_sgdisk, "mdadm": after_mdadm})
    conf = tmp_path / "root" / "etc" / "mdadm" / "mdadm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("MAILADDR root\n")
    lay = layout(tmp_path, [raw_device("empty", "/dev/loop7"), raw_device("empty", "/dev/loop8")],
                 runner=runner, inspector=inspector, raid=RAID,
                 directories=[dict(path="models", mode="0750")])
    lay.guard()
    lay.plan()
    lay.apply()
    p7, p8 = str(nodes["loop7"]), str(nodes["loop8"])
    mnt = str(tmp_path / "mnt")
    assert runner.commands == [
        ["sgdisk", "-n", "1:1MiB:0", "-t", "1:FD00", "-c", "1:aiinfra-cache", "/dev/loop7"],
        ["partprobe", "/dev/loop7"],
        ["wipefs", "-a", p7],
        ["sgdisk", "-n", "1:1MiB:0", "-t", "1:FD00", "-c", "1:aiinfra-cache", "/dev/loop8"],
        ["partprobe", "/dev/loop8"],
        ["wipefs", "-a", p8],
        ["mdadm", "--create", "/dev/md/md-cache", "--run", "--level=0", "--raid-devices=2", "--chunk=512K",
         "--metadata=1.2", "--name=md-cache", p7, p8],
        ["mkfs.xfs", "-L", "model-cache", "-d", "su=512k,sw=2", "-f", "/dev/md127"],
        ["mount", "-t", "xfs", "-o", "noatime", "/dev/md127", mnt],
    ]
    assert conf.read_text() == ("MAILADDR root\nARRAY /dev/md/md-cache metadata=1.2 "
                                "UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9 name=node1:md-cache\n")
    assert lay.initramfs_update_needed is True
    assert lay.uuid == "u-new"
    fstab = (tmp_path / "root" / "etc" / "fstab").read_text()
    assert fstab == "UUID=u-new %s xfs noatime,nofail 0 2\n" % mnt
    assert oct(os.stat(os.path.join(mnt, "models")).st_mode & 0o777) == "0o750"
    assert kinds(lay.actions) == ["partition", "partition", "create-array", "mkfs", "mkdir", "mount",
                                  "fstab", "mdadm-conf", "directory"]


def test_apply_ext4_whole_devices_uses_stride_and_reserve_is_ignored(tmp_path):
    runner = FakeRunner(outputs={("blkid", "-p", "-o", "export", "/dev/md127"): [(2, "", ""), (0, "UUID=u\n", "")]})
    lay = layout(tmp_path, [raw_device("empty", "/dev/loop7"), raw_device("empty", "/dev/loop8")],
                 runner=runner, inspector=FakeInspector(), raid=dict(RAID, chunk_kib=64), partition=False,
                 filesystem=dict(type="ext4", label="model-cache"), reserve_bytes=1 << 30)
    acts = lay.plan()
    assert kinds(acts)[:2] == ["create-array", "mkfs"]
    assert acts[0]["detail"].endswith("members /dev/loop7, /dev/loop8")
    assert nl.mkfs_argv(lay.spec["filesystem"], lay.spec["raid"], 2, "/dev/md127", True) == [
        "mkfs.ext4", "-L", "model-cache", "-E", "stride=16,stripe-width=32", "-F", "/dev/md127"]


def test_system_disk_behind_an_overlay_root_is_found(tmp_path):
    lower = tmp_path / "lower"
    lower.mkdir()
    st = os.stat(str(lower))
    mounts = nl.parse_mountinfo(
        "25 1 0:31 / / rw,relatime - overlay overlay rw,lowerdir=%s,upperdir=/nonexistent/u\n" % lower)
    majmins = nl.Inspector(FakeRunner()).system_majmins(mounts)
    assert "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev)) in majmins
    assert "0:31" in majmins


def test_partition_size_difference_is_reported_not_resized(tmp_path):
    lay = layout(tmp_path, [raw_device("ours-partition")], reserve_bytes=100 * 1024 * 1024)
    acts = lay.plan()
    assert "partition" not in kinds(acts) and "wipe" not in kinds(acts)
    assert "ends at sector 1048542" in lay.warnings[0] and "not resized" in lay.warnings[0]
    same = layout(tmp_path, [raw_device("ours-partition")])
    same.plan()
    assert same.warnings == []


def test_xfs_below_its_minimum_size_is_refused_before_partitioning(tmp_path):
    small = raw_device("empty", lsblk=fx("empty.lsblk.txt").replace("536870912", str(256 * 1024 * 1024)))
    lay = layout(tmp_path, [small])
    with pytest.raises(nl.LayoutError, match="xfs needs at least 300 MiB, the layout leaves 255 MiB"):
        lay.plan()
    ext4 = layout(tmp_path, [small], filesystem=dict(type="ext4", label="model-cache"))
    assert kinds(ext4.plan())[:2] == ["partition", "mkfs"]


# --------------------------------------------------------------------------- unreadable, blank-looking devices

EPERM = "wipefs: error: /dev/loopX: probing initialization failed: Operation not permitted\n"


def inspected(runner: FakeRunner, tmp_path: Path, monkeypatch, read=None, sys_size="1048576") -> dict:
    """``Inspector.inspect`` of DEV with the tools answered by ``runner`` (recorded outputs of the
    blank device unless overridden), the device node faked as a block device, its sysfs size
    ``sys_size`` and the direct read answered by ``read``."""
    sysfs = tmp_path / "sys" / "class" / "block" / "loopX"
    sysfs.mkdir(parents=True)
    (sysfs / "size").write_text(sys_size + "\n")
    (sysfs / "dev").write_text("7:9\n")
    real_stat = os.stat
    monkeypatch.setattr(nl.os.path, "realpath", lambda p: p)
    monkeypatch.setattr(nl.os, "stat", lambda p, *a, **k: os.stat_result((0o60660,) + (0,) * 9)
                        if p == DEV else real_stat(p, *a, **k))
    monkeypatch.setattr(nl, "read_ends", lambda device: read or dict(nonzero=None, error=None, size=536870912))
    return nl.Inspector(runner, sys_root=str(tmp_path / "sys")).inspect(DEV, [], set())


def blank_outputs(**over) -> dict:
    outputs = {
        ("lsblk", "-J", "-b", "-o", nl.LSBLK_COLUMNS, "-d", DEV): (0, nl.strip_header(fx("empty.lsblk.txt")), ""),
        ("wipefs", "-n", "-J", DEV): (0, "", ""),
        ("blkid", "-p", "-o", "export", DEV): (2, "", ""),
    }
    for key, answer in over.items():
        outputs[tuple(a if a != "DEV" else DEV for a in key.split())] = answer
    return outputs


def guard_of(tmp_path: Path, raw: dict, **over) -> nl.LayoutError:
    lay = layout(tmp_path, [raw], **over)
    with pytest.raises(nl.LayoutError) as err:
        lay.guard()
    assert lay.runner.commands == []
    return err.value


def test_blank_device_with_working_probes_is_empty(tmp_path, monkeypatch):
    raw = inspected(FakeRunner(blank_outputs()), tmp_path, monkeypatch)
    assert raw["probe_errors"] == [] and not raw["vanished"]
    lay = layout(tmp_path, [raw])
    lay.guard()
    assert lay.devices[0]["class"] == "empty" and kinds(lay.plan())[:2] == ["partition", "mkfs"]


@pytest.mark.parametrize("failing,answer,probe", [
    ("wipefs -n -J DEV", (1, "", EPERM), "wipefs -n failed (rc 1): wipefs: error"),
    ("blkid -p -o export DEV", (2, "", "blkid: error: /dev/loopX: Operation not permitted\n"),
     "blkid -p failed (rc 2): blkid: error"),
    ("blkid -p -o export DEV", (4, "", ""), "blkid -p failed (rc 4)"),
    ("lsblk -J -b -o %s -d DEV" % nl.LSBLK_COLUMNS, (32, "", "lsblk: /dev/loopX: not a block device\n"),
     "lsblk -J failed (rc 32)"),
])
def test_a_device_that_cannot_be_probed_is_refused_even_when_named_for_wiping(
        tmp_path, monkeypatch, failing, answer, probe):
    raw = inspected(FakeRunner(blank_outputs(**{failing: answer})), tmp_path, monkeypatch)
    assert raw["probe_errors"]
    for wipe in ([], [DEV]):
        err = guard_of(tmp_path, raw, wipe_serials=wipe)
        assert "%s (%s) cannot be probed" % (DEV, DEV) in err.msg and probe in err.msg
        assert "nothing was changed" in err.msg
        assert [d["class"] for d in err.result["devices"]] == ["unprobeable"]


def test_a_device_whose_first_mib_cannot_be_read_is_refused(tmp_path, monkeypatch):
    raw = inspected(FakeRunner(blank_outputs()), tmp_path, monkeypatch,
                    read=dict(nonzero=None, error="open(/dev/loopX): Operation not permitted", size=None))
    err = guard_of(tmp_path, raw, wipe_serials=[DEV])
    assert "cannot read the device: open(/dev/loopX): Operation not permitted" in err.msg
    assert err.result["devices"][0]["class"] == "unprobeable"


def test_non_zero_data_without_any_signature_is_unknown_data(tmp_path, monkeypatch):
    raw = inspected(FakeRunner(blank_outputs()), tmp_path, monkeypatch,
                    read=dict(nonzero="first MiB", error=None, size=536870912))
    err = guard_of(tmp_path, raw)
    assert "%s (%s) holds unknown data (non-zero bytes in the first MiB" % (DEV, DEV) in err.msg
    assert err.result["devices"][0]["class"] == "foreign"
    allowed = layout(tmp_path, [raw], wipe_serials=[DEV])          # named for wiping: wiped, then laid out
    allowed.guard()
    assert kinds(allowed.plan())[:3] == ["wipe", "partition", "mkfs"]
    whole = layout(tmp_path, [raw], partition=False, wipe_serials=[DEV])
    whole.guard()
    assert kinds(whole.plan())[:2] == ["wipe", "mkfs"]


def test_read_ends_reads_zeros_of_a_sparse_image_and_finds_data_at_either_end(tmp_path):
    image = tmp_path / "disk.img"
    with open(image, "wb") as fh:
        fh.truncate(8 * 1024 * 1024)
    assert nl.read_ends(str(image)) == dict(nonzero=None, error=None, size=8 * 1024 * 1024)
    with open(image, "r+b") as fh:
        fh.seek(8 * 1024 * 1024 - 10)
        fh.write(b"x")
    assert nl.read_ends(str(image))["nonzero"] == "last MiB"
    with open(image, "r+b") as fh:
        fh.seek(4096)
        fh.write(b"x")
    assert nl.read_ends(str(image))["nonzero"] == "first MiB"
    assert "No such file" in nl.read_ends(str(tmp_path / "nope"))["error"]
    (tmp_path / "empty.img").write_bytes(b"")
    assert nl.read_ends(str(tmp_path / "empty.img"))["size"] == 0


@pytest.mark.parametrize("sys_size,read_size", [("0", 536870912), ("1048576", 0)])
def test_a_vanished_device_of_size_0_is_refused_before_any_probe(tmp_path, monkeypatch, sys_size, read_size):
    runner = FakeRunner(blank_outputs())
    raw = inspected(runner, tmp_path, monkeypatch, sys_size=sys_size,
                    read=dict(nonzero=None, error=None, size=read_size))
    assert "has size 0" in raw["vanished"]
    for wipe in ([], [DEV]):
        err = guard_of(tmp_path, raw, wipe_serials=wipe)
        assert "%s (%s): device vanished or has no media" % (DEV, DEV) in err.msg
        assert err.result["devices"][0]["class"] == "vanished"


def test_lsblk_size_0_is_vanished():
    dev = classify("empty", raw=dict(lsblk=fx("empty.lsblk.txt").replace("536870912", "0")))
    assert dev["class"] == "vanished"


def test_apply_stops_before_any_change_when_a_device_vanished_after_planning(tmp_path):
    class Gone(FakeInspector):
        def vanished(self, device):
            return "device vanished or has no media: %s has size 0" % device

    lay = layout(tmp_path, [raw_device("empty")], inspector=Gone())
    lay.guard()
    lay.plan()
    with pytest.raises(nl.LayoutError, match="nothing was changed on any device; device vanished or has no media: "
                                             "/dev/loopX has size 0"):
        lay.apply()
    assert lay.runner.commands == []


def test_a_failed_blkid_of_the_filesystem_target_is_not_taken_for_blank(tmp_path):
    runner = FakeRunner({("blkid", "-p", "-o", "export", DEV + "p1"): (2, "", "blkid: error: Permission denied\n")})
    lay = layout(tmp_path, [raw_device("ours-partition")], runner=runner)
    lay.guard()
    assert kinds(lay.plan())[0] == "mkfs"
    with pytest.raises(nl.LayoutError, match="cannot probe /dev/loopXp1: blkid -p failed"):
        lay.apply()
    assert lay.runner.commands == []                                    # no mkfs
