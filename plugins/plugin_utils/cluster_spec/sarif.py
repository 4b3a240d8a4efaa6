"""``datapath validate --format sarif``: the report as SARIF 2.1.0, for code-scanning tools.

One run of the tool ``datapath validate``; one result per error (level ``error``) and per warning
(level ``warning``), each located in the file and line it came from (paths relative to the working
directory, under ``%SRCROOT%``, as GitHub code scanning resolves them against the repository; the
validated target where no file is known). Rules: ``spec-error`` (the spec itself), ``node-error``
(a host's merged settings), ``unusable-input`` (exit 2), and one per warning check. Validated against
the official SARIF 2.1.0 schema in tests/interop/test_spec_sarif.py.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .spec_warnings import WARNING_CHECKS

if TYPE_CHECKING:
    from .cli import Report

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
DOCS = "https://github.com/aiinfra/datapath/blob/main/docs/pipelines.md"
ERROR_RULES = {
    "spec-error": "The cluster spec is invalid: a key, a value or a cross-check (docs/spec.md).",
    "node-error": "A host's merged settings are invalid (its profiles and host override together).",
    "unusable-input": "The input cannot be read: a missing file, broken YAML, an inventory ansible-core cannot read.",
}


def _uri(path: str) -> dict[str, str]:
    absolute = os.path.abspath(path)
    cwd = os.getcwd()
    if absolute == cwd or absolute.startswith(cwd.rstrip(os.sep) + os.sep):
        rel = os.path.relpath(absolute, cwd).replace(os.sep, "/")
        return {"uri": quote(rel), "uriBaseId": "%SRCROOT%"}
    return {"uri": "file://" + quote(absolute)}


def _location(file: str, line: int | None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": _uri(file)}
    if line:
        physical["region"] = {"startLine": int(line)}
    return {"physicalLocation": physical}


def _rules() -> list[dict[str, Any]]:
    rules = [{"id": rule, "name": rule, "shortDescription": {"text": text}, "helpUri": DOCS,
              "defaultConfiguration": {"level": "error"}} for rule, text in ERROR_RULES.items()]
    for check in WARNING_CHECKS.values():
        rules.append({"id": check.name, "name": check.name, "shortDescription": {"text": check.doc or check.name},
                      "helpUri": DOCS + "#warnings", "defaultConfiguration": {"level": "warning"}})
    return rules


def sarif(report: Report) -> str:
    rules = _rules()
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results: list[dict[str, Any]] = []

    def result(rule: str, level: str, text: str, file: str | None, line: int | None,
               properties: dict[str, Any]) -> None:
        results.append({"ruleId": rule, "ruleIndex": index[rule], "level": level, "message": {"text": text},
                        "locations": [_location(file or report.target, line if file else None)],
                        "properties": {k: v for k, v in properties.items() if v is not None}})

    if report.unusable is not None:
        result("unusable-input", "error", report.unusable, None, None, {})
    for err in report.errors:
        text = f"{err.path}: {err.message}" + (f" (host {err.host})" if err.host else "") + \
            (f". Fix: {err.hint}" if err.hint else "")
        result("node-error" if err.host else "spec-error", "error", text, err.file, err.line,
               {"path": err.path, "host": err.host, "fix": err.hint or None})
    for warning in report.warnings:
        rule = warning.check if warning.check in index else "spec-error"
        text = f"{warning.path}: {warning.message}" + (f" (host {warning.host})" if warning.host else "") + \
            (f". Fix: {warning.fix}" if warning.fix else "")
        result(rule, "error" if report.strict else "warning", text, warning.file, warning.line,
               {"path": warning.path, "host": warning.host, "fix": warning.fix or None})
    invocation: dict[str, Any] = {"executionSuccessful": report.unusable is None, "exitCode": report.code}
    if report.unusable is not None:
        invocation["toolExecutionNotifications"] = [{"level": "error", "message": {"text": report.unusable}}]
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "datapath validate", "informationUri": DOCS, "rules": rules}},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": "file://" + quote(os.getcwd().rstrip("/") + "/")}},
            "invocations": [invocation],
            "results": results,
        }],
    }
    return json.dumps(log, indent=2, sort_keys=True) + "\n"
