"""A userspace delay line between two interfaces of a lab switch (standard library only).

``python -m datapath_lab.relay --a p-node3 --b r-node3 [--delay-ab S] [--loss-ab P] ...`` forwards
every frame that arrives on interface A out of interface B and back, holding each frame for a
fixed delay (a timer heap) and dropping it with a given probability, per direction. It stands in
for netem, which this kernel lacks: `datapath-lab impair` runs it inside a fabric's switch
namespace, between a node's switch port (taken out of the bridge) and one end of a veth pair
whose other end is in the bridge.

Frames are read and written through AF_PACKET sockets with PACKET_VNET_HDR, so TCP segmentation
offload super-frames (up to 64 KiB) and partial checksums pass through intact: the kernel
segments and checksums them on the way out, exactly as if the relay were not there. A frame is
therefore the unit of loss: a dropped super-frame loses every segment in it (pings and other
small packets are single frames). The relay prints nothing while it runs; on SIGTERM it writes
its counters as one JSON line to --stats and exits.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_VNET_HDR = 15
PACKET_IGNORE_OUTGOING = 23
VNET_HDR_LEN = 10
FRAME_MAX = 65536 + VNET_HDR_LEN + 64
SOCKET_BUFFER = 32 << 20
QUEUE_MAX_BYTES = 256 << 20  # frames held for their delay: beyond this they are dropped
BATCH = 256  # frames read from one socket before the timer heap is looked at again


def open_port(ifname: str) -> socket.socket:
    """An AF_PACKET socket on one interface: every frame, virtio-net header, promiscuous,
    blind to what this host itself sends out of it (that includes the relay's own frames)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: receives nothing yet
    sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    for opt, fallback in ((33, socket.SO_RCVBUF), (32, socket.SO_SNDBUF)):  # SO_RCVBUFFORCE, SO_SNDBUFFORCE
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, fallback, SOCKET_BUFFER)
    sock.bind((ifname, ETH_P_ALL))
    mreq = struct.pack("iHH8s", socket.if_nametoindex(ifname), PACKET_MR_PROMISC, 0, b"")
    sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
    sock.setblocking(False)
    return sock


class Direction:
    """One way through the relay: frames read from ``src`` go out of ``dst``."""

    def __init__(self, name: str, src: socket.socket, dst: socket.socket, delay: float, loss: float) -> None:
        self.name = name
        self.src = src
        self.dst = dst
        self.delay = delay
        self.loss = loss
        self.frames = 0
        self.bytes = 0
        self.lost = 0
        self.send_errors = 0
        self.queue_drops = 0

    def stats(self) -> dict[str, Any]:
        return {"frames": self.frames, "bytes": self.bytes, "lost": self.lost,
                "send_errors": self.send_errors, "queue_drops": self.queue_drops,
                "delay_s": self.delay, "loss": self.loss}


def relay(ways: list[Direction], stop: list[bool], seed: int | None = None) -> None:
    rng = random.Random(seed)
    heap: list[tuple[float, int, Direction, bytes]] = []
    held = 0
    seq = 0
    poller = select.epoll()
    by_fd = {}
    for way in ways:
        poller.register(way.src.fileno(), select.EPOLLIN)
        by_fd[way.src.fileno()] = way
    clock = time.monotonic
    while not stop[0]:
        if heap:
            timeout = max(0.0, heap[0][0] - clock())
        else:
            timeout = 0.2  # idle: how soon a SIGTERM is noticed
        try:
            events = poller.poll(timeout)
        except InterruptedError:
            continue
        for fd, _ in events:
            way = by_fd[fd]
            recv, send = way.src.recv, way.dst.send
            delay, loss = way.delay, way.loss
            for _ in range(BATCH):
                try:
                    frame = recv(FRAME_MAX)
                except BlockingIOError:
                    break
                except OSError:
                    way.send_errors += 1
                    break
                way.frames += 1
                way.bytes += len(frame) - VNET_HDR_LEN
                if loss and rng.random() < loss:
                    way.lost += 1
                    continue
                if delay <= 0.0:
                    try:
                        send(frame)
                    except OSError:
                        way.send_errors += 1
                    continue
                if held + len(frame) > QUEUE_MAX_BYTES:
                    way.queue_drops += 1
                    continue
                seq += 1
                held += len(frame)
                heapq.heappush(heap, (clock() + delay, seq, way, frame))
        if heap:
            now = clock()
            while heap and heap[0][0] <= now:
                _, _, way, frame = heapq.heappop(heap)
                held -= len(frame)
                try:
                    way.dst.send(frame)
                except OSError:
                    way.send_errors += 1
    poller.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m datapath_lab.relay", description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="interface A (the node's switch port)")
    parser.add_argument("--b", required=True, help="interface B (the relay's end of the veth into the bridge)")
    parser.add_argument("--delay-ab", type=float, default=0.0, help="seconds each frame from A to B is held")
    parser.add_argument("--delay-ba", type=float, default=0.0, help="seconds each frame from B to A is held")
    parser.add_argument("--loss-ab", type=float, default=0.0, help="drop probability (0..1) from A to B")
    parser.add_argument("--loss-ba", type=float, default=0.0, help="drop probability (0..1) from B to A")
    parser.add_argument("--ready", help="file created once both sockets are bound")
    parser.add_argument("--stats", help="file the counters are written to (JSON) on SIGTERM")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    for value in (args.delay_ab, args.delay_ba):
        if not 0.0 <= value <= 60.0:
            parser.error("delays are seconds in 0..60")
    for value in (args.loss_ab, args.loss_ba):
        if not 0.0 <= value <= 1.0:
            parser.error("loss is a probability in 0..1")
    a, b = open_port(args.a), open_port(args.b)
    ways = [Direction("ab", a, b, args.delay_ab, args.loss_ab), Direction("ba", b, a, args.delay_ba, args.loss_ba)]
    stop = [False]

    def _stop(_sig: int, _frame: Any) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.ready:
        with open(args.ready, "w") as fh:
            fh.write(f"{os.getpid()}\n")
    relay(ways, stop, args.seed)
    if args.stats:
        with open(args.stats, "w") as fh:
            json.dump({way.name: way.stats() for way in ways}, fh, sort_keys=True)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
