# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The network probe with iperf3 (stdlib only): ``iperf3 -s -1 -J`` / ``iperf3 -c ... -J`` as a
child process, bounded by the probe's deadline, plus the built-in UDP latency echo.

The child is started with PR_SET_PDEATHSIG (SIGKILL), so it dies with the module even when
the module is killed; on timeout it gets SIGTERM (iperf3 then still prints its JSON), SIGKILL
after TERM_GRACE seconds, and is always reaped. The server's UDP echo is up before iperf3
starts listening; the client waits for the echo to answer (the server module is up), then runs
iperf3, again while iperf3 cannot connect yet and the wait lasts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe_parse import (
    iperf3_connect_failed,
    iperf3_summary,
    load_iperf3,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._net_probe_socket import (
    GRACE,
    Child,
    PairError,
    die_with_parent,
    echo_loop,
    latency_figures,
    latency_loop,
    now,
    open_echo,
    open_latency,
    same_address,
    wait_for_echo,
)

TERM_GRACE = 2.0


def run_child(argv, timeout, keep_going=None):
    """Run ``argv`` for at most ``timeout`` s; (rc, stdout, stderr, timed_out).

    The fork happens with no thread running besides this one (echo and prober are processes),
    so the ``preexec_fn`` that arms PR_SET_PDEATHSIG is safe. ``keep_going`` (seconds,
    predicate) checks once after that many seconds whether to wait on: False stops the child
    early. The child always ends here: SIGTERM, then SIGKILL, then it is reaped.
    """
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            close_fds=True, preexec_fn=die_with_parent(), env=dict(os.environ, LC_ALL="C"))
    deadline = now() + timeout
    timed_out = False
    try:
        try:
            if keep_going is not None and keep_going[0] < timeout:
                try:
                    out, err = proc.communicate(timeout=max(0.1, keep_going[0]))
                except subprocess.TimeoutExpired:
                    if not keep_going[1]():
                        raise
                    out, err = proc.communicate(timeout=max(0.1, deadline - now()))
            else:
                out, err = proc.communicate(timeout=max(0.1, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=TERM_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, _text(out), _text(err), timed_out


def _text(data):
    return (data or b"").decode("utf-8", "replace")


def established(port, tables=("/proc/self/net/tcp", "/proc/self/net/tcp6")):
    """Whether this network namespace has an established TCP connection on local ``port``."""
    for table in tables:
        try:
            with open(table) as handle:
                lines = handle.read().splitlines()[1:]
        except (IOError, OSError):
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def _extra(p):
    return ["-w", str(p["socket_buffer"])] if p.get("socket_buffer") else []


def _why(summary, role, stderr, timed_out):
    error = summary["error"]
    if error and any(word in error for word in ("unexpectedly", "reset by peer", "Broken pipe")):
        peer = "client" if role == "server" else "server"
        error = "the %s went away mid-test (%s)" % (peer, error)
    if timed_out and summary["connected"] == 0 and role == "server":
        error = "no client connected within the wait (iperf3 server stopped)"
    elif timed_out:
        error = "iperf3 ran past the deadline and was stopped" + (" (%s)" % error if error else "")
    if error == "iperf3 printed no JSON" and stderr.strip():
        error += ": %s" % stderr.strip().splitlines()[-1]
    summary["error"] = error
    summary["ok"] = error is None
    return summary


def run_server(p, iperf3):
    t0 = now()
    hard = t0 + p["wait"] + p["duration"] + GRACE
    argv = [iperf3, "-s", "-1", "-J", "-B", p["address"], "-p", str(p["port"])] + _extra(p)
    udp = open_echo(p["address"], p["port"])
    try:
        echo = Child(echo_loop(udp, p["peer"], bytes.fromhex(p["token"])), hard)
    finally:
        udp.close()
    try:
        rc, out, err, timed_out = run_child(argv, hard - now(),
                                            keep_going=(p["wait"], lambda: established(p["port"])))
    finally:
        echo.stop()
    summary = _why(iperf3_summary(load_iperf3(out), "server"), "server", err, timed_out)
    strangers = [host for host in summary.get("remotes") or [] if not same_address(host, p["peer"])]
    if strangers:
        # iperf3 accepts whoever connects first (it has no token): what it measured is not the pair's
        summary.update(ok=False, bytes=None, seconds=None, gbit_per_s=None,
                       error="iperf3 served %s, not the planned peer %s: result discarded (iperf3 has no per-run "
                             "token; docs/security.md)" % (", ".join(strangers), p["peer"]))
    return summary


def run_client(p, iperf3):
    t0 = now()
    hard = t0 + p["wait"] + p["duration"] + GRACE
    token = bytes.fromhex(p["token"])
    wait_for_echo(p["source"], p["address"], p["port"], token, t0 + p["wait"])
    argv = [iperf3, "-c", p["address"], "-B", p["source"], "-p", str(p["port"]), "-P", str(p["streams"]),
            "-t", str(max(1, int(round(p["duration"])))), "-J"] + _extra(p)
    if p["max_bytes"]:
        argv += ["-n", str(p["max_bytes"])]
    while True:  # again while iperf3 finds no server yet and the wait lasts
        udp = open_latency(p["source"], p["address"], p["port"])
        try:
            prober = Child(latency_loop(udp, token, p["latency_interval"]), hard)
        finally:
            udp.close()
        try:
            prober.go()
            rc, out, err, timed_out = run_child(argv, hard - now())
        finally:
            report = prober.stop()
        data = load_iperf3(out)
        if iperf3_connect_failed(data) and now() < t0 + p["wait"]:
            time.sleep(0.3)
            continue
        break
    if iperf3_connect_failed(data):
        raise PairError("peer unreachable: %s" % data["error"])
    summary = _why(iperf3_summary(data, "client"), "client", err, timed_out)
    summary["latency"] = latency_figures(report)
    return summary
