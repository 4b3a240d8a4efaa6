"""The values the controller and the node derive alike (module_utils/_derived.py)."""

from __future__ import annotations

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _derived, _sysctl


def test_sysctl_scope_and_proc_path() -> None:
    assert _derived.sysctl_scope("net.ipv4.tcp_rmem") == "netns"
    assert _derived.sysctl_scope("net.core.rmem_max") == "global"
    assert _derived.sysctl_scope("net/core/somaxconn") == "netns"
    assert _derived.sysctl_scope("vm.nr_hugepages") == "global"
    assert _derived.canonical_sysctl_name("net/ipv4/conf/eth0.100/rp_filter") == "net.ipv4.conf.eth0/100.rp_filter"
    assert _sysctl.proc_path("net.ipv4.conf.eth0/100.rp_filter") == "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"


@pytest.mark.parametrize(("link_mtu", "expected"), [
    (9000, 4096), (4192, 4096), (4191, 2048), (1500, 1024), (1120, 1024), (1119, 512),
    (608, 512), (607, 256), (352, 256), (351, None), (68, None),
])
def test_roce_mtu_follows_the_kernel(link_mtu: int, expected: int | None) -> None:
    # include/rdma/ib_addr.h iboe_get_mtu(): below 256 + 96 bytes there is no RoCE MTU at all
    assert _derived.roce_mtu(link_mtu) == expected


def test_roce_tos_and_transport_words() -> None:
    assert _derived.roce_tos(26, True) == 106
    assert _derived.roce_tos(26, False) == 104
    assert {_derived.lsblk_transport(w) for w in ("pcie", "tcp", "rdma", "fc")} == {"nvme"}
    assert _derived.lsblk_transport("sata") == "sata"
