"""nvme_layout classify: what each recorded device holds, relative to the wanted layout."""

from __future__ import annotations

from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout import classify as nl
from storagefakes import (
    DEV,
    EXAMINE_OTHER,
    EXAMINE_OURS,
    RAID_MEMBER_BLKID,
    RAID_MEMBER_WIPEFS,
    fx,
    raw_device,
    spec,
)


def classify(scenario: str, n: int = 1, **over):
    extra = over.pop("raw", {})
    return nl.classify(nl.build_device(raw_device(scenario, **extra)), spec(**over), n)


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


def test_lsblk_size_0_is_vanished():
    dev = classify("empty", raw=dict(lsblk=fx("empty.lsblk.txt").replace("536870912", "0")))
    assert dev["class"] == "vanished"
