"""Small HTTP(S) servers on loopback addresses for the attack tests: each records the requests it
got (method, path, headers) and answers from a handler function, in a thread of this process."""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


class Server:
    def __init__(self, handle: Handler, address: str = "127.0.0.1", tls: tuple[str, str] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Request(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                outer.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers)})
                handle(self)

            do_GET = do_HEAD = _any

        self.httpd = http.server.ThreadingHTTPServer((address, 0), Request)
        self.httpd.daemon_threads = True
        scheme = "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = "%s://%s:%d" % (scheme, address, self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def send(req: http.server.BaseHTTPRequestHandler, status: int, body: bytes = b"",
         headers: dict[str, str] | None = None) -> None:
    req.send_response(status)
    headers = dict(headers or {})
    headers.setdefault("Content-Length", str(len(body)))
    for key, value in headers.items():
        req.send_header(key, value)
    req.end_headers()
    if req.command != "HEAD" and body:
        req.wfile.write(body)


def self_signed(tmp: Path) -> tuple[str, str]:
    """A throwaway certificate for 127.0.0.1 (cryptography, ansible-core's own dependency)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp / "cert.pem", tmp / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)
