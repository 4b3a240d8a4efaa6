"""`datapath validate --format sarif`, validated against the official SARIF 2.1.0 JSON Schema.

The schema (tests/interop/schemas/sarif-schema-2.1.0.json, OASIS errata 01, JSON Schema draft-04;
its source is named in tests/interop/schemas/README.md) is read by the jsonschema library's draft-04
validator, as code-scanning uploaders check a log. Cases: a valid spec, errors with file and line,
node errors, warnings (and --strict), skipped hosts, unusable input, hostile text.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import cli
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.errors import SpecError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.sarif import sarif
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.spec_warnings import SpecWarning

from .spec_common import EXAMPLE, REPO, run, tool

pytestmark = pytest.mark.interop
SARIF_SCHEMA = os.path.join(REPO, "tests", "interop", "schemas", "sarif-schema-2.1.0.json")
HOSTILE = "x\x00\x01\x1b[31m\x7f é <&>\"'\n"


@functools.cache
def validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is installed by scripts/bootstrap.sh")
    with open(SARIF_SCHEMA, encoding="utf-8") as handle:
        schema = json.load(handle)
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def valid(text: str, what: str) -> dict[str, Any]:
    log = json.loads(text)
    problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(log)]
    assert not problems, (what, problems[:5])
    return dict(log)


def test_the_schema_rejects_what_it_should() -> None:
    good = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [
        {"message": {"text": "m"}, "level": "warning"}]}]}
    assert not list(validator().iter_errors(good))
    for bad in ({"version": "2.0.0", "runs": []}, {"version": "2.1.0"},
                {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [
                    {"message": {"text": "m"}, "level": "fatal"}]}]}):
        assert list(validator().iter_errors(bad)), bad


def test_datapath_validate_sarif(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.ini").write_text("[train]\nt1 datapath_memory_bytes=1073741824\n[infer]\ni1\n")
    (inv / "group_vars" / "all" / "datapath.yml").write_text(
        "datapath:\n  version: 1\n  fabrics:\n    - {name: rail0, purpose: rdma, kind: roce, mtu: 99999}\n"
        "  profiles:\n    - name: train\n      hugepages: {pages: [{size: 2M, count: 512}]}\n"
        "    - name: infer\n      sysctl: {vm.swapiness: [1]}\n    - name: gpu_nodes\n")
    cases = [("valid inventory", [EXAMPLE], 0, 0), ("errors, node errors, warnings, skipped", [str(inv)], 1, 5),
             ("--strict", [str(inv), "--strict"], 1, 5), ("missing file", [str(tmp_path / "nope.yml")], 2, 1)]
    for what, argv, code, results in cases:
        proc = run([tool("datapath"), "validate", *argv, "--format", "sarif"], cwd=str(tmp_path))
        assert proc.returncode == code, (what, proc.stderr)
        log = valid(proc.stdout, what)
        found = log["runs"][0]["results"]
        assert len(found) == results, (what, found)
        if results and code == 1:
            levels = {r["ruleId"]: r["level"] for r in found}
            assert levels["profile-matches-no-host"] == ("error" if "--strict" in argv else "warning")
            assert found[0]["locations"][0]["physicalLocation"]["artifactLocation"] == {
                "uri": "inv/group_vars/all/datapath.yml", "uriBaseId": "%SRCROOT%"}


def test_sarif_writer_with_hostile_text() -> None:
    report = cli.Report(HOSTILE, None, [SpecError(HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE, 3)],
                        [SpecWarning(HOSTILE, HOSTILE, HOSTILE, "sysctl-key-unknown", HOSTILE, "/abs/" + HOSTILE, 1)])
    valid(sarif(report), "hostile text")
    valid(sarif(cli.Report(HOSTILE, unusable=HOSTILE)), "hostile unusable")
