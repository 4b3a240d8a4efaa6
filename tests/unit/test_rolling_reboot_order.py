"""playbooks/rolling_reboot.yml: the reboot batches follow the order of the hosts, not the order in
which group_by's results arrived (the order of the group it fills). The host pattern of the play
that reboots is read, templated and resolved by ansible itself (DataLoader, as ansible-playbook
loads a playbook; Templar; InventoryManager), against a group filled out of order."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible.utils.collection_loader import AnsibleCollectionConfig

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "rolling_reboot.yml"
NODES = ["node1", "node2", "node3", "node4", "node5"]
ARRIVED = ["node4", "node1", "node3", "node2"]  # group_by's results, in the order they came back


def reboot_order(tmp_path: Path, extra_vars: dict[str, str]) -> list[str]:
    """The hosts of the play that reboots, in the order its batches take them."""
    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()  # as ansible-playbook does at start: the collection's filters are found
    inventory_file = tmp_path / "hosts.ini"
    inventory_file.write_text("[gpu_nodes]\n" + "\n".join(NODES) + "\n")
    loader = DataLoader()
    plays = loader.load_from_file(str(PLAYBOOK), trusted_as_template=True)
    [play] = [p for p in plays if p["name"] == "Reboot in batches and verify"]
    inventory = InventoryManager(loader, sources=[str(inventory_file)])
    inventory.add_group("datapath_reboot_needed")
    for host in ARRIVED:
        inventory.add_host(host, group="datapath_reboot_needed")
    inventory.clear_pattern_cache()
    groups = {"all": NODES, "gpu_nodes": NODES, "datapath_reboot_needed": ARRIVED}
    host_vars = dict(extra_vars, datapath={"version": 1, "profiles": [{"name": "gpu_nodes"}]})
    variables = dict(extra_vars, groups=groups, hostvars={host: host_vars for host in NODES})
    pattern = Templar(loader, variables=variables).template(play["hosts"])
    return [host.name for host in inventory.get_hosts(pattern)]


@pytest.mark.parametrize(("extra_vars", "expected"), [
    ({}, ["node1", "node2", "node3", "node4"]),  # inventory order; node5 needs no reboot
    ({"datapath_hosts": "node3,node4,node1,node5"}, ["node3", "node4", "node1"]),
    ({"datapath_hosts": "gpu_nodes:!node2"}, ["node1", "node3", "node4"]),
    ({"datapath_reboot_hosts": "node3,node4,node1,node5"}, ["node3", "node4", "node1"]),  # deprecated name
])
def test_batches_follow_the_hosts_order(tmp_path: Path, extra_vars: dict[str, str], expected: list[str]) -> None:
    assert reboot_order(tmp_path, extra_vars) == expected
