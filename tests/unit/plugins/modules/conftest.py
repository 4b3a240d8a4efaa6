"""A fake node tree (/proc, /sys, /etc, /run) under a temporary directory."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest


class NodeTree:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def put(self, path: str, content: str = "", mode: int | None = None) -> Path:
        target = self.path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        if mode is not None:
            os.chmod(target, mode)
        return target

    def get(self, path: str) -> str:
        return self.path(path).read_text()

    def exists(self, path: str) -> bool:
        return self.path(path).exists()

    def snapshot(self) -> dict[str, str]:
        """Every file, directory and mode below the root: equal snapshots = nothing touched.

        The node lock (``/run/aiinfra-datapath.lock``, and ``/run`` itself) is left out: a module
        takes it around its whole read -> plan -> apply, also in a run that changes nothing.
        """
        state: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                if os.path.relpath(full, self.root) in ("run", "run/aiinfra-datapath.lock"):
                    continue
                st = os.lstat(full)
                if os.path.isfile(full) and not os.path.islink(full):
                    with open(full, "rb") as handle:
                        digest = hashlib.sha256(handle.read()).hexdigest()
                else:
                    digest = "dir" if os.path.isdir(full) else "other"
                state[os.path.relpath(full, self.root)] = "%o:%s" % (st.st_mode, digest)
        return state


@pytest.fixture
def node(tmp_path: Path) -> NodeTree:
    root = tmp_path / "node"
    root.mkdir()
    return NodeTree(root)
