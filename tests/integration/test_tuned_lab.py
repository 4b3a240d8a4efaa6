"""The TuneD backend on the lab: site.yml with ``datapath_backend=tuned`` writes one TuneD profile per
node over the site's base profile and no sysctl.d / THP boot files of its own; a second run changes
nothing; the audit reads each key's boot value from the active profile and passes, and names a key the
profile lost; back to the files backend, the sysctl.d file returns.

The base profile is the site's own (written here into each node's /etc/tuned, as a site would have
it). TuneD's daemon does not run in a lab node (it needs D-Bus and systemd as PID 1): the profile is
activated through /etc/tuned/active_profile for TuneD's next start, and the real TuneD reads the
rendered profile in tests/interop/test_sys_tuned.py.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from labtools import REPO, LabHandle, spec_applied_then_restored  # noqa: E402
from test_audit_lab import audit, failing  # noqa: E402

pytestmark = pytest.mark.lab

SITE = os.path.join(REPO, "playbooks", "site.yml")
PROFILE = "/etc/tuned/aiinfra-datapath/tuned.conf"
BASE = "/etc/tuned/site-base/tuned.conf"
ACTIVE = "/etc/tuned/active_profile"
MODE = "/etc/tuned/profile_mode"
SYSCTL_FILE = "/etc/sysctl.d/90-aiinfra-datapath.conf"
TMPFILES = "/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf"
TUNED = {"datapath_backend": "tuned"}
# the site's base profile: somaxconn raised to at least 8192 (TuneD's ">" modifier) over the built-in
# profile's minimum 2048, a key the plan also sets exactly, and a key of its own
BASE_TEXT = ("[main]\nsummary=the site's base\n\n[sysctl]\nnet.core.somaxconn=>8192\n"
             "net.ipv4.tcp_rmem=4096 87380 6291456\nnet.ipv4.tcp_fin_timeout=20\n")


def _changed(result) -> dict[str, int]:
    return {host: stats.get("changed", 0) for host, stats in result.data.get("stats", {}).items()}


def test_tuned_backend_site_audit_and_back_to_files(lab: LabHandle, tmp_path) -> None:
    with spec_applied_then_restored(lab, extra_files=(PROFILE, BASE, ACTIVE, MODE, TMPFILES)):
        for node in lab.nodes:
            lab.lab.run_in(node, ["/bin/sh", "-c", f"mkdir -p {os.path.dirname(BASE)} && cat > {BASE} "
                                                   f"&& echo site-base > {ACTIVE} && rm -f {MODE}"], input=BASE_TEXT)
        first = lab.playbook(SITE, extra_vars=TUNED)
        assert first.rc == 0, first.stdout[-4000:]
        for node in lab.nodes:
            text = lab.sh(node, f"cat {PROFILE}").stdout
            assert "include=site-base\n" in text, text
            # the built-in minimum somaxconn 2048 keeps the base's higher 8192; the lab spec's exact
            # tcp_rmem replaces the base's
            assert "net.core.somaxconn=8192\n" in text and "net.ipv4.tcp_rmem=4096 131072 16777216\n" in text
            assert "net.ipv4.tcp_mtu_probing=1\n" in text and "[vm]\ntransparent_hugepages=madvise\n" in text
            assert "[bootloader]\ncmdline_aiinfra_datapath=iommu=pt\n" in text
            assert lab.sh(node, f"cat {ACTIVE}").stdout == "aiinfra-datapath\n"
            assert lab.sh(node, f"test -e {SYSCTL_FILE}", check=False).returncode != 0, "no sysctl.d file of ours"
            tmpfiles = lab.sh(node, f"cat {TMPFILES} 2>/dev/null", check=False).stdout
            assert "transparent_hugepage" not in tmpfiles
            # the live values are still set by sysctl_profile in the same run
            assert lab.sh(node, "cat /proc/sys/net/ipv4/tcp_mtu_probing").stdout.strip() == "1"

        again = lab.playbook(SITE, extra_vars=TUNED)
        assert again.rc == 0 and set(_changed(again).values()) == {0}, _changed(again)

        result, report = audit(lab, tmp_path / "tuned", **TUNED)
        assert result.rc == 0 and failing(report) == [], [f for f in report["findings"] if f["severity"] != "info"]
        facts = result.task_results("Collect the live data-path state in one call")
        entry = facts["node1"]["ansible_facts"]["datapath_facts"]["sysctl"]["net.ipv4.tcp_mtu_probing"]
        assert (entry["boot"], entry["boot_file"]) == ("1", PROFILE)

        # node2's profile loses a key: the audit names it, with the cause
        lab.sh("node2", f"sed -i '/^net.ipv4.tcp_mtu_probing=/d' {PROFILE}")
        result, report = audit(lab, tmp_path / "lost", **TUNED)
        assert failing(report) == [("node2", "sysctl_profile", "net.ipv4.tcp_mtu_probing")]
        lost = next(f for f in report["findings"] if f["host"] == "node2" and f["severity"] != "info")
        assert lost["check"] == "sysctl-boot" and "no sysctl.d file (or active TuneD profile) sets it" in lost["reason"]

        # back to the files backend: the sysctl.d file returns and the audit passes again
        back = lab.playbook(SITE)
        assert back.rc == 0, back.stdout[-3000:]
        for node in lab.nodes:
            assert "net.ipv4.tcp_mtu_probing = 1" in lab.sh(node, f"cat {SYSCTL_FILE}").stdout
        result, report = audit(lab, tmp_path / "files")
        assert result.rc == 0 and failing(report) == [], [f for f in report["findings"] if f["severity"] != "info"]
