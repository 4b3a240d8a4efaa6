#!/usr/bin/env bash
# Build the collection tarball, check that only collection content is in it, install it
# into a temporary collections path, render a module from the installed copy, and run one
# real play with the installed copy against a 1-node lab (proves the package works outside
# the checkout). The lab part needs root; DATAPATH_BUILD_LAB names the lab (default dpr),
# DATAPATH_BUILD_LAB=none skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(pwd)/.venv/bin
LAB=${DATAPATH_BUILD_LAB:-dpr}
out=$(mktemp -d /tmp/datapath-build.XXXXXX)
lab_up=0
cleanup() {
  if [ "$lab_up" = 1 ]; then "$BIN/datapath-lab" --name "$LAB" down >/dev/null 2>&1 || true; fi
  rm -rf "$out"
}
trap cleanup EXIT
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
filters=$(ls plugins/filter/*.yml 2>/dev/null | xargs -r -n1 basename | sed 's/\.yml$//' | sed 's/^/aiinfra.datapath./')
if [ -n "$filters" ]; then
  (cd "$out" && ANSIBLE_CONFIG="$out/empty.cfg" ANSIBLE_COLLECTIONS_PATH="$out/collections" \
     "$BIN/ansible-doc" -t filter $filters >/dev/null)
  echo "installed copy: $(echo "$filters" | wc -w) filters render with ansible-doc"
fi

if [ "$LAB" = none ]; then
  echo "installed copy: lab play skipped (DATAPATH_BUILD_LAB=none)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "installed copy: lab play skipped (needs root)"
  exit 0
fi
# One real play, from a neutral directory, with nothing but the installed copy on the
# collections path (no checkout ansible.cfg, no .collections link, no site-packages scan).
t0=$SECONDS
lab_up=1
"$BIN/datapath-lab" --name "$LAB" up --nodes 1 --nvme-size 64M --inventory-dir "$out/inventory" >/dev/null
installed_env=(env -u ANSIBLE_COLLECTIONS_PATHS "ANSIBLE_CONFIG=$out/empty.cfg"
  "ANSIBLE_COLLECTIONS_PATH=$out/collections" ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
  ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_NOCOLOR=1)
listed=$(cd "$out" && "${installed_env[@]}" "$BIN/ansible-galaxy" collection list aiinfra.datapath 2>/dev/null || true)
if ! grep -q "^# $out/collections/ansible_collections" <<<"$listed" || grep -qF "$(pwd)/" <<<"$listed"; then
  echo "build-check: aiinfra.datapath does not resolve to the installed copy only:" >&2
  echo "$listed" >&2
  exit 1
fi
cat > "$out/installed-play.yml" <<'PLAY'
---
- name: The installed collection against a lab node
  hosts: all
  gather_facts: false
  tasks:
    - name: Read the live data path with the installed datapath_facts module
      aiinfra.datapath.datapath_facts:
        gather: [sysctl, memory, interfaces]
        sysctl_keys: [net.ipv4.tcp_ecn]

    - name: Check what it read
      ansible.builtin.assert:
        that:
          - datapath_facts.sysctl['net.ipv4.tcp_ecn'].state == 'ok'
          - datapath_facts.memory_bytes > 0
          - "'eno1' in datapath_facts.interfaces"
        quiet: true

    - name: Plan the node with the installed filters (controller-side Python of the package)
      ansible.builtin.assert:
        that: datapath | aiinfra.datapath.node_plan(inventory_hostname, group_names, hostvars[inventory_hostname]) is mapping
        quiet: true
      when: datapath is defined
PLAY
if ! (cd "$out" && "${installed_env[@]}" "$BIN/ansible-playbook" -i "$out/inventory/hosts.yml" installed-play.yml \
      > "$out/installed-play.log" 2>&1); then
  echo "build-check: the lab play with the installed collection failed:" >&2
  tail -30 "$out/installed-play.log" >&2
  exit 1
fi
if ! grep -qE 'ok=3 +changed=0 +unreachable=0 +failed=0' "$out/installed-play.log"; then
  echo "build-check: expected 3 ok tasks (facts, checks, plan) with the installed collection:" >&2
  tail -5 "$out/installed-play.log" >&2
  exit 1
fi
echo "installed copy: datapath_facts play passed on a 1-node lab $LAB ($((SECONDS - t0)) s with lab up; $(grep -o "ok=[0-9]* .*skipped=[0-9]*" "$out/installed-play.log" | tr -s " "))"
