"""node_topology through main(): argument spec, check mode, read-only result, a recorded machine.

The sysfs tree is the recorded ASUS ESC8000A-E12 built by topofakes.machine() (see its docstring for
what is recorded and what is constructed); lspci -vvv and nvidia-smi topo -m are the recorded outputs.
"""

from __future__ import annotations

from ansible_collections.aiinfra.datapath.plugins.modules import node_topology
from netfakes import FakeRunner, use
from topofakes import Tree, fixture, machine

LSPCI = "/usr/bin/lspci"
SMI = "/usr/bin/nvidia-smi"
NAME = "asus-esc8000a-e12"


def recorded(monkeypatch) -> FakeRunner:
    def answer(argv):
        if argv == [LSPCI, "-vvv", "-D"]:
            return 0, fixture(NAME, "lspci-vvv.txt"), ""
        if argv == [SMI, "topo", "-m"]:
            return 0, fixture(NAME, "nvidia-smi-topo-m.txt"), ""
        if argv == [SMI, "-q", "-x"]:
            return 6, "", "(not recorded on this machine)"
        return None
    return use(monkeypatch, FakeRunner([answer], which={"lspci": LSPCI, "nvidia-smi": SMI}))


def test_recorded_machine_in_check_mode_reads_and_changes_nothing(run_module, monkeypatch, node) -> None:
    machine(node, NAME)
    fake = recorded(monkeypatch)
    before = node.snapshot()
    result = run_module(node_topology.main, {"root": str(node.root)}, check_mode=True)
    assert result["changed"] is False and "actions" not in result and "diff" not in result
    topology = result["topology"]
    assert [gpu["nearest_nics"] for gpu in topology["gpus"]] == [["mlx5_0", "mlx5_1"], ["mlx5_0", "mlx5_1"],
                                                                 ["mlx5_2", "mlx5_3"], ["mlx5_2", "mlx5_3"]]
    assert topology["vendor"]["agrees"] is True
    assert fake.calls == [[LSPCI, "-vvv", "-D"], [SMI, "-q", "-x"], [SMI, "topo", "-m"]]
    assert node.snapshot() == before


def test_tools_switched_off_run_nothing(run_module, monkeypatch, node) -> None:
    machine(node, NAME)
    fake = recorded(monkeypatch)
    result = run_module(node_topology.main, {"root": str(node.root), "lspci": False, "nvidia_smi": False})
    assert fake.calls == []
    assert result["topology"]["tools"] == {"lspci": "not used", "nvidia_smi": "not used"}
    assert result["topology"]["vendor"]["agrees"] is None
    # without nvidia-smi the GPU index is the PCI order, which is nvidia-smi's default order too
    pci_order = ["0000:01:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:e1:00.0"]
    assert [gpu["pci"] for gpu in result["topology"]["gpus"]] == pci_order


def test_gpu_index_follows_nvidia_smi_order(run_module, monkeypatch, node) -> None:
    machine(node, NAME)
    # constructed: an nvidia-smi that enumerates the GPUs in another order than PCI (CUDA_DEVICE_ORDER-like)
    xml = ("<?xml version=\"1.0\" ?><nvidia_smi_log>"
           + "".join("<gpu id=\"00000000:%s:00.0\"><product_name>NVIDIA RTX 6000 Ada Generation</product_name>"
                     "</gpu>" % bus for bus in ("C1", "E1", "01", "41"))
           + "</nvidia_smi_log>")

    def answer(argv):
        if argv == [SMI, "-q", "-x"]:
            return 0, xml, ""
        if argv == [SMI, "topo", "-m"]:
            return 0, "No devices were found\n", ""
        return None
    use(monkeypatch, FakeRunner([answer], which={"nvidia-smi": SMI}))
    result = run_module(node_topology.main, {"root": str(node.root)})
    gpus = result["topology"]["gpus"]
    assert [(g["index"], g["pci"]) for g in gpus][:2] == [(0, "0000:c1:00.0"), (1, "0000:e1:00.0")]
    assert gpus[0]["name"] == "NVIDIA RTX 6000 Ada Generation"
    assert "nvidia-smi topo -m printed no matrix" in result["notes"]
    assert any(note.startswith("lspci is not installed") for note in result["notes"])


def test_lab_like_node_without_gpus(run_module, monkeypatch, node) -> None:
    tree = Tree(node)
    tree.numa_node(0, "0-1")
    tree.function("0000:00:03.0", "pci0000:00", None, "0x020000", vendor="0x1af4")
    tree.virtual_netdev("eth0")
    use(monkeypatch, FakeRunner([], which={}))
    result = run_module(node_topology.main, {"root": str(node.root)})
    assert result["topology"]["gpus"] == []
    assert result["topology"]["nics"][0]["numa_node"] == 0
    assert result["topology"]["virtual_interfaces"] == ["eth0"]
    assert any(note.startswith("no GPU on this node") for note in result["notes"])
    assert any(note.startswith("no NVMe controller on this node") for note in result["notes"])


def test_bad_option_type_fails_cleanly(run_module, monkeypatch, node) -> None:
    use(monkeypatch, FakeRunner([], which={}))
    result = run_module(node_topology.main, {"root": str(node.root), "lspci": "sometimes"}, expect_failure=True)
    assert "lspci" in result["msg"]
