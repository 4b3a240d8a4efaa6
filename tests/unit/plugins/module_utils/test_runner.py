"""Runner and spawn: node commands started with vfork, with what AnsibleModule.run_command gives them.

Real commands (sh, cat, env, sleep) run here: these are the code paths every module takes on a node.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.aiinfra.datapath.plugins.module_utils import _runner


@pytest.fixture
def module():
    with patch_module_args({}):
        yield basic.AnsibleModule(argument_spec={}, supports_check_mode=True)


def test_output_and_rc():
    rc, out, err = _runner.spawn(["sh", "-c", "printf out; printf err >&2; exit 3"])
    assert (rc, out, err) == (3, "out", "err")


def test_data_goes_to_stdin_with_a_newline_as_run_command_writes_it():
    assert _runner.spawn(["cat"], data="a\nb") == (0, "a\nb\n", "")


def test_bytes_that_are_not_utf8_survive_the_round_trip():
    rc, out, err = _runner.spawn(["printf", r"\377ok"])
    assert (rc, out, err) == (0, "\udcffok", "")
    assert out.encode("utf-8", "surrogateescape") == b"\xffok"


def test_large_output_on_both_pipes_is_read_while_the_command_runs():
    # more than a pipe holds on each stream: a reader that waited for the exit would deadlock
    rc, out, err = _runner.spawn(["sh", "-c", "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2"])
    assert (rc, len(out), len(err)) == (0, 300000, 200000)


def test_returns_when_the_command_exits_although_a_child_it_started_holds_the_pipes():
    rc, out, err = _runner.spawn(["sh", "-c", "sleep 60 & echo $!"])
    pid = int(out)
    try:
        assert (rc, err) == (0, "")
        os.kill(pid, 0)  # the daemon still runs (and holds stdout): spawn did not wait for it
    finally:
        os.kill(pid, signal.SIGTERM)


def test_killed_by_a_signal():
    assert _runner.spawn(["sh", "-c", "kill -TERM $$"])[0] == -signal.SIGTERM


def test_a_command_that_cannot_start_answers_like_a_shell(tmp_path):
    rc, out, err = _runner.spawn([str(tmp_path / "no-such-tool"), "-j"])
    assert (rc, out) == (127, "") and "No such file or directory" in err
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    assert _runner.spawn([str(script)])[0] == 126
    rc, out, err = _runner.spawn(["printf", "a\x00b"])  # no exec can pass a NUL byte
    assert (rc, out) == (126, "") and "null byte" in err


def test_arguments_are_passed_verbatim_never_expanded():
    # run_command expands ~ and $VARS in every argument; a spec value is passed as written
    assert _runner.spawn(["printf", "%s|", "$HOME", "~", 5]) == (0, "$HOME|~|5|", "")


def test_command_env_drops_the_payload_from_pythonpath():
    env = _runner.command_env({"PYTHONPATH": "/tmp/x/ansible_modlib.zip:/opt/lib", "A": "1", "B": "1"},
                              {"A": "2"}, {"B": "3"})
    assert env == {"PYTHONPATH": "/opt/lib", "A": "2", "B": "3"}
    assert "PYTHONPATH" not in _runner.command_env({"PYTHONPATH": "/x/debug_dir"})


def test_runner_spawns_with_vfork_and_run_commands_environment(module, monkeypatch):
    seen: list[dict[str, Any]] = []
    popen = subprocess.Popen

    def recording(*args, **kwargs):
        seen.append(kwargs)
        return popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording)
    module.run_command_environ_update = {"DATAPATH_TEST": "yes"}
    runner = _runner.Runner(module)
    assert runner.run(["sh", "-c", 'echo "$LC_ALL $DATAPATH_TEST"'], record=True) == (0, "C yes\n", "")
    # no preexec_fn: CPython starts the child with vfork instead of copying the module with fork
    assert seen and seen[0].get("preexec_fn") is None and seen[0]["close_fds"]
    assert runner.commands == [["sh", "-c", 'echo "$LC_ALL $DATAPATH_TEST"']]


def test_runner_raises_with_the_command_its_rc_and_its_output(module):
    with pytest.raises(_runner.CommandError) as raised:
        _runner.Runner(module).run(["sh", "-c", "echo bad >&2; exit 4"])
    assert raised.value.rc == 4 and raised.value.err == "bad\n"
    assert str(raised.value) == "sh -c echo bad >&2; exit 4 failed (rc=4): bad"
    assert _runner.Runner(module).run(["sh", "-c", "exit 4"], check=False)[0] == 4


def test_a_run_command_put_in_ansibles_place_is_called_instead(module, monkeypatch):
    calls = []
    monkeypatch.setattr(basic.AnsibleModule, "run_command",
                        lambda self, argv, **kwargs: calls.append((argv, kwargs)) or (0, "recorded", ""))
    assert _runner.Runner(module).run(["blkid", "-p", "/dev/x"], data="in") == (0, "recorded", "")
    assert calls == [(["blkid", "-p", "/dev/x"], {"data": "in", "environ_update": {"LC_ALL": "C"}})]


def test_a_subclass_with_its_own_run_command_is_honoured(monkeypatch):
    class Recorder(basic.AnsibleModule):
        def run_command(self, args, **kwargs):  # pylint: disable=arguments-differ
            return 0, "mine", ""

    with patch_module_args({}):
        mod = Recorder(argument_spec={})
    assert _runner.Runner(mod).run(["false"]) == (0, "mine", "")
