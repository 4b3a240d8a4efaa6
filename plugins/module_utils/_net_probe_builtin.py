# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The built-in network probe (stdlib only): TCP streams and a UDP latency echo.

Protocol (one client per server run, both bounded by a hard deadline):

* every TCP connection starts with a 24-byte header: magic (``DPNC`` control, ``DPND`` data),
  the run's 16-byte token (drawn by the controller for this pair, ``token``), the stream index;
  the server accepts a connection only from its planned peer (``peer``) and only with that token
  (compared in constant time), so a stranger's early connection neither takes the slot nor delays
  it (another address is closed before anything is read from it);
* the control connection then carries JSON lines: the client's hello (streams, duration,
  max_bytes), the server's answer, the client's ``done`` (bytes sent) after every stream shut
  its sending side, and the server's confirmation (bytes received) once every stream ended;
* a data stream carries bytes only, client to server: large ``send`` calls of one memoryview,
  ``recv_into`` one buffer per stream, one thread per stream, Nagle untouched, the node's own
  buffer sysctls unless the caller asks for SO_SNDBUF/SO_RCVBUF;
* the UDP echo on port + 1 answers only datagrams from the planned peer with the run's token
  (``DPNE``); the server only receives, for the planned streams, duration and size (a hello that
  asks for anything else is refused); the client sends
  one every ``latency_interval`` while the load runs and keeps each answer's round-trip time.

A client that goes away shows on the server as its control connection closing before the
``done`` line; a server that goes away shows on the client as a reset stream or a control
connection closed before the confirmation. Blocked threads look at the clock every
``IO_TIMEOUT`` seconds (SO_SNDTIMEO / SO_RCVTIMEO), so every thread ends by the deadline; every
socket is closed on every path.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hmac
import json
import socket
import struct
import threading
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe_parse import (
    TCP_INFO_LEN,
    parse_tcp_info,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe_socket import (
    GRACE,
    IO_TIMEOUT,
    Child,
    PairError,
    Worker,
    _close,
    _finish,
    _join,
    _strerror,
    echo_loop,
    family,
    latency_figures,
    latency_loop,
    now,
    open_echo,
    open_latency,
    same_address,
)

MAGIC_CONTROL = b"DPNC"
MAGIC_DATA = b"DPND"
HEADER = struct.Struct("!4s16sI")     # magic, the run's token, stream index
HELLO_KEYS = ("streams", "duration", "max_bytes")  # everything a client may ask; nothing else
CHUNK = 1 << 20                       # bytes per send / recv_into buffer
STREAMS_WITHIN = 10.0                 # the data streams follow the hello within this
MAX_LINE = 65536


def _io_timeout(sock, seconds=IO_TIMEOUT):
    """Blocking socket whose send/recv give up after ``seconds`` (EAGAIN): no poll per call."""
    sock.settimeout(None)
    whole = int(seconds)
    timeval = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)


def _buffers(sock, size):
    if size:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def tcp_info(sock):
    try:
        return parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN))
    except (OSError, AttributeError):
        return None


class Lines(object):
    """JSON lines over a socket, with a deadline per read."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def send(self, message):
        self.sock.settimeout(5.0)
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def read(self, until):
        """The next message; None when ``until`` passes; EOFError when the peer closed."""
        while b"\n" not in self.buf:
            left = until - now()
            if left <= 0:
                return None
            self.sock.settimeout(min(left, 0.5))
            try:
                chunk = self.sock.recv(4096)
            except socket.timeout:
                continue
            if not chunk:
                raise EOFError("connection closed")
            self.buf += chunk
            if len(self.buf) > MAX_LINE:
                raise ValueError("control line too long")
        line, self.buf = self.buf.split(b"\n", 1)
        message = json.loads(line.decode())
        if not isinstance(message, dict):
            raise ValueError("control message is not an object")
        return message


def read_exact(sock, size, until):
    data = b""
    while len(data) < size:
        left = until - now()
        if left <= 0:
            raise socket.timeout("timed out")
        sock.settimeout(min(left, 0.5))
        try:
            chunk = sock.recv(size - len(data))
        except socket.timeout:
            continue
        if not chunk:
            raise EOFError("connection closed")
        data += chunk
    return data


class Receiver(Worker):
    def __init__(self, sock, stop, hard):
        Worker.__init__(self, stop)
        self.sock, self.hard = sock, hard
        self.bytes = 0
        self.first = self.last = None
        self.eof = False

    def run(self):
        buf = bytearray(CHUNK)
        recv_into = self.sock.recv_into
        total = 0
        try:
            while not self.stop.is_set():
                try:
                    n = recv_into(buf)
                except BlockingIOError:
                    if now() >= self.hard:
                        self.error = "deadline passed while receiving"
                        break
                    continue
                except OSError as exc:
                    self.error = _strerror(exc)
                    break
                if not n:
                    self.eof = True
                    break
                if self.first is None:
                    self.first = now()
                total += n
                self.bytes = total
            self.last = now()
        finally:
            self.bytes = total


class Sender(Worker):
    def __init__(self, sock, stop, go, payload, budget):
        Worker.__init__(self, stop)
        self.sock, self.go, self.payload, self.budget = sock, go, payload, budget
        self.end_at = None
        self.bytes = 0

    def run(self):
        self.go.wait()
        send, end_at, budget, full = self.sock.send, self.end_at, self.budget, self.payload
        total = 0
        try:
            while not self.stop.is_set() and now() < end_at:
                view = full
                if budget is not None:
                    if total >= budget:
                        break
                    if budget - total < len(full):
                        view = full[:budget - total]
                try:
                    total += send(view)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    self.error = _strerror(exc)
                    break
        finally:
            self.bytes = total
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def connect(source, address, port, until, buffer_size=None):
    """A TCP connection from ``source`` to the server, retried until ``until``."""
    last = None
    started = now()
    while True:
        sock = socket.socket(family(address), socket.SOCK_STREAM)
        try:
            _buffers(sock, buffer_size)
            sock.bind((source, 0))
        except OSError as exc:
            sock.close()
            raise PairError("cannot bind the source address %s: %s" % (source, _strerror(exc)))
        sock.settimeout(max(0.1, min(3.0, until - now())))
        try:
            sock.connect((address, port))
            return sock
        except OSError as exc:
            sock.close()
            last = exc
        if now() >= until:
            break
        time.sleep(max(0.0, min(0.2, until - now())))
    waited = now() - started
    if getattr(last, "errno", None) == errno.ECONNREFUSED:
        raise PairError("no probe server listening at %s:%d after %.1f s (connection refused)"
                        % (address, port, waited))
    raise PairError("peer unreachable: %s:%d from %s for %.1f s (%s)"
                    % (address, port, source, waited, _strerror(last)))


def run_client(p):
    """One client run of the built-in probe; a dict of what it measured (PairError on failure)."""
    t0 = now()
    hard = t0 + p["wait"] + p["duration"] + GRACE
    token = bytes.fromhex(p["token"])
    stop = threading.Event()
    workers, sockets = [], []
    out = {"bytes": None, "seconds": None, "tcp_infos": [], "latency": None}
    prober = None
    try:
        udp = open_latency(p["source"], p["address"], p["port"])
        try:  # forked first: no thread runs yet and the child holds no TCP socket
            prober = Child(latency_loop(udp, token, p["latency_interval"]), hard)
        finally:
            udp.close()
        control = connect(p["source"], p["address"], p["port"], t0 + p["wait"])
        sockets.append(control)
        lines = Lines(control)
        try:
            control.sendall(HEADER.pack(MAGIC_CONTROL, token, 0))
            lines.send({"streams": p["streams"], "duration": p["duration"], "max_bytes": p["max_bytes"]})
            answer = lines.read(min(hard, now() + STREAMS_WITHIN))
        except (OSError, EOFError, ValueError) as exc:
            raise PairError("the server closed the control connection before the test: %s" % (exc,))
        if answer is None:
            raise PairError("the server did not answer the hello within %.0f s" % STREAMS_WITHIN)
        if not answer.get("ok"):
            raise PairError("the server refused the test: %s" % answer.get("error"))
        streams = []
        for index in range(p["streams"]):
            sock = connect(p["source"], p["address"], p["port"], now() + 5.0, p.get("socket_buffer"))
            sockets.append(sock)
            sock.sendall(HEADER.pack(MAGIC_DATA, token, index))
            _io_timeout(sock)
            streams.append(sock)
        go = threading.Event()
        payload = memoryview(bytearray(CHUNK))
        budgets = _budgets(p["max_bytes"], p["streams"])
        senders = [Sender(sock, stop, go, payload, budgets[i]) for i, sock in enumerate(streams)]
        workers.extend(senders)
        for worker in workers:
            worker.start()
        start = now()
        for sender in senders:
            sender.end_at = start + p["duration"]
        prober.go()
        go.set()
        _join(senders, hard)
        ended = now()
        out["latency"] = latency_figures(prober.stop())
        failed = [s.error for s in senders if s.error] + ["still sending at the deadline" for s in senders
                                                          if s.is_alive()]
        sent = sum(s.bytes for s in senders)
        if failed:
            raise PairError("the server went away mid-test after %.1f s: %s" % (now() - start, failed[0]))
        try:
            lines.send({"done": True, "sent": sent})
            confirm = lines.read(hard)
        except (OSError, EOFError, ValueError) as exc:
            raise PairError("the server went away before confirming the test: %s" % (exc,))
        if confirm is None:
            raise PairError("the server did not confirm the test before the deadline")
        if confirm.get("error"):
            raise PairError("the server reports: %s" % confirm["error"])
        # The server's first-to-last byte, like the bytes it confirms: the client's own clock
        # here would also count the latency drain (up to DRAIN s when a datagram was lost).
        out["seconds"] = confirm.get("seconds") or (ended - start)
        received = int(confirm.get("received", 0))
        out["bytes"] = received
        out["tcp_infos"] = [tcp_info(sock) for sock in streams]
        if received != sent:
            raise PairError("the server received %d of %d bytes sent" % (received, sent))
        return out
    except OSError as exc:
        raise PairError("client: %s" % _strerror(exc))
    finally:
        stuck = _finish(stop, workers, sockets)
        if stuck:
            out["stuck_threads"] = len(stuck)
        if prober is not None:
            prober.stop()


def _budgets(max_bytes, streams):
    if not max_bytes:
        return [None] * streams
    share, rest = divmod(max_bytes, streams)
    return [share + (1 if i < rest else 0) for i in range(streams)]


def _listen(address, port, backlog, buffer_size=None):
    sock = socket.socket(family(address), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _buffers(sock, buffer_size)
        sock.bind((address, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise PairError("cannot listen on %s:%d: %s" % (address, port, _strerror(exc)))
    sock.settimeout(0.2)
    return sock


def _accept(listener, magic, token, until, peer, strangers=None):
    """The next connection from ``peer`` that sends a valid header with the run's ``token``;
    (socket, token, index) or None at ``until``. A connection from another address is closed at
    once, unread; ``strangers`` (a list) collects who was turned away."""
    while now() < until:
        try:
            sock, address = listener.accept()
        except socket.timeout:
            continue
        if not same_address(address[0], peer):
            if strangers is not None and len(strangers) < 16:
                strangers.append(address[0])
            _close(sock)
            continue
        try:
            got, got_token, index = HEADER.unpack(read_exact(sock, HEADER.size, min(until, now() + 2.0)))
        except (OSError, EOFError, struct.error):
            _close(sock)
            continue
        if got == magic and hmac.compare_digest(got_token, token):
            return sock, got_token, index
        if strangers is not None and len(strangers) < 16:
            strangers.append("%s (wrong token)" % address[0])
        _close(sock)
    return None


def run_server(p):
    """One server run of the built-in probe: waits ``wait`` s for the client; PairError on failure."""
    t0 = now()
    hard = t0 + p["wait"] + p["duration"] + GRACE
    stop = threading.Event()
    workers, sockets = [], []
    out = {"bytes": None, "seconds": None, "tcp_infos": [], "latency": None}
    echo = None
    token = bytes.fromhex(p["token"])
    strangers = []
    try:
        udp = open_echo(p["address"], p["port"])
        try:  # forked first: no thread runs yet and the child holds no TCP socket
            echo = Child(echo_loop(udp, p["peer"], token), hard)
        finally:
            udp.close()
        listener = _listen(p["address"], p["port"], p["streams"] + 4, p.get("socket_buffer"))
        sockets.append(listener)
        hello = _accept(listener, MAGIC_CONTROL, token, t0 + p["wait"], p["peer"], strangers)
        if hello is None:
            raise PairError("no client connected to %s:%d within %.0f s%s"
                            % (p["address"], p["port"], p["wait"], _turned_away(strangers)))
        control, _token, _index = hello
        sockets.append(control)
        lines = Lines(control)
        try:
            asked = lines.read(min(hard, now() + STREAMS_WITHIN))
        except (OSError, EOFError, ValueError) as exc:
            raise PairError("the client closed the control connection before the test: %s" % (exc,))
        if asked is None:
            raise PairError("the client sent no hello")
        mismatch = [k for k in HELLO_KEYS if asked.get(k) != p[k]]
        unknown = sorted(str(k) for k in asked if k not in HELLO_KEYS)
        if unknown:
            # the server only receives the planned load: a reverse test, another size or time is not asked here
            why = "the client asked for %s, which this server does not serve" % ", ".join(unknown)
            _send_quietly(lines, {"ok": False, "error": why})
            raise PairError(why)
        if mismatch:
            why = "client and server parameters differ: %s" % ", ".join(
                "%s %s != %s" % (k, asked.get(k), p[k]) for k in mismatch)
            _send_quietly(lines, {"ok": False, "error": why})
            raise PairError(why)
        lines.send({"ok": True})
        receivers = []
        until = min(hard, now() + STREAMS_WITHIN)
        while len(receivers) < p["streams"]:
            got = _accept(listener, MAGIC_DATA, token, until, p["peer"], strangers)
            if got is None:
                break
            sockets.append(got[0])
            _io_timeout(got[0])
            receiver = Receiver(got[0], stop, hard)
            receivers.append(receiver)
            workers.append(receiver)
            receiver.start()
        listener.close()  # every stream is in (or will not come): nobody else gets in
        if len(receivers) < p["streams"]:
            raise PairError("only %d of %d streams connected" % (len(receivers), p["streams"]))
        begun = now()
        try:
            done = lines.read(hard)
        except (OSError, EOFError, ValueError) as exc:
            raise PairError("the client went away mid-test after %.1f s (control connection: %s)"
                            % (now() - begun, exc))
        if done is None:
            raise PairError("the client did not finish before the deadline")
        _join(receivers, hard)
        errors = [r.error for r in receivers if r.error] + ["stream still open at the deadline"
                                                            for r in receivers if r.is_alive()]
        received = sum(r.bytes for r in receivers)
        firsts = [r.first for r in receivers if r.first is not None]
        lasts = [r.last for r in receivers if r.last is not None]
        out["bytes"] = received
        out["seconds"] = (max(lasts) - min(firsts)) if firsts and lasts else None
        out["tcp_infos"] = [tcp_info(r.sock) for r in receivers]
        if errors:
            _send_quietly(lines, {"error": errors[0], "received": received})
            raise PairError("a stream failed: %s" % errors[0])
        lines.send({"received": received, "seconds": out["seconds"]})
        if done.get("sent") != received:
            raise PairError("received %d of %s bytes the client sent" % (received, done.get("sent")))
        return out
    except OSError as exc:
        raise PairError("server: %s" % _strerror(exc))
    finally:
        stuck = _finish(stop, workers, sockets)
        if stuck:
            out["stuck_threads"] = len(stuck)
        if echo is not None:
            echo.stop()


def _turned_away(strangers):
    return (" (turned away, not the planned peer or without the run's token: %s)" % ", ".join(strangers)
            if strangers else "")


def _send_quietly(lines, message):
    try:
        lines.send(message)
    except OSError:
        pass
