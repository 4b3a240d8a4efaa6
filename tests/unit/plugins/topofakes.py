"""Sysfs trees for node_topology: built from recorded ``lspci -tv`` output, or by hand.

:func:`machine` turns a recorded machine under ``tests/fixtures/topology/<name>/`` into the sysfs a
kernel would show for it: the PCI tree (host bridges, bridges, functions) exactly as ``lspci -tv``
recorded it, NUMA nodes from the recorded ``numactl --hardware``, each function's NUMA node from the
recorded ``lspci -vvv`` ("NUMA node:", per host bridge), link speed and width from the recorded
LnkCap/LnkSta. What the recordings do not hold is constructed and named so: the PCI class (from the
device description), the RDMA device names (``mlx5_N`` in PCI order of the Mellanox functions, as
mlx5_core names them at probe), the netdev names (systemd's ``enpXsYfZnp0`` form, ``enPDpXsYfZnp0``
outside PCI domain 0) and NVMe controller names (``nvmeN`` in PCI order).

A machine recorded without ``lspci -vvv`` gets no link attributes and no driver links, and every
function's ``numa_node`` is -1 (unknown); one recorded without ``numactl --hardware`` gets its NUMA nodes
constructed from the recorded ``nvidia-smi topo -m``: each "NUMA Affinity" id with the "CPU Affinity"
list of its GPUs (see each machine's .source for what it lacks).

:class:`Tree` builds small trees by hand (the constructed fixtures: switches, ACS, trained-down
links). Every symlink is relative, as in the kernel's sysfs, so paths resolve below the root.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from netfakes import Node

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "topology"

_ENTRY = re.compile(r"([0-9a-f]{2})\.([0-7])(?:-\[([0-9a-f]{2})(?:-[0-9a-f]{2})?\])?")
_ROOT = re.compile(r"\[([0-9a-f]{4}):([0-9a-f]{2})\]")


def fixture(machine_name: str, name: str) -> str:
    return (FIXTURES / machine_name / name).read_text()


def parse_lspci_tree(text: str) -> list[dict]:
    """``lspci -tv`` -> functions in order, each ``{bdf, parent, host_bridge, description, bridge}``.

    A function belongs to the bus whose devices start at its column; a bridge's secondary bus
    starts at the column of the first function printed after it on its line.
    """
    functions: list[dict] = []
    bus_at: dict[int, tuple[str, str, str | None, str]] = {}
    for line in text.splitlines():
        tree, _sep, description = re.split(r"(?<=\.[0-7])  ", line, maxsplit=1)[0], "", ""
        if len(tree) < len(line):
            description = line[len(tree):].strip()
        pos = 0
        pending: tuple[str, str, str | None, str] | None = None
        while pos < len(tree):
            root = _ROOT.match(tree, pos)
            if root:
                domain, bus = root.group(1), root.group(2)
                pending = (domain, bus, None, "pci%s:%s" % (domain, bus))
                pos = root.end()
                continue
            entry = _ENTRY.match(tree, pos)
            if entry and (pos == 0 or tree[pos - 1] in "-+\\ "):
                if pending is not None:
                    bus_at[pos] = pending
                    pending = None
                domain, bus, parent, host = bus_at[pos]
                bdf = "%s:%s:%s.%s" % (domain, bus, entry.group(1), entry.group(2))
                secondary = entry.group(3)
                functions.append({"bdf": bdf, "parent": parent, "host_bridge": host,
                                  "description": "", "bridge": secondary is not None})
                if secondary is not None:
                    pending = (domain, secondary, bdf, host)
                pos = entry.end()
                continue
            pos += 1
        if functions and description:
            functions[-1]["description"] = description
    return functions


def cpulist(cpus: list[int]) -> str:
    parts, start, prev = [], None, None
    for cpu in sorted(cpus) + [None]:
        if start is None:
            start = prev = cpu
        elif cpu is not None and cpu == prev + 1:  # type: ignore[operator]
            prev = cpu
        else:
            parts.append(str(start) if start == prev else "%s-%s" % (start, prev))
            start = prev = cpu
    return ",".join(parts)


def numactl_nodes(text: str) -> dict[int, str]:
    nodes = {}
    for line in text.splitlines():
        match = re.match(r"^node (\d+) cpus:(.*)$", line)
        if match:
            nodes[int(match.group(1))] = cpulist([int(c) for c in match.group(2).split()])
    return nodes


def matrix_nodes(text: str) -> dict[int, str]:
    """Constructed NUMA nodes from a recorded ``nvidia-smi topo -m``: NUMA Affinity id -> CPU Affinity list."""
    from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology_parse import parse_topo_matrix

    matrix = parse_topo_matrix(text) or {"numa_affinity": {}, "cpu_affinity": {}}
    nodes: dict[int, str] = {}
    for gpu, numa in matrix["numa_affinity"].items():
        if numa.isdigit() and gpu in matrix["cpu_affinity"]:
            nodes.setdefault(int(numa), matrix["cpu_affinity"][gpu])
    return nodes


def netdev_name(bdf: str, suffix: str = "") -> str:
    """Constructed: systemd's path name of a PCI netdev (``enpXsYfZ``; ``enPDpXsYfZ`` outside domain 0)."""
    domain, bus, devfn = bdf.split(":")
    dev, fn = devfn.split(".")
    prefix = "en" if int(domain, 16) == 0 else "enP%d" % int(domain, 16)
    return "%sp%ds%df%s%s" % (prefix, int(bus, 16), int(dev, 16), fn, suffix)


class SysRoot(Node):
    """A node's filesystem root under a temporary directory (what the module's ``root`` points at)."""


class Tree:
    """A sysfs tree under a NodeTree: PCI functions, class devices, NUMA nodes, modules."""

    def __init__(self, node) -> None:
        self.node = node
        self.dirs: dict[str, str] = {}

    def _link(self, link: str, target: str) -> None:
        path = self.node.path(link)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(str(self.node.path(target)), str(path.parent)), str(path))

    def function(self, bdf: str, host_bridge: str, parent: str | None, pci_class: str, vendor: str = "0x15b3",
                 device: str = "0x1021", numa: int = -1, cpus: str = "", link: tuple | None = None,
                 driver: str | None = None) -> str:
        """A PCI function below ``parent`` (a BDF made before) or directly below ``host_bridge``."""
        base = self.dirs[parent] if parent else "/sys/devices/%s" % host_bridge
        path = "%s/%s" % (base, bdf)
        self.dirs[bdf] = path
        self.node.put(path + "/class", pci_class + "\n")
        self.node.put(path + "/vendor", vendor + "\n")
        self.node.put(path + "/device", device + "\n")
        self.node.put(path + "/numa_node", "%d\n" % numa)
        self.node.put(path + "/local_cpulist", cpus + "\n")
        if link:
            speed, width, max_speed, max_width = link
            self.node.put(path + "/current_link_speed", "%s GT/s PCIe\n" % speed)
            self.node.put(path + "/current_link_width", "%d\n" % width)
            self.node.put(path + "/max_link_speed", "%s GT/s PCIe\n" % max_speed)
            self.node.put(path + "/max_link_width", "%d\n" % max_width)
        if driver:
            self.node.path("/sys/bus/pci/drivers/%s" % driver).mkdir(parents=True, exist_ok=True)
            self._link(path + "/driver", "/sys/bus/pci/drivers/%s" % driver)
        self._link("/sys/bus/pci/devices/%s" % bdf, path)
        return path

    def netdev(self, bdf: str, name: str) -> None:
        path = "%s/net/%s" % (self.dirs[bdf], name)
        self.node.put(path + "/address", "00:00:00:00:00:00\n")
        self._link(path + "/device", self.dirs[bdf])
        self._link("/sys/class/net/%s" % name, path)

    def virtual_netdev(self, name: str) -> None:
        path = "/sys/devices/virtual/net/%s" % name
        self.node.put(path + "/address", "00:00:00:00:00:00\n")
        self._link("/sys/class/net/%s" % name, path)

    def rdma(self, bdf: str, name: str) -> None:
        path = "%s/infiniband/%s" % (self.dirs[bdf], name)
        self.node.put(path + "/node_type", "1: CA\n")
        self._link(path + "/device", self.dirs[bdf])
        self._link("/sys/class/infiniband/%s" % name, path)

    def nvme(self, bdf: str, name: str) -> None:
        path = "%s/nvme/%s" % (self.dirs[bdf], name)
        self.node.put(path + "/model", "constructed\n")
        self._link(path + "/device", self.dirs[bdf])
        self._link("/sys/class/nvme/%s" % name, path)

    def numa_node(self, node_id: int, cpus: str) -> None:
        self.node.put("/sys/devices/system/node/node%d/cpulist" % node_id, cpus + "\n")

    def module(self, name: str) -> None:
        self.node.put("/sys/module/%s/refcnt" % name, "1\n")


def _class_of(description: str, bridge: bool) -> tuple[str, str] | None:
    """(class, vendor) from an lspci -tv description: constructed, the recording has no class."""
    if bridge:
        return "0x060400", "0x1022"
    if "NVIDIA" in description and "Audio" not in description:
        return "0x030000", "0x10de"
    if "Mellanox" in description:
        return "0x020000", "0x15b3"
    if "Realtek" in description and "Ethernet" in description:
        return "0x020000", "0x10ec"
    if "Ethernet" in description:
        return "0x020000", "0x8086"
    if "RAID" in description:
        return "0x010400", "0x1103"
    if "NVMe" in description or "Non-Volatile" in description:
        return "0x010802", "0x144d"
    return None


def machine(node, name: str) -> dict:
    """Build the recorded machine ``name`` under ``node``; return what was built (for the tests)."""
    from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology_parse import parse_lspci_vvv

    functions = parse_lspci_tree(fixture(name, "lspci-tv.txt"))
    vvv = parse_lspci_vvv(fixture(name, "lspci-vvv.txt")) if (FIXTURES / name / "lspci-vvv.txt").exists() else {}
    if (FIXTURES / name / "numactl-hardware.txt").exists():
        numa_nodes = numactl_nodes(fixture(name, "numactl-hardware.txt"))
    else:  # constructed from the recorded matrix (see matrix_nodes)
        numa_nodes = matrix_nodes(fixture(name, "nvidia-smi-topo-m.txt"))
    hosts = dict((f["bdf"], f["host_bridge"]) for f in functions)
    numa_of_host: dict[str, int] = {}
    for bdf, fields in vvv.items():
        if fields["numa_node"] is not None:
            numa_of_host[hosts[bdf]] = fields["numa_node"]
    tree = Tree(node)
    for node_id, cpus in numa_nodes.items():
        tree.numa_node(node_id, cpus)
    all_cpus = cpulist([c for cpus in numa_nodes.values() for part in cpus.split(",")
                        for c in (range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))])
    built: dict[str, list] = {"gpu": [], "nic": [], "nvme": []}
    mellanox = 0
    nvme_count = 0
    for function in functions:
        kind = _class_of(function["description"], function["bridge"])
        pci_class, vendor = kind or ("0x088000", "0x1022")
        numa = numa_of_host.get(function["host_bridge"], -1)
        recorded = vvv.get(function["bdf"])
        link = None
        if recorded and recorded["link_cap"] and recorded["link_sta"]:
            link = (recorded["link_sta"]["speed"], recorded["link_sta"]["width"], recorded["link_cap"]["speed"],
                    recorded["link_cap"]["width"])
        tree.function(function["bdf"], function["host_bridge"], function["parent"], pci_class, vendor=vendor,
                      numa=numa, cpus=numa_nodes.get(numa, all_cpus), link=link,
                      driver=recorded["driver"] if recorded else None)
        if pci_class == "0x030000":
            built["gpu"].append(function["bdf"])
        elif vendor == "0x15b3":
            tree.rdma(function["bdf"], "mlx5_%d" % mellanox)
            tree.netdev(function["bdf"], netdev_name(function["bdf"], "np0"))
            built["nic"].append(("mlx5_%d" % mellanox, function["bdf"]))
            mellanox += 1
        elif pci_class == "0x020000":
            tree.netdev(function["bdf"], netdev_name(function["bdf"]))
            built["nic"].append((None, function["bdf"]))
        elif pci_class == "0x010802":
            tree.nvme(function["bdf"], "nvme%d" % nvme_count)
            built["nvme"].append(("nvme%d" % nvme_count, function["bdf"]))
            nvme_count += 1
    return built


# --- constructed trees (labelled constructed: no recorded machine behind them) ----------------------

def switch_box(node, nic_numa: int = 0) -> Tree:
    """Constructed: one socket, a PCIe switch with GPU, NIC and NVMe, a second NIC on another port."""
    tree = Tree(node)
    tree.numa_node(0, "0-15")
    tree.numa_node(1, "16-31")
    tree.function("0000:15:01.0", "pci0000:15", None, "0x060400", numa=0, cpus="0-15")
    tree.function("0000:16:00.0", "pci0000:15", "0000:15:01.0", "0x060400", numa=0, cpus="0-15")
    for port in ("00", "01", "02"):
        tree.function("0000:17:%s.0" % port, "pci0000:15", "0000:16:00.0", "0x060400", numa=0, cpus="0-15")
    tree.function("0000:18:00.0", "pci0000:15", "0000:17:00.0", "0x030200", vendor="0x10de", numa=0,
                  cpus="0-15", link=(32.0, 16, 32.0, 16), driver="nvidia")
    tree.function("0000:19:00.0", "pci0000:15", "0000:17:01.0", "0x020000", numa=0, cpus="0-15",
                  link=(32.0, 8, 32.0, 16), driver="mlx5_core")
    if nic_numa != 0:  # constructed: the switch NIC has no RDMA device, the only HCA is on socket 1
        tree.netdev("0000:19:00.0", "ens1np0")
        tree.function("0000:98:00.0", "pci0000:97", None, "0x020000", numa=1, cpus="16-31",
                      link=(32.0, 16, 32.0, 16), driver="mlx5_core")
        tree.rdma("0000:98:00.0", "mlx5_1")
        tree.netdev("0000:98:00.0", "ens2np0")
        return tree
    tree.rdma("0000:19:00.0", "mlx5_0")
    tree.netdev("0000:19:00.0", "ens1np0")
    tree.function("0000:1a:00.0", "pci0000:15", "0000:17:02.0", "0x010802", vendor="0x144d", numa=0,
                  cpus="0-15", link=(16.0, 4, 16.0, 4), driver="nvme")
    tree.nvme("0000:1a:00.0", "nvme0")
    tree.function("0000:97:01.0", "pci0000:97", None, "0x060400", numa=1, cpus="16-31")
    tree.function("0000:98:00.0", "pci0000:97", "0000:97:01.0", "0x020000", numa=1, cpus="16-31",
                  link=(32.0, 16, 32.0, 16), driver="mlx5_core")
    tree.rdma("0000:98:00.0", "mlx5_1")
    tree.netdev("0000:98:00.0", "ens2np0")
    tree.virtual_netdev("lo")
    return tree


def switch_lspci(acs_redirect: bool = False, bridge_payload_cap: int = 512, nic_payload: int = 256,
                 nic_read_req: int = 4096) -> str:
    flag = "+" if acs_redirect else "-"
    lines = []
    for bdf, kind in (("0000:17:00.0", "Downstream Port"), ("0000:17:01.0", "Downstream Port"),
                      ("0000:16:00.0", "Upstream Port"), ("0000:15:01.0", "Root Port")):
        lines += ["%s PCI bridge: constructed" % bdf,
                  "\tCapabilities: [40] Express (v2) %s (Slot+), MSI 00" % kind,
                  "\t\tDevCap:\tMaxPayload %d bytes, PhantFunc 0" % bridge_payload_cap,
                  "\t\tDevCtl:\tCorrErr+ NonFatalErr+ FatalErr+ UnsupReq+",
                  "\t\t\tMaxPayload 256 bytes, MaxReadReq 512 bytes"]
        if kind != "Upstream Port":  # ACS lives on downstream and root ports
            lines += ["\tCapabilities: [160 v1] Access Control Services",
                      "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir%s CmpltRedir%s UpstreamFwd+ EgressCtrl- DirectTrans-"
                      % (flag, flag)]
        lines.append("")
    lines += ["0000:19:00.0 Ethernet controller: constructed",
              "\tCapabilities: [60] Express (v2) Endpoint, MSI 00",
              "\t\tDevCap:\tMaxPayload 512 bytes, PhantFunc 0, Latency L0s unlimited, L1 unlimited",
              "\t\tDevCtl:\tCorrErr+ NonFatalErr+ FatalErr+ UnsupReq+",
              "\t\t\tMaxPayload %d bytes, MaxReadReq %d bytes" % (nic_payload, nic_read_req),
              "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported",
              "\t\tLnkSta:\tSpeed 32GT/s, Width x8 (downgraded)",
              "\tCapabilities: [480 v1] Address Translation Service (ATS)",
              "\t\tATSCap:\tInvalidate Queue Depth: 00",
              "\t\tATSCtl:\tEnable+, Smallest Translation Unit: 00", ""]
    return "\n".join(lines)
