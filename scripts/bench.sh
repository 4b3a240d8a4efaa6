#!/usr/bin/env bash
# Every benchmark in bench/, one `name: value` line per figure.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(pwd)/.venv/bin/python
export ANSIBLE_CONFIG=$(pwd)/ansible.cfg
for bench in bench/bench_*.py; do
  echo "# $bench"
  "$PY" "$bench"
done
