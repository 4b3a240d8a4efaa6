"""Shared by the tests/interop/test_sys_*.py modules: the real readers of the system files the
collection writes (util-linux findmnt and mount, systemd-analyze, systemctl --root,
systemd-tmpfiles, sh and grub-mkconfig's sourcing loop, kubernetes-validate).

Nothing here starts a service or touches the host: files are written below a temporary
directory, and the only mounts are made inside a private mount namespace (``unshare --mount
--propagation private``) that ends with the command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.dirname(sys.executable)
# storagefakes: the recorded loop-device outputs nvme_layout's unit tests run on
UNIT_PLUGINS = os.path.join(REPO, "tests", "unit", "plugins")
if UNIT_PLUGINS not in sys.path:
    sys.path.insert(0, UNIT_PLUGINS)


def tool(name: str) -> str:
    """The path of a reader's CLI (the venv's first); skips the test only when it is truly absent."""
    found = os.path.join(BIN, name)
    if os.access(found, os.X_OK):
        return found
    other = shutil.which(name)
    if other is None:
        pytest.skip(f"{name} is not installed (scripts/bootstrap.sh installs it)")
    return other


def run(argv: Sequence[str], cwd: str | None = None, timeout: int = 120,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False,
                          env=env)


def in_private_mounts(script: str, *args: str, env: dict[str, str] | None = None,
                      timeout: int = 60) -> subprocess.CompletedProcess[str]:
    """``sh -ec script args...`` in a new, private mount namespace: its mounts vanish with it."""
    unshare = tool("unshare")
    if os.geteuid() != 0:
        pytest.skip("a private mount namespace needs root")
    done = run([unshare, "--mount", "--propagation", "private", "sh", "-ec", script, "sh", *args],
               timeout=timeout, env=dict(os.environ, **(env or {})))
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"cannot create a mount namespace here: {done.stderr.strip()}")
    return done


def findmnt_verify(findmnt: str, tab_file: str) -> tuple[str, dict[str, list[str]]]:
    """``findmnt --verify --verbose --tab-file``: (summary line, {target: [its [E]/[W] lines]})."""
    done = run([findmnt, "--verify", "--verbose", "--tab-file", tab_file])
    return parse_verify(done.stdout + done.stderr)


def parse_verify(text: str) -> tuple[str, dict[str, list[str]]]:
    """The output of ``findmnt --verify --verbose``: (summary line, {target: [its [E]/[W] lines]})."""
    problems: dict[str, list[str]] = {}
    target = None
    for line in text.splitlines():
        if line.startswith("   ["):
            if line.startswith(("   [E]", "   [W]")) and target is not None:
                problems.setdefault(target, []).append(line.strip())
        elif line and not line.startswith(" "):
            target = line
            problems.setdefault(target, [])
    summary = [line for line in text.splitlines() if "parse errors" in line]
    assert summary, text
    return summary[-1].strip(), problems
