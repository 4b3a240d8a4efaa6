"""Benchmark: validate and plan a generated 10,000-node inventory, and `datapath validate` on 10k and 100k hosts.

    .venv/bin/python bench/bench_spec.py [--nodes 10000] [--sizes 10000,100000] [--repeat 3]
                                         [--before-rev REV] [--no-cli]

Prints ``name: value`` lines, each figure with its goal next to it. The spec is inventories/example's;
hosts are spread over racks of 250 (rack_b-style profiles on half of them), 1% have a host override
and facts vary in memory size, so the planner cannot share one result for every host.

In-process (``--nodes``): validate + plan, goal <= 2 s and <= 500 MB peak (tracemalloc).

The CLI (issue 18: what a user waits for): each size is written to disk as a YAML inventory directory
(hosts.yml + group_vars/all/datapath.yml) and ``datapath validate DIR --format json`` runs as its own
process, interleaved round by round (median of --repeat) with the variants it is compared to:

* ``now``: this checkout;
* ``pyyaml``: this checkout with DATAPATH_YAML_BUILDER=pyyaml (PyYAML's Python composer and
  constructor over libyaml, then the alias/size pass: the YAML reading as it was);
* ``before`` (with --before-rev): plugins/plugin_utils/cluster_spec of that git revision.

Wall time is what the goal is about; on a shared machine it also holds the time spent waiting for a
CPU, so each variant's CPU time (user + sys of the process) and peak RSS are printed too, with the
1-minute load average. Goals: 10k hosts <= 1 s; 100k hosts <= 5 s and <= 1 GB.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, ".collections"))

from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import (  # noqa: E402
    Planner,
    parse_spec,
    validate_spec,
)
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.loader import load_spec_file  # noqa: E402


def generate(nodes: int) -> tuple[Any, dict[str, tuple[list[str], dict[str, Any]]]]:
    spec = copy.deepcopy(load_spec_file(os.path.join(REPO, "inventories", "example", "group_vars", "all",
                                                     "datapath.yml")))
    hosts: dict[str, tuple[list[str], dict[str, Any]]] = {}
    overrides: dict[str, Any] = {}
    for n in range(nodes):
        name = f"gpu-{n:05d}"
        rack = f"rack_{'a' if (n // 250) % 2 == 0 else 'b'}"
        facts = {"datapath_memory_bytes": (2 if n % 3 else 1) * 2**40, "datapath_numa_nodes": 2}
        hosts[name] = (["gpu_nodes", rack, f"rack{n // 250:02d}"], facts)
        if n % 100 == 0:
            overrides[name] = {"sysctl": {"net.ipv4.tcp_rmem": "4096 262144 67108864"},
                               "k8s": {"labels": {"aiinfra.io/canary": "true"}}}
    spec["hosts"] = overrides
    return spec, hosts


_RUNNER = """
import json, os, sys, time
wall0, cpu0 = time.perf_counter(), time.process_time()
sys.path.insert(0, sys.argv[1])
import aiinfra_datapath_spec.cli as cli
if not cli.__file__.startswith(sys.argv[1]):
    sys.exit(f"bench: imported {cli.__file__}, not the copy under {sys.argv[1]}")
wall1, cpu1 = time.perf_counter(), time.process_time()
code = cli.main(sys.argv[3:])
wall2, cpu2 = time.perf_counter(), time.process_time()
with open("/proc/self/status") as status:  # VmHWM: this program's peak (ru_maxrss also counts the fork)
    hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
with open(sys.argv[2], "w") as out:
    json.dump({"import_s": wall1 - wall0, "command_s": wall2 - wall1, "command_cpu_s": cpu2 - cpu1,
               "hwm_mb": hwm / 1024}, out)
sys.exit(code)
"""
GOALS_S = {10000: 1.0, 100000: 5.0}
GOAL_RSS_MB = 1024


def size_name(nodes: int) -> str:
    return f"{nodes // 1000}k" if nodes % 1000 == 0 else str(nodes)


def write_inventory(directory: str, spec: Any, hosts: dict[str, tuple[list[str], dict[str, Any]]]) -> None:
    """hosts.yml (one flow mapping of facts per host, grouped by rack) and group_vars/all/datapath.yml."""
    from ruamel.yaml import YAML
    os.makedirs(os.path.join(directory, "group_vars", "all"))
    racks: dict[str, list[str]] = {}
    for host, (groups, facts) in hosts.items():
        inline = ", ".join(f"{key}: {value}" for key, value in facts.items())
        racks.setdefault(groups[1], []).append(f"            {host}: {{{inline}}}\n")
    with open(os.path.join(directory, "hosts.yml"), "w") as handle:
        handle.write("all:\n  children:\n    gpu_nodes:\n      children:\n")
        for rack, lines in racks.items():
            handle.write(f"        {rack}:\n          hosts:\n")
            handle.writelines(lines)
    with open(os.path.join(directory, "group_vars", "all", "datapath.yml"), "w") as handle:
        YAML(typ="safe", pure=True).dump({"datapath": spec}, handle)


def package_copy(base: str, name: str, rev: str | None) -> str:
    """A directory holding ``aiinfra_datapath_spec``: this checkout's cluster_spec, or ``rev``'s."""
    root = os.path.join(base, name)
    os.makedirs(root)
    source = os.path.join(REPO, "plugins", "plugin_utils", "cluster_spec")
    if rev is None:
        os.symlink(source, os.path.join(root, "aiinfra_datapath_spec"))
        return root
    archive = subprocess.run(["git", "-C", REPO, "archive", rev, "plugins"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(os.path.join(root, "tree"), filter="data")
    os.symlink(os.path.join(root, "tree", "plugins", "plugin_utils", "cluster_spec"),
               os.path.join(root, "aiinfra_datapath_spec"))
    return root


def run_cli(package: str, target: str, env: dict[str, str], nodes: int) -> dict[str, float]:
    """Figures of one ``datapath validate TARGET --format json`` process: wall and CPU (user + sys)
    seconds of the whole process, the same of the command once imported, and its peak RSS."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(suffix=".json") as figures:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _RUNNER, package, figures.name,
                                 "validate", target, "--format", "json"], stdout=out, stderr=err, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = out.read().decode()
        if proc.returncode != 0:
            raise SystemExit(f"datapath validate exited {proc.returncode}: {err.read().decode()[-2000:]}{text[-2000:]}")
        inner = json.load(figures)
    report = json.loads(text)
    if report["hosts"] != nodes or not report["valid"]:
        raise SystemExit(f"datapath validate: {report['hosts']} hosts, valid={report['valid']}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, **inner}


def cli_figures(sizes: list[int], repeat: int, before_rev: str | None) -> bool:
    base_env = {k: v for k, v in os.environ.items() if k != "DATAPATH_YAML_BUILDER"}
    base_env.setdefault("ANSIBLE_CONFIG", os.path.join(REPO, "ansible.cfg"))
    met = True
    with tempfile.TemporaryDirectory(prefix="bench-spec-") as tmp:
        variants = [("now", package_copy(tmp, "now", None), base_env),
                    ("pyyaml", package_copy(tmp, "pyyaml", None), {**base_env, "DATAPATH_YAML_BUILDER": "pyyaml"})]
        if before_rev:
            variants.append(("before", package_copy(tmp, "before", before_rev), base_env))
            print(f"before_rev: {before_rev}")
        targets = {}
        for nodes in sizes:
            spec, hosts = generate(nodes)
            targets[nodes] = os.path.join(tmp, f"inv-{nodes}")
            write_inventory(targets[nodes], spec, hosts)
            del spec, hosts
        results: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
        for _round in range(repeat):  # interleaved: every variant sees the same machine, round by round
            for nodes in sizes:
                for name, package, env in variants:
                    results.setdefault((nodes, name), []).append(run_cli(package, targets[nodes], env, nodes))
        print(f"load_average_1m: {os.getloadavg()[0]:.1f} (2 CPUs: above 2, wall times include waiting for a CPU)")
        for nodes in sizes:
            tag = size_name(nodes)
            goal = GOALS_S.get(nodes)
            for name, _package, _env in variants:
                runs = results[(nodes, name)]

                def med(key: str, runs: list[dict[str, float]] = runs) -> float:
                    return statistics.median(r[key] for r in runs)
                rss = max(r["hwm_mb"] for r in runs)
                prefix = f"validate_{tag}" if name == "now" else f"validate_{tag}_{name}"
                note = f" (goal <= {goal:g})" if goal and name == "now" else ""
                print(f"{prefix}_s: {med('wall'):.2f}{note}")
                print(f"{prefix}_cpu_s: {med('cpu'):.2f}{note}")
                print(f"{prefix}_command_s: {med('command_s'):.2f} (imports {med('import_s'):.2f} s before it)")
                print(f"{prefix}_command_cpu_s: {med('command_cpu_s'):.2f}")
                print(f"{prefix}_rss_mb: {rss:.0f}" + (f" (goal <= {GOAL_RSS_MB})" if name == "now" else ""))
                if name == "now":
                    met = met and rss <= GOAL_RSS_MB and (goal is None or med("wall") <= goal)
            now_wall = statistics.median(r["wall"] for r in results[(nodes, "now")])
            for name, _package, _env in variants[1:]:
                other = statistics.median(r["wall"] for r in results[(nodes, name)])
                print(f"validate_{tag}_speedup_vs_{name}: {other / now_wall:.1f}")
    print(f"cli_goal_met: {met}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--sizes", default="10000,100000", help="host counts for the CLI figures")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the CLI figures (median)")
    parser.add_argument("--before-rev", help="also time the cluster_spec of this git revision")
    parser.add_argument("--no-cli", action="store_true", help="only the in-process figures")
    parser.add_argument("--cli", action="store_true", help=argparse.SUPPRESS)  # the default now
    args = parser.parse_args()
    spec, hosts = generate(args.nodes)

    def run() -> tuple[list[Any], Planner, dict[str, Any], float, float, float]:
        start = time.perf_counter()
        errors = validate_spec(spec)
        validated = time.perf_counter()
        planner = Planner(parse_spec(spec))
        plans = {host: planner.plan(host, groups, facts) for host, (groups, facts) in hosts.items()}
        return errors, planner, plans, start, validated, time.perf_counter()

    # Timing run without tracemalloc (it slows allocation), then a second run to measure memory.
    errors, planner, plans, start, validated, done = run()
    del plans
    tracemalloc.start()
    run()
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    print(f"nodes: {args.nodes}")
    print(f"spec_errors: {len(errors)}")
    print(f"plans: {len(hosts)}")
    print(f"distinct_plan_templates: {planner.templates}")
    print(f"validate_seconds: {validated - start:.3f}")
    print(f"plan_seconds: {done - validated:.3f}")
    print(f"total_seconds: {done - start:.3f} (goal <= 2)")
    print(f"tracemalloc_peak_mib: {peak / 2**20:.1f} (goal <= 500)")
    print(f"max_rss_mib: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
    print(f"goal_met: {done - start <= 2.0 and peak <= 500 * 2**20}")
    if not args.no_cli:
        cli_figures([int(n) for n in args.sizes.split(",") if n], args.repeat, args.before_rev)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
