"""A static HTTP file server with Range support: the lab's model source (standard library only).

Run inside a lab source-server namespace by ``datapath-lab serve``::

    python -m datapath_lab.httpsrc DIR --bind 198.18.1.250 --port 8080 --log FILE --ready FILE

GET and HEAD of regular files under DIR (no listings, nothing outside DIR, symlinks
followed only within DIR). ``Range: bytes=N-``, ``bytes=N-M`` and ``bytes=-N`` (one range)
give ``206`` with ``Content-Range``; an unsatisfiable range gives ``416``. Bodies go out with
``sendfile`` (a sparse file's holes cost no disk I/O). One JSON line per request in the log:
start time, method, path, range, status, bytes sent, seconds (the tests read it).
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class SourceServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], root: str, log_path: str | None) -> None:
        self.root = os.path.realpath(root)
        self.log_lock = threading.Lock()
        self.log_fh = open(log_path, "a", buffering=1) if log_path else None
        super().__init__(address, Handler)

    def record(self, entry: dict[str, Any]) -> None:
        if self.log_fh is None:
            return
        with self.log_lock:
            self.log_fh.write(json.dumps(entry, sort_keys=True) + "\n")


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single ``bytes=`` range, or None when it cannot be satisfied.

    Raises ValueError for a header that is not one well-formed byte range (then the whole file
    is sent, as RFC 9110 allows)."""
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        raise ValueError(header)
    first_text, dash, last_text = spec.strip().partition("-")
    if not dash:
        raise ValueError(header)
    if first_text == "":
        suffix = int(last_text)
        if suffix <= 0:
            return None
        return max(0, size - suffix), size - 1
    first = int(first_text)
    last = int(last_text) if last_text else max(first, size - 1)
    if first < 0 or last < first:
        raise ValueError(header)
    if first >= size:
        return None
    return first, min(last, size - 1)


class Handler(BaseHTTPRequestHandler):
    server: SourceServer
    protocol_version = "HTTP/1.1"
    server_version = "datapath-lab-source/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one JSON line per request instead (SourceServer.record)

    def _resolve(self) -> str | None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        norm = posixpath.normpath("/" + path.lstrip("/"))
        full = os.path.realpath(os.path.join(self.server.root, norm.lstrip("/")))
        if full != self.server.root and not full.startswith(self.server.root + os.sep):
            return None
        return full if os.path.isfile(full) else None

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._serve(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        started = time.monotonic()
        entry: dict[str, Any] = {"start": round(time.time(), 3), "method": self.command, "path": self.path,
                                 "range": self.headers.get("Range"), "client": self.client_address[0]}
        sent = 0
        status = 500
        try:
            full = self._resolve()
            if full is None:
                status = 404
                self._simple(404, b"not found\n", body)
                return
            with open(full, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                first, last = 0, size - 1
                status = 200
                header = self.headers.get("Range")
                if header:
                    try:
                        wanted = parse_range(header, size)
                    except ValueError:
                        wanted = (0, size - 1)  # not a single byte range: ignore it, send all
                    else:
                        if wanted is None:
                            status = 416
                            self.send_response(416)
                            self.send_header("Content-Range", f"bytes */{size}")
                            self.send_header("Content-Length", "0")
                            self.end_headers()
                            return
                        status = 206
                    first, last = wanted
                length = max(0, last - first + 1)
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(length))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Last-Modified", self.date_time_string(int(os.fstat(fh.fileno()).st_mtime)))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
                self.end_headers()
                if body and length:
                    self.wfile.flush()
                    sent = self.connection.sendfile(fh, first, length)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            entry["error"] = "client went away"
            self.close_connection = True
        finally:
            entry.update(status=status, bytes=sent, seconds=round(time.monotonic() - started, 3))
            self.server.record(entry)

    def _simple(self, status: int, text: bytes, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if body:
            self.wfile.write(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="datapath-lab-source", description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--log", help="append one JSON line per request here")
    parser.add_argument("--ready", help="create this file once the socket listens")
    args = parser.parse_args(argv)
    server = SourceServer((args.bind, args.port), args.directory, args.log)
    if args.ready:
        with open(args.ready, "w") as fh:
            fh.write(f"{os.getpid()}\n")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
