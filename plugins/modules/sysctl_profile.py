# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sysctl_profile
short_description: Apply and persist a whole sysctl profile in one call
version_added: 0.1.0
requirements:
  - "Python 3 on the node (standard library only); systemd-sysctl (or procps sysctl --system) reads the
    managed file at boot"
description:
  - Reads every requested kernel parameter from C(/proc/sys) first and fails before
    touching anything when a key does not exist on this kernel or is read-only here
    (for example C(net.core.rmem_max) inside a child network namespace), naming every
    bad key.
  - Writes only the live values that differ, reads each one back, and fails when the
    kernel rejects (for example C(EINVAL)) or silently clamps a value, naming the key,
    the wanted and the actual value. Keys already changed by this call are rolled back,
    and so is a clamped key itself.
  - Multi-value keys such as C(net.ipv4.tcp_rmem) are compared field by field, so
    whitespace and the tabs in C(/proc) output never cause a change.
  - Persists the profile in its own file (written atomically with mode C(0644), only when
    the content differs). Other files are never edited.
  - Reports keys that a file applied later at boot would override, following the order of
    systemd-sysctl (C(/etc/sysctl.d), C(/run/sysctl.d), C(/usr/local/lib/sysctl.d),
    C(/usr/lib/sysctl.d), C(/lib/sysctl.d); same-name files mask each other; lexical order
    by file name; C(/etc/sysctl.conf) last).
  - Reports for each key whether it is held per network namespace (C(netns)) or for the
    whole kernel (C(global)).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Computes the same plan and touches nothing.
  diff_mode:
    support: full
    description: Shows live values and the managed file before and after.
  platform:
    support: full
    platforms: posix
    description: Linux nodes with C(/proc/sys).
options:
  keys:
    description:
      - The kernel parameters, by name (dotted C(net.core.rmem_max) or slash form).
      - Each value is either a scalar (an exact value) or a dictionary with the
        suboptions below.
      - C(value) (required) is the wanted value; multi-value keys are written as one
        string with fields separated by blanks.
      - C(mode) is C(exact) (default) or C(minimum). C(minimum) only raises, field by
        field for multi-value keys; fields already higher are kept, and the file persists
        the resulting value so that a boot never lowers it.
      - C(ignore_missing) (default C(false)) skips, instead of failing, a key that does
        not exist on this kernel or is read-only here; a skipped key is not written to the
        file.
      - C(scope) (C(netns) or C(global)) is accepted from the node plan and reported; when
        omitted the module decides from the key name.
    type: dict
    required: true
  file:
    description:
      - The managed file that persists the profile. The module owns it entirely.
    type: path
    default: /etc/sysctl.d/90-aiinfra-datapath.conf
  persist:
    description:
      - Whether O(file) persists the keys. V(false) (the TuneD backend, where M(aiinfra.datapath.tuned_profile)
        persists them) removes the file when it exists; the live values are still set.
    type: bool
    default: true
  apply:
    description:
      - Whether to change live values now. With C(false) only the file is written and the
        keys report C(persist_only).
    type: bool
    default: true
  on_override:
    description:
      - What to do when a file applied later at boot sets one of the keys to another value.
      - C(warn) returns the overrides and a warning; C(fail) fails before changing anything.
    type: str
    choices: [warn, fail]
    default: warn
extends_documentation_fragment:
  - aiinfra.datapath.node
  - aiinfra.datapath.node.lock
notes:
  - Writing a C(global) key from inside a network namespace changes the whole kernel.
seealso:
  - module: aiinfra.datapath.hugepages
"""

EXAMPLES = r"""
- name: Apply the node plan's sysctl profile
  aiinfra.datapath.sysctl_profile:
    keys: "{{ datapath_plan.sysctl_profile.keys }}"
    file: "{{ datapath_plan.sysctl_profile.file }}"

- name: Raise socket buffers, never lower them
  aiinfra.datapath.sysctl_profile:
    keys:
      net.core.rmem_max: {value: "16777216", mode: minimum}
      net.ipv4.tcp_rmem: {value: "4096 131072 16777216", mode: minimum}
      vm.zone_reclaim_mode: 1
      net.ipv4.tcp_fastopen: {value: "3", ignore_missing: true}
    on_override: fail
"""

RETURN = r"""
keys:
  description: Per key what was found and done, keyed by the dotted name.
  returned: always
  type: dict
  sample:
    net.ipv4.tcp_rmem:
      before: "4096 87380 6291456"
      after: "4096 131072 16777216"
      wanted: "4096 131072 16777216"
      target: "4096 131072 16777216"
      mode: minimum
      scope: netns
      action: set
actions:
  description:
    - What the module did, or would do in check mode, in order (see docs/architecture.md).
      V(sysctl) actions set a live key (O(keys)), a V(file) action rewrites O(file).
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive) (data is lost),
      C(reboot) (takes effect at the next boot) and C(text) (the line a person reads); see docs/architecture.md.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: sysctl, target: net.ipv4.tcp_rmem, before: "4096 87380 6291456", after: "4096 131072 16777216",
       destructive: false, reboot: false, text: "set net.ipv4.tcp_rmem: 4096 87380 6291456 -> 4096 131072 16777216"}
file:
  description: The managed file.
  returned: always
  type: str
  sample: /etc/sysctl.d/90-aiinfra-datapath.conf
file_changed:
  description: Whether the managed file was (or would be) rewritten.
  returned: always
  type: bool
overrides:
  description: Keys that a file applied later at boot sets to another value.
  returned: always
  type: list
  elements: dict
  sample: [{key: vm.swappiness, file: /etc/sysctl.d/99-local.conf, value: "60",
            wanted: "10", reason: applied after the managed file at boot}]
tuned:
  description:
    - The node's active TuneD profile (C(/etc/tuned/active_profile)), read and merged as TuneD does
      (C(profile_dirs), C(include=), C(type=), C(replace=)); V(null) when TuneD has no active profile.
    - C(conflicts) lists each key this module sets that the profile sets to another value, with the profile's
      file and who ends with the key - C(sysctl.d) when C(reapply_sysctl) is on (TuneD's default - it re-applies
      /etc/sysctl.d after its own values), C(tuned) when C(reapply_sysctl = 0) in
      C(/etc/tuned/tuned-main.conf) (then a warning too).
  returned: always
  type: dict
  sample: {profiles: [network-throughput], files: [/usr/lib/tuned/network-throughput/tuned.conf,
           /usr/lib/tuned/throughput-performance/tuned.conf], reapply_sysctl: true,
           conflicts: [{key: net.ipv4.tcp_rmem, value: "4096 131072 16777216", wanted: "4096 131072 33554432",
                        file: /usr/lib/tuned/network-throughput/tuned.conf, profile: network-throughput,
                        wins: sysctl.d}]}
rollback:
  description: Keys restored after the kernel rejected or clamped a value (on failure only).
  returned: failure
  type: list
  elements: dict
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import SysctlProfile


def main():
    module_main(SysctlProfile)


if __name__ == "__main__":
    main()
