"""Spec fixtures shared by the spec tests."""

from __future__ import annotations

import copy
import os
from typing import Any

from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.loader import load_spec_file

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5))
EXAMPLE = os.path.join(REPO, "inventories", "example")

_BASE: dict[str, Any] = {
    "version": 1,
    "fabrics": [
        {"name": "mgmt", "purpose": "management", "kind": "ethernet", "mtu": 1500, "subnets": ["192.0.2.0/24"]},
        {"name": "rail0", "purpose": "rdma", "kind": "roce", "mtu": 9000, "subnets": ["10.100.0.0/20"],
         "roce": {"dscp": 26, "priority": 3, "pfc_priorities": [3], "ecn": True,
                  "cnp": {"dscp": 48, "priority": 6}}},
    ],
    "profiles": [
        {"name": "gpu",
         "sysctl": {"vm.zone_reclaim_mode": 1},
         "hugepages": {"pages": [{"size": "1G", "count": 8, "numa_split": "even"}],
                       "mounts": [{"size": "1G", "path": "/dev/hugepages-1G"}]},
         "interfaces": [{"name": "eno1", "fabric": "mgmt"},
                        {"match": {"pci": "0000:e6:00.0"}, "fabric": "rail0"}],
         "firmware": [{"driver": "mlx5_core", "psid": "MT_0000000838", "min_version": "28.39.3560"}],
         "storage": {"devices": ["/dev/disk/by-id/nvme-A", "/dev/disk/by-id/nvme-B"],
                     "raid": {"level": 0}, "mount": {"path": "/mnt/model-cache"},
                     "directories": [{"path": "models", "mode": "0755"}], "reserve": "10GiB"},
         "k8s": {"labels": {"aiinfra.io/nvme-cache": "true"}, "local_volume_class": "local-nvme"}},
    ],
}


SHA_A = "a" * 64
SHA_B = "0123456789abcdef" * 4


def model(**changes: Any) -> dict[str, Any]:
    """A valid model version for the base spec (hosts of group gpu), with ``changes`` applied."""
    entry: dict[str, Any] = {"name": "llama", "version": "v1", "source": "https://models.example.com/llama/v1",
                             "files": [{"path": "config.json", "sha256": SHA_A, "size": 512},
                                       {"path": "weights/model-00001.safetensors", "sha256": SHA_B}],
                             "groups": ["gpu"]}
    entry.update(changes)
    return entry


def base() -> dict[str, Any]:
    """A small valid spec (fresh copy)."""
    return copy.deepcopy(_BASE)


def example() -> Any:
    return load_spec_file(os.path.join(EXAMPLE, "group_vars", "all", "datapath.yml"))
