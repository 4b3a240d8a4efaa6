# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NIC settings kept in firmware (non-volatile configuration) as a desired state (stdlib only).

``NicConfig`` finds the node's NVIDIA/Mellanox physical functions in sysfs (vendor 0x15b3, class
network or InfiniBand, no ``physfn``: not a VF), groups the functions of one adapter (one PCI slot)
into a device, picks each device's ``configs`` entry (PSID > part number > driver) and queries every
function with ``mlxconfig -d BDF -e query`` (``mstconfig`` where that is the tool), arrays again per
index. Per parameter, against the columns the tool printed:

* the desired value is ``Current`` -> nothing (``Next Boot`` holding something else is set back);
* it is ``Next Boot`` only -> a reboot is pending;
* neither -> one batched ``set`` per device (read back afterwards), then a reboot is required.

The reboot-loop breaker: what was set, or found pending, is recorded per device with the boot id
(``/proc/sys/kernel/random/boot_id``) in ``state_file``. After a boot (another boot id) a value
recorded for the desired one that is still not ``Current`` is the finding
``nvconfig-not-applied-after-reboot``, and no reboot is asked for it again. ``firmware_reset`` runs
``mlxfwreset`` after the set (devices that need a firmware reset rather than a warm reboot).

``max_read_request`` is the PCIe Device Control register of each function (config space), set at run
time: no reboot, and not kept across one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Action, Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import atomic_write
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import IpLink, ssh_connection_addresses
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config_intents import LINK_TYPES, split_index
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config_params import (
    desired,
    matches,
    select,
    set_argument,
    text_of,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config_query import array_query, parse_query
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_firmware import (
    DevlinkOutputError,
    parse_devlink_info,
)

PCI_DEVICES = "/sys/bus/pci/devices"
STATE_FILE = "/var/lib/aiinfra-datapath/nic_config.json"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
VENDOR = "0x15b3"  # Mellanox / NVIDIA networking
RESET_TOOLS = {"mlxconfig": "mlxfwreset", "mstconfig": "mstfwreset"}
FINDING = "nvconfig-not-applied-after-reboot"
MRRS_VALUES = (128, 256, 512, 1024, 2048, 4096)
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
# the states a parameter can be in, and whether it asks for a reboot
REBOOT_STATES = ("set", "pending")


class NicConfigError(CapabilityError):
    """A device, a tool or a state file this module cannot work with."""


# --------------------------------------------------------------------------- discovery
def discover(root, pci_dir=PCI_DEVICES):
    """The physical functions of NVIDIA/Mellanox NICs below ``pci_dir``, by PCI address."""
    functions = []
    for bdf in root.listdir(pci_dir):
        if not _BDF.match(bdf):
            continue
        base = "%s/%s" % (pci_dir, bdf)
        vendor = (root.read(base + "/vendor") or "").lower()
        pci_class = (root.read(base + "/class") or "").lower()
        # 0x0200 Ethernet, 0x0207 InfiniBand; a BlueField's other functions (bridges, DMA) are not NICs
        if vendor != VENDOR or not (pci_class.startswith("0x0200") or pci_class.startswith("0x0207")):
            continue
        if root.exists(base + "/physfn"):
            continue  # a virtual function: its settings are its PF's
        driver_link = root.path(base + "/driver")
        rdma = root.listdir(base + "/infiniband")
        psid = fw = None
        if rdma:
            psid = root.read("%s/infiniband/%s/board_id" % (base, rdma[0])) or None
            fw = root.read("%s/infiniband/%s/fw_ver" % (base, rdma[0])) or None
        functions.append({
            "pci": bdf, "slot": bdf.rsplit(".", 1)[0], "device_id": root.read(base + "/device"),
            "class": pci_class, "driver": os.path.basename(os.readlink(driver_link))
            if os.path.islink(driver_link) else None,
            "psid": psid, "firmware_version": fw, "rdma": rdma, "netdevs": root.listdir(base + "/net"),
        })
    return functions


def group(functions):
    """Functions of one adapter (same domain:bus:device) as one device: the first is the tool's target."""
    devices, by_slot = [], {}
    for function in sorted(functions, key=lambda f: f["pci"]):
        device = by_slot.get(function["slot"])
        if device is None:
            device = {"pci": function["pci"], "slot": function["slot"], "functions": [], "psid": function["psid"],
                      "driver": function["driver"], "firmware_version": function["firmware_version"],
                      "netdevs": [], "rdma": []}
            by_slot[function["slot"]] = device
            devices.append(device)
        device["functions"].append(function["pci"])
        device["psid"] = device["psid"] or function["psid"]
        device["netdevs"].extend(function["netdevs"])
        device["rdma"].extend(function["rdma"])
    return devices


# --------------------------------------------------------------------------- PCIe Max Read Request
def _config_path(root, pci_dir, bdf):
    return root.path("%s/%s/config" % (pci_dir, bdf))


def pcie_devctl(root, pci_dir, bdf):
    """(offset of the PCI Express Device Control register, its value) from config space, or
    (None, reason). The capability list from 0x34; the PCI Express capability has id 0x10."""
    try:
        with open(_config_path(root, pci_dir, bdf), "rb") as handle:
            data = handle.read(4096)
    except (IOError, OSError) as exc:
        return None, "config space of %s not readable: %s" % (bdf, exc.strerror or exc)
    if len(data) < 0x40 or not (data[0x06] & 0x10):
        return None, "config space of %s has no capability list" % bdf
    if len(data) <= 0x40:
        return None, "config space of %s beyond 64 bytes not readable (not root?)" % bdf
    pointer, seen = data[0x34] & 0xFC, set()
    while pointer and pointer not in seen and pointer + 10 <= len(data):
        seen.add(pointer)
        if data[pointer] == 0x10:
            offset = pointer + 8
            return offset, data[offset] | (data[offset + 1] << 8)
        pointer = data[pointer + 1] & 0xFC
    return None, "%s has no PCI Express capability" % bdf


def mrrs_of(devctl):
    """Max Read Request Size in bytes: bits 14:12 of Device Control (128 << n)."""
    return 128 << ((devctl >> 12) & 0x7)


def with_mrrs(devctl, size):
    return (devctl & ~0x7000) | (MRRS_VALUES.index(size) << 12)


def write_devctl(root, pci_dir, bdf, offset, value):
    """Two bytes at ``offset`` of the function's config space (sysfs ``config``, as setpci writes it)."""
    fd = os.open(_config_path(root, pci_dir, bdf), os.O_WRONLY)
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        os.write(fd, bytes(bytearray([value & 0xFF, (value >> 8) & 0xFF])))
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the tool
class Tool(object):
    """``mlxconfig`` (NVIDIA MFT) or ``mstconfig`` (mstflint): the same commands and output."""

    def __init__(self, runner, choice="auto"):
        self.runner = runner
        names = ("mlxconfig", "mstconfig") if choice == "auto" else (choice,)
        self.name, self.path = None, None
        for name in names:
            path = runner.which(name)
            if path:
                self.name, self.path = name, path
                break
        self.wanted = names

    def missing(self):
        return "%s not found on the node: install NVIDIA MFT (mlxconfig) or mstflint (mstconfig)" % (
            " or ".join(self.wanted))

    def query_argv(self, bdf, param=None):
        return [self.path, "-d", bdf, "-e", "query"] + ([param] if param else [])

    def query(self, bdf, param=None):
        argv = self.query_argv(bdf, param)
        rc, out, err = self.runner.run(argv, check=False)
        parsed = parse_query(out)
        if rc != 0:
            said = "; ".join(e["text"] for e in parsed["errors"]) or (err or out).strip()[-300:]
            raise NicConfigError("%s failed (rc %s): %s" % (" ".join([self.name] + argv[1:]), rc, said),
                                 device=bdf, errors=parsed["errors"])
        return parsed

    def set_argv(self, bdf, assignments):
        return [self.path, "-d", bdf, "-y", "set"] + list(assignments)

    def reset_argv(self, bdf):
        tool = RESET_TOOLS.get(self.name or "", "mlxfwreset")
        path = self.runner.which(tool) or tool
        return [path, "--device", bdf, "reset", "--yes"]


def read_device(tool, device, arrays=()):
    """Query every function of ``device``; expand the arrays named in ``arrays`` (base names or
    ``NAME[i]``) per index. Sets ``device["queries"]`` ({bdf: parsed}) and returns the first's."""
    queries = {}
    for bdf in device["functions"]:
        parsed = tool.query(bdf)
        wanted = set(split_index(name)[0] for name in arrays)
        for name in sorted(parsed["arrays"]):
            if name in wanted:
                extra = tool.query(bdf, array_query(name, parsed["arrays"][name]))
                for param in extra["order"]:
                    if param not in parsed["params"]:
                        parsed["order"].append(param)
                    parsed["params"][param] = extra["params"][param]
        queries[bdf] = parsed
    device["queries"] = queries
    first = queries[device["functions"][0]]
    device["part_number"] = first.get("part_number")
    device["device_type"] = first.get("device_type")
    device["description"] = first.get("description")
    return first


def read_record(root, path):
    text = root.read_raw(path)
    if not text:
        return {"version": 1, "devices": {}}
    try:
        record = json.loads(text)
    except ValueError:
        raise NicConfigError("%s is not valid JSON; fix or remove it (it records what nic_config set, with "
                             "the boot id, so that a value the firmware does not apply is not rebooted for "
                             "again)" % path)
    if not isinstance(record, dict) or not isinstance(record.get("devices"), dict):
        raise NicConfigError("%s is not a nic_config record (no devices object); fix or remove it" % path)
    return record


def column_text(row, column):
    value = (row or {}).get("values", {}).get(column)
    return None if value is None else value["text"]


def _record_value(entry):
    return {"name": entry.get("name"), "number": entry.get("number"), "unknown": False}


# --------------------------------------------------------------------------- the capability
class NicConfig(Capability):
    """Firmware (NV) settings of the node's NVIDIA/Mellanox NICs against the plan."""

    name = "nic_config"

    @classmethod
    def options(cls):
        return dict(
            configs=dict(type="list", elements="dict", default=[], options=dict(
                psid=dict(type="str"),
                part_number=dict(type="str"),
                driver=dict(type="str"),
                link_type=dict(type="str", choices=sorted(LINK_TYPES)),
                sriov=dict(type="dict", options=dict(
                    enabled=dict(type="bool", required=True),
                    num_vfs=dict(type="int"),
                )),
                ats=dict(type="bool"),
                max_read_request=dict(type="int", choices=list(MRRS_VALUES)),
                roce=dict(type="dict", options=dict(
                    prio_mask=dict(type="int"),
                    cnp_dscp=dict(type="int"),
                    cnp_priority=dict(type="int"),
                    fabric=dict(type="str"),
                )),
                raw=dict(type="dict", default={}),
                firmware_reset=dict(type="bool", default=False),
            )),
            pci_dir=dict(type="path", default=PCI_DEVICES),
            tool=dict(type="str", choices=["auto", "mlxconfig", "mstconfig"], default="auto"),
            state_file=dict(type="path", default=STATE_FILE),
            connection_address=dict(type="str"),
        )

    def validate(self):
        problems = []
        for index, config in enumerate(self.params["configs"]):
            if not any(config.get(key) for key in ("psid", "part_number", "driver")):
                problems.append("configs[%d]: give psid, part_number and/or driver to say which NICs it is for"
                                % index)
            sriov = config.get("sriov") or {}
            if sriov.get("num_vfs") is not None and not 0 <= sriov["num_vfs"] <= 1024:
                problems.append("configs[%d].sriov.num_vfs %s is outside 0..1024" % (index, sriov["num_vfs"]))
            for param, value in sorted((config.get("raw") or {}).items()):
                if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\[\d+\])?\Z", param):
                    problems.append("configs[%d].raw: %r is not an mlxconfig parameter name" % (index, param))
                if not isinstance(value, (bool, int)) and not re.match(r"^[A-Za-z0-9_.:+-]{1,64}\Z", "%s" % value):
                    problems.append("configs[%d].raw.%s: %r is not a value mlxconfig takes" % (index, param, value))
        if problems:
            raise NicConfigError("invalid configs: " + "; ".join(problems), problems=problems)

    # -- read -------------------------------------------------------------------------------
    def read(self):
        pci_dir = self.params["pci_dir"]
        configs = self.params["configs"]
        devices = group(discover(self.root, pci_dir))
        self._psid_from_devlink(devices)
        tool = Tool(self.runner, self.params["tool"])
        by_part = any(c.get("part_number") for c in configs)
        for device in devices:
            device["config"], device["why"] = select(device, configs) if configs else (None, "no configs given")
            if device["config"] is None and not (by_part and configs):
                continue
            if tool.path is None:
                raise NicConfigError("nic_config: %s (device %s, PSID %s)" % (tool.missing(), device["pci"],
                                                                              device["psid"] or "?"))
            arrays = []
            if device["config"] is not None:
                arrays = sorted((configs[device["config"]].get("raw") or {}))
            read_device(tool, device, [a for a in arrays if split_index(a)[1] is not None])
            if device["config"] is None and configs:  # selected by part number, now that it is known
                device["config"], device["why"] = select(device, configs)
                if device["config"] is not None and configs[device["config"]].get("raw"):
                    read_device(tool, device, sorted(configs[device["config"]]["raw"]))
        boot_id = self.root.read(BOOT_ID) or None
        record = read_record(self.root, self.params["state_file"])
        return {"devices": devices, "tool": tool, "boot_id": boot_id, "record": record}

    def _psid_from_devlink(self, devices):
        """Where sysfs has no board_id (no RDMA device bound), ``devlink -j dev info`` gives fw.psid."""
        if all(d["psid"] for d in devices) or not devices:
            return
        devlink = self.runner.which("devlink")
        if not devlink:
            return
        rc, out, _err = self.runner.run([devlink, "-j", "dev", "info"], check=False)
        if rc != 0:
            return
        try:
            info = parse_devlink_info(out)
        except DevlinkOutputError:
            return
        for device in devices:
            for bdf in device["functions"]:
                if not device["psid"] and (info.get(bdf) or {}).get("psid"):
                    device["psid"] = info[bdf]["psid"]

    # -- plan -------------------------------------------------------------------------------
    def plan(self, state):
        boot_id = state["boot_id"]
        record = state["record"]
        new_record = json.loads(json.dumps(record))
        actions, self.items, self.resets, self.mrrs = [], [], [], []
        tool = state["tool"]
        configs = self.params["configs"]
        for device in state["devices"]:
            item = {"device": device, "params": [], "unsupported": [], "sets": []}
            self.items.append(item)
            if device["config"] is None or "queries" not in device:
                continue
            config = configs[device["config"]]
            first = device["queries"][device["functions"][0]]
            wanted, unsupported = desired(config, first["params"])
            item["unsupported"] = unsupported
            recorded = (record["devices"].get(device["pci"]) or {}).get("params") or {}
            to_set = []
            for param, want, intent in wanted:
                row = first["params"][param]
                entry = {"param": param, "intent": intent, "wanted": text_of(want), "want": want,
                         "default": column_text(row, "default"), "current": column_text(row, "current"),
                         "next_boot": column_text(row, "next_boot"), "reason": None}
                if row.get("read_only"):
                    item["unsupported"].append({"param": param, "intent": intent,
                                                "reason": "read-only on this device (RO)"})
                    continue
                entry["state"], entry["reason"], remember = self._decide(row, want, recorded.get(param), boot_id)
                item["params"].append(entry)
                if entry["state"] in ("set", "restage"):
                    to_set.append(entry)
                if remember:
                    device_record = new_record["devices"].setdefault(device["pci"], {"params": {}})
                    device_record.update(psid=device["psid"], part_number=device.get("part_number"))
                    device_record.setdefault("params", {})[param] = {
                        "value": text_of(want), "name": want.get("name"), "number": want.get("number"),
                        "boot_id": boot_id}
            if to_set:
                actions.extend(self._set_actions(tool, device, device["functions"][0], to_set))
                item["sets"].append(device["functions"][0])
                model = first["params"].get("INTERNAL_CPU_MODEL")
                if model is not None and matches(model["values"].get("current"), {"name": "EMBEDDED_CPU",
                                                                                  "number": 1}):
                    self.warn("%s is a %s in DPU mode (INTERNAL_CPU_MODEL EMBEDDED_CPU(1)): most NV changes take "
                              "a power cycle; after a warm reboot they show as nvconfig-not-applied-after-reboot"
                              % (device["pci"], device.get("device_type") or "BlueField"))
            # a sibling function whose own Next Boot differs from the first's for a parameter set or pending
            for bdf in device["functions"][1:]:
                other = device["queries"][bdf]["params"]
                differ = [e for e in item["params"] if e["state"] in ("pending", "ok") and e["param"] in other
                          and matches(other[e["param"]]["values"].get("next_boot"), e["want"]) is False]
                if differ:
                    actions.extend(self._set_actions(tool, device, bdf, [dict(e, state="set") for e in differ]))
                    item["sets"].append(bdf)
            if config.get("firmware_reset") and any(e["state"] in REBOOT_STATES for e in item["params"]):
                actions.append(self._reset_action(tool, device))
            if config.get("max_read_request"):
                actions.extend(self._mrrs_actions(device, config["max_read_request"]))
        if new_record != record:
            actions.append(Action("record", self.params["state_file"],
                                  "record in %s what is set or pending, with boot id %s"
                                  % (self.params["state_file"], boot_id or "?"),
                                  diff=False, content=new_record))
        self.new_record = new_record
        return actions

    @staticmethod
    def _decide(row, want, recorded, boot_id):
        """(state, reason, record it) of one parameter; states: ok, restage, set, pending,
        not_applied, assumed."""
        current = matches(row["values"].get("current"), want)
        next_boot = matches(row["values"].get("next_boot"), want)
        was_set = recorded is not None and matches(_record_value(recorded), want) is True
        set_boot = recorded.get("boot_id") if was_set else None
        if current is True:
            if next_boot is False:
                return "restage", "Current holds it, Next Boot has %s: set back" % column_text(row, "next_boot"), False
            return "ok", None, False
        if next_boot is True:
            if was_set and set_boot != boot_id and current is False:
                return ("not_applied", "set at boot %s; after a boot Current is still %s" % (
                    set_boot, column_text(row, "current")), False)
            if current is None and was_set and set_boot != boot_id:
                return "assumed", "the firmware does not report Current; Next Boot holds it since a boot", False
            if was_set:
                return "pending", "in Next Boot, takes effect at the next boot", False
            return "pending", "in Next Boot (not set by this module), takes effect at the next boot", True
        return "set", None, True

    def _set_actions(self, tool, device, bdf, entries):
        actions = []
        for entry in entries:
            before = entry["next_boot"]
            actions.append(Action("nvconfig", entry["param"], "%s: %s Next Boot %s -> %s" % (
                bdf, entry["param"], before, entry["wanted"]), before=before, after=entry["wanted"],
                reboot=entry["state"] == "set", diff="%s Next Boot" % bdf))
        argv = tool.set_argv(bdf, [set_argument(e["param"], e["want"]) for e in entries])
        actions.append(Action("command", bdf, "run %s" % " ".join([tool.name] + argv[1:]),
                              reboot=any(e["state"] == "set" for e in entries), diff=False, argv=argv,
                              device=device["pci"], params=[e["param"] for e in entries]))
        return actions

    def _reset_action(self, tool, device):
        argv = tool.reset_argv(device["pci"])
        self.resets.append(device["pci"])
        return Action("command", "%s firmware reset" % device["pci"], "run %s" % " ".join(
            [os.path.basename(argv[0])] + argv[1:]), diff=False, argv=argv, device=device["pci"], reset=True)

    def _mrrs_actions(self, device, size):
        actions = []
        for bdf in device["functions"]:
            offset, value = pcie_devctl(self.root, self.params["pci_dir"], bdf)
            row = {"pci": bdf, "wanted": size, "current": None, "reason": None}
            self.mrrs.append(row)
            if offset is None:
                row["reason"] = value
                continue
            row["current"] = mrrs_of(value)
            if row["current"] != size:
                actions.append(Action("pcie", "MaxReadReq", "%s: PCIe Max Read Request %s -> %s bytes (at run time; "
                                      "a reset or boot sets it again)" % (bdf, row["current"], size),
                                      before=row["current"], after=size, diff="%s PCIe" % bdf, pci=bdf,
                                      offset=offset, value=with_mrrs(value, size)))
        return actions

    # -- apply ------------------------------------------------------------------------------
    def apply(self, state, actions):
        tool = state["tool"]
        record = self.new_record
        try:
            for action in actions:
                if action.kind == "command" and action.data.get("reset"):
                    self._reset(tool, state, action)
                elif action.kind == "command":
                    self._set(tool, state, action)
                elif action.kind == "pcie":
                    write_devctl(self.root, self.params["pci_dir"], action.data["pci"], action.data["offset"],
                                 action.data["value"])
        finally:
            # what was set is recorded even when a later device failed: its reboot is asked once
            if any(a.kind == "record" for a in actions):
                atomic_write(self.root.path(self.params["state_file"]),
                             json.dumps(record, indent=2, sort_keys=True) + "\n", mode=0o644)

    def _set(self, tool, state, action):
        bdf = action.target
        rc, out, err = self.runner.run(list(action.data["argv"]), check=False, record=True)
        parsed = parse_query(out)
        if rc != 0 or parsed["errors"]:
            said = "; ".join(e["text"] for e in parsed["errors"]) or (err or out).strip()[-300:]
            raise NicConfigError("%s: %s failed (rc %s): %s; nothing else was set on this device"
                                 % (bdf, action.text[4:], rc, said), device=bdf)
        # read back: the set must show in Next Boot on every function of the device
        device = next(d for d in state["devices"] if d["pci"] == action.data["device"])
        item = next(i for i in self.items if i["device"] is device)
        wanted = dict((e["param"], e) for e in item["params"])
        for function in device["functions"]:
            if function != bdf and function in item["sets"]:
                continue  # planned on its own
            after = tool.query(function)
            device["queries"][function] = after
            wrong = [p for p in action.data["params"] if p in after["params"]
                     and matches(after["params"][p]["values"].get("next_boot"), wanted[p]["want"]) is False]
            if wrong and function == bdf:
                raise NicConfigError("%s: %s returned 0, but Next Boot of %s still does not hold %s" % (
                    bdf, tool.name, ", ".join(wrong), ", ".join(wanted[p]["wanted"] for p in wrong)), device=bdf)
            if wrong:  # a per-function parameter: the sibling needs its own set
                argv = tool.set_argv(function, [set_argument(p, wanted[p]["want"]) for p in wrong])
                self.runner.run(argv, check=True, record=True)
                self.warn("%s: %s is kept per function; set on %s as well"
                          % (device["pci"], ", ".join(wrong), function))
                item["sets"].append(function)

    def _reset(self, tool, state, action):
        device = next(d for d in state["devices"] if d["pci"] == action.data["device"])
        item = next(i for i in self.items if i["device"] is device)
        guard = self._connection_netdevs(device)
        if guard:
            self.warn("%s: no firmware reset, it would take down %s, which carries the Ansible connection; "
                      "the values take effect at the next boot" % (device["pci"], ", ".join(guard)))
            return
        rc, out, err = self.runner.run(list(action.data["argv"]), check=False, record=True)
        if rc != 0:
            self.warn("%s: %s failed (rc %s): %s; the values take effect at the next boot"
                      % (device["pci"], os.path.basename(action.data["argv"][0]), rc, (err or out).strip()[-300:]))
            return
        after = tool.query(device["functions"][0])
        device["queries"][device["functions"][0]] = after
        for entry in item["params"]:
            row = after["params"].get(entry["param"])
            if row is not None and entry["state"] in REBOOT_STATES:
                entry["current"] = column_text(row, "current")
                if matches(row["values"].get("current"), entry["want"]) is True:
                    entry["state"], entry["reason"] = "ok", "applied by the firmware reset"

    def _connection_netdevs(self, device):
        if not device["netdevs"]:
            return []
        ip = IpLink(self.runner, self.runner.which("ip") or "ip")
        try:
            links = ip.links()
            _client, server = ssh_connection_addresses(os.environ)
            conn = ip.connection_interfaces(links, [self.params.get("connection_address"), server], _client)
        except CapabilityError:
            return list(device["netdevs"])  # cannot tell: treat them as carrying it
        return sorted(set(conn) & set(device["netdevs"]))

    # -- result -----------------------------------------------------------------------------
    def result(self, state, actions):
        firmware_reset = set(self.resets)
        devices, pending, reasons, not_applied, findings, unsupported = [], [], [], [], [], []
        reboot = False
        for item in self.items:
            device = item["device"]
            params = []
            for entry in item["params"]:
                public = dict((k, v) for k, v in entry.items() if k != "want")
                params.append(public)
                # in check mode a planned firmware reset is taken to apply them (a real run queries again)
                asks = entry["state"] in REBOOT_STATES and not (self.check_mode and device["pci"] in firmware_reset)
                if asks:
                    reboot = True
                    pending.append({"pci": device["pci"], "param": entry["param"], "current": entry["current"],
                                    "next_boot": entry["wanted"], "state": entry["state"]})
                    reasons.append("%s %s: %s -> %s" % (device["pci"], entry["param"], entry["current"]
                                                        or entry["default"] or "?", entry["wanted"]))
            failed = [p for p in params if p["state"] == "not_applied"]
            if failed:
                recorded = (state["record"]["devices"].get(device["pci"]) or {}).get("params") or {}
                rows = [{"param": p["param"], "wanted": p["wanted"], "current": p["current"],
                         "next_boot": p["next_boot"], "set_at_boot": (recorded.get(p["param"]) or {}).get("boot_id")}
                        for p in failed]
                text = ("%s (PSID %s%s): %s still not Current after a reboot (Next Boot holds %s); no reboot is "
                        "asked for them again" % (device["pci"], device["psid"] or "?",
                                                  ", %s" % device.get("part_number") if device.get("part_number")
                                                  else "", ", ".join(p["param"] for p in failed),
                                                  ", ".join("%s=%s" % (p["param"], p["wanted"]) for p in failed)))
                not_applied.append({"pci": device["pci"], "psid": device["psid"],
                                    "part_number": device.get("part_number"), "params": rows,
                                    "boot_id": state["boot_id"], "text": text})
                findings.append({"check": FINDING, "pci": device["pci"], "psid": device["psid"],
                                 "params": [p["param"] for p in failed], "reason": text,
                                 "fix": "power-cycle the node or reset the NIC (mlxfwreset; firmware_reset: true for "
                                        "devices a warm reboot does not apply), check the firmware version; then "
                                        "remove the device from %s to allow one more reboot"
                                        % self.params["state_file"]})
            for entry in item["unsupported"]:
                unsupported.append(dict(entry, pci=device["pci"]))
            devices.append({
                "pci": device["pci"], "functions": device["functions"], "psid": device["psid"],
                "part_number": device.get("part_number"), "device_type": device.get("device_type"),
                "driver": device["driver"], "firmware_version": device.get("firmware_version"),
                "config": device["config"], "why": device["why"], "params": params,
                "unsupported": item["unsupported"], "sets": item["sets"],
                "max_read_request": [m for m in self.mrrs if m["pci"] in device["functions"]],
            })
        for entry in unsupported:
            self.warn("%s %s: %s" % (entry["pci"], entry["param"], entry["reason"]))
        return dict(devices=devices, reboot_required=reboot, reboot_reasons=reasons, pending=pending,
                    not_applied=not_applied, findings=findings, unsupported=unsupported,
                    boot_id=state["boot_id"], tool=state["tool"].name, state_file=self.params["state_file"])


def facts(root, runner, pci_dir=PCI_DEVICES, tool_choice="auto", arrays=(), state_file=STATE_FILE):
    """The live NV configuration of every NVIDIA/Mellanox device, for ``datapath_facts`` (never raises for a
    device: its error is kept): ``{tool, boot_id, record, devices: {pci: {psid, part_number, driver,
    functions, columns, params: {NAME: {default, current, next_boot, read_only}}, max_read_request, error}}}``."""
    tool = Tool(runner, tool_choice)
    out = {"tool": tool.name, "boot_id": root.read(BOOT_ID) or None, "devices": {}, "reason": None}
    try:
        out["record"] = read_record(root, state_file)
    except NicConfigError as exc:
        out["record"], out["reason"] = None, exc.msg
    devices = group(discover(root, pci_dir))
    if devices and tool.path is None:
        out["reason"] = tool.missing()
    for device in devices:
        entry = {"psid": device["psid"], "driver": device["driver"], "functions": device["functions"],
                 "firmware_version": device["firmware_version"], "part_number": None, "device_type": None,
                 "columns": [], "params": {}, "max_read_request": {}, "error": None}
        out["devices"][device["pci"]] = entry
        for bdf in device["functions"]:
            offset, value = pcie_devctl(root, pci_dir, bdf)
            entry["max_read_request"][bdf] = mrrs_of(value) if offset is not None else None
        if tool.path is None:
            continue
        try:
            first = read_device(tool, dict(device, functions=device["functions"][:1]), arrays)
        except NicConfigError as exc:
            entry["error"] = exc.msg
            continue
        entry.update(part_number=first["part_number"], device_type=first["device_type"], columns=first["columns"])
        for name in first["order"]:
            row = first["params"][name]
            entry["params"][name] = dict((column, column_text(row, column)) for column in first["columns"])
            entry["params"][name]["read_only"] = row.get("read_only", False)
    return out
