"""Crafted LLDP frames with IEEE 802.1Qaz DCBX TLVs: the lab's switch namespace sends them on a node's port
(``python -m datapath_lab.lldp``, AF_PACKET, bounded); the unit and interop tests decode them.

Built from IEEE 802.1AB-2016 (LLDPDU, TLV header: 7-bit type, 9-bit length) and IEEE 802.1Qaz-2011 Annex D
(organizationally specific TLVs of OUI 00-80-C2: 9 ETS Configuration, 11 PFC Configuration, 12 Application
Priority); tcpdump's own LLDP printer (print-lldp.c) decodes them the same way (tests/interop/test_lldp_tcpdump.py;
the lab test: tests/integration/test_lldp_lab.py).
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


def send(ifname: str, frame: bytes, count: int = 40, interval: float = 0.25) -> int:
    """Send ``frame`` ``count`` times (at most 400), every ``interval`` seconds, out of ``ifname`` through an
    AF_PACKET socket; returns how many went out. Run inside a lab switch namespace only (``main`` checks)."""
    import socket
    import time

    count = max(1, min(int(count), 400))
    sent = 0
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
        sock.bind((ifname, 0))
        for index in range(count):
            sent += 1 if sock.send(frame) == len(frame) else 0
            if index + 1 < count:
                time.sleep(interval)
    return sent


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m datapath_lab.lldp --ifname PORT --pfc 4 [--willing] [--count N]`` (the lab's switch side)."""
    import argparse
    import os

    parser = argparse.ArgumentParser(prog="datapath_lab.lldp", description=main.__doc__)
    parser.add_argument("--ifname", required=True, help="the switch port (p-NODE) in a lab switch namespace")
    parser.add_argument("--pfc", type=int, action="append", default=[], help="a priority with PFC on (repeat)")
    parser.add_argument("--willing", action="store_true", help="PFC willing = 1")
    parser.add_argument("--system", default="lab-switch")
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.25)
    args = parser.parse_args(argv)
    import subprocess

    # only inside a named lab namespace (ip netns exec LAB-sw-FABRIC): `ip netns identify` names it, and is
    # empty in the host's own namespace
    name = subprocess.run(["ip", "netns", "identify", str(os.getpid())], capture_output=True, text=True,
                          check=False).stdout.strip()
    if "-sw-" not in name:
        parser.error("refusing to send outside a lab switch namespace: run it with ip netns exec LAB-sw-FABRIC")
    frame = lldp_frame(pfc=args.pfc or (3,), pfc_willing=args.willing, system=args.system, port=args.ifname)
    print(send(args.ifname, frame, args.count, args.interval))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
