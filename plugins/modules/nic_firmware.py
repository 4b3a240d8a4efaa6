# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nic_firmware
short_description: Report NIC firmware and check it against a policy (never flashes)
version_added: "0.1.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "ethtool"
  - "devlink from iproute2 (optional)"
description:
  - Collects per NIC the driver, driver version, firmware version, PSID (board id) and bus
    address from C(ethtool -i) and C(devlink -j dev info), both when available, with the RDMA
    device's sysfs C(fw_ver)/C(board_id) as fallback.
  - Compares each NIC with the most specific matching policy (PSID and driver, then PSID, then
    driver). Versions are compared numerically (28.39.3560 < 28.41.1000).
  - Returns a compliance table. A NIC without firmware information (a veth, for example) or
    without a matching policy is V(unknown) with the reason, which says what each source gave
    (ethtool, devlink, sysfs). Output of C(devlink) that cannot be read is reported in RV(notes),
    never taken as "no devices".
  - C(driver_version) is ethtool's C(version) line. For a driver built into the kernel (inbox)
    that is the kernel release, not a driver version; C(driver_inbox) says so (compared with
    C(/proc/sys/kernel/osrelease)).
  - Never changes the node. The C(verify) role aggregates across hosts; O(fail_on_noncompliant)
    fails this host alone.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux with C(ethtool) and/or C(devlink).
options:
  interfaces:
    description:
      - Interfaces to report. Default is every physical NIC (those with C(/sys/class/net/IF/device)).
    type: list
    elements: str
  policies:
    description: Firmware policies, in the shape of the plan's C(firmware.policies).
    type: list
    elements: dict
    default: []
    suboptions:
      driver:
        description: Kernel driver the policy applies to, for example V(mlx5_core).
        type: str
      psid:
        description: PSID (board id) the policy applies to; compared case-insensitively.
        type: str
      min_version:
        description: Lowest compliant firmware version.
        type: str
      allowed:
        description:
          - Explicit list of compliant versions.
          - Empty means any version meeting O(policies[].min_version).
        type: list
        elements: str
        default: []
  fail_on_noncompliant:
    description: Fail when any NIC is V(noncompliant) (V(unknown) never fails).
    type: bool
    default: false
extends_documentation_fragment:
  - aiinfra.datapath.node
notes:
  - To update firmware use the vendor's tools (mlxup, mlxfwmanager) in a maintenance window;
    this module only reports.
"""

EXAMPLES = r"""
- name: Firmware compliance of every physical NIC
  aiinfra.datapath.nic_firmware:
    policies:
      - {driver: mlx5_core, psid: MT_0000000838, min_version: "28.39.3560", allowed: []}
  register: fw

- name: Only the RoCE rails, fail this host when out of policy
  aiinfra.datapath.nic_firmware:
    interfaces: [ens1f0np0, ens2f0np0]
    policies: "{{ datapath_plan.nic_firmware.policies }}"
    fail_on_noncompliant: true
"""

RETURN = r"""
nics:
  description: Facts per NIC.
  returned: always
  type: list
  elements: dict
  sample:
    - {interface: ens1f0np0, bus_info: "0000:e6:00.0", driver: mlx5_core, driver_version: 23.10-1.1.9,
       driver_inbox: false, firmware_version: 28.39.3560, firmware_stored: 28.39.3560, psid: MT_0000000838,
       sources: [ethtool, devlink], physical: true, notes: [],
       source_notes: {ethtool: "ethtool -i gave firmware 28.39.3560", sysfs: "sysfs has no RDMA device for it"}}
compliance:
  description: One row per NIC.
  returned: always
  type: list
  elements: dict
  contains:
    interface:
      description: Interface name.
      type: str
    status:
      description: V(compliant), V(noncompliant) or V(unknown).
      type: str
    reason:
      description: Why, in words (what it has and what it needs).
      type: str
    needs:
      description: What the matched policy requires.
      type: str
    policy:
      description: The matched policy.
      type: dict
    firmware_version:
      description: Running firmware version.
      type: str
    psid:
      description: PSID / board id.
      type: str
    driver:
      description: Kernel driver.
      type: str
    bus_info:
      description: PCI address.
      type: str
notes:
  description:
    - What the module could not read on this node.
    - For example C(devlink) failed or printed something unreadable, or no tool is installed.
  returned: always
  type: list
  elements: str
  sample: ["devlink -j dev info failed: Failed to connect to devlink Netlink"]
summary:
  description: Count of NICs per status.
  returned: always
  type: dict
  sample: {compliant: 1, noncompliant: 0, unknown: 0}
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_firmware import NicFirmware


def main():
    module_main(NicFirmware)


if __name__ == "__main__":
    main()
