"""A simulated boot of one lab node: throw away what the running kernel holds for it, replay its
boot path with the real boot-time tools (docs/lab.md, "Rebooting a node").

A lab node is namespaces around a holder process; its kernel is the host's. ``reboot`` keeps the
holder (the inventory's ProxyCommand names its PID) and resets everything else a reboot resets:

1. every other process of the node ends (its SSH sessions, daemons, a running module);
2. every mount made after the node was built is unmounted (the cache, hugetlbfs); /run and /tmp
   are fresh tmpfs again, so /run/reboot-required and other runtime state are gone;
3. each NIC (every rail of every fabric) is recreated (same name and MAC, like a real port): the
   kernel's default MTU, no address, link down, per-interface sysctls at their defaults, the routes of
   every table through it gone; the switch side keeps its port settings. The node's network-namespace
   sysctls go back to what a new namespace has, and its policy rules to the kernel's own;
4. a new boot id (a file bound over /proc/sys/kernel/random/boot_id in the node);
5. inside the node, in systemd's order: ``systemd-tmpfiles --create --remove --boot``,
   ``systemd-sysctl`` (network keys: the rest is the host's kernel), udev's coldplug of the NICs
   (``udevadm test-builtin net_setup_link``: the ``.link`` file of each, its MTU), the network backend
   (``netplan generate``, then systemd-networkd and its wait-online; ``ifup -a`` where
   /etc/network/interfaces exists; the lab's own provisioning when the node has no backend),
   ``mount -a``, then the units installed on this node (its overlay's own
   ``*.target.wants`` links) that are enabled, ordered by their After=/Before=: oneshot units run to
   their end, simple and exec services are started in the background (``start_service``).

Global kernel state (vm.*, kernel.*, fs.*, the HugePage pool, THP) is shared with the host and
never reset: what the boot would set from the node's own files is read from systemd-sysctl's
merged configuration (``--cat-config``) and the node's tmpfiles.d ``w /sys/...`` lines, and
compared with the live values instead (``globals`` in the report).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
import uuid
from typing import TYPE_CHECKING, Any

from . import impair, nvconfig

if TYPE_CHECKING:
    from .core import Lab

SYSTEMD_LIB = "/lib/systemd"
NETWORKD = f"{SYSTEMD_LIB}/systemd-networkd"
WAIT_ONLINE = f"{SYSTEMD_LIB}/systemd-networkd-wait-online"
SYSCTL = f"{SYSTEMD_LIB}/systemd-sysctl"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
REQUEST = "/run/datapath-lab/reboot"  # inside a node: written by its shutdown/reboot (SHIM)
NETWORK_MODES = ("none", "networkd", "netplan")
# The mounts the holder makes (core.HOLDER_SCRIPT), kept by a reboot; /run and /tmp are made anew.
KEPT = ("/", "/proc", "/sys", "/dev")
TMPFS = {"/run": "mode=0755,size=256m", "/tmp": "mode=1777,size=1g"}

# /usr/sbin/shutdown and /usr/sbin/reboot of a lab node: a request to the lab (its agent reboots
# the node), never the host's systemctl. `shutdown -r [TIME] [MSG]`, `shutdown -c`, `reboot`.
SHIM = r"""#!/bin/sh
# datapath-lab: this node's reboot goes through the lab (datapath-lab reboot), never the host.
req=/run/datapath-lab/reboot
me=$(basename "$0")
if [ "$me" = shutdown ]; then
  reboot=no; when=now
  while [ $# -gt 0 ]; do
    case "$1" in
      -r|--reboot) reboot=yes ;;
      -c) rm -f "$req"; echo "Reboot cancelled."; exit 0 ;;
      -h|-H|-P|--halt|--poweroff) echo "lab node: power off is not simulated (datapath-lab down)" >&2; exit 1 ;;
      -k|--no-wall|-q) ;;
      -*) ;;
      *) when=$1; shift; break ;;
    esac
    shift
  done
  [ "$reboot" = yes ] || { echo "lab node: only shutdown -r (reboot) is simulated" >&2; exit 1; }
else
  when=now
fi
case "$when" in
  now|+0|0) delay=0 ;;
  +*) delay=$(( ${when#+} * 60 )) ;;
  *[!0-9]*) delay=0 ;;
  *) delay=$(( when * 60 )) ;;
esac
mkdir -p /run/datapath-lab
echo "$(( $(date +%s) + delay ))" > "$req.tmp" && mv "$req.tmp" "$req"
echo "Reboot scheduled (datapath-lab) in ${delay} s."
"""
SHIM_PATHS = ("usr/sbin/shutdown", "usr/sbin/reboot")


class BootError(Exception):
    """The simulated boot could not run (the lab is left as it was where possible)."""


def node_root(lab: Lab, node: str, state: dict[str, Any]) -> str:
    pid = lab.holder_pid(node, state)
    if pid is None:
        raise BootError(f"{node}: holder process is gone; run `datapath-lab up` to recover")
    return f"/proc/{pid}/root"


def _run(argv: list[str], check: bool = True, input: str | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, input=input, check=False, timeout=timeout)
    if check and done.returncode != 0:
        raise BootError(f"{shlex.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done


def _in_node(lab: Lab, node: str, argv: list[str], check: bool = False,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return _run(lab.nsenter_argv(node) + argv, check=check, timeout=timeout)


def _sh(lab: Lab, node: str, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _in_node(lab, node, ["/bin/sh", "-c", script], check=check)


# --------------------------------------------------------------------------- pieces
def mounts(holder: int) -> list[str]:
    """Mount points of the node (relative to its root), in mount order."""
    out = []
    with open(f"/proc/{holder}/mountinfo") as handle:
        for line in handle:
            point = line.split()[4].encode().decode("unicode_escape")
            out.append(point)
    return out


def _kept(point: str, share: str | None) -> bool:
    if point in KEPT or point == BOOT_ID or point.startswith("/dev/"):
        return True
    return bool(share) and (point == share or point.startswith(str(share).rstrip("/") + "/"))


def sysctl_values(ns: str | None) -> dict[str, str]:
    """Every readable net.* sysctl of a network namespace (procps ``sysctl -a``), per-device keys left out."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + ["sysctl", "-a", "-r", r"^net\."]
    found = {}
    for line in _run(argv, check=False).stdout.splitlines():
        key, sep, value = line.partition(" = ")
        if not sep or re.match(r"^net\.ipv[46]\.(conf|neigh)\.(?!all\.|default\.)", key):
            continue
        found[key] = value.strip()
    return found


def reset_rules(ns: str, fresh: str) -> int:
    """Delete the policy rules (IPv4 and IPv6) of ``ns`` that a new namespace ``fresh`` does not have, as a
    boot starts with the kernel's rules only (the routes of other tables went with the NICs); their number."""
    import json

    gone = 0
    for family in ("-4", "-6"):
        have = json.loads(_run(["ip", "-n", ns, family, "-j", "rule", "show"], check=False).stdout or "[]")
        base = json.loads(_run(["ip", "-n", fresh, family, "-j", "rule", "show"], check=False).stdout or "[]")
        for rule in have:
            if rule in base:
                continue
            argv = ["ip", "-n", ns, family, "rule", "del", "priority", str(rule["priority"])]
            if rule.get("src") not in (None, "all"):
                argv += ["from", rule["src"] + (f"/{rule['srclen']}" if rule.get("srclen") is not None else "")]
            if rule.get("table"):
                argv += ["lookup", str(rule["table"])]
            if _run(argv, check=False).returncode == 0:
                gone += 1
    return gone


def parse_cat_config(text: str) -> dict[str, tuple[str, str]]:
    """systemd-sysctl --cat-config -> {key: (value, file)}: the last assignment wins, as it applies them."""
    effective: dict[str, tuple[str, str]] = {}
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("# /"):
            current = line[2:].split(" ", 1)[0]
            continue
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip().lstrip("-").replace("/", ".")
        effective[key] = (value.strip(), current)
    return effective


def _live_sysctl(root: str, key: str) -> str | None:
    try:
        with open(os.path.join(root, "proc/sys", key.replace(".", "/"))) as handle:
            return " ".join(handle.read().split())
    except OSError:
        return None


Unit = dict[str, dict[str, list[str]]]


def read_unit(path: str) -> Unit:
    """A unit file as systemd reads it: {section: {key: [every value, in order]}} (a key may repeat:
    ExecStart= of a oneshot, After=); an empty assignment resets the list; backslash continues a line."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    with open(path) as handle:
        text = handle.read().replace("\\\n", " ")
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if not sep or section is None:
            continue
        values = section.setdefault(key.strip(), [])
        if value.strip():
            values.append(value.strip())
        else:
            values.clear()
    return unit


def _unit_list(unit: Unit, section: str, key: str) -> list[str]:
    return [word for value in unit.get(section, {}).get(key, []) for word in value.split()]


def _exec_lines(unit: Unit, key: str) -> list[str]:
    return list(unit.get("Service", {}).get(key, []))


def installed_units(upper: str) -> dict[str, str]:
    """Units enabled on this node since it was built: the ``*.wants`` links in its overlay's upper
    layer (the host's own enabled services are not the node's). {unit name: unit file path in upper}."""
    found: dict[str, str] = {}
    system = os.path.join(upper, "etc", "systemd", "system")
    if not os.path.isdir(system):
        return found
    for wants in sorted(os.listdir(system)):
        if not wants.endswith(".wants") or not os.path.isdir(os.path.join(system, wants)):
            continue
        for name in sorted(os.listdir(os.path.join(system, wants))):
            target = os.readlink(os.path.join(system, wants, name)) if os.path.islink(
                os.path.join(system, wants, name)) else os.path.join("/etc/systemd/system", name)
            found[name] = target
    return found


def order_units(units: dict[str, Unit]) -> list[str]:
    """Names in an order that honours After=/Before= among them (then by name)."""
    after: dict[str, set[str]] = {name: set() for name in units}
    for name, parser in units.items():
        for other in _unit_list(parser, "Unit", "After"):
            if other in units:
                after[name].add(other)
        for other in _unit_list(parser, "Unit", "Before"):
            if other in units:
                after[other].add(name)
    ordered: list[str] = []
    pending = sorted(units)
    while pending:
        ready = [n for n in pending if after[n] <= set(ordered)]
        if not ready:  # a cycle: systemd breaks it too, by dropping a job
            ready = pending[:1]
        ordered.append(ready[0])
        pending.remove(ready[0])
    return ordered


# --------------------------------------------------------------------------- the reboot
def reboot(lab: Lab, node: str) -> dict[str, Any]:
    """Reboot ``node`` (see the module docstring). Returns the boot's report (also kept in the state)."""
    from .core import NETNS_DEFAULT_MTU, _kill, _wait_gone

    state = lab.require_state()
    if node not in state["nodes"]:
        raise BootError(f"no node {node!r} in lab {lab.name}; nodes: {', '.join(state['nodes'])}")
    busy = [impair.describe(r) for r in impair.records(state) if r.get("node") == node]
    if busy:
        raise BootError(f"{node} has impairments ({'; '.join(busy)}): clear them first (impair ... --clear)")
    info = state["nodes"][node]
    holder = lab.holder_pid(node, state)
    if holder is None:
        raise BootError(f"{node}: holder process is gone; run `datapath-lab up` to recover")
    started = time.monotonic()
    report: dict[str, Any] = {"node": node, "steps": [], "globals": {}, "units": [], "problems": []}

    def step(name: str, text: str) -> None:
        report["steps"].append({"step": name, "text": text})

    # 1. processes
    ns = lab.ns(node)
    pids = [int(p) for p in _run(["ip", "netns", "pids", ns], check=False).stdout.split() if int(p) != holder]
    for pid in pids:
        _kill(pid)
    _wait_gone(pids)
    step("processes", f"ended {len(pids)} process(es)")

    # 2. mounts
    share = info.get("share") or None
    points = [p for p in mounts(holder) if not _kept(p, share) and p not in TMPFS]
    gone = []
    for point in reversed(points):
        if _in_node(lab, node, ["umount", point]).returncode != 0:
            _in_node(lab, node, ["umount", "-l", point])
        gone.append(point)
    for point, options in TMPFS.items():
        if point in mounts(holder):
            _in_node(lab, node, ["umount", "-R", point])
        _in_node(lab, node, ["mount", "-t", "tmpfs", "-o", options, "tmpfs", point], check=True)
    _sh(lab, node, "mkdir -p /run/sshd /run/lock && chmod 0755 /run/sshd")
    step("mounts", "unmounted " + (", ".join(gone) if gone else "nothing") + "; fresh /run and /tmp")

    # 3. NICs and the namespace's sysctls
    from .core import node_rails

    for fabric in state["fabrics"]:
        for nic in node_rails(info, fabric["name"]):
            lab.recreate_nic(node, fabric, state, provision=info.get("network", "none") == "none", rail=nic["rail"])
    fresh_ns = f"{lab.name}-boot-{node}"
    _run(["ip", "netns", "add", fresh_ns])
    try:
        defaults = sysctl_values(fresh_ns)
        rules = reset_rules(ns, fresh_ns)
    finally:
        _run(["ip", "netns", "delete", fresh_ns], check=False)
    current = sysctl_values(ns)
    reset = {k: v for k, v in defaults.items() if k in current and current[k] != v}
    for key, value in sorted(reset.items()):
        _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"{key}={value}"], check=False)
    step("network", f"NICs recreated at MTU {NETNS_DEFAULT_MTU}, link down; {len(reset)} namespace sysctl(s) "
                    f"back to a new namespace's defaults; {rules} policy rule(s) gone (a boot starts with the "
                    "kernel's own)")

    # 4. boot id
    boot_id = str(uuid.uuid4())
    lab.bind_boot_id(node, boot_id)
    step("boot_id", boot_id)
    # the NICs' firmware loads its NV configuration (datapath-lab nic-firmware; lab/datapath_lab/nvconfig.py)
    nic_firmware = nvconfig.on_boot(lab, node, state)
    if nic_firmware:
        step("nic-firmware", nic_firmware)

    # 5. the boot path, inside the node
    tmpfiles = _in_node(lab, node, ["systemd-tmpfiles", "--create", "--remove", "--boot", "--exclude-prefix=/dev",
                                    "--exclude-prefix=/sys", "--exclude-prefix=/proc"])
    step("systemd-tmpfiles", f"--create --remove --boot (not below /dev, /sys, /proc): rc {tmpfiles.returncode}")
    sysctl = _in_node(lab, node, [SYSCTL, "--prefix=net"])
    report["sysctl_log"] = sysctl.stderr.strip().splitlines()
    step("systemd-sysctl", f"network keys applied (rc {sysctl.returncode}"
                           + (f"; {len(report['sysctl_log'])} message(s))" if report["sysctl_log"] else ")"))
    report["globals"] = {**global_sysctls(lab, node, state), **global_tmpfiles(lab, node, state)}
    differ = sorted(k for k, v in report["globals"].items() if not v["same"])
    if differ:
        kept = report["globals"]
        report["problems"].append("the boot would set global sysctls other than the live values: "
                                  + ", ".join(f"{k}={kept[k]['boot']} (live {kept[k]['live']})" for k in differ))
    # udev's coldplug of the NICs: the net_setup_link builtin applies the .link file of each (its MTU)
    links = []
    for ifname in [n["ifname"] for f in state["fabrics"] for n in node_rails(state["nodes"][node], f["name"])]:
        done = _in_node(lab, node, ["udevadm", "test-builtin", "net_setup_link", f"/sys/class/net/{ifname}"])
        applied = re.search(r"ID_NET_LINK_FILE=(\S+)", done.stdout)
        links.append(f"{ifname} {applied.group(1) if applied else 'no .link'}")
        if done.returncode != 0:
            report["problems"].append(f"udev net_setup_link {ifname}: {done.stderr.strip()[-300:]}")
    step("udev", "net_setup_link: " + ", ".join(links))
    report["network"] = start_network(lab, node, state)
    step("network-backend", report["network"]["text"])
    mount = _in_node(lab, node, ["mount", "-a"])
    if mount.returncode != 0:
        report["problems"].append(f"mount -a: {mount.stderr.strip()}")
    # an entry with nofail lets mount -a succeed without it, as a real boot goes on without it
    missing = _sh(lab, node, "findmnt --fstab -n -l -o TARGET,FSTYPE,OPTIONS | while read -r t f o; do "
                             "case \"$f,$o\" in swap,*|*noauto*) continue ;; esac; "
                             "mountpoint -q \"$t\" || echo \"$t\"; done", check=False).stdout.split()
    if missing:
        report["problems"].append("fstab entries not mounted after mount -a: " + ", ".join(missing))
    step("mount -a", f"rc {mount.returncode}" + (f": {mount.stderr.strip()}" if mount.returncode else "")
         + (f"; not mounted: {', '.join(missing)}" if missing else ""))
    report["units"] = run_units(lab, node)
    for unit in report["units"]:
        if unit["result"] not in ("ok", "skipped", "started"):
            report["problems"].append(f"{unit['unit']}: {unit['result']}")
    step("units", ", ".join(f"{u['unit']} {u['result']}" for u in report["units"]) or "none installed")

    report["seconds"] = round(time.monotonic() - started, 2)
    report["boot_id"] = boot_id
    fresh = lab.load_state() or state  # the state as it is now: other commands may have saved meanwhile
    record = fresh["nodes"][node]
    record.update(boot_id=boot_id, boots=int(record.get("boots", 0)) + 1, booted_at=time.time(), last_boot=report)
    lab.save_state(fresh)
    return report


def global_sysctls(lab: Lab, node: str, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What systemd-sysctl would set outside the network namespace from the node's own files, against
    the live (shared) values: how HugePages (vm.nr_hugepages) and the other global keys are proven."""
    text = _in_node(lab, node, [SYSCTL, "--cat-config"]).stdout
    root = node_root(lab, node, state)
    upper = os.path.join(lab.run_dir, "nodes", node, "upper")
    out = {}
    for key, (value, source) in sorted(parse_cat_config(text).items()):
        # the node's own settings (a file written on it: in its overlay's upper layer); the host's
        # distribution defaults are the host's business
        if key.startswith("net.") or "*" in key or not os.path.exists(os.path.join(upper, source.lstrip("/"))):
            continue
        live = _live_sysctl(root, key)
        if live is None:
            continue
        out[key] = {"boot": " ".join(value.split()), "live": live, "file": source,
                    "same": " ".join(value.split()) == live}
    return out


def _selected(text: str) -> str:
    """A sysfs choice file's value: ``always [madvise] never`` -> ``madvise``; else the text."""
    match = re.search(r"\[([^\]]+)\]", text)
    return match.group(1) if match else " ".join(text.split())


def global_tmpfiles(lab: Lab, node: str, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The node's own tmpfiles.d ``w`` lines below /sys (THP: the hugepages capability's boot file),
    which the boot does not run on the shared kernel: what they would write against the live value."""
    upper = os.path.join(lab.run_dir, "nodes", node, "upper")
    root = node_root(lab, node, state)
    out: dict[str, dict[str, Any]] = {}
    directory = os.path.join(upper, "etc", "tmpfiles.d")
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        try:
            with open(os.path.join(directory, name)) as handle:
                lines = handle.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            fields = line.split(None, 6)
            if len(fields) < 7 or fields[0] not in ("w", "w+") or not fields[1].startswith("/sys/"):
                continue
            try:
                with open(os.path.join(root, fields[1].lstrip("/"))) as handle:
                    live = _selected(handle.read())
            except OSError:
                continue
            value = " ".join(fields[6].split())
            out[fields[1]] = {"boot": value, "live": live, "file": f"/etc/tmpfiles.d/{name}", "same": value == live}
    return out


def start_network(lab: Lab, node: str, state: dict[str, Any]) -> dict[str, Any]:
    """The node's network backend, as its boot would start it."""
    mode = state["nodes"][node].get("network", "none")
    done: list[str] = []
    result: dict[str, Any] = {"mode": mode, "rc": 0}
    if mode == "none":
        exists = _sh(lab, node, "test -e /etc/network/interfaces && command -v ifup", check=False)
        if exists.returncode == 0:
            ifup = _in_node(lab, node, ["ifup", "-a"])
            result["rc"] = ifup.returncode
            done.append(f"ifup -a: rc {ifup.returncode}")
        done.append("the lab's provisioning (addresses, fabric MTU)")
        result["text"] = "; ".join(done)
        return result
    if _sh(lab, node, "for f in /etc/netplan/*.yaml /run/netplan/*.yaml /lib/netplan/*.yaml; do "
                      "[ -e \"$f\" ] && exit 0; done; exit 1", check=False).returncode == 0:
        gen = _in_node(lab, node, ["netplan", "generate"])
        result["rc"] = gen.returncode
        done.append(f"netplan generate: rc {gen.returncode}" + (f" {gen.stderr.strip()}" if gen.returncode else ""))
    # networkd as in a container: /sys read-only in its own mount namespace, so it does not wait
    # for a udev the node does not run (systemd's container interface).
    _sh(lab, node, "systemd-tmpfiles --create --prefix=/run/systemd/netif >/dev/null 2>&1; "
                   f"setsid unshare --mount --propagation private /bin/sh -c 'mount -o remount,bind,ro /sys && "
                   f"exec {NETWORKD}' </dev/null >/run/datapath-lab-networkd.log 2>&1 &")
    from .core import node_rails

    ifnames = [n["ifname"] for f in state["fabrics"] for n in node_rails(state["nodes"][node], f["name"])]
    wait = _in_node(lab, node, [WAIT_ONLINE, "--timeout=20"] + [f"--interface={i}" for i in ifnames], timeout=30)
    result["rc"] = result["rc"] or wait.returncode
    done.append(f"systemd-networkd started; wait-online {' '.join(ifnames)}: rc {wait.returncode}")
    result["text"] = "; ".join(done)
    return result


SERVICE_TYPES = ("simple", "exec")  # long-running services: started in the background, as systemd would
UNIT_LOGS = "/run/datapath-lab/units"  # inside a node: each started service's stdout and stderr (no journal)


def start_service(lab: Lab, node: str, name: str, unit: Unit) -> dict[str, Any]:
    """A ``Type=simple``/``exec`` service of the node: its ``ExecStartPre=`` lines in order, then its one
    ``ExecStart=`` in the background, in its own session, output to ``UNIT_LOGS/NAME.log`` in the node.
    What systemd adds is not simulated: no restart on failure, no journal, no stop at shutdown (the next
    reboot ends it with every other process of the node)."""
    for line in _exec_lines(unit, "ExecStartPre"):
        done = _in_node(lab, node, shlex.split(line.lstrip().lstrip("-@+!:")), timeout=120)
        if done.returncode != 0 and not line.lstrip().startswith("-"):
            return {"unit": name, "result": f"failed (ExecStartPre rc {done.returncode})"}
    lines = _exec_lines(unit, "ExecStart")
    if len(lines) != 1:
        return {"unit": name, "result": f"failed ({len(lines)} ExecStart= lines; a service has one)"}
    argv = shlex.split(lines[0].lstrip().lstrip("-@+!:"))
    log = f"{UNIT_LOGS}/{name}.log"
    started = _in_node(lab, node, ["/bin/sh", "-c", 'mkdir -p "$1" || exit 1; log=$2; shift 2; '
                                   'setsid "$@" </dev/null >>"$log" 2>&1 & echo $!', "sh", UNIT_LOGS, log, *argv])
    pid = started.stdout.strip()
    if started.returncode != 0 or not pid.isdigit():
        return {"unit": name, "result": f"failed (not started: {started.stderr.strip()[-200:]})"}
    return {"unit": name, "result": "started", "pid": int(pid), "log": log}


def run_units(lab: Lab, node: str) -> list[dict[str, Any]]:
    """Run the oneshot units installed and enabled on this node, in their declared order, and start its
    long-running services (``start_service``)."""
    upper = os.path.join(lab.run_dir, "nodes", node, "upper")
    root = node_root(lab, node, lab.require_state())
    parsed: dict[str, Unit] = {}
    results = []
    for name, path in installed_units(upper).items():
        full = os.path.join(root, path.lstrip("/"))
        try:
            parsed[name] = read_unit(full)
        except (OSError, UnicodeDecodeError) as exc:
            results.append({"unit": name, "result": f"unreadable: {exc}"})
    for name in order_units(parsed):
        unit = parsed[name]
        conditions = _unit_list(unit, "Unit", "ConditionPathExists")
        # ConditionPathExists=PATH holds when PATH exists, =!PATH when it does not
        if any(os.path.exists(os.path.join(root, c.lstrip("!/"))) == c.startswith("!") for c in conditions):
            results.append({"unit": name, "result": "skipped", "why": "ConditionPathExists"})
            continue
        kind = (unit["Service"].get("Type") or ["simple"])[-1] if "Service" in unit else None
        if kind in SERVICE_TYPES:
            results.append(start_service(lab, node, name, unit))
            continue
        if kind != "oneshot":
            results.append({"unit": name, "result": "skipped",
                            "why": f"Type={kind}: only oneshot, simple and exec services are run"})
            continue
        rc = 0
        for key in ("ExecStartPre", "ExecStart", "ExecStartPost"):
            for line in _exec_lines(unit, key):
                ignore = line.lstrip().startswith("-")
                argv = shlex.split(line.lstrip().lstrip("-@+!:"))
                done = _in_node(lab, node, argv, timeout=120)
                if done.returncode != 0 and not ignore:
                    rc = done.returncode
                    break
            if rc:
                break
        results.append({"unit": name, "result": "ok" if rc == 0 else f"failed (rc {rc})"})
    return results
