"""datapath_run's batch runner: real capability modules, one after the other, in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import _internal
from ansible.module_utils.testing import patch_module_args
from ansible_collections.aiinfra.datapath.plugins.module_utils import _batch
from ansible_collections.aiinfra.datapath.plugins.modules import datapath_run, nfd_labels, sysctl_profile

FEATURES = "etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath"


@pytest.fixture(autouse=True)
def module_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # controller code imported by other tests flips ansible-core into controller mode
    monkeypatch.setattr(_internal, "is_controller", False)


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text("22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw\n")
    (root / "proc/sys/net/core").mkdir(parents=True)
    (root / "proc/sys/net/core/somaxconn").write_text("4096\n")
    (root / "sys/kernel/mm/hugepages").mkdir(parents=True)
    return root


def calls(root: Path, label: str = "inference") -> list[dict[str, Any]]:
    return [
        {"module": "sysctl_profile", "args": {"root": str(root), "keys": {"net.core.somaxconn": {"value": "8192"}},
                                              "file": "/etc/sysctl.d/90-test.conf"}},
        {"module": "nfd_labels", "args": {"root": str(root), "labels": {"aiinfra.io/team": label},
                                          "hugepages": False}},
    ]


def run(batch: list[dict[str, Any]], check_mode: bool = False, stop: bool = True) -> list[dict[str, Any]]:
    internal = {"_ansible_check_mode": check_mode, "_ansible_diff": True}
    with patch_module_args(internal):
        from ansible.module_utils import basic

        basic._load_params()  # what AnsibleModule does first: parse the outer module's arguments
        return _batch.run_calls(datapath_run.MAINS, batch, stop)


def test_runs_each_module_once_in_order_with_its_own_arguments(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    results = run(calls(root))
    assert [r["module"] for r in results] == ["sysctl_profile", "nfd_labels"]
    assert all(r["result"]["changed"] for r in results), results
    assert all("invocation" not in r["result"] for r in results)
    assert (root / "proc/sys/net/core/somaxconn").read_text().strip() == "8192"
    assert "aiinfra.io/team=inference" in (root / FEATURES).read_text()
    assert all(isinstance(r["seconds"], float) for r in results)
    # the same modules alone say the same: nothing left to change
    again = run(calls(root))
    assert [r["result"]["changed"] for r in again] == [False, False]


def test_check_mode_and_diff_reach_every_module(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    results = run(calls(root), check_mode=True)
    assert [r["result"]["changed"] for r in results] == [True, True]
    assert all(r["result"].get("diff") for r in results), results
    assert (root / "proc/sys/net/core/somaxconn").read_text().strip() == "4096"
    assert not (root / FEATURES).exists()


def test_stops_at_the_first_failure(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    batch = calls(root)
    batch[0]["args"]["keys"] = {"net.core.no_such_key": {"value": "1"}}
    results = run(batch)
    assert [r["module"] for r in results] == ["sysctl_profile"]
    assert results[0]["result"]["failed"]
    assert "no_such_key" in results[0]["result"]["msg"]
    assert not (root / FEATURES).exists()
    results = run(batch, stop=False)
    assert [r["module"] for r in results] == ["sysctl_profile", "nfd_labels"]
    assert results[1]["result"]["changed"]


def test_argument_errors_are_the_modules_own(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    results = run([{"module": "nfd_labels", "args": {"root": str(root), "no_such_option": 1}}])
    assert results[0]["result"]["failed"]
    assert "no_such_option" in results[0]["result"]["msg"]


def test_a_module_that_raises_is_reported_not_fatal() -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    with patch_module_args({}):
        from ansible.module_utils import basic

        basic._load_params()
        results = _batch.run_calls({"x": broken, "y": nfd_labels.main}, [{"module": "x"}, {"module": "y"}])
    assert len(results) == 1
    assert results[0]["result"]["failed"]
    assert "RuntimeError: boom" in results[0]["result"]["msg"]
    assert "Traceback" in results[0]["result"]["exception"]


def test_the_module_arguments_of_the_batch_are_restored(tmp_path: Path) -> None:
    from ansible.module_utils import basic

    with patch_module_args({"calls": []}):
        before = basic._ANSIBLE_ARGS
        basic._load_params()
        _batch.run_calls(datapath_run.MAINS, calls(make_root(tmp_path)))
        assert basic._ANSIBLE_ARGS == before


@pytest.mark.parametrize("text, expected", [
    ('{"changed": true}', {"changed": True}),
    ('noise\n{"changed": false}', {"changed": False}),
])
def test_parse_output(text: str, expected: dict[str, Any]) -> None:
    assert _batch.parse_output(text) == expected


@pytest.mark.parametrize("text", ["", "not json at all"])
def test_parse_output_without_a_result_is_a_failure(text: str) -> None:
    assert _batch.parse_output(text)["failed"]


def test_every_capability_module_is_in_the_batch() -> None:
    # the module_utils copy is the module file itself (a symbolic link), not a second copy
    import os

    batch_file = datapath_run.MAINS["sysctl_profile"].__code__.co_filename
    assert os.path.realpath(batch_file) == os.path.realpath(sysctl_profile.main.__code__.co_filename)
    assert sorted(datapath_run.MAINS) == sorted(
        ["sysctl_profile", "hugepages", "kernel_cmdline", "link_mtu", "roce_qos", "nic_firmware",
         "nvme_layout", "nfd_labels"])
