"""Run a module's ``main()`` in-process with real arguments and capture its result.

Usage::

    result = run_module(sysctl_profile.main, {"keys": {...}, "root": str(tmp_path)})
    assert result["changed"] is True          # exit_json
    result = run_module(..., expect_failure=True)
    assert "net.core.foo" in result["msg"]    # fail_json

The module code runs unchanged (argument_spec validation, check mode, diff); only the
process exit is intercepted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common import warnings as _warnings
from ansible.module_utils.testing import patch_module_args


class _Exit(Exception):
    def __init__(self, result: dict[str, Any], failed: bool) -> None:
        super().__init__(result)
        self.result = result
        self.failed = failed


def _collect_warnings(kwargs: dict[str, Any]) -> None:
    # AnsibleModule.warn() stores warnings globally; the real exit_json returns them.
    messages = list(_warnings.get_warning_messages())
    if messages:
        kwargs["warnings"] = messages


def _exit_json(self: basic.AnsibleModule, **kwargs: Any) -> None:
    kwargs.setdefault("changed", False)
    _collect_warnings(kwargs)
    raise _Exit(json.loads(json.dumps(kwargs, default=str)), failed=False)


def _fail_json(self: basic.AnsibleModule, msg: str = "", **kwargs: Any) -> None:
    kwargs["failed"] = True
    kwargs["msg"] = msg
    _collect_warnings(kwargs)
    raise _Exit(json.loads(json.dumps(kwargs, default=str)), failed=True)


@pytest.fixture
def run_module(monkeypatch: pytest.MonkeyPatch) -> Callable[..., dict[str, Any]]:
    from ansible.module_utils import _internal

    # Importing controller code (the filter plugins' tests) flips ansible-core into controller
    # mode, where module warnings go to the display instead of the result: force module mode.
    monkeypatch.setattr(_internal, "is_controller", False)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)

    def _run(main: Callable[[], None], args: dict[str, Any], check_mode: bool = False,
             diff: bool = False, expect_failure: bool = False) -> dict[str, Any]:
        args = dict(args)
        _warnings._global_warnings.clear()
        _warnings._global_deprecations.clear()
        if check_mode:
            args["_ansible_check_mode"] = True
        if diff:
            args["_ansible_diff"] = True
        with patch_module_args(args):
            try:
                main()
            except _Exit as done:
                if done.failed != expect_failure:
                    raise AssertionError(
                        ("module failed: " if done.failed else "module did not fail: ")
                        + json.dumps(done.result, indent=2)
                    ) from None
                return done.result
        raise AssertionError("module returned without exit_json/fail_json")

    return _run
