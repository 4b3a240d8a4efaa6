#!/usr/bin/env bash
# ansible-test sanity, offline. ansible-test refuses paths reached through a symlink and
# wants ansible_collections/<ns>/<name>: run it on a copy of the tracked tree.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
BIN=$REPO/.venv/bin

# ansible-test bootstraps pip in each per-test venv with a get-pip script it downloads from
# a host this network cannot reach. This stand-in does the same with the interpreter's own
# ensurepip and the configured package index (see ../shared/research/tooling.md).
PIP_VERSION=$("$BIN/python" - <<'PY'
import re, ansible_test, pathlib
src = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
print(re.search(r"pip='([0-9.]+)'", src.read_text()).group(1))
PY
)
cache=~/.ansible/test/cache/get_pip_${PIP_VERSION//./_}.py
mkdir -p "$(dirname "$cache")"
cat > "$cache.tmp" <<'PY'
# aiinfra.datapath offline stand-in for get-pip.py (written by scripts/sanity.sh)
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
PY
mv "$cache.tmp" "$cache"

work=$(mktemp -d /tmp/datapath-sanity.XXXXXX)
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/aiinfra/datapath
mkdir -p "$dest"
# Only collection content: the lab, molecule, scripts, benchmarks and inventories are the
# project around the collection (galaxy.yml build_ignore), with their own gates (ruff, mypy).
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  case "$f" in lab/*|molecule/*|scripts/*|bench/*|inventories/*|.ci/*) continue ;; esac
  [ -e "$f" ] && printf '%s\0' "$f"
done | xargs -0 cp --parents -t "$dest"
cp -a .git "$dest/.git"
cd "$dest"
git add -A >/dev/null 2>&1 || true
"$BIN/ansible-test" sanity --venv --python 3.11 "$@"
