"""hugepages against a fake /sys, /proc and /etc tree with a small simulated allocator."""

from __future__ import annotations

import os
import re

import pytest
from ansible.module_utils import basic
from ansible_collections.aiinfra.datapath.plugins.module_utils import _fs
from ansible_collections.aiinfra.datapath.plugins.modules import hugepages
from capability_results import diff_entry, kinds, texts

SYSCTL_FILE = "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf"
TMPFILES = "/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf"
KB = {"2M": 2048, "1G": 1048576}


class FakeKernel:
    """Allocates pages per node up to a capacity, like the kernel silently does."""

    def __init__(self, node, capacity, used=None, resv=None):
        self.node = node
        self.capacity = capacity          # {size: {node: max pages}}
        self.used = used or {}            # {size: {node: pages in use}}
        self.resv = resv or {}            # {size: reserved pages}
        self.writes = []
        for size, nodes in capacity.items():
            for n in nodes:
                node.put(self._node_pool(size, n) + "/nr_hugepages", "0\n")
                node.put(self._node_pool(size, n) + "/free_hugepages", "0\n")
            for n in nodes:
                self._set_node(size, n, self.used.get(size, {}).get(n, 0))
        node.put("/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n")
        node.put("/sys/kernel/mm/transparent_hugepage/defrag",
                 "always defer defer+madvise [madvise] never\n")
        node.put("/proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n"
                 "HugePages_Total: 0\nHugepagesize:       2048 kB\n")
        node.put("/proc/mounts", "proc /proc proc rw 0 0\n")

    def _pool(self, size):
        return "/sys/kernel/mm/hugepages/hugepages-%dkB" % KB[size]

    def _node_pool(self, size, n):
        return "/sys/devices/system/node/node%s/hugepages/hugepages-%dkB" % (n, KB[size])

    def nr(self, size, n=None):
        path = (self._node_pool(size, n) if n is not None else self._pool(size)) + "/nr_hugepages"
        return int(self.node.get(path))

    def _set_node(self, size, n, count):
        count = max(min(count, self.capacity[size][n]), self.used.get(size, {}).get(n, 0))
        used = self.used.get(size, {}).get(n, 0)
        self.node.put(self._node_pool(size, n) + "/nr_hugepages", "%d\n" % count)
        self.node.put(self._node_pool(size, n) + "/free_hugepages", "%d\n" % (count - used))
        nodes = self.capacity[size]
        total = sum(int(self.node.get(self._node_pool(size, m) + "/nr_hugepages")) for m in nodes)
        free = sum(int(self.node.get(self._node_pool(size, m) + "/free_hugepages")) for m in nodes)
        self.node.put(self._pool(size) + "/nr_hugepages", "%d\n" % total)
        self.node.put(self._pool(size) + "/free_hugepages", "%d\n" % free)
        self.node.put(self._pool(size) + "/resv_hugepages", "%d\n" % self.resv.get(size, 0))
        self.node.put(self._pool(size) + "/surplus_hugepages", "0\n")

    def write(self, host, path, value):
        self.writes.append((path, value.strip()))
        for size in self.capacity:
            if path == self._pool(size) + "/nr_hugepages":
                want = int(value)
                for n in sorted(self.capacity[size]):
                    others = sum(self.nr(size, m) for m in self.capacity[size] if m != n)
                    self._set_node(size, n, max(0, want - others))
                # shrink: the kernel frees from the last node first
                for n in sorted(self.capacity[size], reverse=True):
                    excess = self.nr(size) - want
                    if excess > 0:
                        self._set_node(size, n, self.nr(size, n) - excess)
                return
            for n in self.capacity[size]:
                if path == self._node_pool(size, n) + "/nr_hugepages":
                    self._set_node(size, n, int(value))
                    return
        if path.startswith("/sys/kernel/mm/transparent_hugepage/"):
            current = self.node.get(path).split()
            words = [w.strip("[]") for w in current]
            self.node.put(path, " ".join("[%s]" % w if w == value.strip() else w for w in words) + "\n")
            return
        raise AssertionError("unexpected write to %s" % path)


@pytest.fixture
def kernel(node, monkeypatch):
    fake = FakeKernel(node, {"2M": {"0": 1000, "1": 1000}, "1G": {"0": 2, "1": 2}})
    monkeypatch.setattr(_fs.HostRoot, "write", lambda self, path, value: fake.write(self, path, value))  # pylint: disable=unnecessary-lambda
    return fake


@pytest.fixture
def mount_cmd(node, monkeypatch):
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(list(argv))
        if "mount" in os.path.basename(argv[0]):
            path = argv[-1]
            rel = "/" + os.path.relpath(path, node.root)
            with open(node.path("/proc/mounts"), "a") as handle:
                opts = argv[4].replace("pagesize=2M,", "")
                opts = re.sub(r",?uid=0|,?gid=0|,?mode=0755", "", opts)
                handle.write("hugetlbfs %s hugetlbfs rw,relatime%s 0 0\n"
                             % (rel, ("," + opts.strip(",")) if opts.strip(",") else ""))
            uid = int(re.search(r"uid=(\d+)", argv[4]).group(1))
            gid = int(re.search(r"gid=(\d+)", argv[4]).group(1))
            os.chown(path, uid, gid)
            os.chmod(path, int(re.search(r"mode=(\d+)", argv[4]).group(1), 8))
        return 0, "", ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return calls


def args(node, **extra):
    base = {"root": str(node.root)}
    base.update(extra)
    return base


def test_total_2m_pages_applied_and_persisted(run_module, node, kernel):
    result = run_module(hugepages.main, args(node, pages=[{"size": "2M", "count": 64}]))
    assert result["changed"] is True
    assert kernel.nr("2M") == 64
    page = result["pages"][0]
    assert page["before"] == 0 and page["after"] == 64 and page["shortfall"] is False
    assert page["nodes_after"] == {"0": 64, "1": 0}
    assert node.get(SYSCTL_FILE).endswith("vm.nr_hugepages = 64\n")
    assert node.get(SYSCTL_FILE).startswith("# Managed by aiinfra.datapath.hugepages")
    assert texts(result) == [
        "write /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages: 0 -> 64",
        "write %s" % SYSCTL_FILE]
    pool = result["actions"][0]
    assert (pool["kind"], pool["target"], pool["before"], pool["after"]) == (
        "pool", "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", 0, 64)
    assert result["actions"][1]["kind"] == "file" and result["actions"][1]["target"] == SYSCTL_FILE
    assert result["pools_changed"] is True
    assert result["reboot_required"] is False
    assert result["cmdline_args"] == []


def test_second_run_unchanged_and_restore(run_module, node, kernel):
    run_module(hugepages.main, args(node, pages=[{"size": "2M", "count": 64}]))
    before = node.snapshot()
    again = run_module(hugepages.main, args(node, pages=[{"size": "2M", "count": 64}]))
    assert again["changed"] is False and again["actions"] == []
    assert again["pools_changed"] is False
    assert node.snapshot() == before
    back = run_module(hugepages.main, args(node, pages=[{"size": "2M", "count": 0, "persist": "none"}]))
    assert kernel.nr("2M") == 0
    assert "remove %s" % SYSCTL_FILE in texts(back)
    assert back["pools_changed"] is True
    assert [a["after"] for a in back["actions"] if a["kind"] == "file"] == [None]
    assert not node.exists(SYSCTL_FILE)


def test_check_mode_touches_nothing(run_module, node, kernel):
    params = args(node, pages=[{"size": "2M", "count": 64},
                               {"size": "1G", "count": 2, "per_node": {"0": 1, "1": 1},
                                "persist": "boot_unit"}],
                  thp={"enabled": "madvise", "defrag": "defer+madvise"})
    before = node.snapshot()
    predicted = run_module(hugepages.main, params, check_mode=True, diff=True)
    assert node.snapshot() == before
    assert kernel.writes == []
    real = run_module(hugepages.main, params, diff=True)
    assert predicted["actions"] == real["actions"]
    assert predicted["diff"] == real["diff"]           # pools, thp and files
    assert kinds(real) == ["pool", "pool", "pool", "thp", "thp", "file", "file"]
    assert diff_entry(real, "transparent hugepages")["after"] == (
        "/sys/kernel/mm/transparent_hugepage/defrag = defer+madvise\n"
        "/sys/kernel/mm/transparent_hugepage/enabled = madvise\n")
    diff_entry(real, SYSCTL_FILE)
    diff_entry(real, TMPFILES)


def test_per_node_1g_boot_unit_and_thp(run_module, node, kernel):
    result = run_module(hugepages.main, args(
        node, pages=[{"size": "1G", "count": 3, "per_node": {"0": 2, "1": 1}, "persist": "boot_unit"}],
        thp={"enabled": "madvise", "defrag": "defer+madvise"}), diff=True)
    assert kernel.nr("1G", "0") == 2 and kernel.nr("1G", "1") == 1
    assert node.get("/sys/kernel/mm/transparent_hugepage/enabled") == "always [madvise] never\n"
    assert node.get(TMPFILES).splitlines()[2:] == [
        "w /sys/devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages - - - - 2",
        "w /sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages - - - - 1",
        "w /sys/kernel/mm/transparent_hugepage/defrag - - - - defer+madvise",
        "w /sys/kernel/mm/transparent_hugepage/enabled - - - - madvise",
    ]
    assert result["thp"] == {"enabled": {"before": "always", "after": "madvise"},
                             "defrag": {"before": "madvise", "after": "defer+madvise"}}
    assert not node.exists(SYSCTL_FILE)
    pools = diff_entry(result, "hugepage pools")
    node0 = "/sys/devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages"
    assert node0 + " = 0\n" in pools["before"] and node0 + " = 2\n" in pools["after"]


def test_cmdline_args_total_and_node_form(run_module, node, kernel):
    result = run_module(hugepages.main, args(node, pages=[
        {"size": "2M", "count": 512, "persist": "cmdline"},
        {"size": "1G", "count": 4, "per_node": {"0": 2, "1": 2}, "persist": "cmdline"}]))
    assert result["cmdline_args"] == ["hugepagesz=2M", "hugepages=512",
                                      "hugepagesz=1G", "hugepages=0:2,1:2"]
    assert result["reboot_required"] is False
    assert not node.exists(SYSCTL_FILE) and not node.exists(TMPFILES)


def test_1g_shortfall_with_cmdline_reports_reboot(run_module, node, kernel):
    node.put("/proc/meminfo", "MemAvailable: 80000000 kB\nHugepagesize: 2048 kB\n")
    result = run_module(hugepages.main, args(node, pages=[
        {"size": "1G", "count": 8, "per_node": {"0": 4, "1": 4}, "persist": "cmdline"}]))
    assert result["reboot_required"] is True
    assert result["pages"][0]["shortfall"] is True
    assert any("requested 8 (node0: 4, node1: 4), allocated 4 (node0: 2, node1: 2)" in w
               for w in result["warnings"]), result["warnings"]
    assert result["cmdline_args"] == ["hugepagesz=1G", "hugepages=0:4,1:4"]


def test_shortfall_fails_with_figures_and_rolls_back(run_module, node, kernel):
    # 2M fits, 1G does not: both pools are restored
    result = run_module(hugepages.main, args(node, pages=[{"size": "2M", "count": 64},
                                                          {"size": "1G", "count": 5,
                                                           "persist": "boot_unit"}]),
                        expect_failure=True)
    assert "1G pages: requested 5 (total), allocated 4 (node0: 2, node1: 2); before 0" in result["msg"]
    assert "restored" in result["msg"]
    assert kernel.nr("2M") == 0 and kernel.nr("1G") == 0
    assert not node.exists(SYSCTL_FILE)
    assert [r["restored"] for r in result["rollback"]] == [0, 0]


def test_shortfall_warn_keeps_allocation(run_module, node, kernel):
    result = run_module(hugepages.main, args(node, pages=[{"size": "1G", "count": 5, "persist": "none"}],
                                             on_shortfall="warn"))
    assert kernel.nr("1G") == 4
    assert result["pages"][0]["after"] == 4 and result["pages"][0]["shortfall"] is True
    assert any("requested 5" in w for w in result["warnings"])
    # the pool action says what was written; its after is what the kernel holds (read back)
    assert texts(result) == ["write /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages: 0 -> 5"]
    assert result["actions"][0]["after"] == 4 and result["pools_changed"] is True


def test_growth_beyond_mem_available_is_not_attempted(run_module, node, kernel):
    params = args(node, pages=[{"size": "2M", "count": 100000}])
    predicted = run_module(hugepages.main, params, check_mode=True, expect_failure=True)
    result = run_module(hugepages.main, params, expect_failure=True)
    for msg in (predicted["msg"], result["msg"]):
        assert "2M pages: requested 100000 (total), allocated 0 (node0: 0, node1: 0); " \
            "before 0 (node0: 0, node1: 0); not attempted: 100000 more 2M pages need 200000 MiB, " \
            "MemAvailable is 7812 MiB" in msg
    assert kernel.writes == []
    assert not node.exists(SYSCTL_FILE)


def test_refuses_to_shrink_below_in_use(run_module, node, monkeypatch):
    fake = FakeKernel(node, {"2M": {"0": 1000}}, used={"2M": {"0": 30}}, resv={"2M": 10})
    monkeypatch.setattr(_fs.HostRoot, "write", lambda self, p, v: fake.write(self, p, v))  # pylint: disable=unnecessary-lambda
    fake.write(None, fake._pool("2M") + "/nr_hugepages", "64")
    fake.writes.clear()
    before = node.snapshot()
    result = run_module(hugepages.main, args(node, pages=[{"size": "2M", "count": 32}]),
                        expect_failure=True)
    assert "refusing to shrink to 32 pages: 40 are in use or reserved (HugePages total 64, " \
        "free 34, reserved 10)" in result["msg"]
    assert node.snapshot() == before
    result = run_module(hugepages.main, args(node, pages=[
        {"size": "2M", "count": 20, "per_node": {"0": 20}, "persist": "boot_unit"}]), expect_failure=True)
    assert "refusing to shrink node0 to 20 pages: 30 are in use" in result["msg"]


@pytest.mark.parametrize("pages, fragment", [
    ([{"size": "2M", "count": -1}], "count must be >= 0"),
    ([{"size": "2M", "count": 4}, {"size": "2M", "count": 8}], "size given twice"),
    ([{"size": "1G", "count": 4}], "persist sysctl (vm.nr_hugepages) only covers the default"),
    ([{"size": "2M", "count": 4, "per_node": {"0": 2, "1": 1}, "persist": "boot_unit"}],
     "per_node counts add up to 3, count is 4"),
    ([{"size": "2M", "count": 4, "per_node": {"0": 2, "7": 2}, "persist": "boot_unit"}],
     "NUMA node 7 does not exist here (nodes: 0, 1)"),
    ([{"size": "2M", "count": 4, "per_node": {"0": 2, "1": 2}}], "cannot be persisted with sysctl"),
    ([{"size": "2M", "count": 4, "per_node": {"0": -2}, "persist": "none"}], "per_node needs"),
    ([{"size": "4M", "count": 4}], "value of size must be one of: 2M, 1G, got: 4M found in pages"),
])
def test_bad_pages_named(run_module, node, kernel, pages, fragment):
    result = run_module(hugepages.main, args(node, pages=pages), expect_failure=True)
    assert fragment in result["msg"]
    assert kernel.writes == []


def test_unsupported_size_and_thp_value(run_module, node, kernel):
    import shutil
    shutil.rmtree(node.path("/sys/kernel/mm/hugepages/hugepages-1048576kB"))
    result = run_module(hugepages.main, args(node, pages=[{"size": "1G", "count": 1, "persist": "cmdline"}]),
                        expect_failure=True)
    assert "offers no 1G pages" in result["msg"]
    node.put("/sys/kernel/mm/transparent_hugepage/defrag", "always [madvise] never\n")
    result = run_module(hugepages.main, args(node, thp={"defrag": "defer+madvise"}), expect_failure=True)
    assert "thp.defrag: 'defer+madvise' is not offered by this kernel (offers: always, madvise, never)" \
        in result["msg"]


def test_thp_null_leaves_alone_and_bad_value_named(run_module, node, kernel):
    result = run_module(hugepages.main, args(node, thp={"enabled": "madvise", "defrag": None}))
    assert list(result["thp"]) == ["enabled"]
    assert node.get(TMPFILES).splitlines()[2:] == [
        "w /sys/kernel/mm/transparent_hugepage/enabled - - - - madvise"]
    result = run_module(hugepages.main, args(node, thp={"enabled": "sometimes"}), expect_failure=True)
    assert "thp.enabled: 'sometimes' is not one of always, madvise, never" in result["msg"]


def test_hugetlbfs_mount_and_fstab(run_module, node, kernel, mount_cmd):
    node.put("/etc/fstab", "UUID=abc / ext4 defaults 0 1\n/old /dev/hugepages-1G hugetlbfs x 0 0\n")
    mounts = [{"size": "1G", "path": "/dev/hugepages-1G", "owner": "root", "group": "0", "mode": "0770"}]
    result = run_module(hugepages.main, args(node, mounts=mounts))
    assert mount_cmd[0][1:] == ["-t", "hugetlbfs", "-o", "pagesize=1G,uid=0,gid=0,mode=0770",
                                "hugetlbfs", str(node.path("/dev/hugepages-1G"))]
    assert node.get("/etc/fstab") == (
        "UUID=abc / ext4 defaults 0 1\n"
        "hugetlbfs /dev/hugepages-1G hugetlbfs pagesize=1G,uid=0,gid=0,mode=0770 0 0\n")
    assert texts(result)[-1] == "write /etc/fstab"
    assert kinds(result) == ["mount", "file"]
    assert result["actions"][0]["after"] == "pagesize=1G,uid=0,gid=0,mode=0770"
    again = run_module(hugepages.main, args(node, mounts=mounts))
    assert again["changed"] is False, again["actions"]
    assert len(mount_cmd) == 1


def test_hugetlbfs_owner_drift_fixed_without_remount(run_module, node, kernel, mount_cmd):
    mounts = [{"size": "2M", "path": "/mnt/huge", "mode": "0770"}]
    run_module(hugepages.main, args(node, mounts=mounts))
    os.chmod(node.path("/mnt/huge"), 0o755)
    result = run_module(hugepages.main, args(node, mounts=mounts))
    assert texts(result) == ["set owner/mode of /mnt/huge: 0:0 0755 -> 0:0 0770"]
    assert result["actions"][0]["kind"] == "owner" and result["actions"][0]["before"] == "0:0 0755"
    assert oct(os.stat(node.path("/mnt/huge")).st_mode & 0o7777) == "0o770"
    assert len(mount_cmd) == 1


def test_hugetlbfs_wrong_pagesize_or_fs_refused(run_module, node, kernel, mount_cmd):
    node.path("/mnt/huge").mkdir(parents=True)
    node.put("/proc/mounts", "hugetlbfs /mnt/huge hugetlbfs rw,pagesize=1024M 0 0\n"
             "tmpfs /mnt/tmp tmpfs rw 0 0\n")
    result = run_module(hugepages.main, args(node, mounts=[{"size": "2M", "path": "/mnt/huge"}]),
                        expect_failure=True)
    assert "mounted with pagesize 1G, wanted 2M; unmount it first" in result["msg"]
    result = run_module(hugepages.main, args(node, mounts=[{"size": "2M", "path": "/mnt/tmp"}]),
                        expect_failure=True)
    assert "tmpfs is mounted there" in result["msg"]
    result = run_module(hugepages.main, args(node, mounts=[{"size": "2M", "path": "/mnt/x",
                                                            "owner": "no-such-user-x"}]),
                        expect_failure=True)
    assert "owner 'no-such-user-x' does not exist" in result["msg"]
    assert mount_cmd == []


def test_sysctl_override_warned(run_module, node, kernel):
    node.put("/etc/sysctl.d/99-zz.conf", "vm.nr_hugepages = 0\n")
    result = run_module(hugepages.main, args(node, pages=[{"size": "2M", "count": 8}]))
    assert result["overrides"][0]["file"] == "/etc/sysctl.d/99-zz.conf"
    assert any("vm.nr_hugepages" in w for w in result["warnings"])


def test_check_mode_predicts_reboot_for_1g_beyond_memory(run_module, node, kernel):
    result = run_module(hugepages.main, args(node, pages=[
        {"size": "1G", "count": 16, "persist": "cmdline"}]), check_mode=True)
    assert result["reboot_required"] is True
    assert result["cmdline_args"] == ["hugepagesz=1G", "hugepages=16"]
    assert kernel.writes == []
    real = run_module(hugepages.main, args(node, pages=[
        {"size": "1G", "count": 16, "persist": "cmdline"}]))
    assert real["reboot_required"] is True and kernel.writes == []
    assert real["changed"] is False and real["actions"] == []
    assert real["pools_changed"] is False and result["pools_changed"] is False
    assert real["pages"][0]["shortfall"] is True and real["pages"][0]["after"] == 0
    assert any("not attempted: 16 more 1G pages" in w for w in real["warnings"])
    assert predicted_warnings_match(result, real)


def predicted_warnings_match(predicted, real):
    return predicted["warnings"] == real["warnings"] and predicted["pages"] == real["pages"]
