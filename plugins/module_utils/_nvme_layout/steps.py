# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps of ``nvme_layout``: runs the planned actions in order (stdlib only).

``LayoutSteps`` is the acting half of ``layout.NvmeLayout``. The plan was made from what
the devices held a moment ago, so a device that went away since stops everything before the
first change; the filesystem target is probed again before ``mkfs``; a failed command names
the step and the commands done before it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import apply_file
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.classify import describe_content
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import (
    ALIGN_BYTES,
    GPT_ENTRIES_BYTES,
    PART_CODE_LINUX,
    PART_CODE_RAID,
    PART_TYPE_GUIDS,
    LayoutError,
    array_uuid,
    canonical_array_line,
    fstab_line,
    mkfs_argv,
    parse_mdadm_brief,
    update_fstab,
    update_mdadm_conf,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.plan import dir_changes, dir_now, retext
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError


class LayoutSteps(object):
    """apply() of ``NvmeLayout`` (a mixin over the capability and ``LayoutPlan``)."""

    def apply(self, state, actions):
        spec = self.params
        self._commands_before = len(getattr(self.runner, "commands", []))
        # The plan was made from what the devices held a moment ago; a device that went away
        # since (a detached loop device keeps its node with size 0) stops everything here.
        check = getattr(self.inspector, "vanished", None)
        gone = []
        if check is not None:
            for device in state.devices:
                why = check(device["device"])
                if why:
                    gone.append(why)
        if gone:
            raise self.refuse(state, "nothing was changed on any device; %s" % " | ".join(gone))
        raid = spec.get("raid")
        fs = spec["filesystem"]
        n = len(state.devices)
        fresh_fs_target = state.force_mkfs
        skipped = []
        for act in actions:
            kind = act.kind
            if kind == "wipe":
                self._wipe(self._dev(state, act.target))
            elif kind == "partition":
                dev = self._dev(state, act.target)
                # sfdisk, not sgdisk: sgdisk sleeps a second after every write. The kernel is
                # told below (partprobe), the same way for both.
                self._run(["sfdisk", "--no-reread", "--no-tell-kernel", "-q", dev["device"]],
                          data=self._gpt_script(dev, PART_CODE_RAID if raid else PART_CODE_LINUX))
                dev["member"] = self._reread(dev["device"])
                # Stale signatures of older data at the same offset belong to nothing now.
                self._run(["wipefs", "-a", dev["member"]])
                dev["member_state"] = "empty"
                fresh_fs_target = True
            elif kind == "rescan":
                dev = self._dev(state, act.target)
                dev["member"] = self._reread(dev["device"])
                if raid is None:
                    state.fs_target = dev["member"]
            elif kind == "create-array":
                members = [d["member"] if spec.get("partition", True) else d["device"] for d in state.devices]
                self._run(["mdadm", "--create", act.target, "--run", "--level=%d" % raid["level"],
                           "--raid-devices=%d" % n, "--chunk=%dK" % raid["chunk_kib"], "--metadata=1.2",
                           "--name=%s" % raid["name"]] + members)
                state.fs_target = self._array_node(members)
                fresh_fs_target = True
            elif kind == "assemble-array":
                members = [d["member"] for d in state.devices]
                self._run(["mdadm", "--assemble", act.target] + members)
                state.fs_target = self._array_node(members)
            elif kind == "mkfs":
                if raid is None:
                    state.fs_target = state.devices[0]["member"]
                blkid = self.probe(state, state.fs_target)
                if blkid.get("TYPE") == fs["type"] and blkid.get("LABEL") == fs["label"]:
                    # The assembled array already holds our filesystem: nothing to do.
                    state.uuid = blkid.get("UUID")
                    skipped.append(act)
                    continue
                if (blkid.get("TYPE") or blkid.get("PTTYPE")) and not fresh_fs_target:
                    raise LayoutError("refusing mkfs on %s: it holds %s" % (state.fs_target, describe_content(blkid)))
                self._run(mkfs_argv(fs, raid, n, state.fs_target, force=fresh_fs_target))
                state.uuid = self.probe(state, state.fs_target, strict=False).get("UUID")
                retext(act, target=state.fs_target)
            elif kind == "mkdir":
                os.makedirs(act.target, 0o755)
            elif kind == "mount":
                opts = spec["mount"].get("options") or []
                argv = ["mount", "-t", fs["type"]]
                if opts:
                    argv += ["-o", ",".join(opts)]
                self._run(argv + [state.fs_target, act.target])
                state.mount["mounted"] = True
            elif kind == "remount":
                self._run(["mount", "-o", "remount," + ",".join(spec["mount"]["options"]), act.target])
            elif kind == "fstab":
                mount = spec["mount"]
                line = fstab_line(state.uuid, mount["path"], fs["type"], mount.get("options"))
                act.after = update_fstab(act.before, line, mount["path"], state.uuid)
                retext(act, detail=line)
                apply_file(self.root, act)
            elif kind == "mdadm-conf":
                rc, out, err = self._run(["mdadm", "--detail", "--brief", state.fs_target], record=False)
                brief = parse_mdadm_brief(out)
                if not brief:
                    raise LayoutError("mdadm --detail --brief %s printed no ARRAY line" % state.fs_target)
                line = canonical_array_line(brief, raid["name"])
                act.after = update_mdadm_conf(act.before, line, "/dev/md/%s" % raid["name"], array_uuid(brief))
                retext(act, detail=line)
                apply_file(self.root, act)
                state.initramfs_update_needed = True
            elif kind == "directory":
                want = [w for w in state.dir_plan if w["path"] == act.target][0]
                changes = dir_changes(want)
                if not changes:
                    skipped.append(act)
                    continue
                detail = act.data["detail"]
                retext(act, detail="%s%s" % ("/".join(changes), detail[detail.index(" ("):]))
                act.before = dir_now(act.target)
                self._apply_directory(want)
        # Actions that turned out to be no-ops once the real state was visible (mkfs of an
        # assembled array that already holds our filesystem, directories already right).
        actions[:] = [a for a in actions if not any(a is s for s in skipped)]
        if not state.uuid and state.fs_target:
            state.uuid = self.probe(state, state.fs_target, strict=False).get("UUID")

    @staticmethod
    def _apply_directory(want):
        if not os.path.isdir(want["path"]):
            os.makedirs(want["path"])
        if want["uid"] is not None or want["gid"] is not None:
            os.chown(want["path"], -1 if want["uid"] is None else want["uid"],
                     -1 if want["gid"] is None else want["gid"])
        if want["mode"] is not None:
            os.chmod(want["path"], want["mode"])

    @staticmethod
    def _dev(state, device):
        for dev in state.devices:
            if dev["device"] == device:
                return dev
        raise LayoutError("internal: unknown device %s" % device)

    def _gpt_script(self, dev, code):
        """sfdisk's input for a new GPT with our one partition: from 1 MiB to the last usable
        sector less ``reserve_bytes``, in the device's logical sectors (what ``sgdisk -n
        1:1MiB:-<reserve>K`` made before)."""
        sector = self.inspector.logical_sector_size(os.path.basename(dev["device"]))
        total = int(dev.get("size") or 0) // sector
        # the backup header and the backup entry array sit behind the last usable sector
        last_usable = total - 2 - (GPT_ENTRIES_BYTES + sector - 1) // sector
        start = ALIGN_BYTES // sector
        end = last_usable - (self.params.get("reserve_bytes") or 0) // sector
        if end <= start:
            raise LayoutError("nothing was changed on %s: %d bytes leave no room for a partition from 1 MiB "
                              "with reserve_bytes=%d" % (dev["device"], int(dev.get("size") or 0),
                                                         self.params.get("reserve_bytes") or 0))
        return 'label: gpt\nstart=%d, size=%d, type=%s, name="%s"\n' % (
            start, end - start + 1, PART_TYPE_GUIDS[code], self.params.get("partition_label") or "aiinfra-cache")

    def _run(self, argv, record=True, data=None):
        try:
            return self.runner.run(argv, record=record, data=data)
        except CommandError as exc:  # name the step and what was done before it
            done = self.runner.commands[getattr(self, "_commands_before", 0):-1]
            done_text = ", ".join("%s %s" % (c[0], c[-1]) for c in done) or "none"
            raise LayoutError("%s; actions done before: %s" % (exc, done_text))

    def _wipe(self, dev):
        for part in dev["partitions"]:
            if part.get("node"):
                if part["blkid"].get("TYPE") == "linux_raid_member":
                    self._run(["mdadm", "--zero-superblock", part["node"]])
                self._run(["wipefs", "-a", part["node"]])
        if dev["blkid"].get("TYPE") == "linux_raid_member":
            self._run(["mdadm", "--zero-superblock", dev["device"]])
        if dev["pttype"]:
            self._run(["sgdisk", "--zap-all", dev["device"]])
        self._run(["wipefs", "-a", dev["device"]])
        if dev["partitions"]:
            self._reread(dev["device"], expect=False)
        dev["partitions"] = []

    def _reread(self, device, expect=True, timeout=10.0):
        """Make the kernel see the table. ``partprobe`` first: it adds the partitions one by
        one (BLKPG), which also works on kernels without the GPT parser."""
        name = os.path.basename(device)
        if self.runner.which("partprobe"):
            self.runner.run(["partprobe", device], check=False, record=True)
        else:
            self.runner.run(["blockdev", "--rereadpt", device], check=False, record=True)
        if not expect:
            return None
        deadline = time.time() + timeout
        while time.time() < deadline:
            node = self.inspector.partitions_of(name).get(1)
            if node and os.path.exists(node):
                return node
            time.sleep(0.1)
        raise LayoutError("partition 1 of %s did not appear within %.0f s after partprobe" % (device, timeout))

    def _array_node(self, members, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            holders = [set(h for h in self.inspector.holders(os.path.basename(m)) if h.startswith("md"))
                       for m in members]
            common = set.intersection(*holders) if holders else set()
            if common:
                return "/dev/" + sorted(common)[0]
            time.sleep(0.1)
        raise LayoutError("array over %s did not appear" % ", ".join(members))
