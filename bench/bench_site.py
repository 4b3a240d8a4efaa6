"""site.yml on 4 and 8 lab nodes vs `ansible -m ping`, and vs a conventional playbook.

For each size N, on a fresh lab of N nodes (fresh NVMe images, fresh node /etc):
    site_first_converge_N_s   playbooks/site.yml, first run (everything changes)
    site_rerun_N_s            the same again (nothing changes)
    ping_N_s                  `ansible all -m ansible.builtin.ping` on the same inventory
    ratio_rerun_vs_ping_N     goal <= 3
Then, on a fresh lab of 4 nodes, the same work done the usual way (one task per sysctl key
with ansible.posix.sysctl, community.general.parted + filesystem, ansible.posix.mount, ...):
    conventional_first_converge_4_s
    ratio_first_converge_ours_vs_conventional_4   goal <= 0.25

Run as root: `.venv/bin/python bench/bench_site.py [--sizes 4 8]` (part of `make bench`).
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

BIN = os.path.join(REPO, ".venv", "bin")
LAB_NAME = "dpbs"
ENV = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "ANSIBLE_DEPRECATION_WARNINGS": "0"}

CONVENTIONAL = os.path.join(REPO, "bench", "conventional_site.yml")


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=REPO, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        log = os.path.join(REPO, ".cache", "bench", "failed-run.log")
        with open(log, "w") as fh:
            fh.write(proc.stdout + proc.stderr)
        sys.stderr.write(f"full output: {log}\n" + proc.stdout[-4000:] + proc.stderr[-2000:])
        raise SystemExit(f"{' '.join(argv[:3])} failed (rc={proc.returncode})")
    return elapsed


def fresh_lab(nodes: int) -> tuple[Lab, str]:
    lab = Lab(LAB_NAME)
    lab.down(log=lambda *_: None)
    state = lab.up(LabConfig(name=LAB_NAME, nodes=nodes, nvme_size="1G",
                             inventory_dir=os.path.join(REPO, ".cache", "bench", LAB_NAME)), log=lambda *_: None)
    return lab, os.path.join(state["inventory_dir"], "hosts.yml")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--no-conventional", action="store_true")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    lab = Lab(LAB_NAME)
    try:
        for n in args.sizes:
            lab, inventory = fresh_lab(n)
            site = [os.path.join(BIN, "ansible-playbook"), "-i", inventory, "playbooks/site.yml"]
            figures[f"site_first_converge_{n}_s"] = timed(site)
            figures[f"site_rerun_{n}_s"] = timed(site)
            figures[f"ping_{n}_s"] = timed([os.path.join(BIN, "ansible"), "all", "-i", inventory,
                                            "-m", "ansible.builtin.ping"])
            figures[f"ratio_rerun_vs_ping_{n}"] = figures[f"site_rerun_{n}_s"] / figures[f"ping_{n}_s"]
        if not args.no_conventional:
            n = 4
            if f"site_first_converge_{n}_s" not in figures:
                lab, inventory = fresh_lab(n)
                figures[f"site_first_converge_{n}_s"] = timed(
                    [os.path.join(BIN, "ansible-playbook"), "-i", inventory, "playbooks/site.yml"])
            lab, inventory = fresh_lab(n)
            figures[f"conventional_first_converge_{n}_s"] = timed(
                [os.path.join(BIN, "ansible-playbook"), "-i", inventory, CONVENTIONAL])
            figures[f"conventional_rerun_{n}_s"] = timed(
                [os.path.join(BIN, "ansible-playbook"), "-i", inventory, CONVENTIONAL])
            figures[f"ratio_first_converge_ours_vs_conventional_{n}"] = (
                figures[f"site_first_converge_{n}_s"] / figures[f"conventional_first_converge_{n}_s"])
    finally:
        lab.down(log=lambda *_: None)
    for name, value in figures.items():
        print(f"{name}: {value:.3f}" if name.startswith("ratio") else f"{name}: {value:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
