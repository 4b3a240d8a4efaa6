# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the cluster spec: validate, node_plan, plan_summary, roce_tos, roce_mtu.

Thin wrappers: the work is in plugins/plugin_utils/cluster_spec (controller side, needs pydantic v2).
Documentation: one YAML file per filter next to this file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils import cluster_spec as _spec
except ImportError as exc:  # pydantic missing: say so when a filter is used, not at import
    _spec = None
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def _api() -> Any:
    if _spec is None:
        raise AnsibleFilterError(
            "aiinfra.datapath filters: install pydantic on the controller "
            f"(python3 -m pip install 'pydantic>=2,<3'): {_IMPORT_ERROR}"
        )
    try:
        _spec.require_pydantic()
    except ImportError as exc:  # MissingPydantic: the spec package imported with its stand-ins
        raise AnsibleFilterError(f"aiinfra.datapath filters: {exc}") from None
    return _spec


def _fail(exc: Exception) -> AnsibleFilterError:
    errors = getattr(exc, "errors", None) or []
    lines = "\n".join(f"  - {e.render()}" for e in errors) or str(exc)
    return AnsibleFilterError(f"aiinfra.datapath spec has {len(errors) or 1} error(s):\n{lines}")


def validate(data: Any, hosts: Any = None) -> Any:
    """Return ``data`` unchanged when it is a valid spec; raise with every error otherwise."""
    api = _api()
    if hosts is not None:
        if not isinstance(hosts, Mapping):
            raise AnsibleFilterError("validate: hosts must be a mapping {host: {groups: [...], vars: {...}}}")
        inventory = {str(h): (list((v or {}).get("groups", [])), dict((v or {}).get("vars", {})))
                     for h, v in hosts.items()}
        errors = api.validate_inventory(data, inventory)
    else:
        errors = api.validate_spec(data)
    if errors:
        raise _fail(api.SpecValidationError(errors))
    return data


def node_plan(data: Any, host: str, groups: Any = None, facts: Any = None) -> dict[str, Any]:
    """The per-host plan (docs/plan.md)."""
    api = _api()
    try:
        return dict(api.node_plan(data, str(host), list(groups or []), facts if isinstance(facts, Mapping) else None))
    except api.SpecValidationError as exc:
        raise _fail(exc) from None


def plan_summary(data: Any, groups: Any, hostvars: Any = None) -> dict[str, Any]:
    """Per inventory group: how many hosts and what their plans do."""
    api = _api()
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.summary import group_summary

    if not isinstance(groups, Mapping):
        raise AnsibleFilterError("plan_summary: pass the `groups` magic variable")
    try:
        return group_summary(api.planner(data), groups, hostvars if isinstance(hostvars, Mapping) else None)
    except api.SpecValidationError as exc:
        raise _fail(exc) from None


def _int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool):
        raise AnsibleFilterError(f"{name} must be an integer {low}-{high}, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{name} must be an integer {low}-{high}, got {value!r}") from None
    if not low <= number <= high:
        raise AnsibleFilterError(f"{name} must be an integer {low}-{high}, got {value!r}")
    return number


def roce_tos(dscp: Any, ecn: bool = True) -> int:
    """rdma_cm ToS from a DSCP: DSCP<<2, plus ECT(0) when ecn (26 -> 106)."""
    return int(_api().roce_tos(_int(dscp, "dscp", 0, 63), bool(ecn)))


def roce_mtu(mtu: Any) -> int | None:
    """Active RoCE MTU for a netdev MTU: largest of 4096/2048/1024/512/256 fitting MTU - 96; none below 352."""
    derived = _api().derived
    value = derived.roce_mtu(_int(mtu, "mtu", derived.MTU_MIN, derived.MTU_MAX))
    return None if value is None else int(value)


def controller_path(path: Any) -> str:
    """An absolute path on the controller: as given when absolute, else relative to the directory
    ansible-playbook was started in (modules on the controller run in the playbook's directory, so a
    relative report directory would otherwise land below playbooks/)."""
    if not isinstance(path, str) or not path:
        raise AnsibleFilterError(f"controller_path: expected a non-empty path string, got {path!r}")
    return os.path.normpath(os.path.abspath(os.path.expanduser(path)))


class FilterModule:
    """aiinfra.datapath spec filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "validate": validate,
            "node_plan": node_plan,
            "plan_summary": plan_summary,
            "roce_tos": roce_tos,
            "roce_mtu": roce_mtu,
            "controller_path": controller_path,
        }
