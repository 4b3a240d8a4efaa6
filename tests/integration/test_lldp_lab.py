"""Issue 40, the lab: the switch namespace sends crafted LLDP frames with DCBX TLVs on a node's port
(datapath_lab.lldp: AF_PACKET, bounded, only inside the lab's switch namespace); the node captures one with
the real tcpdump (module lldp_dcbx) and dcbx_findings compares it with the plan. PFC on priority 4 while the
plan says 3 is an error naming the node and its port; willing = 1 is a warning."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import node_plan
from datapath_lab import Lab, LabConfig
from labtools import REPO, VENV_BIN, LabHandle, _lab_possible

pytestmark = pytest.mark.lab

LAB = os.environ.get("DATAPATH_LLDP_LAB", "dp40")
PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "lldp_dcbx.yml")
FABRIC = "rdma"  # the lab's second fabric: its node interface is ens1f0np0
IFNAME = "ens1f0np0"
SPEC: dict[str, Any] = {
    "version": 1,
    "fabrics": [{"name": "rdma", "purpose": "rdma", "kind": "roce", "mtu": 9000, "subnets": ["198.18.0.0/24"],
                 "roce": {"dscp": 26, "priority": 3, "pfc_priorities": [3]},
                 "switch": {"os": "cumulus-nvue", "dcbx": True}}],
    "profiles": [{"name": "all", "interfaces": [{"name": IFNAME, "fabric": "rdma"}]}],
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    handle = Lab(LAB)
    try:
        state = handle.up(LabConfig(name=LAB, nodes=1, nvme_size="64M",
                                    inventory_dir=str(tmp_path_factory.mktemp("lldp-inventory"))),
                          log=lambda *_: None)
        yield LabHandle(handle, state)
    finally:
        handle.down(log=lambda *_: None)


def heard(lab: LabHandle, *sender: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Send frames from the switch port while the node listens; the lldp_dcbx row and the findings."""
    node = lab.nodes[0]
    qos = node_plan(SPEC, node, ["all"])["roce_qos"]["interfaces"]
    argv = ["ip", "netns", "exec", lab.lab.sw(FABRIC), os.path.join(VENV_BIN, "python"), "-m", "datapath_lab.lldp",
            "--ifname", lab.lab.port(node), "--count", "400", "--interval", "0.25", *sender]
    # bounded (at most 400 frames, 100 s), and stopped as soon as the node has listened
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        play = lab.playbook(PLAYBOOK, extra_vars={"lldp_qos": qos, "lldp_spec": SPEC, "lldp_host": node,
                                                  "lldp_timeout": 30})
    finally:
        alive = proc.poll() is None
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert alive, f"the sender ended before the node listened: {err}"
    assert play.rc == 0, play.failures()
    (row,) = play.task_results("Listen for one LLDP frame on each RoCE interface")[node]["interfaces"]
    facts = play.task_results("Compare what the switch advertises with the plan")[node]
    return row, list(facts["ansible_facts"]["lldp_findings"])


def test_pfc_on_priority_4_while_the_plan_says_3(lab: LabHandle) -> None:
    row, findings = heard(lab, "--pfc", "4")
    assert row["heard"] and row["interface"] == IFNAME and row["dcbx"]["pfc"]["enabled"] == [4]
    assert (row["system_name"], row["port_id"]) == ("lab-switch", lab.lab.port(lab.nodes[0]))
    (pfc,) = [f for f in findings if f["check"] == "dcbx-pfc"]
    assert (pfc["severity"], pfc["host"], pfc["wanted"], pfc["actual"]) == ("error", lab.nodes[0], [3], [4])
    assert f"{lab.nodes[0]} {IFNAME} (fabric {FABRIC}; lab-switch port {lab.lab.port(lab.nodes[0])})" in pfc["reason"]
    assert not [f for f in findings if f["check"] == "dcbx-willing"]


def test_willing_is_a_warning(lab: LabHandle) -> None:
    row, findings = heard(lab, "--pfc", "3", "--willing")
    assert row["dcbx"]["pfc"]["willing"] is True
    assert [(f["check"], f["severity"]) for f in findings] == [("dcbx-willing", "warning")]
