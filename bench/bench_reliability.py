"""Benchmark (issue 18): hostile inputs tried by the fault tests, and the tracebacks they caused.

    .venv/bin/python bench/bench_reliability.py

Runs the fault suites that need no lab (tests/unit/test_reliability_*.py: module arguments fuzzed
with hostile strings, absurd numbers and wrong types plus hypothesis runs, recorded tool outputs
mutated and fed to the parsers, hostile specs, interrupted writes, kernel faults, concurrent runs)
with their rows written to a directory of its own (DATAPATH_RELIABILITY_OUTPUT), not over the rows
of the last `make test`, and prints the sums that docs/reliability.md reports: hostile inputs
tried (goal >= 10,000) and tracebacks in this collection's code (goal 0), beside those raised
inside ansible-core's argument validation. The lab suite (tests/integration/test_reliability_lab.py,
root and a lab) is not run here; `make test` runs it and scripts/reliability_report.py renders all.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITES = sorted(glob.glob(os.path.join(REPO, "tests", "unit", "test_reliability_*.py")))


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="datapath-reliability-") as out:
        env = dict(os.environ, DATAPATH_RELIABILITY_OUTPUT=out)
        began = time.monotonic()
        proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "pytest"), "-q", "-p", "no:cacheprovider", *SUITES],
                              cwd=REPO, env=env, capture_output=True, text=True, check=False)
        seconds = time.monotonic() - began
        rows = []
        for path in sorted(glob.glob(os.path.join(out, "*.json"))):
            with open(path) as fh:
                rows.extend(json.load(fh)["rows"])
    if proc.returncode != 0 or not rows:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-2000:])
        print(f"reliability_suites_rc: {proc.returncode}")
        return 1
    hostile = sum(int(r.get("hostile_inputs", 0)) for r in rows)
    tracebacks = sum(int(r.get("tracebacks", 0)) for r in rows)
    core = sum(int(r.get("core_tracebacks", 0)) for r in rows)
    passed = sum(1 for r in rows if r["passed"])
    print(f"reliability_suites: {len(SUITES)} (tests/unit/test_reliability_*.py; the lab suite runs in make test)")
    print(f"reliability_cases_passed: {passed}/{len(rows)}")
    print(f"reliability_hostile_inputs_tried: {hostile} (goal >= 10000)")
    print(f"reliability_property_runs: {sum(int(r.get('property_runs', 0)) for r in rows)}")
    print(f"reliability_tracebacks_in_collection_code: {tracebacks - core} (goal 0)")
    print(f"reliability_tracebacks_in_ansible_core: {core} (inside ansible-core's argument validation)")
    print(f"reliability_suites_s: {seconds:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
