# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network interfaces on the node: ``ip -j -d link`` parsing, matching, MTU limits.

Stdlib only. The live link table comes from ``ip -j -d link show`` (iproute2 JSON); the
bus address and driver come from sysfs (``/sys/class/net/IF/device`` and its ``driver``
link) read through a ``HostRoot`` so that unit tests can point at a fake tree.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

SYS_NET = "/sys/class/net"
ETH_MIN_MTU = 68
PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\Z")
# ethtool's driver name of virtual devices (what udev's Driver= sees; no sysfs driver link)
KIND_DRIVERS = {"veth": "veth", "bond": "bonding", "bridge": "bridge", "vlan": "802.1Q VLAN Support",
                "dummy": "dummy", "macvlan": "macvlan", "ipvlan": "ipvlan", "vxlan": "vxlan", "tun": "tun",
                "loopback": None}
# the kernel's DEVTYPE of a netdev kind (systemd's Type= prefers it over the ARP type)
KIND_DEVTYPES = {"bond": "bond", "bridge": "bridge", "vlan": "vlan", "wireguard": "wireguard"}
# /sys/class/net/IF/name_assign_type: 1 enumerated, 2 predictable, 3 user, 4 renamed
NAME_RENAMED = "4"


class LinkError(CapabilityError):
    """The link table cannot be read or parsed."""


def parse_link_json(text):
    """Parse ``ip -j -d link show`` output into ``{ifname: link-dict}``."""
    try:
        data = json.loads(text or "[]")
    except (ValueError, RecursionError) as exc:
        raise LinkError("cannot parse 'ip -j -d link show' output: %s" % exc)
    if not isinstance(data, list):
        raise LinkError("'ip -j -d link show' did not return a JSON list")
    links = {}
    for entry in data:
        if isinstance(entry, dict) and entry.get("ifname"):
            problem = _link_problem(entry)
            if problem:
                raise LinkError("'ip -j -d link show' printed a link this module cannot read: %s" % problem)
            links[entry["ifname"]] = entry
    return links


# The fields of a link that the modules read, with the JSON type iproute2 prints for each.
_LINK_TEXT = ("ifname", "address", "permaddr", "link", "master", "link_type", "operstate")
_LINK_NUMBERS = ("mtu", "min_mtu", "max_mtu", "ifindex")


def _link_problem(entry):
    """What is wrong with the type of a field the modules read (None when every one is right)."""
    name = entry.get("ifname")
    for key in _LINK_TEXT:
        if entry.get(key) is not None and not isinstance(entry[key], str):
            return "%s of %r is %r, not a string" % (key, name, entry[key])
    for key in _LINK_NUMBERS:
        value = entry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return "%s of %r is %r, not an integer" % (key, name, value)
    info = entry.get("linkinfo")
    if info is not None and not isinstance(info, dict):
        return "linkinfo of %r is %r, not an object" % (name, info)
    for key in ("info_kind", "info_slave_kind"):
        if (info or {}).get(key) is not None and not isinstance(info[key], str):
            return "linkinfo.%s of %r is %r, not a string" % (key, name, info[key])
    altnames = entry.get("altnames")
    if altnames is not None and not (isinstance(altnames, list) and all(isinstance(a, str) for a in altnames)):
        return "altnames of %r is %r, not a list of names" % (name, altnames)
    return None


def _json_list(text):
    """An ``ip -j`` answer as a list of objects ([] for anything else: unreadable means unknown)."""
    try:
        data = json.loads(text or "[]")
    except (ValueError, RecursionError):
        return []
    return [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []


def link_kind(link):
    info = link.get("linkinfo") or {}
    if info.get("info_kind"):
        return info["info_kind"]
    return "physical" if link.get("link_type") == "ether" else link.get("link_type")


def link_parent(link):
    """The lower device of a VLAN/macvlan (``link`` key, same namespace only)."""
    if (link.get("linkinfo") or {}).get("info_kind") in ("vlan", "macvlan", "ipvlan", "macvtap"):
        return link.get("link")
    return None


def bond_slaves(links, name):
    return sorted(n for n, link in links.items() if link.get("master") == name
                  and ((link.get("linkinfo") or {}).get("info_slave_kind") in (None, "bond", "team")))


def sysfs_device(host, ifname):
    """Return (bus_address, driver) of a netdev from sysfs, or (None, None) if virtual."""
    dev = host.path(SYS_NET, ifname, "device")
    if not os.path.exists(dev):
        return None, None
    bus = os.path.basename(os.path.realpath(dev))
    drv_link = os.path.join(dev, "driver")
    driver = os.path.basename(os.path.realpath(drv_link)) if os.path.exists(drv_link) else None
    return bus, driver


def _device_path(host, ifname):
    """The sysfs path of the device behind ``ifname`` relative to the node (``/sys/devices/...``)."""
    dev = host.path(SYS_NET, ifname, "device")
    if not os.path.exists(dev):
        return None
    real = os.path.realpath(dev)
    base = os.path.realpath(host.path("/"))
    if base != "/" and real.startswith(base + "/"):
        real = real[len(base):]
    return real


def _uevent(host, ifname):
    text = host.read_raw(os.path.join(SYS_NET, ifname, "uevent"))
    if text is None:
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def device_facts(host, links, name):
    """What udev and systemd-networkd match a device by, as far as the node tells.

    ``{name, kind, bus, mac, permaddr, altnames, driver, path, type, devkind, id_bus,
    original_name, renamed}``: a key that is absent is *unknown* (a ``[Match]`` condition on
    it may or may not hold); a key set to None means the device has no such property (a
    virtual device has no ``Path=``), so a positive pattern does not match it.
    """
    link = links[name]
    kind = link_kind(link)
    bus, driver = sysfs_device(host, name)
    facts = {"name": name, "kind": kind, "bus": bus, "mac": (link.get("address") or "").lower() or None,
             "altnames": list(link.get("altnames") or []), "renamed": False,
             "devkind": (link.get("linkinfo") or {}).get("info_kind")}
    devpath = _device_path(host, name)
    if devpath is None:                      # virtual: no bus, no ID_PATH, no permanent MAC
        facts.update(path=None, id_bus=None, permaddr=(link.get("permaddr") or "").lower() or None)
        if kind in KIND_DRIVERS:
            facts["driver"] = KIND_DRIVERS[kind]
    else:
        facts["driver"] = driver
        facts["permaddr"] = (link.get("permaddr") or link.get("address") or "").lower() or None
        parts = devpath.split("/")
        pci = [p for p in parts if PCI_ADDRESS.match(p)]
        if any(p.startswith("usb") for p in parts):
            facts["id_bus"] = "usb"          # ID_PATH of a USB NIC: pci-...-usb-...; not derived here
        elif pci and devpath.startswith("/sys/devices/pci"):
            facts.update(id_bus="pci", path="pci-%s" % pci[-1])
    uevent = _uevent(host, name)
    devtype = uevent.get("DEVTYPE") if uevent is not None else KIND_DEVTYPES.get(kind)
    if uevent is not None or devpath is None or kind == "physical":
        facts["type"] = devtype or link.get("link_type")
    assign = host.read(os.path.join(SYS_NET, name, "name_assign_type"), default="")
    if assign == NAME_RENAMED:
        facts["renamed"] = True              # the kernel's name is not known any more
    elif assign in ("1", "2", "3"):
        facts["original_name"] = name
    return facts


def parse_match(item):
    """Normalise an ``interfaces`` item to its selector: ``match`` or else ``{name: ...}``."""
    match = dict((k, v) for k, v in (item.get("match") or {}).items() if v not in (None, ""))
    if not match and item.get("name"):
        match = {"name": item["name"]}
    return match


def describe_match(match):
    return " ".join("%s=%s" % (k, match[k]) for k in sorted(match))


def match_interfaces(links, host, match):
    """Names of links that satisfy every key of ``match`` (name, mac, pci, driver)."""
    found = []
    for name in sorted(links):
        link = links[name]
        if "name" in match and match["name"] != name:
            continue
        if "mac" in match:
            macs = set(m.lower() for m in (link.get("address"), link.get("permaddr")) if m)
            if str(match["mac"]).lower() not in macs:
                continue
        if "pci" in match or "driver" in match:
            bus, driver = sysfs_device(host, name)
            if "pci" in match and (bus or "").lower() != str(match["pci"]).lower():
                continue
            if "driver" in match and driver != match["driver"]:
                continue
        found.append(name)
    return found


def mtu_limits(links, name, targets=None):
    """Effective (min, max) MTU of ``name``; VLANs follow the parent, bonds their slaves.

    ``targets`` maps interface names to the MTU this run will give them, so that a VLAN's
    limit is its parent's MTU *after* the run.
    """
    targets = targets or {}
    link = links[name]
    low = link.get("min_mtu", ETH_MIN_MTU)
    high = link.get("max_mtu")
    why = "device"
    parent = link_parent(link)
    if parent and parent in links:
        parent_mtu = targets.get(parent, links[parent].get("mtu"))
        if parent_mtu is not None and (high is None or parent_mtu < high):
            high, why = parent_mtu, "MTU of parent %s" % parent
    if (link.get("linkinfo") or {}).get("info_kind") == "bond":
        for slave in bond_slaves(links, name):
            smax = links[slave].get("max_mtu")
            if smax is not None and (high is None or smax < high):
                high, why = smax, "max MTU of bond slave %s" % slave
    return low, high, why


def depth(links, name, _seen=None):
    """How many lower devices stand below ``name`` (0 for a NIC, 1 for its VLAN, ...)."""
    _seen = _seen or set()
    if name in _seen or name not in links:
        return 0
    _seen.add(name)
    lowers = [link_parent(links[name])] + bond_slaves(links, name)
    lowers = [x for x in lowers if x and x in links]
    if not lowers:
        return 0
    return 1 + max(depth(links, x, _seen) for x in lowers)


def related(links, name):
    """``name`` plus every device whose MTU change would affect traffic on it."""
    out, todo = set(), [name]
    while todo:
        cur = todo.pop()
        if cur in out or cur not in links:
            continue
        out.add(cur)
        parent = link_parent(links[cur])
        if parent:
            todo.append(parent)
        todo.extend(bond_slaves(links, cur))
        master = links[cur].get("master")
        if master:
            todo.append(master)
    return out


def interfaces_with_address(addr_json, address):
    """Names of interfaces holding ``address`` in ``ip -j addr show`` output."""
    names = []
    for entry in _json_list(addr_json):
        infos = entry.get("addr_info")
        for info in infos if isinstance(infos, list) else []:
            if isinstance(info, dict) and info.get("local") == address and isinstance(entry.get("ifname"), str):
                names.append(entry["ifname"])
    return sorted(set(n for n in names if n))


def route_device(route_json):
    """Outgoing device from ``ip -j route get ADDR`` output (None for a local route)."""
    for entry in _json_list(route_json):
        if entry.get("type") == "local" or entry.get("dev") == "lo":
            return None
        if entry.get("dev") and isinstance(entry["dev"], str):
            return entry["dev"]
    return None


def ssh_connection_addresses(environ):
    """(client, server) addresses from ``SSH_CONNECTION`` (None when absent or UNKNOWN)."""
    parts = (environ.get("SSH_CONNECTION") or "").split()
    if len(parts) != 4:
        return None, None
    client, server = parts[0], parts[2]
    return (None if client == "UNKNOWN" else client), (None if server == "UNKNOWN" else server)


class IpLink(object):
    """Live link state through iproute2, behind a runner (real or recorded)."""

    def __init__(self, runner, ip="ip"):
        self.runner = runner
        self.ip = ip

    def links(self):
        rc, out, err = self.runner.run([self.ip, "-j", "-d", "link", "show"], check=False)
        if rc != 0:
            raise LinkError("'ip -j -d link show' failed: %s" % (err or out).strip())
        return parse_link_json(out)

    def set_mtu_argv(self, name, mtu):
        return [self.ip, "link", "set", "dev", name, "mtu", str(mtu)]

    def set_mtu(self, name, mtu):
        self.runner.run(self.set_mtu_argv(name, mtu), record=True)

    def addresses(self):
        rc, out, err = self.runner.run([self.ip, "-j", "addr", "show"], check=False)
        return out if rc == 0 else "[]"

    def route_get(self, address):
        rc, out, err = self.runner.run([self.ip, "-j", "route", "get", address], check=False)
        return out if rc == 0 else "[]"

    def connection_interfaces(self, links, addresses, client=None):
        """Interfaces that carry the management connection (plus their lower/upper devices)."""
        found = set()
        addr_json = None
        for address in addresses:
            if not address:
                continue
            if addr_json is None:
                addr_json = self.addresses()
            local = interfaces_with_address(addr_json, address)
            found.update(local)
            if not local:
                dev = route_device(self.route_get(address))
                if dev:
                    found.add(dev)
        if client:
            dev = route_device(self.route_get(client))
            if dev:
                found.add(dev)
        out = set()
        for name in found:
            out |= related(links, name)
        return sorted(out)
