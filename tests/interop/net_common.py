"""Shared by tests/interop/test_net_*.py: the real readers of link_mtu's network files.

- ``netplan generate --root-dir`` / ``netplan get --root-dir`` (netplan.io): offline, below a
  temporary root;
- ``udevadm test-builtin net_setup_link`` and ``systemd-networkd`` (systemd 252): inside a
  network namespace of our own (``dpi-net-TAG-PID``, veth pairs only, lab addresses from
  198.18.0.0/15) and, through ``ip netns exec``, a mount namespace of their own made private
  with ``unshare --mount --propagation private``: ``/etc/systemd/network`` (and
  ``/run/systemd/network``) are bind mounts of temporary directories, ``/run`` is a tmpfs (no
  host bus, no host state) and, for networkd, ``/sys`` is read-only (so networkd does not
  wait for a udev that does not run there). Both end with the command; the namespace is
  deleted in ``finally``, networkd is stopped by its PID;
- ``ifquery`` (ifupdown) with ``/etc/network`` bound to a temporary directory.

Nothing here touches the host's network or starts a service on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UNIT_PLUGINS = os.path.join(REPO, "tests", "unit", "plugins")
if UNIT_PLUGINS not in sys.path:
    sys.path.insert(0, UNIT_PLUGINS)

import netcases  # noqa: E402  (tests/unit/plugins: the shared netplan cases)
import netfakes  # noqa: E402  (tests/unit/plugins: the recorded-output fakes)
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot  # noqa: E402
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import (  # noqa: E402
    device_facts,
    parse_link_json,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_systemd import parse_unit  # noqa: E402

__all__ = ["netcases", "netfakes"]

NETWORKD = "/lib/systemd/systemd-networkd"


def tool(name: str) -> str:
    """The reader's path; skips only when it is truly absent (scripts/bootstrap.sh installs it)."""
    found = shutil.which(name) or (name if os.access(name, os.X_OK) else None)
    if found is None:
        pytest.skip(f"{name} is not installed (scripts/bootstrap.sh installs it)")
    return found


def run(argv: Sequence[str], timeout: int = 60, check: bool = False) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"{argv}: rc {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


class RealRunner:
    """The backends' runner interface over subprocess (``netplan get`` is all they run here)."""

    def __init__(self, netplan: bool = True) -> None:
        self.netplan = netplan
        self.commands: list[list[str]] = []

    def which(self, name: str, required: bool = False) -> str | None:
        if name == "netplan" and not self.netplan:
            return None
        return shutil.which(name)

    def run(self, argv: list[str], check: bool = True, data: Any = None, record: bool = False):
        done = run(argv)
        self.commands.append(list(argv))
        return done.returncode, done.stdout, done.stderr


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("network and mount namespaces need root")


@contextmanager
def netns(tag: str) -> Iterator[str]:
    """A network namespace of our own, deleted on the way out (also on failure)."""
    need_root()
    ip = tool("ip")
    name = f"dpi-net-{tag}-{os.getpid()}"
    done = run([ip, "netns", "add", name])
    if done.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {done.stderr.strip()}")
    try:
        yield name
    finally:
        run([ip, "netns", "del", name])


def ip(ns: str, *args: str) -> str:
    return run([tool("ip"), "-n", ns, *args], check=True).stdout


def veth(ns: str, name: str, peer: str, kernel_name: str | None = None) -> None:
    """A veth pair, the peer up; with ``kernel_name`` the device is created under that name and
    renamed to ``name`` (so that, as after udev's renaming at boot, name_assign_type is 4)."""
    ip(ns, "link", "add", kernel_name or name, "type", "veth", "peer", "name", peer)
    if kernel_name:
        ip(ns, "link", "set", kernel_name, "name", name)
    ip(ns, "link", "set", peer, "up")


def in_ns(ns: str, script: str, *args: str, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    """``sh -ec script`` inside ``ns`` and a private mount namespace of its own."""
    return run([tool("ip"), "netns", "exec", ns, tool("unshare"), "--mount", "--propagation", "private",
                "sh", "-ec", script, "sh", *args], timeout=timeout)


def in_mounts(script: str, *args: str, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    """``sh -ec script`` in a private mount namespace of its own (no network namespace needed)."""
    need_root()
    return run([tool("unshare"), "--mount", "--propagation", "private", "sh", "-ec", script, "sh", *args],
               timeout=timeout)


# the private mounts: our /etc/systemd/network and /run/systemd/network, an empty /run
MOUNTS = """
etc="$1"; runnet="$2"; shift 2
mount --bind "$etc" /etc/systemd/network
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/systemd/network
if [ -n "$runnet" ]; then mount --bind "$runnet" /run/systemd/network; fi
"""


def udev_link(ns: str, ifname: str, etc: Path, runnet: Path | None = None) -> tuple[dict[str, str], dict, str]:
    """``udevadm test-builtin net_setup_link`` on ``ifname``: (its properties, the link after, log)."""
    script = MOUNTS + 'udevadm test-builtin net_setup_link "/sys/class/net/$1"\n'
    done = in_ns(ns, script, str(etc), str(runnet or ""), ifname)
    assert done.returncode == 0, done.stdout + done.stderr
    props = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    [link] = json.loads(ip(ns, "-j", "-d", "link", "show", "dev", ifname))
    return props, link, done.stderr


def networkd(ns: str, etc: Path, runnet: Path | None = None,
             seconds: float = 4.0) -> tuple[list[dict], list[dict], str]:
    """systemd-networkd for ``seconds`` in ``ns``: (``ip -j addr``, ``ip -j route`` of the
    namespace, networkd's log)."""
    tool(NETWORKD)
    script = MOUNTS + f"""mount -o remount,bind,ro /sys
SYSTEMD_LOG_LEVEL=debug SYSTEMD_LOG_TARGET=console {NETWORKD} >/run/networkd.log 2>&1 &
pid=$!
sleep {seconds}
ip -j addr show
echo '---routes---'
ip -j route show table main
kill "$pid"
wait "$pid" || true
echo '---log---'
cat /run/networkd.log
"""
    done = in_ns(ns, script, str(etc), str(runnet or ""), timeout=int(seconds) + 30)
    assert done.returncode == 0, done.stdout + done.stderr
    addrs, rest = done.stdout.split("---routes---", 1)
    routes, log = rest.split("---log---", 1)
    return json.loads(addrs), json.loads(routes), log


def addresses(addr: list[dict], ifname: str) -> tuple[int, list[tuple[str, int]]]:
    """(MTU, [(address, prefix)] of global scope) of ``ifname`` in ``ip -j addr`` output."""
    [entry] = [e for e in addr if e["ifname"] == ifname]
    return entry["mtu"], sorted((a["local"], a["prefixlen"]) for a in entry.get("addr_info", [])
                                if a.get("scope") == "global")


def netns_facts(ns: str, root: Path) -> dict[str, dict[str, Any]]:
    """``_iplink.device_facts`` of every device in ``ns``: its real ``ip -j -d link`` table and
    its sysfs attributes (name_assign_type, uevent) copied below ``root``."""
    table = parse_link_json(ip(ns, "-j", "-d", "link", "show"))
    for name in table:
        done = in_ns(ns, 'cat "/sys/class/net/$1/name_assign_type" 2>/dev/null || true; echo ---; '
                         'cat "/sys/class/net/$1/uevent"', name)
        assign, uevent = done.stdout.split("---\n", 1)
        base = root / "sys" / "class" / "net" / name
        base.mkdir(parents=True, exist_ok=True)
        (base / "uevent").write_text(uevent)
        if assign.strip():
            (base / "name_assign_type").write_text(assign)
    host = HostRoot(str(root))
    return {name: device_facts(host, table, name) for name in table}


def routes_of(routes: list[dict], ifname: str) -> list[tuple[str, str | None]]:
    return sorted((r["dst"], r.get("gateway")) for r in routes if r.get("dev") == ifname)


def sections(text: str) -> dict[str, list[tuple[str, str]]]:
    return parse_unit(text)


def system_links(root: Path) -> None:
    """The distribution's .link files (99-default.link ...) below ``root``, as udev reads them."""
    for directory in ("/usr/lib/systemd/network", "/lib/systemd/network"):
        for path in sorted(Path(directory).glob("*.link")) if os.path.isdir(directory) else ():
            dest = root / directory.lstrip("/") / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                shutil.copyfile(path, dest)
