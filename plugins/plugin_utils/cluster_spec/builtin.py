"""The built-in ``ai-gpu-node`` profile: limits that only go up, each value with its source.

Only values that raise a limit are here (mode ``minimum``: a node that already has a larger
value keeps it). Nothing here turns a kernel feature off; choices such as THP mode,
``vm.zone_reclaim_mode`` or ``kernel.numa_balancing`` stay with the user (see docs/spec.md).
"""

from __future__ import annotations

from functools import lru_cache

from .models import ProfileBody

NAME = "ai-gpu-node"

TUNED = "tuned (redhat-performance/tuned HEAD) profile"
MLNX = "Mellanox legacy host tuning page (SC11 Caltech), r/wmem and backlog"
OPENSHIFT = "openshift-node / tuned openshift profile"

# key -> (value, source)
SYSCTL: dict[str, tuple[str, str]] = {
    "net.core.rmem_max": ("16777216", MLNX),
    "net.core.wmem_max": ("16777216", MLNX),
    "net.core.rmem_default": ("16777216", MLNX),
    "net.core.wmem_default": ("16777216", MLNX),
    "net.core.netdev_max_backlog": ("250000", MLNX),
    "net.ipv4.tcp_rmem": ("4096 131072 16777216", f"{TUNED} network-throughput"),
    "net.ipv4.tcp_wmem": ("4096 16384 16777216", f"{TUNED} network-throughput"),
    "net.core.somaxconn": ("2048", f"{TUNED} throughput-performance (somaxconn >2048)"),
    "vm.min_free_kbytes": ("135168", f"{TUNED} hpc-compute"),
    "vm.max_map_count": ("262144", f"{OPENSHIFT} (vm.max_map_count 262144)"),
    "fs.aio-max-nr": ("1048576", f"{OPENSHIFT} (fs.aio-max-nr >1048576)"),
    "kernel.pid_max": ("4194304", f"{OPENSHIFT} (kernel.pid_max >4194304)"),
    "fs.inotify.max_user_watches": ("65536", "openshift-node tuned profile"),
    "fs.inotify.max_user_instances": ("8192", "openshift-node tuned profile"),
    "net.ipv4.neigh.default.gc_thresh1": ("8192", f"{OPENSHIFT} (neigh gc_thresh 8192/32768/65536)"),
    "net.ipv4.neigh.default.gc_thresh2": ("32768", f"{OPENSHIFT} (neigh gc_thresh 8192/32768/65536)"),
    "net.ipv4.neigh.default.gc_thresh3": ("65536", f"{OPENSHIFT} (neigh gc_thresh 8192/32768/65536)"),
}

# ARP/ND tables and these net.core keys may not exist in a container's or lab node's netns.
_IGNORE_MISSING = {"net.ipv4.neigh.default.gc_thresh1", "net.ipv4.neigh.default.gc_thresh2",
                   "net.ipv4.neigh.default.gc_thresh3"}


@lru_cache(maxsize=1)
def profile() -> ProfileBody:
    """The built-in profile as a validated model (built once)."""
    sysctl = {key: {"value": value, "mode": "minimum", "source": source,
                    "ignore_missing": key in _IGNORE_MISSING}
              for key, (value, source) in sorted(SYSCTL.items())}
    return ProfileBody.model_validate({"sysctl": sysctl})
