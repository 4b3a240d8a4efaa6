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
    """The arguments of capability ``name``'s module, or None when the plan holds nothing for it."""
    if plan is None:
        plan = {}
    if not isinstance(plan, Mapping):
        raise AnsibleFilterError(f"capability_args: input must be the host's plan (datapath_plan), got {plan!r}")
    for label, given in (("values", values), ("variables", variables)):
        if given is not None and not isinstance(given, Mapping):
            raise AnsibleFilterError(f"capability_args: {label} must be a mapping, got {given!r}")
    try:
        return capabilities.capability_args(str(name), plan, values, variables)
    except ValueError as exc:
        raise AnsibleFilterError(f"capability_args: {exc}") from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"capability_args": capability_args}
