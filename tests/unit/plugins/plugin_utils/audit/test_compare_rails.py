"""The audit of the plan's rails (audit/rails.py) against datapath_facts' routing section, whose rules and
tables are the recorded ones of a lab node (tests/fixtures/network/rails/README.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ansible_collections.aiinfra.datapath.plugins.module_utils._rail_routing import TABLE_NAMES, table_id
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.audit.compare import compare

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "network" / "rails"
NICS = ["ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0"]
ADDRS = ["198.18.1.11", "198.18.1.15", "198.18.1.19", "198.18.1.23"]


def plan() -> dict[str, Any]:
    rails = [{"fabric": "rdma", "rail": r, "name": f"rail{r}", "interface": NICS[r], "match": {"name": NICS[r]},
              "address": None, "subnets": ["198.18.1.0/24"], "subnet": "198.18.1.0/24", "routes": [],
              "table": 3100 + r, "priority": 3100 + r} for r in range(4)]
    return {"host": "node1", "rail_routing": {"arp_ignore": 1, "arp_announce": 2, "rp_filter": 2,
                                              "table_range": [3100, 3115], "rails": rails}}


def facts() -> dict[str, Any]:
    """The routing section as _rail_facts builds it from the recorded node1."""
    rules = [dict(r, table_id=table_id(r.get("table"), TABLE_NAMES), family="-4")
             for r in json.loads((FIXTURES / "node1-rules.json").read_text())]
    tables: dict[str, list[dict[str, Any]]] = {}
    for route in json.loads((FIXTURES / "node1-routes.json").read_text()):
        number = table_id(route.get("table"), TABLE_NAMES)
        if number not in (253, 254, 255) and route.get("type") is None:
            tables.setdefault(str(number), []).append({k: route[k] for k in ("dst", "dev", "scope") if k in route})
    sysctl = {n: {"arp_ignore": "1", "arp_announce": "2", "rp_filter": "2"} for n in NICS}
    return {"interfaces": {n: {"mtu": 9000} for n in ["eno1", *NICS]},
            "routing": {"rules": rules, "tables": tables, "sysctl": sysctl,
                        "addresses": {n: [f"{a}/24"] for n, a in zip(NICS, ADDRS, strict=True)}}}


def rail_findings(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f["check"], f["key"]) for f in found if f["capability"] == "rail_routing"]


def test_the_recorded_node_after_rail_routing_has_no_drift() -> None:
    assert rail_findings(compare(plan(), facts())) == []


def test_each_missing_piece_is_drift_naming_fabric_rail_and_interface() -> None:
    live = facts()
    live["routing"]["rules"] = [r for r in live["routing"]["rules"] if r["priority"] != 3101]
    live["routing"]["tables"]["3102"] = []
    live["routing"]["sysctl"]["ens4f0np0"]["arp_ignore"] = "0"
    live["routing"]["addresses"]["ens1f0np0"] = []
    found = compare(plan(), live)
    assert rail_findings(found) == [("rail-address", "rdma rail0 ens1f0np0"), ("rail-rule", "rdma rail1 ens2f0np0"),
                                    ("rail-table", "rdma rail2 ens3f0np0"),
                                    ("rail-sysctl", "rdma rail3 ens4f0np0 arp_ignore")]
    rule = next(f for f in found if f["check"] == "rail-rule")
    assert rule["kind"] == "drift" and "no rule 'from 198.18.1.15 lookup 3101' at priority 3101" in rule["reason"]
    other = copy.deepcopy(plan())
    other["rail_routing"]["rails"][0]["interface"] = "ens9f0np0"
    other["rail_routing"]["rails"][0]["match"] = {"name": "ens9f0np0"}
    assert rail_findings(compare(other, facts()))[0] == ("rail-interface", "rdma rail0")
