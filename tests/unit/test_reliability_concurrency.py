"""Two runs against the same node at once.

Modules that change state take ``node_lock`` (module_utils/_fs.py, an flock on
``/run/aiinfra-datapath.lock`` under ``root``). This file checks what that buys today:

* two real ``sysctl_profile`` processes with different profiles, started together many
  times against one fake node: the managed file is always one whole profile (never
  interleaved) and the live values agree with the file afterwards (the lock is held around
  the whole read -> plan -> apply -> persist);
* a run that finds the lock held fails with a clear message instead of writing;
* every state-changing capability takes the lock around read+plan+apply, in check mode as in
  a real run: the one runner (module_utils/_capability.py) holds it, and a capability run
  with the lock held by another process fails before it reads anything.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _batch, _capability, _fs
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import render_conf
from ansible_collections.aiinfra.datapath.plugins.modules import sysctl_profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest_plugins = ["reliability_log"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, ".collections")
FILE = "/etc/sysctl.d/90-aiinfra-datapath.conf"
NKEYS = 150
ROUNDS = 25


def _key(i: int) -> str:
    return "net.core.test_key%03d" % i


def _set_live(root: Path, value: str) -> None:
    for i in range(NKEYS):
        path = root / "proc/sys/net/core" / ("test_key%03d" % i)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")


def _live(root: Path) -> dict[str, str]:
    return {_key(i): (root / "proc/sys/net/core" / ("test_key%03d" % i)).read_text().strip() for i in range(NKEYS)}


def _start(root: Path, args_file: Path) -> subprocess.Popen[str]:
    module = "ansible_collections.aiinfra.datapath.plugins.modules.sysctl_profile"
    return subprocess.Popen([sys.executable, "-m", module, str(args_file)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": COLLECTIONS})


def test_two_sysctl_runs_at_once(tmp_path: Path, reliability) -> None:
    root = tmp_path / "node"
    files = {}
    for name, value in (("a", "1"), ("b", "2")):
        args = {"keys": {_key(i): {"value": value, "mode": "exact"} for i in range(NKEYS)}, "root": str(root)}
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    whole = {render_conf({_key(i): v for i in range(NKEYS)}): v for v in ("1", "2")}
    interleaved = mixed_live = 0
    tracebacks = 0
    with reliability.case("concurrent-sysctl-runs",
                          f"{ROUNDS} x two sysctl_profile processes at once on one node ({NKEYS} keys, "
                          "profiles 1 vs 2, node starting in profile 2)", area="concurrency") as case:
        case.faults(ROUNDS)
        for rnd in range(ROUNDS):
            _set_live(root, "2")
            (root / FILE.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / FILE.lstrip("/")).write_text(render_conf({_key(i): "2" for i in range(NKEYS)}))
            first = _start(root, files["a"])
            time.sleep(0.005 * (rnd % 10))
            second = _start(root, files["b"])
            for proc in (first, second):
                out, err = proc.communicate(timeout=60)
                tracebacks += "Traceback" in err or "Traceback" in out
                assert json.loads(out).get("failed") is not True, out
            text = (root / FILE.lstrip("/")).read_text()
            if text not in whole:
                interleaved += 1
                continue
            if set(_live(root).values()) != {whole[text]}:
                mixed_live += 1
        case.traceback(tracebacks)
        case.did(f"{ROUNDS} rounds: managed file interleaved {interleaved}x; live values disagree with the file "
                 f"{mixed_live}x; both processes exited cleanly every round")
        assert interleaved == 0
        assert tracebacks == 0
        case.checked("managed file is exactly profile 1 or profile 2 after every round (no interleaved writes)")
        case.checked("live /proc/sys values compared with the file after every round")
        if mixed_live:
            case.finding(f"sysctl_profile: live values disagreed with the managed file in {mixed_live}/{ROUNDS} "
                         "concurrent rounds: read+plan run outside node_lock, so a run that planned against "
                         "a state another run is changing skips keys it thinks are already right")
        assert mixed_live == 0
        case.checked("live /proc/sys values equal the managed file after every round")


def test_lock_held_fails_cleanly(run_module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reliability) -> None:
    root = tmp_path / "node"
    (root / "proc/sys/vm").mkdir(parents=True)
    (root / "proc/sys/vm/swappiness").write_text("60\n")
    lock = root / "run" / "aiinfra-datapath.lock"
    monkeypatch.setattr(_capability, "node_lock", functools.partial(_fs.node_lock, timeout=0.5, poll=0.05))
    holder = _hold(lock)
    try:
        with reliability.case("lock-held-by-other-run",
                              "another run holds the node lock while sysctl_profile wants to apply",
                              area="concurrency") as case:
            result = run_module(sysctl_profile.main, {"keys": {"vm.swappiness": 10}, "root": str(root)},
                                expect_failure=True)
            case.did("failed: " + result["msg"].replace(str(root), "<root>"))
            assert "another aiinfra.datapath run holds" in result["msg"]
            assert (root / "proc/sys/vm/swappiness").read_text() == "60\n"
            assert not (root / FILE.lstrip("/")).exists()
            case.checked("live value unchanged (60), managed file not written")
    finally:
        holder.kill()
        holder.wait()


def _hold(lock: Path) -> subprocess.Popen[str]:
    """Another process that holds the node lock ``lock`` until killed."""
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl,os,sys,time\n"
                               f"os.makedirs({str(lock.parent)!r}, exist_ok=True)\n"
                               f"f=open({str(lock)!r},'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                               "print('held', flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("check_mode", [False, True])
def test_every_state_changing_capability_waits_for_the_node_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 check_mode: bool, reliability) -> None:
    """Through the one runner: with the lock held elsewhere, no capability reads, plans or changes."""
    monkeypatch.setattr(_capability, "node_lock", functools.partial(_fs.node_lock, timeout=0.3, poll=0.05))
    writers = sorted(name for name, cls in _batch.BACKENDS.items() if not cls.read_only)
    assert writers == ["hugepages", "kernel_cmdline", "link_mtu", "nfd_labels", "nic_affinity", "nic_config",
                       "nvme_layout", "rail_routing", "roce_qos", "sysctl_profile", "tuned_profile"]
    root = tmp_path / "node"
    holder = _hold(root / "run" / "aiinfra-datapath.lock")
    try:
        with reliability.case("node-lock-coverage" + ("-check-mode" if check_mode else ""),
                              "every state-changing capability serialises on the node lock "
                              f"({'check mode' if check_mode else 'real run'})", area="concurrency") as case:
            refused = []
            for name in writers:
                cls = _batch.BACKENDS[name]
                touched: list[str] = []
                monkeypatch.setattr(cls, "validate", lambda self: None)  # parameters are not the point here
                monkeypatch.setattr(cls, "read", lambda self, _t=touched: _t.append("read"))
                result = _capability.run(cls, {"root": str(root)}, _capability.Node(None, str(root), check_mode))
                assert result.get("failed") and "another aiinfra.datapath run holds" in result["msg"], (name, result)
                assert touched == [], f"{name} read the node without the lock"
                refused.append(name)
            case.did("refused without reading: " + ", ".join(refused))
            case.checked("each capability's read() never ran while another process held the lock")
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_directory_created_by_another_run_in_between(tmp_path: Path, monkeypatch) -> None:
    """Two first runs on a node both find no lock directory; the second mkdir meets EEXIST."""
    lock = tmp_path / "run" / "aiinfra-datapath.lock"
    real_isdir = os.path.isdir
    seen = []

    def racing_isdir(path: str) -> bool:  # the check runs before the other run's mkdir lands
        if path == str(lock.parent) and not seen:
            seen.append(path)
            os.makedirs(path)
            return False
        return real_isdir(path)

    monkeypatch.setattr(_fs.os.path, "isdir", racing_isdir)
    with _fs.node_lock(str(lock), timeout=1):
        assert lock.exists()
    assert seen
