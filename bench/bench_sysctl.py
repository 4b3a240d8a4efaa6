"""One sysctl_profile call with 40 keys vs 40 ansible.posix.sysctl tasks, same lab node.

Both apply the same 40 net.* keys (per network namespace, so the host is untouched) from the
same starting values, in one run, side by side. Prints `name: value` lines:

    sysctl_profile_40_keys_s     one module call (first converge)
    posix_sysctl_40_tasks_s      40 ansible.posix.sysctl tasks (first converge)
    ratio_profile_vs_posix       first converge, ours / conventional (lower is better)
    ..._rerun_s / ratio_rerun    the no-change re-run

Run as root: `.venv/bin/python bench/bench_sysctl.py` (or `make bench`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "lab"))

from datapath_lab import Lab, LabConfig  # noqa: E402

NODE = "node1"
CANDIDATE_DIRS = ("/proc/sys/net/ipv4/conf/ens1f0np0", "/proc/sys/net/ipv6/conf/ens1f0np0",
                  "/proc/sys/net/ipv4/neigh/ens1f0np0", "/proc/sys/net/ipv6/neigh/ens1f0np0")

PROFILE_PLAY = """
- name: One call
  hosts: all
  gather_facts: false
  tasks:
    - name: Apply 40 keys
      aiinfra.datapath.sysctl_profile:
        keys: "{{ bench_keys }}"
        file: /etc/sysctl.d/90-bench-profile.conf
"""

POSIX_PLAY = """
- name: The usual way
  hosts: all
  gather_facts: false
  tasks:
    - name: Apply one key per task
      ansible.posix.sysctl:
        name: "{{ item.key }}"
        value: "{{ item.value }}"
        sysctl_file: /etc/sysctl.d/91-bench-posix.conf
        reload: true
      loop: "{{ bench_keys | dict2items }}"
"""


def pick_keys(lab: Lab) -> tuple[dict[str, str], dict[str, str]]:
    """40 integer keys that accept a new value; returns (originals, targets)."""
    script = r"""
for d in %s; do
  for f in "$d"/*; do
    [ -f "$f" ] && [ -w "$f" ] || continue
    v=$(cat "$f" 2>/dev/null) || continue
    case "$v" in ''|*[!0-9]*) continue;; esac
    case "$v" in 0) n=1;; 1) n=0;; *) n=$((v + 1));; esac
    if echo "$n" > "$f" 2>/dev/null && [ "$(cat "$f")" = "$n" ]; then
      echo "$v" > "$f"; echo "$f $v $n"
    fi
  done
done
""" % " ".join(CANDIDATE_DIRS)
    out = lab.run_in(NODE, ["/bin/sh", "-c", script]).stdout.split("\n")
    originals, targets = {}, {}
    for line in out:
        parts = line.split()
        if len(parts) != 3 or parts[0].endswith(("disable_ipv6", "forwarding", "mtu", "disable_policy")):
            continue
        key = parts[0][len("/proc/sys/"):].replace("/", ".")
        originals[key], targets[key] = parts[1], parts[2]
        if len(targets) == 40:
            break
    if len(targets) < 40:
        raise SystemExit(f"only {len(targets)} candidate keys found")
    return originals, targets


def reset(lab: Lab, originals: dict[str, str]) -> None:
    script = "; ".join(f"echo {v} > /proc/sys/{k.replace('.', '/')}" for k, v in originals.items())
    lab.run_in(NODE, ["/bin/sh", "-c", script + "; rm -f /etc/sysctl.d/90-bench-profile.conf "
                      "/etc/sysctl.d/91-bench-posix.conf"])


def play(inventory: str, text: str, keys: dict[str, str]) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=REPO, delete=False) as fh:
        fh.write(text)
    try:
        t0 = time.perf_counter()
        subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i", inventory, fh.name,
                        "-e", json.dumps({"bench_keys": keys})], check=True, capture_output=True,
                       env={**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")})
        return time.perf_counter() - t0
    finally:
        os.unlink(fh.name)


def main() -> int:
    lab = Lab("dpbk")
    try:
        state = lab.up(LabConfig(name="dpbk", nodes=1, nvme_size="256M",
                                 inventory_dir=os.path.join(REPO, ".cache", "bench", "dpbk")), log=lambda *_: None)
        inventory = os.path.join(state["inventory_dir"], "hosts.yml")
        originals, targets = pick_keys(lab)
        play(inventory, "- {hosts: all, gather_facts: false, tasks: [{ansible.builtin.ping: {}}]}", {})  # warm up
        figures = {}
        for name, text in (("sysctl_profile_40_keys", PROFILE_PLAY), ("posix_sysctl_40_tasks", POSIX_PLAY)):
            reset(lab, originals)
            figures[name] = play(inventory, text, targets)
            figures[name + "_rerun"] = play(inventory, text, targets)
        reset(lab, originals)
    finally:
        lab.down(log=lambda *_: None)
    for name, value in figures.items():
        print(f"{name}_s: {value:.2f}")
    print(f"ratio_profile_vs_posix: {figures['sysctl_profile_40_keys'] / figures['posix_sysctl_40_tasks']:.3f}")
    print(f"ratio_profile_vs_posix_rerun: "
          f"{figures['sysctl_profile_40_keys_rerun'] / figures['posix_sysctl_40_tasks_rerun']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
