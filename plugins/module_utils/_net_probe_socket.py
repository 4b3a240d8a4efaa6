# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What both engines of the network probe share (stdlib only): the pair error, the deadline clock,
worker threads that always end, and the UDP latency echo.

The server's echo (UDP, TCP port + 1) sends back a datagram that starts with ``DPNE`` and the
run's token, from the planned peer only; the client sends one every ``latency_interval`` while
the load runs, each with its sequence number and send time, and keeps the round-trip time of
each answer; answers are counted for ``DRAIN`` seconds after the load. Echo and prober run in
forked child processes (``Child``), forked before any thread starts and before the TCP sockets
exist, so that their timing does not wait for the interpreter lock of the stream threads and
they hold no TCP socket. A child ends when told, when the module ends (PR_SET_PDEATHSIG and the
closed pipe), or at its deadline, and is always reaped. ``_finish`` stops the stream threads,
wakes the blocked ones by shutting their sockets down, joins them and closes every socket, on
every path.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import hmac
import json
import os
import select
import signal
import socket
import struct
import threading
import time

MAGIC_ECHO = b"DPNE"
ECHO = struct.Struct("!4s16sId")      # magic, the run's token, sequence, send time (client clock)
TOKEN_BYTES = 16                      # the per-run token the controller draws (secrets.token_hex(16))
IO_TIMEOUT = 0.25                     # how often a blocked stream thread looks at the clock
GRACE = 5.0                           # hard deadline = wait + duration + GRACE
DRAIN = 1.0                           # late echo answers counted this long after the load
PR_SET_PDEATHSIG = 1


class PairError(Exception):
    """The pair failed (the module does not): the message says why."""


def now():
    return time.monotonic()


def family(address):
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def _close(sock):
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _strerror(exc):
    if isinstance(exc, socket.timeout):
        return "timed out"
    return exc.strerror or str(exc)


class Worker(threading.Thread):
    """A stream or echo thread; ``error`` holds what stopped it early."""

    def __init__(self, stop):
        threading.Thread.__init__(self)
        self.daemon = True  # a safety net only: every worker ends on ``stop`` or its deadline
        self.stop = stop
        self.error = None


def die_with_parent():
    """A function that makes the calling (child) process get SIGKILL when its parent ends;
    resolved here, before any fork, so the child only calls it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None
    parent = os.getpid()

    def arm():
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
    return arm


class Child(object):
    """A forked helper process (the echo or the latency prober), so that its timing shares no
    interpreter lock with the stream threads. Fork it while no other thread runs. It ends when
    the parent closes the control pipe (``stop``), when the parent dies (SIGKILL by
    PR_SET_PDEATHSIG; its end of the pipe closes too) or at ``until``; ``stop`` reaps it."""

    def __init__(self, loop, until):
        arm = die_with_parent()
        ctl_r, self.ctl_w = os.pipe()
        res_r, res_w = os.pipe()
        try:
            self.pid = os.fork()
        except OSError:
            for fd in (ctl_r, self.ctl_w, res_r, res_w):
                os.close(fd)
            raise
        if self.pid == 0:  # the child: run the loop, report, never return into the module
            code = 0
            try:
                arm()
                os.close(self.ctl_w)
                os.close(res_r)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                report = json.dumps(loop(ctl_r, until)).encode()
                while report:
                    report = report[os.write(res_w, report):]
            except BaseException:
                code = 1
            os._exit(code)
        os.close(ctl_r)
        os.close(res_w)
        self.res_r = res_r
        self.report = None

    def go(self):
        """Start the work the child waits for (the latency prober waits for the load)."""
        if self.ctl_w is not None:
            os.write(self.ctl_w, b"g")

    def stop(self, timeout=DRAIN + 2.0):
        """Tell the child to finish, read its report, reap it (SIGKILL if it is late). Again: the
        same report."""
        if self.res_r is None:
            return self.report
        if self.ctl_w is not None:
            os.close(self.ctl_w)
            self.ctl_w = None
        chunks, until = [], now() + timeout
        while now() < until:
            if not select.select([self.res_r], [], [], max(0.0, until - now()))[0]:
                break
            chunk = os.read(self.res_r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(self.res_r)
        self.res_r = None
        if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        try:
            self.report = json.loads(b"".join(chunks).decode() or "null")
        except ValueError:
            self.report = None
        return self.report


def same_address(a, b):
    """Two IP addresses are the same host (``::ffff:198.18.1.11`` is ``198.18.1.11``)."""
    def plain(text):
        text = str(text).split("%", 1)[0]
        return text[7:] if text.lower().startswith("::ffff:") and "." in text else text
    return plain(a) == plain(b)


def echo_loop(sock, peer, token):
    """The server's echo: send a probe datagram back only when it comes from the planned ``peer``
    and carries the run's ``token`` (a stranger's datagram, or one with a forged source of another
    host, gets no answer from here)."""
    def loop(ctl, until):
        sock.setblocking(False)
        echoed = 0
        while now() < until:
            ready = select.select([sock, ctl], [], [], max(0.0, min(1.0, until - now())))[0]
            if ctl in ready and not os.read(ctl, 64):
                break
            if sock not in ready:
                continue
            try:
                data, source = sock.recvfrom(256)
            except OSError:
                continue
            if (len(data) == ECHO.size and data[:4] == MAGIC_ECHO and same_address(source[0], peer)
                    and hmac.compare_digest(data[4:4 + TOKEN_BYTES], token)):
                try:
                    sock.sendto(data, source)
                    echoed += 1
                except OSError:
                    pass
        return {"echoed": echoed}
    return loop


def latency_loop(sock, token, interval):
    """The client's prober: one datagram every ``interval`` until stopped, then the answers of
    DRAIN more seconds; reports sent and the RTT (ms) of each answered datagram."""
    def loop(ctl, until):
        sock.setblocking(False)
        sent_at, rtts = {}, {}
        if not select.select([ctl], [], [], max(0.0, until - now()))[0] or os.read(ctl, 1) != b"g":
            return {"sent": 0, "rtts": []}  # stopped before the load began
        next_send = now()
        while now() < until:
            t = now()
            if t >= next_send:
                seq = len(sent_at)
                sent_at[seq] = t
                try:
                    sock.send(ECHO.pack(MAGIC_ECHO, token, seq, t))
                except OSError:
                    pass  # counted as sent and lost
                next_send += interval
                if next_send < t:
                    next_send = t + interval
            ready = select.select([sock, ctl], [], [], max(0.0, min(next_send, until) - now()))[0]
            if ctl in ready and not os.read(ctl, 64):
                break
            if sock in ready:
                _answers(sock, token, sent_at, rtts)
        drained = now() + DRAIN
        while len(rtts) < len(sent_at) and now() < drained:
            if select.select([sock], [], [], max(0.0, drained - now()))[0]:
                _answers(sock, token, sent_at, rtts)
        return {"sent": len(sent_at), "rtts": list(rtts.values())}
    return loop


def _answers(sock, token, sent_at, rtts):
    while True:
        try:
            data = sock.recv(256)
        except OSError:  # nothing more (EAGAIN), or an ICMP error: that datagram is lost
            return
        t = now()
        if len(data) != ECHO.size:
            continue
        magic, got, seq, _sent = ECHO.unpack(data)
        if magic == MAGIC_ECHO and got == token and seq in sent_at and seq not in rtts:
            rtts[seq] = (t - sent_at[seq]) * 1000.0


def latency_figures(report):
    """(sent, received, rtts) from a latency child's report (None: it reported nothing)."""
    if not report:
        return None
    return report["sent"], len(report["rtts"]), report["rtts"]


def _join(workers, until):
    for worker in workers:
        worker.join(max(0.0, until - now()))


def _finish(stop, workers, sockets):
    """Stop every worker, wake the blocked ones, join them, close every socket."""
    stop.set()
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    _join(workers, now() + 2 * IO_TIMEOUT + 1.0)
    for sock in sockets:
        sock.close()
    return [w for w in workers if w.is_alive()]


def open_echo(address, port):
    sock = socket.socket(family(address), socket.SOCK_DGRAM)
    try:
        sock.bind((address, port + 1))
    except OSError as exc:
        sock.close()
        raise PairError("cannot bind the UDP echo to %s:%d: %s" % (address, port + 1, _strerror(exc)))
    return sock


def open_latency(source, address, port):
    sock = socket.socket(family(address), socket.SOCK_DGRAM)
    try:
        sock.bind((source, 0))
        sock.connect((address, port + 1))
    except OSError as exc:
        sock.close()
        raise PairError("cannot open the UDP latency probe from the source address %s to %s:%d: %s"
                        % (source, address, port + 1, _strerror(exc)))
    return sock


def wait_for_echo(source, address, port, token, until):
    """Ping the server's UDP echo until it answers; PairError when ``until`` passes first."""
    sock = open_latency(source, address, port)
    last = None
    started = now()
    try:
        sock.settimeout(0.3)
        seq = 0
        while now() < until:
            try:
                sock.send(ECHO.pack(MAGIC_ECHO, token, seq, now()))
                data = sock.recv(256)
                if len(data) == ECHO.size and ECHO.unpack(data)[1] == token:
                    return
            except socket.timeout:
                pass
            except OSError as exc:
                last = _strerror(exc)
                time.sleep(min(0.3, max(0.0, until - now())))
            seq += 1
    finally:
        sock.close()
    raise PairError("peer unreachable: no probe server answered at %s:%d (UDP echo) from %s within %.1f s%s"
                    % (address, port + 1, source, now() - started, " (%s)" % last if last else ""))
