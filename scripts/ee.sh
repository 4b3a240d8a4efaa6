#!/usr/bin/env bash
# Execution environment: build the collection tarball into build/ee/ and generate the build
# context with ansible-builder (works offline, no container engine needed):
#   ./scripts/ee.sh                         -> build/ee/context/Containerfile + _build/
# With `build`, also build the image (needs podman or docker and a reachable registry):
#   ./scripts/ee.sh build -t datapath-ee:0.4.0 [other ansible-builder build options]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(pwd)/.venv/bin
mkdir -p build/ee
tmp=$(mktemp -d /tmp/datapath-ee.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$BIN/ansible-galaxy" collection build --force --output-path "$tmp" . >/dev/null
mv "$tmp"/aiinfra-datapath-*.tar.gz build/ee/aiinfra-datapath.tar.gz
rm -rf build/ee/context
if [ "${1:-}" = build ]; then
  shift
  exec "$BIN/ansible-builder" build --file execution-environment.yml --context build/ee/context "$@"
fi
"$BIN/ansible-builder" create --file execution-environment.yml --context build/ee/context \
  --output-filename Containerfile
