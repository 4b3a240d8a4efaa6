# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RoCE QoS across reboots: the saved steps, the re-apply script and its systemd unit (stdlib only).

The NIC settings roce_qos makes are runtime-only. With ``persist`` the capability saves the full
list of steps per interface (``state_document``) to ``STATE_FILE`` and installs ``APPLY_SCRIPT``
(``APPLY_SCRIPT_TEXT``, Python 3 stdlib) and ``UNIT_FILE`` (``UNIT_TEXT``), enabled through
``UNIT_LINK``, which replay them at boot.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

STATE_FILE = "/etc/aiinfra-datapath/roce_qos.json"
APPLY_SCRIPT = "/usr/local/libexec/aiinfra-datapath/roce-qos-apply"
UNIT_FILE = "/etc/systemd/system/aiinfra-roce-qos.service"
UNIT_LINK = "/etc/systemd/system/multi-user.target.wants/aiinfra-roce-qos.service"

# The boot-time re-apply: a small stdlib script replaying the saved steps in order.
APPLY_SCRIPT_TEXT = r'''#!/usr/bin/env python3
# Installed by aiinfra.datapath.roce_qos. Re-applies RoCE QoS at boot: the NIC settings
# (PFC, trust, DSCP map, ETS, ECN, rdma_cm defaults) do not survive a reboot or driver reload.
# Reads the steps saved by the module and runs them in order; logs to the journal via stderr.
import json
import os
import subprocess
import sys
import time

STATE = sys.argv[1] if len(sys.argv) > 1 else "/etc/aiinfra-datapath/roce_qos.json"


def main():
    with open(STATE) as handle:
        state = json.load(handle)
    failed = 0
    for ifname, entry in sorted(state.get("interfaces", {}).items()):
        deadline = time.time() + 60
        while not os.path.exists("/sys/class/net/" + ifname) and time.time() < deadline:
            time.sleep(1)
        for step in entry.get("steps", []):
            try:
                if step["op"] == "run":
                    subprocess.check_call(step["argv"], stdout=subprocess.DEVNULL)
                elif step["op"] == "mkdir":
                    parent = os.path.dirname(step["path"])
                    if os.path.basename(parent) == "rdma_cm" and not os.path.isdir(parent):
                        subprocess.call(["modprobe", "rdma_cm"])  # at boot it may not be loaded yet
                    if not os.path.isdir(step["path"]):
                        os.mkdir(step["path"])
                elif step["op"] == "write":
                    with open(step["path"], "w") as handle:
                        handle.write(step["value"])
            except (OSError, subprocess.CalledProcessError) as exc:
                failed += 1
                sys.stderr.write("%s: %s failed: %s\n" % (ifname, json.dumps(step), exc))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
'''

# When the unit runs. The settings need each NIC's netdev (the driver has probed and udev has
# named it), not addresses and not an online network: APPLY_SCRIPT_TEXT waits up to 60 s for each
# interface itself, because no boot target waits for a given NIC (systemd-udev-settle.service is
# deprecated and does not either). They must hold before RDMA traffic starts: the workloads
# (kubelet, containerd, MPI launchers) start after network-online.target. Hence
# After=network.target (network management has started: the netdevs are being configured) and
# Before=network-online.target, without pulling either in. systemd.special(7) reserves
# Wants=/Before=network-pre.target for units that must finish before any network is configured
# (firewalls); ordered there, the wait for a late NIC would hold back all networking. A NIC that
# never appears delays network-online.target by the script's 60 s for it, and the unit fails.
UNIT_TEXT = """# Installed by aiinfra.datapath.roce_qos: re-apply RoCE QoS (runtime-only settings) at boot.
[Unit]
Description=Re-apply RoCE lossless QoS (aiinfra.datapath)
# needs the NICs' netdevs (the script waits for each), must hold before RDMA workloads start
After=network.target
Before=network-online.target
ConditionPathExists=%(state)s

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=%(script)s %(state)s

[Install]
WantedBy=multi-user.target
""" % {"state": STATE_FILE, "script": APPLY_SCRIPT}


def state_document(entries):
    """JSON text of the saved steps; deterministic."""
    return json.dumps({"version": 1, "interfaces": entries}, indent=2, sort_keys=True) + "\n"
