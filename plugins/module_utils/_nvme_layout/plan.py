# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The data-loss guard and the planner of ``nvme_layout`` (stdlib only).

``LayoutPlan`` is the planning half of ``layout.NvmeLayout``: the guard refuses, over all
devices and before anything else, every device that is in use, vanished, unprobeable or
foreign without ``wipe_serials``; then ``plan`` computes the ordered actions (wipe,
partition, rescan, array, mkfs, mount, fstab, mdadm.conf, directories). Nothing on the node
changes here; the only commands run are read-only probes (``blkid -p``, ``mdadm --detail``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import pwd
import re
import stat

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Action
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.classify import describe_content
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import (
    ALIGN_BYTES,
    PART_CODE_LINUX,
    PART_CODE_RAID,
    VFS_FLAGS,
    XFS_MIN_BYTES,
    LayoutError,
    array_uuid,
    canonical_array_line,
    conf_has_array,
    fstab_line,
    mount_options_missing,
    parse_blkid_export,
    parse_mdadm_brief,
    update_fstab,
    update_mdadm_conf,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.probe import probe_failed

# Diff sections of the actions that are not file contents.
BLOCK_DEVICES = "block devices"
MOUNTS = "mounts"
DIRECTORIES = "directories"

NEW_UUID = "<uuid-of-the-new-filesystem>"  # one fstab field: check mode cannot know it

PUBLIC_DEVICE_KEYS = ("path", "device", "size", "serial", "wwn", "model", "tran", "backing_file", "class",
                      "found", "member", "wipe_allowed")


def layout_action(kind, target, detail, diff=BLOCK_DEVICES, **fields):
    """An action whose text reads ``<kind> <target>: <detail>``; ``detail`` is kept in ``data``."""
    return Action(kind, target, "%s %s: %s" % (kind, target, detail), diff=diff, detail=detail, **fields)


def retext(action, detail=None, target=None):
    """Say in the action's text what ``apply`` found (the real target, line or changes)."""
    if target is not None:
        action.target = target
    if detail is not None:
        action.data["detail"] = detail
    action.text = "%s %s: %s" % (action.kind, action.target, action.data["detail"])


class LayoutPlan(object):
    """guard() and plan() of ``NvmeLayout`` (a mixin: ``self.params``, ``self.runner``,
    ``self.inspector``, ``self.root`` and ``self.warn`` come from the capability)."""

    def public_devices(self, state):
        return [dict((k, d.get(k)) for k in PUBLIC_DEVICE_KEYS) for d in state.devices]

    def refuse(self, state, msg):
        """The error of a plan that stops before any change: the devices as classified, no actions."""
        return LayoutError(msg, devices=self.public_devices(state), actions=[])

    # ------------------------------------------------------------------ guard
    def guard(self, state):
        """Refuse before anything destructive happens on any device."""
        refused = []
        for dev in state.devices:
            if dev["class"] == "in-use":
                refused.append("%s (%s) is in use: %s" % (dev["path"], dev["device"], "; ".join(dev["found"])))
            elif dev["class"] == "vanished":
                # Refused even when named in wipe_serials: there is nothing to lay out.
                refused.append("%s (%s): %s" % (dev["path"], dev["device"], "; ".join(dev["found"])))
            elif dev["class"] == "unprobeable":
                # Refused even when named in wipe_serials: what it holds is not known.
                refused.append(
                    "%s (%s) cannot be probed, so what it holds is unknown: %s"
                    % (dev["path"], dev["device"], "; ".join(dev["found"]))
                )
            elif dev["class"] == "foreign" and not dev["wipe_allowed"]:
                notes = dev.get("wipe_notes") or []
                why = " (not named for wiping: %s)" % "; ".join(notes) if notes else ""
                refused.append("%s (%s) holds %s%s" % (dev["path"], dev["device"], "; ".join(dev["found"]), why))
        if refused:
            raise self.refuse(
                state,
                "nothing was changed on any device; refusing to destroy data: %s. To allow wiping "
                "a device name it in wipe_serials (serial, WWN, /dev/disk/by-id path; an NVMe namespace by "
                "<serial>:<nsid>, EUI-64, NGUID or WWN; for a loop device its path or backing file)."
                % " | ".join(refused),
            )

    # ------------------------------------------------------------------ plan
    def plan(self, state):
        """The guard, then the ordered actions."""
        self.guard(state)
        spec = self.params
        raid = spec.get("raid")
        partition = spec.get("partition", True)
        acts = []
        fresh_target = False
        for dev in state.devices:
            if dev["class"] == "foreign":
                found = "; ".join(dev["found"])
                acts.append(layout_action("wipe", dev["device"], "erase %s (allowed by wipe_serials)" % found,
                                          before=found, destructive=True))
                dev["member_state"] = "missing" if partition else "empty"
                dev["_fresh"] = True
            if partition and dev["member_state"] == "missing":
                detail = "GPT, partition 1 from 1 MiB to the end, type %s, name %s" % (
                    PART_CODE_RAID if raid else PART_CODE_LINUX, spec.get("partition_label") or "aiinfra-cache")
                acts.append(layout_action("partition", dev["device"], detail, after=detail))
                dev["_fresh"] = True
            elif partition and dev.get("needs_rescan"):
                acts.append(layout_action("rescan", dev["device"], "partprobe: the kernel has not read the partition "
                                          "table", before="partition 1 not known to the kernel",
                                          after="partition 1 known to the kernel"))
        self._check_partition_sizes(state)
        states = [d["member_state"] for d in state.devices]
        state.array = None
        if raid:
            state.array = self._array_state(state)
            members_desc = ", ".join(d["device"] for d in state.devices)
            device = "/dev/md/%s" % raid["name"]
            if state.array["assembled"]:
                pass
            elif all(s == "raid-ours" for s in states) and state.array["uuids_agree"]:
                acts.append(layout_action("assemble-array", device, "mdadm --assemble from %s" % members_desc,
                                          before="not assembled", after="assembled from %s" % members_desc))
            elif any(s == "raid-ours" for s in states):
                raise self.refuse(
                    state,
                    "nothing was changed; members of array %s disagree (%s): some carry its md "
                    "superblock and some do not, or the superblocks name different arrays. Name "
                    "all devices in wipe_serials to rebuild it."
                    % (raid["name"], ", ".join("%s: %s" % (d["device"], d["member_state"]) for d in state.devices)),
                )
            else:
                detail = "RAID%d, chunk %d KiB, metadata 1.2, members %s" % (
                    raid["level"], raid["chunk_kib"], members_desc)
                acts.append(layout_action("create-array", device, detail, after=detail))
                fresh_target = True
        else:
            dev = state.devices[0]
            fresh_target = dev["member_state"] in ("missing", "empty") or bool(dev.get("_fresh"))
        fs = spec["filesystem"]
        fs_state = self._fs_state(state, fresh_target)
        if fs_state == "foreign":
            raise self.refuse(
                state,
                "nothing was changed; %s holds %s, not %s label=%s. Name its devices in "
                "wipe_serials to recreate it." % (state.fs_target, state.fs_found, fs["type"], fs["label"]),
            )
        if fs_state == "missing" and fs["type"] == "xfs":
            self._check_xfs_size(state)
        if fs_state in ("missing", "unknown"):
            wanted = "%s label=%s" % (fs["type"], fs["label"])
            detail = wanted + ("" if fs_state == "missing" else " (unless the assembled array already holds it)")
            target = state.fs_target or "(new %s)" % ("array" if raid else "partition")
            # A filesystem of another kind on devices named in wipe_serials is replaced.
            replaced = state.fs_found if state.force_mkfs else None
            acts.append(layout_action("mkfs", target, detail, before=replaced, after=wanted,
                                      destructive=bool(replaced)))
        self._plan_mount(state, acts)
        self.plan_files(state, acts)
        self.plan_directories(state, acts)
        return acts

    def _plan_mount(self, state, acts):
        spec = self.params
        fs = spec["filesystem"]
        mount_path = spec["mount"]["path"]
        mounted = [m for m in state.mounts if m["target"] == mount_path]
        fs_majmin = self._majmin_of(state.fs_target) if state.fs_target else None
        state.mount = dict(path=mount_path, mounted=False, options=spec["mount"].get("options") or [])
        if mounted:
            top = mounted[-1]
            if not (fs_majmin and top["majmin"] == fs_majmin):
                raise self.refuse(state, "nothing was changed; %s is already a mount point of %s, not of "
                                         "our filesystem" % (mount_path, top["source"]))
            state.mount.update(mounted=True, source=top["source"])
            missing = mount_options_missing(top, state.mount["options"])
            flags = [o for o in missing if o in VFS_FLAGS]
            if flags:
                now = ",".join(top["options"])
                acts.append(layout_action("remount", mount_path, "add mount options %s" % ",".join(flags),
                                          diff=MOUNTS, before=now, after=",".join([now] + flags)))
            other = [o for o in missing if o not in VFS_FLAGS]
            if other:
                self.warn("%s is mounted without %s; they take effect at the next mount"
                          % (mount_path, ",".join(other)))
            return
        if not os.path.isdir(mount_path):
            acts.append(layout_action("mkdir", mount_path, "mount point, mode 0755", diff=DIRECTORIES,
                                      after="mount point, mode 0755"))
        detail = "%s -o %s" % (fs["type"], ",".join(state.mount["options"]) or "defaults")
        acts.append(layout_action("mount", mount_path, detail, diff=MOUNTS, after=detail))

    def _check_xfs_size(self, state):
        """mkfs.xfs refuses filesystems under 300 MiB; refuse before partitioning instead."""
        spec = self.params
        overhead = (ALIGN_BYTES + (spec.get("reserve_bytes") or 0)) if spec.get("partition", True) else 0
        sizes = [int(d.get("size") or 0) - overhead for d in state.devices]
        total = sum(sizes) if spec.get("raid") else sizes[0]
        if 0 < total < XFS_MIN_BYTES:
            raise self.refuse(
                state,
                "nothing was changed; xfs needs at least 300 MiB, the layout leaves %d MiB on %s; "
                "use bigger devices or filesystem.type ext4"
                % (total // (1024 * 1024), ", ".join(d["device"] for d in state.devices)),
            )

    def _check_partition_sizes(self, state):
        """Our partition is never resized; say so when it differs from the declared layout."""
        if not self.params.get("partition", True):
            return
        reserve = self.params.get("reserve_bytes") or 0
        for dev in state.devices:
            gpt = dev.get("gpt")
            if dev["class"] not in ("ours-exact", "ours-partial") or not gpt or not gpt.get("last_usable"):
                continue
            sector = gpt["sector_size"]
            wanted = gpt["last_usable"] - reserve // sector
            end = dev["partitions"][0]["end"]
            if abs(end - wanted) > ALIGN_BYTES // sector:
                self.warn(
                    "partition 1 of %s ends at sector %d, the layout (reserve_bytes=%d) wants about %d; "
                    "it is not resized (name the device in wipe_serials and wipe it to recreate)"
                    % (dev["device"], end, reserve, wanted)
                )

    @staticmethod
    def _majmin_of(node):
        try:
            st = os.stat(node)
        except OSError:
            return None
        return "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))

    def _array_state(self, state):
        raid = self.params["raid"]
        holders = set()
        uuids = set()
        for dev in state.devices:
            member = dev["member"]
            if dev["member_state"] == "raid-ours":
                if member:
                    holders.update(h for h in self.inspector.holders(os.path.basename(member)) if h.startswith("md"))
                uuid = self._examine(dev).get("MD_UUID")
                uuids.add(re.sub("[:-]", "", uuid).lower() if uuid else None)
        assembled = None
        if len(holders) == 1 and all(d["member_state"] == "raid-ours" and d["member"] for d in state.devices):
            name = holders.pop()
            if all(name in self.inspector.holders(os.path.basename(d["member"])) for d in state.devices):
                assembled = "/dev/" + name
        return dict(
            assembled=assembled,
            uuids_agree=len(uuids) == 1 and None not in uuids,
            uuid=uuids.pop() if len(uuids) == 1 else None,
            device="/dev/md/%s" % raid["name"],
        )

    @staticmethod
    def _examine(dev):
        if dev["partitions"]:
            return dev["partitions"][0]["examine"]
        return dev["examine"]

    def _fs_state(self, state, fresh):
        """missing | ours | foreign | unknown (array not assembled yet)."""
        fs = self.params["filesystem"]
        state.fs_found = None
        if self.params.get("raid"):
            state.fs_target = state.array["assembled"]
            if not state.fs_target:
                return "missing" if fresh else "unknown"
        else:
            dev = state.devices[0]
            state.fs_target = dev["member"] if not dev.get("_fresh") else None
            if fresh:
                return "missing"
            if not state.fs_target:
                # Partition node not there yet (rescan planned): its content was probed
                # through the whole device at the partition's offset.
                blkid = dev["partitions"][0]["blkid"] if dev["partitions"] else {}
                state.uuid = blkid.get("UUID")
                return "ours" if dev["member_state"] == "fs-ours" else "missing"
        blkid = self.probe(state, state.fs_target)
        if not blkid.get("TYPE") and not blkid.get("PTTYPE"):
            return "missing"
        if blkid.get("TYPE") == fs["type"] and blkid.get("LABEL") == fs["label"]:
            state.uuid = blkid.get("UUID")
            return "ours"
        state.fs_found = describe_content(blkid) or "a %s partition table" % blkid.get("PTTYPE")
        if all(d["wipe_allowed"] for d in state.devices):
            state.force_mkfs = True
            return "missing"
        return "foreign"

    def probe(self, state, node, strict=True):
        """blkid of ``node``; a failed probe (not "nothing found") raises when ``strict``, so
        that an unreadable target is never taken for a blank one."""
        argv = ["blkid", "-p", "-o", "export", node]
        rc, out, err = self.runner.run(argv, check=False)
        if strict and probe_failed(argv, rc, err):
            raise self.refuse(
                state,
                "stopped before any further change: cannot probe %s: blkid -p failed (rc %s)%s"
                % (node, rc, ": %s" % err.strip()[:200] if (err or "").strip() else ""),
            )
        return parse_blkid_export(out) if rc == 0 else {}

    def plan_files(self, state, acts):
        spec = self.params
        fs = spec["filesystem"]
        mount = spec["mount"]
        before = self.root.read_raw(spec["fstab"])
        line = fstab_line(state.uuid or NEW_UUID, mount["path"], fs["type"], mount.get("options"))
        after = update_fstab(before, line, mount["path"], state.uuid)
        if after != (before or ""):
            acts.append(layout_action("fstab", spec["fstab"], line, diff="file", before=before, after=after))
        if not spec.get("raid"):
            return
        name = spec["raid"]["name"]
        conf_before = self.root.read_raw(spec["mdadm_conf"])
        brief = None
        if state.array and state.array["assembled"]:
            rc, out, err = self.runner.run(["mdadm", "--detail", "--brief", state.array["assembled"]], check=False)
            brief = parse_mdadm_brief(out) if rc == 0 else None
        predicted = brief or "ARRAY /dev/md/%s metadata=1.2 name=%s UUID=<uuid of the new array>" % (name, name)
        if brief is not None and conf_has_array(conf_before, brief):
            return
        after = update_mdadm_conf(conf_before, canonical_array_line(predicted, name), "/dev/md/%s" % name,
                                  array_uuid(predicted))
        acts.append(layout_action("mdadm-conf", spec["mdadm_conf"], predicted, diff="file", before=conf_before,
                                  after=after))

    def plan_directories(self, state, acts):
        base = self.params["mount"]["path"]
        state.dir_plan = []
        for item in self.params.get("directories") or []:
            rel = item["path"]
            if rel.startswith("/") or ".." in rel.split("/"):
                raise LayoutError("directories: path %r must be relative to the mount point without '..'" % rel)
            full = os.path.join(base, rel)
            uid, gid = _ids(item.get("owner"), item.get("group"))
            mode = int(str(item["mode"]), 8) if item.get("mode") is not None else None
            wanted = dict(path=full, uid=uid, gid=gid, mode=mode)
            if state.mount["mounted"]:
                changes = dir_changes(wanted)
            else:
                # Not mounted yet: what the filesystem holds is seen only after the mount;
                # the real run drops this action when the directory is already right.
                changes = ["create or verify after mount"]
            if changes:
                words = "(owner %s, group %s, mode %s)" % (
                    item.get("owner") or "-", item.get("group") or "-", item.get("mode") or "-")
                before = dir_now(full) if state.mount["mounted"] else None
                acts.append(layout_action("directory", full, "%s %s" % ("/".join(changes), words),
                                          diff=DIRECTORIES, before=before, after=words[1:-1]))
                state.dir_plan.append(wanted)


def dir_now(path):
    """Owner, group and mode of directory ``path`` in words, or None when it does not exist."""
    if not os.path.isdir(path):
        return None
    st = os.stat(path)
    return "owner %d, group %d, mode %04o" % (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))


def dir_changes(want):
    if not os.path.isdir(want["path"]):
        return ["create"]
    st = os.stat(want["path"])
    changes = []
    if want["uid"] is not None and st.st_uid != want["uid"]:
        changes.append("owner")
    if want["gid"] is not None and st.st_gid != want["gid"]:
        changes.append("group")
    if want["mode"] is not None and stat.S_IMODE(st.st_mode) != want["mode"]:
        changes.append("mode")
    return changes


def _ids(owner, group):
    uid = gid = None
    try:
        if owner is not None:
            uid = int(owner) if re.match(r"^[0-9]{1,10}\Z", str(owner)) else pwd.getpwnam(owner).pw_uid
        if group is not None:
            gid = int(group) if re.match(r"^[0-9]{1,10}\Z", str(group)) else grp.getgrnam(group).gr_gid
    except KeyError as exc:
        raise LayoutError("directories: unknown user or group %s" % exc)
    return uid, gid
