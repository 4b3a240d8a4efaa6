"""node_topology engine: parsers on recorded outputs, the pairing rule, and real machines end to end.

The recorded machines (tests/fixtures/topology/<machine>/, each file with a .source sidecar) are built
into sysfs trees by topofakes.machine() from their recorded ``lspci -tv``; the module's GPU x NIC
relations are then compared cell by cell with the ``nvidia-smi topo -m`` recorded on the same machine.
"""

from __future__ import annotations

import os

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _node_topology as nt
from ansible_collections.aiinfra.datapath.plugins.module_utils import _node_topology_parse as parse
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from netfakes import FakeRunner
from topofakes import FIXTURES, SysRoot, Tree, fixture, machine, parse_lspci_tree, switch_box, switch_lspci

LSPCI = "/usr/bin/lspci"
SMI = "/usr/bin/nvidia-smi"
REAL_MACHINES = ["asus-esc8000a-e12", "puget-threadripper-pro-wrx90", "nvidia-igx-orin-devkit"]


@pytest.fixture
def node(tmp_path) -> SysRoot:
    root = tmp_path / "node"
    root.mkdir()
    return SysRoot(root)


def recorded_runner(name: str, smi_xml: str | None = None) -> FakeRunner:
    """The recorded tools of machine ``name``; one recorded without ``lspci -vvv`` is read as a node without
    lspci (constructed: its config space, like the recording, says nothing)."""
    which: dict[str, str | None] = {"lspci": LSPCI, "nvidia-smi": SMI}
    if not (FIXTURES / name / "lspci-vvv.txt").exists():
        del which["lspci"]

    def answer(argv):
        if argv == [LSPCI, "-vvv", "-D"]:
            return 0, fixture(name, "lspci-vvv.txt"), ""
        if argv == [SMI, "topo", "-m"]:
            return 0, fixture(name, "nvidia-smi-topo-m.txt"), ""
        if argv == [SMI, "-q", "-x"]:
            if smi_xml is None:
                return 6, "", "(not recorded on this machine)"
            return 0, smi_xml, ""
        return None
    return FakeRunner([answer], which=which)


def read(node, runner, **params) -> dict:
    args = {"root": str(node.root), "lspci": True, "nvidia_smi": True}
    args.update(params)
    result = run(nt.NodeTopology, args, Node(runner, str(node.root)))
    assert "failed" not in result, result
    return result


# --- parsers ----------------------------------------------------------------------------------

def test_lspci_vvv_recorded_fields() -> None:
    devices = parse.parse_lspci_vvv(fixture("asus-esc8000a-e12", "lspci-vvv.txt"))
    nic = devices["0000:21:00.0"]
    assert nic["numa_node"] == 0 and nic["driver"] == "mlx5_core" and nic["express"] == "Endpoint"
    assert (nic["max_payload_cap"], nic["max_payload"], nic["max_read_req"]) == (512, 512, 512)
    assert nic["link_cap"] == {"speed": 32.0, "width": 16} and nic["link_sta"] == {"speed": 32.0, "width": 16}
    assert nic["acs_ctl"]["ReqRedir"] is False
    raid = devices["0000:71:00.0"]  # HighPoint SSD7540: recorded "Width x1 (downgraded)" of x2
    assert raid["link_cap"]["width"] == 2 and raid["link_sta"]["width"] == 1
    assert (raid["max_payload_cap"], raid["max_payload"]) == (512, 256)
    gpu = devices["0000:c1:00.0"]
    assert gpu["link_sta"]["speed"] == 2.5 and gpu["link_cap"]["speed"] == 16.0 and gpu["numa_node"] == 1


def test_lspci_vvv_access_denied_and_acs_on() -> None:
    text = ("0000:17:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)\n"
            "\tCapabilities: <access denied>\n"
            "0000:18:01.0 PCI bridge: constructed\n"
            "\tCapabilities: [40] Express (v2) Downstream Port (Slot+), MSI 00\n"
            "\tCapabilities: [160 v1] Access Control Services\n"
            "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n")
    devices = parse.parse_lspci_vvv(text)
    assert devices["0000:17:00.0"]["config_access"] is False
    bridge = devices["0000:18:01.0"]
    assert bridge["express"] == "Downstream Port (Slot+)"
    assert bridge["acs_ctl"]["ReqRedir"] is True and bridge["acs_ctl"]["EgressCtrl"] is False


@pytest.mark.parametrize("name", REAL_MACHINES)
def test_topo_matrix_recorded(name: str) -> None:
    matrix = parse.parse_topo_matrix(fixture(name, "nvidia-smi-topo-m.txt"))
    assert matrix is not None and matrix["gpus"] == list(range(len(matrix["gpus"])))
    assert all(rel in parse.RELATIONS for cells in matrix["gpu_nic"].values() for rel in cells.values())


def test_topo_matrix_old_format_and_no_matrix() -> None:
    # the older layout names RDMA devices as columns (seen in many public reports)
    text = ("\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
            "GPU0\t X \tNV1\tPHB\t0-7\n"
            "GPU1\tNV1\t X \tPHB\t0-7\n"
            "mlx5_0\tPHB\tPHB\t X \t\n\nLegend:\n\n  X    = Self\n")
    matrix = parse.parse_topo_matrix(text)
    assert matrix["gpu_nic"] == {0: {"mlx5_0": "PHB"}, 1: {"mlx5_0": "PHB"}}
    assert matrix["cpu_affinity"] == {0: "0-7", 1: "0-7"}
    assert parse.parse_topo_matrix("No devices were found\n") is None


def test_nvidia_smi_xml_recorded() -> None:
    gpus = parse.parse_nvidia_smi_xml((FIXTURES / "nvidia-smi-q-x-gtx980.xml").read_text())
    assert gpus == [{"index": 0, "pci": "0000:01:00.0", "name": "GeForce GTX 980",
                     "link": {"speed": 8.0, "width": 16, "max_speed": 8.0, "max_width": 16}}]
    with pytest.raises(ValueError):
        parse.parse_nvidia_smi_xml("not xml")
    # constructed: a non-zero PCI domain, and an id that is not a bus id (the pci_bus_id element is used)
    text = ('<nvidia_smi_log><gpu id="00000001:1A:00.0"/><gpu id="GPU-x"><pci><pci_bus_id>00000000:02:00.0'
            '</pci_bus_id></pci></gpu></nvidia_smi_log>')
    assert [g["pci"] for g in parse.parse_nvidia_smi_xml(text)] == ["0001:1a:00.0", "0000:02:00.0"]


def test_small_parsers() -> None:
    assert parse.parse_speed("16.0 GT/s PCIe") == 16.0 and parse.parse_speed("Unknown") is None
    assert parse.parse_width("x8") == 8 and parse.parse_width("16x") == 16 and parse.parse_width("4") == 4
    assert parse.parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11] and parse.parse_cpulist("x") == []
    assert parse.normalize_bdf("00000000:1A:00.0") == "0000:1a:00.0" and parse.normalize_bdf("nope") is None
    assert parse.parse_cmdline("ro iommu=pt amd_iommu=off quiet") == {"ro": True, "iommu": "pt",
                                                                      "amd_iommu": "off", "quiet": True}


def test_lspci_tree_reader_keeps_switch_levels() -> None:
    functions = dict((f["bdf"], f) for f in parse_lspci_tree(fixture("asus-esc8000a-e12", "lspci-tv.txt")))
    # 60:01.1 -> 61:00.0 (switch up) -> 62:00.0 (down) -> 63:00.0 (up) -> 64:10.0 (down) -> 65:00.0 NVMe
    chain, bdf = [], "0000:65:00.0"
    while functions[bdf]["parent"]:
        bdf = functions[bdf]["parent"]
        chain.append(bdf)
    assert chain == ["0000:64:10.0", "0000:63:00.0", "0000:62:00.0", "0000:61:00.0", "0000:60:01.1"]


# --- the pairing rule -------------------------------------------------------------------------

def dev(host: str | None, *bridges: str, numa: int | None = 0) -> dict:
    return {"host_bridge": host, "bridges": list(bridges), "numa_node": numa}


@pytest.mark.parametrize("first, second, expected", [
    (dev("pci0000:00", "rp"), dev("pci0000:00", "rp"), "PIX"),                       # two functions, one port
    (dev("pci0000:00", "rp", "up", "dA"), dev("pci0000:00", "rp", "up", "dB"), "PIX"),  # one switch
    (dev("pci0000:00", "rp", "u1", "d1", "u2", "d2a"), dev("pci0000:00", "rp", "u1", "d3"), "PXB"),
    (dev("pci0000:00", "rp", "u1", "d1", "u2", "d2a"), dev("pci0000:00", "rp", "u1", "d1", "u2", "d2b"), "PIX"),
    (dev("pci0000:00", "rpA"), dev("pci0000:00", "rpB"), "PHB"),
    (dev("pci0000:00", "rpA", numa=0), dev("pci0000:20", "rpB", numa=0), "NODE"),
    (dev("pci0000:00", "rpA", numa=0), dev("pci0000:80", "rpB", numa=1), "SYS"),
    (dev("pci0000:00", "rpA", numa=None), dev("pci0000:80", "rpB", numa=1), "unknown"),
    (dev(None, "x"), dev("pci0000:00", "rpB"), "unknown"),
])
def test_relation(first: dict, second: dict, expected: str) -> None:
    assert nt.relation(first, second) == expected


def test_unknown_numa_on_a_single_node_machine_is_node() -> None:
    assert nt.relation(dev("pci0000:00", "a", numa=None), dev("pci0000:20", "b", numa=None), single_numa=True) == "NODE"


# --- recorded real machines -------------------------------------------------------------------

@pytest.mark.parametrize("name", REAL_MACHINES)
def test_real_machine_pairing_equals_recorded_nvidia_smi_matrix(node, name: str) -> None:
    machine(node, name)
    result = read(node, recorded_runner(name))
    topology = result["topology"]
    recorded = parse.parse_topo_matrix(fixture(name, "nvidia-smi-topo-m.txt"))
    ours = dict((gpu["index"], dict((pair["name"], pair["relation"]) for pair in gpu["nics"]
                                    if pair["name"].startswith("mlx5_"))) for gpu in topology["gpus"])
    assert ours == recorded["gpu_nic"]
    assert topology["vendor"]["agrees"] is True and topology["vendor"]["differences"] == []
    # the CPU affinity nvidia-smi printed is the GPU's local_cpulist
    assert dict((gpu["index"], gpu["local_cpulist"]) for gpu in topology["gpus"]) == recorded["cpu_affinity"]
    assert "nvidia-smi -q -x failed (rc=6): (not recorded on this machine)" in result["notes"]


def test_esc8000a_details(node) -> None:
    machine(node, "asus-esc8000a-e12")
    topology = read(node, recorded_runner("asus-esc8000a-e12"))["topology"]
    gpu0 = topology["gpus"][0]
    assert gpu0["pci"] == "0000:01:00.0" and gpu0["root_port"] == "0000:00:01.1"
    assert gpu0["nearest_nics"] == ["mlx5_0", "mlx5_1"]
    assert gpu0["nearest_nvme"] == ["nvme0"] and gpu0["nvme"][0]["relation"] == "PHB"
    assert gpu0["link"]["trained_down"] == ["speed"]  # recorded idle GPU: 2.5 of 16 GT/s
    nvme_far = [p for p in gpu0["nvme"] if p["pci"] == "0000:a5:00.0"][0]
    assert nvme_far["relation"] == "SYS"
    nics = dict((nic["pci"], nic) for nic in topology["nics"])
    assert nics["0000:21:00.0"]["pcie"]["max_read_req"] == 512
    assert nics["0000:21:00.1"]["pcie"] == {"known": False, "reason": "lspci -vvv does not list 0000:21:00.1"}
    assert nics["0000:82:00.0"]["name"] == "enp130s0f0" and nics["0000:82:00.0"]["rdma"] == []
    assert topology["tools"] == {"lspci": "read", "nvidia_smi": "read"}


def test_puget_single_numa_node_without_numa_ids(node) -> None:
    machine(node, "puget-threadripper-pro-wrx90")
    topology = read(node, recorded_runner("puget-threadripper-pro-wrx90"))["topology"]
    assert [gpu["numa_node"] for gpu in topology["gpus"]] == [0, 0]
    gpus = topology["gpus"]
    assert gpus[0]["host_bridge"] == gpus[1]["host_bridge"] == "pci0000:c0"
    assert [p["relation"] for p in gpus[0]["nics"] if p["name"].startswith("mlx5_")] == ["NODE", "NODE"]


def test_igx_devkit_pxb_in_a_non_zero_pci_domain_without_config_space(node) -> None:
    """Recorded with lspci -tv and nvidia-smi topo -mp only: no link state, no config space, one NUMA node."""
    machine(node, "nvidia-igx-orin-devkit")
    topology = read(node, recorded_runner("nvidia-igx-orin-devkit"))["topology"]
    gpu = topology["gpus"][0]
    assert (gpu["pci"], gpu["host_bridge"], gpu["root_port"]) == ("0005:09:00.0", "pci0005:00", "0005:00:00.0")
    assert gpu["nearest_nics"] == ["mlx5_0", "mlx5_1"] and gpu["numa_node"] == 0
    # the Realtek ports sit below another host bridge (pci0001:00) of the one NUMA node
    assert [(p["pci"], p["relation"]) for p in gpu["nics"] if not p["rdma"]] == [("0001:03:00.0", "NODE"),
                                                                                 ("0001:35:00.0", "NODE")]
    assert gpu["link"]["trained_down"] is None and gpu["pcie"]["known"] is False
    assert topology["tools"] == {"lspci": "unknown", "nvidia_smi": "read"}


# --- constructed trees ------------------------------------------------------------------------

def lspci_only(text: str) -> FakeRunner:
    def answer(argv):
        return (0, text, "") if argv == [LSPCI, "-vvv", "-D"] else None
    return FakeRunner([answer], which={"lspci": LSPCI})


def test_constructed_switch_pix_acs_and_sys(node) -> None:
    switch_box(node)
    topology = read(node, lspci_only(switch_lspci(acs_redirect=True)))["topology"]
    gpu = topology["gpus"][0]
    assert gpu["index"] == 0 and gpu["bridges"] == ["0000:15:01.0", "0000:16:00.0", "0000:17:00.0"]
    near, far = gpu["nics"]
    assert (near["name"], near["relation"], far["name"], far["relation"]) == ("mlx5_0", "PIX", "mlx5_1", "SYS")
    assert near["bridges"] == ["0000:16:00.0", "0000:17:00.0", "0000:17:01.0"]
    assert near["acs_redirect"] == ["0000:17:00.0", "0000:17:01.0"]
    assert gpu["nvme"][0]["relation"] == "PIX" and gpu["nearest_nvme"] == ["nvme0"]
    nic = topology["nics"][0]
    assert nic["link"]["trained_down"] == ["width"] and nic["pcie"]["ats"] == {"supported": True, "enabled": True}
    assert topology["bridges"]["0000:16:00.0"]["pcie"]["express"] == "Upstream Port (Slot+)"
    assert topology["tools"]["nvidia_smi"] == "unknown" and topology["vendor"]["agrees"] is None


def test_gpu_without_nvidia_smi_is_noted(node) -> None:
    switch_box(node)
    result = read(node, lspci_only(switch_lspci()))
    assert "nvidia-smi is not installed: GPUs are indexed in PCI order, no vendor matrix to compare" in result["notes"]


def test_constructed_switch_acs_off(node) -> None:
    switch_box(node)
    topology = read(node, lspci_only(switch_lspci(acs_redirect=False)))["topology"]
    assert topology["gpus"][0]["nics"][0]["acs_redirect"] == []


def test_no_tools_and_no_gpus(node) -> None:
    """The lab's shape: no GPU, no lspci, no nvidia-smi: notes say so; NICs and NVMe still listed."""
    tree = Tree(node)
    tree.numa_node(0, "0-3")
    tree.function("0000:00:03.0", "pci0000:00", None, "0x020000", vendor="0x1af4")
    tree.function("0000:00:04.0", "pci0000:00", None, "0x010802", vendor="0x1b36")
    tree.nvme("0000:00:04.0", "nvme0")
    result = read(node, FakeRunner([], which={}))
    topology = result["topology"]
    assert topology["gpus"] == []
    assert [(n["pci"], n["numa_node"]) for n in topology["nics"]] == [("0000:00:03.0", 0)]
    assert [(n["name"], n["numa_node"]) for n in topology["nvme"]] == [("nvme0", 0)]
    assert topology["nics"][0]["pcie"]["known"] is False
    assert any(note.startswith("no GPU on this node") for note in result["notes"])
    assert any(note.startswith("lspci is not installed") for note in result["notes"])
    assert topology["tools"] == {"lspci": "unknown", "nvidia_smi": "unknown"}


def test_failing_tools_and_denied_config_space(node) -> None:
    switch_box(node)

    def answer(argv):
        if argv == [LSPCI, "-vvv", "-D"]:
            return 0, "0000:19:00.0 Ethernet controller: x\n\tCapabilities: <access denied>\n", ""
        if argv[:1] == [SMI]:
            return 9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        return None
    result = read(node, FakeRunner([answer], which={"lspci": LSPCI, "nvidia-smi": SMI}))
    nic = result["topology"]["nics"][0]
    assert nic["pcie"]["known"] is False and "run as root" in nic["pcie"]["reason"]
    assert any("couldn't communicate with the NVIDIA driver" in note for note in result["notes"])
    assert any("config space of 1 function(s)" in note for note in result["notes"])


def test_iommu_and_gpudirect(node) -> None:
    switch_box(node)
    node.put("/proc/cmdline", "BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt\n")
    node.put("/sys/class/iommu/dmar0/uevent", "")
    for bdf in ("0000:18:00.0", "0000:19:00.0"):
        node.put("/sys/devices/pci0000:15/x/%s-group/type" % bdf, "identity\n")
        target = node.path("/sys/devices/pci0000:15/x/%s-group" % bdf)
        link = node.path("/sys/bus/pci/devices/%s" % bdf).resolve() / "iommu_group"
        os.symlink(os.path.relpath(str(target), str(link.parent)), str(link))
    tree = Tree(node)
    tree.module("nvidia")
    tree.module("nvidia_peermem")
    node.put("/etc/cufile.json", '{\n  // comment\n  "properties": {"use_pci_p2pdma": true}\n}\n')
    topology = read(node, FakeRunner([], which={}), lspci=False, nvidia_smi=False)["topology"]
    assert topology["iommu"]["mode"] == "passthrough"
    assert topology["iommu"]["cmdline"] == {"iommu": "pt", "intel_iommu": "on"}
    assert topology["gpudirect"]["rdma"] is True and topology["gpudirect"]["storage"] is False
    assert topology["gpudirect"]["cufile_json"] == {"present": True, "valid": True}
    assert topology["tools"] == {"lspci": "not used", "nvidia_smi": "not used"}


# --- outputs: NFD labels and nccl.env ---------------------------------------------------------

def test_labels_and_nccl_env_on_a_recorded_machine(node) -> None:
    from ansible_collections.aiinfra.datapath.plugins.module_utils import _node_topology_outputs as out

    machine(node, "asus-esc8000a-e12")
    topology = read(node, recorded_runner("asus-esc8000a-e12"))["topology"]
    assert out.topology_labels(topology) == {
        "aiinfra.io/gpu-count": "4", "aiinfra.io/gpu-nic-affinity": "node",
        "aiinfra.io/gpudirect-rdma": "false", "aiinfra.io/gpudirect-storage": "false"}
    assert out.nccl_env(topology).splitlines()[2:] == [
        'NCCL_IB_HCA="=mlx5_0,mlx5_1,mlx5_2,mlx5_3"',
        "AIINFRA_GPU0_HCA=mlx5_0,mlx5_1", "AIINFRA_GPU1_HCA=mlx5_0,mlx5_1",
        "AIINFRA_GPU2_HCA=mlx5_2,mlx5_3", "AIINFRA_GPU3_HCA=mlx5_2,mlx5_3"]


@pytest.mark.parametrize("acs, expected", [(False, "true"), (True, "false")])
def test_gpudirect_label_needs_peermem_and_a_clean_path(node, acs: bool, expected: str) -> None:
    from ansible_collections.aiinfra.datapath.plugins.module_utils import _node_topology_outputs as out

    switch_box(node).module("nvidia_peermem")
    topology = read(node, lspci_only(switch_lspci(acs_redirect=acs)))["topology"]
    labels = out.topology_labels(topology)
    assert labels["aiinfra.io/gpu-nic-affinity"] == "pix" and labels["aiinfra.io/gpudirect-rdma"] == expected
    assert out.nccl_env(topology).splitlines()[2:] == ['NCCL_IB_HCA="=mlx5_0"', "AIINFRA_GPU0_HCA=mlx5_0"]


def test_no_gpus_no_labels_no_env(node) -> None:
    from ansible_collections.aiinfra.datapath.plugins.module_utils import _node_topology_outputs as out

    Tree(node).function("0000:00:03.0", "pci0000:00", None, "0x020000")
    topology = read(node, FakeRunner([], which={}))["topology"]
    assert out.topology_labels(topology) == {} and out.nccl_env(topology) is None
