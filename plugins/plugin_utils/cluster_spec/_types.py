"""Constrained scalar types shared by the spec models.

Every type is strict (no silent ``"9000"`` -> ``9000`` coercion): a value of the wrong YAML
type is an error that names the field, never a guess.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any, Literal

from ._node import derived, nfd_rules
from ._pydantic import BeforeValidator, Field, Strict

# Largest byte count we accept anywhere (an exabyte is far beyond any node, and it keeps
# arithmetic in 64 bits so huge YAML numbers cannot blow up anything).
MAX_BYTES = 2**60

Mtu = Annotated[int, Strict(), Field(ge=derived.MTU_MIN, le=derived.MTU_MAX,
                                     description=f"Link MTU in bytes ({derived.MTU_MIN}-{derived.MTU_MAX}).")]
Dscp = Annotated[int, Strict(), Field(ge=0, le=63, description="DSCP code point (0-63).")]
Priority = Annotated[int, Strict(), Field(ge=0, le=7, description="802.1p priority (0-7).")]
TrafficClass = Annotated[int, Strict(), Field(ge=0, le=7)]
Percent = Annotated[int, Strict(), Field(ge=0, le=100)]
PageSize = Literal["2M", "1G"]
PAGE_BYTES: dict[str, int] = {"2M": 2 * 1024**2, "1G": 1024**3}

NAME_RE = r"^[a-z][a-z0-9_-]{0,31}$"
FabricName = Annotated[str, Strict(), Field(pattern=NAME_RE,
                                            description="Lower-case identifier, at most 32 characters.")]
ProfileName = Annotated[str, Strict(), Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
HostName = Annotated[str, Strict(), Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}$")]

_IFNAME_BAD = re.compile(r"[\s/;&|$`'\"<>()\\*?!{}\[\]#~^,=%:\x00-\x1f\x7f]")


def _check_ifname(value: Any) -> Any:
    if isinstance(value, str):
        if not value or len(value) > 15:
            raise ValueError("an interface name has 1-15 characters (the kernel's IFNAMSIZ)")
        if value in (".", "..") or ".." in value or _IFNAME_BAD.search(value) or not value.isascii():
            raise ValueError("an interface name may not contain whitespace, control characters, '/', "
                             "'..', non-ASCII or shell characters")
    return value


IfName = Annotated[str, Strict(), BeforeValidator(_check_ifname),
                   Field(description="Kernel interface name (at most 15 characters).")]
MacAddress = Annotated[str, Strict(), Field(pattern=r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")]
PciAddress = Annotated[str, Strict(), Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$",
                                            description="PCI address, e.g. 0000:e6:00.0")]
DriverName = Annotated[str, Strict(), Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")]
UserName = Annotated[str, Strict(), Field(pattern=r"^([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10})$")]
FileMode = Annotated[str, Strict(), Field(pattern=r"^0?[0-7]{3,4}$",
                                          description="Octal mode as a quoted string, e.g. '0755'.")]
Version = Annotated[str, Strict(), Field(pattern=r"^[0-9]{1,6}(\.[0-9]{1,6}){1,3}$",
                                         description="Dotted numeric version, e.g. 28.39.3560")]

# ASCII: with Unicode case folding the KELVIN SIGN would match "K" and then miss the unit table.
_SIZE_RE = re.compile(r"^\s*([0-9]{1,15}(?:\.[0-9]{1,6})?)\s*([KMGTPE]?)(i?)(B?)\s*$", re.IGNORECASE | re.ASCII)
_UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def parse_size(value: Any) -> Any:
    """``"10GiB"``, ``"3.84TB"``, ``"512M"`` or an int -> bytes; other input passes through.

    ``K/M/G/T`` without ``i`` or ``B`` are binary (like mdadm and the kernel); ``KB/MB/...``
    are decimal (like disk vendors); ``KiB/MiB/...`` are binary.
    """
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if not match:
            raise ValueError("a size is bytes as an integer or a string like '10GiB', '3.84TB', '512M'")
        number, unit, binary, byte = match.groups()
        exp = _UNITS[unit.upper()]
        base = 1000 if (byte and not binary and unit) else 1024
        result = int(float(number) * base**exp) if "." in number else int(number) * base**exp
        if result > MAX_BYTES:
            raise ValueError("size is larger than 1 EiB")
        return result
    return value


Size = Annotated[int, BeforeValidator(parse_size, json_schema_input_type=int | str), Strict(),
                 Field(ge=0, le=MAX_BYTES, description="Bytes, or a string like '10GiB' / '3.84TB'.")]

# Directories that must never be a mount point (or, for the first group, contain one).
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/run", "/boot", "/etc", "/usr", "/bin", "/sbin")
SYSTEM_DIRS = ("/", "/var", "/var/lib", "/var/log", "/var/tmp", "/tmp", "/home", "/root", "/opt",
               "/srv", "/mnt", "/media", "/lost+found", "/snap")
_PATH_OK = re.compile(r"/[A-Za-z0-9._/@+-]*")  # fullmatch: `$` would accept a trailing newline


def _check_abs_path(value: str, allow_hugetlbfs: bool) -> str:
    if not _PATH_OK.fullmatch(value) or len(value) > 255:
        raise ValueError("a mount path is absolute, at most 255 characters of [A-Za-z0-9._/@+-]")
    # normpath keeps a leading "//" (POSIX leaves its meaning open): "//etc" would pass as /etc
    if posixpath.normpath(value) != value or value.startswith("//") or "/./" in value or value.endswith("/."):
        raise ValueError(f"path is not normalised; write {'/' + posixpath.normpath(value).lstrip('/')!r}")
    if allow_hugetlbfs and re.fullmatch(r"/dev/hugepages(-(2M|1G|2MB|1GB))?", value):
        return value
    parts = value.split("/")
    top = "/" + parts[1] if len(parts) > 1 else "/"
    if value in SYSTEM_DIRS or top in SYSTEM_TREES or top.startswith("/lib"):
        raise ValueError(f"{value} is a system path; mount below e.g. /mnt/<name> or /srv/<name>")
    return value


def _mount_path(value: Any) -> Any:
    return _check_abs_path(value, False) if isinstance(value, str) else value


def _hugetlbfs_path(value: Any) -> Any:
    return _check_abs_path(value, True) if isinstance(value, str) else value


MountPath = Annotated[str, Strict(), BeforeValidator(_mount_path),
                      Field(description="Absolute, normalised path outside the system trees.")]
HugeMountPath = Annotated[str, Strict(), BeforeValidator(_hugetlbfs_path),
                          Field(description="Absolute path; /dev/hugepages[-<size>] is allowed.")]


def _rel_path(value: Any) -> Any:
    if isinstance(value, str):
        if (not value or value.startswith("/") or posixpath.normpath(value) != value
                or value.split("/")[0] == ".." or not re.fullmatch(r"[A-Za-z0-9._/@+-]{1,255}", value)):
            raise ValueError("a directory is a normalised relative path below the mount point "
                             "(no leading '/', no '..')")
    return value


RelPath = Annotated[str, Strict(), BeforeValidator(_rel_path)]
DevicePath = Annotated[str, Strict(), Field(
    pattern=r"^/dev/(disk/by-(id|path|uuid|partuuid|label)/[A-Za-z0-9._:+@-]{1,200}|nvme[0-9]{1,3}n[0-9]{1,3}"
            r"|(sd|vd|xvd)[a-z]{1,3}|loop[0-9]{1,4})$",
    description="/dev/disk/by-id/... (preferred: stable across boots), /dev/nvmeXnY, /dev/sdX, /dev/vdX "
                "or /dev/loopN (test rigs)")]
Serial = Annotated[str, Strict(), Field(
    pattern=r"^([A-Za-z0-9._:-]{1,160}|/dev/[A-Za-z0-9._:/+@-]{1,200})$",
    description="Device serial number or WWN; for devices without one (loop devices) the device path")]
KernelArg = Annotated[str, Strict(), Field(
    pattern=r"^[A-Za-z0-9_.-]{1,64}(=[A-Za-z0-9_.,:/+@=-]{0,255})?$",
    description="One kernel argument, 'key' or 'key=value' (no spaces or quotes).")]
SysctlKey = Annotated[str, Strict(), Field(pattern=r"^[a-z0-9_-]+(\.[A-Za-z0-9_*-]+){1,8}$",
                                           max_length=128)]
# The spec accepts what nfd-master publishes with its default configuration (no extraLabelNs).
_SPEC_EXTRA_NS_FIX = ("or, if your nfd-master lists %(ns)s in extraLabelNs, leave it out of the spec and set the "
                      "label with the role variables nfd_labels_labels and nfd_labels_extra_label_ns")


def _check_label_key(value: Any) -> Any:
    if isinstance(value, str):
        error = nfd_rules.nfd_label_error(value, "", (), _SPEC_EXTRA_NS_FIX)
        if error:
            raise ValueError(error)
    return value


# The validator comes last so that the key's pattern stays in the JSON Schema (it runs first).
_LABEL_KEY_FIELD = Field(
    pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
            r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
    max_length=317, description="Kubernetes label key with a prefix ('aiinfra.io/x'), as node-feature-discovery "
                                "publishes it: not in kubernetes.io or *.kubernetes.io (except "
                                "feature.node.kubernetes.io and profile.node.kubernetes.io).")
LabelKey = Annotated[str, Strict(), _LABEL_KEY_FIELD, BeforeValidator(_check_label_key)]
LabelValue = Annotated[str, Strict(), Field(pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")]
DnsName = Annotated[str, Strict(), Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
MountOption = Annotated[str, Strict(), Field(pattern=r"^[a-z0-9_]{1,32}(=[A-Za-z0-9_.:/-]{1,64})?$")]
Share = Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]

# --------------------------------------------------------------------------- model cache
ModelName = Annotated[str, Strict(), Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
Sha256 = Annotated[str, Strict(), Field(pattern=r"^[0-9a-f]{64}$",
                                        description="SHA-256 as 64 lower-case hex digits.")]
_MODEL_PATH_OK = re.compile(r"[A-Za-z0-9._/@+=,-]{1,1024}")


def _model_file_path(value: Any) -> Any:
    if isinstance(value, str):
        parts = value.split("/")
        if (not _MODEL_PATH_OK.fullmatch(value) or value.startswith("/") or posixpath.normpath(value) != value
                or any(part in ("", ".", "..") for part in parts)):
            raise ValueError(f"{value[:60]!r} is not a safe relative file path; write a normalised path below "
                             "the model's source, e.g. 'weights/model-00001.safetensors' (no leading '/', "
                             "no '.' or '..', characters [A-Za-z0-9._/@+=,-], at most 1024)")
    return value


ModelFilePath = Annotated[str, Strict(), BeforeValidator(_model_file_path),
                          Field(description="Normalised relative path (no leading '/', no '..').")]

_HOST_RE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
                      r"|\[[0-9A-Fa-f:.]{2,45}\])(:[0-9]{1,5})?")
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_SOURCE_PATH_RE = re.compile(r"/[A-Za-z0-9._/@+=,~%-]*")


def _source_path(path: str, what: str) -> None:
    if path in ("", "/"):
        return
    if (not _SOURCE_PATH_RE.fullmatch(path) or path.endswith("/")
            or any(p in ("", ".", "..") for p in path.split("/")[1:])):
        raise ValueError(f"the path of {what} {path[:60]!r} is not normalised or has unusual characters; "
                         "use [A-Za-z0-9._/@+=,~%-] without '.', '..', '//' or a trailing '/'")


def _model_source(value: Any) -> Any:
    """``/abs/dir``, ``file:///abs/dir``, ``http(s)://host[:port]/prefix`` or ``s3://bucket/prefix``."""
    if not isinstance(value, str):
        return value
    hint = "write /abs/dir, file:///abs/dir, http(s)://host[:port]/prefix or s3://bucket/prefix"
    if len(value) > 2048 or not value.isascii() or any(c.isspace() or ord(c) < 32 for c in value):
        raise ValueError(f"a source is at most 2048 printable ASCII characters without spaces; {hint}")
    scheme, sep, rest = value.partition("://")
    if not sep:
        if not value.startswith("/"):
            raise ValueError(f"{value[:60]!r} is neither an absolute path nor a URL; {hint}")
        _source_path(value, "source")
        return value
    if "?" in rest or "#" in rest:
        raise ValueError("a source has no query or fragment (file URLs are source + '/' + path); "
                         "put credentials in model_cache_headers or model_cache_s3, not in the URL")
    if scheme == "file":
        if not rest.startswith("/"):
            raise ValueError("a file URL names an absolute path on the node; "
                             f"write file:///abs/dir, not {value[:60]!r}")
        _source_path(rest, "source")
        return value
    if scheme not in ("http", "https", "s3"):
        raise ValueError(f"scheme {scheme[:20]!r} is not supported; {hint}")
    host, _slash, path = rest.partition("/")
    if "@" in host:
        raise ValueError("a source URL carries no user or password; put credentials in "
                         "model_cache_headers (HTTP) or model_cache_s3 (S3), which are never logged")
    if scheme == "s3":
        if not _BUCKET_RE.fullmatch(host):
            raise ValueError(f"{host[:64]!r} is not an S3 bucket name; write s3://bucket/prefix (3-63 characters "
                             "of [a-z0-9.-]; the endpoint goes in model_cache_s3.endpoint_url)")
    elif not _HOST_RE.fullmatch(host) or (":" in host.rsplit("]", 1)[-1]
                                          and not 0 < int(host.rsplit(":", 1)[1]) < 65536):
        raise ValueError(f"{host[:64]!r} is not a host[:port]; {hint}")
    _source_path("/" + path if path else "", "source")
    return value


ModelSource = Annotated[str, Strict(), BeforeValidator(_model_source),
                        Field(description="/abs/dir, file:///abs/dir, http(s)://host[:port]/prefix or "
                                          "s3://bucket/prefix; a file's URL is source + '/' + path.")]
