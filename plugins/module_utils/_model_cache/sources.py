# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model cache sources (stdlib only): what a model names and where its files come from.

* validation of the ``models`` and ``pinned`` options: names, versions, relative file paths,
  sha256 digests, sizes, and ``sha256sum``-format manifests;
* the sources a version is read from: a local (or shared) directory, ``file://``,
  ``http(s)://`` and path-style ``s3://`` requests signed with AWS Signature Version 4.

A source answers ``describe(path)``, ``size(path)`` (``stat`` or ``HEAD``), ``read_small(path)``
(a manifest) and ``open(path, offset)`` -> (stream with ``readinto``, offset served, total size).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import hmac
import os
import re
import socket
import ssl
import time

from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.parse import quote, unquote, urlsplit
from urllib.request import HTTPRedirectHandler, HTTPSHandler, Request, build_opener

from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
SHA256_RE = re.compile(r"\A[0-9a-f]{64}\Z")
MANIFEST_LIMIT = 16 << 20  # bytes of a manifest the module reads at most
MAX_REDIRECTS = 5
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
CURRENT = "current"  # <cache_dir>/<name>/current: never a model name
PART = ".part"       # staging suffix of a file being downloaded: never a file's own suffix


class ModelCacheError(CapabilityError):
    """A model cache failure: a message for the user and extra result keys."""


class TransferError(CapabilityError):
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
        match = re.match(r"\A([0-9a-fA-F]{64}) [ *](.+)\Z", line)
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

    def read_small(self, path, limit=MANIFEST_LIMIT):
        try:
            with open(self.describe(path), "rb") as handle:
                return check_small(handle.read(limit + 1), limit, self.describe(path))
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


def check_small(data, limit, what):
    """``data`` read with ``limit + 1``: a manifest longer than ``limit`` is refused, never cut."""
    if len(data) > limit:
        raise ModelCacheError("%s is larger than %d bytes, the most a manifest may hold: refusing it rather than "
                              "reading a truncated list (nothing was published)" % (what, limit))
    return data


def parse_length(value, what):
    """A Content-Length (or a size a server sends): a non-negative decimal number, else a clear error."""
    if value is None:
        return None
    text = str(value).strip()
    if not re.match(r"\A[0-9]{1,20}\Z", text):
        raise ModelCacheError("%s: the server sent Content-Length %r, which is not a non-negative number; refusing "
                              "the response (nothing was published)" % (what, str(value)[:80]))
    return int(text)


def origin(parts):
    """(scheme, host, port) of a urlsplit result: what a credential is made for."""
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


class RedirectPolicy(HTTPRedirectHandler):
    """Redirects the sources follow: http(s) targets only, never from https to plain http, at
    most ``MAX_REDIRECTS``; to another origin without ``Authorization``, any ``X-Amz-*`` header
    or the user's headers (only ``Range`` goes along); a signed S3 request is signed again for a
    redirect on its own host and refused for another host."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, source):
        HTTPRedirectHandler.__init__(self)
        self.source = source

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        old, new = urlsplit(req.full_url), urlsplit(newurl)
        method = req.get_method()
        what = "%s %s" % (method, req.full_url)
        if new.scheme not in ("http", "https"):
            raise ModelCacheError("%s: redirect to %s refused: only http(s) targets are followed" % (what, newurl))
        if old.scheme == "https" and new.scheme == "http":
            raise ModelCacheError("%s: redirect to %s refused: it leaves https for plain http, where anyone on the "
                                  "path can read and change the response" % (what, newurl))
        extra = dict(getattr(req, "datapath_extra", {}))
        same = origin(old) == origin(new)
        if same:
            # the user's headers were meant for this origin; an S3 request is signed again for the new path
            fresh = self.source.request_headers(method, newurl, extra)
        elif self.source.signs():
            raise ModelCacheError(
                "%s: redirect to %s refused: the request is signed for %s and its credentials are never sent "
                "to another host; set s3.endpoint_url to the endpoint that holds the bucket (the region's)"
                % (what, newurl, old.netloc))
        else:
            fresh = extra  # nothing of the user's: no Authorization, no X-Amz-*, no other header
        if method not in ("GET", "HEAD"):
            return None
        request = Request(newurl, method=method, headers=fresh)
        request.datapath_extra = extra
        return request


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
        self.opener = build_opener(HTTPSHandler(context=context), RedirectPolicy(self))

    def signs(self):
        """Whether requests carry credentials that are made for one host (S3 signatures)."""
        return False

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
        req.datapath_extra = dict(extra or {})
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
            return parse_length(resp.headers.get("Content-Length"), "HEAD %s" % self.url(path))
        finally:
            resp.close()

    def read_small(self, path, limit=MANIFEST_LIMIT):
        resp = self._request("GET", path)
        try:
            parse_length(resp.headers.get("Content-Length"), "GET %s" % self.url(path))
            return check_small(resp.read(limit + 1), limit, self.url(path))
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
            match = re.match(r"\Abytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20}|\*)\Z", crange.strip())
            if not match or int(match.group(1)) != offset:
                resp.close()
                raise TransferError("GET %s: 206 with Content-Range %r, asked from %d"
                                    % (self.url(path), crange, offset))
            served = offset
            total = int(match.group(3)) if match.group(3) != "*" else None
            parse_length(resp.headers.get("Content-Length"), "GET %s" % self.url(path))
        else:
            try:
                total = parse_length(resp.headers.get("Content-Length"), "GET %s" % self.url(path))
            except ModelCacheError:
                resp.close()
                raise
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

    def signs(self):
        return bool(self.access_key and self.secret_key)

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
