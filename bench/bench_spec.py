"""Benchmark: validate and plan a generated 10,000-node inventory.

    .venv/bin/python bench/bench_spec.py [--nodes 10000] [--cli]

Prints ``name: value`` lines. The spec is inventories/example's; hosts are spread over 40 racks
(rack_b-style profiles on half of them), 1% have a host override and facts vary in memory size,
so the planner cannot share one result for every host. ``--cli`` also times
``datapath validate`` on the same inventory written to disk as YAML (includes YAML parsing).
Goal: validate + plan <= 2 s and <= 500 MB peak.
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, ".collections"))

from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import (  # noqa: E402
    Planner,
    cli,
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--cli", action="store_true")
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
    print(f"total_seconds: {done - start:.3f}")
    print(f"tracemalloc_peak_mib: {peak / 2**20:.1f}")
    print(f"max_rss_mib: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
    print(f"goal_met: {done - start <= 2.0 and peak <= 500 * 2**20}")

    if args.cli:
        with tempfile.TemporaryDirectory() as tmp:
            from ruamel.yaml import YAML
            yaml = YAML(typ="safe", pure=True)
            os.makedirs(os.path.join(tmp, "group_vars", "all"))
            children: dict[str, Any] = {}
            for host, (groups, facts) in hosts.items():
                children.setdefault(groups[1], {"hosts": {}})["hosts"][host] = facts
            with open(os.path.join(tmp, "hosts.yml"), "w") as handle:
                yaml.dump({"all": {"children": {"gpu_nodes": {"children": children}}}}, handle)
            with open(os.path.join(tmp, "group_vars", "all", "datapath.yml"), "w") as handle:
                yaml.dump({"datapath": spec}, handle)
            start = time.perf_counter()
            code = cli.main(["validate", tmp, "--format", "json"], io.StringIO())
            print(f"cli_validate_exit: {code}")
            print(f"cli_validate_seconds: {time.perf_counter() - start:.3f}")
            print(f"cli_max_rss_mib: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
