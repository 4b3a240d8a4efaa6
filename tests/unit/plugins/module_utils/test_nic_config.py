"""The nic_config capability against the lab's stateful mlxconfig (lab/datapath_lab/fake_mlxconfig.py,
which prints the real tool's format; the parser's recorded fixtures are in test_nic_config_query.py):
the decision per parameter (Current / Next Boot / neither), one batched set per device, check mode
and diff, the boot-id record that breaks reboot loops, hidden parameters, arrays, the firmware reset,
the PCIe Max Read Request, and errors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nic_config as nc
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, render_diff, run
from netfakes import FakeRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "lab"))
from datapath_lab import fake_mlxconfig, nvconfig  # noqa: E402

MLX, RESET = "/usr/local/sbin/mlxconfig", "/usr/local/sbin/mlxfwreset"
PF0, PF1 = "0000:3b:00.0", "0000:3b:00.1"
PSID = "MT_0000000834"
CONFIG = {"psid": PSID, "link_type": "eth", "sriov": {"enabled": True, "num_vfs": 8},
          "roce": {"prio_mask": 8, "cnp_dscp": 48, "cnp_priority": 6, "fabric": "rdma"}}


class Lab:
    """A node tree (the lab's PCI view, a boot id) and the fake's device state, below tmp_path."""

    def __init__(self, tmp: Path, mode: str = "healthy") -> None:
        self.root = tmp / "node"
        self.state_dir = str(tmp / "nvconfig")
        os.makedirs(self.state_dir)
        self.device = nvconfig.connectx7()
        self.device["firmware"] = mode
        self.path = os.path.join(self.state_dir, self.device["slot"] + ".json")
        fake_mlxconfig.save(self.path, self.device)
        nvconfig._functions(str(self.root), self.device, 0)
        self.boots = 0
        self.boot()
        self.resets = 0

    def boot(self, apply: bool | None = None) -> None:
        """A new boot id; the firmware loads Next Boot unless it is broken."""
        self.boots += 1
        (self.root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
        (self.root / "proc/sys/kernel/random/boot_id").write_text("boot-%d\n" % self.boots)
        device = fake_mlxconfig.load(self.path)
        if apply if apply is not None else device["firmware"] != "broken":
            fake_mlxconfig.apply_next_boot(device)
        fake_mlxconfig.save(self.path, device)
        for bdf in device["functions"]:
            (self.root / nvconfig.PCI_DIR.lstrip("/") / bdf / "config").write_bytes(nvconfig.config_space(0x1021))

    def param(self, name: str) -> dict[str, Any]:
        return next(p for p in fake_mlxconfig.load(self.path)["params"] if p["name"] == name)

    def handler(self, argv: list[str]):
        if argv[0] == MLX:
            return fake_mlxconfig.main(["mlxconfig"] + argv[1:], self.state_dir) + ("",)
        if argv[0] == RESET:
            self.resets += 1
            return fake_mlxconfig.main(["mlxfwreset"] + argv[1:], self.state_dir) + ("",)
        return None

    def runner(self, which: dict[str, str | None] | None = None) -> FakeRunner:
        paths = {"mlxconfig": MLX, "mlxfwreset": RESET}
        paths.update(which or {})
        return FakeRunner([self.handler], which=paths)

    def run(self, configs: list[dict[str, Any]] | None = None, check: bool = False, diff: bool = False,
            runner: FakeRunner | None = None, **options: Any) -> dict[str, Any]:
        params = {"configs": [dict(c) for c in (configs if configs is not None else [CONFIG])],
                  "pci_dir": nvconfig.PCI_DIR, "tool": "auto", "state_file": nc.STATE_FILE,
                  "connection_address": None, "root": str(self.root)}
        for config in params["configs"]:
            config.setdefault("raw", {})
            config.setdefault("firmware_reset", False)
            for key in ("psid", "part_number", "driver", "link_type", "sriov", "ats", "max_read_request", "roce"):
                config.setdefault(key, None)
        params.update(options)
        self.last_runner = runner or self.runner()
        return run(nc.NicConfig, params, Node(self.last_runner, str(self.root), check, diff))

    def record(self) -> dict[str, Any] | None:
        path = self.root / nc.STATE_FILE.lstrip("/")
        return json.loads(path.read_text()) if path.exists() else None


def states(result: dict[str, Any]) -> dict[str, str]:
    return {p["param"]: p["state"] for d in result["devices"] for p in d["params"]}


SETS = ["LINK_TYPE_P1", "LINK_TYPE_P2", "SRIOV_EN", "NUM_OF_VFS", "ROCE_CC_PRIO_MASK_P1", "ROCE_CC_PRIO_MASK_P2"]


def test_discovery_finds_the_physical_functions_and_groups_them(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    vf = lab.root / nvconfig.PCI_DIR.lstrip("/") / "0000:3b:00.2"
    vf.mkdir()
    for name, value in (("vendor", "0x15b3"), ("class", "0x020000")):
        (vf / name).write_text(value + "\n")
    (vf / "physfn").symlink_to("../0000:3b:00.0")
    other = lab.root / nvconfig.PCI_DIR.lstrip("/") / "0000:00:1f.0"
    other.mkdir()
    (other / "vendor").write_text("0x8086\n")
    (other / "class").write_text("0x020000\n")
    from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
    functions = nc.discover(HostRoot(str(lab.root)), nvconfig.PCI_DIR)
    assert [f["pci"] for f in functions] == [PF0, PF1]  # the VF and the Intel NIC are not ours
    assert functions[0]["psid"] == PSID and functions[0]["driver"] == "mlx5_core"
    devices = nc.group(functions)
    assert len(devices) == 1 and devices[0]["functions"] == [PF0, PF1] and devices[0]["pci"] == PF0


def test_check_mode_predicts_the_run_and_changes_nothing(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    before = Path(lab.path).read_text()
    predicted = lab.run(check=True, diff=True)
    assert predicted["changed"] is True and predicted["reboot_required"] is True
    assert Path(lab.path).read_text() == before and lab.record() is None  # nothing set, nothing recorded
    assert [c for c in lab.last_runner.calls if "set" in c] == []
    assert states(predicted) == {**{p: "set" for p in SETS}, "CNP_DSCP_P1": "ok", "CNP_802P_PRIO_P1": "ok",
                                 "CNP_DSCP_P2": "ok", "CNP_802P_PRIO_P2": "ok"}
    done = lab.run(diff=True)
    assert done["actions"] == predicted["actions"]  # the same actions, in the same order
    assert done["reboot_required"] is True and done["reboot_reasons"] == predicted["reboot_reasons"]
    sets = list(lab.last_runner.changing_calls())
    assert sets == [[MLX, "-d", PF0, "-y", "set", "LINK_TYPE_P1=2", "LINK_TYPE_P2=2", "SRIOV_EN=1", "NUM_OF_VFS=8",
                     "ROCE_CC_PRIO_MASK_P1=8", "ROCE_CC_PRIO_MASK_P2=8"]]  # one batched set for the device
    assert lab.param("LINK_TYPE_P1")["next"] == 2 and lab.param("LINK_TYPE_P1")["current"] == 1
    # the diff: each parameter's Next Boot value, old -> new, one section for the function
    diff = done["diff"]
    assert [d["before_header"] for d in diff] == ["%s Next Boot" % PF0]
    assert "LINK_TYPE_P1 = IB(1)\n" in diff[0]["before"] and "LINK_TYPE_P1 = ETH(2)\n" in diff[0]["after"]
    assert "NUM_OF_VFS = 0\n" in diff[0]["before"] and "NUM_OF_VFS = 8\n" in diff[0]["after"]
    assert "ROCE_CC_PRIO_MASK_P2 = 255\n" in diff[0]["before"] and "SRIOV_EN = True(1)\n" in diff[0]["after"]
    assert done["reboot_reasons"][0] == "%s LINK_TYPE_P1: IB(1) -> ETH(2)" % PF0
    record = lab.record()
    assert record["devices"][PF0]["params"]["LINK_TYPE_P1"] == {
        "value": "ETH(2)", "name": "ETH", "number": 2, "boot_id": "boot-1"}


def test_same_boot_rerun_is_pending_then_a_healthy_boot_applies_and_nothing_is_left(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    lab.run()
    again = lab.run()
    assert again["changed"] is False and again["actions"] == []
    assert again["reboot_required"] is True and set(states(again).values()) >= {"pending"}
    assert {p["param"] for p in again["pending"]} == set(SETS)
    lab.boot()
    after = lab.run()
    assert after["changed"] is False and after["reboot_required"] is False and after["actions"] == []
    assert set(states(after).values()) == {"ok"} and after["findings"] == [] and after["not_applied"] == []
    assert lab.param("SRIOV_EN")["current"] == 1


def test_broken_firmware_one_reboot_then_the_finding_and_never_again(tmp_path: Path) -> None:
    lab = Lab(tmp_path, mode="broken")
    first = lab.run()
    assert first["reboot_required"] is True
    for _boot in range(3):  # the reboot that was asked for, and any later ones for other reasons
        lab.boot()
        result = lab.run()
        assert result["reboot_required"] is False and result["changed"] is False and result["actions"] == []
        assert set(states(result).values()) == {"not_applied", "ok"}
        finding = result["findings"][0]
        assert finding["check"] == nc.FINDING and finding["pci"] == PF0 and finding["params"] == SETS
        assert result["not_applied"][0]["params"][0] == {"param": "LINK_TYPE_P1", "wanted": "ETH(2)",
                                                         "current": "IB(1)", "next_boot": "ETH(2)",
                                                         "set_at_boot": "boot-1"}
        assert "no reboot is asked for them again" in result["not_applied"][0]["text"]
    # check mode (rolling_reboot.yml's look) says the same
    assert lab.run(check=True)["reboot_required"] is False


def test_a_value_staged_by_someone_else_is_recorded_so_that_it_is_rebooted_for_once(tmp_path: Path) -> None:
    lab = Lab(tmp_path, mode="broken")
    fake_mlxconfig.main(["mlxconfig", "-d", PF0, "-y", "set", "SRIOV_EN=1", "NUM_OF_VFS=8"], lab.state_dir)
    config = {"psid": PSID, "sriov": {"enabled": True, "num_vfs": 8}}
    first = lab.run([config])
    assert states(first) == {"SRIOV_EN": "pending", "NUM_OF_VFS": "pending"} and first["reboot_required"] is True
    assert [a["kind"] for a in first["actions"]] == ["record"]
    lab.boot()
    assert lab.run([config])["reboot_required"] is False


def test_a_new_desired_value_gets_its_one_reboot(tmp_path: Path) -> None:
    lab = Lab(tmp_path, mode="broken")
    lab.run()
    lab.boot()
    assert lab.run()["reboot_required"] is False
    changed = dict(CONFIG, sriov={"enabled": True, "num_vfs": 16})
    result = lab.run([changed])
    assert states(result)["NUM_OF_VFS"] == "set" and result["reboot_required"] is True


def test_current_right_next_boot_wrong_is_set_back_without_a_reboot(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    fake_mlxconfig.main(["mlxconfig", "-d", PF0, "-y", "set", "ATS_ENABLED=1"], lab.state_dir)
    result = lab.run([{"psid": PSID, "ats": False}])
    assert states(result) == {"ATS_ENABLED": "restage"} and result["reboot_required"] is False
    assert result["changed"] is True and lab.param("ATS_ENABLED")["next"] == 0


def test_hidden_and_unexposed_parameters_are_reported_not_set(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    config = {"psid": PSID, "raw": {"MAX_ACC_OUT_READ": 0, "PROG_PARSE_GRAPH": True, "ADVANCED_PCI_SETTINGS": True}}
    result = lab.run([config])
    unsupported = {u["param"]: u["reason"] for u in result["unsupported"]}
    assert unsupported["MAX_ACC_OUT_READ"] == ("hidden: the tool shows MAX_ACC_OUT_READ only while "
                                               "ADVANCED_PCI_SETTINGS is True(1) (Current False(0))")
    assert unsupported["PROG_PARSE_GRAPH"] == "this device (or its firmware) does not expose PROG_PARSE_GRAPH"
    assert states(result) == {"ADVANCED_PCI_SETTINGS": "set"}
    assert any("MAX_ACC_OUT_READ: hidden" in w for w in result["warnings"])
    lab.boot()  # ADVANCED_PCI_SETTINGS is Current now: MAX_ACC_OUT_READ shows, and is set
    shown = lab.run([config])
    assert states(shown) == {"ADVANCED_PCI_SETTINGS": "ok", "MAX_ACC_OUT_READ": "ok"}


def test_an_array_element_is_queried_per_index_and_set(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    result = lab.run([{"psid": PSID, "raw": {"ESWITCH_HAIRPIN_DESCRIPTORS[2]": 64}}])
    queries = [c for c in lab.last_runner.calls if "query" in c and c[-1].startswith("ESWITCH")]
    assert queries == [[MLX, "-d", PF0, "-e", "query", "ESWITCH_HAIRPIN_DESCRIPTORS[0..7]"],
                       [MLX, "-d", PF1, "-e", "query", "ESWITCH_HAIRPIN_DESCRIPTORS[0..7]"]]
    assert states(result) == {"ESWITCH_HAIRPIN_DESCRIPTORS[2]": "set"}
    assert lab.param("ESWITCH_HAIRPIN_DESCRIPTORS")["next"][2] == 64


def test_by_part_number_and_a_device_no_entry_names(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    result = lab.run([{"part_number": "MCX755106AS-HEAT", "ats": True}], check=True)
    assert states(result) == {"ATS_ENABLED": "set"} and result["devices"][0]["part_number"] == "MCX755106AS-HEAT_Ax"
    none = lab.run([{"psid": "MT_0000000838", "ats": True}], runner=lab.runner({"mlxconfig": None}))
    assert none["changed"] is False and none["devices"][0]["config"] is None
    assert "no nic_config entry for PSID MT_0000000834" in none["devices"][0]["why"]


def test_a_matching_device_without_the_tool_fails_with_the_fix(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    result = lab.run(runner=lab.runner({"mlxconfig": None, "mstconfig": None}))
    assert result["failed"] is True
    assert "mlxconfig or mstconfig not found on the node: install NVIDIA MFT (mlxconfig) or mstflint" in result["msg"]
    mst = lab.runner({"mlxconfig": None, "mstconfig": MLX})
    assert lab.run(check=True, runner=mst)["tool"] == "mstconfig"


def test_a_failing_set_names_the_device_and_the_tools_words(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    result = lab.run([{"psid": PSID, "sriov": {"enabled": True, "num_vfs": 500}}])
    assert result["failed"] is True
    assert result["msg"].startswith("%s: mlxconfig -d %s -y set SRIOV_EN=1 NUM_OF_VFS=500 failed (rc 3): "
                                    "Parameter NUM_OF_VFS value 500 is out of range" % (PF0, PF0))
    assert lab.param("SRIOV_EN")["next"] == 0


def test_a_broken_record_file_is_an_error_with_the_fix(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    path = lab.root / nc.STATE_FILE.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    result = lab.run(check=True)
    assert result["failed"] and "is not valid JSON; fix or remove it" in result["msg"]


def test_invalid_configs_are_refused_before_anything_is_read(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    result = lab.run([{"ats": True, "raw": {"BAD NAME": 1, "X": "a b"}}])
    assert result["failed"] and result["msg"].startswith("invalid configs: configs[0]: give psid")
    assert lab.last_runner.calls == []


def test_firmware_reset_applies_without_a_reboot_and_a_broken_one_still_asks(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    config = dict(CONFIG, firmware_reset=True)
    predicted = lab.run([config], check=True)
    assert predicted["reboot_required"] is False
    assert predicted["actions"][-2]["text"] == "run mlxfwreset --device %s reset --yes" % PF0
    done = lab.run([config])
    assert done["reboot_required"] is False and lab.resets == 1
    reasons = {p["reason"] for p in done["devices"][0]["params"] if p["param"] in SETS}
    assert reasons == {"applied by the firmware reset"}
    broken = Lab(tmp_path / "b", mode="broken")
    result = broken.run([config])
    assert result["reboot_required"] is True and broken.resets == 1


def test_max_read_request_is_written_to_config_space_at_run_time(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    config = {"psid": PSID, "max_read_request": 4096}
    predicted = lab.run([config], check=True, diff=True)
    assert [a["kind"] for a in predicted["actions"]] == ["pcie", "pcie"]
    assert predicted["reboot_required"] is False
    assert predicted["diff"][0] == {"before_header": "%s PCIe" % PF0, "after_header": "%s PCIe" % PF0,
                                    "before": "MaxReadReq = 512\n", "after": "MaxReadReq = 4096\n"}
    lab.run([config])
    from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
    offset, devctl = nc.pcie_devctl(HostRoot(str(lab.root)), nvconfig.PCI_DIR, PF1)
    assert nc.mrrs_of(devctl) == 4096 and devctl & 0x00F0 == 0x0030  # payload and relaxed ordering kept
    assert lab.run([config])["changed"] is False
    lab.boot()  # a boot sets it back: the next run sets it again
    assert lab.run([config])["changed"] is True


def test_a_device_that_cannot_report_current(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    params = {"SRIOV_EN": {"values": {"next_boot": {"text": "True(1)", "name": "True", "number": 1}}}}
    want = {"name": "True", "number": 1}
    assert nc.NicConfig._decide(params["SRIOV_EN"], want, None, "boot-2")[0] == "pending"
    recorded = {"value": "True(1)", "name": "True", "number": 1, "boot_id": "boot-1"}
    assert nc.NicConfig._decide(params["SRIOV_EN"], want, recorded, "boot-2")[0] == "assumed"
    assert nc.NicConfig._decide(params["SRIOV_EN"], want, recorded, "boot-1")[0] == "pending"
    assert lab.boots == 1


def test_render_diff_of_the_actions_is_the_diff(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    result = lab.run(check=True, diff=True)
    actions = [nc.Action(a["kind"], a["target"], a["text"], before=a["before"], after=a["after"],
                         diff=("%s Next Boot" % PF0) if a["kind"] == "nvconfig" else False)
               for a in result["actions"]]
    assert render_diff(actions) == result["diff"]


@pytest.mark.parametrize("size, bits", [(128, 0), (512, 2), (4096, 5)])
def test_max_read_request_encoding(size: int, bits: int) -> None:
    assert nc.mrrs_of(nc.with_mrrs(0x2030, size)) == size
    assert (nc.with_mrrs(0x2030, size) >> 12) & 7 == bits


def test_the_plans_arguments_pass_the_modules_argument_spec_in_datapath_run(tmp_path: Path) -> None:
    """What site.yml sends (the plan's nic_config part, through capability_args) is validated by
    datapath_run against the module's own argument spec, then planned on the device."""
    from ansible_collections.aiinfra.datapath.plugins.module_utils import _batch
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils import capabilities as caps
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import node_plan

    spec = {"version": 1, "fabrics": [
        {"name": "mgmt", "purpose": "management", "kind": "ethernet", "mtu": 1500, "subnets": ["192.0.2.0/24"]},
        {"name": "rail0", "purpose": "rdma", "kind": "roce", "mtu": 9000, "subnets": ["10.100.0.0/20"]}],
        "profiles": [{"name": "gpu", "nic_config": [
            {"psid": PSID, "link_type": "eth", "sriov": {"enabled": True, "num_vfs": 8}, "roce_fabric": "rail0"},
            {"driver": "mlx5_core", "raw": {"PCI_ATOMIC_MODE": "PCI_ATOMICS_ENABLED_EXT_ATOMICS_ENABLED"}}]}]}
    plan = node_plan(spec, "h1", ["gpu"], {})
    assert plan["nic_config"]["configs"][0] == {
        "psid": PSID, "link_type": "eth", "sriov": {"enabled": True, "num_vfs": 8},
        "roce": {"prio_mask": 8, "cnp_dscp": 48, "cnp_priority": 6, "fabric": "rail0"}, "raw": {},
        "firmware_reset": False}
    lab = Lab(tmp_path)
    args = caps.capability_args("nic_config", plan, {"pci_dir": nvconfig.PCI_DIR}, {"inventory_hostname": "h1"})
    args["root"] = str(lab.root)
    result = _batch.run_call(lab.runner(), "nic_config", args, check_mode=True)
    assert not result.get("failed"), result
    assert states(result) == {**{p: "set" for p in SETS}, "CNP_DSCP_P1": "ok", "CNP_802P_PRIO_P1": "ok",
                              "CNP_DSCP_P2": "ok", "CNP_802P_PRIO_P2": "ok"}
    assert result["devices"][0]["config"] == 0  # the PSID entry is more specific than the driver one
    assert caps.capability_args("nic_config", dict(plan, nic_config={"configs": []})) is None


def test_a_recorded_bluefield2_query_through_the_module(tmp_path: Path) -> None:
    """The BlueField-2's recorded `mstconfig -e q` (tests/fixtures/nic_config/, mstflint issue 830) answers the
    module's query on a device found in sysfs: a value held is left alone, one it does not hold is set with the
    name the entry gives, and the DPU mode is named."""
    fixture = (Path(__file__).resolve().parents[3] / "fixtures" / "nic_config" / "bluefield2-mbf2h512c-e-q.txt")
    root = tmp_path / "node"
    base = root / "sys/bus/pci/devices/0000:ca:00.0"
    (base / "infiniband/mlx5_0").mkdir(parents=True)
    for name, value in (("vendor", "0x15b3"), ("class", "0x020000"), ("device", "0xa2d6")):
        (base / name).write_text(value + "\n")
    (base / "infiniband/mlx5_0/board_id").write_text("MT_0000000765\n")
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    sets: list[list[str]] = []

    def mstconfig(argv: list[str]):
        if argv[:5] == ["/usr/bin/mstconfig", "-d", "0000:ca:00.0", "-e", "query"]:
            return 0, fixture.read_text(), ""
        if argv[:5] == ["/usr/bin/mstconfig", "-d", "0000:ca:00.0", "-y", "set"]:
            sets.append(argv)
            return 0, "", ""
        return None

    runner = FakeRunner([mstconfig], which={"mstconfig": "/usr/bin/mstconfig"})
    config = {"psid": "MT_0000000765", "firmware_reset": False,
              "raw": {"HOST_CHAINING_MODE": "DISABLED", "INTERNAL_CPU_MODEL": "SEPARATED_HOST"}}
    for key in ("part_number", "driver", "link_type", "sriov", "ats", "max_read_request", "roce"):
        config.setdefault(key, None)
    params = {"configs": [config], "pci_dir": "/sys/bus/pci/devices", "tool": "auto", "state_file": nc.STATE_FILE,
              "connection_address": None, "root": str(root)}
    result = run(nc.NicConfig, params, Node(runner, str(root), True, True))
    assert result["tool"] == "mstconfig" and result["devices"][0]["part_number"] == "MBF2H512C-AECO_Ax"
    assert states(result) == {"HOST_CHAINING_MODE": "ok", "INTERNAL_CPU_MODEL": "set"}
    assert result["actions"][1]["text"] == "run mstconfig -d 0000:ca:00.0 -y set INTERNAL_CPU_MODEL=SEPARATED_HOST"
    assert result["diff"][0]["before"] == "INTERNAL_CPU_MODEL = EMBEDDED_CPU(1)\n"
    assert any("in DPU mode" in w and "power cycle" in w for w in result["warnings"])
    assert sets == []  # check mode
