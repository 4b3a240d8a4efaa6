# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kernel_cmdline
short_description: Add and remove kernel command line arguments, touching only its own
version_added: 0.1.0
requirements:
  - "Python 3 on the node (standard library only)"
  - "grub-mkconfig or update-grub (the grub.d drop-in), or grubby (RHEL family)"
description:
  - Keeps an ordered list of kernel arguments, repeated names included
    (C(hugepagesz=2M hugepages=512 hugepagesz=1G hugepages=8)), in the boot loader
    configuration, idempotently.
  - Debian and Ubuntu (C(grub_d)) get one drop-in file in C(/etc/default/grub.d) that
    appends to C(GRUB_CMDLINE_LINUX), then C(update-grub). Arguments set in files the
    module does not own are never edited; removing them is reported instead.
  - The RHEL family (C(grubby)) is changed with C(grubby --update-kernel=ALL). The module
    remembers the arguments it added in C(/etc/aiinfra-datapath/kernel_cmdline.json), so
    that dropping one from O(args) removes only what it added itself.
  - Reports C(reboot_required) when the running kernel (C(/proc/cmdline)) lacks a wanted
    argument or still has a removed one, and signals it the distribution's way
    (C(/run/reboot-required) on Debian). It never reboots.
  - Where no boot loader is found (containers, the lab) it reports C(bootloader=none) and
    writes nothing, or only the drop-in with O(when_no_bootloader=write_drop_in).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Computes the same actions and touches nothing.
  diff_mode:
    support: full
    description:
      - Shows the drop-in file, or the default entry's arguments around each grubby command
        and the state file, before and after; nothing when nothing changes.
  platform:
    support: full
    platforms: posix
    description: Linux nodes booting with GRUB (Debian family) or grubby (RHEL family).
options:
  args:
    description:
      - Wanted arguments, in order (C(name) or C(name=value), no blanks or quotes).
        Repeated names are kept as given.
    type: list
    elements: str
    default: []
  remove:
    description:
      - Arguments to remove. C(name) removes every C(name) and C(name=...); C(name=value)
        only that one.
    type: list
    elements: str
    default: []
  backend:
    description:
      - Boot loader backend; C(auto) detects it from C(/boot) and the tools in PATH.
      - V(tuned) (the TuneD backend) leaves the arguments to the TuneD profile's C([bootloader]) section
        (M(aiinfra.datapath.tuned_profile)); this module then removes its own grub.d drop-in of an earlier
        backend and reports RV(reboot_required) from the running kernel.
    type: str
    choices: [auto, grub_d, grubby, none, tuned]
    default: auto
  drop_in:
    description: The drop-in the C(grub_d) backend owns.
    type: path
    default: /etc/default/grub.d/90-aiinfra-datapath.cfg
  update_bootloader:
    description: Regenerate the boot loader configuration (C(update-grub)) after a change.
    type: bool
    default: true
  when_no_bootloader:
    description:
      - With no boot loader found, C(skip) writes nothing; C(write_drop_in) writes only the
        drop-in (for images that get a boot loader later).
    type: str
    choices: [skip, write_drop_in]
    default: skip
extends_documentation_fragment:
  - aiinfra.datapath.node
  - aiinfra.datapath.node.lock
seealso:
  - module: aiinfra.datapath.hugepages
"""

EXAMPLES = r"""
- name: Kernel arguments from the node plan
  aiinfra.datapath.kernel_cmdline:
    args: "{{ datapath_plan.kernel_cmdline.args }}"
  register: datapath_kernel_cmdline

- name: Two page sizes on the command line, drop an old option
  aiinfra.datapath.kernel_cmdline:
    args: [hugepagesz=2M, hugepages=512, hugepagesz=1G, hugepages=8, iommu=pt]
    remove: [transparent_hugepage]
"""

RETURN = r"""
bootloader:
  description: The backend used (C(grub_d), C(grubby) or C(none)).
  returned: always
  type: str
  sample: grub_d
args:
  description: The wanted arguments, in order.
  returned: always
  type: list
  elements: str
proc_cmdline:
  description: Arguments of the running kernel.
  returned: always
  type: list
  elements: str
missing:
  description: Wanted arguments the running kernel does not have yet (in order).
  returned: always
  type: list
  elements: str
still_present:
  description: Running kernel arguments that O(remove) asks to drop.
  returned: always
  type: list
  elements: str
not_removable:
  description: Arguments to remove that files the module does not own set (grub_d).
  returned: always
  type: list
  elements: str
reboot_required:
  description: The boot configuration differs from the running kernel; a reboot applies it.
  returned: always
  type: bool
actions:
  description:
    - What the module did, or would do in check mode, in order (see docs/architecture.md).
      V(file) actions write or remove the drop-in (O(drop_in)) or the grubby state file,
      V(command) actions run C(update-grub), C(grub-mkconfig) or C(grubby) (for grubby,
      C(before) and C(after) are the default entry's arguments around the command), a V(flag)
      action touches the distribution's reboot-required flag.
    - C(reboot) is true on the actions that change the boot command line.
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive) (data is lost),
      C(reboot) (takes effect at the next boot) and C(text) (the line a person reads); see docs/architecture.md.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: file, target: /etc/default/grub.d/90-aiinfra-datapath.cfg, before: null,
       after: "GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX iommu=pt\"\n", destructive: false, reboot: true,
       text: "write /etc/default/grub.d/90-aiinfra-datapath.cfg"}
    - {kind: command, target: update-grub, before: null, after: null, destructive: false, reboot: true,
       text: "run update-grub"}
    - {kind: flag, target: /run/reboot-required, before: null, after: "", destructive: false, reboot: false,
       text: "touch /run/reboot-required"}
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._cmdline import KernelCmdline


def main():
    module_main(KernelCmdline)


if __name__ == "__main__":
    main()
