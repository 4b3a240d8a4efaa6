"""pcie_acs: ACS redirect off on the bridges between GPUs and their nearest NICs and NVMe devices.

The trees are constructed (topofakes.switch_box(): one PCIe switch with a GPU, a NIC and an NVMe
device; labelled constructed) and read by the real node_topology engine; lspci's config-space lines
are constructed the same way (topofakes.switch_lspci()); setpci is answered by a fake that records
each call, as the module calls it on a node.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._pcie_acs import (
    DEFAULT_UNIT_FILE,
    PcieAcs,
    acs_bridges,
    wants_link,
)
from netfakes import FakeRunner
from topofakes import SysRoot, Tree, switch_box, switch_lspci

LSPCI = "/usr/bin/lspci"
SETPCI = "/usr/bin/setpci"
LINK = wants_link(DEFAULT_UNIT_FILE)


@pytest.fixture
def node(tmp_path: Path) -> SysRoot:
    root = tmp_path / "node"
    root.mkdir()
    return SysRoot(root)


class Machine:
    """The constructed switch box whose ACS control setpci changes (the next lspci reads it)."""

    def __init__(self, redirect: bool = True, setpci_rc: int = 0) -> None:
        self.redirect = redirect
        self.setpci_rc = setpci_rc
        self.setpci: list[list[str]] = []

    def answer(self, argv: list[str]):
        if argv == [LSPCI, "-vvv", "-D"]:
            return 0, switch_lspci(acs_redirect=self.redirect), ""
        if argv[0] == SETPCI:
            self.setpci.append(argv)
            if self.setpci_rc:
                return self.setpci_rc, "", "setpci: Capability ACS not found"
            self.redirect = False
            return 0, "", ""
        return None


def pcie_acs(node: SysRoot, machine: Machine, check: bool = False, diff: bool = False,
             which: dict | None = None, **params) -> dict:
    args = {"state": "off", "nvme": False, "runtime": True, "unit_file": DEFAULT_UNIT_FILE,
            "root": str(node.root), **params}
    tools = {"lspci": LSPCI, "setpci": SETPCI} if which is None else which
    return run(PcieAcs, args, Node(FakeRunner([machine.answer], which=tools), str(node.root), check, diff))


def unit_text(node: SysRoot) -> str:
    return (node.root / DEFAULT_UNIT_FILE.lstrip("/")).read_text()


def test_acs_is_cleared_now_and_a_boot_unit_lists_each_bridge_of_the_gpu_nic_path(node) -> None:
    switch_box(node)
    machine = Machine()
    result = pcie_acs(node, machine)
    assert result["changed"] is True and result["supported"] is True, result
    assert [b["pci"] for b in result["bridges"]] == ["0000:17:00.0", "0000:17:01.0"]
    assert all(b["paths"] == ["GPU0-mlx5_0"] and b["redirect"] for b in result["bridges"])
    assert machine.setpci == [[SETPCI, "-s", "0000:17:00.0", "ECAP_ACS+0x6.w=0000"],
                              [SETPCI, "-s", "0000:17:01.0", "ECAP_ACS+0x6.w=0000"]]
    text = unit_text(node)
    assert "ExecStart=/usr/bin/setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000\n" in text
    assert "ExecStart=/usr/bin/setpci -s 0000:17:01.0 ECAP_ACS+0x6.w=0000\n" in text
    assert "# 0000:17:01.0: GPU0-mlx5_0\n" in text and "Before=sysinit.target" in text
    link = node.root / LINK.lstrip("/")
    assert os.readlink(link) == DEFAULT_UNIT_FILE
    assert [a["kind"] for a in result["actions"]] == ["file", "link", "acs", "acs"]


def test_a_second_run_after_acs_went_off_plans_the_same_unit_and_changes_nothing(node) -> None:
    switch_box(node)
    machine = Machine()
    pcie_acs(node, machine)
    before = unit_text(node)
    again = pcie_acs(node, machine)  # lspci now reads ACS off on both bridges
    assert again["changed"] is False and again["actions"] == []
    assert [b["redirect"] for b in again["bridges"]] == [False, False]
    assert unit_text(node) == before and len(machine.setpci) == 2


def test_check_mode_changes_nothing_and_the_diff_shows_the_unit_and_the_bridges(node) -> None:
    switch_box(node)
    machine = Machine()
    result = pcie_acs(node, machine, check=True, diff=True)
    assert result["changed"] is True and machine.setpci == []
    assert not (node.root / DEFAULT_UNIT_FILE.lstrip("/")).exists()
    headers = [d["after_header"] for d in result["diff"]]
    assert headers == [DEFAULT_UNIT_FILE, "ACS redirect"]
    assert "0000:17:00.0 = off" in result["diff"][1]["after"]


def test_runtime_false_writes_only_the_unit(node) -> None:
    switch_box(node)
    machine = Machine()
    result = pcie_acs(node, machine, runtime=False)
    assert [a["kind"] for a in result["actions"]] == ["file", "link"] and machine.setpci == []


def test_an_unreadable_bridge_on_a_path_is_refused_not_guessed(node) -> None:
    switch_box(node)  # the NVMe device's port 0000:17:02.0 is not in the constructed lspci output
    machine = Machine()
    result = pcie_acs(node, machine, nvme=True)
    assert result["failed"] is True and "0000:17:02.0" in result["msg"] and machine.setpci == []
    assert not (node.root / DEFAULT_UNIT_FILE.lstrip("/")).exists()


def test_without_setpci_the_module_says_which_package(node) -> None:
    switch_box(node)
    result = pcie_acs(node, Machine(), which={"lspci": LSPCI})
    assert result["failed"] is True and "pciutils" in result["msg"]


def test_a_failing_setpci_is_reported_with_the_bridge(node) -> None:
    switch_box(node)
    result = pcie_acs(node, Machine(setpci_rc=1))
    assert result["failed"] is True and "0000:17:00.0" in result["msg"] and "Capability ACS not found" in result["msg"]


def test_a_node_without_gpus_is_not_supported_and_a_unit_written_before_is_removed(node) -> None:
    switch_box(node)
    machine = Machine()
    pcie_acs(node, machine)
    lab = SysRoot(node.root.parent / "lab")
    lab.root.mkdir()
    tree = Tree(lab)
    tree.numa_node(0, "0-1")
    tree.function("0000:00:03.0", "pci0000:00", None, "0x020000", vendor="0x1af4")
    tree.virtual_netdev("eth0")
    result = pcie_acs(lab, machine)
    assert result["supported"] is False and result["changed"] is False
    assert result["reason"].startswith("no GPU on this node")
    # the unit moved over from a GPU node (same root layout) goes when the GPUs are gone
    (lab.root / "etc/systemd/system/sysinit.target.wants").mkdir(parents=True)
    (lab.root / DEFAULT_UNIT_FILE.lstrip("/")).write_text(unit_text(node))
    os.symlink(DEFAULT_UNIT_FILE, lab.root / LINK.lstrip("/"))
    cleaned = pcie_acs(lab, machine)
    assert [a["kind"] for a in cleaned["actions"]] == ["file", "link"]
    assert not (lab.root / DEFAULT_UNIT_FILE.lstrip("/")).exists()
    assert not os.path.lexists(lab.root / LINK.lstrip("/"))


def test_state_absent_removes_only_our_unit(node) -> None:
    switch_box(node)
    machine = Machine()
    pcie_acs(node, machine)
    removed = pcie_acs(node, machine, state="absent")
    assert [a["kind"] for a in removed["actions"]] == ["file", "link"]
    foreign = node.root / DEFAULT_UNIT_FILE.lstrip("/")
    foreign.write_text("[Unit]\nDescription=someone else's\n")
    kept = pcie_acs(node, machine, state="absent")
    assert kept["actions"] == [] and foreign.exists()


def test_bridges_follow_the_paths_of_the_nearest_devices_only() -> None:
    topology = {
        "bridges": {"b1": {"pcie": {"known": True, "acs_ctl": {"ReqRedir": True}}},
                    "b2": {"pcie": {"known": True, "acs_ctl": {"ReqRedir": False}}},
                    "b3": {"pcie": {"known": True, "acs_ctl": None}},
                    "b4": {"pcie": {"known": True, "acs_ctl": {"CmpltRedir": True}}}},
        "gpus": [{"index": 0, "nearest_nics": ["mlx5_0"], "nearest_nvme": ["nvme0"],
                  "nics": [{"name": "mlx5_0", "bridges": ["b1", "b2", "b3"], "acs_unknown": []},
                           {"name": "mlx5_1", "bridges": ["b4"], "acs_unknown": []}],
                  "nvme": [{"name": "nvme0", "bridges": ["b2"], "acs_unknown": ["b9"]}]}]}
    bridges, unknown = acs_bridges(topology)
    assert [(b["pci"], b["redirect"], b["paths"]) for b in bridges] == [
        ("b1", True, ["GPU0-mlx5_0"]), ("b2", False, ["GPU0-mlx5_0", "GPU0-nvme0"])]
    assert unknown == ["b9"]
    assert acs_bridges(topology, nvme=False)[1] == []


def test_a_relative_unit_path_is_refused(node) -> None:
    result = pcie_acs(node, Machine(), unit_file="etc/x.service")
    assert result["failed"] is True and "absolute" in result["msg"]
