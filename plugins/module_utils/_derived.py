# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Values derived from the spec that the controller and the node must agree on (stdlib only).

One place for each: the spec models and cross-checks, the per-host plan, the filters and the
modules all import them from here (the ``datapath`` console script loads this file too), so
they can never disagree again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# --------------------------------------------------------------------------- link MTU
MTU_MIN = 68        # RFC 791: the smallest MTU every IPv4 host must accept
MTU_MAX = 9216      # the spec's ceiling: the largest jumbo frame common switches carry
MTU_LIMIT_WHY = "the spec's range %d-%d (the device may allow more)" % (MTU_MIN, MTU_MAX)

# --------------------------------------------------------------------------- RoCE
# include/rdma/ib_addr.h iboe_get_mtu(): the netdev MTU minus the RoCE headers (GRH 40 + UDP 8
# + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4 = 96 bytes), rounded down to an IB MTU. Below
# 256 + 96 the kernel gives 0: no RoCE at all.
ROCE_HEADERS = 96
ROCE_MTUS = (4096, 2048, 1024, 512, 256)
ROCE_MIN_LINK_MTU = ROCE_MTUS[-1] + ROCE_HEADERS
ECN_ECT0 = 2


def roce_mtu(link_mtu):
    """The RoCE (IB) MTU the kernel derives from a netdev MTU, or None below 352 (no RoCE)."""
    room = int(link_mtu) - ROCE_HEADERS
    for size in ROCE_MTUS:
        if room >= size:
            return size
    return None


def roce_tos(dscp, ecn=True):
    """rdma_cm ToS byte of RoCE traffic: DSCP in the upper six bits, ECT(0) when ECN is on.

    DSCP 26 with ECN gives 106 (26 << 2 = 104, + 2); 104 is the same DSCP without ECT.
    """
    return (int(dscp) << 2) | (ECN_ECT0 if ecn else 0)


# --------------------------------------------------------------------------- sysctl scope
# net.* keys that live in the initial network namespace only (or are read-only copies in
# child namespaces, or shared by all, like the neighbour table's gc_thresh): writing them from
# a lab node changes the whole host.
GLOBAL_NET_KEYS = frozenset((
    "net.core.bpf_jit_enable", "net.core.busy_poll", "net.core.busy_read",
    "net.core.default_qdisc", "net.core.dev_weight", "net.core.flow_limit_table_len",
    "net.core.message_burst", "net.core.message_cost", "net.core.netdev_budget",
    "net.core.netdev_budget_usecs", "net.core.netdev_max_backlog", "net.core.netdev_rss_key",
    "net.core.rmem_default", "net.core.rmem_max", "net.core.rps_sock_flow_entries",
    "net.core.wmem_default", "net.core.wmem_max", "net.ipv4.neigh.default.gc_thresh1",
    "net.ipv4.neigh.default.gc_thresh2", "net.ipv4.neigh.default.gc_thresh3", "net.ipv4.tcp_mem",
    "net.ipv4.udp_mem", "net.ipv6.neigh.default.gc_thresh1", "net.ipv6.neigh.default.gc_thresh2",
    "net.ipv6.neigh.default.gc_thresh3", "net.netfilter.nf_conntrack_max", "net.nf_conntrack_max",
    "net.unix.max_dgram_qlen_global",
))


def canonical_sysctl_name(name):
    """The dotted name of a key given as ``a.b.c`` or ``a/b/c``.

    In slash form a dot belongs to a component (``net/ipv4/conf/eth0.100/rp_filter``); the
    dotted form writes that dot as a slash (``net.ipv4.conf.eth0/100.rp_filter``), as
    sysctl(8) does.
    """
    name = name.strip().lstrip("-").strip()
    first_dot = name.find(".")
    first_slash = name.find("/")
    if first_slash != -1 and (first_dot == -1 or first_slash < first_dot):
        return name.replace(".", "\0").replace("/", ".").replace("\0", "/")
    return name


def sysctl_scope(name):
    """``netns`` for keys each network namespace holds for itself, else ``global``."""
    name = canonical_sysctl_name(name)
    return "netns" if name.startswith("net.") and name not in GLOBAL_NET_KEYS else "global"


# --------------------------------------------------------------------------- NVMe transport
# The spec names how an NVMe namespace is attached; lsblk's TRAN column says "nvme" for all
# of them (util-linux lsblk: the transport of an NVMe controller is not reported).
NVME_TRANSPORTS = {"pcie": "nvme", "tcp": "nvme", "rdma": "nvme", "fc": "nvme"}


def lsblk_transport(word):
    """The lsblk TRAN value for a transport word of the spec (other words pass unchanged)."""
    return NVME_TRANSPORTS.get(word, word)
