# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ACS off on the PCIe bridges between each GPU and its nearest NICs and NVMe devices, at every boot
(stdlib only; the ``pcie_acs`` module, docs/topology.md "ACS off at boot").

ACS (Access Control Services) request and completion redirect on a switch port sends every
peer-to-peer transaction between a GPU and a NIC or NVMe device below it up to the root complex:
GPUDirect RDMA and Storage run slowly or not at all (NVIDIA/nccl #1537). BIOS options do not reach
every switch, and the kernel turns ACS back on at each boot where the IOMMU asks for isolation, so
NVIDIA's guidance is a boot-time ``setpci -s BDF ECAP_ACS+0x6.w=0000`` per bridge.

The bridges come from ``node_topology``'s read (the same engine, the same rules): every bridge a
transfer between a GPU and one of its nearest NICs or NVMe devices crosses, that has an ACS
capability. The unit lists all of them, whether their redirect is on right now or not, so a second
run (after the first cleared them) plans the same unit: the list follows the hardware, not its
state. The unit is a systemd oneshot in ``sysinit.target``, before the NVIDIA daemons and kubelet
start; with ``runtime`` the bridges whose redirect is on are cleared now too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import (
    Action,
    Capability,
    apply_file,
    file_action,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology import NodeTopology
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError

DEFAULT_UNIT_FILE = "/etc/systemd/system/aiinfra-datapath-pcie-acs.service"
WANTED_BY = "sysinit.target"
ACS_OFF = "ECAP_ACS+0x6.w=0000"
REDIRECT_BITS = ("ReqRedir", "CmpltRedir", "EgressCtrl")

UNIT_HEADER = """# Managed by aiinfra.datapath.pcie_acs; changes here are overwritten.
# ACS off on the PCIe bridges between each GPU and its nearest NICs and NVMe devices, so that
# GPUDirect peer-to-peer traffic stays below the switch (docs/topology.md).
"""


def wants_link(unit_file):
    return "%s/%s.wants/%s" % (os.path.dirname(unit_file), WANTED_BY, os.path.basename(unit_file))


def render_unit(setpci, bridges):
    """The unit text: one ``ExecStart`` per bridge, in PCI order."""
    lines = [UNIT_HEADER, "[Unit]\n",
             "Description=PCIe ACS redirect off between GPUs and their NICs and NVMe devices (aiinfra.datapath)\n",
             "DefaultDependencies=no\n",
             "# PCI devices are enumerated by the kernel before userspace; clear ACS before anything uses\n",
             "# GPU peer-to-peer (the NVIDIA daemons, kubelet and its pods start after sysinit.target)\n",
             "After=systemd-modules-load.service\n",
             "Before=sysinit.target shutdown.target\n",
             "Conflicts=shutdown.target\n",
             "\n[Service]\n", "Type=oneshot\n", "RemainAfterExit=yes\n"]
    for bridge in bridges:
        lines.append("# %s: %s\n" % (bridge["pci"], ", ".join(bridge["paths"])))
        lines.append("ExecStart=%s -s %s %s\n" % (setpci, bridge["pci"], ACS_OFF))
    lines += ["\n[Install]\n", "WantedBy=%s\n" % WANTED_BY]
    return "".join(lines)


def acs_bridges(topology, nvme=True):
    """``(bridges, unknown)``: every bridge with an ACS capability on a path between a GPU and one of
    its nearest NICs (and NVMe devices), each ``{pci, redirect, acs_ctl, paths}``; and the bridges on
    those paths whose config space could not be read."""
    info = topology.get("bridges") or {}
    found, unknown = {}, set()
    for gpu in topology.get("gpus") or []:
        groups = [("nics", gpu.get("nearest_nics") or [])]
        if nvme:
            groups.append(("nvme", gpu.get("nearest_nvme") or []))
        for group, nearest in groups:
            for pair in gpu.get(group) or []:
                if pair.get("name") not in nearest:
                    continue
                unknown.update(pair.get("acs_unknown") or [])
                for bdf in pair.get("bridges") or []:
                    pcie = (info.get(bdf) or {}).get("pcie") or {}
                    acs = pcie.get("acs_ctl") if pcie.get("known") else None
                    if not acs:
                        continue
                    entry = found.setdefault(bdf, {
                        "pci": bdf, "acs_ctl": acs, "paths": [],
                        "redirect": any(acs.get(bit) for bit in REDIRECT_BITS)})
                    path = "GPU%s-%s" % (gpu.get("index"), pair.get("name"))
                    if path not in entry["paths"]:
                        entry["paths"].append(path)
    return [found[bdf] for bdf in sorted(found)], sorted(unknown - set(found))


class PcieAcs(Capability):
    """ACS redirect off on GPU to NIC/NVMe bridges, now and at every boot (a systemd unit)."""

    name = "pcie_acs"

    @classmethod
    def options(cls):
        return dict(
            state=dict(type="str", default="off", choices=["off", "absent"]),
            nvme=dict(type="bool", default=True),
            runtime=dict(type="bool", default=True),
            unit_file=dict(type="path", default=DEFAULT_UNIT_FILE),
        )

    def validate(self):
        unit = self.params["unit_file"]
        if not os.path.isabs(unit) or not unit.endswith(".service"):
            raise CapabilityError("unit_file must be an absolute path ending in .service, got %r" % unit)

    def _read_file(self, path):
        try:
            return self.root.read_raw(path)
        except (IOError, OSError):
            return None

    def read(self):
        unit = self.params["unit_file"]
        state = {"unit": self._read_file(unit), "link": self.root.exists(wants_link(unit))
                 or os.path.islink(self.root.path(wants_link(unit))),
                 "setpci": self.runner.which("setpci")}
        if self.params["state"] == "absent":
            state.update(topology=None, bridges=[], unknown=[], notes=[])
            return state
        reader = NodeTopology({"lspci": True, "nvidia_smi": False, "root": self.params.get("root") or "/"},
                              self.node)
        topo = reader.result(reader.read(), [])
        topology = topo["topology"]
        bridges, unknown = acs_bridges(topology, self.params["nvme"])
        state.update(topology=topology, bridges=bridges, unknown=unknown, notes=topo["notes"])
        return state

    def _unsupported(self, state):
        """Why there is nothing to do here (None: there is)."""
        topology = state["topology"] or {}
        if not topology.get("gpus"):
            return "no GPU on this node: no GPU to NIC or NVMe path to open"
        if not state["bridges"]:
            if state["unknown"]:
                return None
            devices = "NICs and NVMe devices" if self.params["nvme"] else "NICs"
            return ("no bridge with an ACS capability between a GPU and its nearest %s (the paths run "
                    "through the host bridge, or the switch has no ACS)" % devices)
        return None

    def plan(self, state):
        unit = self.params["unit_file"]
        link = wants_link(unit)
        actions = []
        if self.params["state"] == "absent" or self._unsupported(state):
            if state["unit"] is not None and self._owned(state["unit"]):
                actions.append(file_action(unit, state["unit"], None, "remove %s" % unit))
            if state["link"] and (state["unit"] is None or self._owned(state["unit"])):
                actions.append(Action("link", link, "remove %s" % link, before=unit, after=None, diff=False))
            return actions
        if state["unknown"]:
            raise CapabilityError(
                "cannot read the ACS control of %s (lspci -vvv needs root and pciutils): refusing to write a unit "
                "that may miss a bridge" % ", ".join(state["unknown"]), bridges=state["bridges"],
                unknown=state["unknown"])
        if not state["setpci"]:
            raise CapabilityError("setpci is not installed (package pciutils): the boot unit needs it",
                                  bridges=state["bridges"])
        text = render_unit(state["setpci"], state["bridges"])
        if state["unit"] != text:
            actions.append(file_action(unit, state["unit"], text, mode=0o644))
        if not state["link"]:
            actions.append(Action("link", link, "enable %s in %s" % (os.path.basename(unit), WANTED_BY),
                                  before=None, after=unit, diff=False))
        if self.params["runtime"]:
            for bridge in state["bridges"]:
                if bridge["redirect"]:
                    on = [bit for bit in REDIRECT_BITS if bridge["acs_ctl"].get(bit)]
                    actions.append(Action("acs", bridge["pci"], "clear ACS %s on %s (%s)"
                                          % ("/".join(on), bridge["pci"], ", ".join(bridge["paths"])),
                                          before="+".join(on), after="off", diff="ACS redirect"))
        return actions

    @staticmethod
    def _owned(text):
        return text.startswith("# Managed by aiinfra.datapath.pcie_acs")

    def apply(self, state, actions):
        unit = self.params["unit_file"]
        for action in actions:
            if action.kind == "file":
                apply_file(self.root, action)
            elif action.kind == "link":
                path = self.root.path(action.target)
                if action.after is None:
                    if os.path.lexists(path):
                        os.unlink(path)
                else:
                    parent = os.path.dirname(path)
                    if not os.path.isdir(parent):
                        os.makedirs(parent, 0o755)
                    if os.path.lexists(path):
                        os.unlink(path)
                    os.symlink(unit, path)
            elif action.kind == "acs":
                try:
                    self.runner.run([state["setpci"], "-s", action.target, ACS_OFF], record=True)
                except CommandError as exc:
                    raise CapabilityError("setpci could not clear ACS on %s: %s (the boot unit is written; it "
                                          "runs at the next boot)" % (action.target, exc), bridges=state["bridges"])

    def result(self, state, actions):
        reason = None if self.params["state"] == "absent" else self._unsupported(state)
        bridges = [dict((k, b[k]) for k in ("pci", "redirect", "paths")) for b in state["bridges"]]
        out = dict(supported=reason is None, bridges=bridges, unit_file=self.params["unit_file"],
                   reboot_required=False)
        if reason:
            out["reason"] = reason
        if state["notes"]:
            out["notes"] = state["notes"]
        return out
