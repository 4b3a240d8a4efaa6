"""Pull vs push: nodes converged per minute by `ansible-pull` on every node at once (playbooks/local.yml,
no controller) and by one controller running playbooks/site.yml, on the same lab sizes, in one run.

For each size N (default 8, 16 and 32), on a fresh lab of N nodes each time (fresh NVMe images, fresh
node /etc):
    push_first_converge_N_s        site.yml from one controller (the inventory's forks), first converge
    push_nodes_per_min_N
    pull_first_converge_N_s        every node runs the documented ansible-pull at the same time
                                   (docs/pull.md), from a file:// git repository inside the node
    pull_nodes_per_min_N
    ratio_pull_vs_push_N           nodes per minute, pull / push

On this 2-core machine every node and the controller share the same two cores, so pull cannot
scale here as it does on a real cluster (where each node brings its own CPU): the figure shows
what pulling costs per node, not a cluster's throughput.

Run as root: `.venv/bin/python bench/bench_pull.py [--sizes 8 16 32]` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "lab"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

from datapath_lab import Lab, LabConfig  # noqa: E402
from labtools import LabHandle  # noqa: E402
from test_pull_lab import last_run, make_repo, pull  # noqa: E402

LAB_NAME = "dpbp"
SITE = os.path.join(REPO, "playbooks", "site.yml")


def fresh_lab(nodes: int, inventory_dir: str) -> LabHandle:
    lab = Lab(LAB_NAME)
    lab.down(log=lambda *_: None)
    state = lab.up(LabConfig(name=LAB_NAME, nodes=nodes, nvme_size="1G", inventory_dir=inventory_dir),
                   log=lambda *_: None)
    return LabHandle(lab, state)


def push(nodes: int) -> float:
    with tempfile.TemporaryDirectory(prefix="dpbp-inventory-") as inventory_dir:
        lab = fresh_lab(nodes, inventory_dir)
        start = time.perf_counter()
        result = lab.playbook(SITE, "--forks", str(nodes))
        elapsed = time.perf_counter() - start
        if result.rc != 0:
            raise SystemExit(f"site.yml on {nodes} nodes failed: {result.failures()}")
        return elapsed


def pulled(nodes: int) -> float:
    with tempfile.TemporaryDirectory(prefix="dpbp-inventory-") as inventory_dir:
        lab = fresh_lab(nodes, inventory_dir)
        for node in lab.nodes:  # the repository each node pulls from: not part of the time
            make_repo(lab, node)
        start = time.perf_counter()
        with ThreadPoolExecutor(len(lab.nodes)) as pool:
            runs = list(pool.map(lambda n: pull(lab, n), lab.nodes))
        elapsed = time.perf_counter() - start
        failed = [n for n, done in zip(lab.nodes, runs, strict=True)
                  if done.returncode != 0 or last_run(lab, n)["result"] != "succeeded"]
        if failed:
            raise SystemExit(f"ansible-pull failed on {', '.join(failed)}")
        return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32])
    args = parser.parse_args()
    try:
        for nodes in args.sizes:
            push_s = push(nodes)
            pull_s = pulled(nodes)
            print(f"push_first_converge_{nodes}_s: {push_s:.1f}")
            print(f"push_nodes_per_min_{nodes}: {nodes / push_s * 60:.1f}")
            print(f"pull_first_converge_{nodes}_s: {pull_s:.1f}")
            print(f"pull_nodes_per_min_{nodes}: {nodes / pull_s * 60:.1f}")
            print(f"ratio_pull_vs_push_{nodes}: {push_s / pull_s:.2f}", flush=True)
    finally:
        Lab(LAB_NAME).down(log=lambda *_: None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
