"""Issue 38, point 7: the Grafana dashboard and the alert rules, checked as a user importing them would.

The dashboard (docs/grafana/aiinfra-datapath.json) has `cluster` and `job` variables and every query
filters on them, every panel has a unit, `__requires` names Grafana, the data source and every panel
type it uses, and it declares no input it does not use. Every alert of docs/prometheus has a
`runbook_url` into docs/runbooks.md whose anchor exists (GitHub's heading anchors).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docs" / "grafana" / "aiinfra-datapath.json"
RULES = REPO / "docs" / "prometheus" / "aiinfra-datapath.rules.yml"
RUNBOOKS = REPO / "docs" / "runbooks.md"
DOCS_URL = "https://github.com/aiinfra/datapath/blob/main/docs/"


def _dash() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dash()["panels"] if p["type"] != "row"]


def test_cluster_and_job_variables_filter_every_query() -> None:
    variables = {v["name"]: v for v in _dash()["templating"]["list"]}
    for name in ("cluster", "job"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"], name
        assert variables[name]["allValue"] == ".*", name  # series without the label match too
    for panel in _panels():
        for target in panel["targets"]:
            assert 'cluster=~"$cluster"' in target["expr"] and 'job=~"$job"' in target["expr"], panel["title"]
    for name in ("instance", "fabric", "job"):
        assert 'cluster=~"$cluster"' in variables[name]["query"]["query"], name


def test_every_panel_has_a_unit() -> None:
    for panel in _panels():
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        assert unit, panel["title"]
    by_title = {p["title"]: p for p in _panels()}
    overrides = {o["matcher"]["options"]: o["properties"][0]["value"]
                 for o in by_title["Pair retransmit share and p99 latency"]["fieldConfig"]["overrides"]}
    assert overrides == {"retransmit share": "percentunit", "p99 latency": "s"}


def test_requires_and_no_unused_inputs() -> None:
    dash = _dash()
    requires = {(r["type"], r["id"]) for r in dash["__requires"]}
    assert {("grafana", "grafana"), ("datasource", "prometheus")} <= requires
    assert {("panel", p["type"]) for p in _panels()} <= requires
    text = DASHBOARD.read_text()
    for item in dash.get("__inputs", []):
        assert text.count("${" + item["name"] + "}") >= 1, f"input {item['name']} is not used"
    used = set(re.findall(r"\$\{?(\w+)", json.dumps(dash["panels"]) + json.dumps(dash["templating"])))
    defined = {v["name"] for v in dash["templating"]["list"]}
    assert used <= defined | {"__interval", "__range"}, used - defined


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def test_every_alert_links_an_existing_runbook_anchor() -> None:
    anchors = _anchors(RUNBOOKS.read_text())
    alerts = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    assert alerts
    for rule in alerts:
        url = rule["annotations"].get("runbook_url", "")
        page, _sep, anchor = url.removeprefix(DOCS_URL).partition("#")
        assert url.startswith(DOCS_URL) and (REPO / "docs" / page).is_file(), rule["alert"]
        assert anchor in anchors and anchor == rule["alert"].lower(), (rule["alert"], anchor)
