#!/usr/bin/env bash
# ansible-test sanity, offline, on the built collection tarball, unpacked: the tree that ships
# (ansible-test wants ansible_collections/<ns>/<name> and refuses paths reached through links).
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
# The tree that ships: build the collection tarball (galaxy.yml's build_ignore decides what is
# in it) and unpack it, so sanity checks exactly what an installed collection holds. It must
# hold no links (modules and module_utils are real files).
"$BIN/ansible-galaxy" collection build --force --output-path "$work" . >/dev/null
tarball=$(ls "$work"/aiinfra-datapath-*.tar.gz)
dest=$work/ansible_collections/aiinfra/datapath
mkdir -p "$dest"
tar -xzf "$tarball" -C "$dest"
links=$(find "$dest" -type l | head -5)
if [ -n "$links" ]; then
  echo "sanity: the tarball holds symbolic links: $links" >&2
  exit 1
fi
cd "$dest"
# ansible-test lists a collection's files with git when it is a repository; its own work
# directory (tests/output, with a delegated venv) must stay out of that list
printf 'tests/output/\n' > .gitignore
git init -q && git add -A && git -c user.email=sanity@localhost -c user.name=sanity commit -qm tarball
"$BIN/ansible-test" sanity --venv --python 3.11 "$@"
