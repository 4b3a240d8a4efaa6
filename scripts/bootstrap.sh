#!/usr/bin/env bash
# Idempotent setup for a fresh Debian machine (root): Debian packages the lab and the
# roles' tools need, the pinned Python environment in .venv/, console scripts, and the
# collections link that makes FQCNs resolve to this checkout. Fast when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

APT_PACKAGES=(
  iproute2 openssh-server openssh-client util-linux fdisk gdisk parted xfsprogs e2fsprogs
  mdadm ethtool iputils-ping procps kmod python3 python3-venv ca-certificates
  # the real readers of the files the modules write (tests/interop, docs/interop.md); lab nodes
  # hide the host's network configuration, so having them on the host changes no node
  systemd udev netplan.io ifupdown
  # the measurement tools the probes use when chosen (bench/bench_measure.py compares with iperf3)
  iperf3 fio
  # path_check's ARP check of every rail (arping -I: which NICs answer for an address)
  iputils-arping
  # promtool checks the metrics files, alert rules and rule tests (tests/interop/test_telemetry.py);
  # node_exporter runs only inside lab nodes, started by tests (tests/integration/test_telemetry_lab.py)
  prometheus prometheus-node-exporter
  # TuneD's own profile loader, merger and tuned-adm read the profile tuned_profile writes
  # (tests/interop/test_sys_tuned.py); a tool here, never the host's tuning daemon
  tuned
  # ansible-test sanity's shellcheck test checks the collection's shell scripts (skipped without it)
  shellcheck
  # signed commits in pull mode: git verify-commit and ansible-pull --verify-commit check them with
  # gpg (tests/security make throwaway keys in a temporary GNUPGHOME)
  gnupg git
  # lldp_dcbx captures one LLDP frame per RoCE interface with tcpdump (inside lab nodes, whose root is
  # the host's); the lab's switch namespace sends the crafted DCBX frames (tests/integration/test_lldp_lab.py)
  tcpdump
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: missing Debian packages (${missing[*]}); run as root" >&2
    exit 1
  fi
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Package scripts must not start services on the host (sshd, mdadm monitor): the lab
  # runs sshd only inside its nodes, on demand. policy-rc.d 101 = "action forbidden".
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
  fi
  trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ "$own_policy" = 1 ] && rm -f "$policy"
  trap - EXIT
  # prometheus, node_exporter and TuneD are tools here, never services of the host: the units
  # they just installed do not start at boot either. Without a running systemd (a container)
  # the package scripts still made the enable links; systemctl removes them offline.
  now=
  [ -d /run/systemd/system ] && now=--now
  for unit in prometheus prometheus-node-exporter tuned; do
    case " ${missing[*]} " in
      *" $unit "*) systemctl disable $now "$unit" >/dev/null 2>&1 || true ;;
    esac
  done
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt requirements-test.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing pinned Python packages into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-test.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$want" > "$stamp"
fi

link=.collections/ansible_collections/aiinfra/datapath
mkdir -p "$(dirname "$link")"
[ -L "$link" ] || ln -sfn ../../.. "$link"
echo "bootstrap: ready ($REPO)"
