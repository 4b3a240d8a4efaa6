#!/usr/bin/env bash
# Every benchmark in bench/, one `name: value` line per figure.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(pwd)/.venv/bin/python
export ANSIBLE_CONFIG=$(pwd)/ansible.cfg
# bench_pull.py's own default is 8, 16 and 32 nodes (about 15 minutes on 2 cores); here 8 unless
# BENCH_PULL_SIZES says otherwise, e.g. BENCH_PULL_SIZES="8 16 32" make bench
for bench in bench/bench_*.py; do
  echo "# $bench"
  if [ "$bench" = bench/bench_pull.py ]; then
    # shellcheck disable=SC2086
    "$PY" "$bench" --sizes ${BENCH_PULL_SIZES:-8}
  else
    "$PY" "$bench"
  fi
done
