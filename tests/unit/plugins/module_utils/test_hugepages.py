"""The hugepages backend alone: parsers, the managed files' texts, the plan as actions."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.aiinfra.datapath.plugins.module_utils import _hugepages, _hugepages_files
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run

POOL_2M = "/sys/kernel/mm/hugepages/hugepages-2048kB"
NODE0_1G = "/sys/devices/system/node/node0/hugepages/hugepages-1048576kB"


def test_parsers():
    assert _hugepages.parse_pagesize("1024M") == 1048576
    assert _hugepages.parse_pagesize("2M") == 2048
    assert _hugepages.parse_pagesize("1G") == 1048576
    assert _hugepages.parse_pagesize("2048k") == 2048
    assert _hugepages.parse_pagesize("x") is None
    assert _hugepages.parse_mounts("a /mnt/with\\040space hugetlbfs rw 0 0\n") == {
        "/mnt/with space": {"source": "a", "fstype": "hugetlbfs", "options": ["rw"]}}
    assert _hugepages.parse_meminfo("MemAvailable:  8000 kB\nHugepagesize: 2048 kB\nbad line\n") == {
        "MemAvailable": 8000, "Hugepagesize": 2048}


def _plan(size, count, persist, per_node=None):
    kb = _hugepages.SIZES_KB[size]
    nodes = per_node or {}
    return {"size": size, "kb": kb, "requested": count, "persist": persist, "per_node": nodes,
            "total_path": (_hugepages.POOL_DIR % kb) + "/nr_hugepages",
            "node_paths": dict((n, (_hugepages.NODE_POOL_DIR % (n, kb)) + "/nr_hugepages") for n in nodes)}


def test_cmdline_args_and_sysctl_values():
    plans = [_plan("2M", 512, "cmdline"), _plan("1G", 4, "cmdline", {"1": 2, "0": 2}), _plan("2M", 8, "sysctl")]
    assert _hugepages_files.cmdline_args(plans) == ["hugepagesz=2M", "hugepages=512",
                                                    "hugepagesz=1G", "hugepages=0:2,1:2"]
    assert _hugepages_files.sysctl_values(plans) == {"vm.nr_hugepages": "8"}


def test_tmpfiles_pools_then_thp_or_none():
    text = _hugepages_files.render_tmpfiles(
        [_plan("1G", 3, "boot_unit", {"0": 2, "1": 1}), _plan("2M", 16, "boot_unit"), _plan("2M", 4, "none")],
        {"enabled": {"before": "always", "after": "madvise"}}, _hugepages.THP_DIR)
    assert text.startswith(_hugepages_files.TMPFILES_HEADER)
    assert text.splitlines()[2:] == [
        "w %s/nr_hugepages - - - - 2" % NODE0_1G,
        "w /sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages - - - - 1",
        "w %s/nr_hugepages - - - - 16" % POOL_2M,
        "w /sys/kernel/mm/transparent_hugepage/enabled - - - - madvise",
    ]
    assert _hugepages_files.render_tmpfiles([_plan("2M", 4, "sysctl")], {}, _hugepages.THP_DIR) is None


def test_fstab_one_line_per_mount_point():
    before = "UUID=a / ext4 defaults 0 1\n/x /mnt/huge hugetlbfs a 0 0\n/y /mnt/huge hugetlbfs b 0 0\n# /mnt/huge"
    mount = {"path": "/mnt/huge", "options": "pagesize=2M,uid=0,gid=0,mode=0755"}
    # our line replaces the first entry for the mount point, the second is dropped (it would fight
    # ours) and every other line stays byte-identical, even the last one without a newline
    assert _hugepages_files.render_fstab(before, [mount]) == (
        "UUID=a / ext4 defaults 0 1\nhugetlbfs /mnt/huge hugetlbfs pagesize=2M,uid=0,gid=0,mode=0755 0 0\n"
        "# /mnt/huge")
    spaced = dict(mount, path="/mnt/huge pages")
    assert _hugepages_files.render_fstab("", [spaced]) == (
        "hugetlbfs /mnt/huge\\040pages hugetlbfs pagesize=2M,uid=0,gid=0,mode=0755 0 0\n")
    odd = dict(mount, path="/mnt/tab\there\\x")
    spaced_line = _hugepages_files.render_fstab("", [spaced])
    assert _hugepages_files.render_fstab(spaced_line, [odd]) == (
        spaced_line + "hugetlbfs /mnt/tab\\011here\\134x hugetlbfs pagesize=2M,uid=0,gid=0,mode=0755 0 0\n")
    # our own escaped line is recognised as ours: rendering again changes nothing
    assert _hugepages_files.render_fstab(spaced_line, [spaced]) == spaced_line
    assert _hugepages_files.render_fstab(None, []) is None
    assert _hugepages_files.render_fstab(None, [mount]).startswith("hugetlbfs /mnt/huge")


def _tree(root: Path, nr: int = 0) -> None:
    files = {
        "proc/meminfo": "MemAvailable: 8000000 kB\nHugepagesize: 2048 kB\n",
        "proc/mounts": "",
        "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
        POOL_2M.lstrip("/") + "/nr_hugepages": "%d\n" % nr,
        POOL_2M.lstrip("/") + "/free_hugepages": "%d\n" % nr,
        POOL_2M.lstrip("/") + "/resv_hugepages": "0\n",
    }
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)


def _params(root: Path, **extra):
    params = {"pages": [], "on_shortfall": "fail", "thp": None, "mounts": [],
              "sysctl_file": _hugepages_files.DEFAULT_SYSCTL_FILE,
              "boot_unit_file": _hugepages_files.DEFAULT_BOOT_UNIT_FILE, "fstab": "/etc/fstab",
              "root": str(root)}
    params.update(extra)
    return params


def test_plan_is_structured_actions(tmp_path):
    _tree(tmp_path)
    node = Node(None, str(tmp_path), check_mode=True)
    capability = _hugepages.HugePages(_params(tmp_path, pages=[{"size": "2M", "count": 64, "per_node": None,
                                                                "persist": "sysctl"}],
                                              thp={"enabled": "never", "defrag": None}), node)
    state = capability.read()
    actions = capability.plan(state)
    assert [(a.kind, a.target, a.before, a.after, a.diff) for a in actions[:2]] == [
        ("pool", POOL_2M + "/nr_hugepages", 0, 64, "hugepage pools"),
        ("thp", "/sys/kernel/mm/transparent_hugepage/enabled", "madvise", "never", "transparent hugepages")]
    assert [(a.kind, a.target, a.before, a.diff) for a in actions[2:]] == [
        ("file", _hugepages_files.DEFAULT_SYSCTL_FILE, None, "file"),
        ("file", _hugepages_files.DEFAULT_BOOT_UNIT_FILE, None, "file")]
    assert not any(a.reboot or a.destructive for a in actions)
    assert capability.result(state, actions)["pools_changed"] is True


def test_check_mode_run_changes_nothing_and_predicts(tmp_path):
    _tree(tmp_path, nr=64)
    params = _params(tmp_path, pages=[{"size": "2M", "count": 64, "per_node": None, "persist": "none"}])
    result = run(_hugepages.HugePages, params, Node(None, str(tmp_path), check_mode=True, diff=True))
    assert result["changed"] is False and result["actions"] == [] and "diff" not in result
    assert result["pools_changed"] is False
    params["pages"][0]["count"] = 100000
    result = run(_hugepages.HugePages, params, Node(None, str(tmp_path), check_mode=True))
    assert result["failed"] is True and "not attempted: 99936 more 2M pages" in result["msg"]
    assert result["pages"][0]["shortfall"] is True
    assert (tmp_path / POOL_2M.lstrip("/") / "nr_hugepages").read_text() == "64\n"
