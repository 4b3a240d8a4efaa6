"""A kernel that clamps a value (stores less than written): sysctl_profile reads every key
back, rolls back what it changed in this run (the clamped key included) and writes no file.

The lab cases (tests/integration/test_reliability_lab.py) cover a kernel that refuses a
value, a missing key and a read-only /proc/sys on the real kernel; a silent clamp needs a
key whose limit would differ between kernels, so it is simulated here at the write call.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _fs
from ansible_collections.aiinfra.datapath.plugins.modules import sysctl_profile

pytest_plugins = ["reliability_log"]

FILE = "/etc/sysctl.d/90-aiinfra-datapath.conf"


def test_kernel_clamps_value(run_module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reliability) -> None:
    root = tmp_path / "node"
    (root / "proc/sys/net/core").mkdir(parents=True)
    (root / "proc/sys/net/core/netdev_max_backlog").write_text("1000\n")
    (root / "proc/sys/net/core/somaxconn").write_text("4096\n")
    real_write = _fs.HostRoot.write

    def clamping_write(self: _fs.HostRoot, path: str, value: str) -> None:
        if path.endswith("/somaxconn"):
            value = "%d\n" % min(int(value), 65535)  # what a kernel with a 16-bit limit would keep
        real_write(self, path, value)

    monkeypatch.setattr(_fs.HostRoot, "write", clamping_write)
    with reliability.case("kernel-clamps-value", "net.core.somaxconn=1000000 silently stored as 65535 (simulated "
                          "clamp at the write); net.core.netdev_max_backlog set first in the same run",
                          area="kernel") as case:
        result = run_module(sysctl_profile.main, {"root": str(root), "keys": {
            "net.core.netdev_max_backlog": {"value": "5000", "mode": "exact"},
            "net.core.somaxconn": {"value": "1000000", "mode": "exact"}}}, expect_failure=True)
        case.did("failed: " + result["msg"])
        assert "clamped by the kernel" in result["msg"]
        assert "net.core.somaxconn restored to '4096'" in result["msg"]
        assert "rolled back 1 other key(s)" in result["msg"]
        assert {(r["key"], r["restored"], r["ok"]) for r in result["rollback"]} == {
            ("net.core.somaxconn", "4096", True), ("net.core.netdev_max_backlog", "1000", True)}
        assert (root / "proc/sys/net/core/netdev_max_backlog").read_text().strip() == "1000"
        assert not (root / FILE.lstrip("/")).exists()
        case.checked("netdev_max_backlog rolled back to 1000; managed file not written")
        assert (root / "proc/sys/net/core/somaxconn").read_text().strip() == "4096"
        case.checked("the clamped key itself restored to 4096")
