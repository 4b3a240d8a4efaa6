"""The cluster spec the lab writes for itself (inventories/lab/group_vars/all/datapath.yml).

It is what a platform team would write for this "cluster": a management fabric, a RoCE
fabric with lossless QoS, the built-in AI-node profile, small HugePages, an NVMe cache on
each node's loop device, Kubernetes labels. Values are kept small and safe for a shared
kernel: the HugePage pool is global (64 x 2 MiB), and global vm.*/fs.*/kernel.* keys are
restored by `datapath-lab down`.
"""

from __future__ import annotations

import json
from typing import Any

from . import nvconfig

HEADER = """\
# Written by datapath-lab for lab {name!r}; regenerated on every `up`. Do not edit here:
# change lab/datapath_lab/spec.py. Reference: docs/spec.md; validate with
#   .venv/bin/datapath validate {inventory}
"""

# Global keys of the built-in profile that a child network namespace shows read-only on
# this kernel: a lab node cannot set them, a real node can. The lab opts them out.
NETNS_READ_ONLY = ("net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default",
                   "net.core.wmem_default", "net.core.netdev_max_backlog")

ROCE = {
    "mode": "v2",
    "trust": "dscp",
    "dscp": 26,
    "priority": 3,
    "pfc_priorities": [3],
    "ecn": True,
    "cnp": {"dscp": 48, "priority": 6},
    "ets": {"prio_tc": [0, 1, 2, 3, 4, 5, 6, 7],
            "tsa": ["ets", "ets", "ets", "ets", "ets", "ets", "strict", "ets"],
            "bw": [10, 10, 10, 50, 10, 0, 0, 10]},
}


def lab_spec(state: dict[str, Any]) -> dict[str, Any]:
    fabrics = []
    interfaces: list[dict[str, Any]] = []
    for i, fabric in enumerate(state["fabrics"]):
        entry: dict[str, Any] = {"name": fabric["name"], "mtu": fabric["mtu"],
                                 "subnets": list(fabric.get("subnets") or [fabric["subnet"]])}
        if i == 0:
            entry.update(purpose="management", kind="ethernet")
        else:
            entry.update(purpose="rdma", kind="roce", roce=ROCE)
        if fabric.get("addressing") == "per-rail-subnet":
            # each rail its own subnet (a leaf of its own); the fabric's subnets are the rails'
            entry.update(addressing="per-rail-subnet", rails=[{"subnet": net} for net in fabric["subnets"]])
        fabrics.append(entry)
        # rails in interface order: rail0 is the fabric's first NIC
        interfaces.extend({"name": name, "fabric": fabric["name"]} for name in fabric.get("ifnames") or
                          [fabric["ifname"]])
    sysctl: dict[str, Any] = {
        "net.ipv4.tcp_rmem": "4096 131072 16777216",
        "net.ipv4.tcp_wmem": "4096 16384 16777216",
        "net.ipv4.tcp_mtu_probing": 1,
    }
    for key in NETNS_READ_ONLY:
        sysctl[key] = {"value": 16777216 if "mem" in key else 250000, "mode": "minimum", "ignore_missing": True}
    storage_base = {
        "filesystem": {"type": "xfs", "label": "model-cache"},
        "mount": {"path": "/mnt/model-cache", "options": ["noatime", "nodiratime"]},
        "directories": [{"path": "models", "owner": "root", "group": "root", "mode": "0755"},
                        {"path": "checkpoints", "owner": "root", "group": "root", "mode": "0755"}],
        "wipe_serials": [],
    }
    # Each node's NVMe is its own loop device, so storage (and the local volume class that
    # follows from it) is declared per host.
    hosts = {node: {"storage": {"devices": [info["nvme"]], **storage_base},
                    "k8s": {"local_volume_class": "local-nvme"}}
             for node, info in state["nodes"].items()}
    # playbooks/measure.yml on the lab (docs/measure.md): every pair, short loads, a test file that fits
    # the smallest lab NVMe. The RDMA fabrics' expected rate (min_gbit_s) is what a veth pair carries even
    # through the lab's userspace delay relay on a busy 2-core machine; it also sizes the socket-buffer
    # check (bandwidth-delay product). A low relative gate, as the relay itself is several times slower
    # than a direct veth pair.
    measure: dict[str, Any] = {
        "mode": "all-pairs", "duration": 3, "streams": 4,
        "storage": {"test_file_size": "64MiB"},
        "gates": {"fabrics": {f["name"]: {"min_gbit_s": 0.5} for f in state["fabrics"][1:]}, "outlier_ratio": 0.1},
    }
    profile: dict[str, Any] = {
        "name": "gpu_nodes",
        "sysctl": sysctl,
        "hugepages": {"pages": [{"size": "2M", "count": 64}]},
        "thp": {"enabled": "madvise", "defrag": "madvise"},
        "kernel_args": ["iommu=pt"],
        "interfaces": interfaces,
        "firmware": [{"driver": "mlx5_core", "min_version": "28.39.3560"}],
        "k8s": {"labels": {"aiinfra.io/lab": "true"}},
    }
    nic_config = nvconfig.spec_entries(state)  # when a node has the lab's NIC (datapath-lab nic-firmware)
    if nic_config:
        profile["nic_config"] = nic_config
    return {
        "datapath": {
            "version": 1,
            "builtin_profile": "ai-gpu-node",
            "fabrics": fabrics,
            "profiles": [profile],
            "hosts": hosts,
            "measure": measure,
        }
    }


def to_yaml(value: Any, indent: int = 0) -> str:
    """A small block-style YAML writer for plain data (dicts, lists, scalars)."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return "{}\n"
        out = ""
        for key, item in value.items():
            if isinstance(item, dict) and item or isinstance(item, list) and not _scalars(item):
                out += f"{pad}{_scalar(key)}:\n{to_yaml(item, indent + 1)}"
            else:
                out += f"{pad}{_scalar(key)}: {_inline(item)}\n"
        return out
    if isinstance(value, list):
        if not value:
            return "[]\n"
        if _scalars(value):
            return f"{pad}{_inline(value)}\n"
        out = ""
        for item in value:
            body = to_yaml(item, indent + 1)
            out += f"{pad}- " + body[len(pad) + 2:]
        return out
    return f"{pad}{_scalar(value)}\n"


def _scalars(items: list[Any]) -> bool:
    return all(not isinstance(v, (dict, list)) for v in items)


def _inline(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_inline(v)}" for k, v in value.items()) + "}"
    return _scalar(value)


def _scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    plain = text and all(c.isalnum() or c in "._/-+=" for c in text) and not text[0].isdigit() \
        and text.lower() not in ("true", "false", "yes", "no", "on", "off", "null", "y", "n", "~")
    return text if plain else json.dumps(text)


def render(state: dict[str, Any], inventory: str) -> str:
    return HEADER.format(name=state["name"], inventory=inventory) + "---\n" + to_yaml(lab_spec(state))
