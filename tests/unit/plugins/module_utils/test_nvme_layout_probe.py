"""nvme_layout probe: the Inspector (sysfs/procfs below the node root), the direct read of a
device's ends, the select rule, and how unreadable or blank-looking devices are judged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout import probe
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import (
    LSBLK_COLUMNS,
    LayoutError,
    parse_mountinfo,
    strip_header,
)
from storagefakes import DEV, FakeRunner, fx, kinds, layout

# --------------------------------------------------------------------------- the node root


def test_inspector_reads_sys_and_proc_below_the_node_root(tmp_path):
    root = tmp_path / "node"
    block = root / "sys" / "class" / "block"
    for rel, text in {"nvme1n1/dev": "259:0\n", "nvme1n1/ro": "0\n", "nvme1n1/size": "7501476528\n",
                      "nvme1n1/nvme1n1p1/partition": "1\n", "nvme1n1/nvme1n1p1/dev": "259:1\n",
                      "nvme1n1/queue/rotational": "0\n", "nvme1n1p1/dev": "259:1\n"}.items():
        (block / rel).parent.mkdir(parents=True, exist_ok=True)
        (block / rel).write_text(text)
    (block / "nvme1n1p1" / "holders" / "md127").mkdir(parents=True)
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "mountinfo").write_text(
        "36 25 259:1 / /mnt/model\\040cache rw,noatime shared:1 - xfs /dev/nvme1n1p1 rw,attr2\n")
    (root / "proc" / "swaps").write_text("Filename\tType\tSize\tUsed\tPriority\n/dev/zram0 partition 8 0 100\n")
    inspector = probe.Inspector(FakeRunner(), HostRoot(str(root)))
    assert inspector.majmin("nvme1n1") == "259:0"
    assert inspector.partitions_of("nvme1n1") == {1: "/dev/nvme1n1p1"}
    assert inspector.holders("nvme1n1p1") == ["md127"] and inspector.holders("nvme1n1") == []
    assert [(m["majmin"], m["target"]) for m in inspector.mountinfo()] == [("259:1", "/mnt/model cache")]
    assert inspector.swaps() == {os.path.realpath("/dev/zram0")}
    # nothing there: nothing known (never the host's own /sys or /proc)
    empty = probe.Inspector(FakeRunner(), HostRoot(str(tmp_path / "empty")))
    assert empty.mountinfo() == [] and empty.swaps() == set() and empty.majmin("loop0") is None
    assert empty.partitions_of("loop0") == {} and empty.holders("loop0") == []


def test_system_disk_behind_an_overlay_root_is_found(tmp_path):
    lower = tmp_path / "lower"
    lower.mkdir()
    st = os.stat(str(lower))
    mounts = parse_mountinfo(
        "25 1 0:31 / / rw,relatime - overlay overlay rw,lowerdir=%s,upperdir=/nonexistent/u\n" % lower)
    majmins = probe.Inspector(FakeRunner(), HostRoot("/")).system_majmins(mounts)
    assert "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev)) in majmins
    assert "0:31" in majmins


# --------------------------------------------------------------------------- the select rule


def test_select_rule():
    disk = dict(name="nvme1n1", type="disk", size=3840755982336, model="SAMSUNG MZWLR3T8HBLS-00007 ",
                tran="nvme")
    assert probe.match_rule(disk, dict(model="samsung*", min_size="3TB", max_size="4TB", transport="nvme"))
    assert not probe.match_rule(disk, dict(transport="sata"))
    assert not probe.match_rule(disk, dict(min_size="4TB"))
    assert not probe.match_rule(dict(disk, type="loop"), dict())


@pytest.mark.parametrize("word", ["pcie", "tcp", "rdma", "fc", "nvme"])
def test_select_takes_the_spec_transport_words_and_lsblk_ones(word):
    disk = dict(name="nvme1n1", type="disk", size=10 ** 12, tran="nvme")
    assert probe.match_rule(disk, dict(transport=word))
    assert not probe.match_rule(dict(disk, tran="sata"), dict(transport=word))
    assert probe.match_rule(dict(disk, tran="sata"), dict(transport="sata"))


# --------------------------------------------------------------------------- unreadable, blank-looking devices

EPERM = "wipefs: error: /dev/loopX: probing initialization failed: Operation not permitted\n"


def inspected(runner: FakeRunner, tmp_path: Path, monkeypatch, read=None, sys_size="1048576") -> dict:
    """``Inspector.inspect`` of DEV with the tools answered by ``runner`` (recorded outputs of the
    blank device unless overridden), the device node faked as a block device, its sysfs size
    ``sys_size`` (below the node root ``tmp_path``) and the direct read answered by ``read``."""
    sysfs = tmp_path / "sys" / "class" / "block" / "loopX"
    sysfs.mkdir(parents=True)
    (sysfs / "size").write_text(sys_size + "\n")
    (sysfs / "dev").write_text("7:9\n")
    real_stat = os.stat
    monkeypatch.setattr(probe.os.path, "realpath", lambda p: p)
    monkeypatch.setattr(probe.os, "stat", lambda p, *a, **k: os.stat_result((0o60660,) + (0,) * 9)
                        if p == DEV else real_stat(p, *a, **k))
    monkeypatch.setattr(probe, "read_ends", lambda device: read or dict(nonzero=None, error=None, size=536870912))
    return probe.Inspector(runner, HostRoot(str(tmp_path))).inspect(DEV, [], set())


def blank_outputs(**over) -> dict:
    outputs = {
        ("lsblk", "-J", "-b", "-o", LSBLK_COLUMNS, "-d", DEV): (0, strip_header(fx("empty.lsblk.txt")), ""),
        ("wipefs", "-n", "-J", DEV): (0, "", ""),
        ("blkid", "-p", "-o", "export", DEV): (2, "", ""),
    }
    for key, answer in over.items():
        outputs[tuple(a if a != "DEV" else DEV for a in key.split())] = answer
    return outputs


def guard_of(tmp_path: Path, raw: dict, **over) -> LayoutError:
    lay, state = layout(tmp_path, [raw], **over)
    with pytest.raises(LayoutError) as err:
        lay.plan(state)                                   # the guard runs first
    assert lay.runner.commands == []
    return err.value


def test_blank_device_with_working_probes_is_empty(tmp_path, monkeypatch):
    raw = inspected(FakeRunner(blank_outputs()), tmp_path, monkeypatch)
    assert raw["probe_errors"] == [] and not raw["vanished"]
    lay, state = layout(tmp_path, [raw])
    assert state.devices[0]["class"] == "empty" and kinds(lay.plan(state))[:2] == ["partition", "mkfs"]


@pytest.mark.parametrize("failing,answer,probe_msg", [
    ("wipefs -n -J DEV", (1, "", EPERM), "wipefs -n failed (rc 1): wipefs: error"),
    ("blkid -p -o export DEV", (2, "", "blkid: error: /dev/loopX: Operation not permitted\n"),
     "blkid -p failed (rc 2): blkid: error"),
    ("blkid -p -o export DEV", (4, "", ""), "blkid -p failed (rc 4)"),
    ("lsblk -J -b -o %s -d DEV" % LSBLK_COLUMNS, (32, "", "lsblk: /dev/loopX: not a block device\n"),
     "lsblk -J failed (rc 32)"),
])
def test_a_device_that_cannot_be_probed_is_refused_even_when_named_for_wiping(
        tmp_path, monkeypatch, failing, answer, probe_msg):
    raw = inspected(FakeRunner(blank_outputs(**{failing: answer})), tmp_path, monkeypatch)
    assert raw["probe_errors"]
    for wipe in ([], [DEV]):
        err = guard_of(tmp_path, raw, wipe_serials=wipe)
        assert "%s (%s) cannot be probed" % (DEV, DEV) in err.msg and probe_msg in err.msg
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
    allowed, state = layout(tmp_path, [raw], wipe_serials=[DEV])     # named for wiping: wiped, then laid out
    assert kinds(allowed.plan(state))[:3] == ["wipe", "partition", "mkfs"]
    whole, state = layout(tmp_path, [raw], partition=False, wipe_serials=[DEV])
    assert kinds(whole.plan(state))[:2] == ["wipe", "mkfs"]


def test_read_ends_reads_zeros_of_a_sparse_image_and_finds_data_at_either_end(tmp_path):
    image = tmp_path / "disk.img"
    with open(image, "wb") as fh:
        fh.truncate(8 * 1024 * 1024)
    assert probe.read_ends(str(image)) == dict(nonzero=None, error=None, size=8 * 1024 * 1024)
    with open(image, "r+b") as fh:
        fh.seek(8 * 1024 * 1024 - 10)
        fh.write(b"x")
    assert probe.read_ends(str(image))["nonzero"] == "last MiB"
    with open(image, "r+b") as fh:
        fh.seek(4096)
        fh.write(b"x")
    assert probe.read_ends(str(image))["nonzero"] == "first MiB"
    assert "No such file" in probe.read_ends(str(tmp_path / "nope"))["error"]
    (tmp_path / "empty.img").write_bytes(b"")
    assert probe.read_ends(str(tmp_path / "empty.img"))["size"] == 0


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
