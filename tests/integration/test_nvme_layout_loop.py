"""nvme_layout against real loop devices over sparse files (root only).

Every device these tests touch is a loop device created here from a sparse file in
``tmp_path``; the ``lab_disks`` fixture unmounts everything below ``tmp_path``, stops md
arrays built on those loop devices and detaches them in ``finally``, also when a test
fails. fstab and mdadm.conf are files inside ``tmp_path``; the node's real ones are never
touched.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.modules import nvme_layout

# The in-process module runner lives in the unit tests' conftest; reuse it here.
_spec = importlib.util.spec_from_file_location(
    "_unit_conftest", os.path.join(os.path.dirname(__file__), "..", "unit", "conftest.py"))
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
run_module = _conftest.run_module

TOOLS = ("losetup", "sgdisk", "sfdisk", "partprobe", "wipefs", "blkid", "mkfs.xfs", "mkfs.ext4", "mount", "umount")

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for loop devices"),
    pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                       reason="needs %s" % ", ".join(TOOLS)),
]

needs_md = pytest.mark.skipif(not os.path.exists("/proc/mdstat") or shutil.which("mdadm") is None,
                              reason="this kernel has no md driver (no /proc/mdstat) or mdadm is missing")


def sh(*argv: str, check: bool = True) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"), check=False)
    if check and done.returncode != 0:
        raise AssertionError("%s failed (%d): %s%s" % (" ".join(argv), done.returncode, done.stdout, done.stderr))
    return done.stdout


def mounts_below(root: Path) -> list[str]:
    targets = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            target = line.split()[4]
            if target == str(root) or target.startswith(str(root) + "/"):
                targets.append(target)
    return targets


class LabDisks:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.loops: list[str] = []

    def new(self, name: str, size: str = "512M", sector: int = 512) -> str:
        image = self.dir / ("%s.img" % name)
        sh("truncate", "-s", size, str(image))
        loop = sh("losetup", "-fP", "--show", "--sector-size", str(sector), str(image)).strip()
        self.loops.append(loop)
        return loop

    def md_holders(self) -> list[str]:
        names = set()
        for loop in self.loops:
            base = os.path.basename(loop)
            sysdir = "/sys/class/block/%s" % base
            dirs = [sysdir] + [os.path.join(sysdir, c) for c in os.listdir(sysdir) if c.startswith(base + "p")]
            for d in dirs:
                holders = os.path.join(d, "holders")
                if os.path.isdir(holders):
                    names.update(h for h in os.listdir(holders) if h.startswith("md"))
        return sorted(names)

    def cleanup(self) -> None:
        errors = []
        for target in sorted(mounts_below(self.dir), key=len, reverse=True):
            if subprocess.run(["umount", target], check=False).returncode != 0:
                subprocess.run(["umount", "-l", target], check=False)
        for md in self.md_holders():
            if subprocess.run(["mdadm", "--stop", "/dev/" + md], check=False).returncode != 0:
                errors.append("mdadm --stop /dev/%s" % md)
        for loop in self.loops:
            if subprocess.run(["losetup", "-d", loop], check=False).returncode != 0:
                errors.append("losetup -d %s" % loop)
        if errors:
            raise AssertionError("cleanup failed: %s" % ", ".join(errors))


@pytest.fixture
def disks(tmp_path: Path):
    lab = LabDisks(tmp_path)
    try:
        yield lab
    finally:
        lab.cleanup()


def fingerprint(loop: str) -> dict[str, str]:
    """On-disk state as the tools see it: equal fingerprints = nothing written."""
    table = sh("sgdisk", "-p", loop, check=False)
    if "Creating new GPT entries in memory" in table:
        # no GPT on disk: sgdisk invents a random disk GUID for its in-memory table
        table = "\n".join(line for line in table.splitlines() if not line.startswith("Disk identifier"))
    state = {
        "sgdisk": table,
        "wipefs": sh("wipefs", "-n", "-J", loop, check=False),
        "blkid": sh("blkid", "-p", "-o", "export", loop, check=False),
    }
    with open(loop, "rb") as handle:
        state["head"] = hashlib.sha256(handle.read(4 * 1024 * 1024)).hexdigest()
        handle.seek(-1024 * 1024, os.SEEK_END)
        state["tail"] = hashlib.sha256(handle.read()).hexdigest()
    return state


def layout_args(tmp_path: Path, devices: list[str], **extra) -> dict:
    args = dict(
        devices=devices,
        raid=None,
        filesystem=dict(type="xfs", label="model-cache"),
        mount=dict(path=str(tmp_path / "mnt" / "model-cache"), options=["noatime", "nodiratime"]),
        directories=[dict(path="models", owner="root", group="root", mode="0755"),
                     dict(path="checkpoints", mode="0750")],
        fstab=str(tmp_path / "etc" / "fstab"),
        mdadm_conf=str(tmp_path / "etc" / "mdadm" / "mdadm.conf"),
    )
    args.update(extra)
    return args


FSTAB_BEFORE = "# /etc/fstab: static file system information.\n" \
               "UUID=11111111-2222-3333-4444-555555555555 /  ext4  errors=remount-ro 0 1\n" \
               "tmpfs\t/scratch\ttmpfs\tdefaults,size=1g\t0 0\n"


def put_fstab(tmp_path: Path) -> Path:
    fstab = tmp_path / "etc" / "fstab"
    fstab.parent.mkdir(parents=True, exist_ok=True)
    fstab.write_text(FSTAB_BEFORE)
    return fstab


def kinds(result: dict) -> list[str]:
    return [a["kind"] for a in result["actions"]]


def test_single_device_from_empty_then_idempotent(disks, tmp_path, run_module):
    loop = disks.new("single")
    fstab = put_fstab(tmp_path)
    args = layout_args(tmp_path, [loop])
    mnt = args["mount"]["path"]

    first = run_module(nvme_layout.main, args, diff=True)
    assert first["changed"] is True
    assert kinds(first) == ["partition", "mkfs", "mkdir", "mount", "fstab", "directory", "directory"]
    assert first["devices"][0]["class"] == "empty"
    part = loop + "p1"
    info = sh("blkid", "-p", "-o", "export", part)
    assert "TYPE=xfs" in info and "LABEL=model-cache" in info and "PART_ENTRY_NAME=aiinfra-cache" in info
    assert "PART_ENTRY_OFFSET=2048" in info                       # 1 MiB aligned
    assert os.path.ismount(mnt)
    assert first["uuid"] and "UUID=%s" % first["uuid"] in info
    text = fstab.read_text()
    assert text.startswith(FSTAB_BEFORE)                          # other lines byte-identical
    assert text[len(FSTAB_BEFORE):] == "UUID=%s %s xfs noatime,nodiratime,nofail 0 2\n" % (first["uuid"], mnt)
    assert oct(os.stat(os.path.join(mnt, "checkpoints")).st_mode & 0o7777) == "0o750"
    assert first["mount"]["mounted"] is True
    assert first["initramfs_update_needed"] is False

    second = run_module(nvme_layout.main, args)
    assert second["changed"] is False, second["actions"]
    assert second["actions"] == []
    assert second["devices"][0]["class"] == "ours-exact"
    assert second["uuid"] == first["uuid"]
    assert fstab.read_text() == text


def test_check_mode_touches_nothing_and_predicts_the_run(disks, tmp_path, run_module):
    loop = disks.new("check")
    fstab = put_fstab(tmp_path)
    args = layout_args(tmp_path, [loop])
    before = fingerprint(loop)

    predicted = run_module(nvme_layout.main, args, check_mode=True, diff=True)
    assert predicted["changed"] is True
    assert fingerprint(loop) == before
    assert fstab.read_text() == FSTAB_BEFORE
    assert not os.path.exists(args["mount"]["path"])
    assert predicted["diff"][0]["after"].startswith(FSTAB_BEFORE)

    done = run_module(nvme_layout.main, args)
    assert kinds(done) == kinds(predicted)
    # complete: check mode now predicts nothing
    again = run_module(nvme_layout.main, args, check_mode=True)
    assert again["changed"] is False and again["actions"] == []


def _ext4_with_file(disks, tmp_path) -> tuple[str, str]:
    loop = disks.new("foreign")
    sh("mkfs.ext4", "-q", "-L", "data", loop)
    where = tmp_path / "old"
    where.mkdir()
    sh("mount", loop, str(where))
    (where / "weights.bin").write_bytes(os.urandom(65536))
    digest = hashlib.sha256((where / "weights.bin").read_bytes()).hexdigest()
    sh("umount", str(where))
    return loop, digest


def _file_digest(loop: str, tmp_path: Path) -> str:
    where = tmp_path / "verify"
    where.mkdir(exist_ok=True)
    sh("mount", "-o", "ro", loop, str(where))
    try:
        return hashlib.sha256((where / "weights.bin").read_bytes()).hexdigest()
    finally:
        sh("umount", str(where))


def test_foreign_filesystem_is_refused_then_wiped_when_named(disks, tmp_path, run_module):
    loop, digest = _ext4_with_file(disks, tmp_path)
    put_fstab(tmp_path)
    args = layout_args(tmp_path, [loop])
    before = fingerprint(loop)

    for check_mode in (True, False):
        refused = run_module(nvme_layout.main, args, check_mode=check_mode, expect_failure=True)
        assert loop in refused["msg"]
        assert "ext4 filesystem label=data" in refused["msg"]
        assert "wipe_serials" in refused["msg"]
        assert refused["devices"][0]["class"] == "foreign"
        assert fingerprint(loop) == before
    assert _file_digest(loop, tmp_path) == digest
    assert (tmp_path / "etc" / "fstab").read_text() == FSTAB_BEFORE

    # named by its backing file (a loop device has no serial); check mode first
    args["wipe_serials"] = [str(tmp_path / "foreign.img")]
    predicted = run_module(nvme_layout.main, args, check_mode=True)
    assert kinds(predicted)[:3] == ["wipe", "partition", "mkfs"]
    assert fingerprint(loop) == before
    assert _file_digest(loop, tmp_path) == digest
    done = run_module(nvme_layout.main, args)
    assert kinds(done)[:3] == ["wipe", "partition", "mkfs"]
    assert done["devices"][0]["wipe_allowed"] is True
    assert "ext4" not in sh("wipefs", "-n", loop + "p1")
    assert os.path.ismount(args["mount"]["path"])
    assert run_module(nvme_layout.main, args)["changed"] is False


def test_device_mounted_elsewhere_is_refused_even_when_named(disks, tmp_path, run_module):
    loop, dummy = _ext4_with_file(disks, tmp_path)
    other = tmp_path / "elsewhere"
    other.mkdir()
    sh("mount", loop, str(other))
    args = layout_args(tmp_path, [loop], wipe_serials=[loop])
    refused = run_module(nvme_layout.main, args, expect_failure=True)
    assert "in use" in refused["msg"] and str(other) in refused["msg"]
    assert os.path.ismount(str(other))


def test_two_foreign_devices_nothing_happens_before_all_are_checked(disks, tmp_path, run_module):
    """One device may be wiped, the other not: the guard refuses before touching either."""
    first, dummy = _ext4_with_file(disks, tmp_path)
    second = disks.new("gpt2")
    sh("sgdisk", "-n", "1:1MiB:+100MiB", "-c", "1:data1", "-n", "2:0:0", "-c", "2:data2", second)
    prints = (fingerprint(first), fingerprint(second))
    args = layout_args(tmp_path, [first, second], raid=dict(name="dpt-guard"), wipe_serials=[first])
    refused = run_module(nvme_layout.main, args, expect_failure=True)
    assert second in refused["msg"] and "gpt partition table with 2 partitions" in refused["msg"]
    assert first not in refused["msg"]
    assert (fingerprint(first), fingerprint(second)) == prints


def test_converges_from_partial_states(disks, tmp_path, run_module):
    loop = disks.new("partial")
    fstab = put_fstab(tmp_path)
    args = layout_args(tmp_path, [loop])
    # interrupted after partitioning
    sh("sgdisk", "-n", "1:1MiB:0", "-t", "1:8300", "-c", "1:aiinfra-cache", loop)
    sh("partprobe", loop)
    step = run_module(nvme_layout.main, args)
    assert step["devices"][0]["class"] == "ours-partial"
    assert kinds(step)[:1] == ["mkfs"] and "partition" not in kinds(step)
    uuid = step["uuid"]

    # filesystem present, not mounted
    sh("umount", args["mount"]["path"])
    step = run_module(nvme_layout.main, args)
    assert kinds(step) == ["mount"]

    # mounted, fstab line missing
    fstab.write_text(FSTAB_BEFORE)
    step = run_module(nvme_layout.main, args)
    assert kinds(step) == ["fstab"]
    assert fstab.read_text() == FSTAB_BEFORE + "UUID=%s %s xfs noatime,nodiratime,nofail 0 2\n" % (
        uuid, args["mount"]["path"])

    # a directory with a wrong mode
    os.chmod(os.path.join(args["mount"]["path"], "models"), 0o700)
    step = run_module(nvme_layout.main, args)
    assert kinds(step) == ["directory"]
    assert run_module(nvme_layout.main, args)["changed"] is False


def test_partition_table_not_read_by_kernel_is_rescanned(disks, tmp_path, run_module):
    """Re-attached image: the GPT is on disk, the kernel has no partition node yet."""
    loop = disks.new("rescan")
    put_fstab(tmp_path)
    args = layout_args(tmp_path, [loop])
    run_module(nvme_layout.main, args)
    sh("umount", args["mount"]["path"])
    # drop the partition node the way a re-attach on a kernel without a GPT parser would
    sh("partx", "-d", loop) if shutil.which("partx") else pytest.skip("needs partx")
    deadline = time.time() + 5
    while os.path.exists(loop + "p1") and time.time() < deadline:
        time.sleep(0.1)
    predicted = run_module(nvme_layout.main, args, check_mode=True)
    # directories are verified after the mount; check mode cannot look inside yet
    assert kinds(predicted) == ["rescan", "mount", "directory", "directory"]
    done = run_module(nvme_layout.main, args)
    assert kinds(done) == ["rescan", "mount"]
    assert os.path.ismount(args["mount"]["path"])


def test_whole_device_ext4(disks, tmp_path, run_module):
    loop = disks.new("whole")
    put_fstab(tmp_path)
    args = layout_args(tmp_path, [loop], partition=False, filesystem=dict(type="ext4", label="model-cache"))
    done = run_module(nvme_layout.main, args)
    assert kinds(done)[:1] == ["mkfs"]
    info = sh("blkid", "-p", "-o", "export", loop)
    assert "TYPE=ext4" in info and "PTTYPE" not in info
    assert run_module(nvme_layout.main, args)["changed"] is False


@needs_md
def test_raid0_two_devices(disks, tmp_path, run_module):
    name = "dpt%d" % os.getpid()
    loops = [disks.new("r0"), disks.new("r1")]
    put_fstab(tmp_path)
    args = layout_args(tmp_path, loops, raid=dict(level=0, chunk_kib=64, name=name))
    first = run_module(nvme_layout.main, args)
    assert kinds(first)[:4] == ["partition", "partition", "create-array", "mkfs"]
    assert "mdadm-conf" in kinds(first)
    assert first["initramfs_update_needed"] is True
    conf = (tmp_path / "etc" / "mdadm" / "mdadm.conf").read_text()
    assert conf.startswith("ARRAY /dev/md/%s " % name)
    assert run_module(nvme_layout.main, args)["changed"] is False

    # array stopped (as after a boot without mdadm.conf): assembled again, not recreated
    sh("umount", args["mount"]["path"])
    for md in disks.md_holders():
        sh("mdadm", "--stop", "/dev/" + md)
    again = run_module(nvme_layout.main, args)
    assert kinds(again) == ["assemble-array", "mkfs", "mount"] or kinds(again) == ["assemble-array", "mount"]
    assert again["uuid"] == first["uuid"]


def test_reserve_bytes_leaves_the_end_of_the_device_free(disks, tmp_path, run_module):
    loop = disks.new("reserve")
    put_fstab(tmp_path)
    args = layout_args(tmp_path, [loop], reserve_bytes=64 * 1024 * 1024, directories=[])
    run_module(nvme_layout.main, args)
    table = sh("sgdisk", "-p", loop)
    last_usable = int(table.split("last usable sector is ")[1].split()[0])
    part = [line.split() for line in table.splitlines() if line.strip().startswith("1 ")][0]
    assert int(part[1]) == 2048
    # exactly the reserve behind the partition: the table's own last usable sector, as sfdisk wrote it,
    # is the one nvme_layout computed from the device's size and logical sector
    assert last_usable - int(part[2]) == 64 * 1024 * 1024 // 512
    assert part[5:] == ["8300", "aiinfra-cache"]
    assert run_module(nvme_layout.main, args)["changed"] is False


def test_a_device_of_4096_byte_sectors_gets_its_table_in_its_own_sectors(disks, tmp_path, run_module):
    """A 4Kn device (an NVMe namespace formatted with 4 KiB LBAs): the GPT's entries take 4 sectors,
    the partition starts at sector 256 (1 MiB) and ends exactly reserve_bytes before the last usable one."""
    loop = disks.new("4kn", sector=4096)
    assert Path("/sys/class/block/%s/queue/logical_block_size" % Path(loop).name).read_text().strip() == "4096"
    put_fstab(tmp_path)
    args = layout_args(tmp_path, [loop], reserve_bytes=32 * 1024 * 1024, directories=[])
    first = run_module(nvme_layout.main, args)
    assert first["changed"] is True and first["mount"]["mounted"] is True
    table = sh("sgdisk", "-p", loop)
    assert "Sector size (logical/physical): 4096/4096 bytes" in table
    last_usable = int(table.split("last usable sector is ")[1].split()[0])
    assert last_usable == 512 * 1024 * 1024 // 4096 - 6
    part = [line.split() for line in table.splitlines() if line.strip().startswith("1 ")][0]
    assert int(part[1]) == 256 and last_usable - int(part[2]) == 32 * 1024 * 1024 // 4096
    again = run_module(nvme_layout.main, args)
    assert again["changed"] is False and again["devices"][0]["class"] == "ours-exact"
