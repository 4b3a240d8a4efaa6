"""mlnx_qos: both output formats parsed; argv as its optparse defines; never --trust with --dscp2prio."""

from __future__ import annotations

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _mlnx_qos
from netfakes import FakeMlnxQos, FakeRunner, fixture, render_mlnx_qos


def test_new_format_verbatim():
    state = _mlnx_qos.parse_show(fixture("mlnx_qos/new-format.txt"))
    assert state["dcbx"] == "os"
    assert state["trust"] == "dscp"
    assert state["dscp2prio"][26] == 3
    assert state["dscp2prio"][40] == 5  # "prio:5 dscp:40,47,..." as printed
    assert state["dscp2prio"][48] == 6
    assert len(state["dscp2prio"]) == 64
    assert state["cable_len"] == 30
    assert state["pfc"] == [False] * 5 + [True, False, False]
    assert state["pfc_buffer"] == [0, 0, 0, 0, 0, 1, 0, 0]
    ets = state["ets"]
    assert (ets["tsa"][0], ets["bw"][0], ets["prio_tc"][0]) == ("ets", 9, 0)
    assert (ets["tsa"][7], ets["bw"][7], ets["prio_tc"][7]) == ("strict", None, 7)
    assert ets["tsa"][1:7] == [None] * 6  # elided by "..." in the sample


def test_old_format_verbatim():
    state = _mlnx_qos.parse_show(fixture("mlnx_qos/old-format.txt"))
    assert state["dcbx"] == "os"
    assert state["trust"] == "dscp"
    assert state["dscp2prio"][26] == 3 and state["dscp2prio"][48] == 6
    assert state["pfc"] == [False, False, False, True, False, False, False, False]
    assert state["pfc_buffer"] is None
    assert state["ets"]["tsa"] == ["vendor"] * 8
    assert state["ets"]["prio_tc"] == [1, 0, 2, 3, 4, 5, 6, 7]
    assert state["cable_len"] == 7


def test_firmware_dcbx():
    assert _mlnx_qos.parse_show(fixture("mlnx_qos/firmware-dcbx.txt"))["dcbx"] == "firmware"


def test_garbage_is_an_error():
    with pytest.raises(_mlnx_qos.MlnxQosError):
        _mlnx_qos.parse_show("mlnx_qos: command not found\n")


def test_argv_match_optparse_syntax():
    assert _mlnx_qos.trust_argv("mlnx_qos", "eth4", "dscp") == ["mlnx_qos", "-i", "eth4", "--trust", "dscp"]
    assert _mlnx_qos.pfc_argv("mlnx_qos", "eth4", [False, False, False, True, False, False, False, False]) == [
        "mlnx_qos", "-i", "eth4", "--pfc", "0,0,0,1,0,0,0,0"]
    assert _mlnx_qos.dscp2prio_argv("mlnx_qos", "eth4", {48: 6, 26: 3}) == [
        "mlnx_qos", "-i", "eth4", "--dscp2prio", "set,26,3", "--dscp2prio", "set,48,6"]
    assert _mlnx_qos.ets_argv("mlnx_qos", "eth4", list(range(8)), ["ets"] * 6 + ["strict", "ets"],
                              [10, 10, 10, 50, 10, 0, 0, 10]) == [
        "mlnx_qos", "-i", "eth4", "-p", "0,1,2,3,4,5,6,7", "-s", "ets,ets,ets,ets,ets,ets,strict,ets",
        "-t", "10,10,10,50,10,0,0,10"]


def test_trust_and_dscp2prio_never_together():
    with pytest.raises(_mlnx_qos.MlnxQosError):
        _mlnx_qos.check_argv(["mlnx_qos", "-i", "eth4", "--trust", "dscp", "--dscp2prio", "set,26,3"])
    backend = _mlnx_qos.MlnxQosBackend(FakeRunner([]), "mlnx_qos")
    cmds = backend.full_commands("eth4", {"trust": "dscp", "dscp2prio": {26: 3}, "pfc": None, "ets": None})
    assert cmds == [["mlnx_qos", "-i", "eth4", "--trust", "dscp"],
                    ["mlnx_qos", "-i", "eth4", "--dscp2prio", "set,26,3"]]


def test_backend_round_trip_is_idempotent():
    dev = FakeMlnxQos("eth4")
    backend = _mlnx_qos.MlnxQosBackend(FakeRunner([dev]), "/usr/bin/mlnx_qos")
    want = {"trust": "dscp", "pfc": [False, False, False, True, False, False, False, False],
            "dscp2prio": {26: 3, 48: 6},
            "ets": {"prio_tc": list(range(8)), "tsa": ["ets"] * 6 + ["strict", "ets"],
                    "bw": [10, 10, 10, 50, 10, 0, 0, 10]}}
    have = backend.read("eth4")
    assert have["trust"] == "pcp"
    cmds = backend.commands("eth4", want, have)
    # dscp 26 -> 3 and 48 -> 6 are already the default (d >> 3) map: no dscp2prio call
    assert [c[3] for c in cmds] == ["--trust", "--pfc", "-p"]
    for argv in cmds:
        rc, out, err = dev(argv)
        assert rc == 0
    assert backend.commands("eth4", want, backend.read("eth4")) == []


def test_rendered_text_parses_like_the_real_format():
    dev = FakeMlnxQos("eth4")
    state = _mlnx_qos.parse_show(render_mlnx_qos(dev.state))
    assert state["ets"]["prio_tc"] == [1, 0, 2, 3, 4, 5, 6, 7]


def test_each_command_names_its_setting():
    backend = _mlnx_qos.MlnxQosBackend(FakeRunner([]), "mlnx_qos")
    want = {"trust": "dscp", "pfc": [False, False, False, True, False, False, False, False],
            "dscp2prio": {26: 3},
            "ets": {"prio_tc": list(range(8)), "tsa": ["ets"] * 6 + ["strict", "ets"],
                    "bw": [10, 10, 10, 50, 10, 0, 0, 10]}}
    cmds = backend.full_commands("eth4", want)
    assert [backend.setting(c) for c in cmds] == ["trust", "dscp2prio", "pfc", "ets"]


def test_errors_are_capability_errors():
    from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

    assert issubclass(_mlnx_qos.MlnxQosError, CapabilityError)
