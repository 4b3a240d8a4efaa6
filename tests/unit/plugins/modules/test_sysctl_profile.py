"""sysctl_profile against a fake /proc/sys and /etc tree."""

from __future__ import annotations

import errno

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _fs, _sysctl
from ansible_collections.aiinfra.datapath.plugins.modules import sysctl_profile
from capability_results import texts

FILE = "/etc/sysctl.d/90-aiinfra-datapath.conf"


@pytest.fixture
def proc(node):
    node.put("/proc/sys/net/core/rmem_max", "212992\n", 0o644)
    node.put("/proc/sys/net/core/somaxconn", "4096\n", 0o644)
    node.put("/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n", 0o644)
    node.put("/proc/sys/vm/swappiness", "60\n", 0o644)
    node.put("/proc/sys/vm/zone_reclaim_mode", "0\n", 0o644)
    node.put("/proc/sys/net/ipv4/conf/eth0.100/rp_filter", "1\n", 0o644)
    node.put("/proc/sys/net/core/wmem_max", "212992\n", 0o444)  # read-only here
    return node


def args(node, keys, **extra):
    base = {"keys": keys, "root": str(node.root)}
    base.update(extra)
    return base


def test_applies_differing_keys_and_writes_file(run_module, proc):
    result = run_module(sysctl_profile.main, args(proc, {
        "net.core.rmem_max": {"value": "16777216", "mode": "minimum", "scope": "global"},
        "net.ipv4.tcp_rmem": "4096 131072 16777216",
        "vm.swappiness": 10,
        "net.core.somaxconn": {"value": "1024", "mode": "minimum"},
    }))
    assert result["changed"] is True
    assert proc.get("/proc/sys/net/core/rmem_max") == "16777216\n"
    assert proc.get("/proc/sys/net/ipv4/tcp_rmem") == "4096 131072 16777216\n"
    assert proc.get("/proc/sys/vm/swappiness") == "10\n"
    assert proc.get("/proc/sys/net/core/somaxconn") == "4096\n"  # minimum: never lowered
    keys = result["keys"]
    assert keys["net.core.somaxconn"]["action"] == "unchanged"
    assert keys["net.ipv4.tcp_rmem"] == {
        "wanted": "4096 131072 16777216", "target": "4096 131072 16777216", "mode": "exact",
        "scope": "netns", "before": "4096 131072 6291456", "after": "4096 131072 16777216",
        "action": "set"}
    assert keys["net.core.rmem_max"]["scope"] == "global"
    assert keys["vm.swappiness"]["scope"] == "global"
    assert proc.get(FILE).splitlines()[2:] == [
        "net.core.rmem_max = 16777216",
        "net.core.somaxconn = 4096",
        "net.ipv4.tcp_rmem = 4096 131072 16777216",
        "vm.swappiness = 10",
    ]
    assert proc.get(FILE).startswith("# Managed by aiinfra.datapath.sysctl_profile")
    assert oct(proc.path(FILE).stat().st_mode & 0o777) == "0o644"
    assert "write %s" % FILE in texts(result)
    assert "set vm.swappiness: 60 -> 10" in texts(result)


def test_second_run_is_unchanged(run_module, proc):
    keys = {"net.ipv4.tcp_rmem": "4096 131072 16777216", "vm.swappiness": "10"}
    assert run_module(sysctl_profile.main, args(proc, keys))["changed"] is True
    before = proc.snapshot()
    again = run_module(sysctl_profile.main, args(proc, keys))
    assert again["changed"] is False
    assert again["actions"] == []
    assert proc.snapshot() == before


def test_whitespace_and_tabs_are_not_a_difference(run_module, proc):
    proc.put(FILE, _sysctl.render_conf({"net.ipv4.tcp_rmem": "4096 131072 6291456"}))
    result = run_module(sysctl_profile.main, args(proc, {"net.ipv4.tcp_rmem": "4096  131072\t6291456"}))
    assert result["changed"] is False
    assert result["keys"]["net.ipv4.tcp_rmem"]["action"] == "unchanged"


def test_minimum_multi_value_element_wise(run_module, proc):
    proc.put("/proc/sys/net/ipv4/tcp_rmem", "8192\t87380\t33554432\n", 0o644)
    result = run_module(sysctl_profile.main, args(proc, {
        "net.ipv4.tcp_rmem": {"value": "4096 131072 16777216", "mode": "minimum"}}))
    assert proc.get("/proc/sys/net/ipv4/tcp_rmem") == "8192 131072 33554432\n"
    assert result["keys"]["net.ipv4.tcp_rmem"]["target"] == "8192 131072 33554432"
    assert "net.ipv4.tcp_rmem = 8192 131072 33554432" in proc.get(FILE)


def test_minimum_needs_integers_and_same_field_count(run_module, proc):
    result = run_module(sysctl_profile.main, args(proc, {
        "vm.swappiness": {"value": "abc", "mode": "minimum"}}), expect_failure=True)
    assert "vm.swappiness: mode minimum needs integer" in result["msg"]
    result = run_module(sysctl_profile.main, args(proc, {
        "net.ipv4.tcp_rmem": {"value": "4096 131072", "mode": "minimum"}}), expect_failure=True)
    assert "net.ipv4.tcp_rmem: minimum" in result["msg"]
    assert not proc.exists(FILE)


def test_missing_and_read_only_fail_before_touching(run_module, proc):
    before = proc.snapshot()
    result = run_module(sysctl_profile.main, args(proc, {
        "vm.swappiness": "10",
        "net.ipv4.no_such_key": "1",
        "net.core.wmem_max": "16777216",
    }), expect_failure=True)
    assert "net.ipv4.no_such_key does not exist on this kernel" in result["msg"]
    assert "net.core.wmem_max is read-only here (value 212992)" in result["msg"]
    assert result["msg"].startswith("nothing was changed")
    assert proc.snapshot() == before


def test_ignore_missing_skips_and_keeps_key_out_of_file(run_module, proc):
    result = run_module(sysctl_profile.main, args(proc, {
        "vm.swappiness": "10",
        "net.ipv4.no_such_key": {"value": "1", "ignore_missing": True},
        "net.core.wmem_max": {"value": "16777216", "ignore_missing": "yes"},
    }))
    assert result["keys"]["net.ipv4.no_such_key"]["action"] == "skipped_missing"
    assert result["keys"]["net.core.wmem_max"]["action"] == "skipped_read_only"
    assert "no_such_key" not in proc.get(FILE)
    assert "wmem_max" not in proc.get(FILE)


def test_slash_names_and_dotted_interface_names(run_module, proc):
    result = run_module(sysctl_profile.main, args(proc, {
        "net/ipv4/conf/eth0.100/rp_filter": "2"}))
    assert proc.get("/proc/sys/net/ipv4/conf/eth0.100/rp_filter") == "2\n"
    assert "net.ipv4.conf.eth0/100.rp_filter" in result["keys"]


def test_check_mode_touches_nothing_and_predicts(run_module, proc):
    keys = {"vm.swappiness": "10", "net.ipv4.tcp_rmem": "4096 131072 16777216"}
    before = proc.snapshot()
    predicted = run_module(sysctl_profile.main, args(proc, keys), check_mode=True, diff=True)
    assert proc.snapshot() == before
    assert predicted["changed"] is True
    real = run_module(sysctl_profile.main, args(proc, keys), diff=True)
    assert predicted["actions"] == real["actions"]
    assert predicted["keys"] == real["keys"]
    assert predicted["diff"] == real["diff"]


def test_diff_content(run_module, proc):
    result = run_module(sysctl_profile.main, args(proc, {"vm.swappiness": "10"}), diff=True)
    live, conf = result["diff"]
    assert live["before"] == "vm.swappiness = 60\n"
    assert live["after"] == "vm.swappiness = 10\n"
    assert conf["before"] == ""
    assert conf["after"].endswith("vm.swappiness = 10\n")
    assert conf["after_header"] == FILE


def test_apply_false_only_persists(run_module, proc):
    result = run_module(sysctl_profile.main, args(proc, {"vm.swappiness": "10"}, apply=False))
    assert proc.get("/proc/sys/vm/swappiness") == "60\n"
    assert result["keys"]["vm.swappiness"]["action"] == "persist_only"
    assert "vm.swappiness = 10" in proc.get(FILE)
    assert texts(result) == ["write %s" % FILE]


def test_other_files_are_never_edited(run_module, proc):
    proc.put("/etc/sysctl.d/10-other.conf", "vm.swappiness=30\n")
    proc.put("/etc/sysctl.conf", "# local\n")
    run_module(sysctl_profile.main, args(proc, {"vm.swappiness": "10"}))
    assert proc.get("/etc/sysctl.d/10-other.conf") == "vm.swappiness=30\n"
    assert proc.get("/etc/sysctl.conf") == "# local\n"


def _failing_write(fail_on, store=None):
    real = _fs.HostRoot.write

    def write(self, path, value):
        if path.endswith(fail_on):
            if store is None:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real(self, path, store)
        return real(self, path, value)
    return write


def test_rejected_value_rolls_back(run_module, proc, monkeypatch):
    monkeypatch.setattr(_fs.HostRoot, "write", _failing_write("vm/zone_reclaim_mode"))
    result = run_module(sysctl_profile.main, args(proc, {
        "net.core.rmem_max": "16777216",
        "vm.swappiness": "10",
        "vm.zone_reclaim_mode": "7",
    }), expect_failure=True)
    assert "vm.zone_reclaim_mode: rejected by the kernel (Invalid argument)" in result["msg"]
    assert "wanted '7', kernel holds '0'" in result["msg"]
    assert "vm.zone_reclaim_mode left unchanged at '0'; rolled back 2 other key(s)" in result["msg"]
    assert proc.get("/proc/sys/net/core/rmem_max") == "212992\n"
    assert proc.get("/proc/sys/vm/swappiness") == "60\n"
    assert [r["key"] for r in result["rollback"]] == ["vm.swappiness", "net.core.rmem_max"]
    assert not proc.exists(FILE)


def test_clamped_value_fails_with_figures(run_module, proc, monkeypatch):
    monkeypatch.setattr(_fs.HostRoot, "write", _failing_write("vm/swappiness", store="100\n"))
    result = run_module(sysctl_profile.main, args(proc, {
        "net.core.rmem_max": "16777216", "vm.swappiness": "250"}), expect_failure=True)
    assert "vm.swappiness: clamped by the kernel: wanted '250', kernel holds '100'" in result["msg"]
    assert result["wanted"] == "250" and result["actual"] == "100"
    assert proc.get("/proc/sys/net/core/rmem_max") == "212992\n"
    assert not proc.exists(FILE)


@pytest.mark.parametrize("directory", [
    "/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d",
    "/lib/sysctl.d"])
def test_later_file_override_detected_in_every_dir(run_module, proc, directory):
    proc.put(directory + "/99-local.conf", "# x\n-vm.swappiness = 60\nvm.zone_reclaim_mode=1\n")
    result = run_module(sysctl_profile.main, args(proc, {
        "vm.swappiness": "10", "vm.zone_reclaim_mode": "1"}))
    assert result["overrides"] == [{
        "key": "vm.swappiness", "file": directory + "/99-local.conf", "value": "60",
        "wanted": "10", "reason": "applied after the managed file at boot"}]
    assert any("vm.swappiness" in w for w in result.get("warnings", []))


def test_earlier_file_is_not_an_override(run_module, proc):
    proc.put("/usr/lib/sysctl.d/50-default.conf", "vm.swappiness = 60\n")
    result = run_module(sysctl_profile.main, args(proc, {"vm.swappiness": "10"}))
    assert result["overrides"] == []


def test_same_name_masking_and_sysctl_conf(run_module, proc):
    # /etc masks /usr/lib's 99-x.conf: only the /etc one counts
    proc.put("/usr/lib/sysctl.d/99-x.conf", "vm.swappiness = 1\n")
    proc.put("/etc/sysctl.d/99-x.conf", "vm.swappiness = 10\n")
    proc.put("/etc/sysctl.conf", "vm.swappiness=5\n")
    result = run_module(sysctl_profile.main, args(proc, {"vm.swappiness": "10"}))
    assert [(o["file"], o["value"]) for o in result["overrides"]] == [("/etc/sysctl.conf", "5")]


def test_sysctl_conf_symlink_reported_once_and_globs(run_module, proc):
    proc.put("/etc/sysctl.conf", "net.ipv4.conf.*.rp_filter = 0\n")
    proc.path("/etc/sysctl.d").mkdir(parents=True, exist_ok=True)
    proc.path("/etc/sysctl.d/99-sysctl.conf").symlink_to("../sysctl.conf")
    result = run_module(sysctl_profile.main, args(proc, {"net.ipv4.conf.eth0/100.rp_filter": "2"}))
    assert [o["file"] for o in result["overrides"]] == ["/etc/sysctl.d/99-sysctl.conf"]


def test_managed_file_masked_by_higher_priority_dir(run_module, proc):
    proc.put("/etc/sysctl.d/90-ours.conf", "# local copy\n")
    result = run_module(sysctl_profile.main, args(
        proc, {"vm.swappiness": "10"}, file="/usr/lib/sysctl.d/90-ours.conf"))
    assert result["overrides"][0]["file"] == "/etc/sysctl.d/90-ours.conf"
    assert result["overrides"][0]["reason"] == "masks the managed file"


def test_on_override_fail_changes_nothing(run_module, proc):
    proc.put("/etc/sysctl.d/99-local.conf", "vm.swappiness = 60\n")
    before = proc.snapshot()
    result = run_module(sysctl_profile.main, args(
        proc, {"vm.swappiness": "10"}, on_override="fail"), expect_failure=True)
    assert "vm.swappiness=60 in /etc/sysctl.d/99-local.conf" in result["msg"]
    assert proc.snapshot() == before


@pytest.mark.parametrize("keys, fragment", [
    ({"vm.swappiness": {"value": "1", "mode": "max"}}, "mode must be exact or minimum"),
    ({"vm.swappiness": {"value": None}}, "value must be a non-empty"),
    ({"vm.swappiness": {"value": "1", "colour": "x"}}, "unknown option(s) colour"),
    ({"vm.swappiness": {"value": "1", "scope": "pod"}}, "scope must be netns or global"),
    ({"vm.swappiness": {"value": "1", "ignore_missing": "maybe"}}, "ignore_missing must be"),
    ({"vm..x": "1"}, "not a valid sysctl name"),
    ({"vm.swappiness": "1", "vm/swappiness": "2"}, "given twice"),
])
def test_bad_input_is_named(run_module, proc, keys, fragment):
    result = run_module(sysctl_profile.main, args(proc, keys), expect_failure=True)
    assert fragment in result["msg"]


def test_bad_top_level_option(run_module, proc):
    result = run_module(sysctl_profile.main, args(proc, {"vm.swappiness": "1"}, on_override="x"),
                        expect_failure=True)
    assert "on_override" in result["msg"]
    result = run_module(sysctl_profile.main, args(proc, {"vm.swappiness": "1"}, file="rel.conf"),
                        expect_failure=True)
    assert "absolute" in result["msg"]


def test_plan_scope_is_reported_and_checked(run_module, proc):
    result = run_module(sysctl_profile.main, args(proc, {
        "vm.swappiness": {"value": "10", "scope": "netns"},
        "net.ipv4.tcp_rmem": {"value": "4096 131072 6291456", "scope": "netns"}}))
    assert result["keys"]["vm.swappiness"]["scope"] == "netns"
    assert result["warnings"] == [
        "vm.swappiness: the plan says scope netns, this module classifies it as global; reported as given"]
