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
description:
  - Collects per NIC the driver, driver version, firmware version, PSID (board id) and bus
    address from C(ethtool -i) and C(devlink -j dev info), both when available, with the RDMA
    device's sysfs C(fw_ver)/C(board_id) as fallback.
  - Compares each NIC with the most specific matching policy (PSID and driver, then PSID, then
    driver). Versions are compared numerically (28.39.3560 < 28.41.1000).
  - Returns a compliance table. A NIC without firmware information (a veth, for example) or
    without a matching policy is V(unknown) with the reason.
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
  root:
    description: Root of the node's filesystem (for tests). Commands still run on the node.
    type: path
    default: /
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
    policies: "{{ plan.firmware.policies }}"
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
       firmware_version: 28.39.3560, firmware_stored: 28.39.3560, psid: MT_0000000838,
       sources: [ethtool, devlink], physical: true, notes: []}
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
summary:
  description: Count of NICs per status.
  returned: always
  type: dict
  sample: {compliant: 1, noncompliant: 0, unknown: 0}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import host_root
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_firmware import (
    collect, evaluate, parse_devlink_info,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import Runner


def argument_spec():
    return dict(
        interfaces=dict(type="list", elements="str"),
        policies=dict(type="list", elements="dict", default=[], options=dict(
            driver=dict(type="str"), psid=dict(type="str"), min_version=dict(type="str"),
            allowed=dict(type="list", elements="str", default=[]),
        )),
        fail_on_noncompliant=dict(type="bool", default=False),
        root=dict(type="path", default="/"),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    host = host_root(module)
    runner = Runner(module)
    for index, policy in enumerate(p["policies"]):
        if not policy.get("driver") and not policy.get("psid"):
            module.fail_json(msg="policies[%d]: give driver and/or psid to say which NICs it applies to"
                                 % index)

    present = host.listdir("/sys/class/net")
    if p["interfaces"] is None:
        names = [n for n in present if host.exists("/sys/class/net/%s/device" % n)]
    else:
        missing = [n for n in p["interfaces"] if n not in present]
        if missing:
            module.fail_json(msg="interfaces not found on the node: %s (present: %s)"
                             % (", ".join(missing), ", ".join(present) or "none"))
        names = list(p["interfaces"])

    ethtool, devlink = runner.which("ethtool"), runner.which("devlink")
    devlink_info, notes = {}, []
    if devlink:
        rc, out, err = runner.run([devlink, "-j", "dev", "info"], check=False)
        if rc == 0:
            devlink_info = parse_devlink_info(out)
        else:
            notes.append("devlink -j dev info failed: %s" % (err or out).strip())
    if not ethtool and not devlink:
        notes.append("neither ethtool nor devlink is installed; only sysfs was read")

    nics = [collect(host, runner, name, ethtool, devlink_info) for name in names]
    table = [evaluate(nic, p["policies"]) for nic in nics]
    summary = dict((s, sum(1 for r in table if r["status"] == s))
                   for s in ("compliant", "noncompliant", "unknown"))
    result = dict(changed=False, nics=nics, compliance=table, summary=summary, notes=notes)
    bad = [r for r in table if r["status"] == "noncompliant"]
    if bad and p["fail_on_noncompliant"]:
        module.fail_json(msg="noncompliant NIC firmware: %s" % "; ".join(
            "%s (%s, PSID %s): %s" % (r["interface"], r["bus_info"], r["psid"], r["reason"]) for r in bad),
            **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
