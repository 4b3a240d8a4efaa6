#!/usr/bin/env bash
# Run every molecule scenario over the lab. The lab `dpm` is brought up first so that the
# scenario's inventory link has a target; each scenario's destroy tears it down, and so
# does this script on exit, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
BIN=$REPO/.venv/bin
export PATH=$BIN:$PATH
inv=$REPO/.cache/molecule/dpm
trap '"$BIN/datapath-lab" --name dpm down >/dev/null 2>&1 || true' EXIT
rc=0
for dir in molecule/*/; do
  scenario=$(basename "$dir")
  [ -f "$dir/molecule.yml" ] || continue
  nodes=$(grep -c '^  - name:' "$dir/molecule.yml" || true)
  "$BIN/datapath-lab" --name dpm up --nodes "${nodes:-2}" --nvme-size 512M --inventory-dir "$inv" >/dev/null
  echo "--- molecule scenario: $scenario"
  if ! "$BIN/molecule" test -s "$scenario"; then
    echo "--- molecule scenario $scenario FAILED"
    rc=1
  fi
done
exit $rc
