"""An MTU asked for on a bond member (issue 45), read by netplan itself.

The node is the case ``bond-vlan`` of tests/fixtures/interop/net/netplan: netplan defines bond0
(802.3ad over ens2f0np0 and ens2f1np1) and a VLAN on it. ``link_mtu`` plans through its own
capability (``_capability.run``: the same resolution, member rule and backend as on a node), its
``netplan get`` answered by netplan, its ``ip -j -d link`` by the case's link table; the files it
writes are then rendered by ``netplan generate`` and compared with what netplan generated before:

- the member alone: refused before anything is written, so netplan's output is exactly as it was;
- the member with its bond at the same MTU: only the bond's MTU lines differ (its .netdev and
  .network); each member's generated files are exactly as they were, MTU lines included.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.module_utils import _link_mtu
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node as CapNode
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import run as run_capability

from .net_common import netcases, netfakes, run, tool
from .test_net_netplan import generate, mtu_lines, node_before, without_mtu

pytestmark = pytest.mark.interop

IP = "/usr/sbin/ip"


@pytest.fixture(scope="module")
def netplan() -> str:
    return tool("netplan")


def plan_and_apply(netplan: str, root: Path, interfaces: list[dict]) -> dict:
    """link_mtu on the case's node below ``root`` (persist: netplan): its result."""
    node_before("bond-vlan", root)
    for path in root.rglob("*.yaml"):
        path.chmod(0o600)
    case = netcases.load("bond-vlan")
    table = netcases.links_of(case["devices"])
    ip = netfakes.FakeIp(list(table.values()))

    def real_netplan(argv: list[str]) -> tuple[int, str, str] | None:
        if argv[0] != netplan:
            return None
        done = run(argv)
        return done.returncode, done.stdout, done.stderr

    runner = netfakes.FakeRunner([ip, real_netplan], which={"ip": IP, "netplan": netplan})
    params = dict(interfaces=interfaces, persist="netplan", root=str(root))
    checked = ArgumentSpecValidator(**_link_mtu.LinkMtu.module_spec()).validate(params)
    assert not checked.error_messages, checked.error_messages
    result = run_capability(_link_mtu.LinkMtu, checked.validated_parameters, CapNode(runner, str(root), False, False))
    result["_sets"] = ip.sets
    return result


def test_an_mtu_on_a_bond_member_alone_leaves_netplans_output_as_it_was(tmp_path: Path, netplan: str) -> None:
    node_before("bond-vlan", tmp_path / "before")
    before = generate(netplan, tmp_path / "before")
    result = plan_and_apply(netplan, tmp_path / "after", [{"name": "ens2f0np0", "fabric": "storage", "mtu": 9000}])
    assert result.get("failed") and "set it on bond0: its members follow it" in result["msg"]
    assert result["_sets"] == []
    assert generate(netplan, tmp_path / "after") == before


def test_a_member_with_its_bond_changes_only_the_bonds_mtu_lines(tmp_path: Path, netplan: str) -> None:
    node_before("bond-vlan", tmp_path / "before")
    before = generate(netplan, tmp_path / "before")
    result = plan_and_apply(netplan, tmp_path / "after", [{"name": "bond0", "fabric": "storage", "mtu": 9000},
                                                          {"name": "ens2f0np0", "fabric": "storage", "mtu": 9000}])
    assert not result.get("failed"), result.get("msg")
    assert result["_sets"] == [("bond0", 9000)]
    after = generate(netplan, tmp_path / "after")
    assert sorted(after) == sorted(before)
    changed = sorted(rel for rel in before if before[rel] != after[rel])
    assert changed == ["run/systemd/network/10-netplan-bond0.netdev", "run/systemd/network/10-netplan-bond0.network"]
    for rel in changed:
        assert without_mtu(before[rel]) == without_mtu(after[rel]), rel
        assert mtu_lines({rel: after[rel]})[rel] == ["MTUBytes=9000"], rel
    # each member's own files: the same bytes, MTU lines included (they take bond0's at enslave)
    members = [rel for rel in before if "ens2f0np0" in rel or "ens2f1np1" in rel]
    assert members and all(before[rel] == after[rel] for rel in members)
    assert "Bond=bond0" in after["run/systemd/network/10-netplan-ens2f0np0.network"]
    shutil.rmtree(tmp_path / "before")
