"""The mlxconfig/mstconfig query parser on every recorded output (tests/fixtures/nic_config/, each with
its .source): the Default, Current and Next Boot columns read column by column, '*' marks, NAME(n)
values, Array[a..b] parameters, values wider than their column, errors naming a parameter the device
does not expose."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nic_config_intents as intents
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nic_config_params as nvp
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nic_config_query as q

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nic_config"
ALL = sorted(p.name for p in FIXTURES.glob("*.txt"))
E3 = ["default", "current", "next_boot"]


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def col(parsed: dict, param: str, column: str) -> str:
    return parsed["params"][param]["values"][column]["text"]


@pytest.mark.parametrize("name", ALL)
def test_every_fixture_names_its_source_and_parses_without_a_guess(name: str) -> None:
    source = (FIXTURES / (name + ".source")).read_text()
    assert source.startswith("SOURCE:") and ("https://" in source or "repository" in source)
    parsed = q.parse_query(text(name))
    if name.endswith(".rows.txt") or ".rows-" in name:
        assert parsed["params"] == {}  # no header: rows are read with the columns the caller names
        columns = ["next_boot"] if "roce-cc" in name else E3
        params, order, unparsed = q.parse_rows(text(name), columns)
        assert params and unparsed == [] and len(order) == len(params)
        return
    assert parsed["unparsed"] == []
    for param in parsed["params"].values():
        assert set(param["values"]) == set(parsed["columns"])  # every column read, none invented


def test_bluefield2_three_columns_and_a_value_that_fills_its_column() -> None:
    parsed = q.parse_query(text("bluefield2-mbf2h512c-e-q.txt"))
    assert parsed["device_type"] == "BlueField2" and parsed["part_number"] == "MBF2H512C-AECO_Ax"
    assert parsed["device"] == "ca:00.0" and parsed["devices"] == 1
    assert parsed["columns"] == E3
    assert parsed["order"][0] == "MEMIC_BAR_SIZE" and len(parsed["order"]) == 7
    model = parsed["params"]["INTERNAL_CPU_MODEL"]["values"]
    assert [model[c]["text"] for c in E3] == ["EMBEDDED_CPU(1)"] * 3  # 15 of 16 characters, one blank between
    assert model["current"]["name"] == "EMBEDDED_CPU" and model["current"]["number"] == 1
    limit = parsed["params"]["MEMIC_SIZE_LIMIT"]["values"]["default"]
    assert limit["name"] == "_256KB" and limit["number"] == 1
    assert parsed["params"]["MEMIC_BAR_SIZE"]["values"]["next_boot"]["number"] == 0
    assert parsed["arrays"] == {"HOST_CHAINING_DESCRIPTORS": [0, 7], "HOST_CHAINING_TOTAL_BUFFER_SIZE": [0, 7]}
    assert not any(p["modified"] for p in parsed["params"].values())


def test_bluefield2_rows_overflowing_their_columns_and_the_ats_parameter() -> None:
    params, _order, unparsed = q.parse_rows(text("bluefield2-mbf2h512c-e-q.rows-boot.txt"), E3)
    assert unparsed == []
    p2p = params["P2P_ORDERING_MODE"]["values"]
    assert [p2p[c]["text"] for c in E3] == ["DEVICE_DEFAULT(0)"] * 3  # 17 characters: split by one blank
    assert params["ATS_ENABLED"]["values"]["current"]["number"] == 0
    assert params["EXP_ROM_VIRTIO_NET_UEFI_x86_ENABLE"]["values"]["next_boot"]["name"] == "True"  # lower-case x86
    ports, _o, _u = q.parse_rows(text("bluefield2-mbf2h512c-e-q.rows-ports.txt"), E3)
    assert nvp.ports(ports, "KEEP_ETH_LINK_UP") == [1, 2]
    assert ports["NUM_OF_VL_P1"]["values"]["default"]["name"] == "_4_VLs"


def test_connectx7_next_boot_only_arrays_and_an_unpadded_wide_value() -> None:
    parsed = q.parse_query(text("connectx7-mt4129-q.txt"))
    assert parsed["columns"] == ["next_boot"]  # queried without -e: the firmware's Next Boot alone
    assert col(parsed, "MEMIC_ATOMIC", "next_boot") == "MEMIC_ATOMIC_ENABLE(2)"
    assert parsed["arrays"]["MODULE_SPLIT_M0"] == [0, 15]
    assert q.array_query("MODULE_SPLIT_M0", parsed["arrays"]["MODULE_SPLIT_M0"]) == "MODULE_SPLIT_M0[0..15]"
    assert parsed["params"]["PROG_PARSE_GRAPH"]["values"]["next_boot"]["number"] == 0
    assert "current" not in parsed["params"]["ROCE_NEXT_PROTOCOL"]["values"]  # not printed, not guessed


def test_connectx6dx_reports_the_parameter_it_does_not_expose() -> None:
    parsed = q.parse_query(text("connectx6dx-dell-set-unknown-parameter.txt"))
    assert parsed["device_type"] == "ConnectX6DX" and parsed["part_number"] == "0F6FXM_08P2T2_Ax"
    assert parsed["columns"] == ["next_boot", "new"]
    assert parsed["errors"] == [{"kind": "unknown", "param": "PROG_PARSE_GRAPH",
                                 "text": "Unknown Parameter: PROG_PARSE_GRAPH"}]
    # mstflint's own words for a parameter the device hides
    assert q.parse_error("-E- The Device doesn't support MAX_ACC_OUT_READ parameter") == {
        "kind": "unsupported", "param": "MAX_ACC_OUT_READ",
        "text": "The Device doesn't support MAX_ACC_OUT_READ parameter"}
    assert q.parse_error("-E- Unknown Parameter FOO_BAR")["param"] == "FOO_BAR"
    assert q.parse_error("-E- Failed to open device")["kind"] == "error"


def test_connectx5_set_output_columns_next_boot_and_new() -> None:
    parsed = q.parse_query(text("connectx5-mstconfig-set.txt"))
    assert parsed["columns"] == ["next_boot", "new"]
    assert col(parsed, "SRIOV_EN", "next_boot") == "True(1)" and col(parsed, "NUM_OF_VFS", "new") == "8"
    assert parsed["errors"] == []  # "-I- Please reboot" is advice, not a state: ignored


def test_connectx5_roce_congestion_control_rows() -> None:
    params, _order, _u = q.parse_rows(text("connectx5-roce-cc.rows.txt"), ["next_boot"])
    assert params["ROCE_CC_PRIO_MASK_P1"]["values"]["next_boot"]["number"] == 255
    assert params["CNP_DSCP_P1"]["values"]["next_boot"]["number"] == 48
    assert params["CNP_802P_PRIO_P1"]["values"]["next_boot"]["number"] == 6
    assert nvp.ports(params, "ROCE_CC_PRIO_MASK") == [1, 2]


def test_operator_connectx4_star_marks_and_the_array_requeried_per_index() -> None:
    parsed = q.parse_query(text("operator-connectx4-e-q.txt"))
    keep = parsed["params"]["KEEP_IB_LINK_UP_P2"]
    assert keep["modified"] is True
    assert [keep["values"][c]["text"] for c in E3] == ["False(0)", "True(1)", "True(1)"]
    assert parsed["params"]["KEEP_LINK_UP_ON_BOOT_P2"]["modified"] is False
    memic = parsed["params"]["MEMIC_SIZE_LIMIT"]["values"]
    assert (memic["current"]["name"], memic["next_boot"]["name"], memic["next_boot"]["number"]) == (
        "_256KB", "DISABLED", 0)
    assert parsed["arrays"] == {"ESWITCH_HAIRPIN_DESCRIPTORS": [0, 7]}
    indexed = q.parse_query(text("operator-connectx4-e-q-array.txt"))
    assert list(indexed["order"]) == ["ESWITCH_HAIRPIN_DESCRIPTORS[%d]" % i for i in range(8)]
    assert all(indexed["params"][n]["values"]["current"]["number"] == 128 for n in indexed["order"])
    assert intents.split_index("ESWITCH_HAIRPIN_DESCRIPTORS[3]") == ("ESWITCH_HAIRPIN_DESCRIPTORS", 3)


def test_operator_connectx9_columns_of_one_row_in_different_encodings() -> None:
    parsed = q.parse_query(text("operator-connectx9-e-q-mixed-columns.txt"))
    mixed = parsed["params"]["MIXED_FORMAT_PARAM"]["values"]
    assert (mixed["default"]["number"], mixed["default"]["name"]) == (7, None)
    assert (mixed["current"]["name"], mixed["current"]["number"]) == ("HOST_0", 1)
    assert (mixed["next_boot"]["name"], mixed["next_boot"]["number"]) == ("DEVICE_DEFAULT", 0)
    owner = q.parse_query(text("operator-connectx9-e-q-array-mixed.txt"))
    first = owner["params"]["PCI_DOWNSTREAM_PORT_OWNER[0]"]
    assert first["values"]["current"] == {"text": "148", "name": None, "number": 148, "array": None, "unknown": False}
    assert first["modified"] is True
    assert "PCI_DOWNSTREAM_PORT_OWNER[3]" not in owner["params"]  # absent, not invented
    # a bare name compared with a column that prints a number: the row's own encodings decide
    want = nvp.resolved({"name": "DEVICE_DEFAULT", "number": None}, first)
    assert want["number"] == 0
    assert nvp.matches(first["values"]["current"], want) is False
    assert nvp.matches(first["values"]["next_boot"], want) is True


def test_operator_bluefield3_offload_engine() -> None:
    parsed = q.parse_query(text("operator-bluefield3-e-q-offload-engine.txt"))
    assert parsed["device_type"] == "BlueField3"
    assert col(parsed, "INTERNAL_CPU_OFFLOAD_ENGINE", "current") == "ENABLED(0)"


@pytest.mark.parametrize("token, expected", [
    ("True(1)", ("True", 1, None, False)), ("148", (None, 148, None, False)), ("HOST_0", ("HOST_0", None, None, False)),
    ("Array[0..15]", (None, None, [0, 15], False)), ("N/A", (None, None, None, True)),
    ("0x0000000000000000ffff", (None, 0xFFFF, None, False)), ("_4_VLs(3)", ("_4_VLs", 3, None, False)),
])
def test_value_encodings(token: str, expected: tuple) -> None:
    value = q.parse_value(token)
    assert (value["name"], value["number"], value["array"], value["unknown"]) == expected
    assert value["text"] == token


def test_rows_that_do_not_fit_the_header_are_kept_not_guessed() -> None:
    table = ("Configurations:                                      Default         Current         Next Boot\n"
             "         LINK_TYPE_P1                                IB(1)           ETH(2)\n"
             "*RO      SOME_FIXED_PARAM                            0               0               1\n")
    parsed = q.parse_query(table)
    assert parsed["unparsed"][0]["name"] == "LINK_TYPE_P1"
    assert "2 value(s) for 3 column(s)" in parsed["unparsed"][0]["reason"]
    assert parsed["params"]["SOME_FIXED_PARAM"]["read_only"] is True
    assert parsed["params"]["SOME_FIXED_PARAM"]["modified"] is True
    not_readable = q.parse_query("Configurations:                                          Next Boot\n"
                                 "Device Firmware does not support reading default and current configurations\n")
    assert not_readable["not_readable"] == ["default and current configurations"]


def test_intents_and_raw_parameters_share_one_table() -> None:
    assert intents.intent_of("LINK_TYPE_P2") == "link_type" and intents.intent_of("CNP_DSCP_P1") == "roce"
    assert intents.intent_of("NUM_OF_VFS") == "sriov" and intents.intent_of("PCI_ATOMIC_MODE") is None
    assert intents.raw_clashes({"SRIOV_EN": 1, "PCI_ATOMIC_MODE": 4}, {"sriov"}) == [("SRIOV_EN", "sriov")]
    assert intents.raw_clashes({"SRIOV_EN": 1}, {"ats"}) == []
