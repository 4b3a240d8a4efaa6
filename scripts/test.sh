#!/usr/bin/env bash
# `make test`: every gate, in order of speed. Runs all stages even when one fails, tears
# down every lab the tests brought up, prints a summary and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(pwd)/.venv/bin
export PATH=$BIN:$PATH ANSIBLE_CONFIG=$(pwd)/ansible.cfg ANSIBLE_NOCOLOR=1 PY_COLORS=0
declare -a passed=() failed=()
SECONDS=0

stage() {
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*"
  if "$@"; then passed+=("$name($((SECONDS - t0))s)"); else failed+=("$name"); echo "=== $name FAILED"; fi
}

cleanup() {
  for lab in dpt dpx dpm dpmc; do "$BIN/datapath-lab" --name "$lab" down >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

stage ruff        "$BIN/ruff" check .
stage pep8        ./scripts/pep8.sh
stage mypy        "$BIN/mypy" lab/datapath_lab plugins/plugin_utils plugins/filter plugins/action
stage ansible-lint "$BIN/ansible-lint" --offline --profile production -q
stage unit        "$BIN/pytest" -q -n 2 -m "not lab" tests/unit
stage interop     "$BIN/pytest" -q tests/interop
# the attack tests of docs/security.md: hostile neighbours against the real module code (loopback, real git)
stage security    "$BIN/pytest" -q -m "not lab" tests/security
stage integration "$BIN/pytest" -q --durations=20 -m "lab and not slow" tests/integration tests/unit
stage molecule    ./scripts/molecule.sh
stage sanity      ./scripts/sanity.sh
stage build       ./scripts/build-check.sh

cleanup
echo
echo "make test: ${#passed[@]} stages passed: ${passed[*]:-none}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "make test: FAILED stages: ${failed[*]}"
  exit 1
fi
echo "make test: all stages passed in ${SECONDS}s"
