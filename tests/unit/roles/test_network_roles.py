"""The nic_firmware role's cluster-wide aggregation through real ansible-playbook, on fake roots.

Three local hosts, each with its own fake sysfs (``module_defaults`` sets the module's
``root``): two carry firmware older than the policy. The play must run the module on every
host, then fail once, listing both nodes with what they have and what they need.
The roce_qos and link_mtu roles skip cleanly on empty plan parts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
NIC = "ensfake0"
PLAYBOOK = """
- name: Network roles on fake roots
  hosts: all
  connection: local
  gather_facts: false
  module_defaults:
    aiinfra.datapath.nic_firmware: {root: "{{ fake_root }}"}
  vars:
    datapath_plan:
      link_mtu: {interfaces: []}
      roce_qos: {interfaces: []}
      nic_firmware:
        policies:
          - {driver: mlx5_core, psid: null, min_version: "28.41.1000", allowed: []}
    nic_firmware_interfaces: [%(nic)s]
  roles:
    - aiinfra.datapath.link_mtu
    - aiinfra.datapath.roce_qos
    - aiinfra.datapath.nic_firmware
"""
VERSIONS = {"gpu-01": "28.39.3560", "gpu-02": "28.41.1000", "gpu-03": "28.35.1000"}


def _nic(root: Path, version: str) -> None:
    device = root / "sys/devices/pci0000:00/0000:e6:00.0"
    driver = root / "sys/bus/pci/drivers/mlx5_core"
    (device / "infiniband/mlx5_0").mkdir(parents=True)
    driver.mkdir(parents=True)
    (device / "driver").symlink_to(driver)
    (device / "infiniband/mlx5_0/fw_ver").write_text(version + "\n")
    (device / "infiniband/mlx5_0/board_id").write_text("MT_0000000838\n")
    net = root / "sys/class/net" / NIC
    net.mkdir(parents=True)
    (net / "device").symlink_to(device)


def _play(tmp_path: Path, *extra: str) -> tuple[int, dict]:
    hosts = {}
    for host, version in VERSIONS.items():
        root = tmp_path / host
        if not root.exists():
            _nic(root, version)
        hosts[host] = {"fake_root": str(root), "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    book = tmp_path / "play.yml"
    book.write_text(PLAYBOOK % {"nic": NIC})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(book),
         *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    return proc.returncode, data


def _task(data: dict, name: str) -> dict:
    found: dict = {}
    for play in data["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith(name):
                found.update(task["hosts"])
    return found


@pytest.mark.slow
def test_firmware_fails_once_after_every_host_with_every_noncompliant_node(tmp_path: Path) -> None:
    rc, data = _play(tmp_path)
    assert rc != 0
    collected = _task(data, "Collect NIC firmware facts and compliance (never flashes)")
    assert sorted(collected) == sorted(VERSIONS)
    assert {h: r["compliance"][0]["status"] for h, r in collected.items()} == {
        "gpu-01": "noncompliant", "gpu-02": "compliant", "gpu-03": "noncompliant"}
    fail = _task(data, "Fail once with every out-of-policy NIC of every host")
    assert list(fail) == ["gpu-01"]  # run_once: one failure for the whole play
    msg = fail["gpu-01"]["msg"]
    assert msg[0] == "NIC firmware out of policy:"
    assert len(msg) == 3
    assert msg[1].startswith(f"gpu-01 {NIC} (0000:e6:00.0, driver mlx5_core, PSID MT_0000000838): "
                             "has 28.39.3560, needs >= 28.41.1000")
    assert msg[2].startswith(f"gpu-03 {NIC} ") and "has 28.35.1000" in msg[2]
    # empty interfaces/qos parts: the module calls are skipped, not failed
    for name in ("Set and persist the MTU of every planned interface in one call",
                 "Configure lossless RoCE QoS on every planned interface in one call"):
        assert all(r.get("skipped") for r in _task(data, name).values())


@pytest.mark.slow
def test_firmware_report_only(tmp_path: Path) -> None:
    rc, data = _play(tmp_path, "-e", "nic_firmware_fail=false")
    assert rc == 0
    assert all(r.get("skipped") for r in _task(data, "Fail once with every out-of-policy NIC of every host").values())
