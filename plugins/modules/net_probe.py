#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: net_probe
short_description: One side of a TCP throughput, retransmit and latency test between two nodes
version_added: "0.4.0"
requirements:
  - "Python 3 on the node (standard library only) for the builtin tool"
  - "iperf3 (tool: iperf3; optional)"
description:
  - Measures one node pair on one fabric. Run it on both nodes at the same time (one play with
    both hosts). The V(server) listens on its fabric address, the V(client) connects from its
    own fabric address and sends O(streams) parallel TCP streams for O(duration) seconds (or
    until O(max_bytes)). While the load runs the client sends a small UDP datagram every
    O(latency_interval) seconds to an echo on the server (TCP O(port) + 1) and reports its loss
    and round-trip time percentiles.
  - Reports throughput (Gbit/s), TCP retransmits, segments, smoothed RTT and congestion window
    of the streams (C(TCP_INFO), or iperf3's JSON), the deltas of the node's retransmit and
    timeout counters (C(/proc/net/snmp), C(/proc/net/netstat)) over the run, and the node's
    socket-buffer sysctls. Socket buffers are left to the node's sysctls unless
    O(socket_buffer) is set.
  - Every address must lie in O(allowed_networks); anything else fails the module before a
    socket is opened ("refused before any traffic is sent").
  - A pair that fails (peer unreachable, no client came, a peer killed mid-test, iperf3 missing)
    returns C(ok=false) with the reason in C(error); the module itself does not fail, so the
    run goes on. Only bad parameters and refused addresses fail it.
  - Bounded in time and bytes. The hard deadline of either side is O(wait) + O(duration) + 5
    seconds; the server closes its listener and every socket on every path (also when no
    client comes), every thread ends, and an iperf3 child is stopped (SIGTERM, then SIGKILL)
    and reaped, and dies with the module if the module is killed.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Reports what would be measured (C(ok=null)) and opens no socket.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux (C(TCP_INFO), C(/proc/net)). C(iperf3) 3.x for O(tool=iperf3).
options:
  role:
    description: This node's side of the pair.
    type: str
    required: true
    choices: [server, client]
  address:
    description:
      - The server's fabric address (IP literal). The server binds it; the client connects to it.
    type: str
    required: true
  source:
    description:
      - The client's own fabric address (IP literal); every client socket binds it before it
        connects. Required for O(role=client).
    type: str
  port:
    description: TCP port of the test; the UDP latency echo uses O(port) + 1 on the same address.
    type: int
    default: 5201
  streams:
    description: Parallel TCP streams, 1-64. Server and client must agree.
    type: int
    default: 4
  duration:
    description:
      - Seconds of load, 0.5-300. Server and client must agree. iperf3 takes whole seconds
        (rounded, at least 1).
    type: float
    default: 5.0
  max_bytes:
    description:
      - Stop sending after this many bytes in all (0 = no cap). With iperf3 this is C(-n), which
        replaces the time limit (the hard deadline still holds).
    type: int
    default: 0
  wait:
    description:
      - Seconds the server waits for the client, and the client keeps retrying to connect
        (Ansible starts both sides at about the same time), 0.5-600.
    type: float
    default: 30.0
  latency_interval:
    description: Seconds between two UDP latency datagrams while the load runs, 0.001-10.
    type: float
    default: 0.02
  tool:
    description:
      - V(builtin) (sockets and threads, standard library) or V(iperf3)
        (C(iperf3 -s -1 -J -B ADDR -p PORT) / C(iperf3 -c ADDR -B SOURCE -p PORT -P N -t T -J)).
    type: str
    default: builtin
    choices: [builtin, iperf3]
  allowed_networks:
    description:
      - The fabric subnets (CIDR) the probe may use. O(address) and O(source) must lie in one
        of them, else the module fails before any traffic is sent.
    type: list
    elements: str
    required: true
  socket_buffer:
    description:
      - Set C(SO_SNDBUF) and C(SO_RCVBUF) of the test sockets to this many bytes (iperf3 C(-w)).
        Unset (the default) measures with the node's own C(tcp_rmem)/C(tcp_wmem).
    type: int
extends_documentation_fragment:
  - aiinfra.datapath.node
notes:
  - Read-only and takes no node lock. Counters and sysctls are read below O(root); the sockets
    are the node's own.
  - O(tool=iperf3) reports no segment count; C(tcp.segments_sent) is then the node's
    C(TcpOutSegs) delta over the run.
seealso:
  - module: aiinfra.datapath.path_check
"""

EXAMPLES = r"""
- name: node2 serves, node1 measures, on the rdma fabric, both at once
  aiinfra.datapath.net_probe: {}
  args: "{{ pair_args[inventory_hostname] }}"
  vars:
    common: {port: 5201, streams: 4, duration: 5, allowed_networks: [198.18.1.0/24]}
    pair_args:
      node2: "{{ common | combine({'role': 'server', 'address': '198.18.1.12'}) }}"
      node1: "{{ common | combine({'role': 'client', 'address': '198.18.1.12', 'source': '198.18.1.11'}) }}"
  register: probe
"""

RETURN = r"""
probe:
  description: What this side measured. Fields that do not apply to a side or a tool are null.
  returned: always
  type: dict
  contains:
    role: {description: O(role)., type: str}
    address: {description: O(address)., type: str}
    source: {description: O(source)., type: str}
    port: {description: O(port)., type: int}
    tool: {description: O(tool)., type: str}
    streams: {description: O(streams)., type: int}
    duration: {description: O(duration)., type: float}
    max_bytes: {description: O(max_bytes)., type: int}
    ok: {description: "The pair worked; null in check mode.", type: bool}
    error: {description: "Why the pair failed; null when it did not.", type: str}
    seconds: {description: Seconds of the measurement., type: float}
    bytes: {description: "Bytes the server received (client: as the server confirmed).", type: int}
    gbit_per_s: {description: bytes x 8 / seconds / 10^9., type: float}
    tcp:
      description: >-
        C(retransmits), C(spurious_retransmits) (those the receiver reported as duplicates with
        DSACK: the first copy had arrived, late; C(tcpi_dsack_dups), with iperf3 the node's
        C(TcpExtTCPDSACKRecvSegs)), C(segments_sent) (data segments) and C(reorderings)
        (C(tcpi_reord_seen)) summed over the streams; C(retransmit_share), the share of the
        segments sent that were retransmitted to repair a loss (retransmits less the spurious
        ones, all of them where the spurious ones are unknown); C(rtt_ms) and C(rttvar_ms)
        averaged, C(snd_cwnd) (bytes) averaged; the client's are the sender's.
      type: dict
    netstat:
      description: >-
        Deltas over the run of C(TcpRetransSegs), C(TcpExtTCPLostRetransmit), C(TcpExtTCPTimeouts),
        C(TcpOutSegs) and C(TcpExtTCPDSACKRecvSegs) of the node.
      type: dict
    latency:
      description: "Client: C(sent), C(received), C(loss_pct), C(p50_ms), C(p99_ms) of the UDP echo during the load."
      type: dict
    socket_buffers:
      description: C(tcp_rmem), C(tcp_wmem), C(rmem_max), C(wmem_max) of the node, as strings.
      type: dict
  sample:
    {role: client, address: 198.18.1.12, source: 198.18.1.11, port: 5201, tool: builtin, ok: true, error: null,
     streams: 4, duration: 5.0, max_bytes: 0, seconds: 5.01, bytes: 6012534784, gbit_per_s: 9.6009,
     tcp: {retransmits: 12, spurious_retransmits: 9, segments_sent: 672001, retransmit_share: 4.0e-06,
           reorderings: 5, rtt_ms: 1.21, rttvar_ms: 0.6, snd_cwnd: 1789600},
     netstat: {TcpRetransSegs: 12, TcpExtTCPLostRetransmit: 0, TcpExtTCPTimeouts: 0, TcpOutSegs: 672120,
               TcpExtTCPDSACKRecvSegs: 9},
     latency: {sent: 250, received: 250, loss_pct: 0.0, p50_ms: 0.41, p99_ms: 2.3},
     socket_buffers: {tcp_rmem: "4096 131072 6291456", tcp_wmem: "4096 16384 4194304", rmem_max: "212992",
                      wmem_max: "212992"}}
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe import NetProbe


def main():
    module_main(NetProbe)


if __name__ == "__main__":
    main()
