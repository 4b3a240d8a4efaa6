"""A converged host: a plan (docs/plan.md shape) and the datapath_facts that match it."""

from __future__ import annotations

import copy
from typing import Any

PLAN: dict[str, Any] = {
    "version": 2,
    "host": "node1",
    "sysctl_profile": {"file": "/etc/sysctl.d/90-aiinfra-datapath.conf", "keys": {
        "net.ipv4.tcp_rmem": {"value": "4096 131072 16777216", "mode": "minimum", "scope": "netns",
                              "ignore_missing": False},
        "net.ipv4.tcp_mtu_probing": {"value": "1", "mode": "exact", "scope": "netns", "ignore_missing": False},
        "net.core.rmem_max": {"value": "16777216", "mode": "minimum", "scope": "global", "ignore_missing": True},
        "vm.zone_reclaim_mode": {"value": "0", "mode": "exact", "scope": "global", "ignore_missing": False},
    }},
    "hugepages": {"pages": [{"size": "2M", "count": 64, "per_node": None, "persist": "sysctl"},
                            {"size": "1G", "count": 4, "per_node": {"0": 2, "1": 2}, "persist": "cmdline"}],
                  "thp": {"enabled": "madvise", "defrag": "madvise"}, "mounts": [], "bytes_per_node": {}},
    "kernel_cmdline": {"args": ["hugepagesz=1G", "hugepages=0:2,1:2", "iommu=pt"]},
    "link_mtu": {"interfaces": [{"name": "eno1", "match": {"name": "eno1"}, "fabric": "mgmt", "mtu": 1500},
                                {"name": None, "match": {"pci": "0000:1a:00.0"}, "fabric": "rdma", "mtu": 9000}]},
    "roce_qos": {"interfaces": [{
        "interface": None, "match": {"pci": "0000:1a:00.0"}, "fabric": "rdma", "trust": "dscp",
        "pfc_priorities": [3], "dscp2prio": {"26": 3, "48": 6},
        "ets": {"prio_tc": [0, 1, 2, 3, 4, 5, 6, 7], "tsa": ["ets"] * 6 + ["strict", "ets"],
                "bw": [10, 10, 10, 50, 10, 0, 0, 10]},
        "ecn": {"rp": [3], "np": [3]}, "cnp": {"dscp": 48, "priority": 6}, "roce_tos": 106,
        "roce_mode": "v2", "roce_mtu": 4096}]},
    "nic_firmware": {"policies": [{"driver": "mlx5_core", "psid": "MT_0000000838", "min_version": "28.39.3560",
                                   "allowed": []}]},
    "nvme_layout": {"devices": ["/dev/disk/by-id/nvme-A"], "select": None, "raid": None,
                    "filesystem": {"type": "xfs", "label": "model-cache"},
                    "mount": {"path": "/mnt/model-cache", "options": ["noatime", "nodiratime"]},
                    "directories": [], "reserve_bytes": 0, "wipe_serials": []},
    "nfd_labels": {"labels": {"aiinfra.io/nvme-cache": "true"}, "local_volume_class": None},
}

FACTS: dict[str, Any] = {
    "version": 1,
    "sysctl": {
        "net.ipv4.tcp_rmem": {"value": "4096 262144 33554432", "state": "ok"},
        "net.ipv4.tcp_wmem": {"value": "4096 16384 16777216", "state": "ok"},
        "net.ipv4.tcp_mtu_probing": {"value": "1", "state": "ok"},
        "net.core.rmem_max": {"value": "67108864", "state": "ok"},
        "net.core.wmem_max": {"value": "67108864", "state": "ok"},
        "vm.zone_reclaim_mode": {"value": "0", "state": "ok"},
    },
    "hugepages": {"default_size": "2M", "pools": {
        "2M": {"size_kb": 2048, "total": 64, "free": 64, "resv": 0, "surplus": 0,
               "per_node": {"0": {"total": 32, "free": 32}, "1": {"total": 32, "free": 32}}},
        "1G": {"size_kb": 1048576, "total": 4, "free": 4, "resv": 0, "surplus": 0,
               "per_node": {"0": {"total": 2, "free": 2}, "1": {"total": 2, "free": 2}}}}},
    "thp": {"enabled": "madvise", "defrag": "madvise"},
    "cmdline": ["BOOT_IMAGE=/vmlinuz", "ro", "hugepagesz=1G", "hugepages=0:2,1:2", "iommu=pt"],
    "memory_bytes": 2**40,
    "numa_nodes": 2,
    "interfaces": {
        "eno1": {"mtu": 1500, "operstate": "up", "mac": "b8:3f:d2:00:00:01", "driver": "igb",
                 "bus_info": "0000:02:00.0", "physical": True, "speed_mbps": 1000, "firmware": None},
        "ens1f0np0": {"mtu": 9000, "operstate": "up", "mac": "b8:3f:d2:00:00:02", "driver": "mlx5_core",
                      "bus_info": "0000:1a:00.0", "physical": True, "speed_mbps": 400000,
                      "firmware": {"version": "28.39.3560", "stored": "28.39.3560", "psid": "MT_0000000838",
                                   "driver_version": "23.10", "sources": ["ethtool"], "notes": []}},
    },
    "qos": {
        "eno1": {"supported": False, "reason": "dcb: Operation not supported"},
        "ens1f0np0": {"supported": True, "backend": "dcb", "trust": "dscp", "pfc_priorities": [3],
                      "dscp2prio": {"26": 3, "48": 6},
                      "ets": {"prio_tc": [0, 1, 2, 3, 4, 5, 6, 7], "tsa": ["ets"] * 6 + ["strict", "ets"],
                              "bw": [10, 10, 10, 50, 10, 0, 0, 10]},
                      "ecn": {"rp": [3], "np": [3]}, "notes": []},
    },
    "storage": {
        "devices": {"/dev/disk/by-id/nvme-A": {"exists": True, "resolved": "/dev/nvme0n1", "size_bytes": 2**40,
                                               "model": "X", "serial": "S1"}},
        "mounts": {"/mnt/model-cache": {"mounted": True, "source": "/dev/nvme0n1p1", "fstype": "xfs",
                                        "options": ["rw", "noatime", "nodiratime", "attr2"]}},
        "fstab": {"/mnt/model-cache": {"present": True, "source": "UUID=1", "fstype": "xfs",
                                       "options": ["noatime", "nodiratime", "nofail"]}},
    },
    "nfd": {"directory": "/etc/kubernetes/node-feature-discovery/features.d", "files": {},
            "labels": {"aiinfra.io/nvme-cache": "true", "aiinfra.io/other": "x"}},
    "unavailable": {},
    "notes": [],
}


def plan() -> dict[str, Any]:
    return copy.deepcopy(PLAN)


def facts() -> dict[str, Any]:
    return copy.deepcopy(FACTS)
