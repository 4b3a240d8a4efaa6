# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drift audit (controller side, standard library only): plan vs live facts -> findings -> reports.

``compare()`` turns one host's plan and its ``datapath_facts`` (and, when present, the verify
role's path results) into findings; ``reports()`` renders all hosts' findings as JSON, JUnit
XML and Markdown. docs/audit.md documents both; docs/schema/audit.schema.json is the JSON
report's schema.
"""

from __future__ import annotations

from .compare import (
    CAPABILITIES,
    DEFAULT_RTT_US,
    AuditOptions,
    compare,
    fails,
    is_failure,
    options_from,
)
from .reports import REPORT_FILES, SCHEMA_VERSION, build_report, render_json, render_junit, render_markdown, reports

__all__ = [
    "CAPABILITIES",
    "DEFAULT_RTT_US",
    "REPORT_FILES",
    "SCHEMA_VERSION",
    "AuditOptions",
    "build_report",
    "compare",
    "fails",
    "is_failure",
    "options_from",
    "render_json",
    "render_junit",
    "render_markdown",
    "reports",
]
