#!/usr/bin/env python3
"""Generate plugins/plugin_utils/cluster_spec/_sysctl_keys.py: the sysctl keys a Linux kernel documents.

The spec's warning `sysctl-key-unknown` (``datapath validate``, docs/pipelines.md) compares each sysctl key
of a profile or host override with this list and says "did you mean ..." for a near miss. The list
comes from the kernel's own documentation of /proc/sys, never from this project's guesses:

* Documentation/admin-guide/sysctl/{abi,fs,kernel,net,sunrpc,user,vm}.rst: each section heading names
  one or more files of /proc/sys/<stem>/ ("aio-nr & aio-max-nr", "ftrace_enabled, stack_tracer_enabled");
  numbered headings ("3. /proc/sys/fs/mqueue - ...") set the directory of the headings below them;
* Documentation/networking/ip-sysctl.rst: lines ``name - TYPE`` under "/proc/sys/net/<proto>/*
  Variables" headings, with ``conf/interface/*``, ``conf/all/*``, ``icmp/*`` ... setting the directory;
  per-interface directories (conf/<interface>, neigh/<interface>) become ``*``;
* every literal ``/proc/sys/...`` path mentioned in those files;
* optionally (``--proc-sys``) the keys a running kernel has, with interface names as ``*``: the
  documentation lags the code, and a key that exists must not be called unknown.

Usage (the Documentation tree of a kernel source or of Debian's linux-doc-<version> package, whose
Documentation/ holds the same .rst files, gzipped)::

    apt-get download linux-doc-6.12 && dpkg-deb -x linux-doc-6.12_*.deb /tmp/kdoc
    python3 scripts/sysctl_keys.py /tmp/kdoc/usr/share/doc/linux-doc-6.12/Documentation \\
        --source "Linux 6.12.118 Documentation (Debian linux-doc-6.12 6.12.118-1~deb12u1)" \\
        --proc-sys /proc/sys --proc-sys-source "/proc/sys of Linux $(uname -r)" \\
        > plugins/plugin_utils/cluster_spec/_sysctl_keys.py

The output is deterministic (sorted), so a re-run on the same input changes nothing.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import sys

ADMIN_GUIDE = ("abi", "fs", "kernel", "net", "sunrpc", "user", "vm")
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
UNDERLINE = re.compile(r"^([=\-~^\"'`#*+])\1{2,}\s*$")
PROC_PATH = re.compile(r"/proc/sys/([A-Za-z0-9_][A-Za-z0-9_./*<>-]*[A-Za-z0-9_*>])")
NUMBERED = re.compile(r"^\d+\.\s+/proc/sys/([A-Za-z0-9_/.-]+)")
IP_ENTRY = re.compile(r"^([a-z0-9_][a-z0-9_/.*-]*)\s+-\s+\S")
IP_SECTION = re.compile(r"^`*/?(?:proc/sys/)?net/([a-z0-9_]+)/\*`*")
IP_DIR = re.compile(r"^``?([a-z0-9_]+)/(?:(interface|all|default)/)?\*``?:?\s*$")
# directories of /proc/sys whose next component is a network device (or all / default)
PER_DEVICE = (("net", "ipv4", "conf"), ("net", "ipv6", "conf"), ("net", "ipv4", "neigh"), ("net", "ipv6", "neigh"),
              ("net", "mpls", "conf"))
FIXED = ("all", "default")


def read(path: str) -> str:
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    with gzip.open(path + ".gz", "rt", encoding="utf-8", errors="replace") as handle:
        return handle.read()


def normalize(parts: list[str]) -> str | None:
    """Dotted key with a network device name as ``*``; None for what is not a key."""
    parts = [p for p in parts if p]
    if len(parts) < 2 or not all(NAME.match(p) or p == "*" for p in parts):
        return None
    for prefix in PER_DEVICE:
        if tuple(parts[:3]) == prefix and len(parts) >= 5:
            parts = [*parts[:3], "*", *parts[4:]]
    return ".".join(parts)


def names_of(heading: str) -> list[str]:
    """The file names a heading lists: 'aio-nr & aio-max-nr', 'msgmax, msgmnb, and msgmni',
    'bootloader_type (x86 only)'."""
    text = re.sub(r"\(.*?\)", " ", heading).replace("``", " ")
    words = re.split(r"\s*(?:,|&|\band\b|\bor\b)\s*", text)
    out = [w.strip() for w in words if w.strip()]
    return out if out and all(NAME.match(w) and " " not in w for w in out) else []


def admin_guide(doc: str, stem: str, keys: set[str]) -> None:
    lines = read(os.path.join(doc, "admin-guide", "sysctl", f"{stem}.rst")).splitlines()
    directory = [stem] if stem != "net" else ["net", "core"]
    for index in range(1, len(lines)):
        if not UNDERLINE.match(lines[index]) or not lines[index - 1].strip():
            continue
        heading = lines[index - 1].strip()
        numbered = NUMBERED.match(heading)
        if numbered:
            directory = numbered.group(1).strip("/").split("/")
            continue
        if re.match(r"^\d+\.", heading) or "/" in heading:
            continue
        for name in names_of(heading):
            key = normalize([*directory, name])
            if key:
                keys.add(key)
    if stem == "vm":  # vm.rst opens with a list of its files: "- admin_reserve_kbytes"
        for line in lines:
            match = re.match(r"^- ([a-z0-9_-]+)\s*$", line)
            if match:
                keys.add(f"vm.{match.group(1)}")


def ip_sysctl(doc: str, keys: set[str]) -> None:
    proto = "ipv4"
    directory: list[str] = []
    for line in read(os.path.join(doc, "networking", "ip-sysctl.rst")).splitlines():
        section = IP_SECTION.match(line)
        if section:
            proto, directory = section.group(1), []
            continue
        sub = IP_DIR.match(line.strip()) if not line.startswith("\t") else None
        if sub:
            directory = [sub.group(1)] + (["*"] if sub.group(1) in ("conf", "neigh") else [])
            continue
        entry = IP_ENTRY.match(line)
        if not entry:
            continue
        path = entry.group(1).split("/")
        if len(path) > 1:  # a full relative path: neigh/default/gc_thresh1, conf/all/forwarding
            key = normalize(["net", proto, *path])
            if key and path[0] == "neigh" and proto == "ipv4":
                keys.add(key.replace("net.ipv4.", "net.ipv6.", 1))  # one neighbour-table code for both
        else:
            key = normalize(["net", proto, *directory, path[0]])
        if key:
            keys.add(key)


def literal_paths(doc: str, keys: set[str]) -> None:
    files = [os.path.join(doc, "admin-guide", "sysctl", f"{s}.rst") for s in ADMIN_GUIDE]
    files.append(os.path.join(doc, "networking", "ip-sysctl.rst"))
    for path in files:
        for match in PROC_PATH.finditer(read(path)):
            parts = [("*" if p.startswith("<") or p == "interface" else p) for p in match.group(1).split("/")]
            if parts[-1] == "*":
                continue
            key = normalize(parts)
            if key and "." not in "".join(parts):
                keys.add(key)


def proc_sys(root: str, keys: set[str]) -> None:
    for base, _dirs, files in os.walk(root):
        rel = os.path.relpath(base, root)
        parts = [] if rel == "." else rel.split(os.sep)
        for name in files:
            key = normalize([*parts, name])
            if key:
                keys.add(key)


def files_only(keys: set[str]) -> set[str]:
    """Without the directories a heading named (fs.epoll when fs.epoll.max_user_watches is there)."""
    return {k for k in keys if not any(other.startswith(k + ".") for other in keys)}


def render(keys: set[str], sources: list[str]) -> str:
    out = [
        '"""The sysctl keys a Linux kernel has, for the spec warning `sysctl-key-unknown` (generated; do not edit).',
        "",
        "Generated by scripts/sysctl_keys.py from admin-guide/sysctl/*.rst and networking/ip-sysctl.rst of the",
        "first source, plus the keys of the running kernel named after it (if any):",
        *[f"* {s}" for s in sources],
        "",
        "A network device's directory (net.ipv4.conf.<device>, net.ipv6.conf.<device>, net.*.neigh.<device>)",
        "is `*`.",
        '"""',
        "",
        "SOURCES = (",
        *[f"    {s!r}," for s in sources],
        ")",
        "KEYS = frozenset((",
        *[f"    {k!r}," for k in sorted(files_only(keys))],
        "))",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("documentation", help="a kernel's Documentation/ directory (.rst or .rst.gz files)")
    parser.add_argument("--source", required=True, help="what the documentation is (kernel version, package)")
    parser.add_argument("--proc-sys", help="also the keys of a running kernel under this /proc/sys")
    parser.add_argument("--proc-sys-source", default="", help="what that kernel is (uname -r)")
    args = parser.parse_args(argv)
    keys: set[str] = set()
    for stem in ADMIN_GUIDE:
        admin_guide(args.documentation, stem, keys)
    ip_sysctl(args.documentation, keys)
    literal_paths(args.documentation, keys)
    sources = [args.source]
    if args.proc_sys:
        proc_sys(args.proc_sys, keys)
        sources.append(args.proc_sys_source or args.proc_sys)
    sys.stdout.write(render(keys, sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
