#!/usr/bin/env bash
# Run molecule scenarios over the lab: all of them, or those named as arguments.
# The lab (name from DATAPATH_LAB_NAME, default dpm) is brought up first so that the
# scenario's inventory links have a target; each scenario's destroy tears it down, and so
# does this script on exit, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
BIN=$REPO/.venv/bin
export PATH=$BIN:$PATH
export DATAPATH_LAB_NAME=${DATAPATH_LAB_NAME:-dpm}
inv=$REPO/.cache/molecule/$DATAPATH_LAB_NAME
trap '"$BIN/datapath-lab" --name "$DATAPATH_LAB_NAME" down >/dev/null 2>&1 || true' EXIT
if [ "$#" -gt 0 ]; then scenarios=("$@"); else
  scenarios=(); for dir in molecule/*/; do [ -f "$dir/molecule.yml" ] && scenarios+=("$(basename "$dir")"); done
fi
rc=0; failed=()
for scenario in "${scenarios[@]}"; do
  nodes=$(grep -c '^  - name:' "molecule/$scenario/molecule.yml" || true)
  "$BIN/datapath-lab" --name "$DATAPATH_LAB_NAME" up --nodes "${nodes:-2}" --nvme-size 512M --inventory-dir "$inv" >/dev/null
  echo "--- molecule scenario: $scenario (lab $DATAPATH_LAB_NAME)"
  if ! "$BIN/molecule" test -s "$scenario"; then
    echo "--- molecule scenario $scenario FAILED"
    rc=1; failed+=("$scenario")
  fi
done
echo "molecule: ${#scenarios[@]} scenario(s), failed: ${failed[*]:-none}"
exit $rc
