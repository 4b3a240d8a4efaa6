"""Interrupted writes: SIGKILL a process while it rewrites a managed file through the real
code path (atomic_write in module_utils/_fs.py); the file must always be the old or the new
version, never truncated or mixed.

Each target alternates between two large versions in a loop in a child process; the test
kills the child at a random moment, many times, and checksums the file after every kill.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import fstab_line, update_fstab

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest_plugins = ["reliability_log"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, ".collections")
KILLS = 30

PRELUDE = """
import os, sys
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot, atomic_write
root, target, old_file, new_file = sys.argv[1:5]
versions = [open(old_file).read(), open(new_file).read()]
"""

# One writer per managed file, each through the code the module runs.
WRITERS = {
    # sysctl_profile: SysctlProfile.apply(the managed file's file action) -> apply_file -> atomic_write
    "sysctl": """
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, file_action
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import SysctlProfile
capability = SysctlProfile({"file": target}, Node(None, root))
def write(text):
    capability.apply({}, [file_action(target, "previous", text, mode=0o644)])
""",
    # nfd_labels: NfdLabels.apply(the features file's file action) -> apply_file -> atomic_write
    "nfd": """
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, file_action
from ansible_collections.aiinfra.datapath.plugins.module_utils._nfd_labels import NfdLabels
capability = NfdLabels({"prefix": "aiinfra.io", "path": target}, Node(None, root))
def write(text):
    capability.apply({}, [file_action(target, "previous", text, mode=0o644)])
""",
    # kernel_cmdline: KernelCmdline.apply(the drop-in's file action) -> apply_file -> atomic_write
    "grub": """
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, file_action
from ansible_collections.aiinfra.datapath.plugins.module_utils._cmdline import KernelCmdline
capability = KernelCmdline({"drop_in": target, "update_bootloader": False}, Node(None, root))
def write(text):
    capability.apply({}, [file_action(target, "previous", text, mode=0o644, reboot=True)])
""",
    # nvme_layout: the "fstab" action -> update_fstab(before, line) + apply_file (atomic_write, mode kept)
    "fstab": """
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import apply_file
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import fstab_line, update_fstab
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.plan import layout_action
host = HostRoot(root)
def write(text):
    uuid = "11111111-2222-3333-4444-%012d" % (len(text) % 10)
    line = fstab_line(uuid, "/mnt/model-cache", "xfs", ["noatime"])
    after = update_fstab(text, line, "/mnt/model-cache", uuid)
    apply_file(host, layout_action("fstab", target, line, diff="file", before=text, after=after))
""",
}

LOOP = """
i = 0
while True:
    write(versions[i % 2])
    i += 1
    if i == 2:
        sys.stdout.write("ready\\n"); sys.stdout.flush()
"""


def _versions(kind: str, tmp: Path) -> tuple[str, str]:
    """Two large, different versions (about 1 MiB each) in the file's real format."""
    if kind in ("sysctl", "grub"):
        old = "".join("net.test.key%05d = %d\n" % (i, i) for i in range(40000))
        new = "".join("net.test.key%05d = %d\n" % (i, i * 7) for i in range(45000))
    elif kind == "nfd":
        old = "".join("aiinfra.io/label-%05d=old\n" % i for i in range(40000))
        new = "".join("aiinfra.io/label-%05d=new-value\n" % i for i in range(42000))
    else:
        old = "".join("UUID=%08d-0000-0000-0000-000000000000 /data/%05d xfs defaults 0 2\n" % (i, i)
                      for i in range(15000))
        new = "".join("UUID=%08d-0000-0000-0000-000000000000 /data/%05d ext4 defaults,noatime 0 2\n" % (i, i)
                      for i in range(16000))
    return old, new


def _expected(kind: str, text: str) -> str:
    """What the writer stores for ``text`` (fstab: the version with our cache line edited in)."""
    if kind != "fstab":
        return text
    uuid = "11111111-2222-3333-4444-%012d" % (len(text) % 10)
    return update_fstab(text, fstab_line(uuid, "/mnt/model-cache", "xfs", ["noatime"]), "/mnt/model-cache", uuid)


TARGETS = {
    "sysctl": "/etc/sysctl.d/90-aiinfra-datapath.conf",
    "nfd": "/etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath",
    "grub": "/etc/default/grub.d/90-aiinfra-datapath.cfg",
    "fstab": "/etc/fstab",
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_sigkill_during_write_leaves_old_or_new(kind: str, tmp_path: Path, reliability) -> None:
    root = tmp_path / "node"
    root.mkdir()
    target = TARGETS[kind]
    old, new = _versions(kind, tmp_path)
    (tmp_path / "old").write_text(old)
    (tmp_path / "new").write_text(new)
    script = tmp_path / "writer.py"
    script.write_text(PRELUDE + textwrap.dedent(WRITERS[kind]) + LOOP)
    good = {_sha(_expected(kind, old).encode()): "old", _sha(_expected(kind, new).encode()): "new"}
    full = root / target.lstrip("/")
    env = {**os.environ, "PYTHONPATH": COLLECTIONS}
    rng = random.Random(1234)
    seen = {"old": 0, "new": 0, "bad": 0}
    bad_sizes: list[int] = []
    with reliability.case(f"kill-during-write-{kind}", f"SIGKILL x{KILLS} while {target} (~1 MiB) is "
                          "rewritten in a loop", area="interrupted write") as case:
        case.faults(KILLS)
        for _attempt in range(KILLS):
            proc = subprocess.Popen([sys.executable, str(script), str(root), target,
                                     str(tmp_path / "old"), str(tmp_path / "new")],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "ready":
                proc.kill()
                raise AssertionError("writer did not start: " + proc.communicate()[1][-2000:])
            time.sleep(rng.uniform(0, 0.05))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            data = full.read_bytes()
            which = good.get(_sha(data))
            if which is None:
                seen["bad"] += 1
                bad_sizes.append(len(data))
            else:
                seen[which] += 1
        leftovers = sorted(p.name for p in full.parent.iterdir() if p.name.startswith("."))
        case.did(f"killed {KILLS} times; file was old {seen['old']}x, new {seen['new']}x, other {seen['bad']}x; "
                 f"{len(leftovers)} orphaned dot-temp file(s) left in {os.path.dirname(target)}")
        if seen["bad"]:
            case.lost(sum(bad_sizes))
        assert seen["bad"] == 0, f"truncated/mixed file after kill, sizes {bad_sizes}"
        assert seen["old"] + seen["new"] == KILLS
        assert all(name.startswith("." + os.path.basename(target) + ".") and name.endswith(".tmp")
                   for name in leftovers)
        case.checked("sha256 of the target after each kill equals the old or the new version")
        case.checked("orphaned temp files are dot-files ending .tmp (skipped by systemd-sysctl, grub.d, NFD)")
