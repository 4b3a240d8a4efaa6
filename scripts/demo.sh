#!/usr/bin/env bash
# `make demo`: bring up a lab of 4 nodes on two fabrics (mgmt MTU 1500, rdma MTU 9000),
# each with a loop-backed NVMe device, validate the spec, run playbooks/site.yml against it
# and print a summary. The lab stays up afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(pwd)/.venv/bin
export PATH=$BIN:$PATH ANSIBLE_CONFIG=$(pwd)/ansible.cfg
NODES=${NODES:-4}
INV=inventories/lab

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1/3 lab: $NODES nodes, fabrics mgmt:1500 and rdma:9000, one NVMe each"
datapath-lab up --nodes "$NODES" --fabric mgmt:1500 --fabric rdma:9000 --nvme-size 2G
datapath-lab status

step "2/3 spec: validate $INV"
if [ -f "$INV/group_vars/all/datapath.yml" ] && command -v datapath >/dev/null; then
  datapath validate "$INV"
else
  echo "(no spec in $INV yet)"
fi

step "3/3 site.yml against the lab"
ansible-playbook -i "$INV/hosts.yml" playbooks/site.yml

step "done"
cat <<TXT
The lab is still up:
  make lab-shell NODE=node1     a root shell inside node1 (also: .venv/bin/datapath-lab shell node1)
  make lab-status               nodes, fabrics, NVMe devices
  make lab-down                 remove everything and restore global kernel state
Inventory: $INV/hosts.yml (ansible -i $INV/hosts.yml all -m ansible.builtin.ping)
TXT
