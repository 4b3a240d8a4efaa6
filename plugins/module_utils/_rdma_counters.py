# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NIC and RDMA counters of a node, and their deltas over a run (stdlib only).

Per network interface: every numeric counter of ``ethtool -S IF``, and, where the NIC has an
RDMA device, the files of ``/sys/class/infiniband/DEV/ports/P/counters`` and ``hw_counters``
(read through the netdev's PCI device, ``/sys/class/net/IF/device/infiniband/DEV``, which is the
same sysfs directory). An interface without ``/sys/class/net/IF/device`` (veth, bridge, bond) has
no NIC counters: it is reported ``supported: false`` with the reason, never as an error.

:func:`counter_deltas` (used by the controller) subtracts two snapshots; a counter that went
down (driver reload, port reset, a 32-bit counter wrapping) is listed under ``reset`` and never
given a negative delta. :data:`ROCE_COUNTERS` names the counters the bottleneck findings read,
:data:`MEANINGS` says in one line what each means.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

_PRIO = range(8)

# The counters the findings read, in the order a report lists them.
ROCE_COUNTERS = (
    ["rx_prio%d_pause" % p for p in _PRIO]
    + ["tx_prio%d_pause" % p for p in _PRIO]
    + ["rx_prio%d_discards" % p for p in _PRIO]
    + ["rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer", "rx_pause_ctrl_phy", "tx_pause_ctrl_phy",
       "tx_pause_storm_warning_events", "tx_pause_storm_error_events", "rx_crc_errors_phy",
       "np_cnp_sent", "np_ecn_marked_roce_packets", "rp_cnp_handled", "rp_cnp_ignored",
       "out_of_sequence", "packet_seq_err", "out_of_buffer", "roce_adp_retrans", "roce_adp_retrans_to",
       "roce_slow_restart", "local_ack_timeout_err", "rnr_nak_retry_err", "rx_icrc_encapsulated",
       "port_xmit_wait", "port_rcv_errors", "link_downed"]
)

MEANINGS = {
    "rx_discards_phy": "packets the NIC dropped on receive for lack of buffer: on a lossless priority, PFC is "
                       "off or too late (QoS)",
    "tx_discards_phy": "packets dropped on transmit: the port could not send (head-of-line blocking, pause storm)",
    "rx_out_of_buffer": "packets dropped because the driver had no receive descriptor: the host is slow to "
                        "drain its rings (CPU, ring size)",
    "rx_pause_ctrl_phy": "pause/PFC frames received on the port (all priorities): the peer told us to stop",
    "tx_pause_ctrl_phy": "pause/PFC frames sent on the port (all priorities): we told the peer to stop",
    "tx_pause_storm_warning_events": "the NIC stalled sending pause frames longer than the warning watermark",
    "tx_pause_storm_error_events": "the NIC stalled so long it stopped honouring pause (pause storm prevention)",
    "rx_crc_errors_phy": "frames received with a bad FCS: cable, optic or switch port",
    "np_cnp_sent": "CNPs this node sent as notification point after receiving ECN-marked RoCE packets",
    "np_ecn_marked_roce_packets": "RoCE packets received with ECN CE set: a switch queue on the path is "
                                  "congested; with no CNPs, ECN reaction is off",
    "rp_cnp_handled": "CNPs received and acted on as reaction point: this sender slowed down (DCQCN)",
    "rp_cnp_ignored": "CNPs received but ignored (QP gone or congestion control off on that priority)",
    "out_of_sequence": "RoCE packets received out of sequence: a packet before them was lost (lossy fabric)",
    "packet_seq_err": "NAK sequence errors received: the peer saw a gap and asked for a retransmission",
    "out_of_buffer": "RDMA packets dropped because no receive WQE was posted (application too slow, RNR)",
    "roce_adp_retrans": "adaptive retransmissions of RoCE traffic: losses recovered by the NIC",
    "roce_adp_retrans_to": "adaptive retransmissions that hit their timeout",
    "roce_slow_restart": "times the sender fell back to slow restart after repeated loss",
    "local_ack_timeout_err": "ACK timeouts on the requester: retries exhausted (loss, congestion, dead peer)",
    "rnr_nak_retry_err": "receiver-not-ready NAKs beyond the retry limit",
    "rx_icrc_encapsulated": "RoCE packets with a bad ICRC: corruption on the wire",
    "port_xmit_wait": "ticks the port had data to send but no credit (InfiniBand) / was paused",
    "port_rcv_errors": "packets received with errors on the RDMA port",
    "link_downed": "times the RDMA port link went down",
}
for _p in _PRIO:
    MEANINGS["rx_prio%d_pause" % _p] = ("PFC pause frames received for priority %d: the switch held our "
                                        "sends on it (congestion downstream)" % _p)
    MEANINGS["tx_prio%d_pause" % _p] = ("PFC pause frames sent for priority %d: our receive buffer for it "
                                        "filled up (host or NIC too slow)" % _p)
    MEANINGS["rx_prio%d_discards" % _p] = ("packets of priority %d dropped on receive: loss on that priority; "
                                           "on the lossless one, PFC is not working" % _p)

SOURCES = ("ethtool", "counters", "hw_counters")
_IFNAME = re.compile(r"^[^/\s:]{1,15}\Z")


def meaning(name):
    """One line on what counter ``name`` means, or None when this module has nothing to say."""
    return MEANINGS.get(name)


def parse_ethtool_stats(text):
    """``ethtool -S`` output -> {name: int}: every line ``name: integer``; other lines are skipped.

    A name keeps any ``": "`` it contains (bnx2x ``[0]: rx_bytes``, be2net ``rxq0: rx_bytes``): the
    value is what follows the last colon.
    """
    stats = {}
    for line in (text or "").splitlines():
        name, sep, value = line.rpartition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name or not re.match(r"^-?[0-9]{1,20}\Z", value):  # a counter is a u64
            continue
        stats[name] = int(value)
    return stats


def parse_counter_listing(text):
    """``name: value`` listing (``show_counters``, ``grep -s . DIR/*``) -> {name: int}; as ethtool."""
    return parse_ethtool_stats(text)


def parse_counter_value(text):
    """One sysfs counter file -> int, or None (``N/A (no PMA)``, empty, unreadable text)."""
    text = (text or "").strip()
    return int(text) if re.match(r"^[0-9]{1,20}\Z", text) else None


def _delta_block(before, after):
    deltas, reset = {}, []
    for name, now in after.items():
        was = before.get(name)
        if was is None or now is None:
            continue
        if now < was:
            reset.append(name)
        else:
            deltas[name] = now - was
    return deltas, sorted(reset)


def counter_deltas(before, after):
    """Per interface, how much every counter rose between two ``counters`` snapshots.

    Returns ``{IF: {supported, reason, ethtool: {name: delta}, counters: {...}, hw_counters: {...},
    reset: ["ethtool:NAME", ...], roce: {name: delta}}}``. ``reset`` names every counter that went
    down (a reset or a wrap): it gets no delta at all, never a negative one. ``roce`` is the view of
    :data:`ROCE_COUNTERS` (RDMA sysfs first, then ethtool). An interface missing from either snapshot
    or unsupported in either is ``supported: false`` with the reason and empty blocks.
    """
    out = {}
    for name in sorted(set(before or {}) | set(after or {})):
        old, new = (before or {}).get(name), (after or {}).get(name)
        entry = {"supported": False, "reason": None, "ethtool": {}, "counters": {}, "hw_counters": {},
                 "reset": [], "roce": {}}
        out[name] = entry
        if old is None or new is None:
            entry["reason"] = "only in the %s snapshot" % ("after" if old is None else "before")
            continue
        if not (old.get("supported") and new.get("supported")):
            entry["reason"] = new.get("reason") or old.get("reason") or "not supported"
            continue
        entry["supported"] = True
        for source in SOURCES:
            was, now = _source(old, source), _source(new, source)
            entry[source], reset = _delta_block(was, now)
            entry["reset"] += ["%s:%s" % (source, counter) for counter in reset]
        for counter in ROCE_COUNTERS:
            for source in ("hw_counters", "counters", "ethtool"):
                if counter in entry[source]:
                    entry["roce"][counter] = entry[source][counter]
                    break
    return out


def _source(snapshot, source):
    if source == "ethtool":
        return snapshot.get("ethtool") or {}
    return (snapshot.get("rdma") or {}).get(source) or {}


def roce_view(entry):
    """The :data:`ROCE_COUNTERS` present in one interface's snapshot (RDMA sysfs first, then ethtool)."""
    found = {}
    for counter in ROCE_COUNTERS:
        for source in ("hw_counters", "counters", "ethtool"):
            values = _source(entry, source)
            if counter in values:
                found[counter] = values[counter]
                break
    return found


class RdmaCounters(Capability):
    """``ethtool -S`` and RDMA port counters per interface (read-only)."""

    name = "rdma_counters"
    read_only = True

    @classmethod
    def options(cls):
        return dict(interfaces=dict(type="list", elements="str"))

    def validate(self):
        bad = [name for name in self.params.get("interfaces") or [] if not _IFNAME.match(name or "")
               or name in (".", "..")]
        if bad:
            raise CapabilityError("rdma_counters: not a network interface name: %s" % ", ".join(sorted(bad)),
                                  errors=bad)

    def read(self):
        notes = []
        wanted = self.params.get("interfaces")
        if wanted is None:
            wanted = [n for n in self.root.listdir("/sys/class/net") if self._has_device(n)]
            if not wanted:
                notes.append("no interface with /sys/class/net/IF/device (only virtual interfaces): "
                             "no NIC counters on this node")
        ethtool = self.runner.which("ethtool")
        if not ethtool and wanted:
            notes.append("ethtool is not installed: ethtool -S counters are not read")
        counters = {}
        for name in wanted:
            counters[name] = self._interface(name, ethtool, notes)
        return {"counters": counters, "notes": notes}

    def _has_device(self, name):
        return self.root.exists("/sys/class/net/%s/device" % name)

    def _interface(self, name, ethtool, notes):
        entry = {"supported": False, "reason": None, "ethtool": {},
                 "rdma": {"device": None, "port": None, "counters": {}, "hw_counters": {}}}
        if not self.root.exists("/sys/class/net/%s" % name):
            entry["reason"] = "no interface %s on this node" % name
            return entry
        if not self._has_device(name):
            entry["reason"] = "no /sys/class/net/%s/device: virtual interface, no NIC counters" % name
            return entry
        failed = None
        if ethtool:
            rc, out, err = self.runner.run([ethtool, "-S", name], check=False)
            if rc == 0:
                entry["ethtool"] = parse_ethtool_stats(out)
            else:
                failed = "ethtool -S %s failed (rc=%s): %s" % (name, rc, (err or out or "").strip())
                notes.append(failed)
        self._rdma(name, entry["rdma"], notes)
        entry["supported"] = bool(entry["ethtool"] or entry["rdma"]["device"])
        if not entry["supported"]:
            entry["reason"] = failed or ("ethtool is not installed and %s has no RDMA device" % name
                                         if not ethtool else "ethtool -S %s reports no counters and it has "
                                         "no RDMA device" % name)
        return entry

    def _rdma(self, name, rdma, notes):
        base = "/sys/class/net/%s/device/infiniband" % name
        devices = self.root.listdir(base)
        if not devices:
            return
        device = devices[0]
        if len(devices) > 1:
            notes.append("%s: several RDMA devices (%s), read %s" % (name, ", ".join(devices), device))
        ports = [p for p in self.root.listdir("%s/%s/ports" % (base, device)) if p.isdigit()]
        port = None
        for candidate in ports:
            try:
                ndev = self.root.read("%s/%s/ports/%s/gid_attrs/ndevs/0" % (base, device, candidate))
            except (IOError, OSError):  # an unset GID reads as EINVAL
                ndev = None
            if ndev == name:
                port = candidate
                break
        if port is None and ports:
            port = ports[0]
        rdma["device"] = device
        rdma["port"] = int(port) if port else None
        if port is None:
            notes.append("%s: RDMA device %s has no ports" % (name, device))
            return
        for kind in ("counters", "hw_counters"):
            directory = "%s/%s/ports/%s/%s" % (base, device, port, kind)
            for counter in self.root.listdir(directory):
                try:
                    value = parse_counter_value(self.root.read("%s/%s" % (directory, counter)))
                except (IOError, OSError) as exc:
                    notes.append("%s: cannot read %s/%s: %s" % (name, kind, counter, exc))
                    continue
                if value is not None:
                    rdma[kind][counter] = value

    def result(self, state, actions):
        return dict(counters=state["counters"], notes=state["notes"], changed=False)
