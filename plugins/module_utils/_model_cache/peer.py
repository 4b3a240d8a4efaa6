# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Peer fan-out on the node (stdlib only, issue 42): the read-only peer server and the peer source.

**The server** (:class:`PeerServer`) serves the files of published versions it is given, and nothing else, to
the peers the controller planned, for a bounded time. Peers on the fabric are untrusted (docs/security.md), so:

* it listens on one address (the node's storage- or rdma-fabric address), never a wildcard;
* a connection from any address but the planned peers' is answered 403 and closed;
* every request carries the run's token (``Authorization: Bearer <token>``, compared in constant time);
  a request without it is answered 401;
* only ``GET`` and ``HEAD`` of ``/<name>/<version>/<path>`` where ``path`` is a file of that published version's
  record: no directory listing, no ``.staging``, no metadata, no ``current`` link, no query; anything else 404;
* files are opened from the cache directory's descriptor without following links (``safe``): a link or a
  hard link swapped into a version fails the request, it never serves another file;
* one ``Range: bytes=N-`` or ``bytes=N-M`` (206, ``Content-Range``), 416 past the end;
* it stops by itself after ``lifetime`` seconds, and :meth:`PeerServer.stop` stops it at the end of the run.

The server supplies bytes, never checksums: the receiver verifies every file against the spec's sha256.

**The source** (:class:`PeerSource`) is what :class:`transfer.Transfer` reads from: the planned peers in order,
then the origin. A peer that fails or dies mid-transfer costs a resume (``Range`` from the byte reached) from
the next peer or the origin; a peer whose bytes fail verification is excluded for the rest of the run and
named (:meth:`PeerSource.corrupt`), and the file is fetched again whole from the next one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hmac
import os
import re
import socket
import threading
import time

from http.client import HTTPException
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote
from urllib.request import HTTPRedirectHandler, build_opener

from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import safe
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import (
    HttpSource,
    ModelCacheError,
    TransferError,
)

WILDCARDS = ("", "0.0.0.0", "::", "0:0:0:0:0:0:0:0")
_RANGE = re.compile(r"\Abytes=([0-9]{1,20})-([0-9]{0,20})\Z")
SEND_CHUNK = 1 << 20


class PeerServerError(ModelCacheError):
    """The server cannot start as asked (a wildcard address, no peers, no token)."""


def _served_table(versions):
    """{(name, version, path): size} of the files that may be served."""
    table = {}
    for entry in versions:
        for item in entry["files"]:
            table[(entry["name"], entry["version"], item["path"])] = item.get("size")
    return table


class _Handler(BaseHTTPRequestHandler):
    server_version = "aiinfra-model-peer"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 (BaseHTTPRequestHandler's signature)
        self.server.peer.log.append("%s %s" % (self.client_address[0], format % args))

    def _refuse(self, code, text):
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.close_connection = True

    def _allowed(self):
        peer = self.server.peer
        if self.client_address[0] not in peer.allowed:
            peer.refused.append(self.client_address[0])
            self._refuse(403, "not a planned peer")
            return False
        given = self.headers.get("Authorization", "")
        expected = "Bearer " + peer.token
        if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode()):
            peer.refused.append(self.client_address[0])
            self._refuse(401, "the run's token is required")
            return False
        return True

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _serve(self, body):
        if not self._allowed():
            return
        peer = self.server.peer
        target = self.path
        if "?" in target or "#" in target:
            return self._refuse(404, "not found")
        parts = [unquote(p) for p in target.split("/")]
        if len(parts) < 4 or parts[0] != "" or any(p in ("", ".", "..") for p in parts[1:]):
            return self._refuse(404, "not found")
        name, version, rel = parts[1], parts[2], "/".join(parts[3:])
        if (name, version, rel) not in peer.table:
            return self._refuse(404, "not found")
        try:
            fd = peer.open_file(name, version, rel)
        except (OSError, ModelCacheError) as exc:
            peer.log.append("refused %s/%s/%s: %s" % (name, version, rel, exc))
            return self._refuse(404, "not found")
        try:
            size = os.fstat(fd).st_size
            start, end = 0, size - 1
            ranged = self.headers.get("Range")
            if ranged is not None:
                match = _RANGE.match(ranged.strip())
                if not match:
                    return self._refuse(416, "one range, bytes=N- or bytes=N-M")
                start = int(match.group(1))
                end = int(match.group(2)) if match.group(2) else size - 1
                if start >= size or end < start:
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % size)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                end = min(end, size - 1)
            length = end - start + 1 if size else 0
            self.send_response(206 if ranged is not None else 200)
            if ranged is not None:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
            self.send_header("Content-Length", str(length))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            if body:
                peer.send(self, fd, start, length)
        finally:
            os.close(fd)
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, family, peer):
        self.address_family = family
        self.peer = peer
        ThreadingHTTPServer.__init__(self, address, _Handler)


class PeerServer(object):
    """Serves ``versions`` (``[{name, version, files: [{path, size}]}]``, published below ``cache_dir``) on
    ``bind``:``port`` to the addresses in ``allowed`` that present ``token``, for at most ``lifetime`` seconds.
    ``rate``: bytes/s sent in all (0: unlimited). ``start()``, then ``stop()``; ``port`` is the bound port."""

    def __init__(self, cache_dir, versions, bind, allowed, token, lifetime, port=0, rate=0, timeout=30):
        if bind in WILDCARDS:
            raise PeerServerError("the peer server listens on one fabric address, never on %r (every interface)"
                                  % bind)
        if not allowed:
            raise PeerServerError("the peer server needs the addresses of its planned peers")
        if not token or len(token) < 16:
            raise PeerServerError("the peer server needs the run's token (16 characters or more)")
        if lifetime <= 0:
            raise PeerServerError("the peer server's lifetime must be positive (it is time-bounded)")
        self.cache_dir = cache_dir
        self.table = _served_table(versions)
        self.allowed = frozenset(allowed)
        self.token = token
        self.lifetime = float(lifetime)
        self.rate = rate
        self.log = []
        self.refused = []
        self.served_bytes = 0
        self._lock = threading.Lock()
        self.root_fd = safe.open_root(cache_dir)  # owned by us, not writable by others (refused otherwise)
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.server = _Server((bind, port), family, self)
        self.server.timeout = timeout
        self.port = self.server.server_address[1]
        self.thread = None
        self.timer = None
        self.stopped = threading.Event()
        self._stopping = False

    def open_file(self, name, version, rel):
        parent, leaf = os.path.split(rel)
        dfd = safe.walk(self.root_fd, "/".join(p for p in (name, version, parent) if p), self.cache_dir)
        if dfd is None:
            raise OSError(2, "no such version")
        try:
            return safe.open_file_at(dfd, leaf, os.path.join(self.cache_dir, name, version, rel))
        finally:
            os.close(dfd)

    def send(self, handler, fd, start, length):
        sent = 0
        began = time.monotonic()
        while sent < length:
            n = min(SEND_CHUNK, length - sent)
            data = os.pread(fd, n, start + sent)
            if not data:
                break
            handler.wfile.write(data)
            sent += len(data)
            with self._lock:
                self.served_bytes += len(data)
            if self.rate:
                ahead = sent / float(self.rate) - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)

    def start(self):
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="model-peer-server")
        self.thread.daemon = True
        self.thread.start()
        self.timer = threading.Timer(self.lifetime, self.stop)
        self.timer.daemon = True
        self.timer.start()
        return self

    def stop(self):
        """Stops serving and closes the listener; ``wait()`` returns once nothing listens any more."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        if self.timer is not None:
            self.timer.cancel()
        if self.thread is not None:
            self.server.shutdown()
        self.server.server_close()
        os.close(self.root_fd)
        self.stopped.set()

    def wait(self, timeout=None):
        return self.stopped.wait(timeout)


class _PeerHttp(HttpSource):
    """One peer: HTTP with the run's token and nothing else (the origin's headers and credentials are never
    sent to a peer), no redirects followed off the peer."""

    kind = "peer"

    def __init__(self, base, token, timeout):
        HttpSource.__init__(self, base, headers={"Authorization": "Bearer " + token}, timeout=timeout)
        self.opener = build_opener(_NoRedirect())  # a peer that redirects is passed over, the token stays here


class _NoRedirect(HTTPRedirectHandler):
    """Peers serve their own copy or nothing: a redirect is an error (HTTPError 3xx), never followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class PeerSource(object):
    """The planned peers (``[(name, base_url)]``, in order), then ``origin`` (a source of :mod:`sources`).

    ``open(path, offset)`` opens the first usable one; a peer that fails to answer is passed over for that
    file, a peer named by :meth:`corrupt` for the rest of the run. ``served_by(path)`` names where the bytes
    of ``path`` came from (``origin`` or the peers' names, in order, with the byte each took over at)."""

    kind = "peers"

    def __init__(self, peers, origin, token, timeout=30):
        self.peers = [(name, _PeerHttp(base, token, timeout)) for name, base in peers]
        self.origin = origin
        self.excluded = {}
        self.failed = {}
        self.sources = {}
        self.current = {}

    def describe(self, path):
        who = self.current.get(path)
        if who is None or who == "origin":
            return self.origin.describe(path)
        return "peer %s (%s)" % (who, dict(self.peers)[who].describe(path))

    def size(self, path):
        return self.origin.size(path)

    def read_small(self, path, *args):
        return self.origin.read_small(path, *args)

    def candidates(self, path):
        skipped = self.failed.get(path, set())
        return [(n, s) for n, s in self.peers if n not in self.excluded and n not in skipped] + [
            ("origin", self.origin)]

    def open(self, path, offset):
        last = None
        for name, source in self.candidates(path):
            try:
                stream, served, total = source.open(path, offset)
            except (TransferError, ModelCacheError) as exc:
                if name == "origin":
                    raise
                self.failed.setdefault(path, set()).add(name)
                last = exc
                continue
            self.current[path] = name
            self.sources.setdefault(path, []).append({"from": name, "at": served})
            if name != "origin" and stream is not None:
                return _Watched(stream, self, path, name), served, total
            return stream, served, total
        raise TransferError(str(last))

    def died(self, path, name):
        """The peer ``name`` stopped mid-transfer: the next ``open`` resumes from the next one."""
        self.failed.setdefault(path, set()).add(name)

    def corrupt(self, path):
        """The bytes of ``path`` failed verification: every peer that served part of them is excluded (the
        checksum cannot say which bytes were bad). Returns the names excluded."""
        named = [s["from"] for s in self.sources.get(path, []) if s["from"] != "origin"]
        for name in named:
            self.excluded.setdefault(name, path)
        self.sources.pop(path, None)
        return named


class _Watched(object):
    """A peer's response: a read error or an early end marks the peer as failed for the file, so that the
    retry resumes from the next peer or the origin."""

    def __init__(self, stream, owner, path, name):
        self.stream = stream
        self.owner = owner
        self.path = path
        self.name = name

    def readinto(self, view):
        try:
            n = self.stream.readinto(view)
        except (OSError, ValueError, HTTPException) as exc:
            self.owner.died(self.path, self.name)
            raise TransferError("peer %s: %s" % (self.name, exc))
        if not n:
            self.owner.died(self.path, self.name)
        return n

    def read(self, n=-1):
        return self.stream.read(n)

    def fileno(self):
        raise OSError("a peer's response has no file descriptor")

    def close(self):
        self.stream.close()
