"""The lab: build, inspect and tear down simulated nodes (standard library only)."""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from . import boot, impair, nvconfig
from .spec import lab_spec
from .spec import render as render_spec

# Lab addresses live only inside lab namespaces. 198.18.0.0/15 is the benchmarking range
# (RFC 2544): never routed on the internet and rarely used by hosts, but `up` still checks.
LAB_RANGE = ipaddress.ip_network("198.18.0.0/15")
STATE_ROOT = "/var/tmp/datapath-lab"  # disk: state, keys, sparse NVMe images, logs
RUN_ROOT = "/run/datapath-lab"  # a tmpfs per lab: overlay upper dirs of the nodes
# Interface names of each fabric inside a node, like real NICs (onboard, then PCIe ports).
NIC_NAMES = ["eno1", "ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0", "ens5f0np0"]
DEFAULT_FABRICS = (("mgmt", 1500), ("rdma", 9000))
# Rails (`up --rails N`): every fabric but the management one gets N NICs per node, named like
# the ports of N PCIe NICs (ens1f0np0, ens2f0np0, ...), each with its own switch port; shared-subnet:
# all in the fabric's subnet 198.18.I.0/24 on one bridge, node K's rail R at .(10 + K + R x nodes);
# per-rail-subnet: rail R in 198.18.(I + 8 R).0/24 on a bridge of its own (a leaf per rail), at .(10 + K).
MAX_RAILS = 8
ADDRESSING = ("shared-subnet", "per-rail-subnet")
# The optional source server (`up --server NAME:FABRIC`): its own namespace on one fabric at
# this host address of the fabric's subnet, interface name inside it, default HTTP port.
SERVER_HOST = 250
SERVER_IFNAME = "eth0"
SERVER_PORT = 8080

# Global kernel state that roles and tests may change: recorded by the first lab `up` on this
# machine, restored by the last lab `down` (a machine-wide registry, counted per lab).
GLOBALS_REGISTRY = os.path.join(RUN_ROOT, ".globals.json")
GLOBALS_LOCK = os.path.join(RUN_ROOT, ".globals.lock")
GLOBAL_SYSCTL_DIRS = ("vm",)
GLOBAL_SYSCTL_KEYS = (
    "fs/aio-max-nr", "fs/file-max", "fs/nr_open", "fs/pipe-max-size",
    "fs/inotify/max_user_watches", "fs/inotify/max_user_instances", "fs/inotify/max_queued_events",
    "kernel/numa_balancing", "kernel/pid_max", "kernel/threads-max", "kernel/shmmax",
    "kernel/shmall", "kernel/shmmni", "kernel/msgmax", "kernel/msgmnb", "kernel/msgmni",
    "kernel/sem", "kernel/sched_autogroup_enabled", "kernel/perf_event_paranoid",
)
# Writable vm.* files that are triggers, not settings: never written back.
SYSCTL_TRIGGERS = {"vm/drop_caches", "vm/compact_memory", "vm/stat_refresh"}
THP_FILES = ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/mm/transparent_hugepage/defrag")

NETNS_DEFAULT_MTU = 1500  # what the kernel gives a new veth: a NIC's MTU before the node's boot sets it
REQUIRED_TOOLS = ("ip", "nsenter", "unshare", "losetup", "ssh-keygen", "mount", "umount")
SSHD = "/usr/sbin/sshd"

HOLDER_SCRIPT = r"""
set -eu
d=$1; node=$2
m=$d/merged
mount -t overlay overlay -o "lowerdir=/,upperdir=$d/upper,workdir=$d/work" "$m"
mount -t proc proc "$m/proc"
mount -t sysfs sysfs "$m/sys"
mount --rbind /dev "$m/dev"
mount -t tmpfs -o mode=0755,size=256m tmpfs "$m/run"
mount -t tmpfs -o mode=1777,size=1g tmpfs "$m/tmp"
# The checkout the lab was started from ($3), read-only at the same path when the node's view hides
# it (a clone below /tmp or /run, or on another mount): tests run its .venv and playbooks in nodes.
share=${3:-}
if [ -n "$share" ] && [ -d "$share" ] && [ ! -e "$m$share/galaxy.yml" ]; then
  mkdir -p "$m$share" && mount --rbind "$share" "$m$share" && mount -o remount,bind,ro "$m$share" || true
fi
mkdir -p "$m/run/sshd" "$m/run/lock"
chmod 0755 "$m/run/sshd"
hostname "$node"
: > "$d/ready"
exec chroot "$m" /bin/sleep infinity
"""


def _checkout() -> str:
    """The collection checkout this package runs from (editable install), or "" when installed elsewhere."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return root if os.path.isfile(os.path.join(root, "galaxy.yml")) else ""


class LabError(Exception):
    """A problem the user can act on; the CLI prints it without a traceback."""


@dataclass
class Fabric:
    name: str
    mtu: int
    index: int
    rails: int = 1
    addressing: str = "shared-subnet"
    first_nic: int = 0  # the PCIe NIC number of rail0 (ensKf0np0); 0: a fabric of one NIC named from NIC_NAMES
    nodes: int = 1

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return self.rail_subnet(0)

    def rail_subnet(self, rail: int) -> ipaddress.IPv4Network:
        step = 8 * rail if self.addressing == "per-rail-subnet" else 0
        return ipaddress.IPv4Network(f"198.18.{self.index + step}.0/24")

    @property
    def ifname(self) -> str:
        return self.rail_ifname(0)

    def rail_ifname(self, rail: int) -> str:
        if self.first_nic == 0:
            return NIC_NAMES[self.index]
        return f"ens{self.first_nic + rail}f0np0"

    def address(self, node_index: int, rail: int = 0) -> str:
        if self.addressing == "per-rail-subnet":
            return str(self.rail_subnet(rail).network_address + 10 + node_index)
        return str(self.subnet.network_address + 10 + node_index + rail * self.nodes)

    def bridge(self, rail: int) -> str:
        return f"br{rail}" if self.addressing == "per-rail-subnet" else "br0"


@dataclass
class LabConfig:
    name: str = "dp"
    nodes: int = 4
    fabrics: list[tuple[str, int]] = field(default_factory=lambda: list(DEFAULT_FABRICS))
    nvme_size: str = "2G"
    inventory_dir: str | None = None  # default: <repo>/inventories/lab for the default lab
    server: tuple[str, str] | None = None  # (server name, fabric name): a source-server namespace
    network: str = "none"  # the nodes' network backend: none (the lab provisions), networkd, netplan
    # each node's NVMe reads and writes its image with direct I/O (losetup --direct-io=on): the
    # node's flushes wait for its own writes only, not for the host's write-out of a second,
    # page-cached copy of the image (docs/lab.md); off: the image goes through the host's page cache
    nvme_direct_io: bool = False
    # NICs per node on every fabric but the management one, and how they are addressed (docs/lab.md)
    rails: int = 1
    addressing: str = "shared-subnet"
    # transmit and receive queues of each node NIC (a veth with several takes ethtool -L rx N tx N, and has
    # rps_cpus/xps_cpus per queue): what nic_affinity's lab test sets and re-applies
    queues: int = 1

    def validate(self) -> None:
        if not self.name.isalnum() or len(self.name) > 6:
            raise LabError(f"lab name {self.name!r}: use up to 6 letters or digits")
        if not 1 <= self.nodes <= 64:
            raise LabError(f"--nodes {self.nodes}: choose 1 to 64")
        if not 1 <= len(self.fabrics) <= len(NIC_NAMES):
            raise LabError(f"choose 1 to {len(NIC_NAMES)} fabrics")
        seen = set()
        for name, mtu in self.fabrics:
            if not name.isalnum() or len(name) > 8:
                raise LabError(f"fabric name {name!r}: use up to 8 letters or digits")
            if name in seen:
                raise LabError(f"fabric {name!r} given twice")
            if name == impair.NVME:
                raise LabError(f"fabric name {name!r} is reserved (`impair NODE nvme` names the node's NVMe)")
            seen.add(name)
            if not 68 <= mtu <= 9216:
                raise LabError(f"fabric {name}: MTU {mtu} outside 68..9216")
        parse_size(self.nvme_size)
        if not 1 <= self.rails <= MAX_RAILS:
            raise LabError(f"--rails {self.rails}: choose 1 to {MAX_RAILS}")
        if self.addressing not in ADDRESSING:
            raise LabError(f"--addressing {self.addressing!r}: choose {' or '.join(ADDRESSING)}")
        if self.addressing == "shared-subnet" and 10 + self.nodes * self.rails >= SERVER_HOST:
            raise LabError(f"{self.nodes} nodes x {self.rails} rails do not fit one /24 (at most "
                           f"{SERVER_HOST - 11} addresses): use fewer, or --addressing per-rail-subnet")
        if 1 + (len(self.fabrics) - 1) * self.rails > 32:
            raise LabError("too many NICs per node (at most 32): fewer fabrics or rails")
        if not 1 <= self.queues <= 16:
            raise LabError(f"--queues {self.queues}: choose 1 to 16")
        if self.network not in boot.NETWORK_MODES:
            raise LabError(f"--network {self.network!r}: choose one of {', '.join(boot.NETWORK_MODES)}")
        if self.network == "netplan" and not shutil.which("netplan"):
            raise LabError("--network netplan: netplan is not installed (scripts/bootstrap.sh installs netplan.io)")
        if self.network != "none" and not os.access(boot.NETWORKD, os.X_OK):
            raise LabError(f"--network {self.network}: {boot.NETWORKD} is missing (apt install systemd)")
        if self.server is not None:
            name, fabric = self.server
            if not name.isalnum() or len(name) > 8 or name.startswith(("node", "sw")):
                raise LabError(f"server name {name!r}: use up to 8 letters or digits, not starting "
                               "with 'node' or 'sw' (those name the nodes and switches)")
            if fabric not in seen:
                raise LabError(f"server fabric {fabric!r}: no such fabric; fabrics: {', '.join(sorted(seen))}")

    def fabric_objs(self) -> list[Fabric]:
        if self.rails == 1 and self.addressing == "shared-subnet":
            return [Fabric(n, m, i, nodes=self.nodes) for i, (n, m) in enumerate(self.fabrics)]
        out = []
        for i, (n, m) in enumerate(self.fabrics):
            rails = 1 if i == 0 else self.rails
            out.append(Fabric(n, m, i, rails=rails, addressing="shared-subnet" if i == 0 else self.addressing,
                              first_nic=0 if i == 0 else 1 + (i - 1) * self.rails, nodes=self.nodes))
        return out

    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]


def parse_size(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().rstrip("B").rstrip("I")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        value = int(num) * units[unit]
    except (ValueError, KeyError):
        raise LabError(f"size {text!r}: use a number with K, M, G or T (e.g. 2G)") from None
    if not (64 << 20) <= value <= (1 << 40):
        raise LabError(f"size {text!r}: choose between 64M and 1T (the file is sparse)")
    return value


def run(argv: list[str], check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, input=input, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(argv)} failed (rc={proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def repo_root() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.dirname(here))


def proc_starttime(pid: int) -> str | None:
    """Start time of a process (clock ticks since boot): guards against PID reuse."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # a zombie or dead process holds no namespace any more
        return None
    return fields[19]


class Lab:
    def __init__(self, name: str = "dp") -> None:
        self.name = name
        self.state_dir = os.path.join(STATE_ROOT, name)
        self.run_dir = os.path.join(RUN_ROOT, name)
        self.state_file = os.path.join(self.state_dir, "state.json")
        self.key = os.path.join(self.state_dir, "id_ed25519")

    # ---------------------------------------------------------------- names
    def ns(self, node: str) -> str:
        return f"{self.name}-{node}"

    def sw(self, fabric: str) -> str:
        return f"{self.name}-sw-{fabric}"

    @staticmethod
    def port(node: str, rail: int = 0) -> str:
        return f"p-{node}" + (f"r{rail}" if rail else "")

    def server_info(self, state: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The source server of the lab (namespace, fabric, address, serving process) or None."""
        state = state if state is not None else self.load_state()
        server: dict[str, Any] | None = (state or {}).get("server")
        return server

    def serve_pid(self, state: dict[str, Any] | None = None) -> int | None:
        """PID of the running HTTP source server (`serve`), checked against its start time."""
        server = self.server_info(state)
        serving = (server or {}).get("serving")
        if not serving:
            return None
        pid = int(serving["pid"])
        return pid if proc_starttime(pid) == serving.get("start") else None

    # ---------------------------------------------------------------- state
    def load_state(self) -> dict[str, Any] | None:
        try:
            with open(self.state_file) as fh:
                state: dict[str, Any] = json.load(fh)
                return state
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise LabError(f"lab state {self.state_file} unreadable ({exc}); run `datapath-lab down`") from None

    def save_state(self, state: dict[str, Any]) -> None:
        os.makedirs(self.state_dir, exist_ok=True)
        tmp = self.state_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(state, fh, indent=2, sort_keys=True)
        os.replace(tmp, self.state_file)

    def namespaces(self) -> list[str]:
        out = run(["ip", "netns", "list"]).stdout
        names = [line.split()[0] for line in out.splitlines() if line.strip()]
        return sorted(n for n in names if n.startswith(self.name + "-"))

    def loop_devices(self) -> list[str]:
        """Loop devices whose backing file lies in this lab's state directory."""
        out = run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], check=False).stdout
        found = []
        for line in out.splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[1].strip().startswith(self.state_dir + "/"):
                found.append(parts[0])
        return sorted(found)

    def holder_pid(self, node: str, state: dict[str, Any] | None = None) -> int | None:
        state = state if state is not None else self.load_state()
        if not state or node not in state.get("nodes", {}):
            return None
        info = state["nodes"][node]
        pid = int(info["holder_pid"])
        if proc_starttime(pid) != info.get("holder_start"):
            return None
        return pid

    # ---------------------------------------------------------------- checks
    def preflight(self) -> None:
        if os.geteuid() != 0:
            raise LabError("the lab needs root (network namespaces, mounts, loop devices)")
        missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
        if not os.path.exists(SSHD):
            missing.append(SSHD)
        if missing:
            raise LabError(f"missing tools: {', '.join(missing)}; run `make bootstrap` (scripts/bootstrap.sh)")
        self.check_host_overlap()

    @staticmethod
    def check_host_overlap() -> None:
        """Refuse if the host's own network uses any part of the lab range (read-only check)."""
        clashes = []
        for entry in json.loads(run(["ip", "-j", "addr", "show"]).stdout or "[]"):
            for addr in entry.get("addr_info", []):
                if addr.get("family") != "inet":
                    continue
                net = ipaddress.ip_network(f"{addr['local']}/{addr.get('prefixlen', 32)}", strict=False)
                if net.overlaps(LAB_RANGE):
                    clashes.append(f"address {addr['local']}/{addr.get('prefixlen')} on {entry.get('ifname')}")
        for route in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"):
            dst = route.get("dst", "")
            if dst in ("default", "") or route.get("type") in ("broadcast", "local"):
                continue
            try:
                net = ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False)
            except ValueError:
                continue
            if net.overlaps(LAB_RANGE):
                clashes.append(f"route {dst}")
        if clashes:
            raise LabError(
                f"the host network already uses {LAB_RANGE} ({'; '.join(clashes)}); the lab will not start "
                "because its addresses must never be reachable from the host"
            )

    def health(self, state: dict[str, Any]) -> list[str]:
        problems = []
        have = set(self.namespaces())
        for node in state["nodes"]:
            if self.ns(node) not in have:
                problems.append(f"{node}: namespace {self.ns(node)} missing")
            if self.holder_pid(node, state) is None:
                problems.append(f"{node}: holder process gone")
            loop = state["nodes"][node]["nvme"]
            if loop not in self.loop_devices():
                problems.append(f"{node}: loop device {loop} detached")
        for fabric in state["fabrics"]:
            if self.sw(fabric["name"]) not in have:
                problems.append(f"fabric {fabric['name']}: switch namespace missing")
        server = self.server_info(state)
        if server:
            if server["ns"] not in have:
                problems.append(f"server {server['name']}: namespace {server['ns']} missing")
            if server.get("serving") and self.serve_pid(state) is None:
                problems.append(f"server {server['name']}: HTTP server (port {server['serving']['port']}) gone")
        problems.extend(impair.problems(state))
        return problems

    # ---------------------------------------------------------------- up
    def up(self, config: LabConfig, log: Any = print) -> dict[str, Any]:
        config.validate()
        self.preflight()
        started = time.monotonic()
        state = self.load_state()
        if state is not None:
            problems = self.health(state)
            same = state["config"] == _config_dict(config)
            if not problems and same:
                log(f"lab {self.name} is already up with {len(state['nodes'])} nodes; inventory refreshed")
                self.write_inventory(state, config.inventory_dir)
                self.start_agent(state)
                return state
            why = "; ".join(problems) if problems else "a different configuration was requested"
            log(f"lab {self.name}: replacing the existing lab ({why})")
            self.down(log=lambda *_: None)
        elif (self.namespaces() or self.loop_devices() or os.path.ismount(self.run_dir)
              or impair.cgroup_leftovers(self.name)):
            log(f"lab {self.name}: cleaning up leftovers of an earlier run")
            self.down(log=lambda *_: None)

        os.makedirs(self.state_dir, exist_ok=True)
        state = {
            "name": self.name,
            "config": _config_dict(config),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "global_snapshot": acquire_globals(self.name),
            "fabrics": [_fabric_record(f) for f in config.fabric_objs()],
            "nodes": {},
        }
        # Save early: a crash from here on leaves enough for `down` to restore and clean.
        self.save_state(state)
        try:
            self._build(config, state)
        except BaseException:
            self.down(log=lambda *_: None)
            raise
        self.save_state(state)
        self.write_inventory(state, config.inventory_dir)
        state["up_seconds"] = round(time.monotonic() - started, 2)
        self.save_state(state)
        self.start_agent(state)
        log(f"lab {self.name}: {config.nodes} nodes on {len(config.fabrics)} fabrics up in {state['up_seconds']} s")
        return state

    def _build(self, config: LabConfig, state: dict[str, Any]) -> None:
        os.makedirs(self.run_dir, exist_ok=True)
        if not os.path.ismount(self.run_dir):
            # Overlay upper dirs must not sit inside the lower layer (the host root).
            run(["mount", "-t", "tmpfs", "-o", "mode=0700,size=4g", f"datapath-lab-{self.name}", self.run_dir])
        if not os.path.exists(self.key):
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"datapath-lab-{self.name}", "-f", self.key])
        with open(self.key + ".pub") as fh:
            pubkey = fh.read()

        fabrics = config.fabric_objs()
        for fabric in fabrics:
            sw = self.sw(fabric.name)
            run(["ip", "netns", "add", sw])
            run(["ip", "-n", sw, "link", "set", "lo", "up"])
            for bridge in sorted({fabric.bridge(r) for r in range(fabric.rails)}):
                run(["ip", "-n", sw, "link", "add", bridge, "type", "bridge"])
                run(["ip", "-n", sw, "link", "set", bridge, "mtu", str(fabric.mtu), "up"])

        names = config.node_names()
        hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
        for idx, node in enumerate(names, start=1):
            hosts += "".join(f"{f.address(idx, r)} {node}-{f.name}" + (f"-r{r}" if r else "")
                             + (f" {node}" if f.index == 0 else "") + "\n"
                             for f in fabrics for r in range(f.rails))
        if config.server:
            fabric = next(f for f in fabrics if f.name == config.server[1])
            hosts += f"{fabric.subnet.network_address + SERVER_HOST} {config.server[0]}\n"

        size = parse_size(config.nvme_size)
        for idx, node in enumerate(names, start=1):
            ns = self.ns(node)
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            addresses = {}
            rails: dict[str, list[dict[str, Any]]] = {}
            for fabric in fabrics:
                sw = self.sw(fabric.name)
                for rail in range(fabric.rails):
                    ifname, port = fabric.rail_ifname(rail), self.port(node, rail)
                    # Both ends are created directly inside their namespaces: no interface ever
                    # appears in the host's namespace.
                    run(["ip", "link", "add", ifname, "netns", ns, *veth_queues(config.queues), "type", "veth",
                         "peer", "name", port, "netns", sw, *veth_queues(config.queues)])
                    mac = "02:dd:%02x:%02x:%02x:%02x" % (_lab_byte(self.name), fabric.index | rail << 4, idx >> 8,
                                                         idx & 0xFF)
                    addr = fabric.address(idx, rail)
                    subnet = fabric.rail_subnet(rail)
                    if config.network == "none":  # the lab provisions the node's network itself
                        run(["ip", "-n", ns, "link", "set", ifname, "address", mac, "mtu", str(fabric.mtu), "up"])
                        run(["ip", "-n", ns, "addr", "add", f"{addr}/{subnet.prefixlen}", "dev", ifname])
                    else:  # as a boot finds it: the node's own backend configures it (below)
                        run(["ip", "-n", ns, "link", "set", ifname, "address", mac, "mtu", str(NETNS_DEFAULT_MTU)])
                    run(["ip", "-n", sw, "link", "set", port, "mtu", str(fabric.mtu), "master", fabric.bridge(rail),
                         "up"])
                    nic = {"ifname": ifname, "address": addr, "mac": mac, "prefixlen": subnet.prefixlen}
                    rails.setdefault(fabric.name, []).append(
                        dict(nic, rail=rail, port=port, bridge=fabric.bridge(rail), subnet=str(subnet)))
                    if rail == 0:
                        addresses[fabric.name] = nic
            image = os.path.join(self.state_dir, f"nvme-{node}.img")
            with open(image, "wb") as fh:
                fh.truncate(size)
            loop = run(["losetup", "-f", "-P", "--show"]
                       + (["--direct-io=on"] if config.nvme_direct_io else []) + [image]).stdout.strip()
            # A reused loop device can still serve the previous image's pages from its block-device
            # cache (seen: nvme_layout's data-loss guard reading another lab's filesystem): drop them.
            run(["blockdev", "--flushbufs", loop], check=False)
            state["nodes"][node] = {"ns": ns, "index": idx, "nvme": loop, "nvme_image": image,
                                    "nvme_bytes": size, "nvme_direct_io": loop_direct_io(loop),
                                    "interfaces": addresses, "rails": rails, "holder_pid": 0,
                                    "holder_start": None, "cgroup": None, "network": config.network,
                                    "share": _checkout() or None}
            self.save_state(state)
            # The node's blkio cgroup: its holder and everything that enters it (ssh, exec) join it,
            # so `impair NODE nvme` throttles exactly this node's I/O.
            state["nodes"][node]["cgroup"] = impair.make_node_cgroup(self.name, node)
            self.save_state(state)
            self._prepare_upper(node, pubkey, hosts, config.network,
                                {f"{f}/{nic['rail']}": nic for f, nics in rails.items() for nic in nics})
            pid = self._start_holder(node, state["nodes"][node]["cgroup"])
            state["nodes"][node]["holder_pid"] = pid
            state["nodes"][node]["holder_start"] = proc_starttime(pid)
            self.save_state(state)

        if config.server:
            self._build_server(config.server[0], next(f for f in fabrics if f.name == config.server[1]), state)

        deadline = time.monotonic() + 20
        for node in names:
            ready = os.path.join(self.run_dir, "nodes", node, "ready")
            while not os.path.exists(ready):
                if self.holder_pid(node, state) is None:
                    raise LabError(f"{node}: holder exited during setup; see {self._holder_log(node)}")
                if time.monotonic() > deadline:
                    raise LabError(f"{node}: holder not ready after 20 s; see {self._holder_log(node)}")
                time.sleep(0.02)
        for node in names:
            boot_id = str(uuid.uuid4())
            self.bind_boot_id(node, boot_id, state)
            state["nodes"][node].update(boots=1, boot_id=boot_id, booted_at=time.time())
            if config.network != "none":
                backend = boot.start_network(self, node, state)
                if backend["rc"]:
                    raise LabError(f"{node}: its network backend did not bring the NICs up ({backend['text']}); "
                                   "see /run/datapath-lab-networkd.log inside the node")
        self.save_state(state)

    def _build_server(self, name: str, fabric: Fabric, state: dict[str, Any]) -> None:
        """A namespace with one NIC on ``fabric``'s switch, wired exactly like a node's NIC."""
        ns, sw = self.ns(name), self.sw(fabric.name)
        address = str(fabric.subnet.network_address + SERVER_HOST)
        mac = "02:dd:%02x:%02x:ff:%02x" % (_lab_byte(self.name), fabric.index, SERVER_HOST)
        state["server"] = {"name": name, "ns": ns, "fabric": fabric.name, "ifname": SERVER_IFNAME,
                           "address": address, "prefixlen": fabric.subnet.prefixlen, "mac": mac,
                           "mtu": fabric.mtu, "serving": None}
        self.save_state(state)
        run(["ip", "netns", "add", ns])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        run(["ip", "link", "add", SERVER_IFNAME, "netns", ns, "type", "veth",
             "peer", "name", self.port(name), "netns", sw])
        run(["ip", "-n", ns, "link", "set", SERVER_IFNAME, "address", mac, "mtu", str(fabric.mtu), "up"])
        run(["ip", "-n", ns, "addr", "add", f"{address}/{fabric.subnet.prefixlen}", "dev", SERVER_IFNAME])
        run(["ip", "-n", sw, "link", "set", self.port(name), "mtu", str(fabric.mtu), "master", "br0", "up"])

    def _holder_log(self, node: str) -> str:
        return os.path.join(self.state_dir, f"holder-{node}.log")

    def _write_network_config(self, upper: str, node: str, network: str, addresses: dict[str, Any]) -> None:
        """The node's own network configuration (its addresses; MTUs are the collection's to set)."""
        if network == "netplan":
            body = {"network": {"version": 2, "renderer": "networkd", "ethernets": {
                a["ifname"]: {"addresses": [f"{a['address']}/{a['prefixlen']}"], "link-local": []}
                for a in addresses.values()}}}
            os.makedirs(os.path.join(upper, "etc", "netplan"), exist_ok=True)
            _write(os.path.join(upper, "etc", "netplan", "01-datapath-lab.yaml"),
                   f"# lab node {node} (datapath-lab)\n" + json.dumps(body, indent=2) + "\n", 0o600)
            return
        for a in addresses.values():
            _write(os.path.join(upper, "etc", "systemd", "network", f"10-lab-{a['ifname']}.network"),
                   f"# lab node {node} (datapath-lab): addresses; the MTU is the collection's to set\n"
                   f"[Match]\nName={a['ifname']}\n\n[Network]\nAddress={a['address']}/{a['prefixlen']}\n"
                   "LinkLocalAddressing=no\nIPv6AcceptRA=no\nConfigureWithoutCarrier=yes\n", 0o644)

    def _prepare_upper(self, node: str, pubkey: str, hosts: str, network: str = "none",
                       addresses: dict[str, Any] | None = None) -> None:
        """Write the node's own files into its overlay upper layer before it is mounted."""
        base = os.path.join(self.run_dir, "nodes", node)
        upper = os.path.join(base, "upper")
        for sub in ("upper", "work", "merged"):
            os.makedirs(os.path.join(base, sub), exist_ok=True)
        os.makedirs(os.path.join(upper, "etc"), exist_ok=True)
        os.makedirs(os.path.join(upper, "root", ".ssh"), mode=0o700, exist_ok=True)
        os.chmod(os.path.join(upper, "root"), 0o700)
        os.chmod(os.path.join(upper, "root", ".ssh"), 0o700)
        _write(os.path.join(upper, "root", ".ssh", "authorized_keys"), pubkey, 0o600)
        # root's shell start-up files as on a freshly installed node, not the host's (whose
        # .bashrc may run slow tool initialisation on every SSH command).
        for name in (".bashrc", ".profile"):
            skel = os.path.join("/etc/skel", name)
            text = open(skel).read() if os.path.exists(skel) else ""
            _write(os.path.join(upper, "root", name), text, 0o644)
        _write(os.path.join(upper, "etc", "hostname"), node + "\n", 0o644)
        _write(os.path.join(upper, "etc", "hosts"), hosts, 0o644)
        _write(os.path.join(upper, "etc", "machine-id"), os.urandom(16).hex() + "\n", 0o444)
        # the node's own fstab (a fresh install's), never the host's: its boot runs `mount -a`
        _write(os.path.join(upper, "etc", "fstab"), f"# /etc/fstab of lab node {node} (datapath-lab)\n", 0o644)
        # shutdown -r / reboot inside the node ask the lab to reboot it (boot.SHIM), never the host
        for rel in boot.SHIM_PATHS:
            os.makedirs(os.path.dirname(os.path.join(upper, rel)), exist_ok=True)
            _write(os.path.join(upper, rel), boot.SHIM, 0o755)
        _no_network_config(upper)
        if network != "none":
            self._write_network_config(upper, node, network, addresses or {})

    def _start_holder(self, node: str, cgroup: str | None = None) -> int:
        base = os.path.join(self.run_dir, "nodes", node)
        with open(self._holder_log(node), "w") as log, open(os.devnull) as devnull:
            argv = ["nsenter", f"--net=/run/netns/{self.ns(node)}", "--",
                    "unshare", "--mount", "--uts", "--propagation", "private", "--",
                    "/bin/sh", "-c", HOLDER_SCRIPT, "holder", base, node, _checkout()]
            proc = subprocess.Popen(
                impair.join_argv(cgroup) + argv,
                stdin=devnull, stdout=log, stderr=log, start_new_session=True, close_fds=True,
            )
        return proc.pid

    # ---------------------------------------------------------------- down
    def down(self, log: Any = print) -> list[str]:
        """Remove everything of this lab, from any state; idempotent. Returns what it did."""
        done: list[str] = []
        state = self.load_state()
        # 0. impairment relays and the HTTP source server, by their recorded PIDs (also found
        # below by namespace).
        done.extend(impair.stop_relays(state))
        serve = self.serve_pid(state) if state else None
        if serve:
            _kill(serve)
            _wait_gone([serve])
            done.append(f"stopped the source server (pid {serve})")
        # 0b. the reboot agent, by its recorded PID.
        agent = self.agent_pid(state)
        if agent:
            _kill(agent)
            _wait_gone([agent])
            done.append(f"stopped the reboot agent (pid {agent})")
        # 1. every process inside the lab's namespaces (holders, sshd -i sessions, modules).
        for ns in self.namespaces():
            pids = run(["ip", "netns", "pids", ns], check=False).stdout.split()
            for text in pids:
                _kill(int(text))
            if pids:
                done.append(f"stopped {len(pids)} process(es) in {ns}")
        if state:
            for node in state.get("nodes", {}):
                holder = self.holder_pid(node, state)
                if holder:
                    _kill(holder)
        _wait_gone([int(p) for ns in self.namespaces()
                    for p in run(["ip", "netns", "pids", ns], check=False).stdout.split()])
        # 2. namespaces (their veths and bridges go with them).
        for ns in self.namespaces():
            run(["ip", "netns", "delete", ns], check=False)
            done.append(f"deleted namespace {ns}")
        # 3. loop devices backed by this lab's images.
        for loop in self.loop_devices():
            run(["blockdev", "--flushbufs", loop], check=False)
            run(["losetup", "-d", loop], check=False)
            done.append(f"detached {loop}")
        # 3b. the nodes' blkio cgroups (their throttles go with them), also of a lab without state.
        done.extend(impair.remove_cgroups(self.name))
        # 4. the overlay tmpfs.
        if os.path.ismount(self.run_dir):
            if run(["umount", self.run_dir], check=False).returncode != 0:
                run(["umount", "-l", self.run_dir], check=False)
            done.append(f"unmounted {self.run_dir}")
        if os.path.isdir(self.run_dir) and not os.path.ismount(self.run_dir):
            shutil.rmtree(self.run_dir, ignore_errors=True)
        # 5. global kernel state back to what the first lab up found, when this is the last lab.
        restored = release_globals(self.name, state.get("global_snapshot") if state else None)
        done.extend(f"restored {k}" for k in restored)
        # 6. files.
        if os.path.isdir(self.state_dir):
            shutil.rmtree(self.state_dir, ignore_errors=True)
            done.append(f"removed {self.state_dir}")
        inv = state.get("inventory_dir") if state else None
        if inv and os.path.isfile(os.path.join(inv, ".datapath-lab")):
            shutil.rmtree(inv, ignore_errors=True)
            done.append(f"removed inventory {inv}")
        for line in done:
            log(line)
        if not done:
            log(f"lab {self.name}: nothing to remove")
        return done

    # ---------------------------------------------------------------- use
    def require_state(self) -> dict[str, Any]:
        state = self.load_state()
        if state is None:
            raise LabError(f"lab {self.name} is not up; run `datapath-lab up` (make lab-up)")
        return state

    def nsenter_argv(self, node: str) -> list[str]:
        state = self.require_state()
        if node not in state["nodes"]:
            raise LabError(f"no node {node!r} in lab {self.name}; nodes: {', '.join(state['nodes'])}")
        pid = self.holder_pid(node, state)
        if pid is None:
            raise LabError(f"{node}: holder process is gone; run `datapath-lab up` to recover")
        return impair.join_argv(state["nodes"][node].get("cgroup")) + [
            "nsenter", "-t", str(pid), "-m", "-u", "-n", "-r", "-w"]

    def exec(self, node: str, argv: list[str]) -> int:
        return subprocess.call(self.nsenter_argv(node) + argv)

    def run_in(self, node: str, argv: list[str], check: bool = True,
               input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command inside a node and capture its output (for tests and tools)."""
        return run(self.nsenter_argv(node) + argv, check=check, input=input)

    def run_in_switch(self, fabric: str, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(["ip", "netns", "exec", self.sw(fabric)] + argv, check=check)

    def serve(self, directory: str, port: int = SERVER_PORT, timeout: float = 10.0) -> dict[str, Any]:
        """Start the HTTP source server (datapath_lab.httpsrc) in the server namespace, in the
        background, serving ``directory``; a running one is stopped first. Returns its record."""
        state = self.require_state()
        server = self.server_info(state)
        if not server:
            raise LabError(f"lab {self.name} has no source server; bring it up with `up --server NAME:FABRIC`")
        if server["ns"] not in self.namespaces():
            raise LabError(f"server namespace {server['ns']} is missing; run `datapath-lab up` to recover")
        directory = os.path.abspath(directory)
        if not os.path.isdir(directory):
            raise LabError(f"serve: {directory} is not a directory")
        if not 1 <= port <= 65535:
            raise LabError(f"serve: port {port} outside 1..65535")
        self.stop_serve()
        state = self.require_state()
        server = state["server"]
        ready = os.path.join(self.state_dir, f"serve-{server['name']}.ready")
        log = os.path.join(self.state_dir, f"serve-{server['name']}.log")
        requests = os.path.join(self.state_dir, f"serve-{server['name']}.requests.jsonl")
        if os.path.exists(ready):
            os.unlink(ready)
        env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
        with open(log, "a") as out, open(os.devnull) as devnull:
            proc = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{server['ns']}", "--", sys.executable, "-m", "datapath_lab.httpsrc",
                 directory, "--bind", server["address"], "--port", str(port), "--log", requests, "--ready", ready],
                stdin=devnull, stdout=out, stderr=out, start_new_session=True, close_fds=True, cwd="/", env=env,
            )
        server["serving"] = {"pid": proc.pid, "start": proc_starttime(proc.pid), "port": port,
                             "directory": directory, "url": f"http://{server['address']}:{port}",
                             "log": log, "requests": requests}
        self.save_state(state)
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            if proc.poll() is not None:
                server["serving"] = None
                self.save_state(state)
                raise LabError(f"the source server exited (rc={proc.returncode}); see {log}")
            if time.monotonic() > deadline:
                self.stop_serve()
                raise LabError(f"the source server did not listen within {timeout:.0f} s; see {log}")
            time.sleep(0.02)
        serving: dict[str, Any] = server["serving"]
        return serving

    def stop_serve(self) -> bool:
        """Stop the HTTP source server by its recorded PID; True when one was running."""
        state = self.load_state()
        server = self.server_info(state)
        if not state or not server or not server.get("serving"):
            return False
        pid = self.serve_pid(state)
        if pid:
            _kill(pid)
            _wait_gone([pid])
        server["serving"] = None
        self.save_state(state)
        return pid is not None

    def source_requests(self) -> list[dict[str, Any]]:
        """The source server's request log (one dict per request, oldest first)."""
        server = self.server_info()
        path = ((server or {}).get("serving") or {}).get("requests")
        if not path or not os.path.exists(path):
            return []
        with open(path) as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def shell(self, node: str) -> int:
        return subprocess.call(self.nsenter_argv(node) + ["/bin/bash", "-l"],
                               env={**os.environ, "PS1": f"[{node}] \\w# "})

    # ---------------------------------------------------------------- reboot
    def recreate_nic(self, node: str, fabric: dict[str, Any], state: dict[str, Any], provision: bool,
                     rail: int = 0) -> None:
        """Recreate a node's NIC on ``fabric`` (its rail ``rail``) as a boot finds it: same name and MAC,
        the kernel's default MTU, no address, down; the switch port keeps its MTU. ``provision``: then
        give it the lab's address and the fabric's MTU, up (what `up` does, for a node without a backend)."""
        ns, sw, port = self.ns(node), self.sw(fabric["name"]), self.port(node, rail)
        nic = node_rails(state["nodes"][node], fabric["name"])[rail]
        shown = json.loads(run(["ip", "-n", sw, "-j", "link", "show", port]).stdout or "[]")
        port_mtu = shown[0]["mtu"] if shown else fabric["mtu"]
        queues = int(state["config"].get("queues", 1))
        run(["ip", "-n", ns, "link", "del", nic["ifname"]])
        run(["ip", "link", "add", nic["ifname"], "netns", ns, *veth_queues(queues), "type", "veth", "peer", "name",
             port, "netns", sw, *veth_queues(queues)])
        run(["ip", "-n", ns, "link", "set", nic["ifname"], "address", nic["mac"], "mtu", str(NETNS_DEFAULT_MTU)])
        run(["ip", "-n", sw, "link", "set", port, "mtu", str(port_mtu), "master", nic.get("bridge") or "br0", "up"])
        if provision:
            run(["ip", "-n", ns, "link", "set", nic["ifname"], "mtu", str(fabric["mtu"]), "up"])
            run(["ip", "-n", ns, "addr", "add", f"{nic['address']}/{nic['prefixlen']}", "dev", nic["ifname"]])

    def bind_boot_id(self, node: str, boot_id: str, state: dict[str, Any] | None = None) -> None:
        """The node's boot id: a file of the lab bound over /proc/sys/kernel/random/boot_id in the node
        (bound once; a reboot rewrites the file in place, the same inode)."""
        state = state or self.require_state()
        base = os.path.join(self.run_dir, "nodes", node)
        path = os.path.join(base, "boot_id")
        fresh = not os.path.exists(path)
        with open(path, "w") as handle:
            handle.write(boot_id + "\n")
        if fresh:
            pid = self.holder_pid(node, state)
            run(["nsenter", "-t", str(pid), "-m", "mount", "--bind", path,
                 os.path.join(base, "merged", boot.BOOT_ID.lstrip("/"))])

    def reboot(self, node: str) -> dict[str, Any]:
        try:
            return boot.reboot(self, node)
        except boot.BootError as exc:
            raise LabError(str(exc)) from None

    def agent_pid(self, state: dict[str, Any] | None = None) -> int | None:
        state = state if state is not None else self.load_state()
        agent = (state or {}).get("agent") or {}
        pid = agent.get("pid")
        if pid and proc_starttime(pid) == agent.get("start"):
            return int(pid)
        return None

    def start_agent(self, state: dict[str, Any]) -> int:
        """The lab's reboot agent (host side): reboots a node whose shutdown -r / reboot asked for it."""
        pid = self.agent_pid(state)
        if pid:
            return pid
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] + [os.environ.get("PYTHONPATH", "")]))
        with open(os.path.join(self.state_dir, "agent.log"), "a") as log, open(os.devnull) as devnull:
            proc = subprocess.Popen([sys.executable, "-m", "datapath_lab", "--name", self.name, "agent"], env=env,
                                    stdin=devnull, stdout=log, stderr=log, start_new_session=True, close_fds=True)
        state["agent"] = {"pid": proc.pid, "start": proc_starttime(proc.pid)}
        self.save_state(state)
        return proc.pid

    def agent(self, poll: float = 0.5, grace: float = 1.0) -> int:
        """The agent's loop: a node's request file (boot.REQUEST, seen through its holder's root) is
        served once due, plus ``grace`` seconds (the asking SSH session returns first). Ends with the lab."""
        seen: dict[str, float] = {}
        while True:
            state = self.load_state()
            if not state or self.agent_pid(state) != os.getpid():
                return 0
            now = time.time()
            for node in state["nodes"]:
                pid = self.holder_pid(node, state)
                request = f"/proc/{pid}/root{boot.REQUEST}" if pid else None
                if not request or not os.path.exists(request):
                    seen.pop(node, None)
                    continue
                seen.setdefault(node, now)
                try:
                    due = float(open(request).read().strip() or 0)
                except (OSError, ValueError):
                    due = 0.0
                if now < max(due, seen[node] + grace):
                    continue
                seen.pop(node, None)
                try:
                    os.unlink(request)
                    report = self.reboot(node)
                    print(f"{time.strftime('%H:%M:%S')} rebooted {node}: boot id {report['boot_id']} in "
                          f"{report['seconds']} s" + "".join(f"; PROBLEM {p}" for p in report["problems"]), flush=True)
                except (LabError, OSError, subprocess.SubprocessError) as exc:
                    print(f"{time.strftime('%H:%M:%S')} reboot of {node} failed: {exc}", flush=True)
            time.sleep(poll)

    def set_port_mtu(self, node: str, fabric: str, mtu: int, rail: int = 0) -> None:
        state = self.require_state()
        if node not in state["nodes"]:
            raise LabError(f"no node {node!r}; nodes: {', '.join(state['nodes'])}")
        if fabric not in {f["name"] for f in state["fabrics"]}:
            raise LabError(f"no fabric {fabric!r}; fabrics: {', '.join(f['name'] for f in state['fabrics'])}")
        if not 68 <= mtu <= 9216:
            raise LabError(f"MTU {mtu} outside 68..9216")
        nics = node_rails(state["nodes"][node], fabric)
        if not 0 <= rail < len(nics):
            raise LabError(f"--rail {rail}: {node} has rails 0..{len(nics) - 1} on {fabric}")
        run(["ip", "-n", self.sw(fabric), "link", "set", self.port(node, rail), "mtu", str(mtu)])

    def status(self) -> dict[str, Any]:
        state = self.load_state()
        if state is None:
            return {"name": self.name, "up": False,
                    "leftovers": self.namespaces() + self.loop_devices() + impair.cgroup_leftovers(self.name)}
        return {"name": self.name, "up": True, "problems": self.health(state), "nodes": state["nodes"],
                "impairments": impair.records(state),
                "fabrics": state["fabrics"], "server": state.get("server"), "created": state.get("created"),
                "up_seconds": state.get("up_seconds"), "inventory_dir": state.get("inventory_dir"),
                "network": state.get("config", {}).get("network", "none"), "agent_pid": self.agent_pid(state)}

    # ---------------------------------------------------------------- inventory
    def proxy_command(self, node: str, state: dict[str, Any]) -> str:
        pid = self.holder_pid(node, state)
        return impair.join_shell(state["nodes"][node].get("cgroup"),
                                 f"nsenter -t {pid} -m -u -n -r -w {SSHD} -i -o UsePAM=no "
                                 "-o PasswordAuthentication=no -o KbdInteractiveAuthentication=no")

    def inventory_data(self, state: dict[str, Any]) -> dict[str, Any]:
        """The lab's inventory as Ansible's YAML inventory shape (hosts.yml)."""
        mgmt = state["fabrics"][0]["name"]
        hosts: dict[str, Any] = {}
        for node, info in state["nodes"].items():
            ssh_args = (f'-o ProxyCommand="{self.proxy_command(node, state)}" '
                        "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")
            hosts[node] = {
                # A name, not an address: ssh never resolves it (ProxyCommand), and it keeps
                # ControlPath sockets of different labs apart.
                "ansible_host": f"{node}.{self.name}.lab",
                "ansible_user": "root",
                "ansible_ssh_private_key_file": self.key,
                "ansible_ssh_common_args": ssh_args,
                "ansible_python_interpreter": "/usr/bin/python3",
                "datapath_connection_address": info["interfaces"][mgmt]["address"],
                "datapath_lab_node": True,
                "datapath_lab_nvme": info["nvme"],
                "datapath_lab_nvme_bytes": info["nvme_bytes"],
                "datapath_lab_interfaces": info["interfaces"],
                **nvconfig.host_vars(info),
                # the node's addresses per fabric (one address, or a list in rail order): the
                # collection reads them as any inventory's host variable, never the lab's own
                "datapath_addresses": {f["name"]: _rail_addresses(info, f["name"]) for f in state["fabrics"]},
            }
        names = list(state["nodes"])
        half = (len(names) + 1) // 2
        return {
            "all": {
                # The nodes' NVMe are loop devices on one host disk, sharing two cores: each node's
                # storage is measured alone, or the peers' median says more about the scheduler.
                "vars": {"datapath_lab_name": self.name, "measure_storage_throttle": 1, **self._server_vars(state)},
                "children": {
                    "gpu_nodes": {
                        "hosts": {n: {} for n in names},
                        "children": {
                            "rack_a": {"hosts": {n: {} for n in names[:half]}},
                            "rack_b": {"hosts": {n: {} for n in names[half:]}},
                        },
                    },
                },
                "hosts": hosts,
            }
        }

    def script_inventory(self) -> dict[str, Any]:
        """Ansible's script-inventory JSON (``--list``) of the lab, its spec included in all's vars;
        an empty inventory while the lab is down (molecule's create step brings it up)."""
        state = self.load_state()
        if not state or not state.get("nodes"):
            return {"_meta": {"hostvars": {}}, "all": {"hosts": [], "children": []}}
        data = self.inventory_data(state)["all"]
        gpu = data["children"]["gpu_nodes"]
        return {
            "_meta": {"hostvars": data["hosts"]},
            "all": {"vars": dict(data["vars"], **lab_spec(state)), "children": ["gpu_nodes"]},
            "gpu_nodes": {"hosts": list(gpu["hosts"]), "children": list(gpu["children"])},
            **{rack: {"hosts": list(group["hosts"])} for rack, group in gpu["children"].items()},
        }

    def write_inventory(self, state: dict[str, Any], inventory_dir: str | None = None) -> str:
        inv = inventory_dir or state.get("inventory_dir") or os.path.join(repo_root(), "inventories", "lab")
        inv = os.path.abspath(inv)
        os.makedirs(inv, exist_ok=True)
        state["inventory_dir"] = inv
        self.save_state(state)
        inventory = self.inventory_data(state)
        # JSON is valid YAML: no YAML library needed on this side.
        _write(os.path.join(inv, "hosts.yml"),
               "# Written by datapath-lab; regenerated on every `up`. Do not edit.\n"
               + json.dumps(inventory, indent=2, sort_keys=True) + "\n", 0o644)
        _write(os.path.join(inv, ".datapath-lab"), self.name + "\n", 0o644)
        spec_dst = os.path.join(inv, "group_vars", "all", "datapath.yml")
        os.makedirs(os.path.dirname(spec_dst), exist_ok=True)
        _write(spec_dst, render_spec(state, inv), 0o644)
        return inv

    @staticmethod
    def _server_vars(state: dict[str, Any]) -> dict[str, Any]:
        server = state.get("server")
        if not server:
            return {}
        return {"datapath_lab_server": {"name": server["name"], "fabric": server["fabric"],
                                        "address": server["address"]}}


# -------------------------------------------------------------------- helpers
def _rail_addresses(info: dict[str, Any], fabric: str) -> str | list[str]:
    nics = node_rails(info, fabric)
    return nics[0]["address"] if len(nics) == 1 else [n["address"] for n in nics]


def _fabric_record(fabric: Fabric) -> dict[str, Any]:
    """A fabric in the lab's state: name, mtu, index, subnet and ifname (rail0's), and, with rails, every
    rail's subnet, interface name and bridge."""
    record = {k: v for k, v in asdict(fabric).items() if k in ("name", "mtu", "index")}
    record.update(subnet=str(fabric.subnet), ifname=fabric.ifname)
    if fabric.rails > 1 or fabric.addressing != "shared-subnet":
        record.update(rails=fabric.rails, addressing=fabric.addressing,
                      subnets=sorted({str(fabric.rail_subnet(r)) for r in range(fabric.rails)},
                                     key=lambda t: [str(fabric.rail_subnet(r)) for r in range(fabric.rails)].index(t)),
                      ifnames=[fabric.rail_ifname(r) for r in range(fabric.rails)],
                      bridges=[fabric.bridge(r) for r in range(fabric.rails)])
    return record


def node_rails(info: dict[str, Any], fabric: str) -> list[dict[str, Any]]:
    """A node's NICs on ``fabric``, rail0 first (a lab made before rails has the one of ``interfaces``)."""
    found = (info.get("rails") or {}).get(fabric)
    if found:
        return list(found)
    nic = dict(info["interfaces"][fabric])
    return [dict(nic, rail=0, port=None, bridge="br0")]


def _config_dict(config: LabConfig) -> dict[str, Any]:
    found: dict[str, Any] = {"nodes": config.nodes, "fabrics": [list(f) for f in config.fabrics],
                             "nvme_size": config.nvme_size}
    if config.server:  # only when set: labs up before servers existed keep comparing equal
        found["server"] = list(config.server)
    if config.network != "none":
        found["network"] = config.network
    if config.nvme_direct_io:  # only when set, as the server: older labs keep comparing equal
        found["nvme_direct_io"] = True
    if config.rails != 1 or config.addressing != "shared-subnet":  # the same: only when not the default
        found.update(rails=config.rails, addressing=config.addressing)
    if config.queues != 1:  # likewise
        found["queues"] = config.queues
    return found


def veth_queues(queues: int) -> list[str]:
    """``ip link add`` options for a veth end with ``queues`` transmit and receive queues (none for one)."""
    return [] if queues == 1 else ["numtxqueues", str(queues), "numrxqueues", str(queues)]


def loop_direct_io(loop: str) -> bool:
    """Whether the kernel does direct I/O to ``loop``'s backing file (it falls back to the page
    cache, without an error, where the backing file system cannot)."""
    return _read_value(f"/sys/block/{os.path.basename(loop)}/loop/dio") == "1"


def _lab_byte(name: str) -> int:
    return sum(name.encode()) & 0xFF


# A node starts like a fresh install with no network configuration of its own, whatever
# network packages the host has: these paths of the host's root are hidden in the node's
# overlay (an opaque empty directory, or a whiteout for a file); tests write what they need.
NETWORK_CONFIG_DIRS = ("etc/netplan", "etc/systemd/network", "etc/NetworkManager/system-connections",
                       "etc/network/interfaces.d")
NETWORK_CONFIG_FILES = ("etc/network/interfaces",)


def _no_network_config(upper: str) -> None:
    for rel in NETWORK_CONFIG_DIRS:
        path = os.path.join(upper, rel)
        os.makedirs(path, exist_ok=True)
        os.setxattr(path, "trusted.overlay.opaque", b"y")
    for rel in NETWORK_CONFIG_FILES:
        path = os.path.join(upper, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.lexists(path):
            os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))  # overlayfs whiteout


def _write(path: str, text: str, mode: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as exc:
        if exc.errno != errno.ESRCH:
            raise


def _wait_gone(pids: list[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.02)


def _global_files() -> list[str]:
    files = []
    for top in GLOBAL_SYSCTL_DIRS:
        base = os.path.join("/proc/sys", top)
        for entry in sorted(os.listdir(base)):
            rel = f"{top}/{entry}"
            path = os.path.join(base, entry)
            if rel in SYSCTL_TRIGGERS or not os.path.isfile(path):
                continue
            if os.stat(path).st_mode & 0o200:
                files.append(path)
    files += [os.path.join("/proc/sys", k) for k in GLOBAL_SYSCTL_KEYS]
    hp = "/sys/kernel/mm/hugepages"
    if os.path.isdir(hp):
        files += [os.path.join(hp, d, "nr_hugepages") for d in sorted(os.listdir(hp))]
    nodes = "/sys/devices/system/node"
    if os.path.isdir(nodes):
        for node in sorted(d for d in os.listdir(nodes) if d.startswith("node") and d[4:].isdigit()):
            base = os.path.join(nodes, node, "hugepages")
            if os.path.isdir(base):
                files += [os.path.join(base, d, "nr_hugepages") for d in sorted(os.listdir(base))]
    files += list(THP_FILES)
    return files


def _read_value(path: str) -> str | None:
    try:
        with open(path) as fh:
            value = fh.read().strip()
    except OSError:
        return None
    if path in THP_FILES:  # "always [madvise] never" -> "madvise"
        for word in value.split():
            if word.startswith("["):
                return word.strip("[]")
    return value


def snapshot_globals() -> dict[str, str]:
    snap = {}
    for path in _global_files():
        value = _read_value(path)
        if value is not None:
            snap[path] = value
    return snap


@contextmanager
def _globals_locked() -> Iterator[None]:
    os.makedirs(RUN_ROOT, exist_ok=True)
    fd = os.open(GLOBALS_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_registry() -> dict[str, Any]:
    try:
        with open(GLOBALS_REGISTRY) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {"snapshot": None, "labs": []}
    if not isinstance(data, dict) or not isinstance(data.get("labs"), list):
        return {"snapshot": None, "labs": []}
    return data


def _write_registry(data: dict[str, Any]) -> None:
    tmp = f"{GLOBALS_REGISTRY}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, GLOBALS_REGISTRY)


def _lab_exists(name: str) -> bool:
    """A lab counts while its state directory exists (made before `up` joins, removed by `down`
    after it leaves), so a lab that crashed keeps the record until its `down`."""
    return os.path.isdir(os.path.join(STATE_ROOT, name))


def acquire_globals(name: str) -> dict[str, str]:
    """Join the machine-wide record of the host's global kernel state. The first lab up records
    it; a lab brought up while others are up shares that record instead of recording values
    that another lab (or a test on it) may have raised. Returns the record."""
    with _globals_locked():
        data = _read_registry()
        labs = [lab for lab in data["labs"] if lab != name and _lab_exists(lab)]
        if not labs or not data.get("snapshot"):
            data["snapshot"] = snapshot_globals()
        data["labs"] = sorted(labs + [name])
        _write_registry(data)
        return dict(data["snapshot"])


def release_globals(name: str, own: dict[str, str] | None = None) -> list[str]:
    """Leave the record; the last lab down writes the recorded values back. A lab that is not
    in the record (made by an older version) restores its own snapshot when no lab is left."""
    with _globals_locked():
        data = _read_registry()
        others = [lab for lab in data["labs"] if lab != name and _lab_exists(lab)]
        if others:
            data["labs"] = others
            _write_registry(data)
            return []
        snapshot = data.get("snapshot") if name in data["labs"] else None
        snapshot = snapshot or own
        if os.path.exists(GLOBALS_REGISTRY):
            os.unlink(GLOBALS_REGISTRY)
    return restore_globals(snapshot) if snapshot else []


def restore_globals(snapshot: dict[str, str]) -> list[str]:
    """Write back every recorded value that differs now. Per-node HugePages first is not
    needed: the pool totals are restored after the per-node files (sorted: /proc < /sys)."""
    restored = []
    # Restore node-level HugePages before the global pool file so the totals end right.
    order = sorted(snapshot, key=lambda p: (0 if "/devices/system/node/" in p else 1, p))
    for path in order:
        want = snapshot[path]
        if _read_value(path) == want:
            continue
        try:
            with open(path, "w") as fh:
                fh.write(want)
        except OSError:
            continue
        if _read_value(path) == want:
            restored.append(path)
    return restored
