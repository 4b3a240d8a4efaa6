"""running_lldpad scans /proc, where processes exit between the listing and the read."""

from __future__ import annotations

import errno
from pathlib import Path

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._roce_qos import running_lldpad


class ExitingProcesses(HostRoot):
    """/proc/2 and /proc/4 exit while the scan reads them (ESRCH and ENOENT from the kernel)."""

    def read(self, path, default=None):  # type: ignore[no-untyped-def]
        if path == "/proc/2/comm":
            raise OSError(errno.ESRCH, "No such process")
        if path == "/proc/4/comm":
            raise OSError(errno.EACCES, "Permission denied")
        return super().read(path, default)


def test_processes_that_exit_during_the_scan_are_skipped(tmp_path: Path) -> None:
    for pid, comm in ((1, "systemd"), (2, "lldpad"), (3, "lldpad"), (4, "sshd"), (7, "bash")):
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "comm").write_text(comm + "\n")
    (tmp_path / "proc" / "5").mkdir()          # exited: no comm any more
    (tmp_path / "proc" / "self").mkdir()
    assert running_lldpad(ExitingProcesses(str(tmp_path))) == [3]


def test_the_live_proc_scan_never_fails() -> None:
    assert isinstance(running_lldpad(HostRoot("/")), list)
