"""playbooks/rolling_reboot.yml: the reboot batches follow the order of the hosts, not the order in
which group_by's results arrived (the order of the group it fills). The host pattern of the play
that reboots is read, templated and resolved by ansible itself (DataLoader, as ansible-playbook
loads a playbook; Templar; InventoryManager), against a group filled out of order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "rolling_reboot.yml"
NODES = ["node1", "node2", "node3", "node4", "node5"]
ARRIVED = ["node4", "node1", "node3", "node2"]  # group_by's results, in the order they came back

# In a child process, as ansible-playbook starts: its own plugin loader finds the collection's
# filters (a test process may have configured another collection finder before).
_RESOLVE = r"""
import json, sys
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
playbook, inventory_file, nodes, arrived, extra_vars = sys.argv[1], sys.argv[2], *map(json.loads, sys.argv[3:6])
init_plugin_loader()
loader = DataLoader()
plays = loader.load_from_file(playbook, trusted_as_template=True)
[play] = [p for p in plays if p["name"] == "Reboot in batches and verify"]
inventory = InventoryManager(loader, sources=[inventory_file])
inventory.add_group("datapath_reboot_needed")
for host in arrived:
    inventory.add_host(host, group="datapath_reboot_needed")
inventory.clear_pattern_cache()
groups = {"all": nodes, "gpu_nodes": nodes, "datapath_reboot_needed": arrived}
host_vars = dict(extra_vars, datapath={"version": 1, "profiles": [{"name": "gpu_nodes"}]})
variables = dict(extra_vars, groups=groups, hostvars={host: host_vars for host in nodes})
pattern = Templar(loader, variables=variables).template(play["hosts"])
print(json.dumps([host.name for host in inventory.get_hosts(pattern)]))
"""


def reboot_order(tmp_path: Path, extra_vars: dict[str, str]) -> list[str]:
    """The hosts of the play that reboots, in the order its batches take them."""
    inventory_file = tmp_path / "hosts.ini"
    inventory_file.write_text("[gpu_nodes]\n" + "\n".join(NODES) + "\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run([sys.executable, "-c", _RESOLVE, str(PLAYBOOK), str(inventory_file), json.dumps(NODES),
                           json.dumps(ARRIVED), json.dumps(extra_vars)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("extra_vars", "expected"), [
    ({}, ["node1", "node2", "node3", "node4"]),  # inventory order; node5 needs no reboot
    ({"datapath_hosts": "node3,node4,node1,node5"}, ["node3", "node4", "node1"]),
    ({"datapath_hosts": "gpu_nodes:!node2"}, ["node1", "node3", "node4"]),
    ({"datapath_reboot_hosts": "node3,node4,node1,node5"}, ["node3", "node4", "node1"]),  # deprecated name
])
def test_batches_follow_the_hosts_order(tmp_path: Path, extra_vars: dict[str, str], expected: list[str]) -> None:
    assert reboot_order(tmp_path, extra_vars) == expected
