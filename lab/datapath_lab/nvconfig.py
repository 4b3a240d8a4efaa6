"""NIC firmware (NV configuration) for lab nodes: a fake ``mlxconfig`` and PCI functions it answers for.

Lab nodes have no PCI NICs. ``datapath-lab nic-firmware NODE`` gives a node one dual-port ConnectX-7
(a lab model: two physical functions, 0000:3b:00.0 and .1) in its own overlay, never on the host:

* ``/usr/local/sbin/mlxconfig`` and ``/usr/local/sbin/mlxfwreset``: :mod:`.fake_mlxconfig`, which keeps
  the device's NV parameters (Default, Current, Next Boot) in ``/var/lib/datapath-lab/nvconfig/``;
* ``/var/lib/datapath-lab/pci/devices/<BDF>/``: what sysfs shows of such a function (vendor, device,
  class, driver, ``infiniband/mlx5_N/board_id`` with the PSID, ``config`` with a PCI Express capability).
  The node's inventory names it (``nic_config_pci_dir``, the module's documented option), so the module
  finds the functions there exactly as it finds real ones in ``/sys/bus/pci/devices``.

The lab's reboot copies each device's Next Boot to Current (what a firmware does when it loads its NV
configuration at boot), or, with ``--broken``, does not (a firmware that does not apply it after a warm
reboot: nic-configuration-operator PR 43 and 188, sriov-network-operator PR 449). A boot also sets each
function's PCIe Max Read Request back to 512 bytes, as a BIOS does.
"""

from __future__ import annotations

import os
import shutil
import struct
from typing import TYPE_CHECKING, Any

from . import fake_mlxconfig

if TYPE_CHECKING:
    from .core import Lab

SBIN = "/usr/local/sbin"
TOOLS = ("mlxconfig", "mlxfwreset")
PCI_DIR = "/var/lib/datapath-lab/pci/devices"
DRIVER_DIR = "/var/lib/datapath-lab/pci/drivers/mlx5_core"
STATE_DIR = fake_mlxconfig.STATE_DIR
MODES = ("healthy", "broken")
BOOT_MRRS = 512  # what a boot leaves in Device Control (the BIOS's choice on most servers)
PCIE_CAP = 0x60

_BOOL = {"kind": "bool"}
_LINK = {"kind": "enum", "choices": {"IB": 1, "ETH": 2}}
_ATOMIC = {"kind": "enum", "choices": {"PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED": 0,
                                       "PCI_ATOMICS_ENABLED_EXT_ATOMICS_ENABLED": 4}}


def _p(name: str, spec: dict[str, Any], value: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, **spec, "default": value, "current": value, "next": value, **extra}


def connectx7(slot: str = "0000:3b:00") -> dict[str, Any]:
    """The lab's device: a dual-port ConnectX-7 in InfiniBand mode, SR-IOV off, the firmware's RoCE
    congestion-control defaults (all priorities, CNP DSCP 48 / priority 6, as a ConnectX-5 of
    ironcore-dev/dpservice issue 26 shows them), MAX_ACC_OUT_READ behind ADVANCED_PCI_SETTINGS."""
    params = [
        _p("MEMIC_BAR_SIZE", {"kind": "int"}, 0),
        _p("MEMIC_SIZE_LIMIT", {"kind": "enum", "choices": {"_256KB": 1}}, 1),
        _p("ESWITCH_HAIRPIN_DESCRIPTORS", {"kind": "array", "length": 8}, [128] * 8),
        _p("PF_BAR2_SIZE", {"kind": "int"}, 0),
        _p("NUM_OF_VFS", {"kind": "int", "max": 127}, 0),
        _p("SRIOV_EN", _BOOL, 0),
        _p("PCI_ATOMIC_MODE", _ATOMIC, 0),
        _p("ATS_ENABLED", _BOOL, 0),
        _p("ADVANCED_PCI_SETTINGS", _BOOL, 0),
        _p("MAX_ACC_OUT_READ", {"kind": "int", "max": 255}, 0, visible_if=["ADVANCED_PCI_SETTINGS", 1]),
        _p("LINK_TYPE_P1", _LINK, 1),
        _p("LINK_TYPE_P2", _LINK, 1),
        _p("KEEP_ETH_LINK_UP_P1", _BOOL, 1),
        _p("KEEP_ETH_LINK_UP_P2", _BOOL, 1),
        _p("ROCE_CC_PRIO_MASK_P1", {"kind": "int", "max": 255}, 255),
        _p("CNP_802P_PRIO_P1", {"kind": "int", "max": 7}, 6),
        _p("CNP_DSCP_P1", {"kind": "int", "max": 63}, 48),
        _p("ROCE_CC_PRIO_MASK_P2", {"kind": "int", "max": 255}, 255),
        _p("CNP_802P_PRIO_P2", {"kind": "int", "max": 7}, 6),
        _p("CNP_DSCP_P2", {"kind": "int", "max": 63}, 48),
    ]
    return {"slot": slot, "functions": [slot + ".0", slot + ".1"], "device_type": "ConnectX7",
            "name": "MCX755106AS-HEAT_Ax", "psid": "MT_0000000834", "firmware_version": "28.39.3560",
            "description": "NVIDIA ConnectX-7 HHHL Adapter Card; 200GbE / NDR200 IB (default mode); "
                           "Dual-port QSFP112; PCIe 5.0 x16 (datapath-lab model)",
            "firmware": "healthy", "params": params}


def config_space(device_id: int, mrrs: int = BOOT_MRRS) -> bytes:
    """256 bytes of type-0 config space: vendor 15b3, a capability list (power management at 0x40,
    PCI Express at 0x60) whose Device Control holds ``mrrs``, relaxed ordering on, payload 256."""
    data = bytearray(256)
    struct.pack_into("<HH", data, 0, 0x15B3, device_id)
    struct.pack_into("<H", data, 0x06, 0x0010)  # status: capability list
    data[0x34] = 0x40
    data[0x40], data[0x41] = 0x01, PCIE_CAP  # power management, next: PCI Express
    data[PCIE_CAP], data[PCIE_CAP + 1] = 0x10, 0x00
    struct.pack_into("<H", data, PCIE_CAP + 2, 0x0002)  # version 2, endpoint
    struct.pack_into("<I", data, PCIE_CAP + 4, 0x00008FE2)  # DevCap: MPS 512, FLR...
    devctl = 0x0010 | (1 << 5) | ((128, 256, 512, 1024, 2048, 4096).index(mrrs) << 12)
    struct.pack_into("<H", data, PCIE_CAP + 8, devctl)
    return bytes(data)


def _root(lab: Lab, node: str, state: dict[str, Any]) -> str:
    pid = lab.holder_pid(node, state)
    if pid is None:
        from .core import LabError
        raise LabError(f"{node}: holder process is gone; run `datapath-lab up` to recover")
    return f"/proc/{pid}/root"


def _at(root: str, path: str) -> str:
    """A node path below the holder's root (the node's overlay), never a host path."""
    return os.path.join(root, path.lstrip("/"))


def _write(path: str, content: str | bytes, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(content, bytes) else "w") as handle:
        handle.write(content)
    os.chmod(path, mode)


def _pci_class(device: dict[str, Any]) -> str:
    """InfiniBand controller while port 1 runs IB, Ethernet controller once it runs Ethernet."""
    link = next((p for p in device["params"] if p["name"] == "LINK_TYPE_P1"), None)
    return "0x020000" if link is not None and link["current"] == 2 else "0x020700"


def _functions(root: str, device: dict[str, Any], index: int) -> None:
    os.makedirs(_at(root, DRIVER_DIR), exist_ok=True)
    for number, bdf in enumerate(device["functions"]):
        base = _at(root, f"{PCI_DIR}/{bdf}")
        files = {"vendor": "0x15b3\n", "device": "0x1021\n", "class": _pci_class(device) + "\n",
                 "subsystem_vendor": "0x15b3\n", "subsystem_device": "0x0041\n", "numa_node": "0\n"}
        for name, text in files.items():
            _write(os.path.join(base, name), text)
        if not os.path.exists(os.path.join(base, "config")):
            _write(os.path.join(base, "config"), config_space(0x1021))
        rdma = os.path.join(base, "infiniband", f"mlx5_{index * 2 + number}")
        _write(os.path.join(rdma, "board_id"), device["psid"] + "\n")
        _write(os.path.join(rdma, "fw_ver"), device["firmware_version"] + "\n")
        link = os.path.join(base, "driver")
        if not os.path.islink(link):
            os.symlink("../../drivers/mlx5_core", link)


def enable(lab: Lab, node: str, mode: str = "healthy") -> dict[str, Any]:
    """Give ``node`` the lab's NIC (if it has none yet) and set its firmware ``mode``; rewrite the
    inventory (``nic_config_pci_dir``) and the lab's spec (its ``nic_config`` entry)."""
    if mode not in MODES:
        from .core import LabError
        raise LabError(f"firmware mode {mode!r}: use one of {', '.join(MODES)}")
    state = lab.require_state()
    if node not in state["nodes"]:
        from .core import LabError
        raise LabError(f"no node {node!r} in lab {lab.name}; nodes: {', '.join(state['nodes'])}")
    root = _root(lab, node, state)
    source = os.path.abspath(fake_mlxconfig.__file__)
    for tool in TOOLS:
        shutil.copyfile(source, _at(root, f"{SBIN}/{tool}"))
        os.chmod(_at(root, f"{SBIN}/{tool}"), 0o755)
    device = connectx7()
    path = _at(root, f"{STATE_DIR}/{device['slot']}.json")
    if os.path.exists(path):
        device = fake_mlxconfig.load(path)
    device["firmware"] = mode
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fake_mlxconfig.save(path, device)
    _functions(root, device, 0)
    info = state["nodes"][node]
    info["nvconfig"] = {"firmware": mode, "devices": [device["slot"]], "pci_dir": PCI_DIR}
    lab.save_state(state)
    lab.write_inventory(state)
    return describe(lab, node)


def remove(lab: Lab, node: str) -> bool:
    """Take the NIC off ``node`` again (tools, state, PCI view); False when it had none."""
    state = lab.require_state()
    info = state["nodes"].get(node) or {}
    if not info.get("nvconfig"):
        return False
    root = _root(lab, node, state)
    for tool in TOOLS:
        if os.path.lexists(_at(root, f"{SBIN}/{tool}")):
            os.unlink(_at(root, f"{SBIN}/{tool}"))
    for path in (STATE_DIR, os.path.dirname(PCI_DIR)):
        shutil.rmtree(_at(root, path), ignore_errors=True)
    info.pop("nvconfig", None)
    lab.save_state(state)
    lab.write_inventory(state)
    return True


def devices(lab: Lab, node: str, state: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    state = state or lab.require_state()
    root = _root(lab, node, state)
    return [fake_mlxconfig.load(path) for path in fake_mlxconfig.device_files(_at(root, STATE_DIR))]


def describe(lab: Lab, node: str) -> dict[str, Any]:
    """The node's devices: mode and each parameter's Default / Current / Next Boot (for the CLI, tests)."""
    state = lab.require_state()
    info = (state["nodes"].get(node) or {}).get("nvconfig")
    if not info:
        return {"node": node, "devices": []}
    out = []
    for device in devices(lab, node, state):
        params = {p["name"]: {k: p[k] for k in ("default", "current", "next")} for p in device["params"]}
        out.append({"slot": device["slot"], "functions": device["functions"], "psid": device["psid"],
                    "part_number": device["name"], "firmware": device["firmware"], "params": params})
    return {"node": node, "firmware": info["firmware"], "pci_dir": info["pci_dir"], "devices": out}


def on_boot(lab: Lab, node: str, state: dict[str, Any]) -> str | None:
    """The reboot's step for the node's NICs: load Next Boot (healthy firmware) or not (broken), and
    Max Read Request back to the boot value. None when the node has no such NIC."""
    info = (state["nodes"].get(node) or {}).get("nvconfig")
    if not info:
        return None
    root = _root(lab, node, state)
    said = []
    for path in fake_mlxconfig.device_files(_at(root, STATE_DIR)):
        device = fake_mlxconfig.load(path)
        if device.get("firmware") == "broken":
            pending = [p["name"] for p in device["params"] if p["current"] != p["next"]]
            said.append(f"{device['slot']}: broken firmware, Next Boot not applied"
                        + (f" ({', '.join(pending)} stay as they were)" if pending else ""))
        else:
            changed = fake_mlxconfig.apply_next_boot(device)
            fake_mlxconfig.save(path, device)
            said.append(f"{device['slot']}: Next Boot loaded" + (f" ({', '.join(changed)})" if changed else
                                                                 " (nothing pending)"))
        for bdf in device["functions"]:
            base = _at(root, f"{PCI_DIR}/{bdf}")
            _write(os.path.join(base, "config"), config_space(0x1021, BOOT_MRRS))
            _write(os.path.join(base, "class"), _pci_class(device) + "\n")
    return "; ".join(said) + f"; PCIe Max Read Request {BOOT_MRRS} on every function"


def host_vars(info: dict[str, Any]) -> dict[str, Any]:
    """The inventory variables of a node with the lab's NIC: where its PCI functions are listed."""
    nv = info.get("nvconfig")
    return {"nic_config_pci_dir": nv["pci_dir"]} if nv else {}


def spec_entries(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The lab spec's ``nic_config`` (for its gpu_nodes profile) when a node has the lab's NIC: the
    ConnectX-7 in Ethernet mode, 8 VFs, RoCE congestion control from the first RDMA fabric."""
    if not any((info or {}).get("nvconfig") for info in state["nodes"].values()):
        return []
    entry: dict[str, Any] = {"psid": connectx7()["psid"], "link_type": "eth", "sriov": {"enabled": True, "num_vfs": 8}}
    if len(state["fabrics"]) > 1:
        entry["roce_fabric"] = state["fabrics"][1]["name"]
    return [entry]
