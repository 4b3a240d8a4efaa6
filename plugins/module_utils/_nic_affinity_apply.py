# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Apply a saved NIC affinity and queue plan: the one implementation the module and its link-up unit
share (Python 3 standard library only, no other import of this collection).

``nic_affinity`` uses these functions to read the node and to apply its plan; it also installs this
very file as ``/usr/local/libexec/aiinfra-datapath/nic-affinity-apply``, which the unit
``aiinfra-datapath-nic-affinity.service`` runs with ``--watch``: it applies the saved plan
(``/etc/aiinfra-datapath/nic_affinity.json``) once, then listens on a netlink socket for links that
come up (or reappear after a driver reload) and applies that interface's part again. A link that
comes up gets its queues and, on drivers that (re)request their IRQs or reset XPS when they open,
new IRQ affinities and XPS maps from the kernel; irqbalance, a channel change and a driver reload
undo a one-time pinning too.

The saved plan holds what to set, never IRQ numbers: the completion IRQs of an interface are found
each time, as the vendor tools find them (``msi_irqs`` of the PCI function and of its RDMA device,
``/proc/interrupts`` names that carry the PCI address or the interface name), and completion queue
``k`` (``mlx5_comp<k>@pci:...``, ``<if>-TxRx-<k>``) goes to ``irq_cpus[k]``. Order: channels and
rings first (a channel change resets XPS and may add IRQs), then IRQs, RPS and XPS.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import re
import struct
import subprocess
import sys
import time

STATE_FILE = "/etc/aiinfra-datapath/nic_affinity.json"
STATE_VERSION = 1

# Names of completion (queue) interrupts and the queue index they carry: mlx5 (mlx5_comp<k>@pci:BDF),
# Intel ice/i40e/ixgbe/igb (<if>-TxRx-<k>), ENA (<if>-Tx-Rx-<k>), bnxt_en (<if>-TxRx-<k>).
COMPLETION_NAMES = (re.compile(r"^mlx5_comp(\d+)(@|$)"), re.compile(r"-TxRx-(\d+)\Z"), re.compile(r"-Tx-Rx-(\d+)\Z"))
# Control interrupts of the same devices (left where the driver put them): mlx5's async, command and
# page EQs (mlx5_async0, mlx5_async_eq, mlx5_cmd_eq, mlx5_pages_eq) and Intel's misc vector.
CONTROL_NAMES = re.compile(r"^mlx5_(async|cmd|pages)|[-:]misc$|^[a-z0-9_]+-[0-9a-f:.]+:misc\Z")
PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\Z")
TRIGGER = re.compile(r"(edge|level|fasteoi|Edge|Level)\Z")


# --------------------------------------------------------------------------- CPU lists and masks
def parse_cpulist(text):
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]``; blank -> ``[]``; ValueError for anything else."""
    cpus = set()
    text = (text or "").strip()
    if not text:
        return []
    for part in text.split(","):
        part = part.strip()
        match = re.match(r"^(\d+)(?:-(\d+))?(?::(\d+)/(\d+))?\Z", part)
        if not match:
            raise ValueError("not a CPU list: %r" % text)
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low or high > 65535:
            raise ValueError("not a CPU list: %r" % text)
        if match.group(3) is not None:  # the kernel's "0-15:2/4" form: used/group size
            used, group = int(match.group(3)), int(match.group(4))
            if not 0 < used <= group:
                raise ValueError("not a CPU list: %r" % text)
            cpus.update(c for c in range(low, high + 1) if (c - low) % group < used)
        else:
            cpus.update(range(low, high + 1))
    return sorted(cpus)


def format_cpulist(cpus):
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"`` (the kernel's ``*_list`` format)."""
    out, cpus = [], sorted(set(cpus))
    start = prev = None
    for cpu in cpus:
        if start is None or prev is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            out.append(str(start) if start == prev else "%s-%s" % (start, prev))
            start = prev = cpu
    if start is not None:
        out.append(str(start) if start == prev else "%s-%s" % (start, prev))
    return ",".join(out)


def mask_cpus(text):
    """A kernel CPU mask (``"00000000,0000000f"``, ``"f"``) -> the CPU numbers it sets."""
    digits = (text or "").strip().replace(",", "")
    if not digits:
        return []
    value = int(digits, 16)
    return [bit for bit in range(value.bit_length()) if value >> bit & 1]


def cpus_mask(cpus):
    """CPU numbers -> the mask the kernel writes for them: 32-bit hex groups joined by commas."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    groups = []
    while True:
        groups.append("%08x" % (value & 0xFFFFFFFF))
        value >>= 32
        if not value:
            break
    return ",".join(reversed(groups))


# --------------------------------------------------------------------------- node files
def node_path(root, path):
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


def read_text(root, path):
    """The stripped text of a node file, or None when it is not there (or not readable)."""
    try:
        with open(node_path(root, path), "r", encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def listdir(root, path):
    try:
        return sorted(os.listdir(node_path(root, path)))
    except (IOError, OSError):
        return []


def write_text(root, path, value):
    """One write of ``value`` to a kernel file (procfs, sysfs); raises OSError as the kernel answers."""
    with open(node_path(root, path), "w", encoding="utf-8") as handle:
        handle.write(value)


# --------------------------------------------------------------------------- interrupts
def parse_interrupts(text):
    """``/proc/interrupts`` -> ``{irq: [action names]}`` for the numbered lines.

    A line is ``IRQ: one count per CPU column, the chip, the hardware IRQ and trigger, the names``;
    the chip and trigger take one token (``IR-PCI-MSIX-0000:01:00.0 1-edge``, ``PCI-MSI-edge``) or two
    (``GICv3 30 Level``). The names come after the trigger, separated by ``, ``."""
    lines = (text or "").splitlines()
    columns = 0
    out = {}
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("CPU"):
            columns = len(stripped.split())
            continue
        number, sep, rest = stripped.partition(":")
        if not sep or not number.isdigit():
            continue
        fields = rest.split()
        counts = 0
        while counts < len(fields) and fields[counts].isdigit() and (not columns or counts < columns):
            counts += 1
        tail = fields[counts:]
        names = []
        for index, field in enumerate(tail):
            if TRIGGER.search(field):
                names = " ".join(tail[index + 1:])
                break
        else:
            names = " ".join(tail[2:]) if len(tail) > 2 else ""
        out[int(number)] = [n.strip() for n in names.split(", ") if n.strip()] if names else []
    return out


def queue_index(name):
    """The queue index a completion interrupt's name carries, or None when it is no completion IRQ."""
    for pattern in COMPLETION_NAMES:
        match = pattern.search(name or "")
        if match:
            return int(match.group(1))
    return None


def device_pci(root, ifname):
    """The PCI function behind a netdev (its ``device`` link, walking up past auxiliary devices), or None."""
    device = node_path(root, "/sys/class/net/%s/device" % ifname)
    if not os.path.exists(device):
        return None
    real = os.path.realpath(device)
    while real and real != "/":
        name = os.path.basename(real)
        if PCI_ADDRESS.match(name):
            return name.lower()
        real = os.path.dirname(real)
    return None


def rdma_devices(root, pci):
    """The RDMA devices of a PCI function (``/sys/bus/pci/devices/BDF/infiniband/*``)."""
    return listdir(root, "/sys/bus/pci/devices/%s/infiniband" % pci) if pci else []


def msi_irqs(root, pci):
    """The MSI/MSI-X vectors of a PCI function and of its RDMA devices, as IRQ numbers."""
    found = set()
    dirs = ["/sys/bus/pci/devices/%s/msi_irqs" % pci] if pci else []
    dirs += ["/sys/class/infiniband/%s/device/msi_irqs" % dev for dev in rdma_devices(root, pci)]
    for directory in dirs:
        found.update(int(entry) for entry in listdir(root, directory) if entry.isdigit())
    return sorted(found)


def interface_irqs(root, ifname, pci, interrupts=None):
    """``(completion, other)`` IRQs of an interface: ``[{irq, name, index}]`` sorted by queue index.

    An IRQ is the interface's when it is an MSI vector of its PCI function or RDMA device, or when
    its name carries the PCI address (``@pci:BDF``) or starts with the interface name."""
    if interrupts is None:
        interrupts = parse_interrupts(read_text(root, "/proc/interrupts"))
    mine = set(msi_irqs(root, pci))
    for irq, names in interrupts.items():
        for name in names:
            if (pci and ("@pci:%s" % pci in name.lower() or name.lower().endswith(pci))) \
                    or name == ifname or name.startswith(ifname + "-"):
                mine.add(irq)
    completion, other = [], []
    for irq in sorted(mine):
        names = interrupts.get(irq) or listdir(root, "/proc/irq/%d" % irq)
        names = [n for n in names if n not in ("affinity_hint", "effective_affinity", "effective_affinity_list",
                                               "node", "smp_affinity", "smp_affinity_list", "spurious")]
        name = names[0] if names else ""
        index = queue_index(name)
        entry = {"irq": irq, "name": name, "index": index}
        (completion if index is not None else other).append(entry)
    completion.sort(key=lambda e: (e["index"], e["irq"]))
    return completion, other


def irq_affinity(root, irq):
    """``(smp_affinity_list, effective_affinity_list)`` of an IRQ as CPU lists (None: unreadable)."""
    out = []
    for name in ("smp_affinity_list", "effective_affinity_list"):
        text = read_text(root, "/proc/irq/%d/%s" % (irq, name))
        try:
            out.append(parse_cpulist(text) if text is not None else None)
        except ValueError:
            out.append(None)
    return out[0], out[1]


# --------------------------------------------------------------------------- ethtool
CHANNEL_KEYS = (("RX", "rx"), ("TX", "tx"), ("Other", "other"), ("Combined", "combined"))
RING_KEYS = (("RX", "rx"), ("TX", "tx"))


def parse_ethtool_settings(text, keys):
    """``ethtool -l`` / ``-g`` text -> ``{"max": {key: n|None}, "current": {key: n|None}}``
    (``n/a`` and absent are None)."""
    out = {"max": {}, "current": {}}
    section = None
    names = dict(keys)
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line.lower().startswith("pre-set maximums"):
            section = "max"
            continue
        if line.lower().startswith("current hardware settings"):
            section = "current"
            continue
        key, sep, value = line.partition(":")
        if section and sep and key.strip() in names:
            value = value.strip()
            out[section][names[key.strip()]] = int(value) if value.isdigit() else None
    for section in ("max", "current"):
        for _label, key in keys:
            out[section].setdefault(key, None)
    return out


def ethtool_read(run, ethtool, ifname, flag, keys):
    """``ethtool -l|-g IF`` parsed, or ``None, error`` when the device does not answer."""
    rc, out, err = run([ethtool, flag, ifname])
    if rc != 0:
        return None, (err or out or "rc %d" % rc).strip().splitlines()[-1:] or ["rc %d" % rc]
    return parse_ethtool_settings(out, keys), None


def wanted_changes(current, wanted):
    """The keys of ``wanted`` (not None) whose value differs from ``current``."""
    return [(key, value) for key, value in sorted((wanted or {}).items())
            if value is not None and current.get(key) != value]


# --------------------------------------------------------------------------- queues (RPS, XPS)
def queues(root, ifname, kind):
    """Indexes of the ``rx-N`` / ``tx-N`` queues of a netdev, in order."""
    prefix = kind + "-"
    return sorted(int(q[len(prefix):]) for q in listdir(root, "/sys/class/net/%s/queues" % ifname)
                  if q.startswith(prefix) and q[len(prefix):].isdigit())


def queue_file(ifname, kind, index):
    return "/sys/class/net/%s/queues/%s-%d/%s" % (ifname, kind, index, "rps_cpus" if kind == "rx" else "xps_cpus")


def queue_cpus(root, ifname, kind, index):
    text = read_text(root, queue_file(ifname, kind, index))
    try:
        return mask_cpus(text) if text is not None else None
    except ValueError:
        return None


# --------------------------------------------------------------------------- one interface
def irq_cpu(irq_cpus, index):
    return irq_cpus[index % len(irq_cpus)] if irq_cpus else None


def apply_interface(root, run, ethtool, ifname, entry, interrupts=None):
    """Bring ``ifname`` to its saved ``entry``; return ``[{kind, target, before, after, ok, error}]``
    for every value it had to change (nothing when the interface already holds the plan)."""
    done = []

    def record(kind, target, before, after, error=None):
        done.append({"kind": kind, "target": target, "before": before, "after": after,
                     "ok": error is None, "error": error})

    if not os.path.exists(node_path(root, "/sys/class/net/%s" % ifname)):
        record("interface", ifname, None, "present", "no such interface")
        return done
    for kind, flag, setflag, keys in (("channels", "-l", "-L", CHANNEL_KEYS), ("rings", "-g", "-G", RING_KEYS)):
        wanted = entry.get(kind)
        if not wanted or not any(v is not None for v in wanted.values()):
            continue
        settings, error = ethtool_read(run, ethtool, ifname, flag, keys)
        if settings is None:
            record(kind, ifname, None, wanted, "ethtool %s: %s" % (flag, " ".join(error)))
            continue
        changes = wanted_changes(settings["current"], wanted)
        if not changes:
            continue
        argv = [ethtool, setflag, ifname]
        for key, value in changes:
            argv += [key, str(value)]
        rc, out, err = run(argv)
        before = dict((k, settings["current"].get(k)) for k, _v in changes)
        record(kind, ifname, before, dict(changes),
               None if rc == 0 else "%s: %s" % (" ".join(argv), (err or out or "rc %d" % rc).strip()))
    irq_cpus = entry.get("irq_cpus") or []
    if irq_cpus:
        completion, _other = interface_irqs(root, ifname, entry.get("pci"), interrupts)
        for item in completion:
            cpu = irq_cpu(irq_cpus, item["index"])
            before, _effective = irq_affinity(root, item["irq"])
            if before == [cpu]:
                continue
            target = "%d %s" % (item["irq"], item["name"])
            try:
                write_text(root, "/proc/irq/%d/smp_affinity_list" % item["irq"], "%d\n" % cpu)
                record("irq", target, format_cpulist(before or []), str(cpu))
            except (IOError, OSError) as exc:
                why = ("the kernel manages this interrupt's affinity (EIO)" if exc.errno == errno.EIO
                       else os.strerror(exc.errno) if exc.errno else str(exc))
                record("irq", target, format_cpulist(before or []), str(cpu), why)
    for kind, key in (("rx", "rps_cpus"), ("tx", "xps")):
        wanted = entry.get(key)
        if not wanted:
            continue
        for index in queues(root, ifname, kind):
            cpus = wanted if kind == "rx" else [wanted[index % len(wanted)]]
            current = queue_cpus(root, ifname, kind, index)
            if current is not None and sorted(current) == sorted(cpus):
                continue
            path = queue_file(ifname, kind, index)
            try:
                write_text(root, path, cpus_mask(cpus) + "\n")
                record("rps" if kind == "rx" else "xps", "%s %s-%d" % (ifname, kind, index),
                       format_cpulist(current or []), format_cpulist(cpus))
            except (IOError, OSError) as exc:
                record("rps" if kind == "rx" else "xps", "%s %s-%d" % (ifname, kind, index),
                       format_cpulist(current or []), format_cpulist(cpus), str(exc))
    return done


def load_state(root, path):
    text = read_text(root, path)
    if text is None:
        return {"version": STATE_VERSION, "interfaces": {}}
    state = json.loads(text)
    if not isinstance(state, dict) or not isinstance(state.get("interfaces"), dict):
        raise ValueError("%s: not a nic_affinity plan" % path)
    return state


def state_document(interfaces):
    """The saved plan's JSON text: deterministic, so that an unchanged plan writes nothing."""
    return json.dumps({"version": STATE_VERSION, "interfaces": interfaces}, indent=2, sort_keys=True) + "\n"


# --------------------------------------------------------------------------- the unit's loop
RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFF_UP = 1
IFLA_IFNAME = 3


def link_events(data):
    """``[(message type, ifindex, flags, ifname)]`` of the RTM_NEWLINK / RTM_DELLINK messages in one
    netlink datagram (``struct nlmsghdr``, ``struct ifinfomsg``, then rtattrs)."""
    events, offset = [], 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16 or offset + length > len(data):
            break
        if kind in (RTM_NEWLINK, RTM_DELLINK) and length >= 32:
            _family, _type, index, flags, _change = struct.unpack_from("=BxHiII", data, offset + 16)
            name, attr = None, offset + 32
            while attr + 4 <= offset + length:
                alen, atype = struct.unpack_from("=HH", data, attr)
                if alen < 4:
                    break
                if atype == IFLA_IFNAME:
                    name = data[attr + 4:attr + alen].split(b"\0", 1)[0].decode("utf-8", "replace")
                attr += (alen + 3) & ~3
            events.append((kind, index, flags, name))
        offset += (length + 3) & ~3
    return events


def _subprocess_run(argv):
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              check=False)
    except OSError as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr


def _ethtool():
    for directory in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        if os.access(os.path.join(directory, "ethtool"), os.X_OK):
            return os.path.join(directory, "ethtool")
    return "ethtool"


def _log(message):
    sys.stderr.write("nic-affinity-apply: %s\n" % message)
    sys.stderr.flush()


def apply_saved(root, path, names=None, run=_subprocess_run):
    """Apply the saved plan at ``path`` (every interface, or ``names``); return the failure count."""
    try:
        state = load_state(root, path)
    except ValueError as exc:
        _log(str(exc))
        return 1
    failed = 0
    for ifname, entry in sorted(state["interfaces"].items()):
        if names is not None and ifname not in names:
            continue
        for change in apply_interface(root, run, _ethtool(), ifname, entry):
            if change["ok"]:
                _log("%s: %s %s: %s -> %s"
                     % (ifname, change["kind"], change["target"], change["before"], change["after"]))
            else:
                failed += 1
                _log("%s: %s %s: %s" % (ifname, change["kind"], change["target"], change["error"]))
    return failed


def link_state(root, ifname):
    """``(ifindex, up)`` of a netdev from sysfs, or None when it is not there."""
    index = read_text(root, "/sys/class/net/%s/ifindex" % ifname)
    flags = read_text(root, "/sys/class/net/%s/flags" % ifname)
    if index is None or not index.isdigit():
        return None
    try:
        up = bool(int(flags or "0", 16) & IFF_UP)
    except ValueError:
        up = False
    return int(index), up


def watch(root, path, sock=None):
    """Apply the saved plan, then again for each planned link that comes up or reappears (never returns)."""
    import socket

    if sock is None:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        sock.bind((0, RTMGRP_LINK))
    apply_saved(root, path)
    seen = {}
    for ifname in sorted(load_state(root, path)["interfaces"]):
        state = link_state(root, ifname)
        if state is not None:
            seen[ifname] = state
    _log("watching %d interface(s): %s" % (len(seen), " ".join(sorted(seen)) or "none present yet"))
    while True:
        data = sock.recv(65536)
        try:
            planned = set(load_state(root, path)["interfaces"])
        except ValueError as exc:
            _log(str(exc))
            continue
        for kind, index, flags, name in link_events(data):
            if name is None or name not in planned:
                continue
            if kind == RTM_DELLINK:
                seen.pop(name, None)
                continue
            up = bool(flags & IFF_UP)
            before = seen.get(name)
            seen[name] = (index, up)
            if up and (before is None or not before[1] or before[0] != index):
                started = time.time()
                failed = apply_saved(root, path, [name])
                _log("%s came up: plan applied in %.3f s%s"
                     % (name, time.time() - started, ", %d failed" % failed if failed else ""))


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    root, mode = "/", "--once"
    while args and args[0].startswith("--"):
        option = args.pop(0)
        if option == "--root" and args:
            root = args.pop(0)
        elif option in ("--once", "--watch"):
            mode = option
        else:
            _log("usage: nic-affinity-apply [--root DIR] [--once|--watch] [STATE]")
            return 2
    path = args[0] if args else STATE_FILE
    if mode == "--watch":
        watch(root, path)
        return 0
    return 1 if apply_saved(root, path) else 0


if __name__ == "__main__":
    raise SystemExit(main())
