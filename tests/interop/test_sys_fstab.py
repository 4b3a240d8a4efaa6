"""/etc/fstab lines of hugepages and nvme_layout, read by util-linux (findmnt, mount) and the kernel.

The modules write mount points with blanks, tabs and backslashes octal-escaped (fstab(5)); the
spec refuses such paths, the modules accept them when called directly and write valid lines.
Here their own code paths write the fstab on a temporary root and the real readers check it:

- ``findmnt --verify --tab-file``: no parse error, nothing wrong with our lines;
- ``findmnt --tab-file -J -o TARGET``: the path read back is the path we were given;
- ``mount --fstab F --all -t hugetlbfs`` in a private mount namespace: libmount mounts our
  hugetlbfs lines for real, and the kernel's /proc/self/mounts and mountinfo (escaped by the
  kernel) read back through the modules' parsers give the same paths; a second run is a no-op;
- the mount argv the modules run carries the raw (unescaped) path;
- the admin's lines stay byte-identical.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _fstab, _hugepages, _hugepages_files, _nfd_labels
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout import parse as nvme_parse

from .sys_common import findmnt_verify, in_private_mounts, parse_verify, tool
from .sys_common import run as run_tool

pytestmark = pytest.mark.interop

POOL_2M = "/sys/kernel/mm/hugepages/hugepages-2048kB"
ODD_NAMES = ("huge pages", "tab\there", "back\\slash", "all \t\\ three")
ADMIN_FSTAB = (
    "# /etc/fstab: static file system information.\n"
    "UUID=0a1b2c3d-0000-4000-8000-000000000001 / ext4 errors=remount-ro 0 1\n"
    "tmpfs\t/mnt/admin\\040scratch\ttmpfs\tdefaults,size=1g,noauto\t0 0\n"
    "# hugetlbfs %(base)s/huge pages is a comment, not a line of ours\n"
    "hugetlbfs %(base)s/admin\\040huge hugetlbfs pagesize=2M,noauto 0 0\n"
    "/dev/sdz1 /srv/data xfs defaults,noauto 0 2"   # the last line has no newline
)


class RecordingRunner:
    """Records the commands a backend runs instead of running them (mount, here)."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def which(self, name: str, required: bool = False) -> str:
        return "/usr/bin/" + name

    def run(self, argv, check=True, data=None, record=False):
        self.commands.append(list(argv))
        return 0, "", ""


def _hugepages_root(root: Path, fstab: str) -> None:
    files = {
        "proc/meminfo": "MemAvailable: 8000000 kB\nHugepagesize: 2048 kB\n",
        "proc/mounts": "",
        POOL_2M.lstrip("/") + "/nr_hugepages": "0\n",
        POOL_2M.lstrip("/") + "/free_hugepages": "0\n",
        POOL_2M.lstrip("/") + "/resv_hugepages": "0\n",
        "etc/fstab": fstab,
    }
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content.encode())


def _hugepages_params(root: Path, paths: list[str]) -> dict:
    return {"pages": [], "on_shortfall": "fail", "thp": None,
            "mounts": [{"size": "2M", "path": p, "owner": "root", "group": "root", "mode": "0755"} for p in paths],
            "sysctl_file": _hugepages_files.DEFAULT_SYSCTL_FILE,
            "boot_unit_file": _hugepages_files.DEFAULT_BOOT_UNIT_FILE, "fstab": "/etc/fstab", "root": str(root)}


def _targets(findmnt: str, tab_file: Path) -> list[str]:
    done = run_tool([findmnt, "--tab-file", str(tab_file), "-J", "-o", "TARGET"])
    assert done.returncode == 0, done.stderr
    return [fs["target"] for fs in json.loads(done.stdout)["filesystems"]]


def test_hugetlbfs_lines_are_read_by_findmnt_mounted_by_libmount_and_read_back(tmp_path: Path) -> None:
    findmnt, mount = tool("findmnt"), tool("mount")
    if "hugetlbfs" not in Path("/proc/filesystems").read_text() or not os.path.isdir(POOL_2M):
        pytest.skip("this kernel has no hugetlbfs with 2M pages")
    base = "/mnt/dpi-sys-%d" % os.getpid()
    paths = [base + "/" + name for name in ODD_NAMES]
    root = tmp_path / "root"
    admin = ADMIN_FSTAB % {"base": base}
    _hugepages_root(root, admin)

    runner = RecordingRunner()
    result = run(_hugepages.HugePages, _hugepages_params(root, paths), Node(runner, str(root)))
    assert not result.get("failed"), result.get("msg")
    # the mount argv carries the raw path (below the root), never the escaped one
    assert [c[-1] for c in runner.commands] == [str(root) + p for p in paths]
    assert all(c[:3] == ["/usr/bin/mount", "-t", "hugetlbfs"] for c in runner.commands)
    fstab = root / "etc" / "fstab"
    text = fstab.read_bytes().decode()
    assert text.startswith(admin + "\n"), "the admin's lines stay byte-identical"
    ours = text[len(admin) + 1:].splitlines()
    assert ours == [_fstab.fstab_entry("hugetlbfs", p, "hugetlbfs", ["pagesize=2M,uid=0,gid=0,mode=0755"])
                    for p in paths]
    assert all(len(line.split()) == 6 for line in ours) and "\t" not in "".join(ours)

    # findmnt gives back our paths exactly
    assert _targets(findmnt, fstab)[-len(paths):] == paths

    # in a private mount namespace (a tmpfs on /mnt holds the mount points): findmnt --verify
    # finds nothing wrong with our lines, libmount mounts them for real, the kernel shows them
    script = (
        'mount -t tmpfs "dpi-sys-$$" /mnt\n'
        'for target in "$@"; do mkdir -p "$target"; done\n'
        '"$FINDMNT" --verify --verbose --tab-file "$FSTAB" 2>&1 || true\n'
        'echo "--- mounts"\n'
        '"$MOUNT" --fstab "$FSTAB" --all -t hugetlbfs\n'
        'cat /proc/self/mounts; echo "--- mountinfo"; cat /proc/self/mountinfo\n'
    )
    done = in_private_mounts(script, *paths, base + "/admin huge",
                             env={"FSTAB": str(fstab), "MOUNT": mount, "FINDMNT": findmnt})
    assert done.returncode == 0, done.stderr
    verify_text, rest = done.stdout.split("--- mounts\n")
    mounts_text, mountinfo_text = rest.split("--- mountinfo\n")
    summary, problems = parse_verify(verify_text)
    assert summary.startswith("0 parse errors"), summary
    for path in paths:
        assert problems.get(path) == [], (path, problems)
    escaped = [_fstab.escape(p) for p in paths]
    for line in escaped:
        assert " %s hugetlbfs " % line in mounts_text, "the kernel escapes like fstab(5)"
    kernel_mounts = _hugepages.parse_mounts(mounts_text)
    for path in paths:
        assert kernel_mounts[path]["fstype"] == "hugetlbfs" and "pagesize=2M" in kernel_mounts[path]["options"]
    assert base + "/admin huge" not in kernel_mounts, "noauto lines of the admin are not ours to mount"
    info = {m["target"]: m for m in nvme_parse.parse_mountinfo(mountinfo_text)}
    assert all(info[p]["fstype"] == "hugetlbfs" for p in paths)
    assert all(p in _nfd_labels.parse_mountinfo(mountinfo_text) for p in paths)
    assert not any(base in line for line in Path("/proc/self/mounts").read_text().splitlines()), \
        "nothing was mounted on the host"

    # the node as the kernel now shows it: nothing left to do, the fstab is unchanged
    (root / "proc" / "mounts").write_text(mounts_text)
    for path in paths:
        (root / path.lstrip("/")).chmod(0o755)
    again = run(_hugepages.HugePages, _hugepages_params(root, paths), Node(RecordingRunner(), str(root)))
    assert again["changed"] is False and again["actions"] == [], again["actions"]
    assert fstab.read_bytes().decode() == text


def test_nvme_cache_line_is_read_by_findmnt_and_the_mount_argv_is_raw(tmp_path: Path) -> None:
    """nvme_layout's whole apply (recorded loop devices, fake runner) with a mount point holding a
    blank, a tab and a backslash."""
    import storagefakes as sf

    findmnt = tool("findmnt")
    odd = tmp_path / "model cache\tand\\more"
    odd.mkdir()
    part = str(odd / "loopXp1")           # the partition node the fake kernel creates
    fs = "DEVNAME=%s\nLABEL=model-cache\nUUID=0f1e2d3c-4b5a-4697-8877-665544332211\nTYPE=xfs\n" % part
    runner = sf.FakeRunner(outputs={("blkid", "-p", "-o", "export", part): [(2, "", ""), (0, fs, "")]})

    def after_sfdisk(argv):
        Path(part).write_text("")
        inspector._partitions["loopX"] = {1: part}

    runner.hooks["sfdisk"] = after_sfdisk
    inspector = sf.FakeInspector()
    fstab = odd / "root" / "etc" / "fstab"
    fstab.parent.mkdir(parents=True)
    admin = sf.FSTAB + "# UUID=x %s xfs defaults 0 2 (a comment)\n" % _fstab.escape(str(odd / "mnt"))
    fstab.write_text(admin)
    lay, state = sf.layout(odd, [sf.raw_device("empty")], runner=runner, inspector=inspector)
    acts = lay.plan(state)
    lay.apply(state, acts)
    mnt = str(odd / "mnt")
    assert [c for c in runner.commands if c[0] == "mount"] == [["mount", "-t", "xfs", "-o", "noatime", part, mnt]]
    text = fstab.read_text()
    line = "UUID=0f1e2d3c-4b5a-4697-8877-665544332211 %s xfs noatime,nofail 0 2" % _fstab.escape(mnt)
    assert text == admin + line + "\n", "our line appended, the admin's lines byte-identical"
    assert nvme_parse.update_fstab(text, nvme_parse.fstab_line("0f1e2d3c-4b5a-4697-8877-665544332211", mnt, "xfs",
                                                               ["noatime"]), mnt, None) == text, "idempotent"

    summary, problems = findmnt_verify(findmnt, str(fstab))
    assert summary.startswith("0 parse errors"), summary
    # the target exists; the source is a filesystem this machine does not have (findmnt says so)
    assert problems[mnt] == ["[E] unreachable on boot required source: "
                             "UUID=0f1e2d3c-4b5a-4697-8877-665544332211"], problems[mnt]
    assert _targets(findmnt, fstab)[-1] == mnt

    # the kernel's mountinfo of that path, read back by nvme_layout and nfd_labels
    done = in_private_mounts('mount -t tmpfs "dpi-sys-$$" "$1"; cat /proc/self/mountinfo', mnt)
    assert done.returncode == 0, done.stderr
    assert _fstab.escape(mnt) in done.stdout
    assert [m["target"] for m in nvme_parse.parse_mountinfo(done.stdout) if m["target"] == mnt] == [mnt]
    assert mnt in _nfd_labels.parse_mountinfo(done.stdout)


def test_every_field_round_trips_through_findmnt(tmp_path: Path) -> None:
    """escape() against util-linux's unmangle, one odd character at a time (newline included)."""
    findmnt = tool("findmnt")
    names = ["/mnt/a b", "/mnt/a\tb", "/mnt/a\\b", "/mnt/a\nb", "/mnt/a\\040b", "/mnt/#a", "/mnt/ä ö", "/mnt/a  b"]
    tab = tmp_path / "fstab"
    tab.write_text("".join(_fstab.fstab_entry("hugetlbfs", n, "hugetlbfs", ["pagesize=2M"]) + "\n" for n in names))
    assert _targets(findmnt, tab) == names
    assert [_fstab.fstab_fields(line)[1] for line in tab.read_text().splitlines()] == names
