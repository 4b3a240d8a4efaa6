"""TuneD's active profile read as TuneD reads it, and sysctl_profile's report of what it sets.

The profiles and tuned-main.conf are TuneD's own files, verbatim (tests/fixtures/tuned, each with a
.source); the site's profile in /etc/tuned is written here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _tuned
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.modules import hugepages, sysctl_profile

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "tuned"
NT = "/usr/lib/tuned/network-throughput/tuned.conf"
TP = "/usr/lib/tuned/throughput-performance/tuned.conf"


@pytest.fixture
def tuned_node(node):
    """A node with TuneD's files (the two profiles, tuned-main.conf; upstream, see the .source files)
    and no active profile yet."""
    for path in FIXTURES.rglob("*"):
        if path.is_file() and not path.name.endswith(".source"):
            node.put("/" + str(path.relative_to(FIXTURES)), path.read_text())
    return node


def load(node):
    return _tuned.load(HostRoot(str(node.root)))


def test_no_active_profile_is_none(tuned_node) -> None:
    assert load(tuned_node) is None
    tuned_node.put(_tuned.ACTIVE_PROFILE, "\n")
    assert load(tuned_node) is None


def test_include_chain_and_merge_as_tuned_does(tuned_node) -> None:
    tuned_node.put(_tuned.ACTIVE_PROFILE, "network-throughput\n")
    found = load(tuned_node)
    assert found["profiles"] == ["network-throughput"] and found["files"] == [NT, TP]
    assert found["reapply_sysctl"] is True and found["missing"] == [] and found["errors"] == []
    # quotes removed; the included profile's keys kept, the including one's added
    assert found["sysctl"]["net.ipv4.tcp_rmem"] == {"value": "4096 131072 16777216", "file": NT}
    assert found["sysctl"]["vm.dirty_ratio"] == {"value": "40", "file": TP}
    assert "vm.dirty_background_ratio" not in found["sysctl"]  # commented out
    assert found["vm"] == {"transparent_hugepages": {"value": "always", "file": TP}}
    assert "elevator" not in found["sysctl"] and "governor" not in found["vm"]


def test_a_site_profile_of_the_same_name_extends_the_system_one(tuned_node) -> None:
    """/etc/tuned wins over /usr/lib/tuned, and include= of its own name reaches the system profile."""
    tuned_node.put(_tuned.ACTIVE_PROFILE, "network-throughput")
    tuned_node.put("/etc/tuned/network-throughput/tuned.conf",
                   "[main]\ninclude=network-throughput\n\n[sysctl]\nnet.ipv4.tcp_rmem=4096 87380 6291456\n"
                   "[vm]\nreplace=true\n\n[my_buffers]\ntype=sysctl\nnet.core.rmem_max=67108864\n"
                   "[disk]\nenabled=false\n")
    found = load(tuned_node)
    assert found["files"] == ["/etc/tuned/network-throughput/tuned.conf", NT, TP]
    assert found["sysctl"]["net.ipv4.tcp_rmem"]["value"] == "4096 87380 6291456"
    assert found["sysctl"]["net.ipv4.tcp_wmem"]["file"] == NT
    assert found["sysctl"]["net.core.rmem_max"]["value"] == "67108864"  # a section of type sysctl
    assert found["vm"] == {}  # replace=true dropped the included transparent_hugepages
    assert "enabled" not in found["sysctl"]


def test_several_profiles_missing_ones_and_broken_files(tuned_node) -> None:
    tuned_node.put(_tuned.ACTIVE_PROFILE, "throughput-performance gone-profile ../escape")
    tuned_node.put("/etc/tuned/tuned-main.conf",
                   "reapply_sysctl = 0\nprofile_dirs = /usr/lib/tuned;/srv/tuned  # site profiles\n")
    tuned_node.put("/srv/tuned/gone-profile/tuned.conf", "[sysctl\nbroken")
    found = load(tuned_node)
    assert found["profiles"] == ["throughput-performance", "gone-profile"]  # unsafe names dropped, as TuneD does
    assert found["reapply_sysctl"] is False
    assert found["files"] == [TP, "/srv/tuned/gone-profile/tuned.conf"]
    assert len(found["errors"]) == 1 and found["errors"][0].startswith("/srv/tuned/gone-profile/tuned.conf:")
    os.remove(tuned_node.root / "srv/tuned/gone-profile/tuned.conf")
    assert load(tuned_node)["missing"] == ["gone-profile"]


def test_runtime_include_is_not_followed(tuned_node) -> None:
    tuned_node.put(_tuned.ACTIVE_PROFILE, "site")
    tuned_node.put("/etc/tuned/site/tuned.conf",
                   "[main]\ninclude=${f:virt_check:virtual-guest:throughput-performance}\n")
    found = load(tuned_node)
    assert found["files"] == ["/etc/tuned/site/tuned.conf"] and "expanded by TuneD at runtime" in found["errors"][0]


def test_conflicts_name_the_profile_the_file_and_who_wins(tuned_node) -> None:
    tuned_node.put(_tuned.ACTIVE_PROFILE, "network-throughput")
    found = load(tuned_node)

    def same(ours: str, theirs: str) -> bool:
        return ours.split() == theirs.split()

    wanted = {"net.ipv4.tcp_rmem": "4096 131072 33554432", "net.ipv4.tcp_wmem": "4096  16384 16777216",
              "vm.swappiness": "10"}
    assert _tuned.sysctl_conflicts(found, wanted, same) == [
        {"key": "net.ipv4.tcp_rmem", "value": "4096 131072 16777216", "wanted": "4096 131072 33554432",
         "file": NT, "profile": "network-throughput", "wins": "sysctl.d"}]
    found["reapply_sysctl"] = False
    assert _tuned.sysctl_conflicts(found, wanted, same)[0]["wins"] == "tuned"
    assert _tuned.sysctl_conflicts(None, wanted, same) == []


def test_sysctl_profile_reports_the_tuned_profile(run_module, tuned_node) -> None:
    tuned_node.put("/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n", 0o644)
    tuned_node.put("/proc/sys/vm/dirty_ratio", "20\n", 0o644)
    keys = {"net.ipv4.tcp_rmem": "4096 131072 33554432", "vm.dirty_ratio": "40"}
    result = run_module(sysctl_profile.main, {"keys": keys, "root": str(tuned_node.root)})
    assert result["tuned"] is None and not result.get("warnings")
    tuned_node.put(_tuned.ACTIVE_PROFILE, "network-throughput\n")
    result = run_module(sysctl_profile.main, {"keys": keys, "root": str(tuned_node.root)})
    assert result["tuned"]["profiles"] == ["network-throughput"] and result["tuned"]["reapply_sysctl"] is True
    assert [(c["key"], c["wins"]) for c in result["tuned"]["conflicts"]] == [("net.ipv4.tcp_rmem", "sysctl.d")]
    assert not result.get("warnings")  # TuneD re-applies /etc/sysctl.d after its own values: ours stays
    main = (FIXTURES / "etc/tuned/tuned-main.conf").read_text().replace("reapply_sysctl = 1", "reapply_sysctl = 0")
    tuned_node.put("/etc/tuned/tuned-main.conf", main)
    result = run_module(sysctl_profile.main, {"keys": keys, "root": str(tuned_node.root)})
    assert result["tuned"]["conflicts"][0]["wins"] == "tuned"
    warning = " ".join(result["warnings"])
    assert "net.ipv4.tcp_rmem: the active TuneD profile network-throughput sets 4096 131072 16777216 in " + NT \
        in warning and "reapply_sysctl = 0" in warning


def test_hugepages_reports_tunes_thp_setting_which_wins(run_module, tuned_node) -> None:
    """throughput-performance sets transparent_hugepages=always; TuneD writes it after the boot's tmpfiles."""
    thp = "/sys/kernel/mm/transparent_hugepage"
    tuned_node.put(f"{thp}/enabled", "always [madvise] never\n", 0o644)
    tuned_node.put(f"{thp}/defrag", "always defer defer+madvise [madvise] never\n", 0o644)
    tuned_node.put("/proc/meminfo", "MemTotal: 16384000 kB\nHugepagesize: 2048 kB\n")
    tuned_node.put(_tuned.ACTIVE_PROFILE, "throughput-performance\n")
    result = run_module(hugepages.main, {"root": str(tuned_node.root), "pages": [], "thp": {"enabled": "madvise"}})
    assert result["tuned"]["conflicts"] == [
        {"key": "transparent_hugepages", "value": "always", "wanted": "madvise", "file": TP,
         "profile": "throughput-performance", "wins": "tuned"}]
    assert "THP ends as always, not madvise" in " ".join(result["warnings"])
    result = run_module(hugepages.main, {"root": str(tuned_node.root), "pages": [], "thp": {"enabled": "always"}})
    assert result["tuned"]["conflicts"] == [] and not result.get("warnings")
