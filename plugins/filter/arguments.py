# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter capability_args: a capability module's arguments from the host's plan and its role variables.

The work is in plugins/plugin_utils/capabilities.py, which the datapath_apply action uses too.
Documentation: capability_args.yml next to this file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import capabilities


def capability_args(plan: Any, name: str, values: Any = None, variables: Any = None) -> dict[str, Any] | None:
    """The arguments of capability ``name``'s module, or None when the plan holds nothing for it.

    ``plan`` None means the host has no plan at all (no ``datapath_plan``, no cluster spec
    ``datapath``): then the role's variables must say what to apply, or this fails saying how,
    instead of the role's task being skipped as if there were nothing to do."""
    no_plan = plan is None
    if no_plan:
        plan = {}
    if not isinstance(plan, Mapping):
        raise AnsibleFilterError(f"capability_args: input must be the host's plan (datapath_plan), got {plan!r}")
    for label, given in (("values", values), ("variables", variables)):
        if given is not None and not isinstance(given, Mapping):
            raise AnsibleFilterError(f"capability_args: {label} must be a mapping, got {given!r}")
    try:
        args = capabilities.capability_args(str(name), plan, values, variables)
    except ValueError as exc:
        raise AnsibleFilterError(f"capability_args: {exc}") from None
    if args is None and no_plan:
        cap = capabilities.capability(str(name))
        names = ", ".join(cap.var(knob) for knob in cap.knobs if knob.variable)
        raise AnsibleFilterError(
            f"role aiinfra.datapath.{cap.name} has nothing to apply on this host: it has no plan. Define "
            f"the cluster spec `datapath` for it (usually inventories/<env>/group_vars/all/datapath.yml; "
            f"the role then computes the host's plan itself), or set datapath_plan "
            f"(aiinfra.datapath.node_plan), or set the role's variables ({names})")
    return args


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"capability_args": capability_args}
