#!/usr/bin/env bash
# Build the collection tarball, check that only collection content is in it, install it
# into a temporary collections path and render a module from the installed copy.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(pwd)/.venv/bin
out=$(mktemp -d /tmp/datapath-build.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$BIN/ansible-galaxy" collection build --force --output-path "$out" . >/dev/null
tarball=$(ls "$out"/aiinfra-datapath-*.tar.gz)
echo "built $(basename "$tarball") ($(du -k "$tarball" | cut -f1) KiB)"
bad=$(tar -tzf "$tarball" | grep -E '^(lab|molecule|\.collections|\.venv|inventories|bench|tests/output|scripts)/' || true)
if [ -n "$bad" ]; then
  echo "build-check: the tarball contains non-collection content:" >&2
  echo "$bad" | head >&2
  exit 1
fi
printf '[defaults]\n' > "$out/empty.cfg"
ANSIBLE_CONFIG="$out/empty.cfg" "$BIN/ansible-galaxy" collection install --offline -p "$out/collections" "$tarball" >/dev/null 2>&1
modules=$(ls plugins/modules/*.py 2>/dev/null | xargs -r -n1 basename | sed 's/\.py$//' | sed 's/^/aiinfra.datapath./')
if [ -n "$modules" ]; then
  # From a neutral directory so that the checkout's ansible.cfg / .collections do not apply.
  (cd "$out" && ANSIBLE_CONFIG="$out/empty.cfg" ANSIBLE_COLLECTIONS_PATH="$out/collections" \
     "$BIN/ansible-doc" -t module $modules >/dev/null)
  echo "installed copy: $(echo "$modules" | wc -w) modules render with ansible-doc"
fi
