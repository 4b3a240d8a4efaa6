# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node hears from its switch ports: one LLDP frame per interface, its DCBX TLVs decoded (stdlib).

No lldpad (which would also take the switch's settings and apply them to the NIC): per interface one
bounded capture, ``timeout T tcpdump -c 1 -Q in -nn -e -xx -i IF ether proto 0x88cc``, all interfaces at
once on threads, and the frame's bytes from tcpdump's hex dump decoded here (IEEE 802.1AB LLDP; IEEE
802.1Qaz DCBX TLVs, organizationally specific, OUI 00-80-C2):

* subtype 9, ETS Configuration: willing, CBS, max TCs (0 means 8), priority -> TC, TC bandwidth, TSA per TC;
* subtype 10, ETS Recommendation: what the switch recommends its peer (priority -> TC, bandwidth, TSA);
* subtype 11, PFC Configuration: willing, MBC, PFC capability, the enable bit of each priority;
* subtype 12, Application Priority: (priority, selector, protocol): selector 1 Ethertype, 2 TCP/SCTP
  port, 3 UDP/DCCP port (RoCEv2: 4791), 4 TCP/SCTP/UDP/DCCP port, 5 DSCP.

The pre-standard CEE DCBX TLV (OUI 00-1B-21) is noted, not decoded. Read-only: nothing on the node
changes (tcpdump puts the NIC in promiscuous mode while it listens, unless ``promiscuous: false``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import struct
import threading

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import (
    describe_match,
    match_interfaces,
    parse_match,
)

ETH_P_LLDP = 0x88CC
OUI_8021 = b"\x00\x80\xc2"
OUI_CEE = b"\x00\x1b\x21"
TSA = {0: "strict", 1: "cbs", 2: "ets", 255: "vendor"}
SELECTORS = {1: "ethertype", 2: "tcp", 3: "udp", 4: "tcp-udp", 5: "dscp"}
MAX_FRAME = 9216
_HEX_LINE = re.compile(r"^\s+0x([0-9a-fA-F]{4}):\s+((?:[0-9a-fA-F]{2,4}\s*)+)\Z")
_IFNAME = re.compile(r"^[^/\s:]{1,15}\Z")
SYS_NET = "/sys/class/net"


class FrameError(ValueError):
    """Bytes that are not an LLDP frame."""


def hex_frame(text):
    """The bytes of the first packet of ``tcpdump -xx`` output (its ``0x0000:`` hex lines); b"" if none."""
    out = bytearray()
    started = False
    for line in (text or "").splitlines():
        match = _HEX_LINE.match(line)
        if not match:
            if started:
                break
            continue
        offset = int(match.group(1), 16)
        if offset == 0 and started:
            break  # a second packet
        started = True
        if offset != len(out):
            raise FrameError("tcpdump hex dump skips from byte %d to %d" % (len(out), offset))
        out.extend(bytes.fromhex("".join(match.group(2).split())))
        if len(out) > MAX_FRAME:
            raise FrameError("frame longer than %d bytes" % MAX_FRAME)
    return bytes(out)


def _mac(data):
    return ":".join("%02x" % b for b in bytearray(data))


def _text(data):
    return bytes(data).decode("utf-8", "replace").strip("\x00").strip()


def _id(subtype, value, kind):
    """Chassis/port ID value as text: MAC subtypes as a MAC, names as text, the rest as hex."""
    mac_subtype = 4 if kind == "chassis" else 3
    if subtype == mac_subtype and len(value) == 6:
        return _mac(value)
    if subtype == 5 and kind == "chassis" and len(value) >= 5 and bytearray(value)[0] == 1:
        return ".".join(str(b) for b in bytearray(value)[1:5])  # network address, IPv4
    text = _text(value)
    if text and all(32 <= ord(c) < 127 for c in text):
        return text
    return bytes(value).hex()


def _pat(data):
    """Priority Assignment Table (4 octets, two priorities per octet, high nibble first) -> TC per priority."""
    out = []
    for byte in bytearray(data[:4]):
        out.extend([byte >> 4, byte & 0x0F])
    return out


def _ets_tables(data):
    return {"prio_tc": _pat(data[0:4]), "tc_bw": list(bytearray(data[4:12])),
            "tsa": [TSA.get(b, "reserved-%d" % b) for b in bytearray(data[12:20])]}


def decode_8021(subtype, info):
    """One IEEE 802.1 organizationally specific TLV body (after OUI and subtype) -> (key, value) or None."""
    data = bytearray(info)
    if subtype == 9 and len(data) >= 21:
        value = {"willing": bool(data[0] & 0x80), "cbs": bool(data[0] & 0x40), "max_tcs": data[0] & 0x07}
        value.update(_ets_tables(data[1:21]))
        return "ets_config", value
    if subtype == 10 and len(data) >= 21:
        return "ets_recommendation", _ets_tables(data[1:21])
    if subtype == 11 and len(data) >= 2:
        return "pfc", {"willing": bool(data[0] & 0x80), "mbc": bool(data[0] & 0x40), "cap": data[0] & 0x0F,
                       "enabled": [p for p in range(8) if data[1] & (1 << p)]}
    if subtype == 12 and len(data) >= 1:
        entries = []
        for start in range(1, len(data) - 2, 3):
            head, protocol = data[start], struct.unpack("!H", bytes(data[start + 1:start + 3]))[0]
            selector = head & 0x07
            entries.append({"priority": head >> 5, "selector": selector,
                            "selector_name": SELECTORS.get(selector, "reserved"), "protocol": protocol})
        return "app_priority", entries
    return None


def parse_lldp(frame):
    """An Ethernet frame carrying LLDP -> {source_mac, chassis_id, port_id, port_description, system_name,
    ttl, dcbx: {pfc, ets_config, ets_recommendation, app_priority, cee}}; raises FrameError."""
    data = bytes(frame)
    if len(data) < 14:
        raise FrameError("a %d-byte frame is shorter than an Ethernet header" % len(data))
    offset = 12
    ethertype = struct.unpack("!H", data[offset:offset + 2])[0]
    while ethertype in (0x8100, 0x88A8) and len(data) >= offset + 6:
        offset += 4
        ethertype = struct.unpack("!H", data[offset:offset + 2])[0]
    if ethertype != ETH_P_LLDP:
        raise FrameError("ethertype 0x%04x is not LLDP (0x88cc)" % ethertype)
    out = {"source_mac": _mac(data[6:12]), "destination_mac": _mac(data[0:6]), "chassis_id": None,
           "port_id": None, "port_description": None, "system_name": None, "ttl": None,
           "dcbx": {"pfc": None, "ets_config": None, "ets_recommendation": None, "app_priority": None,
                    "cee": False}, "tlvs": 0}
    pos = offset + 2
    while pos + 2 <= len(data):
        header = struct.unpack("!H", data[pos:pos + 2])[0]
        kind, length = header >> 9, header & 0x1FF
        value = data[pos + 2:pos + 2 + length]
        if len(value) < length:
            raise FrameError("TLV type %d at byte %d claims %d bytes, %d remain" % (kind, pos, length, len(value)))
        pos += 2 + length
        out["tlvs"] += 1
        if kind == 0:
            break
        if kind in (1, 2) and length >= 1:
            out["chassis_id" if kind == 1 else "port_id"] = _id(bytearray(value)[0], value[1:],
                                                                "chassis" if kind == 1 else "port")
        elif kind == 3 and length >= 2:
            out["ttl"] = struct.unpack("!H", value[:2])[0]
        elif kind == 4:
            out["port_description"] = _text(value)
        elif kind == 5:
            out["system_name"] = _text(value)
        elif kind == 127 and length >= 4:
            oui, subtype = value[:3], bytearray(value)[3]
            if oui == OUI_8021:
                decoded = decode_8021(subtype, value[4:])
                if decoded:
                    out["dcbx"][decoded[0]] = decoded[1]
            elif oui == OUI_CEE:
                out["dcbx"]["cee"] = True
    if out["chassis_id"] is None or out["port_id"] is None:
        raise FrameError("no Chassis ID or Port ID TLV: not an LLDPDU")
    return out


def capture_argv(tcpdump, timeout, interface, promiscuous=True):
    """The bounded capture of one inbound LLDP frame on ``interface`` (argv; nothing from the spec is
    interpreted by a shell)."""
    argv = ["timeout", "--kill-after=2", str(int(timeout)), tcpdump, "-c", "1", "-Q", "in", "-nn", "-e", "-xx",
            "-s", str(MAX_FRAME), "-i", interface]
    if not promiscuous:
        argv.append("-p")
    return argv + ["ether", "proto", "0x%04x" % ETH_P_LLDP]


def heard(interface, rc, out, err, timeout):
    """One capture's result row from tcpdump's exit status and output."""
    row = {"interface": interface, "heard": False, "reason": None, "frame": None}
    if rc == 124 or (rc == 0 and not hex_frame(out)):
        row["reason"] = ("no LLDP frame within %d s: the switch port sends no LLDP, its interval is longer, or the "
                         "NIC's firmware LLDP agent consumes the frames" % timeout)
        return row
    if rc != 0:
        row["reason"] = "tcpdump failed (rc=%s): %s" % (rc, " ".join((err or out or "").split())[:300])
        return row
    try:
        frame = hex_frame(out)
        row.update(parse_lldp(frame))
    except FrameError as exc:
        row["reason"] = "the captured frame is not a valid LLDPDU: %s" % exc
        return row
    row["heard"] = True
    row["frame"] = frame.hex()
    return row


class LldpDcbx(Capability):
    """One LLDP frame per RoCE interface, DCBX decoded (read-only)."""

    name = "lldp_dcbx"
    read_only = True

    @classmethod
    def options(cls):
        match = dict(name=dict(type="str"), mac=dict(type="str"), pci=dict(type="str"), driver=dict(type="str"))
        return dict(
            interfaces=dict(type="list", elements="dict", required=True, options=dict(
                interface=dict(type="str"), match=dict(type="dict", options=match), fabric=dict(type="str"))),
            timeout=dict(type="int", default=35),
            promiscuous=dict(type="bool", default=True),
        )

    def validate(self):
        if not 1 <= self.params["timeout"] <= 300:
            raise CapabilityError("lldp_dcbx: timeout must be 1 to 300 seconds (LLDP's default interval is 30)")
        for index, item in enumerate(self.params["interfaces"]):
            name = item.get("interface")
            if name is not None and (not _IFNAME.match(name) or name in (".", "..")):
                raise CapabilityError("lldp_dcbx: interfaces[%d]: %r is not an interface name" % (index, name))

    def _resolve(self):
        links = dict((n, {"address": self.root.read("%s/%s/address" % (SYS_NET, n), "")})
                     for n in self.root.listdir(SYS_NET))
        rows = []
        for index, item in enumerate(self.params["interfaces"]):
            match = parse_match({"name": item.get("interface"), "match": item.get("match")})
            base = {"index": index, "requested": describe_match(match) if match else None,
                    "fabric": item.get("fabric")}
            if not match:
                rows.append(dict(base, interface=None, heard=False, reason="give interface or match"))
                continue
            names = match_interfaces(links, self.root, match)
            if len(names) != 1:
                rows.append(dict(base, interface=None, heard=False,
                                 reason="%s matches %d interfaces (%s); it must match exactly one"
                                 % (describe_match(match), len(names), ", ".join(names) or "none present")))
                continue
            rows.append(dict(base, interface=names[0]))
        return rows

    def read(self):
        rows = self._resolve()
        tools = {"tcpdump": self.runner.which("tcpdump"), "timeout": self.runner.which("timeout")}
        todo = [row for row in rows if row.get("interface") and "reason" not in row]
        if todo and not (tools["tcpdump"] and tools["timeout"]):
            missing = " and ".join(n for n in ("tcpdump", "timeout") if not tools[n])
            for row in todo:
                row.update(heard=False, reason="%s is not installed on the node" % missing)
            return {"interfaces": rows}
        timeout = self.params["timeout"]
        lock = threading.Lock()

        def capture(row):
            argv = capture_argv(tools["tcpdump"], timeout, row["interface"], self.params["promiscuous"])
            argv[0] = tools["timeout"]
            rc, out, err = self.runner.run(argv, check=False)
            result = heard(row["interface"], rc, out, err, timeout)
            with lock:
                row.update(result)

        threads = [threading.Thread(target=capture, args=(row,)) for row in todo]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return {"interfaces": rows}

    def result(self, state, actions):
        return dict(interfaces=state["interfaces"], changed=False)
