"""The TuneD backend: the plan's boot-time sysctls, THP and kernel arguments as one TuneD profile, and
what the other capabilities leave to it.

TuneD's own profiles and tuned-main.conf are verbatim (tests/fixtures/tuned, each with a .source);
tuned-adm is a fake that records its calls (the real TuneD reads the rendered profile in
tests/interop/test_sys_tuned.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _tuned
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._cmdline import DEFAULT_DROP_IN, KernelCmdline
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._hugepages import HugePages
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import SysctlProfile, boot_values_with_tuned
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned_profile import TunedProfile, at_least, render
from netfakes import FakeRunner

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "tuned"
NT = "/usr/lib/tuned/network-throughput/tuned.conf"
OURS = "/etc/tuned/aiinfra-datapath/tuned.conf"
TUNED_ADM = "/usr/sbin/tuned-adm"
KEYS = {"net.ipv4.tcp_rmem": {"value": "4096 87380 6291456", "mode": "minimum"},
        "net.core.somaxconn": {"value": "4096", "mode": "minimum"},
        "vm.dirty_ratio": {"value": "10", "mode": "exact"}}
THP = {"enabled": "madvise", "defrag": "madvise"}


@pytest.fixture
def tuned_node(node):
    """A node with Debian's tuned files and network-throughput active (the site's base profile)."""
    for path in FIXTURES.rglob("*"):
        if path.is_file() and not path.name.endswith(".source"):
            node.put("/" + str(path.relative_to(FIXTURES)), path.read_text())
    node.put(_tuned.ACTIVE_PROFILE, "network-throughput\n")
    node.put("/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro\n")
    return node


class TunedAdm:
    """tuned-adm as the daemon answers it; ``profile NAME`` writes active_profile as TuneD does."""

    def __init__(self, node, answers: bool = True) -> None:
        self.node, self.answers, self.calls = node, answers, []

    def __call__(self, argv):
        if argv[0] == "/usr/sbin/tuned":
            self.calls.append(["tuned"])
            return 0, "", ""
        if argv[0] != TUNED_ADM:
            return None
        self.calls.append(argv[1:])
        if argv[1:] == ["active"]:
            if self.answers:
                return 0, "Current active profile: x\n", ""
            # TuneD 2.20 without a daemon (tests/interop/test_sys_tuned.py): exit 0 all the same
            return 0, ("It seems that tuned daemon is not running, preset profile is not activated.\n"
                       "Preset profile: network-throughput\n"), ""
        if argv[1] == "profile":
            self.node.put(_tuned.ACTIVE_PROFILE, argv[2] + "\n")
            return 0, "", ""
        return None


def profile(node, tuned_adm: TunedAdm | None = None, check: bool = False, diff: bool = False, **params) -> dict:
    args = {"name": "aiinfra-datapath", "include": None, "sysctl": KEYS, "thp": THP,
            "kernel_args": ["iommu=pt"], "profile_dir": "/etc/tuned", "activate": True, "root": str(node.root),
            **params}
    which = {"tuned-adm": TUNED_ADM, "tuned": "/usr/sbin/tuned"} if tuned_adm else {}
    runner = FakeRunner([tuned_adm] if tuned_adm else [], which=which)
    return run(TunedProfile, args, Node(runner, str(node.root), check, diff))


def test_the_profile_includes_the_site_base_and_keeps_its_higher_minimums(tuned_node) -> None:
    result = profile(tuned_node)
    assert result["changed"] is True and result["include"] == "network-throughput"
    text = tuned_node.get(OURS)
    assert "[main]\nsummary=aiinfra.datapath node plan (sysctls, THP, kernel arguments)\ninclude=network-throughput\n" \
        in text
    # network-throughput (via throughput-performance) sets tcp_rmem higher: the minimum keeps TuneD's
    assert "net.ipv4.tcp_rmem=4096 131072 16777216\n" in text and "net.core.somaxconn=4096\n" in text
    assert "vm.dirty_ratio=10\n" in text  # exact: ours, although throughput-performance says 40
    assert result["sysctl_raised"] == {"net.ipv4.tcp_rmem": {"value": "4096 131072 16777216", "file": NT}}
    assert "[vm]\ntransparent_hugepages=madvise\ntransparent_hugepage.defrag=madvise\n" in text
    assert "[bootloader]\ncmdline_aiinfra_datapath=iommu=pt\n" in text
    # no TuneD to answer: active for TuneD's next start
    assert result["activated_with"] == "files" and tuned_node.get(_tuned.ACTIVE_PROFILE) == "aiinfra-datapath\n"
    assert tuned_node.get("/etc/tuned/profile_mode") == "manual\n"
    assert result["reboot_required"] is True and result["missing_args"] == ["iommu=pt"]


def test_a_second_run_keeps_the_base_it_included_and_changes_nothing(tuned_node) -> None:
    profile(tuned_node)
    again = profile(tuned_node)
    assert again["changed"] is False and again["actions"] == [] and again["include"] == "network-throughput"
    # TuneD now reads our profile over the base one, as the audit's facts will
    merged = _tuned.load(HostRoot(str(tuned_node.root)))
    assert merged["profiles"] == ["aiinfra-datapath"]
    assert merged["files"] == [OURS, NT, "/usr/lib/tuned/throughput-performance/tuned.conf"]
    assert merged["sysctl"]["vm.dirty_ratio"] == {"value": "10", "file": OURS}
    assert merged["vm"]["transparent_hugepages"] == {"value": "madvise", "file": OURS}


def test_tuned_adm_activates_it_when_tuned_answers(tuned_node) -> None:
    adm = TunedAdm(tuned_node)
    result = profile(tuned_node, adm)
    assert result["activated_with"] == "tuned-adm" and adm.calls == [["active"], ["profile", "aiinfra-datapath"]]
    assert not tuned_node.exists("/etc/tuned/profile_mode")
    adm.calls.clear()
    assert profile(tuned_node, adm)["changed"] is False and adm.calls == [["active"]]
    # a changed plan is re-applied through tuned-adm
    changed = profile(tuned_node, adm, sysctl={**KEYS, "vm.swappiness": {"value": "10", "mode": "exact"}})
    assert [a["kind"] for a in changed["actions"]] == ["file", "activate"]


def test_without_a_daemon_the_files_and_with_daemon_0_one_shot_tuned(tuned_node) -> None:
    adm = TunedAdm(tuned_node, answers=False)
    result = profile(tuned_node, adm)
    assert result["activated_with"] == "files" and adm.calls == [["active"]]  # never `tuned-adm profile`
    assert tuned_node.get(_tuned.ACTIVE_PROFILE) == "aiinfra-datapath\n"
    # daemon = 0: tuned applies the active profile once and exits
    tuned_node.put(_tuned.ACTIVE_PROFILE, "network-throughput\n")
    tuned_node.put("/etc/tuned/tuned-main.conf", tuned_node.get("/etc/tuned/tuned-main.conf") + "daemon = 0\n")
    adm.calls.clear()
    once = profile(tuned_node, adm)
    assert once["activated_with"] == "tuned one-shot" and adm.calls == [["active"], ["tuned"]]
    assert [a["kind"] for a in once["actions"]] == ["file", "apply"]
    adm.calls.clear()
    assert profile(tuned_node, adm)["changed"] is False and adm.calls == [["active"]]


def test_check_mode_writes_nothing_and_shows_the_profile(tuned_node) -> None:
    result = profile(tuned_node, check=True, diff=True)
    assert result["changed"] is True and not tuned_node.exists(OURS)
    assert tuned_node.get(_tuned.ACTIVE_PROFILE) == "network-throughput\n"
    assert [d["after_header"] for d in result["diff"]] == [OURS, _tuned.ACTIVE_PROFILE, "/etc/tuned/profile_mode"]


def test_no_base_profile_and_a_named_one(tuned_node) -> None:
    tuned_node.put(_tuned.ACTIVE_PROFILE, "")
    assert profile(tuned_node)["include"] is None and "include=" not in tuned_node.get(OURS)
    named = profile(tuned_node, include="throughput-performance")
    assert named["include"] == "throughput-performance" and "include=throughput-performance\n" in tuned_node.get(OURS)
    missing = profile(tuned_node, include="no-such-profile")
    assert missing["failed"] is True and "no-such-profile is not installed here" in missing["msg"]


@pytest.mark.parametrize(("params", "words"), [
    ({"name": "../etc"}, "name must be"), ({"include": "a b"}, "include must be"),
    ({"sysctl": {"net.core.somaxconn": {"value": ""}}}, "cannot go into a TuneD profile"),
    ({"sysctl": {"net core]": {"value": "1"}}}, "cannot go into a TuneD profile"),
    ({"thp": {"enabled": "sometimes"}}, "thp.enabled must be one of"),
    ({"kernel_args": ["a b"]}, "one argument, no spaces")])
def test_bad_input_is_refused_before_anything_is_read(tuned_node, params, words) -> None:
    result = profile(tuned_node, **params)
    assert result["failed"] is True and words in result["msg"] and not tuned_node.exists(OURS)


def test_render_and_minimums() -> None:
    assert render(None, {}, {}, []) == render(None, {}, {"enabled": None}, [])
    assert "[sysctl]" not in render(None, {}, {}, []) and "[vm]" not in render(None, {}, {}, [])
    assert at_least("4096 87380 6291456", "4096 131072 16777216") == "4096 131072 16777216"
    assert at_least("8192", "4096") == "8192" and at_least("1", "x") == "1" and at_least("1 2", "3") == "1 2"


# --- what the other capabilities leave to the profile --------------------------------------------------

def test_sysctl_profile_without_persist_sets_live_values_and_removes_its_file(tuned_node) -> None:
    tuned_node.put("/proc/sys/vm/dirty_ratio", "20\n", 0o644)
    tuned_node.put("/etc/sysctl.d/90-aiinfra-datapath.conf", "vm.dirty_ratio = 10\n")
    args = {"keys": {"vm.dirty_ratio": "10"}, "file": "/etc/sysctl.d/90-aiinfra-datapath.conf", "persist": False,
            "apply": True, "on_override": "warn", "root": str(tuned_node.root)}
    result = run(SysctlProfile, args, Node(FakeRunner(), str(tuned_node.root)))
    assert [a["kind"] for a in result["actions"]] == ["sysctl", "file"]
    assert result["actions"][1]["after"] is None and not tuned_node.exists("/etc/sysctl.d/90-aiinfra-datapath.conf")
    assert tuned_node.get("/proc/sys/vm/dirty_ratio").strip() == "10"
    assert run(SysctlProfile, args, Node(FakeRunner(), str(tuned_node.root)))["changed"] is False


def test_hugepages_without_thp_persist_leaves_thp_out_of_the_boot_file(tuned_node) -> None:
    thp = "/sys/kernel/mm/transparent_hugepage"
    tuned_node.put(f"{thp}/enabled", "always [madvise] never\n", 0o644)
    tuned_node.put(f"{thp}/defrag", "always defer defer+madvise [madvise] never\n", 0o644)
    tuned_node.put("/proc/meminfo", "MemTotal: 16384000 kB\nHugepagesize: 2048 kB\n")
    args = {"pages": [], "thp": {"enabled": "never", "defrag": None}, "mounts": [], "on_shortfall": "fail",
            "thp_persist": False, "sysctl_file": "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf",
            "boot_unit_file": "/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf", "fstab": "/etc/fstab",
            "root": str(tuned_node.root)}
    result = run(HugePages, args, Node(FakeRunner(), str(tuned_node.root)))
    assert not tuned_node.exists("/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf")
    assert "[never]" in tuned_node.get(f"{thp}/enabled") or tuned_node.get(f"{thp}/enabled").strip() == "never"
    assert result["changed"] is True
    with_file = run(HugePages, {**args, "thp_persist": True}, Node(FakeRunner(), str(tuned_node.root)))
    boot = tuned_node.get("/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf")
    assert "transparent_hugepage/enabled - - - - never" in boot
    assert with_file["changed"] is True


def test_kernel_cmdline_under_tuned_removes_its_drop_in_and_reports_the_reboot(tuned_node) -> None:
    tuned_node.put(DEFAULT_DROP_IN, '# Managed by aiinfra.datapath.kernel_cmdline\n'
                                    'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n')
    tuned_node.put("/boot/grub/grub.cfg", "")
    args = {"args": ["iommu=pt"], "remove": [], "backend": "tuned", "drop_in": DEFAULT_DROP_IN,
            "update_bootloader": True, "when_no_bootloader": "skip", "root": str(tuned_node.root)}
    grub = FakeRunner([lambda argv: (0, "", "") if argv[0] == "/usr/sbin/update-grub" else None],
                      which={"update-grub": "/usr/sbin/update-grub"})
    result = run(KernelCmdline, args, Node(grub, str(tuned_node.root)))
    assert result["bootloader"] == "tuned" and result["reboot_required"] is True
    assert [a["kind"] for a in result["actions"]] == ["file", "command", "flag"]
    assert not tuned_node.exists(DEFAULT_DROP_IN) and grub.calls == [["/usr/sbin/update-grub"]]
    again = run(KernelCmdline, args, Node(grub, str(tuned_node.root)))
    assert again["changed"] is False and again["reboot_required"] is True
    # no boot loader at all (a container, the lab): nothing persists, no reboot is asked for
    shutil.rmtree(tuned_node.path("/boot"))
    bare = run(KernelCmdline, args, Node(FakeRunner(), str(tuned_node.root)))
    assert bare["reboot_required"] is False and bare["changed"] is False


def test_the_boot_values_the_audit_reads_come_from_the_profile_where_no_sysctl_d_file_sets_them(tuned_node) -> None:
    profile(tuned_node)
    host = HostRoot(str(tuned_node.root))
    found = boot_values_with_tuned(host, ["vm.dirty_ratio", "net.ipv4.tcp_rmem", "vm.swappiness"])
    assert found["vm.dirty_ratio"] == ("10", OURS)
    assert found["net.ipv4.tcp_rmem"] == ("4096 131072 16777216", OURS)
    assert found["vm.swappiness"] == (None, None)
    # TuneD re-applies sysctl.d after its own values (reapply_sysctl = 1): a file's value wins
    tuned_node.put("/etc/sysctl.d/60-site.conf", "vm.dirty_ratio = 30\n")
    assert boot_values_with_tuned(host, ["vm.dirty_ratio"])["vm.dirty_ratio"] == ("30", "/etc/sysctl.d/60-site.conf")
    main = tuned_node.get("/etc/tuned/tuned-main.conf").replace("reapply_sysctl = 1", "reapply_sysctl = 0")
    tuned_node.put("/etc/tuned/tuned-main.conf", main)
    assert boot_values_with_tuned(host, ["vm.dirty_ratio"])["vm.dirty_ratio"] == ("10", OURS)
