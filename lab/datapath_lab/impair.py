"""Bottlenecks on purpose: impairments of a node's switch port or of its NVMe (standard library only).

Network (``datapath-lab impair NODE FABRIC``), always inside the fabric's switch namespace, never in
the node and never on the host:

- ``--rate`` alone: kernel shaping. A TBF qdisc on the node's switch port (traffic to the node) and,
  for traffic from the node, an ingress qdisc on that port whose u32 filter redirects (act_mirred)
  every frame to an IFB device ``i-NODE`` in the switch namespace that carries a second TBF. (Ingress
  policing would be simpler, but this kernel has no act_police.)
- ``--delay`` or ``--loss`` (zero allowed: ``--delay 0`` puts the relay in the path unimpaired): the
  kernel has no netem, fq or act_gact, so tc cannot hold or drop frames at random. The port ``p-NODE``
  leaves the bridge; a veth pair ``q-NODE`` (in the bridge) / ``r-NODE`` joins it, and a relay process
  (:mod:`datapath_lab.relay`) forwards frames between ``p-NODE`` and ``r-NODE`` with the delay and
  loss. A rate given with them is a TBF on the relay's two output ports (``p-NODE`` toward the node,
  ``r-NODE`` toward the bridge).

Storage (``datapath-lab impair NODE nvme``): cgroup v1 blkio throttling of the node's loop device in
the node's own cgroup ``/sys/fs/cgroup/blkio/datapath-lab/LAB/NODE``, which every process of the node
joins (its holder, the SSH ProxyCommand, ``exec``/``shell``).

Impairments are recorded in the lab state (``impairments``), so ``status`` lists them from any later
``datapath-lab`` process, ``impair`` again replaces the one on that port, and ``down`` removes all.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .core import Lab

BLKIO_ROOT = "/sys/fs/cgroup/blkio"
CGROUP_PARENT = "datapath-lab"
DIRECTIONS = ("both", "to-node", "from-node")
NVME = "nvme"
TBF_LATENCY = "50ms"  # the shaper's queue: this much time at the rate, then it drops
RELAY_READY_TIMEOUT = 10.0


class ImpairError(ValueError):
    """A malformed impairment setting (the CLI turns it into a usage error)."""


# ------------------------------------------------------------------ parsing (pure)
_RATE_UNITS = {"": 1, "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_DELAY_UNITS = {"": 1e-3, "ms": 1e-3, "msec": 1e-3, "us": 1e-6, "usec": 1e-6, "s": 1.0, "sec": 1.0}
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"


def parse_rate(text: str) -> int:
    """A network rate as tc writes it, in bits per second: ``200mbit``, ``1gbit``, ``1.5gbit``,
    ``500kbit``; a bare number is bit/s. SI units (1mbit = 10^6 bit/s)."""
    t = text.strip().lower()
    if re.fullmatch(_NUMBER + r"\s*[kmgt]?bps", t):
        raise ImpairError(f"rate {text!r}: tc's 'bps' means bytes per second; write bits, e.g. 200mbit")
    m = re.fullmatch(_NUMBER + r"\s*([kmgt]?bit)?", t)
    if not m:
        raise ImpairError(f"rate {text!r}: use a number with bit, kbit, mbit or gbit (e.g. 200mbit)")
    value = int(round(float(m.group(1)) * _RATE_UNITS[m.group(2) or ""]))
    if not 8_000 <= value <= 400 * 10**9:
        raise ImpairError(f"rate {text!r}: choose between 8kbit and 400gbit")
    return value


def parse_loss(text: str) -> float:
    """A loss probability in percent: ``1%``, ``0.5%`` (a bare number is percent too, as for netem).
    Returns the ratio (0.01 for 1%). 0 is allowed: the relay without loss."""
    m = re.fullmatch(_NUMBER + r"\s*%?", text.strip())
    if not m:
        raise ImpairError(f"loss {text!r}: use a percentage, e.g. 1% or 0.5%")
    percent = float(m.group(1))
    if not 0.0 <= percent <= 100.0:
        raise ImpairError(f"loss {text!r}: choose 0% to 100%")
    return percent / 100.0


def parse_delay(text: str) -> float:
    """A one-way delay: ``5ms``, ``20ms``, ``500us``, ``1s``; a bare number is milliseconds.
    Returns seconds. 0 is allowed: the relay without delay."""
    m = re.fullmatch(_NUMBER + r"\s*([a-z]*)", text.strip().lower())
    if not m or m.group(2) not in _DELAY_UNITS:
        raise ImpairError(f"delay {text!r}: use a number with ms, us or s (e.g. 5ms)")
    value = float(m.group(1)) * _DELAY_UNITS[m.group(2)]
    if not 0.0 <= value <= 10.0:
        raise ImpairError(f"delay {text!r}: choose 0 to 10 s")
    return value


def parse_byte_rate(text: str) -> int:
    """A storage rate in bytes per second, binary units like the lab's sizes: ``20M`` (= 20 MiB/s),
    ``512K``, ``1G``, ``20MiB``, ``20MB/s``; a bare number is bytes/s."""
    t = text.strip().lower()
    t = t[:-2] if t.endswith("/s") else t
    m = re.fullmatch(_NUMBER + r"\s*([kmg]?)(?:i?b)?", t)
    if not m:
        raise ImpairError(f"byte rate {text!r}: use a number with K, M or G (binary; e.g. 20M)")
    value = int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])
    if not 4096 <= value <= (1 << 40):
        raise ImpairError(f"byte rate {text!r}: choose between 4K and 1T per second")
    return value


def parse_iops(text: str) -> int:
    """Operations per second: ``200``, ``1k`` (= 1000)."""
    m = re.fullmatch(_NUMBER + r"\s*(k?)", text.strip().lower())
    if not m:
        raise ImpairError(f"IOPS {text!r}: use a whole number, e.g. 200 or 2k")
    value = int(float(m.group(1)) * (1000 if m.group(2) else 1))
    if not 1 <= value <= 10**8:
        raise ImpairError(f"IOPS {text!r}: choose between 1 and 100000000")
    return value


def format_rate(bps: int) -> str:
    for unit, factor in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= factor:
            return f"{bps / factor:g}{unit}"
    return f"{bps}bit"


def format_delay(seconds: float) -> str:
    if seconds and seconds < 1e-3:
        return f"{seconds * 1e6:g}us"
    return f"{seconds * 1e3:g}ms"


def format_loss(ratio: float) -> str:
    return f"{ratio * 100:g}%"


def format_bytes_rate(value: int) -> str:
    for unit, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= factor:
            return f"{value / factor:g}{unit}iB/s"
    return f"{value}B/s"


def check_request(target: str, clear: bool, net: dict[str, Any], disk: dict[str, Any]) -> None:
    """The settings fit the target: network ones for a fabric, storage ones for ``nvme``, none
    with ``--clear``, at least one without it."""
    given_net = [k for k, v in net.items() if v is not None]
    given_disk = [k for k, v in disk.items() if v is not None]
    flag = {"rate": "--rate", "loss": "--loss", "delay": "--delay", "read_bps": "--read-bps",
            "read_iops": "--read-iops", "write_bps": "--write-bps", "write_iops": "--write-iops"}
    if clear:
        if given_net or given_disk:
            raise ImpairError(f"--clear takes no settings (got {', '.join(flag[k] for k in given_net + given_disk)})")
        return
    if target == NVME:
        if given_net:
            raise ImpairError(f"{', '.join(flag[k] for k in given_net)}: network settings; "
                              "nvme takes --read-bps, --read-iops, --write-bps, --write-iops")
        if not given_disk:
            raise ImpairError("impair NODE nvme: give --read-bps, --read-iops, --write-bps or --write-iops "
                              "(or --clear)")
        return
    if given_disk:
        raise ImpairError(f"{', '.join(flag[k] for k in given_disk)}: storage settings; the target must be 'nvme'")
    if not given_net:
        raise ImpairError("impair NODE FABRIC: give --rate, --loss or --delay (or --clear)")


def tbf_args(rate_bps: int, mtu: int) -> list[str]:
    """TBF parameters for a rate: a bucket of 5 ms at the rate (at least two full frames), a
    queue of TBF_LATENCY. GSO super-frames larger than the bucket are segmented by TBF."""
    burst = max(rate_bps // 8 // 200, 2 * (mtu + 64), 4096)
    return ["rate", f"{rate_bps}bit", "burst", str(burst), "latency", TBF_LATENCY]


# ------------------------------------------------------------------ cgroups
def blkio_available() -> bool:
    return os.path.exists(os.path.join(BLKIO_ROOT, "blkio.throttle.read_bps_device"))


def lab_cgroup(lab: str) -> str:
    return os.path.join(BLKIO_ROOT, CGROUP_PARENT, lab)


def node_cgroup(lab: str, node: str) -> str:
    return os.path.join(lab_cgroup(lab), node)


def make_node_cgroup(lab: str, node: str) -> str | None:
    """Create the node's blkio cgroup; None where cgroup v1 blkio throttling is not mounted."""
    if not blkio_available():
        return None
    path = node_cgroup(lab, node)
    os.makedirs(path, exist_ok=True)
    return path


def join_argv(cgroup: str | None) -> list[str]:
    """A prefix that moves the command into ``cgroup`` before it execs (so every child inherits it)."""
    if not cgroup or not os.path.isdir(cgroup):
        return []
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(cgroup, "cgroup.procs")]


def join_shell(cgroup: str | None, command: str) -> str:
    """The same as one shell line (for ssh's ProxyCommand)."""
    if not cgroup or not os.path.isdir(cgroup):
        return command
    return f"sh -c 'echo $$ > {cgroup}/cgroup.procs && exec {command}'"


def cgroup_leftovers(lab: str) -> list[str]:
    path = lab_cgroup(lab)
    return [path] if os.path.isdir(path) else []


def remove_cgroups(lab: str) -> list[str]:
    """Remove the lab's cgroups (any left-over process is moved to the root cgroup first)."""
    done: list[str] = []
    top = lab_cgroup(lab)
    if not os.path.isdir(top):
        return done
    for entry in sorted(os.listdir(top)):
        path = os.path.join(top, entry)
        if os.path.isdir(path):
            _rmdir_cgroup(path)
            done.append(f"removed cgroup {path}")
    _rmdir_cgroup(top)
    try:
        os.rmdir(os.path.dirname(top))  # the shared parent, when no other lab has one
    except OSError:
        pass
    return done


def _rmdir_cgroup(path: str) -> None:
    for attempt in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            try:
                with open(os.path.join(path, "cgroup.procs")) as fh:
                    pids = fh.read().split()
            except OSError:
                pids = []
            for pid in pids:
                try:
                    with open(os.path.join(BLKIO_ROOT, "cgroup.procs"), "w") as fh:
                        fh.write(pid)
                except OSError:
                    pass
            time.sleep(0.02 * (1 + attempt // 10))
    os.rmdir(path)


def _write_throttle(cgroup: str, key: str, majmin: str, value: int) -> None:
    with open(os.path.join(cgroup, f"blkio.throttle.{key}_device"), "w") as fh:
        fh.write(f"{majmin} {value}")


def read_throttle(cgroup: str) -> dict[str, dict[str, int]]:
    """The throttle rules of a cgroup: {key: {MAJ:MIN: value}}."""
    found: dict[str, dict[str, int]] = {}
    for key in ("read_bps", "read_iops", "write_bps", "write_iops"):
        try:
            with open(os.path.join(cgroup, f"blkio.throttle.{key}_device")) as fh:
                found[key] = {line.split()[0]: int(line.split()[1]) for line in fh if len(line.split()) == 2}
        except OSError:
            found[key] = {}
    return found


def majmin(device: str) -> str:
    rdev = os.stat(device).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


# ------------------------------------------------------------------ the lab's impairments
def key_of(node: str, target: str, rail: int = 0) -> str:
    return f"{node}/{target}" + (f"/{rail}" if rail else "")


def records(state: dict[str, Any] | None) -> list[dict[str, Any]]:
    found: dict[str, dict[str, Any]] = (state or {}).get("impairments") or {}
    return [found[k] for k in sorted(found)]


def names(node: str, rail: int = 0) -> dict[str, str]:
    """Interface names of a node's port (of its rail ``rail``) in a switch namespace."""
    tail = f"r{rail}" if rail else ""
    return {"port": f"p-{node}{tail}", "bridge_end": f"q-{node}{tail}", "relay_end": f"r-{node}{tail}",
            "ifb": f"i-{node}{tail}"}


def relay_pid(record: dict[str, Any]) -> int | None:
    from .core import proc_starttime

    relay = record.get("relay") or {}
    pid = relay.get("pid")
    if not pid:
        return None
    return int(pid) if proc_starttime(int(pid)) == relay.get("start") else None


def describe(record: dict[str, Any]) -> str:
    if record["kind"] == NVME:
        parts = []
        if record.get("read_bps"):
            parts.append(f"read {format_bytes_rate(record['read_bps'])}")
        if record.get("read_iops"):
            parts.append(f"read {record['read_iops']} IOPS")
        if record.get("write_bps"):
            parts.append(f"write {format_bytes_rate(record['write_bps'])}")
        if record.get("write_iops"):
            parts.append(f"write {record['write_iops']} IOPS")
        return (f"{record['node']} nvme {record['device']} ({record['majmin']}): {', '.join(parts)} "
                f"(blkio cgroup {record['cgroup']})")
    parts = []
    if record.get("rate_bps"):
        parts.append(f"rate {format_rate(record['rate_bps'])}")
    if record.get("delay_s") is not None:
        parts.append(f"delay {format_delay(record['delay_s'])} one way")
    if record.get("loss") is not None:
        parts.append(f"loss {format_loss(record['loss'])}")
    how = (f"relay pid {record['relay']['pid']}" if record.get("relay") else
           "tc tbf" + (" + ifb" if record.get("ifb") else ""))
    rail = f" rail {record['rail']}" if record.get("rail") else ""
    return f"{record['node']} {record['target']}{rail}: {', '.join(parts)} ({record['direction']}; {how})"


@contextmanager
def _locked(lab: Lab) -> Iterator[None]:
    os.makedirs(lab.state_dir, exist_ok=True)
    fd = os.open(os.path.join(lab.state_dir, ".impair.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _check_node(state: dict[str, Any], node: str) -> None:
    from .core import LabError

    if node not in state["nodes"]:
        raise LabError(f"no node {node!r}; nodes: {', '.join(state['nodes'])}")


def _fabric(state: dict[str, Any], name: str) -> dict[str, Any]:
    from .core import LabError

    for fabric in state["fabrics"]:
        if fabric["name"] == name:
            found: dict[str, Any] = fabric
            return found
    raise LabError(f"no fabric {name!r}; fabrics: {', '.join(f['name'] for f in state['fabrics'])} "
                   f"(or '{NVME}' for the node's NVMe)")


def _ip(sw: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    from .core import run

    return run(["ip", "-n", sw, *args], check=check)


def _tc(sw: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    from .core import run

    return run(["tc", "-n", sw, *args], check=check)


def _rail_nic(state: dict[str, Any], node: str, fabric: str, rail: int) -> dict[str, Any]:
    from .core import LabError, node_rails

    nics = node_rails(state["nodes"][node], fabric)
    if not 0 <= rail < len(nics):
        raise LabError(f"--rail {rail}: {node} has rails 0..{len(nics) - 1} on {fabric}")
    return nics[rail]


def impair_fabric(lab: Lab, node: str, fabric: str, rate: int | None = None, loss: float | None = None,
                  delay: float | None = None, direction: str = "both", rail: int = 0) -> dict[str, Any]:
    """Impair a node's port of a fabric, of its rail ``rail`` (replacing what was there); returns the record."""
    from .core import LabError

    if direction not in DIRECTIONS:
        raise LabError(f"direction {direction!r}: choose {', '.join(DIRECTIONS)}")
    if rate is None and loss is None and delay is None:
        raise LabError("give a rate, a loss or a delay")
    with _locked(lab):
        state = lab.require_state()
        _check_node(state, node)
        fab = _fabric(state, fabric)
        nic = _rail_nic(state, node, fabric, rail)
        sw = lab.sw(fabric)
        if sw not in lab.namespaces():
            raise LabError(f"switch namespace {sw} is missing; run `datapath-lab up` to recover")
        _clear_fabric(lab, state, node, fabric, rail)
        n = names(node, rail)
        to_node = direction in ("both", "to-node")
        from_node = direction in ("both", "from-node")
        record: dict[str, Any] = {
            "node": node, "target": fabric, "kind": "fabric", "direction": direction, "switch": sw,
            "port": n["port"], "rate_bps": rate, "loss": loss, "delay_s": delay,
            "rate": format_rate(rate) if rate else None, "relay": None, "ifb": None,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rail": rail, "interface": nic["ifname"], "bridge": nic.get("bridge") or "br0",
        }
        # Recorded first: a crash half-way leaves enough for --clear and `down` to undo it.
        state.setdefault("impairments", {})[key_of(node, fabric, rail)] = record
        lab.save_state(state)
        try:
            mtu = int(fab["mtu"])
            if loss is not None or delay is not None:
                _start_relay(lab, state, record, mtu, to_node, from_node)
                outs = ([n["port"]] if to_node else []) + ([n["relay_end"]] if from_node else [])
            else:
                outs = [n["port"]] if to_node else []
                if from_node:
                    _ip(sw, "link", "add", n["ifb"], "type", "ifb")
                    record["ifb"] = n["ifb"]
                    lab.save_state(state)
                    _ip(sw, "link", "set", n["ifb"], "mtu", "65535", "up")
                    _tc(sw, "qdisc", "add", "dev", n["port"], "handle", "ffff:", "ingress")
                    _tc(sw, "filter", "add", "dev", n["port"], "parent", "ffff:", "protocol", "all", "prio", "1",
                        "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", n["ifb"])
                    outs.append(n["ifb"])
            if rate:
                for dev in outs:
                    _tc(sw, "qdisc", "replace", "dev", dev, "root", "tbf", *tbf_args(rate, mtu))
        except BaseException:
            _clear_fabric(lab, state, node, fabric, rail)
            raise
        lab.save_state(state)
        return record


def _start_relay(lab: Lab, state: dict[str, Any], record: dict[str, Any], mtu: int,
                 to_node: bool, from_node: bool) -> None:
    from .core import LabError, proc_starttime

    node, fabric, sw = record["node"], record["target"], record["switch"]
    rail = int(record.get("rail") or 0)
    n = names(node, rail)
    _ip(sw, "link", "add", n["bridge_end"], "mtu", str(mtu), "type", "veth", "peer", "name", n["relay_end"],
        "mtu", str(mtu))
    _ip(sw, "link", "set", n["relay_end"], "up")
    base = os.path.join(lab.state_dir, f"relay-{node}-{fabric}" + (f"-r{rail}" if rail else ""))
    ready, log, stats = base + ".ready", base + ".log", base + ".stats.json"
    for path in (ready, stats):
        if os.path.exists(path):
            os.unlink(path)
    delay, loss = record["delay_s"] or 0.0, record["loss"] or 0.0
    argv = ["nsenter", f"--net=/run/netns/{sw}", "--", sys.executable, "-m", "datapath_lab.relay",
            "--a", n["port"], "--b", n["relay_end"], "--ready", ready, "--stats", stats,
            "--delay-ab", repr(delay if from_node else 0.0), "--loss-ab", repr(loss if from_node else 0.0),
            "--delay-ba", repr(delay if to_node else 0.0), "--loss-ba", repr(loss if to_node else 0.0)]
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    with open(log, "w") as out, open(os.devnull) as devnull:
        proc = subprocess.Popen(argv, stdin=devnull, stdout=out, stderr=out, start_new_session=True,
                                close_fds=True, cwd="/", env=env)
    record["relay"] = {"pid": proc.pid, "start": proc_starttime(proc.pid), "log": log, "stats": stats}
    lab.save_state(state)
    deadline = time.monotonic() + RELAY_READY_TIMEOUT
    while not os.path.exists(ready):
        if proc.poll() is not None:
            raise LabError(f"the relay exited (rc={proc.returncode}): {_tail(log)}")
        if time.monotonic() > deadline:
            raise LabError(f"the relay was not ready within {RELAY_READY_TIMEOUT:.0f} s; see {log}")
        time.sleep(0.02)
    # Out of the bridge first, then the relay's veth in: never both (that would be a loop).
    _ip(sw, "link", "set", n["port"], "nomaster")
    _ip(sw, "link", "set", n["bridge_end"], "master", record.get("bridge") or "br0", "up")


def _tail(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()[-400:] or "(no output)"
    except OSError:
        return "(no log)"


def _stop_relay(record: dict[str, Any]) -> dict[str, Any] | None:
    """Stop the relay by its recorded PID (SIGTERM, then SIGKILL); returns its counters if it wrote them."""
    pid = relay_pid(record)
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 3.0
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.02)
        if os.path.exists(f"/proc/{pid}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _reap(pid)
    stats_path = (record.get("relay") or {}).get("stats")
    if stats_path and os.path.exists(stats_path):
        try:
            with open(stats_path) as fh:
                found: dict[str, Any] = json.load(fh)
                return found
        except (OSError, ValueError):
            return None
    return None


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _clear_fabric(lab: Lab, state: dict[str, Any], node: str, fabric: str, rail: int = 0) -> dict[str, Any] | None:
    """Undo whatever an impairment of this port (of rail ``rail``) may have left, recorded or not; idempotent."""
    from .core import node_rails

    record = (state.get("impairments") or {}).pop(key_of(node, fabric, rail), None)
    stats = _stop_relay(record) if record else None
    sw = lab.sw(fabric)
    n = names(node, rail)
    nics = node_rails(state["nodes"][node], fabric) if node in state.get("nodes", {}) else []
    bridge = (nics[rail].get("bridge") if rail < len(nics) else None) or "br0"
    if sw in lab.namespaces():
        _ip(sw, "link", "del", n["bridge_end"], check=False)  # its peer r-NODE goes with it
        _tc(sw, "qdisc", "del", "dev", n["port"], "root", check=False)
        _tc(sw, "qdisc", "del", "dev", n["port"], "ingress", check=False)
        _ip(sw, "link", "del", n["ifb"], check=False)
        if node in state.get("nodes", {}):
            _ip(sw, "link", "set", n["port"], "master", bridge, "up", check=False)
    lab.save_state(state)
    return stats


def impair_nvme(lab: Lab, node: str, read_bps: int | None = None, read_iops: int | None = None,
                write_bps: int | None = None, write_iops: int | None = None) -> dict[str, Any]:
    from .core import LabError

    with _locked(lab):
        state = lab.require_state()
        _check_node(state, node)
        cgroup = state["nodes"][node].get("cgroup")
        if not blkio_available():
            raise LabError(f"cgroup v1 blkio throttling is not available at {BLKIO_ROOT}")
        if not cgroup or not os.path.isdir(cgroup):
            raise LabError(f"{node} has no blkio cgroup (a lab brought up by an older datapath-lab): "
                           "run `datapath-lab down` and `up` again")
        _clear_nvme(state, node)
        device = state["nodes"][node]["nvme"]
        record = {"node": node, "target": NVME, "kind": NVME, "device": device, "majmin": majmin(device),
                  "cgroup": cgroup, "read_bps": read_bps, "read_iops": read_iops, "write_bps": write_bps,
                  "write_iops": write_iops, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        state.setdefault("impairments", {})[key_of(node, NVME)] = record
        lab.save_state(state)
        try:
            for key in ("read_bps", "read_iops", "write_bps", "write_iops"):
                if record[key]:
                    _write_throttle(cgroup, key, record["majmin"], int(record[key]))
        except OSError as exc:
            _clear_nvme(state, node)
            lab.save_state(state)
            raise LabError(f"blkio throttle for {device} in {cgroup}: {exc}") from None
        return record


def _clear_nvme(state: dict[str, Any], node: str) -> None:
    record = (state.get("impairments") or {}).pop(key_of(node, NVME), None)
    cgroup = (record or {}).get("cgroup") or state.get("nodes", {}).get(node, {}).get("cgroup")
    if not cgroup or not os.path.isdir(cgroup):
        return
    for key, rules in read_throttle(cgroup).items():
        for dev in rules:
            try:
                _write_throttle(cgroup, key, dev, 0)
            except OSError:
                pass


def clear(lab: Lab, node: str, target: str, rail: int = 0) -> bool:
    """Remove the impairment of a node's port (of rail ``rail``) or NVMe; True when one was recorded."""
    with _locked(lab):
        state = lab.require_state()
        _check_node(state, node)
        had = key_of(node, target, rail) in (state.get("impairments") or {})
        if target == NVME:
            _clear_nvme(state, node)
            lab.save_state(state)
        else:
            _fabric(state, target)
            _rail_nic(state, node, target, rail)
            _clear_fabric(lab, state, node, target, rail)
        return had


def stop_relays(state: dict[str, Any] | None) -> list[str]:
    """For `down`: stop every recorded relay by PID (the namespaces and cgroups go afterwards)."""
    done = []
    for record in records(state):
        pid = relay_pid(record)
        if pid:
            _stop_relay(record)
            done.append(f"stopped the relay of {key_of(record['node'], record['target'], record.get('rail') or 0)} "
                        f"(pid {pid})")
    return done


def problems(state: dict[str, Any]) -> list[str]:
    """Impairments that are recorded but no longer in force."""
    found = []
    for record in records(state):
        where = f"impairment {key_of(record['node'], record['target'], record.get('rail') or 0)}"
        if record["kind"] == NVME:
            rules = read_throttle(record["cgroup"]) if os.path.isdir(record["cgroup"]) else {}
            for key in ("read_bps", "read_iops", "write_bps", "write_iops"):
                if record.get(key) and rules.get(key, {}).get(record["majmin"]) != record[key]:
                    found.append(f"{where}: blkio {key} rule missing from {record['cgroup']}")
        elif record.get("relay") and relay_pid(record) is None:
            found.append(f"{where}: relay (pid {record['relay']['pid']}) gone; see {record['relay']['log']}")
    return found
