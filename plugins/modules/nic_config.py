# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nic_config
short_description: NIC settings kept in firmware (NV configuration) as a desired state, with a reboot-loop breaker
version_added: "0.4.0"
description:
  - Finds the node's NVIDIA/Mellanox physical functions in sysfs (vendor C(0x15b3), class network or
    InfiniBand, not a virtual function), groups the functions of one adapter into a device, picks each
    device's entry of O(configs) (PSID, then part number, then driver) and queries every function with
    C(mlxconfig -d BDF -e query) (or C(mstconfig), mstflint's name of the same tool). Array parameters
    (C(Array[0..7])) are queried again per index where an entry names one (C(NAME[3])).
  - The C(Default), C(Current) and C(Next Boot) columns are read column by column (C(*) marks, enum values with their
    number such as V(ETH(2\)), bare numbers, C(N/A)); a parameter this device hides (C(MAX_ACC_OUT_READ) while
    C(ADVANCED_PCI_SETTINGS) is off) or does not expose is reported in RV(unsupported), never guessed.
  - Per parameter, the desired value already C(Current) is left alone; in C(Next Boot) only, a reboot is
    pending; in neither, it is set with one C(mlxconfig -y set) per device (and read back), and a reboot
    is required. RV(reboot_required) and RV(reboot_reasons) say so, as M(aiinfra.datapath.kernel_cmdline)
    does, and C(playbooks/rolling_reboot.yml) reboots such nodes.
  - "The reboot-loop breaker: what is set or found pending is recorded per device with the boot id
    (C(/proc/sys/kernel/random/boot_id)) in O(state_file). After a boot, a recorded value that is still not
    C(Current) is the finding C(nvconfig-not-applied-after-reboot) (RV(not_applied), RV(findings)) and no
    reboot is asked for it again. Remove the device from O(state_file) to allow one more."
  - O(configs[].firmware_reset) runs C(mlxfwreset --device BDF reset --yes) after a set, for devices that a
    warm reboot does not apply (nic-configuration-operator's C(FW_RESET_AFTER_CONFIG_UPDATE)); never on a
    device whose interface carries the Ansible connection.
  - O(configs[].max_read_request) sets the PCIe Max Read Request Size of each function in its config space
    (as C(setpci) does). That is not a firmware setting - it takes effect at once, needs no reboot, and a
    reset or boot sets it back, so a run after a boot sets it again.
  - A node without such NICs, or whose NICs no entry names, has nothing to do (no tool needed).
requirements:
  - "Python 3 on the node (standard library only)"
  - "mlxconfig (NVIDIA MFT) or mstconfig (mstflint) to read and set the NV configuration"
  - "mlxfwreset or mstfwreset, only with firmware_reset"
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Reads and plans the same actions without changing the NICs or the state file.
  diff_mode:
    support: full
    description: One section per function, C(BDF Next Boot), with each parameter's Next Boot value before and after.
  platform:
    support: full
    platforms: posix
    description: Linux with NVIDIA MFT (C(mlxconfig), C(mlxfwreset)) or mstflint (C(mstconfig), C(mstfwreset)).
options:
  configs:
    description:
      - The desired settings, one entry per kind of NIC, as the plan's C(nic_config.configs) lists them.
      - A device gets the most specific matching entry (PSID, part number and driver add up).
    type: list
    elements: dict
    default: []
    suboptions:
      psid:
        description: Board id (PSID) the entry is for, e.g. V(MT_0000000838); compared case-insensitively.
        type: str
      part_number:
        description:
          - Part number the entry is for, as the tool's C(Name:) line shows it, with or without the board
            revision (V(MCX755106AS-HEAT) matches V(MCX755106AS-HEAT_Ax)).
        type: str
      driver:
        description: Kernel driver the entry is for, e.g. V(mlx5_core).
        type: str
      link_type:
        description: C(LINK_TYPE_P<n>) of every port the device has; a device without them has a fixed link type.
        type: str
        choices: [eth, ib]
      sriov:
        description: C(SRIOV_EN) and C(NUM_OF_VFS).
        type: dict
        suboptions:
          enabled:
            description: C(SRIOV_EN).
            type: bool
            required: true
          num_vfs:
            description: C(NUM_OF_VFS); left as it is when not given.
            type: int
      ats:
        description: C(ATS_ENABLED) (Address Translation Services; off for GPUDirect RDMA on bare metal).
        type: bool
      max_read_request:
        description: PCIe Max Read Request Size of every function in bytes, set at run time (not persistent).
        type: int
        choices: [128, 256, 512, 1024, 2048, 4096]
      roce:
        description:
          - RoCE congestion-control NV values of every port, derived by the plan from the fabric's C(roce)
            section (so that they agree with M(aiinfra.datapath.roce_qos)).
        type: dict
        suboptions:
          prio_mask:
            description: C(ROCE_CC_PRIO_MASK_P<n>), bit p on for congestion control on priority p.
            type: int
          cnp_dscp:
            description: C(CNP_DSCP_P<n>).
            type: int
          cnp_priority:
            description: C(CNP_802P_PRIO_P<n>).
            type: int
          fabric:
            description: The fabric the values come from (for the reader; not used by the module).
            type: str
      raw:
        description:
          - Further parameters by their mlxconfig name (C(NAME) or C(NAME[index])), value as a number, a
            boolean or an enum name. None may be a parameter an intent above sets.
        type: dict
        default: {}
      firmware_reset:
        description: Run C(mlxfwreset) after a set so that the values take effect without a reboot.
        type: bool
        default: false
  pci_dir:
    description:
      - Where the node lists its PCI functions (sysfs). A container or test harness that presents the
        devices elsewhere names that directory; every device is found there the same way.
    type: path
    default: /sys/bus/pci/devices
  tool:
    description: V(auto) takes C(mlxconfig), else C(mstconfig), from C(PATH).
    type: str
    choices: [auto, mlxconfig, mstconfig]
    default: auto
  state_file:
    description: The record of what was set or found pending, per device, with the boot id.
    type: path
    default: /var/lib/aiinfra-datapath/nic_config.json
  connection_address:
    description: The address Ansible reaches the node on; a device whose interface has it is never reset.
    type: str
extends_documentation_fragment:
  - aiinfra.datapath.node
  - aiinfra.datapath.node.LOCK
notes:
  - mlxconfig asks for a reboot after every set, also when nothing changed (mstflint issue 551); this module
    decides from the columns it queried, never from that line.
  - A BlueField in DPU mode needs a power cycle for most changes; such a device shows up as
    C(nvconfig-not-applied-after-reboot) after one reboot instead of rebooting again.
seealso:
  - module: aiinfra.datapath.nic_firmware
  - module: aiinfra.datapath.roce_qos
"""

EXAMPLES = r"""
- name: ConnectX-7 rails in Ethernet mode with 8 VFs and the fabric's RoCE congestion-control values
  aiinfra.datapath.nic_config:
    configs:
      - psid: MT_0000000838
        link_type: eth
        sriov: {enabled: true, num_vfs: 8}
        ats: false
        roce: {prio_mask: 8, cnp_dscp: 48, cnp_priority: 6, fabric: rail0}
        raw: {PCI_ATOMIC_MODE: 4}
  register: nvconfig

- name: Reboot where a value waits for the next boot (playbooks/rolling_reboot.yml does this in batches)
  ansible.builtin.reboot:
  when: nvconfig.reboot_required

- name: As site.yml calls it, from the plan
  aiinfra.datapath.nic_config: "{{ datapath_plan | aiinfra.datapath.capability_args('nic_config') }}"
"""

RETURN = r"""
devices:
  description: Every NVIDIA/Mellanox device found, with what was decided per parameter.
  returned: always
  type: list
  elements: dict
  contains:
    pci:
      description: The first physical function, the tool's target.
      type: str
    functions:
      description: Every physical function of the adapter.
      type: list
      elements: str
    psid:
      description: Board id from sysfs (C(infiniband/*/board_id)) or devlink.
      type: str
    part_number:
      description: The tool's C(Name:) line (null when the device was not queried).
      type: str
    config:
      description: Index of the O(configs) entry the device got; null when none matches (see C(why)).
      type: int
    params:
      description:
        - One row per parameter the entry sets - C(param), C(intent), C(wanted), C(default), C(current),
          C(next_boot) (as the tool prints them), C(state) and C(reason).
        - "C(state): V(ok) (Current holds it), V(restage) (Current holds it, Next Boot is set back),
          V(set) (set now, reboot required), V(pending) (in Next Boot, reboot required), V(not_applied)
          (recorded before a boot and still not Current), V(assumed) (the firmware does not report Current)."
      type: list
      elements: dict
    unsupported:
      description: Parameters the entry asks for that this device hides or does not expose, with the reason.
      type: list
      elements: dict
    max_read_request:
      description: Per function C(pci), C(wanted), C(current) (bytes), C(reason) when unreadable.
      type: list
      elements: dict
reboot_required:
  description: A value waits in Next Boot for a reboot (never set for a value already rebooted for).
  returned: always
  type: bool
reboot_reasons:
  description: One line per such value, C(BDF PARAM current -> wanted).
  returned: always
  type: list
  elements: str
  sample: ["0000:3b:00.0 LINK_TYPE_P1: IB(1) -> ETH(2)"]
pending:
  description: The same values as data, C(pci), C(param), C(current), C(next_boot), C(state).
  returned: always
  type: list
  elements: dict
not_applied:
  description: Per device the values still not Current after the boot they were set for (C(params), C(text)).
  returned: always
  type: list
  elements: dict
findings:
  description: C(nvconfig-not-applied-after-reboot) per such device, with C(reason) and C(fix).
  returned: always
  type: list
  elements: dict
unsupported:
  description: Every parameter asked for that a device does not show, with C(pci) and C(reason).
  returned: always
  type: list
  elements: dict
boot_id:
  description: The boot id the record compares with.
  returned: always
  type: str
tool:
  description: V(mlxconfig) or V(mstconfig), null when none was needed or found.
  returned: always
  type: str
state_file:
  description: O(state_file).
  returned: always
  type: str
actions:
  description:
    - What was (or in check mode would be) done. V(nvconfig) - a parameter's Next Boot value (data for the
      diff; the device's V(command) action sets them all at once), V(command) - C(mlxconfig -y set) or
      C(mlxfwreset), V(pcie) - a function's Max Read Request, V(record) - O(state_file).
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive), C(reboot), C(text).
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: nvconfig, target: LINK_TYPE_P1, before: IB(1), after: ETH(2), destructive: false, reboot: true,
       text: "0000:3b:00.0: LINK_TYPE_P1 Next Boot IB(1) -> ETH(2)"}
    - {kind: command, target: "0000:3b:00.0", before: null, after: null, destructive: false, reboot: true,
       text: "run mlxconfig -d 0000:3b:00.0 -y set LINK_TYPE_P1=2 LINK_TYPE_P2=2"}
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config import NicConfig


def main():
    module_main(NicConfig)


if __name__ == "__main__":
    main()
