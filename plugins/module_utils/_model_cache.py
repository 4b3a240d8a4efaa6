# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model cache warm-up: versioned, verified model artifacts on the node's cache filesystem.

Stdlib only (runs on the node). Layout below ``root``::

    <root>/<name>/<version>/<files...>        published version, never modified after publish
    <root>/<name>/current -> <version>        relative symlink, switched with symlink + rename
    <root>/<name>/.versions/<version>.json    metadata: files, bytes, published_at, last_used
    <root>/.staging/<name>/<version>/<path>.part   partial downloads, resumed from here

The copy loop is a three-stage pipeline over a small pool of large buffers: a reader thread
fills a buffer from the source (``readinto``: socket ``recv_into`` or file ``read``), a
hasher thread feeds it to sha256, the calling thread writes it. Each stage releases the GIL
on large buffers (socket I/O, OpenSSL's sha256 above 2 KiB, ``write``), so on a node with a
few cores the three overlap and verifying costs little over a plain copy.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import errno
import hashlib
import hmac
import json
import os
import re
import shutil
import socket
import ssl
import threading
import time

import queue
from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.parse import quote, unquote, urlsplit
from urllib.request import HTTPSHandler, Request, build_opener

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import atomic_write

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
CHUNK = 8 << 20            # bytes per buffer of the copy pipeline
BUFFERS = 6                # buffers in flight: reader, hasher and writer each hold some
WRITEBACK_EVERY = 32 << 20  # start the kernel's writeback of what was written, every this many bytes


def _libc_sync_file_range():
    """``sync_file_range(2)`` through ctypes (the standard library has no wrapper), or None."""
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        func = libc.sync_file_range
        func.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
        func.restype = ctypes.c_int
        return func
    except (OSError, AttributeError, ImportError):
        return None


_SYNC_FILE_RANGE = _libc_sync_file_range()
SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd, offset, length):
    """Ask the kernel to start writing ``length`` bytes at ``offset`` back to disk, without
    waiting (SYNC_FILE_RANGE_WRITE). The final fsync then finds most of the file clean instead
    of flushing it all at the end. A no-op where sync_file_range is unavailable."""
    if _SYNC_FILE_RANGE is not None and length > 0:
        _SYNC_FILE_RANGE(fd, offset, length, SYNC_FILE_RANGE_WRITE)


STAGING = ".staging"
VERSIONS = ".versions"
CURRENT = "current"
PART = ".part"


class ModelCacheError(Exception):
    """A failure with a message for the user and extra result keys."""

    def __init__(self, msg, **result):
        super(ModelCacheError, self).__init__(msg)
        self.msg = msg
        self.result = result


class TransferError(Exception):
    """A transient source error (connection reset, short read, 5xx): worth a retry."""


# --------------------------------------------------------------------------- validation

def check_relpath(path, what):
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ModelCacheError("%s: file path %r must be a non-empty string" % (what, path))
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        raise ModelCacheError("%s: file path %r must be relative, without '..', '.' or empty parts"
                              % (what, path))
    if path.endswith(PART):
        raise ModelCacheError("%s: file path %r must not end in %s (the staging suffix)" % (what, path, PART))
    return path


def normalise_files(files, what):
    out = []
    seen = set()
    for entry in files:
        if not isinstance(entry, dict):
            raise ModelCacheError("%s: each files entry must be a dict with path and sha256, got %r" % (what, entry))
        path = check_relpath(entry.get("path"), what)
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not SHA256_RE.match(digest):
            raise ModelCacheError("%s: sha256 of %s must be 64 lowercase hex characters, got %r"
                                  % (what, path, digest))
        size = entry.get("size")
        if size is not None:
            try:
                size = int(size)
            except (TypeError, ValueError):
                raise ModelCacheError("%s: size of %s must be an integer or null, got %r" % (what, path, size))
            if size < 0:
                raise ModelCacheError("%s: size of %s must not be negative" % (what, path))
        if path in seen:
            raise ModelCacheError("%s: file %s is listed twice" % (what, path))
        seen.add(path)
        out.append(dict(path=path, sha256=digest, size=size))
    return out


def parse_manifest(text, what="manifest"):
    """Files of a sha256sum-format manifest: ``<hex>  <path>`` (or ``<hex> *<path>``) lines."""
    files = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.match(r"^([0-9a-fA-F]{64}) [ *](.+)$", line)
        if not match:
            raise ModelCacheError("%s line %d is not '<sha256>  <path>': %r" % (what, number, line))
        path = match.group(2)
        if path.startswith("./"):
            path = path[2:]
        files.append(dict(path=path, sha256=match.group(1).lower(), size=None))
    if not files:
        raise ModelCacheError("%s lists no files" % what)
    return normalise_files(files, what)


def parse_source(source, what):
    """(kind, base) where kind is local, http or s3; base is a directory, a URL or (bucket, prefix)."""
    if not isinstance(source, str) or not source:
        raise ModelCacheError("%s: source is required" % what)
    if source.startswith("file://"):
        path = unquote(urlsplit(source).path)
        if not path.startswith("/"):
            raise ModelCacheError("%s: file URL %r must name an absolute path" % (what, source))
        return "local", path.rstrip("/") or "/"
    if source.startswith("/"):
        return "local", source.rstrip("/") or "/"
    if source.startswith(("http://", "https://")):
        if not urlsplit(source).netloc:
            raise ModelCacheError("%s: source %r has no host" % (what, source))
        return "http", source.rstrip("/")
    if source.startswith("s3://"):
        parts = urlsplit(source)
        if not parts.netloc:
            raise ModelCacheError("%s: source %r has no bucket" % (what, source))
        return "s3", (parts.netloc, parts.path.strip("/"))
    raise ModelCacheError("%s: source %r must be an absolute path, file://, http(s):// or s3:// URL"
                          % (what, source))


def normalise_models(models, pinned):
    """Validate the models list; return (items, pinned set of (name, version))."""
    items = []
    keys = set()
    for index, model in enumerate(models or []):
        if not isinstance(model, dict):
            raise ModelCacheError("models[%d] must be a dict, got %r" % (index, model))
        name, version = model.get("name"), model.get("version")
        for key, value in (("name", name), ("version", version)):
            if not isinstance(value, str) or not NAME_RE.match(value) or value in (CURRENT,):
                raise ModelCacheError("models[%d].%s %r must match %s (and not be 'current')"
                                      % (index, key, value, NAME_RE.pattern))
        what = "models[%d] %s@%s" % (index, name, version)
        if (name, version) in keys:
            raise ModelCacheError("%s is listed twice" % what)
        keys.add((name, version))
        kind, base = parse_source(model.get("source"), what)
        files = normalise_files(model.get("files") or [], what)
        manifest = model.get("manifest")
        manifest_sha = model.get("manifest_sha256")
        if not files and not manifest:
            raise ModelCacheError("%s: give files or a manifest" % what)
        if manifest is not None:
            manifest = check_relpath(manifest, what + " manifest")
        if manifest_sha is not None and (not isinstance(manifest_sha, str) or not SHA256_RE.match(manifest_sha)):
            raise ModelCacheError("%s: manifest_sha256 must be 64 lowercase hex characters, got %r"
                                  % (what, manifest_sha))
        items.append(dict(name=name, version=version, source=model.get("source"), kind=kind, base=base,
                          files=files, manifest=manifest if not files else None,
                          manifest_sha256=manifest_sha if not files else None, what=what))
    pins = set((m["name"], m["version"]) for m in items)
    for entry in pinned or []:
        if not isinstance(entry, str) or entry.count("@") != 1:
            raise ModelCacheError("pinned entry %r must be 'name@version'" % (entry,))
        name, version = entry.split("@")
        if not NAME_RE.match(name) or not NAME_RE.match(version):
            raise ModelCacheError("pinned entry %r must be 'name@version' with names matching %s"
                                  % (entry, NAME_RE.pattern))
        pins.add((name, version))
    return items, pins


# --------------------------------------------------------------------------- AWS SigV4

def _hmac(key, text):
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def s3_quote(path):
    """URI-encode an S3 key path as SigV4 wants it: every byte but unreserved ones and '/'."""
    return quote(path, safe="/-_.~")


def sigv4_sign(method, host, path, headers, access_key, secret_key, region, amz_date,
               service="s3", query="", payload_hash=EMPTY_SHA256):
    """Return the Authorization header of an AWS Signature Version 4 request.

    ``headers`` are the headers to sign besides ``host`` (lower-cased names); they must
    include ``x-amz-date`` and ``x-amz-content-sha256`` as sent. ``path`` is already
    URI-encoded.
    """
    signed = dict((k.lower(), " ".join(str(v).strip().split())) for k, v in headers.items())
    signed["host"] = host
    names = sorted(signed)
    canonical = "\n".join([
        method, path, query,
        "".join("%s:%s\n" % (n, signed[n]) for n in names),
        ";".join(names), payload_hash,
    ])
    date = amz_date[:8]
    scope = "%s/%s/%s/aws4_request" % (date, region, service)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
    key = _hmac(("AWS4" + secret_key).encode("utf-8"), date)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    return "AWS4-HMAC-SHA256 Credential=%s/%s,SignedHeaders=%s,Signature=%s" % (
        access_key, scope, ";".join(names), signature)


# --------------------------------------------------------------------------- bandwidth cap

class TokenBucket(object):
    """Token bucket of ``rate`` bytes/s with a burst of ``burst`` bytes.

    ``consume(n)`` sleeps until ``n`` bytes may pass; ``slept`` is the total sleep asked
    for, so that tests can check the cap without timing the wall clock.
    """

    def __init__(self, rate, burst=None, clock=time.monotonic, sleep=time.sleep):
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(rate // 4, 64 << 10))
        self.clock = clock
        self.sleep = sleep
        self.tokens = self.burst
        self.stamp = clock()
        self.slept = 0.0

    def consume(self, amount):
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= amount
        if self.tokens < 0:
            wait = -self.tokens / self.rate
            self.slept += wait
            self.sleep(wait)
            # the debt is paid by the time we wake up
            self.stamp = self.clock()
            self.tokens = 0.0
            return wait
        return 0.0


# --------------------------------------------------------------------------- sources

class LocalSource(object):
    kind = "local"

    def __init__(self, base, **_):
        self.base = base

    def describe(self, path):
        return os.path.join(self.base, path)

    def size(self, path):
        try:
            return os.stat(self.describe(path)).st_size
        except OSError as exc:
            raise ModelCacheError("cannot read %s: %s" % (self.describe(path), exc.strerror))

    def read_small(self, path, limit=16 << 20):
        try:
            with open(self.describe(path), "rb") as handle:
                return handle.read(limit)
        except (IOError, OSError) as exc:
            raise ModelCacheError("cannot read %s: %s" % (self.describe(path), exc.strerror))

    def open(self, path, offset):
        """(stream with readinto, offset actually served, total size or None)."""
        try:
            handle = open(self.describe(path), "rb", buffering=0)
        except (IOError, OSError) as exc:
            raise ModelCacheError("cannot read %s: %s" % (self.describe(path), exc.strerror))
        size = os.fstat(handle.fileno()).st_size
        if offset:
            handle.seek(offset)
        return handle, offset, size


class HttpSource(object):
    kind = "http"

    def __init__(self, base, headers=None, timeout=30, validate_certs=True, ca_path=None, **_):
        self.base = base
        self.headers = dict(headers or {})
        self.timeout = timeout
        if validate_certs:
            if ca_path and os.path.isdir(ca_path):
                context = ssl.create_default_context(capath=ca_path)
            else:
                context = ssl.create_default_context(cafile=ca_path or None)
        else:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self.opener = build_opener(HTTPSHandler(context=context))

    def url(self, path):
        return self.base + "/" + quote(path, safe="/-_.~")

    def describe(self, path):
        return self.url(path)

    def request_headers(self, method, url, extra):
        headers = dict(self.headers)
        headers.update(extra)
        return headers

    def _request(self, method, path, extra=None):
        url = self.url(path)
        req = Request(url, method=method, headers=self.request_headers(method, url, extra or {}))
        try:
            return self.opener.open(req, timeout=self.timeout)
        except HTTPError as exc:
            if exc.code >= 500 or exc.code == 429:
                raise TransferError("%s %s: HTTP %d %s" % (method, url, exc.code, exc.reason))
            if exc.code == 416:
                raise
            raise ModelCacheError("%s %s: HTTP %d %s" % (method, url, exc.code, exc.reason))
        except (URLError, socket.timeout, HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TransferError("%s %s: %s" % (method, url, reason))

    def size(self, path):
        """Content-Length from HEAD, or None when the server does not say."""
        resp = self._request("HEAD", path)
        try:
            length = resp.headers.get("Content-Length")
            return int(length) if length is not None else None
        finally:
            resp.close()

    def read_small(self, path, limit=16 << 20):
        resp = self._request("GET", path)
        try:
            return resp.read(limit)
        except (socket.timeout, HTTPException, OSError) as exc:
            raise TransferError("GET %s: %s" % (self.url(path), exc))
        finally:
            resp.close()

    def open(self, path, offset):
        extra = {"Range": "bytes=%d-" % offset} if offset else {}
        try:
            resp = self._request("GET", path, extra)
        except HTTPError as exc:  # 416: the part is as long as the file (or longer)
            exc.close()
            return None, offset, None
        served = 0
        total = None
        if resp.status == 206:
            crange = resp.headers.get("Content-Range", "")
            match = re.match(r"^bytes (\d+)-(\d+)/(\d+|\*)$", crange.strip())
            if not match or int(match.group(1)) != offset:
                resp.close()
                raise TransferError("GET %s: 206 with Content-Range %r, asked from %d"
                                    % (self.url(path), crange, offset))
            served = offset
            total = int(match.group(3)) if match.group(3) != "*" else None
        else:
            length = resp.headers.get("Content-Length")
            total = int(length) if length is not None else None
        return resp, served, total


class S3Source(HttpSource):
    """Path-style S3 requests (``<endpoint>/<bucket>/<key>``) signed with AWS SigV4."""

    kind = "s3"

    def __init__(self, base, s3=None, **kwargs):
        s3 = dict(s3 or {})
        self.bucket, self.prefix = base
        self.region = s3.get("region") or "us-east-1"
        self.endpoint = (s3.get("endpoint_url") or "https://s3.%s.amazonaws.com" % self.region).rstrip("/")
        self.access_key = s3.get("access_key")
        self.secret_key = s3.get("secret_key")
        self.session_token = s3.get("session_token")
        super(S3Source, self).__init__(self.endpoint, **kwargs)

    def url(self, path):
        key = (self.prefix + "/" + path) if self.prefix else path
        return "%s/%s/%s" % (self.endpoint, self.bucket, s3_quote(key))

    def describe(self, path):
        key = (self.prefix + "/" + path) if self.prefix else path
        return "s3://%s/%s" % (self.bucket, key)

    def request_headers(self, method, url, extra):
        headers = dict(self.headers)
        headers.update(extra)
        if not self.access_key or not self.secret_key:
            return headers
        parts = urlsplit(url)
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        sign = dict((k.lower(), v) for k, v in extra.items())
        sign["x-amz-date"] = amz_date
        sign["x-amz-content-sha256"] = EMPTY_SHA256
        if self.session_token:
            sign["x-amz-security-token"] = self.session_token
        headers.update(sign)
        headers["Authorization"] = sigv4_sign(method, parts.netloc, parts.path or "/", sign, self.access_key,
                                              self.secret_key, self.region, amz_date, query=parts.query)
        return headers


def make_source(item, options):
    kind = item["kind"]
    if kind == "local":
        return LocalSource(item["base"])
    kwargs = dict(headers=options.get("headers"), timeout=options.get("timeout", 30),
                  validate_certs=options.get("validate_certs", True), ca_path=options.get("ca_path"))
    if kind == "s3":
        return S3Source(item["base"], s3=options.get("s3"), **kwargs)
    return HttpSource(item["base"], **kwargs)


# --------------------------------------------------------------------------- filesystem

def free_bytes(path):
    """Bytes an unprivileged writer may still use on the filesystem holding ``path``.

    Every free-space figure of the module is read through this function (the seam unit tests
    replace to model a small filesystem).
    """
    while not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def mount_points(mountinfo="/proc/self/mountinfo"):
    points = set()
    with open(mountinfo) as handle:
        for line in handle:
            fields = line.split()
            if len(fields) > 4:
                points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def check_mount(root, require_mount, mountinfo="/proc/self/mountinfo"):
    mount = os.path.realpath(require_mount)
    if mount not in mount_points(mountinfo):
        raise ModelCacheError("require_mount %s is not a mount point; refusing to fill the filesystem below it "
                              "(nothing was changed)" % require_mount)
    real_root = os.path.realpath(root)
    if real_root != mount and not real_root.startswith(mount.rstrip("/") + "/"):
        raise ModelCacheError("root %s is not below require_mount %s (nothing was changed)" % (root, require_mount))


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs(path, mode):
    """Create ``path`` and missing parents with ``mode`` (not subject to the umask)."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        makedirs(parent, mode)
    try:
        os.mkdir(path, mode)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
    os.chmod(path, mode)


def tree_bytes(path):
    total = 0
    for dirpath, _dirs, filenames in os.walk(path):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def iso_seconds(value):
    try:
        return calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return 0


def hash_file(path, chunk=CHUNK):
    digest = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    size = 0
    with open(path, "rb", buffering=0) as handle:
        while True:
            n = handle.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
            size += n
    return digest, size


# --------------------------------------------------------------------------- copy pipeline

class _Stop(object):
    """Sentinel closing a pipeline queue; carries the reader's exception, if any."""

    def __init__(self, error=None):
        self.error = error


def stream_copy(stream, fd, digest, limit=None, bucket=None, space_check=None, chunk=CHUNK, buffers=BUFFERS):
    """Copy ``stream`` to ``fd``, updating ``digest`` with every byte written.

    Reader thread -> hasher thread -> this thread (writer), over ``buffers`` reused buffers.
    ``limit``: bytes to copy at most (None: to EOF). ``bucket``: a TokenBucket.
    ``space_check(n)``: called before writing n bytes; raises to stop. Returns bytes copied.
    Exceptions of the reader (source errors) are raised here after the data read before them
    has been hashed and written, so that a retry resumes from the right offset.
    """
    if bucket is not None:
        chunk = int(max(64 << 10, min(chunk, bucket.rate // 4)))
    free = queue.Queue()
    for _buffer in range(buffers):
        free.put(bytearray(chunk))
    to_hash = queue.Queue()
    to_write = queue.Queue()
    stop = threading.Event()

    def reader():
        remaining = limit
        error = None
        try:
            while not stop.is_set():
                buf = free.get()
                if buf is None:
                    break
                want = chunk if remaining is None else min(chunk, remaining)
                if want <= 0:
                    free.put(buf)
                    break
                view = memoryview(buf)[:want]
                n = stream.readinto(view)
                if not n:
                    free.put(buf)
                    break
                if bucket is not None:
                    bucket.consume(n)
                to_hash.put((buf, n))
                if remaining is not None:
                    remaining -= n
        except BaseException as exc:  # handed to the writer
            error = exc
        to_hash.put(_Stop(error))

    def hasher():
        while True:
            item = to_hash.get()
            if isinstance(item, _Stop):
                to_write.put(item)
                return
            buf, n = item
            if not stop.is_set():
                digest.update(memoryview(buf)[:n])
            to_write.put(item)

    threads = [threading.Thread(target=reader, name="model-cache-read"),
               threading.Thread(target=hasher, name="model-cache-hash")]
    for thread in threads:
        thread.daemon = True
        thread.start()
    copied = 0
    error = None
    try:
        base = os.lseek(fd, 0, os.SEEK_CUR)
    except OSError:
        base = None
    flushed = 0
    try:
        while True:
            item = to_write.get()
            if isinstance(item, _Stop):
                error = error or item.error
                break
            buf, n = item
            if error is None and not stop.is_set():
                try:
                    if space_check is not None:
                        space_check(n)
                    view = memoryview(buf)[:n]
                    while view:
                        written = os.write(fd, view)
                        view = view[written:]
                    copied += n
                    if base is not None and copied - flushed >= WRITEBACK_EVERY:
                        start_writeback(fd, base + flushed, copied - flushed)
                        flushed = copied
                except BaseException as exc:
                    error = exc
                    stop.set()
            free.put(buf)
    finally:
        stop.set()
        free.put(None)  # wake a reader waiting for a buffer
        for thread in threads:
            thread.join()
    if error is not None:
        if isinstance(error, (socket.timeout, HTTPException, ConnectionError)) or (
                isinstance(error, OSError) and not isinstance(error, ModelCacheError)
                and getattr(error, "errno", None) in (errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, None)):
            raise TransferError(str(error) or error.__class__.__name__)
        raise error
    return copied


# --------------------------------------------------------------------------- the cache

class ModelCache(object):
    """read() -> plan() -> apply() over one models directory."""

    def __init__(self, root, items, pins, options, check_mode=False, log=None):
        self.root = root.rstrip("/") or "/"
        self.items = items
        self.pins = pins
        self.options = options
        self.check_mode = check_mode
        self.reserve = int(options.get("reserve_bytes") or 0)
        self.rate = int(options.get("bandwidth_limit") or 0)
        self.retries = int(options.get("retries", 3))
        self.file_mode = int(str(options.get("file_mode") or "0644"), 8)
        self.dir_mode = int(str(options.get("dir_mode") or "0755"), 8)
        self.verify = options.get("verify_existing") or "size"
        self.actions = []
        self.evicted = []
        self.results = []
        self.plans = []
        self.current_before = {}
        self.current_after = {}
        self.log = log or (lambda msg: None)
        self.bucket = TokenBucket(self.rate) if self.rate > 0 else None

    # ---- paths
    def version_dir(self, name, version):
        return os.path.join(self.root, name, version)

    def meta_path(self, name, version):
        return os.path.join(self.root, name, VERSIONS, version + ".json")

    def staging_dir(self, name, version):
        return os.path.join(self.root, STAGING, name, version)

    def current(self, name):
        try:
            target = os.readlink(os.path.join(self.root, name, CURRENT))
        except OSError:
            return None
        return target.rstrip("/")

    # ---- read
    def installed(self):
        """Every version with our metadata: [{name, version, bytes, last_used, path}]."""
        found = []
        if not os.path.isdir(self.root):
            return found
        for name in sorted(os.listdir(self.root)):
            vdir = os.path.join(self.root, name, VERSIONS)
            if name.startswith(".") or not os.path.isdir(vdir):
                continue
            for entry in sorted(os.listdir(vdir)):
                if not entry.endswith(".json"):
                    continue
                version = entry[:-5]
                meta = read_json(os.path.join(vdir, entry))
                path = self.version_dir(name, version)
                if not isinstance(meta, dict) or not os.path.isdir(path):
                    continue
                found.append(dict(name=name, version=version, path=path,
                                  bytes=int(meta.get("bytes") or tree_bytes(path)),
                                  last_used=iso_seconds(meta.get("last_used") or meta.get("published_at"))))
        return found

    def resolve_files(self, item, source):
        """The requested files of an item; reads the manifest when files are not given."""
        if item["files"]:
            return item["files"], None
        meta = read_json(self.meta_path(item["name"], item["version"]))
        if (item["manifest_sha256"] and isinstance(meta, dict)
                and meta.get("manifest_sha256") == item["manifest_sha256"] and meta.get("files")):
            # a pinned manifest that was already used: no network I/O for a present version
            return normalise_files(meta["files"], item["what"]), item["manifest_sha256"]
        raw = self._retry(lambda: source.read_small(item["manifest"]), item, item["manifest"])
        actual = hashlib.sha256(raw).hexdigest()
        if item["manifest_sha256"] and actual != item["manifest_sha256"]:
            raise ModelCacheError(
                "%s: manifest %s has sha256 %s, expected %s (nothing was published)"
                % (item["what"], source.describe(item["manifest"]), actual, item["manifest_sha256"]),
                model=item["name"], version=item["version"], file=item["manifest"],
                expected_sha256=item["manifest_sha256"], actual_sha256=actual)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelCacheError("%s: manifest %s is not UTF-8 text" % (item["what"], item["manifest"]))
        return parse_manifest(text, "%s manifest %s" % (item["what"], item["manifest"])), actual

    def existing_ok(self, item, files):
        """(state, reason): state is present, missing, adopt (dir without metadata) or corrupt."""
        path = self.version_dir(item["name"], item["version"])
        if not os.path.isdir(path):
            return "missing", None
        meta = read_json(self.meta_path(item["name"], item["version"]))
        known = None
        if isinstance(meta, dict) and isinstance(meta.get("files"), list):
            known = dict((f.get("path"), f) for f in meta["files"] if isinstance(f, dict))
        wanted = dict((f["path"], f) for f in files)
        if known is not None:
            if set(known) != set(wanted) or any(known[p].get("sha256") != wanted[p]["sha256"] or (
                    wanted[p]["size"] is not None and known[p].get("size") != wanted[p]["size"]) for p in wanted):
                return "corrupt", "published metadata lists other files or checksums"
        mode = self.verify if known is not None else "sha256"
        for rel, entry in sorted(wanted.items()):
            full = os.path.join(path, rel)
            try:
                size = os.stat(full).st_size
            except OSError:
                return ("corrupt" if known is not None else "missing"), "%s is missing" % rel
            expected = entry["size"] if entry["size"] is not None else (known or {}).get(rel, {}).get("size")
            if expected is not None and size != expected:
                return "corrupt", "%s has %d bytes, expected %d" % (rel, size, expected)
            if mode == "sha256":
                digest, _size = hash_file(full)
                if digest.hexdigest() != entry["sha256"]:
                    return "corrupt", "%s has sha256 %s, expected %s" % (rel, digest.hexdigest(), entry["sha256"])
        return ("present" if known is not None else "adopt"), None

    def part_size(self, item, rel):
        staging = self.staging_dir(item["name"], item["version"])
        for candidate in (os.path.join(staging, rel + PART), os.path.join(staging, rel)):
            try:
                return os.stat(candidate).st_size
            except OSError:
                pass
        return 0

    # ---- plan
    def plan(self):
        """Resolve files, decide fetch/present per model, compute space and evictions."""
        last = {}
        for item in self.items:
            last[item["name"]] = item["version"]
        needed = 0
        unknown = []
        for item in self.items:
            source = make_source(item, self.options)
            files, manifest_sha = self.resolve_files(item, source)
            state, reason = self.existing_ok(item, files)
            plan = dict(item=item, source=source, files=files, manifest_sha256=manifest_sha, state=state,
                        reason=reason, fetch=[], needed=0)
            if state in ("missing", "corrupt"):
                for entry in files:
                    size = entry["size"]
                    if size is None:
                        size = self._retry(lambda e=entry, s=source: s.size(e["path"]), item, entry["path"])
                    have = self.part_size(item, entry["path"])
                    if size is None:
                        unknown.append("%s/%s" % (item["name"], entry["path"]))
                        todo = 0
                    else:
                        todo = max(size - have, 0) if have <= size else size
                    plan["fetch"].append(dict(entry, expected_size=size, have=have))
                    plan["needed"] += todo
                needed += plan["needed"]
                if state == "corrupt":
                    self.actions.append("replace %s@%s: %s" % (item["name"], item["version"], reason))
                self.actions.append("fetch %s@%s from %s: %d files, %d bytes to move" % (
                    item["name"], item["version"], item["source"], len(files), plan["needed"]))
            elif state == "adopt":
                self.actions.append("adopt %s@%s: files already in place and verified" % (
                    item["name"], item["version"]))
            self.plans.append(plan)
            before = self.current(item["name"])
            self.current_before[item["name"]] = before
            if last[item["name"]] == item["version"]:
                self.current_after[item["name"]] = item["version"]
                if before != item["version"]:
                    self.actions.append("switch %s/current: %s -> %s" % (item["name"], before, item["version"]))
        self.needed = needed
        self.unknown = unknown
        self.free = free_bytes(self.root)
        self._plan_evictions()

    def _plan_evictions(self):
        deficit = self.needed + self.reserve - self.free
        self.to_evict = []
        if deficit <= 0 or not self.needed:
            return
        candidates = [v for v in self.installed() if (v["name"], v["version"]) not in self.pins]
        candidates.sort(key=lambda v: (v["last_used"], v["name"], v["version"]))
        evictable = sum(v["bytes"] for v in candidates)
        if not self.options.get("evict", True) or evictable < deficit:
            raise ModelCacheError(
                "not enough space on the cache filesystem of %s: need %d bytes, %d free, reserve %d, "
                "%d bytes evictable in %d unpinned versions%s; nothing was downloaded"
                % (self.root, self.needed, self.free, self.reserve, evictable if self.options.get("evict", True)
                   else 0, len(candidates) if self.options.get("evict", True) else 0,
                   "" if self.options.get("evict", True) else " (evict is false)"),
                needed_bytes=self.needed, free_bytes=self.free, reserve_bytes=self.reserve,
                evictable_bytes=evictable, actions=self.actions)
        freed = 0
        for version in candidates:
            if freed >= deficit:
                break
            self.to_evict.append(version)
            freed += version["bytes"]
            self.actions.append("evict %s@%s (%d bytes, last used %s)" % (
                version["name"], version["version"], version["bytes"],
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(version["last_used"]))))

    @property
    def changed(self):
        return bool(self.to_evict) or any(p["state"] != "present" for p in self.plans) or any(
            self.current_before.get(n) != v for n, v in self.current_after.items())

    # ---- apply
    def apply(self):
        if not self.check_mode:
            for version in self.to_evict:
                self.evict(version)
        for plan in self.plans:
            item = plan["item"]
            result = dict(name=item["name"], version=item["version"],
                          path=self.version_dir(item["name"], item["version"]),
                          files=[dict(path=f["path"], sha256=f["sha256"], size=f["size"]) for f in plan["files"]],
                          bytes_moved=0, resumed_bytes=0, seconds=0.0, throughput_bytes_per_s=0)
            if self.check_mode:
                result["status"] = "present" if plan["state"] == "present" else "would_publish"
            elif plan["state"] == "present":
                result["status"] = "present"
                self.touch(item, plan)
            elif plan["state"] == "adopt":
                self.write_meta(item, plan, [dict(f, size=os.stat(os.path.join(result["path"], f["path"])).st_size)
                                             for f in plan["files"]])
                result["status"] = "published"
            else:
                self.fetch_and_publish(plan, result)
                result["status"] = "published"
            self.results.append(result)
        if not self.check_mode:
            for name, version in sorted(self.current_after.items()):
                if self.current_before.get(name) != version:
                    self.switch(name, version)
        return self.results

    def evict(self, version):
        name = version["name"]
        path = version["path"]
        if self.current(name) == version["version"]:
            os.unlink(os.path.join(self.root, name, CURRENT))
        trash = os.path.join(self.root, STAGING, ".evict-%s-%s-%d" % (name, version["version"], os.getpid()))
        makedirs(os.path.dirname(trash), self.dir_mode)
        os.rename(path, trash)
        try:
            os.unlink(self.meta_path(name, version["version"]))
        except OSError:
            pass
        shutil.rmtree(trash)
        self.evicted.append(dict(name=name, version=version["version"], bytes=version["bytes"]))
        self.free = free_bytes(self.root)

    def _retry(self, action, item, rel):
        attempt = 0
        while True:
            try:
                return action()
            except TransferError as exc:
                attempt += 1
                if attempt > self.retries:
                    raise ModelCacheError("%s: %s failed after %d attempts: %s" % (
                        item["what"], rel, attempt, exc), model=item["name"], version=item["version"], file=rel)
                time.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))

    def _space_check(self, n):
        # statvfs is cheap next to a multi-MiB write; checked per buffer
        free = free_bytes(self.root)
        if free - n < self.reserve:
            raise ModelCacheError(
                "stopped writing: free space on the cache filesystem of %s would drop below the reserve "
                "(%d free, writing %d, reserve %d); nothing was published, the partial file is kept for resume"
                % (self.root, free, n, self.reserve), free_bytes=free, reserve_bytes=self.reserve)

    def fetch_and_publish(self, plan, result):
        item = plan["item"]
        source = plan["source"]
        staging = self.staging_dir(item["name"], item["version"])
        makedirs(staging, self.dir_mode)
        started = time.monotonic()
        final = []
        for entry in plan["fetch"]:
            moved, resumed, size = self.fetch_file(item, source, staging, entry)
            result["bytes_moved"] += moved
            result["resumed_bytes"] += resumed
            final.append(dict(path=entry["path"], sha256=entry["sha256"], size=size))
        result["seconds"] = round(time.monotonic() - started, 3)
        if result["seconds"] > 0:
            result["throughput_bytes_per_s"] = int(result["bytes_moved"] / result["seconds"])
        # every file verified: drop the suffixes, fix modes, fsync the tree, then publish
        for entry in final:
            part = os.path.join(staging, entry["path"] + PART)
            done = os.path.join(staging, entry["path"])
            os.chmod(part, self.file_mode)
            os.rename(part, done)
        for dirpath, _dirs, _files in os.walk(staging, topdown=False):
            os.chmod(dirpath, self.dir_mode)
            fsync_dir(dirpath)
        result["files"] = final
        self.write_meta(item, plan, final)
        target = self.version_dir(item["name"], item["version"])
        makedirs(os.path.dirname(target), self.dir_mode)
        old = None
        if os.path.lexists(target):
            old = os.path.join(self.root, STAGING,
                               ".replaced-%s-%s-%d" % (item["name"], item["version"], os.getpid()))
            os.rename(target, old)
        os.rename(staging, target)
        fsync_dir(os.path.dirname(target))
        if old:
            shutil.rmtree(old)
        self._cleanup_staging(item["name"])

    def _cleanup_staging(self, name):
        for path in (os.path.join(self.root, STAGING, name), os.path.join(self.root, STAGING)):
            try:
                os.rmdir(path)
            except OSError:
                break

    def fetch_file(self, item, source, staging, entry):
        """Download one file into its .part; return (bytes moved, bytes resumed, size)."""
        rel = entry["path"]
        part = os.path.join(staging, rel + PART)
        done = os.path.join(staging, rel)
        makedirs(os.path.dirname(part), self.dir_mode)
        if os.path.exists(done) and not os.path.exists(part):
            os.rename(done, part)  # a run stopped between verify and publish
        expected = entry.get("expected_size")
        have = os.path.getsize(part) if os.path.exists(part) else 0
        if expected is not None and have > expected:
            os.unlink(part)
            have = 0
        if have:
            digest, have = hash_file(part)
        else:
            digest = hashlib.sha256()
        resumed = have
        moved = 0
        fd = os.open(part, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.lseek(fd, have, os.SEEK_SET)
            offset = have
            attempt = 0
            while expected is None or offset < expected:
                try:
                    stream, served, total = source.open(rel, offset)
                    if stream is None:  # HTTP 416: the part already holds the whole file
                        break
                    try:
                        if served != offset:
                            # HTTP 200 instead of 206: the source ignores Range, start over from 0
                            self.log("%s: %s restarted from byte 0 (the source ignored Range)" % (item["what"], rel))
                            os.ftruncate(fd, 0)
                            os.lseek(fd, 0, os.SEEK_SET)
                            digest = hashlib.sha256()
                            offset = 0
                            resumed = 0
                        if expected is None and total is not None:
                            expected = total
                        limit = (expected - offset) if expected is not None else None
                        # A known size was checked against the reserve before the download;
                        # only a file of unknown size is watched while it is written. (Free space
                        # read while writing is not exact: xfs reserves speculative preallocation
                        # beyond the end of a growing file, and trims it on close.)
                        n = stream_copy(stream, fd, digest, limit=limit, bucket=self.bucket,
                                        space_check=self._space_check if expected is None else None)
                    finally:
                        stream.close()
                    offset += n
                    moved += n
                    if expected is None:
                        break
                    if n < limit:
                        # the source closed early (http.client returns a short read, no error)
                        raise TransferError("%s ended at byte %d of %d" % (source.describe(rel), offset, expected))
                except TransferError as exc:
                    # what was read before the error is written and hashed: resume from there
                    position = os.lseek(fd, 0, os.SEEK_CUR)
                    moved += max(position - offset, 0)
                    offset = position
                    attempt += 1
                    if attempt > self.retries:
                        os.fsync(fd)
                        raise ModelCacheError(
                            "%s: %s failed after %d attempts at byte %d: %s (the partial file is kept; the next "
                            "run resumes it)" % (item["what"], rel, attempt, offset, exc),
                            model=item["name"], version=item["version"], file=rel)
                    resumed += offset
                    time.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))
            os.fsync(fd)
        finally:
            os.close(fd)
        actual = digest.hexdigest()
        size = os.path.getsize(part)
        if actual != entry["sha256"] or (expected is not None and size != expected):
            os.unlink(part)
            raise ModelCacheError(
                "%s: checksum mismatch for %s (from %s): expected sha256 %s, got %s (%d bytes); "
                "the partial file was deleted and nothing was published"
                % (item["what"], rel, source.describe(rel), entry["sha256"], actual, size),
                model=item["name"], version=item["version"], file=rel,
                expected_sha256=entry["sha256"], actual_sha256=actual)
        return moved, resumed, size

    # ---- metadata and pointer
    def write_meta(self, item, plan, files):
        now = now_iso()
        meta = dict(name=item["name"], version=item["version"], source=item["source"],
                    manifest=item["manifest"], manifest_sha256=plan.get("manifest_sha256"),
                    files=files, bytes=sum(int(f["size"] or 0) for f in files),
                    published_at=now, last_used=now)
        path = self.meta_path(item["name"], item["version"])
        makedirs(os.path.dirname(path), self.dir_mode)
        atomic_write(path, json.dumps(meta, indent=2, sort_keys=True) + "\n", mode=0o644)

    def touch(self, item, plan):
        """last_used bookkeeping: not a change."""
        path = self.meta_path(item["name"], item["version"])
        meta = read_json(path)
        if isinstance(meta, dict):
            meta["last_used"] = now_iso()
            atomic_write(path, json.dumps(meta, indent=2, sort_keys=True) + "\n", mode=0o644)

    def switch(self, name, version):
        link = os.path.join(self.root, name, CURRENT)
        tmp = os.path.join(self.root, name, ".%s.%d.tmp" % (CURRENT, os.getpid()))
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(version, tmp)
        os.rename(tmp, link)
        fsync_dir(os.path.dirname(link))

    def diff(self):
        names = sorted(set(self.current_before) | set(self.current_after))
        before = "".join("%s/current -> %s\n" % (n, self.current_before.get(n)) for n in names)
        after = "".join("%s/current -> %s\n" % (n, self.current_after.get(n, self.current_before.get(n)))
                        for n in names)
        return dict(before_header="%s current pointers" % self.root, after_header="%s current pointers" % self.root,
                    before=before, after=after)


def run_cache(root, models, pinned=None, check_mode=False, require_mount=None, mountinfo="/proc/self/mountinfo",
              log=None, **options):
    """Validate, plan and (unless check mode) apply. Returns the result dict of the module."""
    if not root or not root.startswith("/"):
        raise ModelCacheError("root must be an absolute path, got %r" % (root,))
    for key in ("reserve_bytes", "bandwidth_limit", "retries"):
        if int(options.get(key) or 0) < 0:
            raise ModelCacheError("%s must not be negative" % key)
    for key in ("file_mode", "dir_mode"):
        value = options.get(key)
        if value is not None:
            try:
                int(str(value), 8)
            except ValueError:
                raise ModelCacheError("%s %r is not an octal mode" % (key, value))
    items, pins = normalise_models(models, pinned)
    parent = os.path.dirname(root.rstrip("/"))
    if not os.path.isdir(parent):
        raise ModelCacheError("the parent of root, %s, does not exist (is the cache filesystem mounted?)" % parent)
    if require_mount:
        check_mount(root, require_mount, mountinfo)
    cache = ModelCache(root, items, pins, options, check_mode=check_mode, log=log)
    created = not os.path.isdir(cache.root)
    if created:
        cache.actions.append("create %s" % cache.root)
        if not check_mode:
            makedirs(cache.root, int(str(options.get("dir_mode") or "0755"), 8))
    cache.plan()
    cache.apply()
    return dict(changed=cache.changed or created, models=cache.results,
                evicted=cache.evicted if not check_mode else [
                    dict(name=v["name"], version=v["version"], bytes=v["bytes"]) for v in cache.to_evict],
                free_bytes=free_bytes(cache.root), reserve_bytes=cache.reserve, actions=cache.actions,
                diff=cache.diff())
