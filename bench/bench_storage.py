"""NVMe cache figures: read throughput of a 1 GiB file from the mounted cache vs the raw partition.

On one lab node (lab `dpbs`, its own loop device) the cache is laid out with
aiinfra.datapath.nvme_layout over real SSH; a 1 GiB file is written, the page cache is
dropped (`/proc/sys/vm/drop_caches` is global: harmless, it only costs the host some cache),
and the file is read with `dd bs=4M iflag=direct`; then the same bytes are read the same way
from the raw partition: exactly the blocks the file occupies (filefrag). A ratio close to 1
means the filesystem layer costs nothing.

Prints one `name: value` line per figure (median of --rounds reads; `_best`: fastest of each). Run as root:
`.venv/bin/python bench/bench_storage.py`. The lab is always torn down.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "lab"))

from datapath_lab import Lab, LabConfig  # noqa: E402

MOUNT = "/mnt/model-cache"
FILE = MOUNT + "/models/bench-1GiB.bin"
BLOCKS = 256  # x 4 MiB = 1 GiB


def extents(lab: Lab, node: str) -> list[tuple[int, int]]:
    """(byte offset in the partition, byte length) of every extent of the file (filefrag -v)."""
    out = lab.run_in(node, ["env", "LC_ALL=C", "filefrag", "-v", "-b4096", FILE]).stdout
    found = []
    for match in re.finditer(r"^\s*\d+:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.\s*\d+:\s+(\d+):", out, re.M):
        found.append((int(match.group(1)) * 4096, int(match.group(2)) * 4096))
    if sum(length for _, length in found) != BLOCKS * 4 * 1024 * 1024:
        raise RuntimeError(f"cannot read the file's extents: {out}")
    return found


def dd_seconds(lab: Lab, node: str, source: str, ranges: list[tuple[int, int]]) -> float:
    """Seconds dd needs to read ``ranges`` of ``source`` (bs=4M, iflag=direct), cold cache."""
    subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
    total = 0.0
    for offset, length in ranges:
        out = lab.run_in(node, ["env", "LC_ALL=C", "dd", f"if={source}", "of=/dev/null", "bs=4M",
                                f"skip={offset}", f"count={length}", "iflag=direct,skip_bytes,count_bytes"]).stderr
        match = re.search(r"^(\d+) bytes .* copied, ([0-9.]+) s", out, re.M)
        if not match or int(match.group(1)) != length:
            raise RuntimeError(f"unexpected dd output: {out}")
        total += float(match.group(2))
    return total


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="dpbs")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    lab = Lab(args.name)
    inv = os.path.join(REPO, ".cache", "bench", args.name)
    mib = BLOCKS * 4
    try:
        state = lab.up(LabConfig(name=args.name, nodes=1, nvme_size="2G", inventory_dir=inv), log=lambda *_: None)
        node = "node1"
        dev = state["nodes"][node]["nvme"]
        if not dev.startswith("/dev/loop"):
            raise RuntimeError(f"refusing to touch {dev}: not a lab loop device")
        layout = {"devices": [dev], "filesystem": {"type": "xfs", "label": "model-cache"},
                  "mount": {"path": MOUNT, "options": ["noatime"]},
                  "directories": [{"path": "models", "mode": "0755"}]}
        env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")}
        t0 = time.perf_counter()
        subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible"), node, "-i",
                        os.path.join(state["inventory_dir"], "hosts.yml"), "-m", "aiinfra.datapath.nvme_layout",
                        "-a", json.dumps(layout)], check=True, capture_output=True, env=env, cwd=REPO)
        layout_s = time.perf_counter() - t0
        lab.run_in(node, ["dd", "if=/dev/urandom", f"of={FILE}", "bs=4M", f"count={BLOCKS}", "oflag=direct",
                          "status=none"])
        lab.run_in(node, ["sync"])
        # The raw read covers exactly the blocks the file occupies: the rest of the partition
        # is never written, and holes of the sparse backing file would read for free.
        ranges = extents(lab, node)
        file_s, raw_s = [], []
        for i in range(args.rounds):  # interleaved, alternating which goes first: host load hits both alike
            for which in (("file", "raw") if i % 2 == 0 else ("raw", "file")):
                if which == "file":
                    file_s.append(dd_seconds(lab, node, FILE, [(0, BLOCKS * 4 * 1024 * 1024)]))
                else:
                    raw_s.append(dd_seconds(lab, node, dev + "p1", ranges))
    finally:
        lab.down(log=lambda *_: None)
    file_mbps = mib * 1.048576 / statistics.median(file_s)
    raw_mbps = mib * 1.048576 / statistics.median(raw_s)
    print(f"storage_layout_cold_s: {layout_s:.2f}")
    print(f"storage_file_read_1GiB_MBps: {file_mbps:.0f}")
    print(f"storage_raw_partition_read_1GiB_MBps: {raw_mbps:.0f}")
    print(f"storage_file_extents: {len(ranges)}")
    print(f"storage_file_vs_raw_read_ratio: {file_mbps / raw_mbps:.3f}")
    # Fastest read of each: what the layers cost without interference from other load on the host.
    print(f"storage_file_vs_raw_read_ratio_best: {min(raw_s) / min(file_s):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
