"""Crafted LLDP frames with IEEE 802.1Qaz DCBX TLVs (the lab's switch sends these; the tests decode them).

Built from IEEE 802.1AB-2016 (LLDPDU, TLV header: 7-bit type, 9-bit length) and IEEE 802.1Qaz-2011 Annex D
(organizationally specific TLVs of OUI 00-80-C2: 9 ETS Configuration, 11 PFC Configuration, 12 Application
Priority); tcpdump's own LLDP printer (print-lldp.c) decodes them the same way (tests/interop/test_lldp_tcpdump.py).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

LLDP_MULTICAST = bytes.fromhex("0180c200000e")
SWITCH_MAC = bytes.fromhex("443839000001")


def tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!H", (kind << 9) | len(value)) + value


def org(subtype: int, body: bytes) -> bytes:
    return tlv(127, b"\x00\x80\xc2" + bytes([subtype]) + body)


def lldp_frame(pfc: Iterable[int] = (3,), pfc_willing: bool = False, system: str = "leaf01", port: str = "swp1",
               prio_tc: Sequence[int] = (0, 1, 2, 3, 4, 5, 6, 7), tc_bw: Sequence[int] = (10, 10, 10, 50, 10, 0, 0, 10),
               tsa: Sequence[int] = (2, 2, 2, 2, 2, 2, 0, 2), ets_willing: bool = False,
               apps: Iterable[tuple[int, int, int]] = ((3, 3, 4791),), source: bytes = SWITCH_MAC) -> bytes:
    """One Ethernet frame: Chassis ID (MAC), Port ID (interface name), TTL 120, System Name, PFC, ETS
    Configuration, Application Priority ((priority, selector, protocol), selector 3 = UDP), End."""
    enabled = 0
    for prio in pfc:
        enabled |= 1 << prio
    body = tlv(1, b"\x04" + source) + tlv(2, b"\x05" + port.encode()) + tlv(3, struct.pack("!H", 120))
    body += tlv(5, system.encode())
    body += org(11, bytes([(0x80 if pfc_willing else 0) | 8, enabled]))
    pat = bytes((prio_tc[i] << 4) | prio_tc[i + 1] for i in range(0, 8, 2))
    body += org(9, bytes([0x80 if ets_willing else 0]) + pat + bytes(tc_bw) + bytes(tsa))
    body += org(12, b"\x00" + b"".join(struct.pack("!BH", (p << 5) | s, proto) for p, s, proto in apps))
    body += tlv(0, b"")
    return LLDP_MULTICAST + source + struct.pack("!H", 0x88CC) + body


def pcap(frames: Iterable[bytes]) -> bytes:
    """A classic pcap file (little endian, Ethernet) holding ``frames``."""
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for frame in frames:
        out += struct.pack("<IIII", 0, 0, len(frame), len(frame)) + frame
    return out
