"""site.yml on 4, 8, 16 and 64 lab nodes vs `ansible -m ping`, and vs a conventional playbook.

For each size N, on a fresh lab of N nodes (fresh NVMe images, fresh node /etc):
    site_first_converge_N_s   playbooks/site.yml, first run (everything changes)
    site_rerun_N_s            the same again (nothing changes; median of --rounds runs)
    ping_N_s                  `ansible all -m ansible.builtin.ping` on the same inventory
                              (median of --rounds runs, alternating with the re-runs)
    ratio_rerun_vs_ping_N     goal <= 1.5 up to 16 nodes, <= 2 above (the floor is 1.0)
    rerun_per_node_N_s        the re-run over N: goal flat as N grows
    controller_cpu_rerun_per_node_N_s, controller_cpu_ping_per_node_N_s
                              CPU seconds (user + system) of ansible's controller processes (the
                              playbook or ad-hoc process, its forks and their ssh clients; not the
                              ControlPersist masters, which leave the process tree) per node, medians
    ratio_controller_cpu_rerun_vs_ping_N   how much more controller work a re-run is than a ping
Then the first converge of 4 nodes against the same work done the usual way (one task per
sysctl key with ansible.posix.sysctl, community.general.parted + filesystem, ansible.posix.mount,
...), --rounds rounds. Each round runs, in turn and each on a fresh lab: ours with a cold
controller cache (in the first round the size loop's site_first_converge_4_s), ours on new nodes
with the controller cache kept (site_first_converge_warm_4_s), and the conventional playbook.
Medians, with the runs behind them (`*_runs_s`):
    conventional_first_converge_4_s, conventional_rerun_4_s (once, on the last lab)
    ratio_first_converge_ours_vs_conventional_4        goal <= 0.2 (ours with a cold controller cache)
    ratio_first_converge_ours_vs_conventional_4_worst_round   the same, the worst round's own pair
    ratio_first_converge_warm_ours_vs_conventional_4   goal <= 0.2

With ``--compare REV`` (for example the commit before a refactoring), on the first size the
re-run of the code at REV (a git worktree under .cache/bench/) and of this checkout alternate
three times each on the same converged lab:
    site_rerun_REV_N_s, site_rerun_this_N_s   medians
    ratio_rerun_this_vs_REV_N                 goal <= 1.05 (no slower, within noise)

Each checkout's runs keep their controller cache (datapath_apply's kept payload and plans,
AIINFRA_DATAPATH_CACHE) under .cache/bench/controller-cache/, emptied with every new lab: a
first converge starts cold, as a user's first run does; the re-runs find what it kept.

Run as root: `.venv/bin/python bench/bench_site.py [--sizes 4 8] [--rounds 3] [--compare REV]`
(part of `make bench`, which runs 4, 8, 16 and 64; others: `--sizes 32`).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
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


def controller_cache(tree: str) -> str:
    """The controller cache (kept payload and plans) of one checkout's runs, apart from the user's
    own and from the other checkout's, so that the two codes of --compare do not replace each
    other's entries; emptied with each new lab, so that a first converge starts cold."""
    return os.path.join(REPO, ".cache", "bench", "controller-cache", os.path.basename(tree))


def children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for descendants so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], tree: str = REPO, no_change: bool = False) -> float:
    """Seconds of one run; with ``no_change`` the run must change nothing (a fair re-run)."""
    return measured(argv, tree, no_change)[0]


def measured(argv: list[str], tree: str = REPO, no_change: bool = False) -> tuple[float, float]:
    """Seconds of one run and its controller CPU seconds (its process tree as far as it is
    waited for); with ``no_change`` the run must change nothing."""
    env = dict(ENV, ANSIBLE_CONFIG=os.path.join(tree, "ansible.cfg"), AIINFRA_DATAPATH_CACHE=controller_cache(tree))
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tree, check=False)
    elapsed = time.perf_counter() - t0
    cpu = children_cpu() - cpu0
    recap = proc.stdout.rpartition("PLAY RECAP")[2]
    changed = [int(n) for n in re.findall(r"\bchanged=(\d+)", recap)]
    if proc.returncode == 0 and no_change and (not changed or any(changed)):
        raise SystemExit(f"a re-run in {tree} changed something:\n{recap}")
    if proc.returncode != 0:
        log = os.path.join(REPO, ".cache", "bench", "failed-run.log")
        with open(log, "w") as fh:
            fh.write(proc.stdout + proc.stderr)
        sys.stderr.write(f"full output: {log}\n" + proc.stdout[-4000:] + proc.stderr[-2000:])
        raise SystemExit(f"{' '.join(argv[:3])} failed (rc={proc.returncode})")
    return elapsed, cpu


def worktree(rev: str) -> tuple[str, str]:
    """A checkout of ``rev`` (its own .collections link) to run the code of that commit."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.strip()
    path = os.path.join(REPO, ".cache", "bench", f"ref-{sha}")
    if not os.path.isdir(path):
        subprocess.run(["git", "worktree", "add", "--detach", path, sha], cwd=REPO, capture_output=True, check=True)
    link = os.path.join(path, ".collections", "ansible_collections", "aiinfra", "datapath")
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink("../../..", link)
    return sha, path


def fresh_lab(nodes: int, cold: bool = True) -> tuple[Lab, str]:
    """A new lab of ``nodes`` nodes; ``cold``: with the controller caches emptied."""
    lab = Lab(LAB_NAME)
    lab.down(log=lambda *_: None)
    if cold:
        shutil.rmtree(os.path.dirname(controller_cache(REPO)), ignore_errors=True)
    state = lab.up(LabConfig(name=LAB_NAME, nodes=nodes, nvme_size="1G",
                             inventory_dir=os.path.join(REPO, ".cache", "bench", LAB_NAME)), log=lambda *_: None)
    return lab, os.path.join(state["inventory_dir"], "hosts.yml")


def playbook(inventory: str, path: str = "playbooks/site.yml") -> list[str]:
    """The argv of ansible-playbook running ``path`` on ``inventory``."""
    return [os.path.join(BIN, "ansible-playbook"), "-i", inventory, path]


def goal(name: str) -> str:
    """The goal of a figure (issue 18), or ''."""
    if name.startswith("ratio_rerun_vs_ping_"):
        return "<= 1.5" if int(name.rpartition("_")[2]) <= 16 else "<= 2"
    if name.startswith(("ratio_first_converge_ours_vs_conventional_", "ratio_first_converge_warm_ours_")):
        return "<= 0.2"
    if name.startswith("ratio_rerun_this_vs_"):
        return "<= 1.05"
    return ""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 64])
    parser.add_argument("--no-conventional", action="store_true")
    parser.add_argument("--compare", metavar="REV", help="also time the re-run of the code at this git revision")
    parser.add_argument("--rounds", type=int, default=3, help="re-runs and pings at each size (medians)")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    texts: dict[str, str] = {}  # the runs behind a median
    lab = Lab(LAB_NAME)
    try:
        for n in args.sizes:
            lab, inventory = fresh_lab(n)
            site = playbook(inventory)
            figures[f"site_first_converge_{n}_s"] = timed(site)
            ping = [os.path.join(BIN, "ansible"), "all", "-i", inventory, "-m", "ansible.builtin.ping"]
            reruns, pings, rerun_cpu, ping_cpu = [], [], [], []
            for _ in range(args.rounds):  # alternating: load on the host hits both alike
                seconds, cpu = measured(site, no_change=True)
                reruns.append(seconds)
                rerun_cpu.append(cpu)
                seconds, cpu = measured(ping)
                pings.append(seconds)
                ping_cpu.append(cpu)
            figures[f"site_rerun_{n}_s"] = statistics.median(reruns)
            figures[f"ping_{n}_s"] = statistics.median(pings)
            figures[f"ratio_rerun_vs_ping_{n}"] = figures[f"site_rerun_{n}_s"] / figures[f"ping_{n}_s"]
            figures[f"rerun_per_node_{n}_s"] = figures[f"site_rerun_{n}_s"] / n
            figures[f"controller_cpu_rerun_per_node_{n}_s"] = statistics.median(rerun_cpu) / n
            figures[f"controller_cpu_ping_per_node_{n}_s"] = statistics.median(ping_cpu) / n
            figures[f"ratio_controller_cpu_rerun_vs_ping_{n}"] = (statistics.median(rerun_cpu)
                                                                  / statistics.median(ping_cpu))
            if args.compare and n == args.sizes[0]:
                sha, tree = worktree(args.compare)
                times: dict[str, list[float]] = {sha: [], "this": []}
                timed(site, tree)  # the other code's first re-run writes nothing new, but warms its caches
                for _ in range(3):
                    times[sha].append(timed(site, tree, no_change=True))
                    times["this"].append(timed(site, no_change=True))
                for who, values in times.items():
                    figures[f"site_rerun_{who}_{n}_s"] = statistics.median(values)
                figures[f"ratio_rerun_this_vs_{sha}_{n}"] = (figures[f"site_rerun_this_{n}_s"]
                                                             / figures[f"site_rerun_{sha}_{n}_s"])
        if not args.no_conventional:
            # --rounds rounds of the three first converges of 4 nodes, each on a fresh lab, in turn
            # (load on the host hits all three alike): ours with a cold controller cache (the first
            # of them the size loop's, where it ran 4 nodes), ours on new nodes converged by a
            # controller that ran this code before (the payload and the plans of the same host
            # names are kept: the usual case of a team's controller), the conventional playbook
            n = 4
            runs: dict[str, list[float]] = {"cold": [], "warm": [], "conventional": []}
            if f"site_first_converge_{n}_s" in figures:
                runs["cold"].append(figures[f"site_first_converge_{n}_s"])
            for i in range(args.rounds):
                if len(runs["cold"]) <= i:
                    lab, inventory = fresh_lab(n)
                    runs["cold"].append(timed(playbook(inventory)))
                lab, inventory = fresh_lab(n, cold=False)
                runs["warm"].append(timed(playbook(inventory)))
                lab, inventory = fresh_lab(n)
                runs["conventional"].append(timed(playbook(inventory, CONVENTIONAL)))
            figures[f"conventional_rerun_{n}_s"] = timed(playbook(inventory, CONVENTIONAL))
            for name, key in ((f"site_first_converge_{n}", "cold"), (f"site_first_converge_warm_{n}", "warm"),
                              (f"conventional_first_converge_{n}", "conventional")):
                figures[f"{name}_s"] = statistics.median(runs[key])
                texts[f"{name}_runs_s"] = " ".join(f"{t:.2f}" for t in runs[key])
            figures[f"ratio_first_converge_ours_vs_conventional_{n}"] = (
                figures[f"site_first_converge_{n}_s"] / figures[f"conventional_first_converge_{n}_s"])
            figures[f"ratio_first_converge_warm_ours_vs_conventional_{n}"] = (
                figures[f"site_first_converge_warm_{n}_s"] / figures[f"conventional_first_converge_{n}_s"])
            # the worst round: each of ours against the conventional run of its own round
            figures[f"ratio_first_converge_ours_vs_conventional_{n}_worst_round"] = max(
                ours / theirs for ours, theirs in zip(runs["cold"], runs["conventional"], strict=True))
    finally:
        lab.down(log=lambda *_: None)
    for name, value in figures.items():
        text = f"{name}: {value:.3f}" if name.startswith(("ratio", "controller_cpu")) else f"{name}: {value:.2f}"
        print(text + (f" (goal {goal(name)})" if goal(name) else ""))
    for name, runs_s in texts.items():
        print(f"{name}: {runs_s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
