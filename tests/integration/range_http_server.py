"""A small HTTP/1.1 file server with Range support, for model_cache tests and measurements.

Python's SimpleHTTPRequestHandler ignores ``Range``; this one answers ``bytes=N-`` and
``bytes=N-M`` with 206 (416 past the end) and sends file bodies with ``os.sendfile`` so that
the server is not the bottleneck of a throughput measurement. Fault injection:

* ``--drop-after N --drops K``: the first K GET bodies stop after N bytes (connection closed);
* ``--no-range``: every GET is answered 200 with the whole file (a server without Range);
* ``--log FILE``: one line per request: method, path, Range and Authorization headers.

It binds 127.0.0.1 (run it inside a network namespace) on ``--port`` (0: any) and writes
the port to ``--port-file`` once it listens.

    python range_http_server.py --root DIR --port-file FILE [--drop-after N --drops K] [--no-range]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RangeServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def do_HEAD(self) -> None:
        self.serve(head=True)

    def do_GET(self) -> None:
        self.serve(head=False)

    def serve(self, head: bool) -> None:
        opts = self.server.opts
        if opts.log:
            with open(opts.log, "a") as log:
                log.write("%s %s range=%s auth=%s\n"
                          % (self.command, self.path, self.headers.get("Range"), self.headers.get("Authorization")))
        rel = unquote(urlsplit(self.path).path).lstrip("/")
        path = os.path.realpath(os.path.join(opts.root, rel))
        if not path.startswith(os.path.realpath(opts.root) + "/") or not os.path.isfile(path):
            self.send_error(404)
            return
        size = os.path.getsize(path)
        start, end, status = 0, size - 1, 200
        wanted = self.headers.get("Range")
        if wanted and not opts.no_range:
            match = re.match(r"^bytes=(\d+)-(\d*)$", wanted.strip())
            if not match:
                self.send_error(400)
                return
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        length = end - start + 1
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "none" if opts.no_range else "bytes")
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if head:
            return
        limit = length
        with self.server.lock:
            if opts.drop_after is not None and self.server.dropped < opts.drops:
                self.server.dropped += 1
                limit = min(length, opts.drop_after)
        with open(path, "rb") as handle:
            offset, remaining = start, limit
            while remaining > 0:
                sent = os.sendfile(self.connection.fileno(), handle.fileno(), offset, min(remaining, 1 << 30))
                if not sent:
                    break
                offset += sent
                remaining -= sent
        if limit < length:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)


class RangeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, opts: argparse.Namespace) -> None:
        super().__init__(("127.0.0.1", opts.port), Handler)
        self.opts = opts
        self.lock = threading.Lock()
        self.dropped = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--drop-after", type=int)
    parser.add_argument("--drops", type=int, default=1)
    parser.add_argument("--no-range", action="store_true")
    parser.add_argument("--log")
    opts = parser.parse_args()
    server = RangeServer(opts)
    with open(opts.port_file + ".tmp", "w") as handle:
        handle.write(str(server.server_address[1]))
    os.rename(opts.port_file + ".tmp", opts.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
