"""nvme_layout parse: the tools' outputs (recorded from loop devices) and the lines it writes."""

from __future__ import annotations

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout import parse as nl
from storagefakes import FSTAB, fx

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
    assert nl.canonical_array_line("ARRAY /dev/md127" + line[len("ARRAY /dev/md/md-cache"):], "md-cache") == line
    assert nl.array_uuid(line) == "3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9"
    assert nl.md_name_matches("node1:md-cache", "md-cache") and nl.md_name_matches("md-cache", "md-cache")
    assert not nl.md_name_matches("node1:md-cache2", "md-cache") and not nl.md_name_matches(None, "x")


def test_layout_error_is_a_capability_error():
    assert issubclass(nl.LayoutError, CapabilityError)


# --------------------------------------------------------------------------- file editing

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


def test_conf_has_array_matches_by_uuid_only():
    brief = "ARRAY /dev/md127 metadata=1.2 name=node1:md-cache UUID=11:22:33:44"
    assert nl.conf_has_array("MAILADDR root\nARRAY /dev/md/md-cache metadata=1.2 UUID=11:22:33:44\n", brief)
    assert not nl.conf_has_array("ARRAY /dev/md/md-cache metadata=1.2 UUID=99:99:99:99\n", brief)
    assert not nl.conf_has_array(None, brief)
    placeholder = "ARRAY /dev/md/x UUID=<uuid of the new array>"
    assert not nl.conf_has_array(placeholder + "\n", placeholder)
