# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host and switch agree (docs/network.md): qos_consistency (the fabrics' RoCE settings against their
switches' recorded state), dcbx_interfaces (what lldp_dcbx listens on), dcbx_findings (what a host heard
from its switch ports against its plan).

Thin wrappers: the work is in plugins/plugin_utils/switch_qos. Documentation: one YAML file per filter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import switch_qos as _sq
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.plain import plain as _plain


def _qos_part(plan: Any) -> list[dict[str, Any]]:
    """The ``roce_qos`` interfaces of a plan (the whole plan, its roce_qos part, or the list)."""
    value = _plain(plan)
    if isinstance(value, Mapping) and "roce_qos" in value:
        value = value["roce_qos"]
    if isinstance(value, Mapping):
        value = value.get("interfaces")
    if value is None:
        return []
    if not isinstance(value, list):
        raise AnsibleFilterError("the input must be the host's plan, its roce_qos part or roce_qos.interfaces")
    return [dict(v) for v in value if isinstance(v, Mapping)]


def qos_consistency(spec: Any, base_dir: Any = None, plans: Any = None) -> dict[str, Any]:
    """``{ok, findings, switches, fabrics}`` of every fabric with ``switch.state``."""
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import SpecValidationError

    try:
        return _sq.qos_consistency(_plain(spec), None if base_dir is None else str(base_dir),
                                   _plain(plans) if isinstance(plans, Mapping) else None)
    except SpecValidationError as exc:
        raise AnsibleFilterError(f"qos_consistency: the spec is not valid:\n{exc}") from None


def dcbx_interfaces(plan: Any, spec: Any) -> list[dict[str, Any]]:
    """The lldp_dcbx ``interfaces`` argument: the plan's RoCE interfaces on fabrics with ``switch.dcbx``."""
    return _sq.dcbx_interfaces(_qos_part(plan), _plain(spec))


def dcbx_findings(plan: Any, host: Any, result: Any) -> list[dict[str, Any]]:
    """Findings of one host: its plan's RoCE interfaces against the lldp_dcbx result (none when skipped)."""
    value = _plain(result) if isinstance(result, Mapping) else None
    if not value or value.get("skipped"):
        return []
    return _sq.dcbx_findings(str(host), _qos_part(plan), value)


class FilterModule:
    """aiinfra.datapath host-and-switch filters."""

    def filters(self) -> dict[str, Any]:
        return {"qos_consistency": qos_consistency, "dcbx_interfaces": dcbx_interfaces,
                "dcbx_findings": dcbx_findings}
