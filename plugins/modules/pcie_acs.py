#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pcie_acs
short_description: PCIe ACS redirect off between each GPU and its nearest NICs and NVMe devices, at every boot
version_added: "0.4.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "lspci and setpci from pciutils"
  - "nvme from nvme-cli (optional)"
description:
  - ACS request/completion redirect on a PCIe switch port sends peer-to-peer traffic between a GPU and
    a NIC or NVMe device below that switch up to the root complex, so GPUDirect RDMA and Storage run
    slowly or not at all. This module turns it off on exactly the bridges those paths cross, and keeps
    it off across reboots.
  - The bridges come from the same read as M(aiinfra.datapath.node_topology) (sysfs and
    C(lspci -vvv)); every bridge with an ACS capability between a GPU and one of its nearest NICs
    (and, with O(nvme), NVMe devices) is listed, whether its redirect is on now or not, so the unit
    follows the hardware and a second run changes nothing.
  - Writes a systemd oneshot unit (O(unit_file)) with one C(setpci -s BDF ECAP_ACS+0x6.w=0000) per
    bridge, ordered before C(sysinit.target) (so before the NVIDIA daemons, kubelet and every
    workload), and enables it with the C(sysinit.target.wants) link, as C(systemctl enable) would.
    With O(runtime) the bridges whose redirect is on are cleared now too.
  - Opt-in; not part of C(site.yml). C(playbooks/pcie_acs.yml) runs it. Where there is nothing to
    change (no GPU, as in the lab, or no bridge with ACS on the paths) it returns C(supported=false)
    with the reason, changes nothing, and removes a unit it wrote before.
  - Config space it cannot read (not root, C(lspci) missing) on a path is an error, not a guess.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Reads the same and reports the unit, the link and the bridges it would clear.
  diff_mode:
    support: full
    description: The unit file, and the bridges whose ACS redirect would be cleared.
  platform:
    support: full
    platforms: posix
    description: Linux sysfs, C(lspci) and C(setpci) (pciutils), systemd.
options:
  state:
    description:
      - V(off) writes and enables the unit (and clears ACS now with O(runtime)); V(absent) removes the
        unit and its link (ACS comes back at the next boot, as the firmware sets it).
    type: str
    choices: ["off", absent]
    default: "off"
  nvme:
    description: Also the bridges between each GPU and its nearest NVMe devices (GPUDirect Storage).
    type: bool
    default: true
  runtime:
    description: Clear ACS redirect now on the bridges where it is on, besides writing the boot unit.
    type: bool
    default: true
  unit_file:
    description: The systemd unit to write; its C(sysinit.target.wants) link is made next to it.
    type: path
    default: /etc/systemd/system/aiinfra-datapath-pcie-acs.service
extends_documentation_fragment:
  - aiinfra.datapath.node
notes:
  - With the IOMMU translating DMA, ACS off merges the IOMMU groups below the switch; that matters for
    device assignment to VMs (VFIO), not for GPUDirect on bare metal. C(iommu=pt) is the usual pairing.
  - The BDFs in the unit are those of this machine; a card moved to another slot needs a new run (the
    audit's C(golden-topology) and C(acs-redirect) findings show it).
seealso:
  - module: aiinfra.datapath.node_topology
"""

EXAMPLES = r"""
- name: ACS off between GPUs and their NICs and NVMe devices, now and at every boot
  aiinfra.datapath.pcie_acs:
  become: true

- name: Only the boot unit (the change takes effect at the next boot)
  aiinfra.datapath.pcie_acs:
    runtime: false

- name: Remove the unit
  aiinfra.datapath.pcie_acs:
    state: absent
"""

RETURN = r"""
supported:
  description: False when there is nothing to change here (no GPU, or no bridge with ACS on the paths); see RV(reason).
  returned: always
  type: bool
reason:
  description: Why there is nothing to change.
  returned: when RV(supported) is false
  type: str
  sample: "no GPU on this node: no GPU to NIC or NVMe path to open"
bridges:
  description: The bridges in the unit, each with whether its redirect was on and the GPU paths crossing it.
  returned: always
  type: list
  elements: dict
  sample: [{pci: "0000:17:01.0", redirect: true, paths: [GPU0-mlx5_0]}]
unit_file:
  description: The unit's path.
  returned: always
  type: str
reboot_required:
  description: Always false; with O(runtime) the change is live, without it the unit applies it at the next boot.
  returned: always
  type: bool
actions:
  description: What changed (or would change in check mode) - the unit file, its link, each bridge cleared.
  returned: always
  type: list
  elements: dict
notes:
  description: What the topology read could not read.
  returned: when there is something to say
  type: list
  elements: str
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._pcie_acs import PcieAcs


def main():
    module_main(PcieAcs)


if __name__ == "__main__":
    main()
