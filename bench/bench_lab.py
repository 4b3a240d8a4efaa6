"""Lab figures: time to bring up and tear down N nodes, and one Ansible ping round over them.

Prints one `name: value` line per figure. Run as root: `make bench` or
`.venv/bin/python bench/bench_lab.py --nodes 8`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "lab"))

from datapath_lab import Lab, LabConfig  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--name", default="dpb")
    args = parser.parse_args()
    lab = Lab(args.name)
    inv = os.path.join(REPO, ".cache", "bench", args.name)
    try:
        t0 = time.perf_counter()
        state = lab.up(LabConfig(name=args.name, nodes=args.nodes, nvme_size="256M", inventory_dir=inv),
                       log=lambda *_: None)
        up_s = time.perf_counter() - t0
        env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")}
        t0 = time.perf_counter()
        subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible"), "all", "-i",
                        os.path.join(state["inventory_dir"], "hosts.yml"), "-m", "ansible.builtin.ping", "-o"],
                       check=True, capture_output=True, env=env)
        ping_s = time.perf_counter() - t0
    finally:
        t0 = time.perf_counter()
        lab.down(log=lambda *_: None)
        down_s = time.perf_counter() - t0
    print(f"lab_up_{args.nodes}_nodes_s: {up_s:.2f}")
    print(f"lab_down_{args.nodes}_nodes_s: {down_s:.2f}")
    print(f"ansible_ping_{args.nodes}_nodes_cold_s: {ping_s:.2f}")
    print(f"lab_up_per_node_ms: {1000 * up_s / args.nodes:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
