# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What other programs read from a ``node_topology`` result (stdlib only, pure functions).

* :func:`topology_labels`: node-feature-discovery labels (``aiinfra.io/gpu-nic-affinity``,
  ``aiinfra.io/gpudirect-rdma``, ``aiinfra.io/gpudirect-storage``, ``aiinfra.io/gpu-count``) for
  the ``nfd_labels`` features file;
* :func:`nccl_env`: the text of ``/etc/aiinfra-datapath/nccl.env``: every GPU's nearest RDMA
  devices in GPU (rail) order and ``NCCL_IB_HCA`` with exact-match names.

Both take the ``topology`` dict the module returns; neither reads the node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

NCCL_ENV_PATH = "/etc/aiinfra-datapath/nccl.env"
LABEL_PREFIX = "aiinfra.io/"
_RANK = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _worst_best(topology):
    """The class of the farthest GPU from its nearest RDMA NIC (the node is as good as its worst GPU)."""
    worst = None
    for gpu in topology.get("gpus") or []:
        rdma = [pair for pair in gpu.get("nics") or [] if pair.get("rdma")]
        if not rdma or rdma[0].get("relation") not in _RANK:
            return None
        best = rdma[0]["relation"]
        if worst is None or _RANK.index(best) > _RANK.index(worst):
            worst = best
    return worst


def _acs_clean(topology):
    for gpu in topology.get("gpus") or []:
        for pair in gpu.get("nics") or []:
            if pair.get("name") in (gpu.get("nearest_nics") or []) and pair.get("acs_redirect"):
                return False
    return True


def topology_labels(topology):
    """NFD labels (``{key: value}``, values as NFD writes them) from a topology; {} without GPUs.

    ``gpu-nic-affinity``: the farthest class any GPU has to its nearest RDMA NIC, lower case
    (``pix`` .. ``sys``), ``none`` when a GPU has no RDMA NIC. ``gpudirect-rdma``: ``true`` when a
    peer-memory module is loaded, every GPU has an RDMA NIC and no ACS redirect sits on those paths.
    ``gpudirect-storage``: ``true`` when nvidia_fs is loaded and /etc/cufile.json exists.
    """
    gpus = topology.get("gpus") or []
    if not gpus:
        return {}
    affinity = _worst_best(topology)
    direct = topology.get("gpudirect") or {}
    rdma_ready = bool(direct.get("rdma")) and affinity is not None and _acs_clean(topology)
    return {
        LABEL_PREFIX + "gpu-count": str(len(gpus)),
        LABEL_PREFIX + "gpu-nic-affinity": affinity.lower() if affinity else "none",
        LABEL_PREFIX + "gpudirect-rdma": "true" if rdma_ready else "false",
        LABEL_PREFIX + "gpudirect-storage": "true" if direct.get("storage") else "false",
    }


def nccl_env(topology):
    """The text of :data:`NCCL_ENV_PATH`, or None on a node without GPUs or RDMA NICs.

    ``AIINFRA_GPU<i>_HCA`` lists GPU i's nearest RDMA devices; ``NCCL_IB_HCA`` every one of them in
    GPU order, each once, with a leading ``=`` so that NCCL matches the names exactly (without it,
    ``mlx5_1`` also selects ``mlx5_10`` .. ``mlx5_19``).
    """
    lines = []
    ordered = []
    for gpu in sorted(topology.get("gpus") or [], key=lambda g: g.get("index", 0)):
        rdma = [pair["name"] for pair in gpu.get("nics") or []
                if pair.get("rdma") and pair.get("name") in (gpu.get("nearest_nics") or [])]
        if not rdma:
            continue
        lines.append("AIINFRA_GPU%d_HCA=%s" % (gpu.get("index", 0), ",".join(rdma)))
        for name in rdma:
            if name not in ordered:
                ordered.append(name)
    if not ordered:
        return None
    head = ["# Written by aiinfra.datapath from node_topology: each GPU's nearest RDMA devices (rail order).",
            "# Source it before launching NCCL jobs; regenerated when the topology changes."]
    return "\n".join(head + ['NCCL_IB_HCA="=%s"' % ",".join(ordered)] + lines) + "\n"
