"""The netplan cases of link_mtu's persistence (tests/fixtures/interop/net/netplan/CASE).

Each case is a node: ``root/`` holds its netplan files (``etc/``, ``lib/``, ``run/``), and
``case.json`` its devices (``name``, ``mac``, ``pci``/``driver`` for a NIC, ``kind`` for a
virtual device, ``assign`` = ``/sys/class/net/IF/name_assign_type``, ``mtu`` for a device
this run sets) and what link_mtu must write (``expect``). The unit tests plan them with the
backend's own reader of netplan files; tests/interop/test_net_netplan.py plans them with
``netplan get`` and checks the result with ``netplan generate``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import device_facts
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_netplan import OWN
from netfakes import Node, nic

CASES = Path(__file__).resolve().parents[2] / "fixtures" / "interop" / "net" / "netplan"


def names() -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if (p / "case.json").is_file())


def load(name: str) -> dict[str, Any]:
    return json.loads((CASES / name / "case.json").read_text())


def links_of(devices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """An ``ip -j -d link`` table for the case's devices."""
    table = {}
    for dev in devices:
        link = {"ifname": dev["name"], "address": dev["mac"], "link_type": "ether", "mtu": 1500,
                "min_mtu": 68, "max_mtu": 9978}
        if dev.get("kind"):
            link["linkinfo"] = {"info_kind": dev["kind"]}
        if dev.get("master"):
            link["master"] = dev["master"]
        table[dev["name"]] = link
    return table


def build(name: str, root: Path) -> tuple[HostRoot, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Copy the case's files below ``root`` and fake its sysfs; return (host, targets, others, case)."""
    case = load(name)
    shutil.copytree(CASES / name / "root", root, dirs_exist_ok=True)
    node = Node(root)
    for dev in case["devices"]:
        if dev.get("pci"):
            nic(node, dev["name"], pci=dev["pci"], driver=dev.get("driver", "mlx5_core"), hca=None, ecn=False,
                mac=dev["mac"])
        else:
            node.put("/sys/class/net/%s/address" % dev["name"], dev["mac"] + "\n")
        if dev.get("assign"):
            node.put("/sys/class/net/%s/name_assign_type" % dev["name"], dev["assign"] + "\n")
    host = HostRoot(str(root))
    table = links_of(case["devices"])
    targets = [dict(device_facts(host, table, d["name"]), mtu=d["mtu"]) for d in case["devices"] if d.get("mtu")]
    others = [device_facts(host, table, d["name"]) for d in case["devices"] if not d.get("mtu")]
    return host, targets, others, case


def expect(case: dict[str, Any], actions: list[Any], notes: list[str]) -> None:
    """The case's expectation against a plan: the drop-in, the .link files, the notes."""
    want = case["expect"]
    dropin = [a for a in actions if a.target == OWN]
    if want["netplan"] is None:
        assert all(a.after is None for a in dropin), dropin
    else:
        [action] = dropin
        assert json.loads(action.after) == {"network": dict(want["netplan"], version=2)}
        assert action.data["mode"] == 0o600
    links = [a.target for a in actions if a.target.endswith(".link") and a.after is not None]
    assert sorted(links) == sorted(want["links"].values())
    for text in want["notes"]:
        assert any(text in note for note in notes), (text, notes)
