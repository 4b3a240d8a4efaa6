# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``datapath_metrics``: the arguments of ``aiinfra.datapath.metrics_textfile`` for one host.

Thin wrapper: the catalogue and the families are in plugins/plugin_utils/telemetry.py.
Documentation: datapath_metrics.yml next to this file; every metric: docs/telemetry.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import telemetry as _telemetry
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.plain import plain as _plain


def datapath_metrics(data: Any, source: str) -> dict[str, Any]:
    """``metrics_textfile`` arguments (source, heartbeat, metrics, filesystems) from ``data``."""
    if not isinstance(data, Mapping):
        raise AnsibleFilterError(f"datapath_metrics: the input must be a dict, got {type(data).__name__}")
    plain = _plain(data)
    if source == "measure" and isinstance(plain.get("report"), str):
        try:
            plain["report"] = json.loads(plain["report"])
        except ValueError as exc:
            raise AnsibleFilterError(f"datapath_metrics: report is not measure.json: {exc}") from None
    try:
        return _telemetry.module_args(str(source), plain)
    except ValueError as exc:
        raise AnsibleFilterError(f"datapath_metrics: {exc}") from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"datapath_metrics": datapath_metrics}
