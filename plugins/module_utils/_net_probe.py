# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The network probe capability (stdlib only): one side of a TCP throughput pair.

A server (``role: server``) listens on the fabric address for one client's streams and
answers a UDP latency echo; a client (``role: client``) runs N streams for a bounded time from
its fabric address and sends the small latency probe while the load runs. Around the run the
node's /proc/net/snmp and /proc/net/netstat are read (deltas) and its socket-buffer sysctls
recorded. Engines: ``_net_probe_builtin`` (sockets and threads) or ``_net_probe_iperf3``.

Every address must lie in ``allowed_networks`` (the fabric subnets): anything else fails the
module in ``validate``, before a socket is opened. A server accepts only its planned ``peer`` and
the pair's per-run ``token`` (drawn by the controller, given to both sides), and its UDP echo
answers only that peer. A pair that fails (peer unreachable, no
client, a peer gone mid-test, iperf3 missing) is ``ok: false`` with ``error``; the module
itself succeeds so that the run goes on.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe_builtin as builtin
from ansible_collections.aiinfra.datapath.plugins.module_utils import _net_probe_iperf3 as iperf3
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe_parse import (
    NETSTAT_KEYS,
    SOCKET_BUFFER_SYSCTLS,
    latency_result,
    lost_segments,
    netstat_delta,
    normalise_sysctl,
    parse_proc_net,
    share,
    summarise_tcp_info,
    tcp_result,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe_socket import TOKEN_BYTES, PairError

LIMITS = {"streams": (1, 64), "duration": (0.5, 300.0), "wait": (0.5, 600.0),
          "latency_interval": (0.001, 10.0), "port": (1, 65534)}
SOCKET_BUFFER_MAX = 1 << 30
TOKEN_RE = re.compile(r"\A[0-9a-f]{%d}\Z" % (2 * TOKEN_BYTES))


def networks(cidrs):
    """The ``allowed_networks`` as ip_network objects; (networks, errors)."""
    found, errors = [], []
    for cidr in cidrs or []:
        try:
            found.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError as exc:
            errors.append("allowed_networks: %r is not a network (%s)" % (cidr, exc))
    return found, errors


def refusal(option, value, allowed):
    """Why ``value`` may not be probed (None when it lies in one of ``allowed``)."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return "%s %r is not an IP address (names are not resolved: give the fabric address)" % (option, value)
    if any(address.version == net.version and address in net for net in allowed):
        return None
    return "%s %s is outside allowed_networks (%s)" % (option, value, ", ".join(str(n) for n in allowed))


class NetProbe(Capability):
    """One side of a throughput / loss / latency pair on a fabric (read-only)."""

    name = "net_probe"
    read_only = True
    uses_root = True  # /proc/sys and /proc/net/{snmp,netstat} are read below ``root``

    @classmethod
    def options(cls):
        return dict(
            role=dict(type="str", required=True, choices=["server", "client"]),
            address=dict(type="str", required=True),
            source=dict(type="str"),
            port=dict(type="int", default=5201),
            streams=dict(type="int", default=4),
            duration=dict(type="float", default=5.0),
            max_bytes=dict(type="int", default=0),
            wait=dict(type="float", default=30.0),
            latency_interval=dict(type="float", default=0.02),
            tool=dict(type="str", default="builtin", choices=["builtin", "iperf3"]),
            allowed_networks=dict(type="list", elements="str", required=True),
            socket_buffer=dict(type="int"),
            peer=dict(type="str"),
            token=dict(type="str", required=True, no_log=True),
            legs=dict(type="list", elements="dict", default=[], options=dict(
                rail=dict(type="int", required=True),
                address=dict(type="str", required=True),
                source=dict(type="str"),
                peer=dict(type="str"),
                port=dict(type="int", required=True),
                interface=dict(type="str"),
            )),
        )

    @classmethod
    def module_spec(cls):
        spec = super(NetProbe, cls).module_spec()
        spec["required_if"] = [("role", "client", ("source",)), ("role", "server", ("peer",))]
        return spec

    def validate(self):
        p = self.params
        errors = []
        for key, (low, high) in sorted(LIMITS.items()):
            if not low <= p[key] <= high:
                errors.append("%s %s is outside %s-%s" % (key, p[key], low, high))
        if p["max_bytes"] < 0:
            errors.append("max_bytes must be 0 (no cap) or positive")
        if p.get("socket_buffer") is not None and not 4096 <= p["socket_buffer"] <= SOCKET_BUFFER_MAX:
            errors.append("socket_buffer must be 4096-%d bytes" % SOCKET_BUFFER_MAX)
        if not TOKEN_RE.match(str(p.get("token") or "")):
            errors.append("token must be the pair's per-run token, %d lowercase hex characters (the measure role "
                          "draws it with secrets.token_hex(%d) and gives it to both sides)"
                          % (2 * TOKEN_BYTES, TOKEN_BYTES))
        if errors:
            raise CapabilityError("net_probe: %s" % "; ".join(errors), errors=errors)
        allowed, errors = networks(p["allowed_networks"])
        if not p["allowed_networks"]:
            errors.append("allowed_networks is empty: name the fabric subnets the probe may use")
        if errors:
            raise CapabilityError("net_probe: %s" % "; ".join(errors), errors=errors)
        refused = [why for why in (refusal("address", p["address"], allowed),
                                   p.get("source") and refusal("source", p["source"], allowed),
                                   p.get("peer") and refusal("peer", p["peer"], allowed)) if why]
        for index, leg in enumerate(p.get("legs") or []):
            where = "legs[%d] (rail %d)" % (index, leg["rail"])
            refused += [why for why in (refusal("%s address" % where, leg["address"], allowed),
                                        leg.get("source") and refusal("%s source" % where, leg["source"], allowed),
                                        leg.get("peer") and refusal("%s peer" % where, leg["peer"], allowed))
                        if why]
            if p["role"] == "client" and not leg.get("source"):
                refused.append("%s: a client leg needs its source" % where)
            if not LIMITS["port"][0] <= leg["port"] <= LIMITS["port"][1]:
                refused.append("%s: port %s is outside 1-65534" % (where, leg["port"]))
        if not refused and p.get("source") and (ipaddress.ip_address(p["source"]).version
                                                != ipaddress.ip_address(p["address"]).version):
            refused.append("source %s and address %s are of different IP versions" % (p["source"], p["address"]))
        if refused:
            raise CapabilityError("net_probe refused before any traffic is sent: %s" % "; ".join(refused),
                                  errors=refused, probe=self.probe(None))

    # ----------------------------------------------------------------------------- reading
    def socket_buffers(self):
        return dict((key, normalise_sysctl(self.root.read(path))) for key, path in SOCKET_BUFFER_SYSCTLS)

    def counters(self):
        counters = {}
        for path in ("/proc/net/snmp", "/proc/net/netstat"):
            try:
                counters.update(parse_proc_net(self.root.read_raw(path)))
            except (IOError, OSError):
                pass
        return counters

    def probe(self, ok):
        p = self.params
        return {"role": p["role"], "address": p["address"], "source": p.get("source"), "port": p["port"],
                "tool": p["tool"], "ok": ok, "error": None, "streams": p["streams"],
                "duration": p["duration"], "max_bytes": p["max_bytes"],
                "seconds": None, "bytes": None, "gbit_per_s": None, "tcp": tcp_result(),
                "netstat": dict((key, None) for key in NETSTAT_KEYS), "latency": latency_result(),
                "socket_buffers": dict((key, None) for key, _path in SOCKET_BUFFER_SYSCTLS)}

    def nic_counters(self):
        """{ifname: {tx_bytes, rx_bytes}} of every interface but lo (/sys/class/net/IF/statistics)."""
        out = {}
        for name in self.root.listdir("/sys/class/net"):
            if name == "lo":
                continue
            entry = {}
            for key in ("tx_bytes", "rx_bytes"):
                try:
                    entry[key] = int((self.root.read("/sys/class/net/%s/statistics/%s" % (name, key)) or "").strip())
                except (ValueError, IOError, OSError):
                    entry[key] = None
            out[name] = entry
        return out

    @staticmethod
    def nic_delta(before, after):
        """The bytes each interface sent and received over the run (which NIC the traffic took)."""
        out = {}
        for name in sorted(set(before) & set(after)):
            out[name] = dict((key, after[name][key] - before[name][key]
                              if before[name].get(key) is not None and after[name].get(key) is not None
                              and after[name][key] >= before[name][key] else None) for key in ("tx_bytes", "rx_bytes"))
        return out

    def read(self):
        probe = self.probe(None)
        probe["socket_buffers"] = self.socket_buffers()
        probe["nic_bytes"] = None
        if self.params.get("legs"):
            probe["legs"] = [dict(self.probe(None), rail=leg["rail"], interface=leg.get("interface"),
                                  address=leg["address"], source=leg.get("source"), port=leg["port"])
                             for leg in self.params["legs"]]
        if self.check_mode:
            return probe  # what would be measured; no socket is opened
        before = self.counters()
        nics = self.nic_counters()
        if self.params.get("legs"):
            figures = self.measure_legs(probe)
        else:
            figures = self.measure()
        probe["nic_bytes"] = self.nic_delta(nics, self.nic_counters())
        probe["netstat"] = netstat_delta(before, self.counters())
        probe.update(figures)
        if probe["tool"] == "iperf3" and probe["role"] == "client" and probe["tcp"]["retransmits"] is not None:
            # iperf3's JSON has no segment count and no DSACK count: the node's TcpOutSegs and
            # TcpExtTCPDSACKRecvSegs over the run stand in.
            segments = probe["netstat"]["TcpOutSegs"]
            spurious = probe["netstat"]["TcpExtTCPDSACKRecvSegs"]
            probe["tcp"].update(segments_sent=segments, spurious_retransmits=spurious,
                                retransmit_share=share(lost_segments(probe["tcp"]["retransmits"], spurious), segments))
        return probe

    def measure_legs(self, probe):
        """Every leg (one rail of the pair) at once, each in a process of its own forked before any
        thread runs (the engines fork their latency child and start threads themselves); the figures
        of legs[0] for ``probe`` (each leg's in ``probe["legs"]``; netstat deltas are the node's, for all)."""
        children = []
        for index, leg in enumerate(self.params["legs"]):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the leg's own process: measure, write the figures, leave without cleanup
                code = 0
                try:
                    os.close(read_end)
                    # a server leg serves only the client's address on that rail (its own planned peer)
                    params = dict(self.params, address=leg["address"], source=leg.get("source"), port=leg["port"],
                                  peer=leg.get("peer") or self.params.get("peer"))
                    data = json.dumps(self.measure(params)).encode()
                    while data:
                        data = data[os.write(write_end, data):]
                except BaseException:  # pylint: disable=broad-except
                    code = 1
                finally:
                    os._exit(code)  # pylint: disable=protected-access
            os.close(write_end)
            children.append((index, pid, read_end))
        for index, pid, read_end in children:
            chunks = []
            while True:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
            os.close(read_end)
            os.waitpid(pid, 0)
            try:
                figures = json.loads(b"".join(chunks).decode() or "null")
            except ValueError:
                figures = None
            if not isinstance(figures, dict):
                figures = {"ok": False,
                           "error": "the probe of rail %s ended without a result" % probe["legs"][index]["rail"]}
            probe["legs"][index].update(figures)
        keep = ("ok", "error", "bytes", "seconds", "gbit_per_s", "tcp", "latency")
        first = dict((k, v) for k, v in probe["legs"][0].items() if k in keep)
        return first

    def measure(self, params=None):
        """The engine's figures: ok, error, bytes, seconds, gbit_per_s, tcp, latency."""
        p = params if params is not None else self.params
        out = {"ok": False, "error": None}
        try:
            if p["tool"] == "iperf3":
                path = self.runner.which("iperf3")
                if not path:
                    out["error"] = "iperf3 is not installed on this node (tool: iperf3)"
                    return out
                engine = iperf3.run_server if p["role"] == "server" else iperf3.run_client
                found = engine(p, path)
                out.update(ok=found["ok"], error=found["error"], tcp=found["tcp"])
            else:
                engine = builtin.run_server if p["role"] == "server" else builtin.run_client
                found = engine(p)
                out.update(ok=True, tcp=summarise_tcp_info(found["tcp_infos"]))
                if found.get("stuck_threads"):
                    self.warn("net_probe: %d thread(s) still running at the end" % found["stuck_threads"])
        except PairError as exc:
            out["error"] = str(exc)
            return out
        out["bytes"], out["seconds"] = found["bytes"], found["seconds"]
        if found.get("seconds") and found.get("bytes") is not None:
            out["seconds"] = round(found["seconds"], 3)
            out["gbit_per_s"] = round(found["bytes"] * 8 / found["seconds"] / 1e9, 4)
        if found.get("latency"):
            out["latency"] = latency_result(*found["latency"])
        return out

    def result(self, state, actions):
        return {"probe": state, "changed": False}
