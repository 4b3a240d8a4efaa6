"""Measure figures: the built-in network probe vs iperf3 on the same lab pair, and the wall time of
an all-pairs playbooks/measure.yml on 4 lab nodes.

On its own lab `dpb` (4 nodes, brought up with `datapath-lab --name dpb up`, always brought down):

    net_probe_builtin_gbit_s    median of --rounds runs of aiinfra.datapath.net_probe (tool builtin),
    net_probe_iperf3_gbit_s     and of the same with tool iperf3: node1 -> node2 on the rdma fabric,
                                the same streams and seconds, run through ansible-playbook
                                (tests/integration/playbooks/net_probe.yml), the two tools alternating
                                (which goes first alternates too), the client's Gbit/s as measure.yml
                                reports it
    ratio_builtin_vs_iperf3     goal >= 0.9 (and _best: the fastest run of each)
    measure_all_pairs_4_s       playbooks/measure.yml, mode all-pairs (6 pairs in 3 rounds), with the
                                settings of tests/integration/test_measure_lab.py (3 s loads of 4
                                streams, a 64 MiB storage test file), after nvme_layout (site.yml
                                --tags nvme_layout) mounted each node's cache; goal <= 60
    measure_all_pairs_4_rc      its exit status (0: every pair and gate passed)
    measure_ring_4x4_rails_s    playbooks/measure.yml, mode ring, on a second lab `dpr` of 4 nodes with 4 rails
                                in one shared subnet (`up --rails 4`) after site.yml --tags link_mtu,rail_routing:
                                4 pairs x 4 rails, every rail of a pair loaded at once, 3 s loads of 4 streams, no
                                storage probe (tests/integration/test_rails_lab.py's settings); with _rc, _pairs
                                (pass/rows) and _rail_findings (0: every rail's bytes stayed on its NIC)

Run as root: `.venv/bin/python bench/bench_measure.py [--rounds 3] [--streams 4] [--duration 3] [--part all|rails]`
(part of `make bench` through scripts/bench.sh). The lab is always torn down.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from datetime import datetime
from typing import Any

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "lab"))

from datapath_lab import Lab  # noqa: E402

BIN = os.path.join(REPO, ".venv", "bin")
LAB_NAME = "dpb"
RAILS_LAB = "dpr"
RAILS_VARS = {"measure_storage": False, "measure_counters": False, "measure_mode": "ring", "measure_wait": 10}
RAIL_KINDS = ("wrong-egress", "arp-flux", "rp-filter-drops", "slow-rail")
FABRIC = "rdma"
PORT = 5211
PAIR_PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "net_probe.yml")
SITE = os.path.join(REPO, "playbooks", "site.yml")
MEASURE = os.path.join(REPO, "playbooks", "measure.yml")
# the measure settings of tests/integration/test_measure_lab.py, all pairs
MEASURE_SPEC = {"mode": "all-pairs", "duration": 3, "streams": 4, "storage": {"test_file_size": "64MiB"}}
RUN_VARS = {"measure_storage_seq_bytes": 32 << 20, "measure_storage_random_seconds": 1.0, "measure_wait": 10}
SPAN = "%Y-%m-%dT%H:%M:%S.%fZ"  # the JSON callback's task start/end
ENV = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
       "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_DEPRECATION_WARNINGS": "0",
       "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}


def lab_cli(*args: str, check: bool = True, name: str = LAB_NAME) -> subprocess.CompletedProcess[str]:
    return subprocess.run([os.path.join(BIN, "datapath-lab"), "--name", name, *args], capture_output=True,
                          text=True, check=check, timeout=600)


def playbook(inventory: str, path: str, extra: dict[str, Any], *args: str) -> tuple[int, dict[str, Any], str]:
    """ansible-playbook with the JSON callback: (rc, parsed output, raw output)."""
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, path, "-e", json.dumps(extra),
                           *args], capture_output=True, text=True, cwd=REPO, env=ENV, timeout=900, check=False)
    try:
        data = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        data = {}
    return proc.returncode, data, proc.stdout + proc.stderr


def fail(message: str, output: str) -> SystemExit:
    log = os.path.join(REPO, ".cache", "bench", "failed-run.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w") as handle:
        handle.write(output)
    sys.stderr.write(f"full output: {log}\n" + output[-3000:])
    return SystemExit(message)


def pair_gbit(inventory: str, state: dict[str, Any], tool: str, streams: int, duration: float) -> float:
    """node1 (client) -> node2 (server) on the rdma fabric, both started by one play; the client's Gbit/s."""
    server = state["nodes"]["node2"]["interfaces"][FABRIC]["address"]
    client = state["nodes"]["node1"]["interfaces"][FABRIC]["address"]
    subnet = next(f["subnet"] for f in state["fabrics"] if f["name"] == FABRIC)
    extra = {"probe_common": {"port": PORT, "streams": streams, "duration": duration, "wait": 15.0, "tool": tool,
                              "allowed_networks": [subnet], "token": secrets.token_hex(16)},
             "probe_args": {"node2": {"role": "server", "address": server, "peer": client},
                            "node1": {"role": "client", "address": server, "source": client}}}
    rc, data, output = playbook(inventory, PAIR_PLAYBOOK, extra)
    probes = {}
    for play in data.get("plays", []):
        for task in play.get("tasks", []):
            if task.get("task", {}).get("name") == "Run the network probe":
                probes = {host: result.get("probe") or {} for host, result in task.get("hosts", {}).items()}
    if rc != 0 or not all(p.get("ok") for p in probes.values()) or len(probes) != 2:
        raise fail(f"the {tool} pair failed (rc={rc}): " + json.dumps({h: p.get("error") for h, p in probes.items()}),
                   output)
    return float(probes["node1"]["gbit_per_s"])


def task_seconds(data: dict[str, Any]) -> dict[str, float]:
    """Seconds of the play's tasks by part (from the JSON callback's task spans): the network rounds,
    the storage probe, everything else."""
    parts = {"net_rounds": 0.0, "storage": 0.0, "other": 0.0}
    for play in data.get("plays", []):
        for task in play.get("tasks", []):
            name = task.get("task", {}).get("name", "")
            span = task.get("task", {}).get("duration", {})
            if not (span.get("start") and span.get("end")):
                continue
            took = (datetime.strptime(span["end"], SPAN) - datetime.strptime(span["start"], SPAN)).total_seconds()
            part = ("net_rounds" if "Run every pair of this round at once" in name
                    else "storage" if "Read the cache's test file" in name else "other")
            parts[part] += took
    return parts


def lab_spec(inventory_dir: str) -> dict[str, Any]:
    with open(os.path.join(inventory_dir, "group_vars", "all", "datapath.yml")) as handle:
        spec: dict[str, Any] = yaml.safe_load(handle)["datapath"]
    spec["measure"] = copy.deepcopy(MEASURE_SPEC)
    return spec


def rails_ring(streams: int, duration: float) -> None:
    """A ring measure of 4 nodes x 4 rails on its own lab (shared subnet, routed per rail by site.yml)."""
    inventory_dir = os.path.join(REPO, ".cache", "bench", RAILS_LAB)
    inventory = os.path.join(inventory_dir, "hosts.yml")
    figures: dict[str, Any] = {}
    try:
        lab_cli("up", "--nodes", "4", "--rails", "4", "--nvme-size", "256M", "--inventory-dir", inventory_dir,
                name=RAILS_LAB)
        with open(os.path.join(inventory_dir, "group_vars", "all", "datapath.yml")) as handle:
            spec: dict[str, Any] = yaml.safe_load(handle)["datapath"]
        rc, _data, output = playbook(inventory, SITE, {"datapath": spec}, "--tags", "link_mtu,rail_routing")
        if rc != 0:
            raise fail("site.yml --tags link_mtu,rail_routing failed", output)
        report_dir = os.path.join(REPO, ".cache", "bench", "measure-" + RAILS_LAB)
        extra = {"datapath": spec, "measure_report_dir": report_dir, "measure_streams": streams,
                 "measure_duration": duration, **RAILS_VARS}
        t0 = time.perf_counter()
        rc, data, output = playbook(inventory, MEASURE, extra)
        figures["s"] = time.perf_counter() - t0
        figures["net_rounds_s"] = task_seconds(data)["net_rounds"]
        try:
            with open(os.path.join(report_dir, "measure.json")) as handle:
                report = json.load(handle)
        except (OSError, ValueError):
            raise fail("measure.yml (rails) wrote no report", output) from None
        if rc != 0:
            found = json.dumps(report.get("findings"))[:3000]
            sys.stderr.write(f"measure.yml (rails) failed; findings: {found}\n")
    finally:
        lab_cli("down", check=False, name=RAILS_LAB)
    print(f"measure_ring_4x4_rails_s: {figures['s']:.1f}")
    print(f"measure_ring_4x4_rails_net_rounds_s: {figures['net_rounds_s']:.1f}")
    print(f"measure_ring_4x4_rails_rc: {rc}")
    print(f"measure_ring_4x4_rails_pairs_pass: {sum(p['status'] == 'pass' for p in report['pairs'])}"
          f"/{len(report['pairs'])}")
    print(f"measure_ring_4x4_rails_rail_findings: {sum(f['kind'] in RAIL_KINDS for f in report['findings'])}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tool (median)")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds of load (whole: iperf3 takes seconds)")
    parser.add_argument("--part", choices=("all", "rails"), default="all",
                        help="all figures (default), or only the ring measure of 4 nodes x 4 rails")
    args = parser.parse_args()
    if args.part == "rails":
        rails_ring(args.streams, args.duration)
        return 0
    inventory_dir = os.path.join(REPO, ".cache", "bench", LAB_NAME)
    inventory = os.path.join(inventory_dir, "hosts.yml")
    figures: dict[str, Any] = {"host_load_1min": os.getloadavg()[0]}  # other load on the host makes the figures noisy
    runs: dict[str, list[float]] = {"builtin": [], "iperf3": []}
    lab = Lab(LAB_NAME)
    try:
        t0 = time.perf_counter()
        lab_cli("up", "--nodes", "4", "--nvme-size", "1G", "--inventory-dir", inventory_dir)
        figures["lab_up_4_s"] = time.perf_counter() - t0
        state = lab.load_state()
        if state is None:
            raise SystemExit(f"lab {LAB_NAME} has no state after up")
        for i in range(args.rounds):  # alternating, and which goes first alternates: host load hits both alike
            for tool in (("builtin", "iperf3") if i % 2 == 0 else ("iperf3", "builtin")):
                runs[tool].append(pair_gbit(inventory, state, tool, args.streams, args.duration))
        for node in state["nodes"]:
            if not state["nodes"][node]["nvme"].startswith("/dev/loop"):
                raise SystemExit(f"refusing to lay out {state['nodes'][node]['nvme']}: not a lab loop device")
        spec = lab_spec(inventory_dir)
        rc, _data, output = playbook(inventory, SITE, {"datapath": spec}, "--tags", "nvme_layout")
        if rc != 0:
            raise fail("site.yml --tags nvme_layout failed", output)
        report_dir = os.path.join(REPO, ".cache", "bench", "measure-" + LAB_NAME)
        t0 = time.perf_counter()
        extra = {"datapath": spec, "measure_report_dir": report_dir, **RUN_VARS}
        rc, data, output = playbook(inventory, MEASURE, extra)
        figures["measure_all_pairs_4_s"] = time.perf_counter() - t0
        figures.update(("measure_all_pairs_4_%s_s" % part, took) for part, took in task_seconds(data).items())
        figures["measure_all_pairs_4_rc"] = rc
        try:
            with open(os.path.join(report_dir, "measure.json")) as handle:
                report = json.load(handle)
        except (OSError, ValueError):
            raise fail("measure.yml wrote no report", output) from None
        figures["measure_all_pairs_4_pairs_pass"] = sum(p["status"] == "pass" for p in report["pairs"])
        figures["measure_all_pairs_4_pairs"] = len(report["pairs"])
        if rc != 0:
            sys.stderr.write("measure.yml failed; findings: " + json.dumps(report.get("findings"))[:3000] + "\n")
    finally:
        try:
            state = lab.load_state()
            for node in (state or {}).get("nodes", {}):  # the cache mount lives in the node's mount namespace
                lab.run_in(node, ["umount", "/mnt/model-cache"], check=False)
        finally:
            lab_cli("down", check=False)
    builtin, iperf = statistics.median(runs["builtin"]), statistics.median(runs["iperf3"])
    print(f"host_load_1min: {figures['host_load_1min']:.1f}")
    print(f"lab_up_4_s: {figures['lab_up_4_s']:.1f}")
    print(f"net_probe_streams: {args.streams}")
    print(f"net_probe_duration_s: {args.duration:g}")
    print(f"net_probe_builtin_runs_gbit_s: {' '.join(f'{v:.2f}' for v in runs['builtin'])}")
    print(f"net_probe_iperf3_runs_gbit_s: {' '.join(f'{v:.2f}' for v in runs['iperf3'])}")
    print(f"net_probe_builtin_gbit_s: {builtin:.2f}")
    print(f"net_probe_iperf3_gbit_s: {iperf:.2f}")
    print(f"ratio_builtin_vs_iperf3: {builtin / iperf:.3f}")
    # Fastest run of each: what either tool reaches without interference from other load on the host.
    print(f"ratio_builtin_vs_iperf3_best: {max(runs['builtin']) / max(runs['iperf3']):.3f}")
    print(f"measure_all_pairs_4_s: {figures['measure_all_pairs_4_s']:.1f}")
    for part in ("net_rounds", "storage", "other"):  # where the time goes (task spans; the rest is Ansible's start)
        print(f"measure_all_pairs_4_{part}_s: {figures[f'measure_all_pairs_4_{part}_s']:.1f}")
    print(f"measure_all_pairs_4_rc: {figures['measure_all_pairs_4_rc']}")
    print(f"measure_all_pairs_4_pairs_pass: {figures['measure_all_pairs_4_pairs_pass']}"
          f"/{figures['measure_all_pairs_4_pairs']}")
    rails_ring(args.streams, args.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
