# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Persistence of interface MTUs through the node's network configuration backend.

One class per backend: systemd-networkd (``_netconf_systemd``), netplan
(``_netconf_netplan``), NetworkManager and ifupdown (here). Each turns a list of targets —
the device facts of ``_iplink.device_facts`` plus ``mtu`` — into actions of the capability
contract (``file`` actions for files to write or remove, ``command`` actions for ``nmcli``)
plus ``notes`` for what it cannot persist or persists another way; ``others`` are the node's
other devices, which no file written here may reach. Nothing here changes the live link:
``ip link set`` does that; these files take effect at the next boot or reconfiguration,
never by restarting the network stack from here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Action, apply_file
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_netplan import OWN as NETPLAN_OWN
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_netplan import (
    NETPLAN_DIRS,
    NetplanBackend,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_systemd import (
    HEADER,
    Backend,
    NetworkdBackend,
)

NM_SECTION = "NetworkManager connections"
NETWORKD_STATE = "/run/systemd/netif/state"


def apply_change(root, runner, action):
    """Do one persistence action: write the file below ``root`` or run the command."""
    if action.kind == "command":
        runner.run(action.data["argv"], record=True)
    else:
        apply_file(root, action)


class NetworkManagerBackend(Backend):
    """``nmcli connection modify`` on the connection active on the device."""

    name = "networkmanager"
    label = "NetworkManager"
    mtu_property = {"infiniband": "infiniband.mtu"}
    default_property = "802-3-ethernet.mtu"

    def _get(self, argv):
        rc, out, err = self.runner.run(argv, check=False)
        return (out or "").strip() if rc == 0 else None

    def plan(self, targets, others=()):
        changes, notes = [], []
        if not self.runner.which("nmcli"):
            return [], ["nmcli is not installed; MTU not persisted through NetworkManager"]
        for target in targets:
            uuid = self._get(["nmcli", "-g", "GENERAL.CON-UUID", "device", "show", target["name"]])
            if not uuid:
                notes.append("%s: no NetworkManager connection is active on it; MTU not persisted"
                             % target["name"])
                continue
            ctype = self._get(["nmcli", "-g", "connection.type", "connection", "show", uuid]) or ""
            prop = self.mtu_property.get(ctype, self.default_property)
            current = self._get(["nmcli", "-g", prop, "connection", "show", uuid])
            if current == str(target["mtu"]):
                continue
            argv = ["nmcli", "-t", "connection", "modify", uuid, prop, str(target["mtu"])]
            what = "nmcli connection modify %s %s %d (%s)" % (uuid, prop, target["mtu"], target["name"])
            changes.append(Action("command", "%s %s" % (uuid, prop), what, before=current,
                                  after=str(target["mtu"]), diff=NM_SECTION, argv=argv))
        return changes, notes


class IfupdownBackend(Backend):
    """/etc/network/interfaces.d/aiinfra-IF, only when /etc/network/interfaces sources it."""

    name = "ifupdown"
    label = "ifupdown"
    main = "/etc/network/interfaces"
    directory = "/etc/network/interfaces.d"
    source_re = re.compile(r"^\s*(source\s+(/etc/network/)?interfaces\.d/\*|"
                           r"source-directory\s+(/etc/network/)?interfaces\.d/?)\s*$", re.M)

    def file_for(self, name):
        return "%s/aiinfra-%s" % (self.directory, name)

    def sources_directory(self):
        return bool(self.source_re.search(self.host.read_raw(self.main) or ""))

    def stanza_elsewhere(self, name):
        iface = re.compile(r"^\s*iface\s+%s\s" % re.escape(name), re.M)
        paths = [self.main] + [os.path.join(self.directory, f) for f in self.host.listdir(self.directory)]
        for path in paths:
            if path != self.file_for(name) and iface.search(self.host.read_raw(path) or ""):
                return path
        return None

    def plan(self, targets, others=()):
        changes, notes = [], []
        if not self.sources_directory():
            return [], ["%s does not source %s/*; MTU not persisted (add 'source %s/*')"
                        % (self.main, self.directory, self.directory)]
        for target in targets:
            other = self.stanza_elsewhere(target["name"])
            if other:
                notes.append("%s: defined in %s; add 'mtu %d' to that stanza (not edited automatically)"
                             % (target["name"], other, target["mtu"]))
                continue
            content = "# %s\nauto %s\niface %s inet manual\n    mtu %d\n" % (
                HEADER, target["name"], target["name"], target["mtu"])
            change = self._file_change(self.file_for(target["name"]), content)
            if change:
                changes.append(change)
        return changes, notes


BACKENDS = dict((cls.name, cls)
                for cls in (NetplanBackend, NetworkManagerBackend, NetworkdBackend, IfupdownBackend))
DETECT_ORDER = ("netplan", "networkmanager", "networkd", "ifupdown")


def detect(host, runner, systemctl=None):
    """Return ``{backend: evidence}`` for each backend the node has (nothing is guessed)."""
    found = {}
    yaml = [os.path.join(d, f) for d in NETPLAN_DIRS for f in host.listdir(d)
            if f.endswith(".yaml") and os.path.join(d, f) != NETPLAN_OWN]
    if yaml:
        etc = [p for p in yaml if p.startswith("/etc/")]
        found["netplan"] = "/etc/netplan/*.yaml present" if etc else "%s present" % yaml[0]
    answered = False
    if systemctl:
        # one call for both units: systemctl prints one state per unit, in the order given
        units = (("networkmanager", "NetworkManager"), ("networkd", "systemd-networkd"))
        rc, out, err = runner.run([systemctl, "is-active"] + [pair[1] for pair in units], check=False)
        states = [line.strip() for line in (out or "").splitlines()]
        answered = any(states)
        if len(states) == len(units):
            for index, (backend, unit) in enumerate(units):
                if states[index] == "active":
                    found[backend] = "%s is active" % unit
    if not answered and host.exists(NETWORKD_STATE):
        # No service manager answers (a container, a node without systemd as PID 1): networkd
        # running on its own keeps its state file in /run (a tmpfs: gone with the boot that wrote it).
        found["networkd"] = "no service manager answers; %s present" % NETWORKD_STATE
    if host.exists(IfupdownBackend.main):
        found["ifupdown"] = "%s present" % IfupdownBackend.main
    return found


def choose(found):
    for name in DETECT_ORDER:
        if name in found:
            return name
    return None
