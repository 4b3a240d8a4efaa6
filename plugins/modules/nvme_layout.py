# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvme_layout
short_description: Lay out local NVMe devices as a model cache (GPT, md RAID0, xfs/ext4, mount, fstab)
version_added: 0.1.0
requirements:
  - "Python 3 on the node (standard library only)"
  - "lsblk, blkid, wipefs, partprobe, blockdev and mount (util-linux, parted)"
  - "sgdisk from gdisk"
  - "mdadm (RAID0)"
  - "mkfs.xfs from xfsprogs or mkfs.ext4 from e2fsprogs"
  - "nvme from nvme-cli (optional)"
description:
  - Converges one node's local NVMe devices to a declared layout in one call, following
    the plan-then-act flow of linux-system-roles storage. Takes the C(storage) part of the
    per-host plan unchanged.
  - "Flow: resolve the devices (real paths); inspect every device with C(lsblk),
    C(wipefs -n), C(blkid -p), the GPT (C(sgdisk -p)) and C(mdadm --examine); classify
    each as C(empty), C(ours-exact), C(ours-partial), C(foreign), C(in-use),
    C(unprobeable) or C(vanished); run the
    data-loss guard over all devices; compute an ordered action list; then, outside check
    mode, run it."
  - B(Data-loss guard.) A device that carries any signature (partition table, filesystem,
    RAID or LVM metadata) and is not already this layout is refused, naming the device and
    every signature found, unless O(wipe_serials) names it. A device that is mounted
    elsewhere, holds the root or boot filesystem, is active swap, or is held by another md
    or device-mapper device is always refused. The guard runs before anything is changed
    on any device; check mode reports the same decision.
  - B(Unprobeable and vanished devices.) A device that cannot be probed (C(lsblk) or
    C(wipefs -n) fails, C(blkid -p) fails or exits 2 with an error message, or its first
    and last MiB cannot be read directly) is classed C(unprobeable) and always refused,
    even when O(wipe_serials) names it, naming the device and the probe that failed. A
    device of size 0 or whose node is gone (a detached loop device keeps its node with
    size 0) is classed C(vanished) and always refused; this is checked again before the
    first change on any device.
  - A device on which no tool finds a signature but whose first or last MiB holds non-zero
    bytes holds unknown data; it is classed C(foreign) and refused unless O(wipe_serials)
    names it. A blank device (or a sparse image) reads zeros there.
  - Converges from any partial state of its own (partition without filesystem, array not
    assembled, filesystem not mounted, mounted without fstab entry) and changes nothing
    when the layout is complete.
  - C(mdadm.conf) and C(fstab) are edited atomically and only in our own line; every other
    line stays byte-identical. The initramfs is not rebuilt; RV(initramfs_update_needed)
    reports when it should be.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Runs the same inspection and guard, returns the actions it would take and
      touches no device and no file.
  diff_mode:
    support: full
    description: Shows C(fstab) and C(mdadm.conf) before and after, and, rendered from the same
      actions, sections C(block devices) (what is on each device against what the action makes
      of it), C(mounts) and C(directories). A layout that is already complete shows no diff.
  platform:
    support: full
    platforms: posix
    description: Linux nodes with C(util-linux) (lsblk, wipefs, blkid; sfdisk, which Debian ships in
      C(fdisk), to write the partition table), C(gdisk) (sgdisk, to read it), C(parted) (partprobe),
      the mkfs tool of the filesystem and, for RAID, C(mdadm).
options:
  devices:
    description:
      - The devices to use, by path (C(/dev/nvme0n1), C(/dev/disk/by-id/nvme-...)).
        Loop devices are accepted here (the lab gives every node one).
      - Each must be an absolute path under C(/dev/).
      - Mutually exclusive with O(select).
    type: list
    elements: path
  select:
    description:
      - A rule choosing whole disks (C(lsblk) type C(disk); never loop, md, dm or rom
        devices). It never matches a device holding C(/), C(/boot), active swap, a
        mounted filesystem other than O(mount.path), or a member of another md/dm device.
      - Mutually exclusive with O(devices).
    type: dict
    suboptions:
      model:
        description: Shell-style pattern matched against the model, case-insensitive.
        type: str
      min_size:
        description:
          - Smallest size, in bytes or with a unit. C(K M G T) and C(KiB MiB GiB TiB) are
            powers of 1024, C(KB MB GB TB) powers of 1000.
        type: raw
      max_size:
        description: Largest size, same units as O(select.min_size).
        type: raw
      transport:
        description:
          - How the disks are attached. The spec's NVMe transport words C(pcie), C(tcp),
            C(rdma) and C(fc) are accepted and all match C(lsblk)'s TRAN value C(nvme)
            (C(lsblk) does not report the transport of an NVMe controller); any other word is
            compared with the TRAN value as it is, for example C(nvme), C(sata), C(sas).
        type: str
      count:
        description:
          - How many devices the rule must match. When it matches another number the module
            fails while reading, before it changes anything, and names the devices matched.
        type: int
  raid:
    description:
      - md array across all devices, or null for exactly one device.
    type: dict
    suboptions:
      level:
        description: RAID level. Only RAID0 (striping for read throughput) is supported.
        type: int
        choices: [0]
        default: 0
      chunk_kib:
        description: Chunk size in KiB; also sets the filesystem stripe geometry.
        type: int
        default: 512
      name:
        description:
          - Array name (C(/dev/md/<name>), C(--name)); also how the module recognises its
            own members (md superblock name C(<name>) or C(<homehost>:<name>)).
        type: str
        required: true
  filesystem:
    description: The filesystem on the partition, the whole device or the array.
    type: dict
    required: true
    suboptions:
      type:
        description:
          - C(xfs) (C(mkfs.xfs -d su=,sw=) on arrays) or C(ext4)
            (C(mkfs.ext4 -E stride=,stripe-width=) on arrays).
        type: str
        choices: [xfs, ext4]
        default: xfs
      label:
        description:
          - Filesystem label; with the type, it identifies our filesystem. At most 12
            characters for xfs, 16 for ext4.
        type: str
        required: true
  mount:
    description: Where and how to mount it.
    type: dict
    required: true
    suboptions:
      path:
        description: Mount point; created (mode 0755) when missing.
        type: path
        required: true
      options:
        description:
          - Mount options. The fstab entry adds C(nofail) so that a failed cache device
            never stops the boot.
          - When mounted without some of them, VFS flags (C(noatime), C(nodiratime),
            C(nodev), ...) are applied with a remount; others are reported as a warning.
        type: list
        elements: str
        default: [noatime]
  directories:
    description: Directories below the mount point, created and kept at owner, group, mode.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Path relative to O(mount.path); no C(..).
        type: str
        required: true
      owner:
        description: User name or uid.
        type: str
      group:
        description: Group name or gid.
        type: str
      mode:
        description: Octal mode as a string, for example C("0755").
        type: str
  wipe_serials:
    description:
      - Devices that may be wiped when they hold something else. Each entry is the
        device's serial or WWN (C(lsblk -o SERIAL,WWN)); for devices without a serial
        (loop devices) a stable path of the device (C(/dev/loop7), a C(/dev/disk/by-id/)
        link) or a loop device's backing file.
      - A device named here and found C(foreign) gets its signatures, partition table and
        md superblocks erased before the layout is created. Devices that are in use are
        refused even when named here.
    type: list
    elements: str
    default: []
  partition:
    description:
      - C(true) gives each device a GPT with one partition from 1 MiB named
        O(partition_label) (type FD00 for array members, 8300 otherwise), written with C(sfdisk)
        in the device's logical sectors, then added to the kernel's view with C(partprobe).
      - C(false) uses whole devices as array members or filesystem.
      - xfs needs a filesystem of at least 300 MiB; smaller layouts are refused before
        anything is changed.
    type: bool
    default: true
  partition_label:
    description:
      - GPT partition name that marks our partition.
      - 1 to 36 characters (what a GPT entry holds), without double quotes, backslashes or control
        characters.
    type: str
    default: aiinfra-cache
  reserve_bytes:
    description:
      - Bytes left unpartitioned at the end of each device (over-provisioning), used when a
        partition is created. Existing partitions are not resized.
    type: int
    default: 0
  mdadm_conf:
    description: mdadm configuration file that gets our C(ARRAY) line.
    type: path
    default: /etc/mdadm/mdadm.conf
  fstab:
    description: fstab file that gets our entry.
    type: path
    default: /etc/fstab
extends_documentation_fragment:
  - aiinfra.datapath.node
  - aiinfra.datapath.node.lock
notes:
  - O(root) redirects O(fstab), O(mdadm_conf), the lock file and what is read of C(/sys) and
    C(/proc). Devices (C(/dev/...)), the mount point and O(directories) are never redirected,
    and the commands run on the node itself.
  - Destructive only for devices named in O(wipe_serials). Read the guard's message before
    adding a device there; the module cannot know whether the data on it matters.
  - Kernels without a GPT partition parser (some minimal VM kernels) still work;
    partitions are registered with C(partprobe), which adds them one by one.
  - After the first run on a node with RAID, rebuild the initramfs
    (C(update-initramfs -u) / C(dracut -f)) when RV(initramfs_update_needed) is true, so
    that the array is assembled under its name at boot.
seealso:
  - name: linux-system-roles storage
    description: The plan-then-act design this module follows.
    link: https://github.com/linux-system-roles/storage
"""

EXAMPLES = r"""
- name: Lay out the node's NVMe cache from the plan
  aiinfra.datapath.nvme_layout: "{{ datapath_plan.nvme_layout }}"

- name: Two NVMe devices as RAID0, xfs, mounted with noatime
  aiinfra.datapath.nvme_layout:
    devices:
      - /dev/disk/by-id/nvme-SAMSUNG_MZWLR3T8HBLS-00007_S64RNE0R800001
      - /dev/disk/by-id/nvme-SAMSUNG_MZWLR3T8HBLS-00007_S64RNE0R800002
    raid: {level: 0, chunk_kib: 512, name: md-cache}
    filesystem: {type: xfs, label: model-cache}
    mount: {path: /mnt/model-cache, options: [noatime, nodiratime]}
    directories:
      - {path: models, owner: root, group: root, mode: "0755"}
      - {path: checkpoints, owner: root, group: root, mode: "0750"}
    wipe_serials: [S64RNE0R800002]     # this one held an old ext4 scratch filesystem

- name: Every 3.84 TB NVMe disk that is not the OS disk
  aiinfra.datapath.nvme_layout:
    select: {transport: pcie, min_size: 3TB, max_size: 4TB}   # the spec's word; lsblk says nvme
    raid: {name: md-cache}
    filesystem: {type: xfs, label: model-cache}
    mount: {path: /mnt/model-cache}

- name: Lab node - its loop device, no partition table
  aiinfra.datapath.nvme_layout:
    devices: [/dev/loop3]
    partition: false
    filesystem: {type: ext4, label: model-cache}
    mount: {path: /mnt/model-cache}
  check_mode: true
  register: nvme_plan
"""

RETURN = r"""
actions:
  description:
    - What the module did, or would do in check mode, in order (see docs/architecture.md).
    - "Block devices: V(wipe), V(partition), V(rescan), V(create-array), V(assemble-array) and
      V(mkfs); C(before) is what is on the device, C(after) what the action makes of it. V(wipe),
      and V(mkfs) over another filesystem, are C(destructive)."
    - V(mkdir), V(mount), V(remount) and V(directory) for the mount point and the directories.
    - V(fstab) and V(mdadm-conf) edit O(fstab) and O(mdadm_conf); C(before) and C(after) are the
      whole file.
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive) (data is lost),
      C(reboot) (takes effect at the next boot) and C(text) (the line a person reads); see docs/architecture.md.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: partition, target: /dev/nvme1n1, before: null,
       after: "GPT, partition 1 from 1 MiB to the end, type FD00, name aiinfra-cache", destructive: false,
       reboot: false,
       text: "partition /dev/nvme1n1: GPT, partition 1 from 1 MiB to the end, type FD00, name aiinfra-cache"}
    - {kind: create-array, target: /dev/md/md-cache, before: null,
       after: "RAID0, chunk 512 KiB, metadata 1.2, members /dev/nvme1n1, /dev/nvme2n1", destructive: false,
       reboot: false,
       text: "create-array /dev/md/md-cache: RAID0, chunk 512 KiB, metadata 1.2, members /dev/nvme1n1, /dev/nvme2n1"}
    - {kind: mkfs, target: /dev/md127, before: null, after: xfs label=model-cache, destructive: false,
       reboot: false, text: "mkfs /dev/md127: xfs label=model-cache"}
devices:
  description:
    - The devices found and how they were classified; C(class) is C(empty),
      C(ours-exact), C(ours-partial), C(foreign), C(in-use), C(unprobeable) or
      C(vanished), C(found) lists what is on the device in words (for C(unprobeable), the
      probes that failed).
  returned: always
  type: list
  elements: dict
  sample:
    - path: /dev/disk/by-id/nvme-X_S1
      device: /dev/nvme1n1
      size: 3840755982336
      serial: S1
      wwn: eui.0025388b01234567
      model: SAMSUNG MZWLR3T8HBLS-00007
      tran: nvme
      backing_file: null
      class: foreign
      found: [ext4 filesystem label=data]
      member: /dev/nvme1n1
      wipe_allowed: true
uuid:
  description: UUID of the filesystem (null in check mode before it exists).
  returned: always
  type: str
  sample: 0b3c4cbe-5b1f-4ac6-9a54-3e8f7b0e7c1d
mount:
  description: The mount point, whether it is mounted, the options and the source device.
  returned: always
  type: dict
  sample: {path: /mnt/model-cache, mounted: true, options: [noatime], source: /dev/md127}
fstab_line:
  description: Our fstab entry (with a placeholder UUID in check mode before mkfs).
  returned: always
  type: str
  sample: UUID=0b3c4cbe-5b1f-4ac6-9a54-3e8f7b0e7c1d /mnt/model-cache xfs noatime,nofail 0 2
initramfs_update_needed:
  description:
    - True when the ARRAY line was added to mdadm.conf (in check mode, when it would be);
      rebuild the initramfs.
  returned: always
  type: bool
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.layout import NvmeLayout


def main():
    module_main(NvmeLayout)


if __name__ == "__main__":
    main()
