# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The datapath_hosts filter: the host patterns of the collection's playbooks (docs/playbooks.md).

Thin wrapper: the work is in plugins/plugin_utils/host_selection.py. Documentation: datapath_hosts.yml.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible import context
from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import host_selection

_display = Display()


def datapath_hosts(hostvars: Any, groups: Any, old: Any = None, details: bool = False) -> Any:
    """The host patterns of a play (a list), or with ``details`` the whole selection (a dict)."""
    if not isinstance(groups, Mapping):
        raise AnsibleFilterError("datapath_hosts: pass the `groups` magic variable")
    if hostvars is None:
        # A play's hosts are templated before any play has run only under --syntax-check,
        # --list-hosts and --list-tasks: no hostvars yet, so neither the spec nor the inventory's
        # datapath_hosts can be read. No hosts (a syntax check needs none); the listings say why.
        if context.CLIARGS.get("listhosts") or context.CLIARGS.get("listtasks"):
            _display.warning(
                "datapath_hosts: the hosts of this playbook come from the inventory (datapath_hosts, else "
                "every host the cluster spec plans), which ansible-playbook cannot read before a play has "
                "run: run `ansible-playbook -i INVENTORY aiinfra.datapath.hosts` to see them, or pass "
                "-e datapath_hosts=PATTERN")
        return host_selection.Selection([], "unknown", "no play has run yet").as_dict() if details else []
    if not isinstance(hostvars, Mapping):
        raise AnsibleFilterError("datapath_hosts: input must be the `hostvars` magic variable")
    plain_groups = {str(name): [str(h) for h in (members or ())] for name, members in groups.items()}

    def has(host: str) -> bool:
        return host in hostvars and "datapath" in hostvars[host]

    host = host_selection.spec_host(plain_groups, has)
    if host is None:
        host = next(iter(plain_groups.get("all") or ()), None)
    variables = hostvars[host] if host is not None and host in hostvars else {}

    def lookup(name: str) -> Any:
        return variables.get(name) if name in variables else None

    try:
        selection = host_selection.select(lookup, plain_groups, str(old) if old else None, _spec_errors)
    except ValueError as exc:
        raise AnsibleFilterError(f"datapath_hosts: {exc}") from None
    if selection.deprecated:
        _display.deprecated(selection.deprecated, version="1.0.0", collection_name="aiinfra.datapath")
    return selection.as_dict() if details else selection.patterns


def _spec_errors(spec: Any) -> int:
    """How many errors the spec has (0 when pydantic is missing: the playbook's own validation says so)."""
    try:
        from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import api
    except ImportError:
        return 0
    return len(api.validate_spec(spec))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"datapath_hosts": datapath_hosts}
