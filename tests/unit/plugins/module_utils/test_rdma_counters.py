"""rdma_counters backend: parsers on recorded real outputs, the sysfs reader, counter_deltas.

Fixtures under tests/fixtures/measure/rdma/ (each with a .source sidecar): real ``ethtool -S``
of mlx5 ConnectX-6 Dx (netdev/bpf list), Emulex be2net and Broadcom bnx2x (isc-projects/ethq
issues), grep outputs of a ConnectX-4 Lx and an Intel E810, ``hw_counters`` listings of a
ConnectX-6 Dx and a ConnectX-4 Lx, and a veth recorded on the build host. Sysfs trees and
"after" snapshots built in these tests are constructed (the names are real, the increments
are chosen here) and say so where they are made.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _rdma_counters as rc
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node as CapNode
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import run
from netfakes import FakeRunner, Node, nic

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "measure" / "rdma"
ETHTOOL = "/usr/sbin/ethtool"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_fixture_has_a_source_sidecar() -> None:
    for path in FIXTURES.iterdir():
        if path.suffix != ".source":
            assert (FIXTURES / (path.name + ".source")).is_file(), path.name


def test_mlx5_connectx6dx_verbatim() -> None:
    stats = rc.parse_ethtool_stats(fixture("mlx5-cx6dx-k6.5-nonzero.txt"))
    assert len(stats) == 108  # every line but the header
    assert stats["rx_discards_phy"] == 441063206498
    assert stats["rx_out_of_buffer"] == 534918379
    assert stats["tx_global_pause"] == 44414017
    assert stats["rx_prio0_discards"] == 441063206498
    assert "NIC statistics" not in stats
    old = rc.parse_ethtool_stats(fixture("mlx5-cx6dx-k5.15-nonzero.txt"))
    assert old["rx_discards_phy"] == 58591428329 and old["tx_pause_ctrl_phy"] == 5745055
    # counters this kernel has and the other has not (page pool vs rx cache) are simply absent
    assert "rx_cache_reuse" in old and "rx_cache_reuse" not in stats


def test_roce_view_of_the_real_mlx5_output() -> None:
    stats = rc.parse_ethtool_stats(fixture("mlx5-cx6dx-k6.5-nonzero.txt"))
    view = rc.roce_view({"ethtool": stats, "rdma": {}})
    assert view == {"rx_prio0_discards": 441063206498, "rx_discards_phy": 441063206498,
                    "rx_out_of_buffer": 534918379, "tx_pause_ctrl_phy": 44414017}
    assert rc.roce_view({"ethtool": rc.parse_ethtool_stats(fixture("mlx5-cx6dx-k5.15-nonzero.txt")),
                         "rdma": {}})["tx_discards_phy"] == 0


def test_other_vendors_and_grep_outputs() -> None:
    be2net = rc.parse_ethtool_stats(fixture("be2net-ethtool-S-head.txt"))
    assert be2net["rx_address_filtered"] == 5164994 and be2net["rx_roce_frames"] == 0 and len(be2net) == 37
    bnx2x = rc.parse_ethtool_stats(fixture("bnx2x-ethtool-S-head.txt"))
    assert bnx2x["[0]: rx_bytes"] == 209487403324 and bnx2x["[2]: rx_ucast_packets"] == 201407420
    assert len(bnx2x) == 36
    ice = rc.parse_ethtool_stats(fixture("ice-e810-grep-pause.txt"))
    assert len(ice) == 32 and ice["rx_priority_3_xoff.nic"] == 0
    assert rc.roce_view({"ethtool": ice}) == {}  # no prioN_pause names on ice: nothing claimed
    cx4 = rc.parse_ethtool_stats(fixture("mlx5-cx4lx-grep-pause.txt"))
    assert cx4["tx_global_pause_duration"] == 555665182
    assert rc.roce_view({"ethtool": cx4}) == {"rx_pause_ctrl_phy": 0, "tx_pause_ctrl_phy": 1266552,
                                              "tx_pause_storm_warning_events": 0, "tx_pause_storm_error_events": 0}


@pytest.mark.parametrize("name, peer", [("veth-ethtool-S.txt", 2), ("veth-lab-node1-ens1f0np0-ethtool-S.txt", 3)])
def test_veth_recorded_parses_but_has_no_roce_counters(name: str, peer: int) -> None:
    stats = rc.parse_ethtool_stats(fixture(name))
    assert stats["peer_ifindex"] == peer and stats["rx_queue_0_xdp_packets"] == 0 and len(stats) == 10
    assert rc.roce_view({"ethtool": stats}) == {}


def test_parser_skips_what_is_not_a_counter() -> None:
    assert rc.parse_ethtool_stats("NIC statistics:\n     a: 1\n     b: n/a\n     c:\nno colon\n") == {"a": 1}
    assert rc.parse_ethtool_stats("") == {} and rc.parse_ethtool_stats(None) == {}
    assert rc.parse_counter_value("N/A (no PMA)\n") is None
    assert rc.parse_counter_value("12345\n") == 12345


def test_hw_counters_listings() -> None:
    cx6 = rc.parse_counter_listing(fixture("mlx5-cx6dx-hw_counters.txt"))
    assert len(cx6) == 30
    assert (cx6["np_cnp_sent"], cx6["np_ecn_marked_roce_packets"], cx6["out_of_sequence"]) == (
        1052612505, 21278189006, 1811101)
    cx4 = rc.parse_counter_listing(fixture("mlx5-cx4lx-hw_counters.txt"))
    assert cx4["out_of_buffer"] == 135 and cx4["rp_cnp_handled"] == 0
    assert set(cx4) == set(cx6)


def test_roce_counters_all_have_a_meaning() -> None:
    assert len(rc.ROCE_COUNTERS) == len(set(rc.ROCE_COUNTERS))
    for name in rc.ROCE_COUNTERS:
        assert rc.meaning(name), name
    for name in ("rx_prio3_pause", "tx_prio3_pause", "rx_discards_phy", "rx_out_of_buffer", "np_cnp_sent",
                 "rp_cnp_handled", "np_ecn_marked_roce_packets", "out_of_sequence", "packet_seq_err",
                 "roce_adp_retrans"):
        assert name in rc.ROCE_COUNTERS
    assert rc.meaning("no_such_counter") is None


def snapshot(ethtool: dict, hw: dict | None = None, supported: bool = True) -> dict:
    return {"supported": supported, "reason": None if supported else "virtual", "ethtool": ethtool,
            "rdma": {"device": "mlx5_0" if hw is not None else None, "port": 1 if hw is not None else None,
                     "counters": {}, "hw_counters": hw or {}}}


def test_counter_deltas_on_recorded_baselines() -> None:
    """Before: the recorded ConnectX-6 Dx values. After: constructed increments (chosen here)."""
    eth = rc.parse_ethtool_stats(fixture("mlx5-cx6dx-k6.5-nonzero.txt"))
    hw = rc.parse_counter_listing(fixture("mlx5-cx6dx-hw_counters.txt"))
    after_eth = dict(eth, rx_discards_phy=eth["rx_discards_phy"] + 1200, rx_prio3_pause=7)
    after_hw = dict(hw, np_cnp_sent=hw["np_cnp_sent"] + 50, np_ecn_marked_roce_packets=hw[
        "np_ecn_marked_roce_packets"] + 900)
    before = {"ens1f0np0": snapshot(dict(eth, rx_prio3_pause=0), hw)}
    deltas = rc.counter_deltas(before, {"ens1f0np0": snapshot(after_eth, after_hw)})["ens1f0np0"]
    assert deltas["supported"] is True and deltas["reset"] == []
    assert deltas["ethtool"]["rx_discards_phy"] == 1200 and deltas["ethtool"]["rx_bytes"] == 0
    assert deltas["hw_counters"]["np_cnp_sent"] == 50
    assert deltas["roce"]["np_ecn_marked_roce_packets"] == 900
    assert deltas["roce"]["rx_prio3_pause"] == 7 and deltas["roce"]["rp_cnp_handled"] == 0


def test_counter_that_went_down_is_a_reset_never_negative() -> None:
    """Constructed: a driver reload between the snapshots (counters restart near zero)."""
    before = {"eth0": snapshot({"rx_discards_phy": 441063206498, "tx_prio3_pause": 10}, {"np_cnp_sent": 99})}
    after = {"eth0": snapshot({"rx_discards_phy": 12, "tx_prio3_pause": 15}, {"np_cnp_sent": 3})}
    deltas = rc.counter_deltas(before, after)["eth0"]
    assert deltas["reset"] == ["ethtool:rx_discards_phy", "hw_counters:np_cnp_sent"]
    assert "rx_discards_phy" not in deltas["ethtool"] and "np_cnp_sent" not in deltas["hw_counters"]
    assert deltas["roce"] == {"tx_prio3_pause": 5}
    assert all(v >= 0 for block in ("ethtool", "counters", "hw_counters") for v in deltas[block].values())


def test_counter_deltas_unsupported_and_missing_interfaces() -> None:
    veth = snapshot({}, supported=False)
    veth["reason"] = "no /sys/class/net/v0/device: virtual interface, no NIC counters"
    out = rc.counter_deltas({"v0": veth, "gone": snapshot({"a": 1})}, {"v0": veth, "new": snapshot({"a": 1})})
    assert out["v0"]["supported"] is False and out["v0"]["reason"].startswith("no /sys/class/net/v0/device")
    assert out["gone"]["reason"] == "only in the before snapshot"
    assert out["new"]["reason"] == "only in the after snapshot"
    assert out["v0"]["ethtool"] == {} and out["v0"]["roce"] == {}
    assert rc.counter_deltas({}, {}) == {} and rc.counter_deltas(None, None) == {}


def test_counter_appearing_only_after_is_not_a_delta() -> None:
    out = rc.counter_deltas({"e": snapshot({"a": 1})}, {"e": snapshot({"a": 2, "b": 5})})["e"]
    assert out["ethtool"] == {"a": 1}


def mlx5_tree(node: Node, name: str = "ens1f0np0", hw_listing: str = "mlx5-cx6dx-hw_counters.txt",
              port_ndev: bool = True) -> None:
    """Constructed sysfs tree of one ConnectX NIC; the hw_counters values are the recorded ones."""
    nic(node, name, ecn=False)
    port = "/sys/devices/pci0000:e0/0000:e6:00.0/infiniband/mlx5_0/ports/1"
    for counter, value in rc.parse_counter_listing(fixture(hw_listing)).items():
        node.put("%s/hw_counters/%s" % (port, counter), "%d\n" % value)
    node.put(port + "/counters/port_rcv_data", "81408901908\n")
    node.put(port + "/counters/port_xmit_wait", "0\n")
    node.put(port + "/counters/VL15_dropped", "N/A (no PMA)\n")
    if port_ndev:
        node.put(port + "/gid_attrs/ndevs/0", name + "\n")


def ethtool_answer(outputs: dict[str, tuple[int, str, str]]):
    def handler(argv: list[str]):
        if argv[:2] == [ETHTOOL, "-S"]:
            return outputs.get(argv[2], (94, "", "Cannot get stats strings information: Operation not supported"))
        return None
    return handler


def read(tmp_path: Path, params: dict, runner: FakeRunner) -> dict:
    return run(rc.RdmaCounters, dict(params, root=str(tmp_path)), CapNode(runner, str(tmp_path)))


def test_backend_reads_ethtool_and_sysfs(tmp_path: Path) -> None:
    node = Node(tmp_path)
    mlx5_tree(node)
    nic(node, "eno1", pci=None)  # a veth-like interface: no device link
    runner = FakeRunner([ethtool_answer({"ens1f0np0": (0, fixture("mlx5-cx6dx-k6.5-nonzero.txt"), "")})],
                        which={"ethtool": ETHTOOL})
    result = read(tmp_path, {"interfaces": None}, runner)
    assert list(result["counters"]) == ["ens1f0np0"]  # default: NICs only
    entry = result["counters"]["ens1f0np0"]
    assert entry["supported"] is True and entry["reason"] is None
    assert entry["ethtool"]["rx_discards_phy"] == 441063206498
    assert entry["rdma"]["device"] == "mlx5_0" and entry["rdma"]["port"] == 1
    assert entry["rdma"]["hw_counters"]["np_cnp_sent"] == 1052612505 and len(entry["rdma"]["hw_counters"]) == 30
    assert entry["rdma"]["counters"] == {"port_rcv_data": 81408901908, "port_xmit_wait": 0}
    assert result["notes"] == [] and result["changed"] is False and "actions" not in result


def test_backend_veth_is_unsupported_not_an_error(tmp_path: Path) -> None:
    node = Node(tmp_path)
    nic(node, "v0", pci=None)
    runner = FakeRunner([ethtool_answer({"v0": (0, fixture("veth-ethtool-S.txt"), "")})], which={"ethtool": ETHTOOL})
    result = read(tmp_path, {"interfaces": ["v0", "nosuch0"]}, runner)
    assert "failed" not in result
    assert result["counters"]["v0"] == {
        "supported": False, "reason": "no /sys/class/net/v0/device: virtual interface, no NIC counters",
        "ethtool": {}, "rdma": {"device": None, "port": None, "counters": {}, "hw_counters": {}}}
    assert result["counters"]["nosuch0"]["reason"] == "no interface nosuch0 on this node"
    assert runner.calls == []  # nothing to ask ethtool about a virtual interface


def test_backend_only_virtual_interfaces_is_a_note(tmp_path: Path) -> None:
    node = Node(tmp_path)
    nic(node, "eno1", pci=None)
    result = read(tmp_path, {"interfaces": None}, FakeRunner([], which={"ethtool": ETHTOOL}))
    assert result["counters"] == {}
    assert result["notes"] == ["no interface with /sys/class/net/IF/device (only virtual interfaces): "
                               "no NIC counters on this node"]


def test_backend_without_ethtool_still_reads_rdma(tmp_path: Path) -> None:
    node = Node(tmp_path)
    mlx5_tree(node, hw_listing="mlx5-cx4lx-hw_counters.txt", port_ndev=False)
    result = read(tmp_path, {"interfaces": ["ens1f0np0"]}, FakeRunner([], which={"ethtool": None}))
    entry = result["counters"]["ens1f0np0"]
    assert entry["supported"] is True and entry["ethtool"] == {}
    assert entry["rdma"]["port"] == 1 and entry["rdma"]["hw_counters"]["out_of_buffer"] == 135
    assert result["notes"] == ["ethtool is not installed: ethtool -S counters are not read"]


def test_backend_ethtool_failure_without_rdma_is_unsupported_with_reason(tmp_path: Path) -> None:
    node = Node(tmp_path)
    nic(node, "eth0", hca=None, ecn=False)
    runner = FakeRunner([ethtool_answer({})], which={"ethtool": ETHTOOL})
    result = read(tmp_path, {"interfaces": ["eth0"]}, runner)
    entry = result["counters"]["eth0"]
    assert entry["supported"] is False
    assert entry["reason"] == ("ethtool -S eth0 failed (rc=94): Cannot get stats strings information: "
                               "Operation not supported")
    assert result["notes"] == [entry["reason"]]


@pytest.mark.parametrize("bad", ["../etc", "a/b", "", "x" * 16, "eth 0"])
def test_bad_interface_names_fail(tmp_path: Path, bad: str) -> None:
    result = read(tmp_path, {"interfaces": [bad]}, FakeRunner([], which={"ethtool": ETHTOOL}))
    assert result["failed"] is True and "not a network interface name" in result["msg"]
