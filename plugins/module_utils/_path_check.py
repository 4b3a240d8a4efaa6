# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Path MTU checks with don't-fragment pings (stdlib only).

A probe of size MTU sends ``ping -M do -s MTU-28`` (IPv4; MTU-48 for IPv6) bound to the
fabric's interface. A switch port with a smaller MTU drops the frame silently, so such a
probe shows as 100% loss; a local interface with a smaller MTU gives ``local error: message
too long, mtu=N``, which is recorded too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import re
import threading

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._derived import MTU_MAX, MTU_MIN
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

IPV4_OVERHEAD = 28   # IPv4 header 20 + ICMP header 8
IPV6_OVERHEAD = 48   # IPv6 header 40 + ICMPv6 header 8
MIN_PROBE_MTU = MTU_MIN

_SUMMARY = re.compile(r"\b([0-9]{1,12}) packets transmitted, ([0-9]{1,12}) (?:packets )?received"
                      r"(?:, \+([0-9]{1,12}) errors)?")
_LOCAL_MTU = re.compile(r"message too long, mtu[=:]\s*([0-9]{1,7})\b", re.IGNORECASE)
# iputils arping: "Unicast reply from 198.18.1.16 [02:DD:3E:21:00:02]  0.635ms"
_ARP_REPLY = re.compile(r"^Unicast reply from (\S+) \[([0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5})\]", re.M)
ARP_WAIT_S = 1       # arping's deadline: every NIC that answers does within it
ARP_COUNT = 16       # ... and it stops early only after this many replies


def address_family(address):
    """4 or 6 for an IP literal, None for a name (ping resolves it)."""
    try:
        return ipaddress.ip_address(address).version
    except ValueError:
        return None


def payload_size(mtu, family):
    return mtu - (IPV6_OVERHEAD if family == 6 else IPV4_OVERHEAD)


def ping_argv(ping, address, mtu, count, interval, timeout, interface=None, source=None):
    """argv of one don't-fragment probe of ``mtu`` bytes (IP packet size) to ``address``."""
    family = address_family(address)
    argv = [ping]
    if family == 6:
        argv.append("-6")
    elif family == 4:
        argv.append("-4")
    argv += ["-n", "-q", "-M", "do", "-s", str(payload_size(mtu, family)), "-c", str(count),
             "-i", str(interval), "-W", str(timeout)]
    if interface or source:
        argv += ["-I", interface or source]
    argv.append(address)
    return argv


def parse_ping(rc, out, err):
    """Parse iputils ping output: dict(sent, received, loss, local_mtu, error)."""
    text = "%s\n%s" % (out or "", err or "")
    result = {"sent": 0, "received": 0, "loss": 100, "local_mtu": None, "error": None}
    found = _SUMMARY.search(text)
    local = _LOCAL_MTU.search(text)
    if local:
        result["local_mtu"] = int(local.group(1))
    if found:
        sent, received = int(found.group(1)), int(found.group(2))
        errors = int(found.group(3) or 0)
        sent = max(sent, errors)
        result["sent"], result["received"] = sent, received
        result["loss"] = 100 if sent == 0 else int(round(100.0 * (sent - received) / sent))
    else:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        result["error"] = (lines[-1] if lines else "ping exited with %s and no output" % rc)
    return result


def subnet_errors(where, target):
    """Why a target would ping outside its fabric: every peer address (and the source address) must be
    an IP literal inside one of the target's ``subnets`` (the fabric's, from the spec)."""
    if not target.get("subnets"):
        return ["%s: subnets is required: the fabric's subnets (CIDR) from the spec; path_check never pings "
                "an address outside them" % where]
    networks, errors = [], []
    for text in target["subnets"]:
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError as exc:
            errors.append("%s: subnets: %r is not a network (%s)" % (where, text, exc))
    if errors:
        return errors
    checks = [("peer %s" % peer["name"], peer["address"]) for peer in target.get("peers") or []]
    if target.get("source"):
        checks.append(("source", target["source"]))
    for what, value in checks:
        try:
            address = ipaddress.ip_address(str(value).split("/", 1)[0])
        except ValueError:
            errors.append("%s: %s address %r is not an IP address (names are not resolved: give the fabric "
                          "address)" % (where, what, value))
            continue
        if not any(address.version == net.version and address in net for net in networks):
            errors.append("%s: %s address %s is outside the fabric's subnets (%s); refused, nothing was sent"
                          % (where, what, value, ", ".join(str(n) for n in networks)))
    return errors


def arping_argv(arping, interface, address, source=None):
    """argv of one broadcast ARP request from ``interface`` for ``address`` that keeps every reply."""
    argv = [arping, "-b", "-c", str(ARP_COUNT), "-w", str(ARP_WAIT_S), "-I", interface]
    if source:
        argv += ["-s", source]
    return argv + [address]


def parse_arping(rc, out, err, address):
    """The MAC addresses (lower case, first-seen order) that answered ARP for ``address``; (macs, error)."""
    macs = []
    for replied, mac in _ARP_REPLY.findall(out or ""):
        if replied == address and mac.lower() not in macs:
            macs.append(mac.lower())
    error = None
    if not macs and rc not in (0, 1):
        lines = [line.strip() for line in ("%s\n%s" % (out or "", err or "")).splitlines() if line.strip()]
        error = lines[-1] if lines else "arping exited with %s" % rc
    return macs, error


def route_dev(rc, out):
    """The device ``ip -j route get`` names (None when there is no route or the output is unreadable)."""
    if rc != 0:
        return None
    try:
        data = json.loads(out or "[]")
    except ValueError:
        return None
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("dev"), str):
            return entry["dev"]
    return None


def probe_sizes(mtu, extra):
    """The fabric MTU and every extra size below it, largest first, without duplicates."""
    sizes = set([mtu])
    for size in extra or []:
        if MIN_PROBE_MTU <= size <= mtu:
            sizes.add(size)
    return sorted(sizes, reverse=True)


def judge(path, max_loss):
    """Fill ``largest_mtu`` and ``ok`` of a path from its probes."""
    passing = [p["mtu"] for p in path["probes"] if p["received"] > 0 and p["loss"] <= max_loss]
    path["largest_mtu"] = max(passing) if passing else None
    path["ok"] = path["largest_mtu"] == path["mtu"]
    return path


def run_parallel(jobs, workers):
    """Run callables on at most ``workers`` threads; return their results in order."""
    results = [None] * len(jobs)
    lock = threading.Lock()
    queue = list(enumerate(jobs))

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                index, job = queue.pop(0)
            results[index] = job()

    threads = [threading.Thread(target=worker) for dummy in range(max(1, min(workers, len(jobs))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def summarise(paths):
    """Per fabric: MTU, pairs, passed, failed pairs (``peer``), ok."""
    fabrics = {}
    for path in paths:
        entry = fabrics.setdefault(path["fabric"], {"mtu": path["mtu"], "pairs": 0, "passed": 0,
                                                    "failed": [], "ok": True})
        entry["pairs"] += 1
        if path["ok"]:
            entry["passed"] += 1
        else:
            entry["failed"].append(path["peer"])
            entry["ok"] = False
    return fabrics


class PathCheck(Capability):
    """Don't-fragment pings from this node to every peer of every fabric (read-only)."""

    name = "path_check"
    read_only = True
    uses_root = False  # pings from the node itself; no node files are read

    @classmethod
    def options(cls):
        return dict(
            targets=dict(type="list", elements="dict", required=True, options=dict(
                fabric=dict(type="str", required=True),
                mtu=dict(type="int", required=True),
                interface=dict(type="str"),
                source=dict(type="str"),
                subnets=dict(type="list", elements="str"),
                rail=dict(type="int", default=0),
                peers=dict(type="list", elements="dict", default=[], options=dict(
                    name=dict(type="str", required=True),
                    address=dict(type="str", required=True),
                    rail=dict(type="int"),
                )),
                cross_peers=dict(type="list", elements="dict", default=[], options=dict(
                    name=dict(type="str", required=True),
                    address=dict(type="str", required=True),
                    rail=dict(type="int", required=True),
                )),
            )),
            route_check=dict(type="bool", default=True),
            arp_check=dict(type="bool", default=True),
            sizes=dict(type="list", elements="int", default=[1500]),
            count=dict(type="int", default=3),
            interval=dict(type="float", default=0.2),
            timeout=dict(type="int", default=1),
            max_loss=dict(type="int", default=0),
            workers=dict(type="int", default=16),
        )

    def validate(self):
        p = self.params
        errors = []
        for index, target in enumerate(p["targets"]):
            where = "targets[%d] (fabric %s)" % (index, target["fabric"])
            if not MTU_MIN <= target["mtu"] <= MTU_MAX:
                errors.append("%s: mtu %d is outside %d-%d" % (where, target["mtu"], MTU_MIN, MTU_MAX))
            errors.extend(subnet_errors(where, target))
        if p["count"] < 1:
            errors.append("count must be at least 1")
        if p["timeout"] < 1:
            errors.append("timeout must be at least 1 second")
        if p["interval"] <= 0:
            errors.append("interval must be positive")
        if not 0 <= p["max_loss"] < 100:
            errors.append("max_loss must be 0-99 percent")
        if p["workers"] < 1:
            errors.append("workers must be at least 1")
        if errors:
            raise CapabilityError("path_check: %s" % "; ".join(errors), errors=errors)

    def read(self):
        """Every probe of every path, run concurrently; the paths with their probes."""
        p = self.params
        ping = self.runner.which("ping")
        if not ping:
            raise CapabilityError("path_check needs iputils ping on the node; none found")
        ip = self.runner.which("ip") if p["route_check"] else None
        arping = self.runner.which("arping") if p["arp_check"] else None
        paths, jobs, cross, checks = [], [], [], []
        for target in p["targets"]:
            via = target.get("interface") or target.get("source")
            rail = target.get("rail") or 0
            for peer in target["peers"]:
                path = {"fabric": target["fabric"], "interface": via, "peer": peer["name"],
                        "address": peer["address"], "mtu": target["mtu"], "largest_mtu": None, "ok": False,
                        "probes": [], "rail": rail, "peer_rail": rail if peer.get("rail") is None else peer["rail"],
                        "source_address": target.get("source")}
                paths.append(path)
                for size in probe_sizes(target["mtu"], p["sizes"]):
                    argv = ping_argv(ping, peer["address"], size, p["count"], p["interval"], p["timeout"],
                                     target.get("interface"), target.get("source"))
                    probe = {"mtu": size, "payload": payload_size(size, address_family(peer["address"]))}
                    path["probes"].append(probe)
                    jobs.append((probe, argv))
                checks.extend(self._rail_checks(path, target, ip, arping, True))
            for peer in target.get("cross_peers") or []:
                entry = {"fabric": target["fabric"], "interface": via, "rail": rail,
                         "source_address": target.get("source"),
                         "peer": peer["name"], "address": peer["address"], "peer_rail": peer["rail"]}
                cross.append(entry)
                checks.extend(self._rail_checks(entry, target, ip, None, False))
        runner = self.runner
        answers = run_parallel([_job(runner, argv) for _probe, argv in jobs]
                               + [_job(runner, argv) for _entry, _kind, argv, _want in checks], p["workers"])
        for index, (probe, _argv) in enumerate(jobs):
            rc, out, err = answers[index]
            probe.update(parse_ping(rc, out, err))
            probe["ok"] = probe["received"] > 0 and probe["loss"] <= p["max_loss"]
        for number, (entry, kind, _argv, want) in enumerate(checks):
            rc, out, err = answers[len(jobs) + number]
            if kind == "route":
                entry["route_dev"] = route_dev(rc, out)
                entry["route_ok"] = entry["route_dev"] == want if want else None
            else:
                macs, error = parse_arping(rc, out, err, entry["address"])
                entry["arp"] = {"macs": macs, "error": error}
        for path in paths:
            judge(path, p["max_loss"])
        self.cross = cross
        self.nics = self._nics(ip)
        return paths

    def _rail_checks(self, entry, target, ip, arping, same_rail):
        """The route check (``ip -j route get PEER from SOURCE``) and, for a peer on the same rail, the ARP
        check (``arping -I``: which NICs answer for its address) of one path; fills their defaults."""
        out = []
        entry.update(route_dev=None, route_ok=None)
        if same_rail:
            entry["arp"] = None
        source = target.get("source")
        if ip and source and address_family(entry["address"]) == address_family(source):
            out.append((entry, "route", [ip, "-j", "route", "get", entry["address"], "from", source],
                        target.get("interface")))
        if same_rail and self.params["arp_check"] and address_family(entry["address"]) == 4 \
                and target.get("interface"):
            if arping:
                out.append((entry, "arp", arping_argv(arping, target["interface"], entry["address"], source), None))
            else:
                entry["arp"] = {"macs": [], "error": "arping (iputils) is not installed: ARP not checked"}
        return out

    def _nics(self, ip):
        """{interface: MAC} of the node (``ip -j link``), so that the controller names who answered ARP."""
        if not ip:
            ip = self.runner.which("ip")
        if not ip:
            return {}
        rc, out, err = self.runner.run([ip, "-j", "link", "show"], check=False)
        try:
            data = json.loads(out or "[]") if rc == 0 else []
        except ValueError:
            return {}
        return dict((e["ifname"], str(e.get("address") or "").lower()) for e in data if isinstance(e, dict)
                    and isinstance(e.get("ifname"), str) and e.get("ifname") != "lo")

    def result(self, state, actions):
        failing = []
        for path in state:
            if not path["ok"]:
                top = path["probes"][0]
                why = top["error"] or "%d%% loss at %d" % (top["loss"], top["mtu"])
                if top["local_mtu"]:
                    why += ", local interface MTU %d" % top["local_mtu"]
                failing.append("%s: %s (largest passing MTU %s, %s)"
                               % (path["fabric"], path["peer"], path["largest_mtu"], why))
        rails = []
        for path in state + getattr(self, "cross", []):
            if path.get("route_ok") is False:
                rails.append("%s rail%s: ip route get %s from %s leaves by %s, not %s" % (
                    path["fabric"], path.get("rail"), path["address"], path.get("source_address") or "its address",
                    path["route_dev"], path["interface"]))
            if len((path.get("arp") or {}).get("macs") or []) > 1:
                rails.append("%s rail%s: %d NICs answer ARP for %s (%s)" % (
                    path["fabric"], path.get("rail"), len(path["arp"]["macs"]), path["address"],
                    ", ".join(path["arp"]["macs"])))
        return dict(paths=state, summary=summarise(state), failing=failing, cross_rails=getattr(self, "cross", []),
                    nics=getattr(self, "nics", {}), rail_problems=rails)


def _job(runner, argv):
    return lambda: runner.run(argv, check=False)
