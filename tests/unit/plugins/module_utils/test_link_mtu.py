"""The link_mtu backend alone: resolution, ordering, actions, read-back and the lockout guard."""

from __future__ import annotations

import json
import socket

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.module_utils import _link_mtu
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node as CapNode
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import run
from ansible_collections.aiinfra.datapath.plugins.module_utils._derived import MTU_MAX, MTU_MIN
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import device_facts, parse_link_json
from netfakes import FakeIp, FakeRunner, Node, fixture, nic

IP = "/usr/sbin/ip"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    node = Node(tmp_path)
    nic(node, "ens1f0np0", pci="0000:e6:00.0")
    nic(node, "ens2f0np0", pci="0000:e7:00.0", mac="b8:3f:d2:00:00:02")
    nic(node, "ens2f1np1", pci="0000:e7:00.1", mac="b8:3f:d2:00:00:03")
    nic(node, "eth0", pci="0000:00:03.0", driver="virtio_net", hca=None, ecn=False)
    return node


def links():
    return json.loads(fixture("iplink/node-links.json"))


def capability(tree, ip, check_mode=False, diff=False, **args):
    """Run LinkMtu through the contract's runner (no AnsibleModule): its result dict."""
    args.setdefault("persist", "none")
    checked = ArgumentSpecValidator(**_link_mtu.LinkMtu.module_spec()).validate(dict(args, root=str(tree.root)))
    assert not checked.error_messages, checked.error_messages
    runner = FakeRunner([ip], which={"ip": IP})
    return run(_link_mtu.LinkMtu, checked.validated_parameters, CapNode(runner, str(tree.root), check_mode, diff))


def test_resolve_names_every_problem(tree):
    table = parse_link_json(fixture("iplink/node-links.json"))
    host = HostRoot(str(tree.root))
    items = [{"name": "ens1f0np0", "mtu": MTU_MAX + 284, "fabric": "rail0"},
             {"name": None, "match": None, "mtu": 9000},
             {"name": "ens2f0np0", "match": {"pci": "0000:e6:00.0"}, "mtu": 9000},
             {"name": "ens1f0np0", "mtu": 9000},
             {"match": {"pci": "0000:e6:00.0"}, "mtu": 4200},
             {"match": {"driver": "mlx5_core"}, "mtu": 9000}]
    targets, rows, errors = _link_mtu.resolve(items, table, host)
    assert errors == [
        "interfaces[0] (fabric rail0): mtu 9500 is outside %d-%d (the spec's range; the device may allow more)"
        % (MTU_MIN, MTU_MAX),
        "interfaces[1]: give name or match {name|mac|pci|driver}",
        "interfaces[2]: pci=0000:e6:00.0 selects ens1f0np0, but name says ens2f0np0",
        "interfaces[4]: ens1f0np0 already gets MTU 9000 from another entry, not 4200",
    ]
    assert targets == {"ens1f0np0": 9000, "ens2f0np0": 9000, "ens2f1np1": 9000}
    assert [(r["name"], r["index"]) for r in rows] == [("ens1f0np0", 3), ("ens1f0np0", 5), ("ens2f0np0", 5),
                                                       ("ens2f1np1", 5)]


def test_live_order_lowers_top_down_raises_bottom_up():
    table = parse_link_json(fixture("iplink/node-links.json"))
    rows = [{"name": "ens1f0np0", "mtu_before": 9000, "mtu": 1500, "changed": True},
            {"name": "ens1f0np0.100", "mtu_before": 9000, "mtu": 1500, "changed": True},
            {"name": "bond0", "mtu_before": 1500, "mtu": 9000, "changed": True},
            {"name": "eth0", "mtu_before": 1500, "mtu": 9000, "changed": True},
            {"name": "v0", "mtu_before": 1500, "mtu": 1500, "changed": False}]
    assert [r["name"] for r in _link_mtu.live_order(rows, table)] == ["ens1f0np0.100", "ens1f0np0", "eth0", "bond0"]


def test_actions_and_diff_from_the_backend(tree):
    ip = FakeIp(links())
    result = capability(tree, ip, check_mode=True, diff=True,
                        interfaces=[{"name": "ens1f0np0.100", "mtu": 9000}, {"name": "ens1f0np0", "mtu": 9000}])
    assert result["actions"] == [
        {"kind": "mtu", "target": "ens1f0np0", "before": 1500, "after": 9000, "destructive": False,
         "reboot": False, "text": "ip link set dev ens1f0np0 mtu 9000"},
        {"kind": "mtu", "target": "ens1f0np0.100", "before": 1500, "after": 9000, "destructive": False,
         "reboot": False, "text": "ip link set dev ens1f0np0.100 mtu 9000"}]
    assert result["diff"] == [{"before_header": "live MTU", "after_header": "live MTU",
                               "before": "ens1f0np0 = 1500\nens1f0np0.100 = 1500\n",
                               "after": "ens1f0np0 = 9000\nens1f0np0.100 = 9000\n"}]
    assert result["persist"] == {"backend": "none", "detected": {}, "changes": [], "notes": []}
    assert ip.sets == []


def test_nothing_to_do_shows_no_diff(tree):
    result = capability(tree, FakeIp(links()), diff=True, interfaces=[{"name": "ens1f0np0", "mtu": 1500}])
    assert result["changed"] is False and result["actions"] == [] and "diff" not in result
    assert "verified" not in result


def test_read_back_differs(tree):
    class Ignoring(FakeIp):
        def __call__(self, argv):
            if argv[1:3] == ["link", "set"]:
                return 0, "", ""  # accepted, not applied
            return super().__call__(argv)

    result = capability(tree, Ignoring(links()), interfaces=[{"name": "ens1f0np0", "mtu": 9000}])
    assert result["failed"] is True
    assert result["msg"] == "MTU read back differs: ens1f0np0 is 1500, expected 9000"
    assert result["interfaces"][0]["mtu"] == 9000 and result["actions"][0]["kind"] == "mtu"


def test_revert_that_fails_is_named(tree):
    class Sticky(FakeIp):
        def __call__(self, argv):
            if argv[1:5] == ["link", "set", "dev", "ens1f0np0"] and argv[-1] == "1500":
                return 2, "", "Error: device busy"
            return super().__call__(argv)

    ip = Sticky(links(), refuse={"v0": "Error: mtu greater than device maximum."})
    result = capability(tree, ip, interfaces=[{"name": "ens1f0np0", "mtu": 9000}, {"name": "v0", "mtu": 9000}])
    assert "applying MTU failed" in result["msg"] and "ens1f0np0 (revert FAILED)" in result["msg"]


def test_guard_warns_when_it_cannot_see_the_connection(tree, monkeypatch):
    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    ip = FakeIp(links(), addr=fixture("iplink/addr.json"))
    result = capability(tree, ip, check_mode=True, connection_address="gpu-node-01",
                        interfaces=[{"name": "ens1f0np0", "mtu": 9000}])
    assert result["connection_interfaces"] == []
    assert any("connection_address gpu-node-01 does not resolve" in w for w in result["warnings"])
    assert any("the lockout guard cannot protect it" in w for w in result["warnings"])


def test_verify_after_needs_ping(tree):
    result = capability(tree, FakeIp(links()), check_mode=True, verify_after=["198.18.0.1"],
                        interfaces=[{"name": "ens1f0np0", "mtu": 9000}])
    assert result["failed"] is True
    assert result["msg"] == "verify_after needs ping on the node; none found, nothing changed"


def test_ip_failure_is_a_capability_error(tree):
    def broken(argv):
        return 255, "", "Cannot open netlink socket"

    result = capability(tree, broken, interfaces=[{"name": "ens1f0np0", "mtu": 9000}])
    assert result == {"failed": True, "changed": False,
                      "msg": "'ip -j -d link show' failed: Cannot open netlink socket"}


@pytest.mark.parametrize("mtu, limits, text", [
    (9216, (68, 9000, "device"), "interfaces[0]: MTU 9216 for ens2f1np1 is outside 68-9000, the range the device "
                                 "accepts (its max_mtu in 'ip -d link'; the spec allows up to %d); lower the plan's "
                                 "MTU for this fabric" % MTU_MAX),
    (60, (68, 9000, "device"), "interfaces[0]: MTU 60 for ens2f1np1 is below 68, the smallest MTU the device "
                               "accepts (its min_mtu); raise the plan's MTU for this fabric"),
    (9000, (68, 1500, "MTU of parent ens1f0np0"), "interfaces[0]: MTU 9000 for ens2f1np1 is above 1500, the MTU of "
                                                  "parent ens1f0np0 (a VLAN cannot exceed it); raise the parent's "
                                                  "MTU in the plan too, or lower this one"),
    (9216, (68, 9000, "max MTU of bond slave x"), "interfaces[0]: MTU 9216 for ens2f1np1 is above 9000, the max MTU "
                                                  "of bond slave x; lower the plan's MTU for this fabric"),
    (9000, (68, 9000, "device"), None),
    (9000, (68, None, "device"), None),
])
def test_limit_problem_names_whose_limit_it_is(mtu, limits, text):
    """Issue point 11: the spec's range (68-9216) and a device's own limit are worded apart."""
    assert _link_mtu.limit_problem("interfaces[0]", "ens2f1np1", mtu, *limits) == text


def test_device_facts_for_persistence(tree):
    """What the persistence backends match a device by: sysfs plus the link table."""
    host = HostRoot(str(tree.root))
    table = parse_link_json(fixture("iplink/node-links.json"))
    tree.put("/sys/class/net/ens1f0np0/name_assign_type", "4\n")
    tree.put("/sys/class/net/v0/name_assign_type", "3\n")
    tree.put("/sys/class/net/v0/uevent", "INTERFACE=v0\nIFINDEX=9\n")
    rail = device_facts(host, table, "ens1f0np0")
    assert rail == {"name": "ens1f0np0", "kind": "physical", "bus": "0000:e6:00.0", "mac": "b8:3f:d2:00:00:01",
                    "altnames": [], "renamed": True, "devkind": None, "driver": "mlx5_core",
                    "permaddr": "b8:3f:d2:00:00:01", "id_bus": "pci", "path": "pci-0000:e6:00.0", "type": "ether"}
    veth = device_facts(host, table, "v0")
    assert veth == {"name": "v0", "kind": "veth", "bus": None, "mac": "fe:5f:50:50:bc:f6", "altnames": [],
                    "renamed": False, "devkind": "veth", "path": None, "id_bus": None, "permaddr": None,
                    "driver": "veth", "type": "ether", "original_name": "v0"}
    bond = device_facts(host, table, "bond0")       # no uevent, no name_assign_type: unknown original name
    assert (bond["type"], bond["driver"], "original_name" in bond) == ("bond", "bonding", False)
