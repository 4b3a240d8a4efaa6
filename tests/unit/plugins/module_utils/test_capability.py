"""The capability contract's runner (module_utils/_capability.py), with small backends of its own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _capability as contract
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError


class Counter(contract.Capability):
    """Writes ``value`` to /etc/counter below root; a value line and the file are its actions."""

    name = "counter"

    @classmethod
    def options(cls) -> dict[str, Any]:
        return dict(value=dict(type="str"))

    def validate(self) -> None:
        if self.params["value"] == "invalid":
            raise CapabilityError("counter: value must not be 'invalid'", field="value")

    def read(self) -> Any:
        return self.root.read_raw("/etc/counter")

    def plan(self, state: Any) -> list[contract.Action]:
        wanted = self.params["value"] + "\n"
        if state == wanted:
            return []
        self.warn("rewriting the counter")
        return [contract.Action("count", "counter", "set counter", before=(state or "").strip() or None,
                                after=self.params["value"], diff="live counter"),
                contract.file_action("/etc/counter", state, wanted, mode=0o600)]

    def apply(self, state: Any, actions: list[contract.Action]) -> None:
        if self.params["value"] == "oserror":
            raise OSError(28, "No space left on device")
        if self.params["value"] == "bug":
            raise KeyError("a bug keeps its traceback")
        for action in actions:
            if action.kind == "file":
                contract.apply_file(self.root, action)

    def result(self, state: Any, actions: list[contract.Action]) -> dict[str, Any]:
        return {"value": self.params["value"]}


def node(root: Path, check_mode: bool = False, diff: bool = True) -> contract.Node:
    return contract.Node(None, str(root), check_mode, diff)


def test_apply_returns_structured_actions_and_a_diff_from_them(tmp_path: Path) -> None:
    result = contract.run(Counter, {"value": "7", "root": str(tmp_path)}, node(tmp_path))
    assert result["changed"] is True and result["value"] == "7"
    assert result["actions"][0] == {"kind": "count", "target": "counter", "before": None, "after": "7",
                                    "destructive": False, "reboot": False, "text": "set counter"}
    assert result["actions"][1]["kind"] == "file" and result["actions"][1]["text"] == "write /etc/counter"
    assert result["diff"] == [
        {"before_header": "live counter", "after_header": "live counter", "before": "", "after": "counter = 7\n"},
        {"before_header": "/etc/counter", "after_header": "/etc/counter", "before": "", "after": "7\n"},
    ]
    assert result["warnings"] == ["rewriting the counter"]
    assert (tmp_path / "etc/counter").read_text() == "7\n"
    assert oct((tmp_path / "etc/counter").stat().st_mode & 0o777) == "0o600"
    again = contract.run(Counter, {"value": "7", "root": str(tmp_path)}, node(tmp_path))
    assert again["changed"] is False and again["actions"] == [] and "diff" not in again, "no change, no diff"


def test_check_mode_predicts_the_same_actions_and_changes_nothing(tmp_path: Path) -> None:
    predicted = contract.run(Counter, {"value": "7", "root": str(tmp_path)}, node(tmp_path, check_mode=True))
    assert not (tmp_path / "etc/counter").exists()
    assert (tmp_path / "run/aiinfra-datapath.lock").exists(), "check mode holds the node lock too"
    real = contract.run(Counter, {"value": "7", "root": str(tmp_path)}, node(tmp_path))
    assert predicted["actions"] == real["actions"] and predicted["diff"] == real["diff"]


def test_errors_become_failed_results_and_bugs_keep_their_traceback(tmp_path: Path) -> None:
    bad = contract.run(Counter, {"value": "invalid", "root": str(tmp_path)}, node(tmp_path))
    assert bad == {"failed": True, "changed": False, "msg": "counter: value must not be 'invalid'", "field": "value"}
    full = contract.run(Counter, {"value": "oserror", "root": str(tmp_path)}, node(tmp_path))
    assert full["failed"] and full["msg"] == "counter: [Errno 28] No space left on device"
    assert full["warnings"] == ["rewriting the counter"], "warnings survive a failure"
    with pytest.raises(KeyError):
        contract.run(Counter, {"value": "bug", "root": str(tmp_path)}, node(tmp_path))


def test_the_shared_root_option_is_added_once_for_every_capability() -> None:
    assert Counter.argument_spec() == {"value": {"type": "str"}, "root": {"type": "path", "default": "/"}}
    assert Counter.module_spec() == {"argument_spec": Counter.argument_spec()}
    assert Counter.node_root({"root": "/srv/node", "value": "1"}) == "/srv/node"

    class Rootless(Counter):
        uses_root = False

    assert "root" not in Rootless.argument_spec() and Rootless.node_root({"root": "/x"}) == "/"


def test_a_relative_root_is_refused() -> None:
    with pytest.raises(CapabilityError, match="root must be an absolute path, got 'tmp'"):
        contract.Node(None, "tmp")


def test_read_only_capabilities_take_no_lock_and_return_no_actions(tmp_path: Path) -> None:
    class Reader(contract.Capability):
        name = "reader"
        read_only = True

        def result(self, state: Any, actions: list[contract.Action]) -> dict[str, Any]:
            return {"seen": sorted(os.listdir(tmp_path))}

    result = contract.run(Reader, {}, node(tmp_path))
    assert result == {"seen": [], "changed": False}


def test_render_diff_groups_values_by_section_and_skips_hidden_actions() -> None:
    actions = [contract.Action("mtu", "eth0", "ip link set dev eth0 mtu 9000", before=1500, after=9000,
                               diff="live MTU"),
               contract.Action("command", "nmcli", "nmcli ...", diff=False),
               contract.Action("mtu", "eth1", "ip link set dev eth1 mtu 9000", before=1500, after=9000,
                               diff="live MTU"),
               contract.file_action("/etc/x", "old\n", None)]
    assert contract.render_diff(actions) == [
        {"before_header": "live MTU", "after_header": "live MTU", "before": "eth0 = 1500\neth1 = 1500\n",
         "after": "eth0 = 9000\neth1 = 9000\n"},
        {"before_header": "/etc/x", "after_header": "/etc/x", "before": "old\n", "after": ""},
    ]
    assert actions[3].text == "remove /etc/x"


def test_apply_file_keeps_the_mode_of_an_existing_file_and_removes(tmp_path: Path) -> None:
    target = tmp_path / "etc/fstab"
    target.parent.mkdir()
    target.write_text("old\n")
    target.chmod(0o640)
    root = contract.HostRoot(str(tmp_path))
    contract.apply_file(root, contract.file_action("/etc/fstab", "old\n", "new\n"))
    assert target.read_text() == "new\n" and oct(target.stat().st_mode & 0o777) == "0o640"
    contract.apply_file(root, contract.file_action("/etc/fstab", "new\n", None))
    assert not target.exists()
    contract.apply_file(root, contract.file_action("/etc/fstab", None, None))  # already gone: nothing to do
