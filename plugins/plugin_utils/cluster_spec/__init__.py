"""aiinfra.datapath cluster spec: models, cross-checks, the per-host plan and the JSON Schema.

Controller side only (needs pydantic v2). Imports inside this package are relative, so it works
both as ``ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec`` and as a top-level
package (the ``datapath`` console script installs it as ``aiinfra_datapath_spec``).
"""

from __future__ import annotations

from ._node import derived
from ._pydantic import HAS_PYDANTIC, require_pydantic
from .api import dumps_plan, node_plan, parse_spec, planner, plans, validate_inventory, validate_spec
from .checks import roce_mtu, roce_tos
from .errors import SpecError, SpecValidationError, render_errors
from .models import DatapathSpec
from .plan import Planner, sysctl_scope
from .schema import json_schema

__all__ = [
    "DatapathSpec", "HAS_PYDANTIC", "Planner",
    "derived", "SpecError", "SpecValidationError", "dumps_plan", "json_schema", "node_plan",
    "parse_spec", "planner", "plans", "render_errors", "roce_mtu", "roce_tos", "sysctl_scope",
    "require_pydantic", "validate_inventory", "validate_spec",
]
