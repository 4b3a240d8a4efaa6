"""rdma_counters through main(): argument spec, check mode, read-only result, recorded outputs.

The sysfs trees are constructed (see tests/unit/plugins/module_utils/test_rdma_counters.py); the
ethtool and hw_counters values are the recorded ones under tests/fixtures/measure/rdma/.
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.aiinfra.datapath.plugins.module_utils import _rdma_counters as rc
from ansible_collections.aiinfra.datapath.plugins.modules import rdma_counters
from netfakes import FakeRunner, nic, use

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "measure" / "rdma"
ETHTOOL = "/usr/sbin/ethtool"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def tree(node) -> None:
    nic(node, "ens1f0np0", ecn=False)
    nic(node, "eno1", pci=None)
    port = "/sys/devices/pci0000:e0/0000:e6:00.0/infiniband/mlx5_0/ports/1"
    for counter, value in rc.parse_counter_listing(fixture("mlx5-cx6dx-hw_counters.txt")).items():
        node.put("%s/hw_counters/%s" % (port, counter), "%d\n" % value)
    node.put(port + "/gid_attrs/ndevs/0", "ens1f0np0\n")


def runner(monkeypatch) -> FakeRunner:
    outputs = {"ens1f0np0": fixture("mlx5-cx6dx-k5.15-nonzero.txt"), "eno1": fixture("veth-ethtool-S.txt")}

    def ethtool(argv):
        if argv[:2] == [ETHTOOL, "-S"]:
            return 0, outputs[argv[2]], ""
        return None
    return use(monkeypatch, FakeRunner([ethtool], which={"ethtool": ETHTOOL}))


def test_snapshot_in_check_mode_is_the_same_read(run_module, monkeypatch, node) -> None:
    tree(node)
    fake = runner(monkeypatch)
    before = node.snapshot()
    result = run_module(rdma_counters.main, {"root": str(node.root)}, check_mode=True)
    assert result["changed"] is False and "actions" not in result and "diff" not in result
    assert list(result["counters"]) == ["ens1f0np0"]
    entry = result["counters"]["ens1f0np0"]
    assert entry["ethtool"]["rx_discards_phy"] == 58591428329
    assert entry["rdma"]["hw_counters"]["np_ecn_marked_roce_packets"] == 21278189006
    assert fake.calls == [[ETHTOOL, "-S", "ens1f0np0"]]
    assert node.snapshot() == before


def test_named_veth_is_unsupported_and_deltas_work_on_the_result(run_module, monkeypatch, node) -> None:
    tree(node)
    runner(monkeypatch)
    args = {"root": str(node.root), "interfaces": ["ens1f0np0", "eno1"]}
    first = run_module(rdma_counters.main, args)
    assert first["counters"]["eno1"]["supported"] is False
    assert first["counters"]["eno1"]["reason"] == "no /sys/class/net/eno1/device: virtual interface, no NIC counters"
    # constructed: the NP sent 40 more CNPs between the two snapshots
    port = "/sys/devices/pci0000:e0/0000:e6:00.0/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent"
    node.put(port, "%d\n" % (1052612505 + 40))
    second = run_module(rdma_counters.main, args)
    deltas = rc.counter_deltas(first["counters"], second["counters"])
    assert deltas["ens1f0np0"]["roce"]["np_cnp_sent"] == 40
    assert deltas["ens1f0np0"]["roce"]["rx_discards_phy"] == 0
    assert deltas["eno1"]["supported"] is False


def test_bad_name_fails_the_module(run_module, monkeypatch, node) -> None:
    runner(monkeypatch)
    result = run_module(rdma_counters.main, {"root": str(node.root), "interfaces": ["../x"]}, expect_failure=True)
    assert result["msg"] == "rdma_counters: not a network interface name: ../x"
