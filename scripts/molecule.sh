#!/usr/bin/env bash
# Run molecule scenarios over the lab: all of them, or those named as arguments. Each
# scenario's own create and destroy steps bring the lab (DATAPATH_LAB_NAME, default dpm) up
# and down, exactly as `molecule test -s NAME` does on its own; this script only tears the lab
# down on exit, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
BIN=$REPO/.venv/bin
export PATH=$BIN:$PATH
export DATAPATH_LAB_NAME=${DATAPATH_LAB_NAME:-dpm}
trap '"$BIN/datapath-lab" --name "$DATAPATH_LAB_NAME" down >/dev/null 2>&1 || true' EXIT
if [ "$#" -gt 0 ]; then scenarios=("$@"); else
  scenarios=(); for dir in molecule/*/; do [ -f "$dir/molecule.yml" ] && scenarios+=("$(basename "$dir")"); done
fi
rc=0; failed=()
for scenario in "${scenarios[@]}"; do
  echo "--- molecule scenario: $scenario (lab $DATAPATH_LAB_NAME)"
  if ! "$BIN/molecule" test -s "$scenario"; then
    echo "--- molecule scenario $scenario FAILED"
    rc=1; failed+=("$scenario")
  fi
done
echo "molecule: ${#scenarios[@]} scenario(s), failed: ${failed[*]:-none}"
exit $rc
