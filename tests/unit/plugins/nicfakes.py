"""Node trees for nic_affinity: recorded ``/proc/interrupts`` of mlx5 nodes with the sysfs around them.

What is recorded (tests/fixtures/host_stack/*.source names each source) and what is constructed here:

- ``crow()``: the recorded ``cat /proc/interrupts | grep mlx`` of a 12-CPU Ryzen with a dual-port ConnectX
  (verbatim lines). Constructed: the header line grep dropped (12 CPU columns), the PCI functions
  0000:01:00.0/.1 below a root port, their netdevs and RDMA devices, ``msi_irqs`` holding exactly the IRQ
  numbers of each BDF's recorded lines, ``local_cpulist`` 0-11 (one package), ``/proc/irq/N``.
- ``azure_vm()``: the recorded ``/proc/interrupts`` of an Azure VM with two mlx5 VFs (verbatim, whole file).
  Constructed: the VFs' sysfs (``msi_irqs`` from the IRQs named ``@pci:BDF``, ``numa_node`` -1,
  ``local_cpulist`` 0-7), and an interrupt controller that keeps every IRQ on CPU 0
  (``effective_affinity_list`` stays ``0``), as the sender of the recording reports.
- ``asus()``: the recorded ASUS ESC8000A-E12 (two NUMA nodes of 32 CPUs, four ConnectX-7 ports; the PCI
  tree, NUMA nodes and each function's NUMA node from its recorded lspci/numactl, topofakes.machine).
  Constructed: 16 completion IRQs and one async IRQ per port, named and numbered in the pattern of the crow
  recording (``mlx5_async0@pci:BDF`` at MSI-X index 0, ``mlx5_compK@pci:BDF`` at index K+1).

The kernel the trees stand for: ``effective_affinity_list`` is a link to ``smp_affinity_list`` (the
interrupt controller grants the requested CPU), except where a tree says otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from netfakes import FakeRunner
from topofakes import SysRoot, Tree, machine, netdev_name

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "host_stack"
IP = "/usr/sbin/ip"
ETHTOOL = "/usr/sbin/ethtool"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def header(cpus: int) -> str:
    return " " * 11 + "".join("CPU%-8d" % c for c in range(cpus)).rstrip() + "\n"


def irq_dirs(node: SysRoot, irqs: list[int], affinity: str, stuck: str | None = None) -> None:
    """``/proc/irq/N``: smp_affinity_list ``affinity``; effective follows it unless ``stuck`` holds it."""
    for irq in irqs:
        base = "/proc/irq/%d" % irq
        node.put(base + "/smp_affinity_list", affinity + "\n")
        node.put(base + "/node", "0\n")
        effective = node.path(base + "/effective_affinity_list")
        if stuck is not None:
            effective.write_text(stuck + "\n")
        else:
            os.symlink("smp_affinity_list", str(effective))


def msi(node: SysRoot, bdf: str, irqs: list[int]) -> None:
    """The function's ``msi_irqs/N`` entries (written through its /sys/bus/pci/devices link)."""
    for irq in irqs:
        node.put("/sys/bus/pci/devices/%s/msi_irqs/%d" % (bdf, irq), "msix\n")


def irqs_named(text: str, bdf: str) -> list[int]:
    return sorted(int(line.split(":")[0]) for line in text.splitlines()
                  if ("@pci:%s" % bdf) in line and line.split(":")[0].strip().isdigit())


def base_node(node: SysRoot, cpus: int, kubelet: str | None) -> None:
    node.put("/sys/devices/system/cpu/online", "0-%d\n" % (cpus - 1))
    node.put("/sys/devices/system/cpu/isolated", "\n")
    node.put("/usr/bin/python3", "")
    if kubelet:
        node.put("/var/lib/kubelet/config.yaml", fixture(kubelet))


def crow(node: SysRoot, kubelet: str | None = "kubelet-k3s-10420.yaml") -> dict:
    recorded = fixture("crow-proc-interrupts-grep-mlx.txt")
    node.put("/proc/interrupts", header(12) + recorded)
    base_node(node, 12, kubelet)
    tree = Tree(node)
    tree.function("0000:00:01.1", "pci0000:00", None, "0x060400", vendor="0x1022")
    nics = {}
    for index, bdf in enumerate(("0000:01:00.0", "0000:01:00.1")):
        tree.function(bdf, "pci0000:00", "0000:00:01.1", "0x020000", numa=-1, cpus="0-11", driver="mlx5_core")
        name = "enp1s0f%dnp%d" % (index, index)
        tree.netdev(bdf, name)
        tree.rdma(bdf, "mlx5_%d" % index)
        irqs = irqs_named(recorded, bdf)
        msi(node, bdf, irqs)
        irq_dirs(node, irqs, "0-11")
        nics[name] = bdf
    return {"nics": nics, "cpus": 12, "local": {name: list(range(12)) for name in nics}}


def azure_vm(node: SysRoot, kubelet: str | None = "kubelet-eks-kube-reserved.json") -> dict:
    recorded = fixture("lkml-azure-mlx5-proc-interrupts.txt")
    node.put("/proc/interrupts", recorded)
    base_node(node, 8, kubelet)
    tree = Tree(node)
    nics = {}
    for bdf in ("8b76:00:02.0", "83a4:00:02.0"):
        domain = "pci%s:00" % bdf.split(":", maxsplit=1)[0]
        tree.function(bdf, domain, None, "0x020000", numa=-1, cpus="0-7", driver="mlx5_core")
        name = netdev_name(bdf, "np0")
        tree.netdev(bdf, name)
        irqs = irqs_named(recorded, bdf)
        msi(node, bdf, irqs)
        irq_dirs(node, irqs, "0-7", stuck="0")
        nics[name] = bdf
    return {"nics": nics, "cpus": 8, "local": {name: list(range(8)) for name in nics}}


def asus(node: SysRoot, kubelet: str | None = "kubelet-k3s-10420.yaml", isolated: str | None = "24-31,56-63",
         comps: int = 16) -> dict:
    built = machine(node, "asus-esc8000a-e12")
    base_node(node, 64, kubelet)
    if isolated:
        node.put("/etc/tuned/active_profile", "cpu-partitioning\n")
        node.put("/usr/lib/tuned/cpu-partitioning/tuned.conf", fixture("tuned-cpu-partitioning.conf"))
        node.put("/etc/tuned/cpu-partitioning-variables.conf",
                 fixture("tuned-cpu-partitioning-variables.conf") + "isolated_cores=%s\n" % isolated)
    lines, irq, nics, local = [], 200, {}, {}
    for rdma, bdf in built["nic"]:
        if rdma is None:  # not a ConnectX port (the board's own Ethernet): not a rail
            continue
        name = netdev_name(bdf, "np0")
        numa = int(node.path("/sys/bus/pci/devices/%s/numa_node" % bdf).read_text())
        cpus = node.path("/sys/bus/pci/devices/%s/local_cpulist" % bdf).read_text().strip()
        irqs = []
        for index in range(comps + 1):
            label = "mlx5_async0" if index == 0 else "mlx5_comp%d" % (index - 1)
            lines.append("%4d: %s  IR-PCI-MSIX-%s   %2d-edge      %s@pci:%s\n"
                         % (irq, " ".join("%10d" % 0 for _c in range(64)), bdf, index, label, bdf))
            irqs.append(irq)
            irq += 1
        msi(node, bdf, irqs)
        irq_dirs(node, irqs, "0-63")
        nics[name] = bdf
        local[name] = [c for part in cpus.split(",")
                       for c in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)]
        assert numa in (0, 1)
    node.put("/proc/interrupts", header(64) + "".join(lines))
    return {"nics": nics, "cpus": 64, "local": local}


def links_json(names: list[str]) -> str:
    return json.dumps([{"ifindex": i + 2, "ifname": name, "mtu": 9000, "address": "02:00:00:00:00:%02x" % i,
                        "link_type": "ether", "operstate": "UP"} for i, name in enumerate(sorted(names))])


class FakeEthtool:
    """``ethtool -l|-L|-g|-G IF`` over in-memory channel and ring settings (mlx5: combined only)."""

    def __init__(self, names: list[str], combined: int = 12, max_combined: int = 63, rings: int = 1024,
                 max_rings: int = 8192) -> None:
        self.state = {name: {"channels": {"max": {"rx": None, "tx": None, "other": None, "combined": max_combined},
                                          "current": {"rx": None, "tx": None, "other": None, "combined": combined}},
                             "rings": {"max": {"rx": max_rings, "tx": max_rings},
                                       "current": {"rx": rings, "tx": rings}}} for name in names}
        self.sets: list[list[str]] = []

    def _render(self, name: str, part: str) -> str:
        keys = (("RX", "rx"), ("TX", "tx"), ("Other", "other"), ("Combined", "combined")) if part == "channels" \
            else (("RX", "rx"), ("RX Mini", "mini"), ("RX Jumbo", "jumbo"), ("TX", "tx"))
        title = "Channel parameters for %s:" % name if part == "channels" else "Ring parameters for %s:" % name
        out = [title]
        for section, label in (("max", "Pre-set maximums:"), ("current", "Current hardware settings:")):
            out.append(label)
            for text, key in keys:
                value = self.state[name][part][section].get(key)
                out.append("%s:\t%s" % (text, "n/a" if value is None else value))
        return "\n".join(out) + "\n"

    def __call__(self, argv: list[str]):
        if argv[:1] != [ETHTOOL]:
            return None
        flag, name = argv[1], argv[2]
        if name not in self.state:
            return 1, "", "netlink error: no device matches name (offset 24)\n"
        part = "channels" if flag in ("-l", "-L") else "rings"
        if flag in ("-l", "-g"):
            return 0, self._render(name, part), ""
        self.sets.append(argv)
        pairs = argv[3:]
        for key, value in zip(pairs[0::2], pairs[1::2], strict=True):
            self.state[name][part]["current"][key] = int(value)
        return 0, "", ""


def runner(names: list[str], ethtool: FakeEthtool | None = None, systemctl: bool = False) -> FakeRunner:
    links = links_json(names)

    def ip(argv: list[str]):
        if argv == [IP, "-j", "-d", "link", "show"]:
            return 0, links, ""
        return None

    tools = {"ip": IP, "ethtool": ETHTOOL}
    if systemctl:
        tools["systemctl"] = "/usr/bin/systemctl"
    return FakeRunner([ip, ethtool or FakeEthtool(names)], which=tools)
