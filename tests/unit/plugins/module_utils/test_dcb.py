"""iproute2 dcb: every fixture parsed, argv exactly as the man pages write it."""

from __future__ import annotations

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _dcb
from netfakes import FakeDcb, FakeRunner, fixture


def test_pfc_text_man_page():
    state = _dcb.parse_text(fixture("dcb/pfc-show-eth0.txt"))
    assert state["pfc_cap"] == 8
    assert state["macsec_bypass"] is False
    assert state["delay"] == 4096
    assert state["prio_pfc"] == [False] * 6 + [True, True]


def test_talos_combined_text():
    state = _dcb.parse_text(fixture("dcb/talos-show.txt"))
    assert state["prio_pfc"] == [False, False, False, True, False, False, False, False]
    assert state["delay"] == 0
    assert state["prio_tc"] == list(range(8))
    # names without -N: AF31 = 26, CS6 = 48
    assert state["dscp_prio"] == [[26, 3], [48, 6]]


def test_ets_text():
    state = _dcb.parse_text(fixture("dcb/ets-show-eth0.txt"))
    assert state["prio_tc"] == list(range(8))
    assert state["tc_tsa"] == ["ets"] * 3 + ["strict"] * 5
    assert state["tc_bw"] == [33, 33, 34, 0, 0, 0, 0, 0]


def test_buffer_and_apptrust_text():
    buf = _dcb.parse_text(fixture("dcb/buffer-show-eth0.txt"))
    assert buf["prio_buffer"] == list(range(8))
    assert buf["buffer_size"][6] == "1Mb"
    assert buf["total_size"] == "1222Kb"
    assert _dcb.parse_text(fixture("dcb/apptrust-show-eth0.txt")) == {"order": ["port", "pcp", "ethtype"]}


def test_json_fixtures():
    assert _dcb.parse_json(fixture("dcb/pfc-show.json"))["prio_pfc"][3] is True
    assert _dcb.parse_json(fixture("dcb/app-show.json"))["dscp_prio"] == [[26, 3], [48, 6]]
    ets = _dcb.parse_json(fixture("dcb/ets-show.json"))
    assert ets["tc_tsa"][3] == "strict" and ets["tc_bw"][:3] == [33, 33, 34]
    assert _dcb.parse_json(fixture("dcb/apptrust-show.json"))["order"] == ["dscp", "pcp"]
    with pytest.raises(_dcb.DcbError):
        _dcb.parse_json("not json")


def test_dscp_names():
    assert _dcb.dscp_value("AF31") == 26
    assert _dcb.dscp_value("CS6") == 48
    assert _dcb.dscp_value("EF") == 46
    assert _dcb.dscp_value("26") == 26
    with pytest.raises(_dcb.DcbError):
        _dcb.dscp_value("nonsense")


def test_unsupported_recorded_on_veth():
    err = fixture("dcb/veth-unsupported.stderr.txt")
    assert _dcb.unsupported_reason(1, "", err) == "Attribute read: Operation not supported"
    assert _dcb.unsupported_reason(0, "{}", "") is None
    assert _dcb.unsupported_reason(1, "", "Cannot find device") is None


def test_argv_match_documented_syntax():
    assert _dcb.pfc_set_argv("dcb", "eth0", _dcb.pfc_list([3])) == [
        "dcb", "pfc", "set", "dev", "eth0", "prio-pfc",
        "0:off", "1:off", "2:off", "3:on", "4:off", "5:off", "6:off", "7:off"]
    assert _dcb.app_replace_argv("dcb", "eth0", {48: 6, 26: 3}) == [
        "dcb", "app", "replace", "dev", "eth0", "dscp-prio", "26:3", "48:6"]
    assert _dcb.ets_set_argv("dcb", "eth0", list(range(8)), ["ets"] * 6 + ["strict", "ets"],
                             [10, 10, 10, 50, 10, 0, 0, 10]) == [
        "dcb", "ets", "set", "dev", "eth0",
        "prio-tc", "0:0", "1:1", "2:2", "3:3", "4:4", "5:5", "6:6", "7:7",
        "tc-tsa", "0:ets", "1:ets", "2:ets", "3:ets", "4:ets", "5:ets", "6:strict", "7:ets",
        "tc-bw", "0:10", "1:10", "2:10", "3:50", "4:10", "5:0", "6:0", "7:10"]
    assert _dcb.apptrust_set_argv("dcb", "eth0", ["dscp", "pcp"]) == [
        "dcb", "apptrust", "set", "dev", "eth0", "order", "dscp", "pcp"]


WANT = {"trust": "dscp", "pfc": _dcb.pfc_list([3]), "dscp2prio": {26: 3, 48: 6},
        "ets": {"prio_tc": list(range(8)), "tsa": ["ets"] * 6 + ["strict", "ets"],
                "bw": [10, 10, 10, 50, 10, 0, 0, 10]}}


def test_backend_reads_fixtures_and_changes_only_what_differs():
    dev = FakeDcb("eth0", pfc=fixture("dcb/pfc-show.json"), app=fixture("dcb/app-show.json"),
                  ets=fixture("dcb/ets-show.json"), apptrust=fixture("dcb/apptrust-show.json"))
    backend = _dcb.DcbBackend(FakeRunner([dev]), "/usr/sbin/dcb")
    assert backend.probe("eth0") is None
    have = backend.read("eth0")
    assert have["pfc"] == _dcb.pfc_list([3])
    assert have["dscp2prio"] == {26: 3, 48: 6}
    assert have["trust"] == "dscp"
    assert have["dcbx"] == ["host", "ieee"]
    # PFC, APP and trust already right: only ETS differs
    assert backend.commands("eth0", WANT, have) == [
        _dcb.ets_set_argv("/usr/sbin/dcb", "eth0", WANT["ets"]["prio_tc"], WANT["ets"]["tsa"], WANT["ets"]["bw"])]
    for argv in backend.commands("eth0", WANT, have):
        dev(argv)
    assert backend.commands("eth0", WANT, backend.read("eth0")) == []


def test_duplicate_app_entries_are_replaced():
    dev = FakeDcb("eth0", app='{"dscp_prio":[[26,3],[26,0],[48,6]]}')
    backend = _dcb.DcbBackend(FakeRunner([dev]), "/usr/sbin/dcb")
    have = backend.read("eth0")
    assert have["dscp2prio"] == {26: [0, 3], 48: 6}
    assert backend.commands("eth0", {"dscp2prio": {26: 3, 48: 6}}, have) == [
        ["/usr/sbin/dcb", "app", "replace", "dev", "eth0", "dscp-prio", "26:3"]]


def test_backend_old_iproute2_without_apptrust():
    dev = FakeDcb("eth0", apptrust_err=fixture("dcb/apptrust-unknown.stderr.txt").strip())
    backend = _dcb.DcbBackend(FakeRunner([dev]), "/usr/sbin/dcb")
    have = backend.read("eth0")
    assert have["trust"] is None and "apptrust" in have["apptrust_error"]
    cmds = backend.commands("eth0", WANT, have)
    assert not any(c[1] == "apptrust" for c in cmds)


def test_backend_probe_unsupported():
    dev = FakeDcb("v0", unsupported=fixture("dcb/veth-unsupported.stderr.txt").strip())
    backend = _dcb.DcbBackend(FakeRunner([dev]), "/usr/sbin/dcb")
    assert backend.probe("v0") == "Attribute read: Operation not supported"


def test_full_commands_for_boot_replay():
    backend = _dcb.DcbBackend(FakeRunner([]), "dcb")
    cmds = backend.full_commands("eth0", WANT)
    assert [c[1] for c in cmds] == ["apptrust", "pfc", "app", "ets"]


def test_each_command_names_its_setting():
    backend = _dcb.DcbBackend(FakeRunner([]), "dcb")
    cmds = backend.full_commands("eth0", WANT)
    assert [backend.setting(c) for c in cmds] == ["trust", "pfc", "dscp2prio", "ets"]
    assert all(backend.setting(c) in WANT for c in cmds)


def test_errors_are_capability_errors():
    from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

    with pytest.raises(CapabilityError, match="cannot parse dcb JSON"):
        _dcb.parse_json("{")
