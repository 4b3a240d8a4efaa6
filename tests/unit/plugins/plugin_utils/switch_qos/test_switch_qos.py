"""Issue 40: host and switch agree. The switches' own recorded configuration (verbatim public samples,
tests/fixtures/switch_qos/SOURCES.md names each) against the example spec; what a host hears in LLDP/DCBX
against its plan; the filters the audit role and verify.yml call."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter import host_switch as filters
from ansible_collections.aiinfra.datapath.plugins.module_utils._lldp_dcbx import FrameError, hex_frame, parse_lldp
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import node_plan
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.switch_qos import (
    StateError,
    dcbx_findings,
    dcbx_interfaces,
    load_states,
    qos_consistency,
)
from datapath_lab.lldp import lldp_frame

REPO = Path(__file__).resolve().parents[5]
FIXTURES = REPO / "tests" / "fixtures" / "switch_qos"
EXAMPLE_SPEC = REPO / "inventories" / "example" / "group_vars" / "all" / "datapath.yml"


def example(switch: dict[str, Any] | None = None, fabric: str = "rail0", **roce: Any) -> dict[str, Any]:
    """The example inventory's spec with ``switch`` on one RoCE fabric (the other has none)."""
    spec = copy.deepcopy(yaml.safe_load(EXAMPLE_SPEC.read_text())["datapath"])
    for item in spec["fabrics"]:
        if item["name"] == fabric:
            if switch is not None:
                item["switch"] = switch
            if roce:
                item["roce"] = {**copy.deepcopy(item.get("roce") or {}), **roce}
    return spec


def check(os_name: str, state: str, **roce: Any) -> dict[str, Any]:
    return qos_consistency(example({"os": os_name, "state": state}, **roce), base_dir=str(FIXTURES))


def errors(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in result["findings"] if f["severity"] == "error"]


# --------------------------------------------------------------------------- acceptance: the three fixtures
def test_sonic_default_maps_make_dscp_26_lossy() -> None:
    result = check("sonic", "sonic/default")
    (finding,) = errors(result)
    assert (finding["check"], finding["switch"], finding["fabric"], finding["key"]) == \
        ("switch-dscp-lossy", "leaf01", "rail0", "leaf01:DSCP_TO_TC_MAP|AZURE:dscp26")
    assert "DSCP_TO_TC_MAP|AZURE: DSCP 26 -> TC 1 (lossy)" in finding["reason"]
    assert (finding["wanted"], finding["actual"]) == ("TC 3 (lossless)", "TC 1 (lossy)")
    assert "roce.preset: sonic" in finding["fix"] and "on the switch" in finding["fix"]
    assert not result["ok"] and result["fabrics"] == {"rail0": {"os": "sonic", "switches": ["leaf01"], "errors": 1}}
    # one finding for the map shared by all 44 bound ports, not 44 findings
    assert "44 ports" in finding["reason"]
    # what else SONiC's defaults do differently is a warning, never an error: its CNP queue is DWRR
    assert {f["check"] for f in result["findings"] if f is not finding} <= {"switch-cnp-not-strict"}


def test_nvidia_cumulus_default_gives_no_finding() -> None:
    result = check("cumulus-nvue", "nvue/default")
    assert result["findings"] == [] and result["ok"]
    assert [s["name"] for s in result["switches"]] == ["leaf01"]


def test_pfc_off_on_priority_3_is_a_finding() -> None:
    result = check("sonic", "sonic/pfc-off-3")
    (finding,) = errors(result)
    assert (finding["check"], finding["switch"], finding["key"]) == \
        ("switch-pfc-off", "leaf02", "leaf02:Ethernet0:priority3")
    assert "leaf02 port Ethernet0: PFC is off on priority 3" in finding["reason"]
    assert "PORT_QOS_MAP pfc_enable 4" in finding["reason"]


def test_the_sonic_preset_matches_sonic_defaults() -> None:
    spec = example({"os": "sonic", "state": "sonic/default"})
    rail0 = next(f for f in spec["fabrics"] if f["name"] == "rail0")
    rail0["roce"] = {"preset": "sonic"}
    assert errors(qos_consistency(spec, base_dir=str(FIXTURES))) == []


def test_nvue_per_port_state_and_onyx() -> None:
    assert check("cumulus-nvue", "nvue/swp16")["findings"] == []
    # PFC on priority 3 but DSCP 26 -> priority 4 on the host: the switch does not pause priority 4
    result = check("cumulus-nvue", "nvue/default", priority=4, pfc_priorities=[4])
    assert {f["check"] for f in errors(result)} == {"switch-dscp-priority"}
    onyx = check("onyx", "onyx/sw-onyx01.txt")
    assert onyx["ok"] and [f["check"] for f in onyx["findings"]] == ["switch-not-recorded"]
    assert "Eth1/1" in load_states("onyx", str(FIXTURES / "onyx"))[0]["ports"]


def test_mtu_below_the_hosts() -> None:
    result = check("sonic", "sonic/default", **{})
    assert not [f for f in result["findings"] if f["check"] == "switch-mtu"]  # 9100 >= 9000
    spec = example({"os": "sonic", "state": "sonic/default"})
    next(f for f in spec["fabrics"] if f["name"] == "rail0")["mtu"] = 9200
    mtu = [f for f in qos_consistency(spec, base_dir=str(FIXTURES))["findings"] if f["check"] == "switch-mtu"]
    assert mtu and mtu[0]["wanted"] == 9200 and mtu[0]["actual"] == 9100


# --------------------------------------------------------------------------- state files
def test_a_state_that_cannot_be_read_is_an_error_naming_it(tmp_path: Path) -> None:
    result = qos_consistency(example({"os": "sonic", "state": "missing.json"}), base_dir=str(tmp_path))
    (finding,) = result["findings"]
    assert finding["check"] == "switch-state" and str(tmp_path / "missing.json") in finding["reason"]
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(StateError, match="not JSON"):
        load_states("sonic", "bad.json", str(tmp_path))


def test_a_link_in_the_state_directory_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "leaf09.json").symlink_to(FIXTURES / "sonic" / "default" / "leaf01.json")
    with pytest.raises(StateError, match="symbolic link"):
        load_states("sonic", str(tmp_path / "leaf09.json"))
    state_dir = tmp_path / "dir"
    state_dir.mkdir()
    (state_dir / "leaf09.json").symlink_to(FIXTURES / "sonic" / "default" / "leaf01.json")
    with pytest.raises(StateError, match="holds no switch file"):
        load_states("sonic", str(state_dir))


# --------------------------------------------------------------------------- LLDP / DCBX
def tcpdump_xx(frame: bytes) -> str:
    """``tcpdump -e -nn -xx`` text of one frame (the layout the module parses; the interop test uses tcpdump)."""
    lines = ["00:00:00.000000 44:38:39:00:00:01 > 01:80:c2:00:00:0e, ethertype LLDP (0x88cc), length %d: LLDP"
             % len(frame)]
    for offset in range(0, len(frame), 16):
        chunk = frame[offset:offset + 16].hex()
        lines.append("\t0x%04x:  %s" % (offset, " ".join(chunk[i:i + 4] for i in range(0, len(chunk), 4))))
    return "\n".join(lines) + "\n"


def plan_qos() -> list[dict[str, Any]]:
    plan = node_plan(example({"os": "cumulus-nvue", "dcbx": True}), "gpu-node-01", ["gpu_nodes", "rack_a"])
    return list(plan["roce_qos"]["interfaces"])


def heard(frame: bytes, interface: str = "rail0-if") -> dict[str, Any]:
    row = {"index": 0, "requested": None, "interface": interface, "fabric": "rail0", "heard": True, "reason": None}
    row.update(parse_lldp(hex_frame(tcpdump_xx(frame))))
    return {"interfaces": [row]}


def test_the_frame_decodes() -> None:
    decoded = parse_lldp(hex_frame(tcpdump_xx(lldp_frame(pfc=(4,), pfc_willing=True))))
    assert (decoded["system_name"], decoded["port_id"], decoded["chassis_id"], decoded["ttl"]) == \
        ("leaf01", "swp1", "44:38:39:00:00:01", 120)
    assert decoded["dcbx"]["pfc"] == {"willing": True, "mbc": False, "cap": 8, "enabled": [4]}
    assert decoded["dcbx"]["ets_config"]["prio_tc"] == list(range(8))
    assert decoded["dcbx"]["app_priority"][0]["protocol"] == 4791
    with pytest.raises(FrameError):
        parse_lldp(bytes(14))


def test_pfc_on_priority_4_while_the_plan_says_3_is_reported_on_that_port() -> None:
    qos = plan_qos()
    rails = [q for q in qos if q["fabric"] == "rail0"]
    result = heard(lldp_frame(pfc=(4,)))
    result["interfaces"][0]["interface"] = "ens1f0np0"  # the plan matches by PCI: paired by fabric and order
    found = dcbx_findings("gpu-node-01", rails, result)
    (pfc,) = [f for f in found if f["check"] == "dcbx-pfc"]
    assert (pfc["severity"], pfc["wanted"], pfc["actual"], pfc["host"]) == ("error", [3], [4], "gpu-node-01")
    assert "gpu-node-01 ens1f0np0 (fabric rail0; leaf01 port swp1)" in pfc["reason"]
    assert "does not pause priority 3" in pfc["reason"]
    assert not [f for f in found if f["check"] == "dcbx-willing"]


def test_willing_is_a_warning_and_agreement_is_silent() -> None:
    rails = [q for q in plan_qos() if q["fabric"] == "rail0"]
    found = dcbx_findings("gpu-node-01", rails, heard(lldp_frame(pfc=(3,), pfc_willing=True)))
    assert [(f["check"], f["severity"], f["actual"]) for f in found] == [("dcbx-willing", "warning", 1)]
    assert dcbx_findings("gpu-node-01", rails, heard(lldp_frame(pfc=(3,)))) == []
    app = dcbx_findings("gpu-node-01", rails, heard(lldp_frame(apps=((5, 3, 4791),))))
    assert [(f["check"], f["severity"]) for f in app] == [("dcbx-app", "error")]


def test_nothing_heard_is_info() -> None:
    rails = [q for q in plan_qos() if q["fabric"] == "rail0"]
    silent = {"interfaces": [{"interface": "x", "fabric": "rail0", "heard": False,
                              "reason": "no LLDP frame within 5 s"}]}
    (finding,) = dcbx_findings("gpu-node-01", rails, silent)
    assert (finding["check"], finding["severity"]) == ("dcbx-not-heard", "info")


# --------------------------------------------------------------------------- the filters
def test_filters() -> None:
    spec = example({"os": "cumulus-nvue", "dcbx": True})
    plan = node_plan(spec, "gpu-node-01", ["gpu_nodes", "rack_a"])
    listen = filters.dcbx_interfaces(plan, spec)
    assert listen == dcbx_interfaces(plan["roce_qos"]["interfaces"], spec)
    assert listen and {i["fabric"] for i in listen} == {"rail0"}  # rail1's switch sends no DCBX
    assert filters.dcbx_findings(plan, "gpu-node-01", {"skipped": True, "changed": False}) == []
    result = filters.qos_consistency(example({"os": "sonic", "state": "sonic/default"}), str(FIXTURES))
    assert [f["check"] for f in errors(result)] == ["switch-dscp-lossy"]
    with pytest.raises(AnsibleFilterError, match="not valid"):
        filters.qos_consistency({"version": 1, "fabrics": "x"})
    with pytest.raises(AnsibleFilterError):
        filters.dcbx_interfaces("not a plan", spec)


def test_fixture_sources_are_named() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text()
    for root, _dirs, files in os.walk(FIXTURES):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), FIXTURES)
            assert name == "SOURCES.md" or f"`{rel}`" in sources, f"{rel}: name its source in SOURCES.md"
