# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hugepages
short_description: Size HugePage pools per page size and NUMA node, THP and hugetlbfs mounts
version_added: 0.1.0
requirements:
  - "Python 3 on the node (standard library only)"
  - "mount (hugetlbfs mounts)"
description:
  - Sets the number of 2M and 1G HugePages, as a total
    (C(/sys/kernel/mm/hugepages/hugepages-<kB>kB/nr_hugepages)) or per NUMA node
    (C(/sys/devices/system/node/nodeN/hugepages/...)), and reads the pools back.
  - The kernel silently allocates fewer pages than asked when memory is fragmented. A
    shortfall is never a silent success; it fails (rolling back the pools changed in this
    call) or warns, with requested against allocated pages per NUMA node. A growth larger
    than C(MemAvailable) is not attempted at all.
  - Refuses to shrink a pool below the pages in use (C(nr - free + reserved)).
  - Persists what the plan asks for. C(sysctl) writes C(vm.nr_hugepages) for the default
    page size to its own file. C(boot_unit) writes systemd-tmpfiles C(w) lines. C(cmdline)
    returns the arguments in C(cmdline_args) for M(aiinfra.datapath.kernel_cmdline);
    this module never edits the boot loader.
  - Sets transparent hugepages (C(enabled), C(defrag)) live and persists them in the
    tmpfiles file.
  - Mounts hugetlbfs per page size and keeps one entry per mount point in fstab.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description:
      - Computes the same actions and touches nothing. Fragmentation cannot be predicted,
        so a shortfall only shows in a real run.
  diff_mode:
    support: full
    description:
      - Shows the pools written (C(hugepage pools)), THP (C(transparent hugepages)), the
        hugetlbfs mounts and the managed files before and after; nothing when nothing changes.
  platform:
    support: full
    platforms: posix
    description: Linux nodes with sysfs.
options:
  pages:
    description: The pools, one entry per page size.
    type: list
    elements: dict
    default: []
    suboptions:
      size:
        description: The page size.
        type: str
        required: true
        choices: ["2M", "1G"]
      count:
        description: Total number of pages of this size.
        type: int
        required: true
      per_node:
        description:
          - Pages per NUMA node (node number -> count). They must add up to O(pages[].count).
          - When omitted the kernel spreads the total over the nodes.
        type: dict
      persist:
        description: How the count survives a reboot.
        type: str
        choices: [sysctl, cmdline, boot_unit, none]
        default: sysctl
  on_shortfall:
    description: Fail (and roll back the pools) or only warn when the kernel allocates fewer pages.
    type: str
    choices: [fail, warn]
    default: fail
  thp:
    description: Transparent hugepage settings, live and persisted in O(boot_unit_file).
    type: dict
    suboptions:
      enabled:
        description:
          - Value for C(/sys/kernel/mm/transparent_hugepage/enabled) (C(always), C(madvise),
            C(never)); checked against what the kernel offers. Null leaves it alone.
        type: str
      defrag:
        description:
          - Value for C(/sys/kernel/mm/transparent_hugepage/defrag) (C(always), C(defer),
            C(defer+madvise), C(madvise), C(never)); checked against what the kernel offers.
            Null leaves it alone.
        type: str
  mounts:
    description: hugetlbfs mounts, persisted in O(fstab).
    type: list
    elements: dict
    default: []
    suboptions:
      size:
        description: Page size of the mount.
        type: str
        required: true
        choices: ["2M", "1G"]
      path:
        description: Mount point (created when missing).
        type: path
        required: true
      owner:
        description: Owner of the mount root (name or number).
        type: str
        default: root
      group:
        description: Group of the mount root (name or number).
        type: str
        default: root
      mode:
        description: Octal mode of the mount root.
        type: str
        default: "0755"
  sysctl_file:
    description: Own managed file for C(vm.nr_hugepages); removed when nothing persists via sysctl.
    type: path
    default: /etc/sysctl.d/90-aiinfra-datapath-hugepages.conf
  thp_persist:
    description:
      - Whether O(boot_unit_file) carries the THP settings for the boot. V(false) (the TuneD backend, whose
        profile's C([vm]) section sets them) leaves them out; the live values are still set.
    type: bool
    default: true
  boot_unit_file:
    description:
      - Own managed systemd-tmpfiles file for per-node and non-default sizes with
        C(persist=boot_unit) and for THP; removed when empty.
    type: path
    default: /etc/tmpfiles.d/aiinfra-datapath-hugepages.conf
  fstab:
    description: The fstab that receives the hugetlbfs entries (other lines are kept as they are).
    type: path
    default: /etc/fstab
extends_documentation_fragment:
  - aiinfra.datapath.node
  - aiinfra.datapath.node.lock
notes:
  - The HugePage pools and THP are global to the kernel, also when run inside a container
    or network namespace.
  - Kubernetes kubelet reads HugePage capacity at start; restart it after a change.
seealso:
  - module: aiinfra.datapath.kernel_cmdline
"""

EXAMPLES = r"""
- name: Apply the node plan's HugePages
  aiinfra.datapath.hugepages:
    pages: "{{ datapath_plan.hugepages.pages }}"
    thp: "{{ datapath_plan.hugepages.thp }}"
    mounts: "{{ datapath_plan.hugepages.mounts }}"
  register: datapath_hugepages

- name: Hand the boot arguments over to the kernel command line
  aiinfra.datapath.kernel_cmdline:
    args: "{{ datapath_hugepages.cmdline_args }}"

- name: 64 pages of 2M now, persisted via sysctl
  aiinfra.datapath.hugepages:
    pages:
      - {size: 2M, count: 64}
    on_shortfall: fail
"""

RETURN = r"""
pages:
  description: Per page size what was found and done.
  returned: always
  type: list
  elements: dict
  sample:
    - {size: 2M, requested: 64, before: 0, after: 64, per_node: null,
       nodes_before: {"0": 0}, nodes_after: {"0": 64}, persist: sysctl, shortfall: false}
thp:
  description: THP settings before and after.
  returned: always
  type: dict
  sample: {enabled: {before: always, after: madvise}}
mounts:
  description: The hugetlbfs mounts and the options they are mounted with.
  returned: always
  type: list
  elements: dict
cmdline_args:
  description: Kernel arguments that C(persist=cmdline) pages need, for M(aiinfra.datapath.kernel_cmdline).
  returned: always
  type: list
  elements: str
  sample: [hugepagesz=1G, "hugepages=0:4,1:4"]
reboot_required:
  description: Pages could not be allocated now but are persisted on the kernel command line.
  returned: always
  type: bool
pools_changed:
  description:
    - Whether a HugePage pool was (or in check mode would be) written, that is whether the
      actions hold a V(pool) action. The role restarts kubelet on it and the rolling reboot
      checks it is false after the boot.
  returned: always
  type: bool
  sample: true
actions:
  description:
    - What the module did, or would do in check mode, in order (see docs/architecture.md).
      V(pool) actions write a C(nr_hugepages) file (O(pages)), V(thp) actions a transparent
      hugepage setting (O(thp)), V(mount) mounts a hugetlbfs and V(owner) fixes the owner and
      mode of a mounted one (O(mounts)), V(file) actions write or remove O(sysctl_file),
      O(boot_unit_file) or O(fstab).
    - For a V(pool) action C(after) is the count the kernel holds after the write (read back;
      lower than asked after a shortfall), in check mode the count asked for.
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive) (data is lost),
      C(reboot) (takes effect at the next boot) and C(text) (the line a person reads); see docs/architecture.md.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: pool, target: /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages, before: 0, after: 64,
       destructive: false, reboot: false, text: "write /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages: 0 -> 64"}
overrides:
  description: Files applied later at boot that set C(vm.nr_hugepages) to another value.
  returned: always
  type: list
  elements: dict
tuned:
  description:
    - The node's active TuneD profile (C(/etc/tuned/active_profile)), merged as TuneD does; V(null) without one.
    - C(conflicts) holds its C([vm]) C(transparent_hugepages) when it differs from O(thp.enabled) - TuneD writes
      it when it starts, after this module's boot file, so TuneD's value is the one that stays (C(wins) V(tuned),
      and a warning).
  returned: always
  type: dict
  sample: {profiles: [throughput-performance], files: [/usr/lib/tuned/throughput-performance/tuned.conf],
           conflicts: [{key: transparent_hugepages, value: always, wanted: madvise,
                        file: /usr/lib/tuned/throughput-performance/tuned.conf, profile: throughput-performance,
                        wins: tuned}]}
rollback:
  description: Pools restored after a shortfall (on failure only).
  returned: failure
  type: list
  elements: dict
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._hugepages import HugePages


def main():
    module_main(HugePages)


if __name__ == "__main__":
    main()
