#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: tuned_profile
short_description: The node plan's boot-time sysctls, THP and kernel arguments as one TuneD profile
version_added: "0.4.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "TuneD (tuned-adm)"
description:
  - The TuneD backend (C(datapath_backend=tuned) in the inventory). Writes one TuneD profile,
    C(PROFILE_DIR/NAME/tuned.conf), with a C([sysctl]) section (the plan's keys), C([vm])
    (C(transparent_hugepages), C(transparent_hugepage.defrag)) and C([bootloader])
    (C(cmdline_aiinfra_datapath), the plan's kernel arguments), instead of the sysctl.d, tmpfiles.d and
    grub.d files of the default backend. The other capabilities still set the live values in the
    same run.
  - The profile includes the site's base profile, by default the one that was active before ours, so
    nothing the site tuned is lost. A C(minimum) sysctl key keeps the base profile's value where that
    is higher (RV(sysctl_raised) lists them).
  - Activates it with C(tuned-adm profile NAME) when TuneD answers C(tuned-adm active) (the daemon,
    or C(daemon = 0) where tuned-adm applies it itself); otherwise writes C(/etc/tuned/active_profile)
    and C(/etc/tuned/profile_mode) for TuneD's next start.
  - Kernel arguments take effect at the next boot; RV(reboot_required) says so while the running
    kernel lacks one (TuneD's bootloader plugin hands them to the boot loader).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Reads the same and reports the file and the activation it would make.
  diff_mode:
    support: full
    description: The profile file (and the active_profile files, or the profile tuned-adm would select).
  platform:
    support: full
    platforms: posix
    description: Any Linux node; TuneD (C(tuned-adm)) to apply the profile now, else at TuneD's next start.
options:
  name:
    description: The profile's name (its directory).
    type: str
    default: aiinfra-datapath
  include:
    description:
      - The base profile(s) to include, separated by C(,). Unset - the profiles active before ours (none
        when TuneD had none). An empty string includes nothing.
    type: str
  sysctl:
    description:
      - The plan's sysctl keys (C(sysctl_profile.keys)), C({KEY - {value, mode}}); C(mode) C(minimum)
        keeps a higher value of the base profile.
    type: dict
    default: {}
  thp:
    description: C({enabled, defrag}) of transparent HugePages; unset options are left out.
    type: dict
    default: {}
  kernel_args:
    description: Kernel arguments for the bootloader plugin.
    type: list
    elements: str
    default: []
  profile_dir:
    description: Where the profile directory goes (TuneD's user profile directory).
    type: path
    default: /etc/tuned
  activate:
    description: Make the profile the active one (tuned-adm, or the active_profile files).
    type: bool
    default: true
extends_documentation_fragment:
  - aiinfra.datapath.node
notes:
  - With TuneD's default C(reapply_sysctl = 1) TuneD re-applies C(/etc/sysctl.d) after its own values; the
    other capabilities remove their own sysctl.d file under this backend, so the profile's values hold.
  - Under this backend the audit reads the boot value of each sysctl from the active TuneD profile
    (C(datapath_facts)), so a value set by no file is still reported.
seealso:
  - module: aiinfra.datapath.sysctl_profile
  - module: aiinfra.datapath.kernel_cmdline
"""

EXAMPLES = r"""
- name: The plan's boot-time kernel state as a TuneD profile over the site's base profile
  aiinfra.datapath.tuned_profile:
    sysctl: "{{ datapath_plan.sysctl_profile['keys'] }}"
    thp: "{{ datapath_plan.hugepages.thp }}"
    kernel_args: "{{ datapath_plan.kernel_cmdline.args }}"
  become: true

- name: Over a named base profile, without activating it
  aiinfra.datapath.tuned_profile:
    include: throughput-performance
    sysctl: {net.core.rmem_max: {value: "67108864", mode: minimum}}
    activate: false
"""

RETURN = r"""
profile:
  description: The profile's name.
  returned: always
  type: str
profile_file:
  description: The profile's tuned.conf.
  returned: always
  type: str
  sample: /etc/tuned/aiinfra-datapath/tuned.conf
include:
  description: The base profile(s) it includes, or null.
  returned: always
  type: str
  sample: throughput-performance
active_before:
  description: The names in /etc/tuned/active_profile before the run.
  returned: always
  type: list
  elements: str
activated_with:
  description: C(tuned-adm), C(files) (TuneD applies it at its next start), or null (activate false).
  returned: always
  type: str
sysctl_raised:
  description: Minimum keys set to the base profile's higher value, C({KEY - {value, file}}).
  returned: always
  type: dict
missing_args:
  description: Kernel arguments the running kernel lacks.
  returned: always
  type: list
  elements: str
reboot_required:
  description: True while the running kernel lacks one of the kernel arguments.
  returned: always
  type: bool
actions:
  description: The file writes and the activation, done or (in check mode) planned.
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned_profile import TunedProfile


def main():
    module_main(TunedProfile)


if __name__ == "__main__":
    main()
