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
    description: Shows C(fstab) and C(mdadm.conf) before and after, and the devices found
      against the actions planned.
  platform:
    support: full
    platforms: posix
    description: Linux nodes with C(util-linux) (lsblk, wipefs, blkid), C(gdisk) (sgdisk),
      C(parted) (partprobe), the mkfs tool of the filesystem and, for RAID, C(mdadm).
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
        description: C(lsblk) TRAN value, for example C(nvme), C(sata), C(sas).
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
        O(partition_label) (type FD00 for array members, 8300 otherwise).
      - C(false) uses whole devices as array members or filesystem.
      - xfs needs a filesystem of at least 300 MiB; smaller layouts are refused before
        anything is changed.
    type: bool
    default: true
  partition_label:
    description: GPT partition name that marks our partition.
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
  root:
    description:
      - For tests. Directory that O(fstab), O(mdadm_conf) and the lock file resolve below.
        Devices and the mount point are never redirected.
      - Must be an absolute path.
    type: path
    default: /
notes:
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
  aiinfra.datapath.nvme_layout: "{{ datapath_plan.storage }}"

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
    select: {transport: nvme, min_size: 3TB, max_size: 4TB}
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
    - What the module did, or would do in check mode, in order. C(action) is one of
      C(wipe), C(partition), C(rescan), C(create-array), C(assemble-array), C(mkfs),
      C(mkdir), C(mount), C(remount), C(fstab), C(mdadm-conf), C(directory).
  returned: always
  type: list
  elements: dict
  sample:
    - action: partition
      target: /dev/nvme1n1
      detail: GPT, partition 1 from 1 MiB to the end, type FD00, name aiinfra-cache
    - action: create-array
      target: /dev/md/md-cache
      detail: RAID0, chunk 512 KiB, metadata 1.2, members /dev/nvme1n1p1, /dev/nvme2n1p1
    - {action: mkfs, target: /dev/md127, detail: xfs label=model-cache}
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
  description: True when the ARRAY line was added to mdadm.conf; rebuild the initramfs.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import (
    DEFAULT_LOCK_PATH,
    HostRoot,
    LockTimeout,
    node_lock,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout import (
    LayoutError,
    NvmeLayout,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import (
    CommandError,
    Runner,
)


def argument_spec():
    return dict(
        devices=dict(type="list", elements="path"),
        select=dict(type="dict", options=dict(
            model=dict(type="str"),
            min_size=dict(type="raw"),
            max_size=dict(type="raw"),
            transport=dict(type="str"),
            count=dict(type="int"),
        )),
        raid=dict(type="dict", options=dict(
            level=dict(type="int", choices=[0], default=0),
            chunk_kib=dict(type="int", default=512),
            name=dict(type="str", required=True),
        )),
        filesystem=dict(type="dict", required=True, options=dict(
            type=dict(type="str", choices=["xfs", "ext4"], default="xfs"),
            label=dict(type="str", required=True),
        )),
        mount=dict(type="dict", required=True, options=dict(
            path=dict(type="path", required=True),
            options=dict(type="list", elements="str", default=["noatime"]),
        )),
        directories=dict(type="list", elements="dict", default=[], options=dict(
            path=dict(type="str", required=True),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="str"),
        )),
        wipe_serials=dict(type="list", elements="str", default=[], no_log=False),
        partition=dict(type="bool", default=True),
        partition_label=dict(type="str", default="aiinfra-cache"),
        reserve_bytes=dict(type="int", default=0),
        mdadm_conf=dict(type="path", default="/etc/mdadm/mdadm.conf"),
        fstab=dict(type="path", default="/etc/fstab"),
        root=dict(type="path", default="/"),
    )


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def validate(params):
    for key, value in params.items():
        if any("\x00" in text for text in _strings(value)):
            raise LayoutError("%s must not contain a NUL character" % key)
    if not (params["root"] or "").startswith("/"):
        raise LayoutError("root must be an absolute path, got %r" % params["root"])
    for path in params["devices"] or []:
        if not path.startswith("/dev/") or path.rstrip("/") == "/dev":
            raise LayoutError("devices: %r is not a device path (an absolute path under /dev/)" % path)
    if not params["devices"] and not params["select"]:
        raise LayoutError("one of devices or select is required")
    if params["devices"] and params["select"]:
        raise LayoutError("devices and select are mutually exclusive")
    if params["select"] and params["select"].get("count") is not None and params["select"]["count"] < 1:
        raise LayoutError("select.count must be at least 1, got %d" % params["select"]["count"])
    for key in ("fstab", "mdadm_conf"):
        if not params[key].startswith("/"):
            raise LayoutError("%s must be an absolute path, got %r" % (key, params[key]))
    if not params["mount"]["path"].startswith("/") or params["mount"]["path"].rstrip("/") == "":
        raise LayoutError("mount.path must be an absolute path other than /, got %r"
                          % params["mount"]["path"])
    params["mount"]["path"] = params["mount"]["path"].rstrip("/")
    raid = params["raid"]
    if raid is not None:
        if raid["chunk_kib"] < 4 or raid["chunk_kib"] & (raid["chunk_kib"] - 1):
            raise LayoutError("raid.chunk_kib must be a power of two of at least 4, got %d"
                              % raid["chunk_kib"])
        if not raid["name"] or "/" in raid["name"] or " " in raid["name"]:
            raise LayoutError("raid.name must be a plain name, got %r" % raid["name"])
    fs = params["filesystem"]
    limit = 12 if fs["type"] == "xfs" else 16
    if not fs["label"] or len(fs["label"]) > limit:
        raise LayoutError("filesystem.label %r: %s labels have 1 to %d characters"
                          % (fs["label"], fs["type"], limit))
    if params["reserve_bytes"] < 0:
        raise LayoutError("reserve_bytes must not be negative")
    for item in params["directories"]:
        if item.get("mode") is not None:
            try:
                int(item["mode"], 8)
            except ValueError:
                raise LayoutError("directories: mode %r of %s is not octal" % (item["mode"], item["path"]))


def run(module):
    params = module.params
    validate(params)
    host = HostRoot(params["root"])
    layout = NvmeLayout(Runner(module), params, host, check_mode=module.check_mode)
    with node_lock(host.path(DEFAULT_LOCK_PATH)):
        layout.read()
        layout.guard()
        layout.plan()
        if layout.actions and not module.check_mode:
            layout.apply()
    for warning in layout.warnings:
        module.warn(warning)
    result = dict(
        changed=bool(layout.actions),
        actions=layout.actions,
        devices=layout.public_devices(),
        uuid=layout.uuid,
        mount=layout.mount_state,
        fstab_line=layout.fstab_line_now(),
        initramfs_update_needed=layout.initramfs_update_needed or (
            module.check_mode and any(a["action"] == "mdadm-conf" for a in layout.actions)),
    )
    if module._diff:
        result["diff"] = layout.diff_data()
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = run(module)
    except LayoutError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    except CommandError as exc:
        module.fail_json(msg="nvme_layout: %s" % exc, rc=exc.rc, stdout=exc.out, stderr=exc.err)
    except LockTimeout as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="nvme_layout: %s" % exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
