# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``nvme_layout`` capability: read the block devices, classify them, guard, plan, act.

The flow follows linux-system-roles storage: ``read`` resolves the devices (a list or a
``select`` rule) and inspects every one of them (``probe``) and classifies it (``classify``);
``plan`` runs the data-loss guard over *all* devices, then computes the ordered actions
(``plan``); outside check mode ``apply`` runs them (``steps``). Parsing and planning are pure
functions over the recorded tool outputs (``parse``) so that the unit tests feed them outputs
captured from real loop devices.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Capability, render_diff
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.classify import (
    build_device,
    classify,
    set_class,
    wipe_decision,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import (
    GPT_NAME_MAX,
    LayoutError,
    fstab_line,
    md_name_matches,
    parse_blkid_export,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.plan import NEW_UUID, LayoutPlan
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.probe import Inspector, match_rule
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.steps import LayoutSteps


class LayoutState(object):
    """What ``read`` found (``devices``, ``mounts``) and what ``plan``/``apply`` learn on the way
    (the filesystem target and its UUID, the array, the mount, the directories)."""

    def __init__(self, devices, mounts):
        self.devices = devices
        self.mounts = mounts
        self.array = None
        self.fs_target = None
        self.fs_found = None
        self.force_mkfs = False
        self.uuid = None
        self.mount = None
        self.dir_plan = []
        self.initramfs_update_needed = False


def _strings(value):
    """Every string in a parameter value, keys of dictionaries included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in _strings(key) + _strings(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in _strings(item)]
    return []


# Kernel names of disks and namespaces (the spec refuses them too: cluster_spec/checks_security.py)
KERNEL_DISK = re.compile(r"\A/dev/(nvme[0-9]+(c[0-9]+)?n[0-9]+(p[0-9]+)?|[shv]d[a-z]+[0-9]*|xvd[a-z]+[0-9]*)\Z")


class NvmeLayout(LayoutPlan, LayoutSteps, Capability):
    """One node's local NVMe devices as the model cache: read -> guard + plan -> apply."""

    name = "nvme_layout"

    @classmethod
    def options(cls):
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
        )

    def __init__(self, params, node):
        Capability.__init__(self, params, node)
        self.inspector = Inspector(self.runner, self.root)

    def validate(self):
        params = self.params
        for key, value in params.items():
            if any("\x00" in text for text in _strings(value)):
                raise LayoutError("%s must not contain a NUL character" % key)
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
            raise LayoutError("mount.path must be an absolute path other than /, got %r" % params["mount"]["path"])
        params["mount"]["path"] = params["mount"]["path"].rstrip("/")
        raid = params["raid"]
        if raid is not None:
            if raid["chunk_kib"] < 4 or raid["chunk_kib"] & (raid["chunk_kib"] - 1):
                raise LayoutError("raid.chunk_kib must be a power of two of at least 4, got %d" % raid["chunk_kib"])
            if not raid["name"] or "/" in raid["name"] or " " in raid["name"]:
                raise LayoutError("raid.name must be a plain name, got %r" % raid["name"])
        fs = params["filesystem"]
        limit = 12 if fs["type"] == "xfs" else 16
        if not fs["label"] or len(fs["label"]) > limit:
            raise LayoutError("filesystem.label %r: %s labels have 1 to %d characters"
                              % (fs["label"], fs["type"], limit))
        label = params["partition_label"]
        if not label or len(label) > GPT_NAME_MAX or re.search(r'["\\\x00-\x1f\x7f]', label):
            raise LayoutError("partition_label %r: a GPT partition name has 1 to %d characters, without quotes, "
                              "backslashes or control characters" % (label, GPT_NAME_MAX))
        if params["reserve_bytes"] < 0:
            raise LayoutError("reserve_bytes must not be negative")
        kernel = [w for w in params.get("wipe_serials") or [] if KERNEL_DISK.match(str(w))]
        if kernel:
            raise LayoutError(
                "wipe_serials: %s: a kernel name can name another disk after a reboot, and that disk would be wiped "
                "(nothing was changed); name an NVMe namespace by <serial>:<nsid>, its EUI-64, NGUID or WWN "
                "(cat /sys/block/nvme1n1/wwid), or a /dev/disk/by-id/nvme-eui.* link; other disks by serial or WWN"
                % ", ".join(kernel))
        for item in params["directories"]:
            if item.get("mode") is not None:
                try:
                    int(item["mode"], 8)
                except ValueError:
                    raise LayoutError("directories: mode %r of %s is not octal" % (item["mode"], item["path"]))

    # ------------------------------------------------------------------ read
    def required_tools(self):
        tools = ["lsblk", "wipefs", "blkid", "sgdisk", "mount", "mkfs.%s" % self.params["filesystem"]["type"]]
        if self.params.get("partition", True):
            tools.append("sfdisk")
        if self.params.get("raid"):
            tools.append("mdadm")
        return tools

    def read(self):
        missing = [t for t in self.required_tools() if not self.runner.which(t)]
        if not self.runner.which("partprobe") and not self.runner.which("blockdev"):
            missing.append("partprobe (parted) or blockdev")
        if missing:
            raise LayoutError("nothing was changed; tools missing on this node: %s" % ", ".join(missing))
        mounts = self.inspector.mountinfo()
        swaps = self.inspector.swaps()
        paths = self.resolve_paths(mounts, swaps)
        seen = {}
        for path in paths:
            real = os.path.realpath(path)
            if real in seen:
                raise LayoutError("devices: %s and %s are the same device %s" % (seen[real], path, real))
            seen[real] = path
        if self.params.get("raid") is None and len(paths) != 1:
            raise LayoutError("raid is null, so exactly one device is needed; got %d (%s)"
                              % (len(paths), ", ".join(paths)))
        raws = [self.inspector.inspect(p, mounts, swaps) for p in paths]
        return self.classify_devices(raws, mounts, self.inspector.system_majmins(mounts))

    def classify_devices(self, raws, mounts, system=()):
        """The state of the raw probes ``raws``: every device classified (``system``: the
        major:minor numbers behind /, /boot ...)."""
        spec = dict(self.params)
        # md arrays that may hold our members: only an array whose name is ours.
        spec["_our_holders"] = self._our_arrays(raws)
        devices = []
        for raw in raws:
            dev = classify(build_device(raw), spec, len(raws))
            if raw["majmin"] in system or set(m["majmin"] for m in raw["mounts"]) & set(system):
                set_class(dev, "in-use", dev["found"] + ["holds the root or boot filesystem"], None, None)
            dev["wipe_allowed"], notes = wipe_decision(dev, self.params.get("wipe_serials") or [])
            if dev["wipe_allowed"]:
                for note in notes:  # a bare controller serial that names one namespace only: deprecated
                    self.warn(note)
            else:
                dev["wipe_notes"] = notes
            devices.append(dev)
        return LayoutState(devices, mounts)

    def resolve_paths(self, mounts, swaps):
        spec = self.params
        if spec.get("devices"):
            return list(spec["devices"])
        system = self.inspector.system_majmins(mounts)
        chosen = []
        for entry in self.inspector.candidates():
            if not match_rule(entry, spec["select"]):
                continue
            name = entry["name"]
            majmins = set([self.inspector.majmin(name)])
            for node in self.inspector.partitions_of(name).values():
                majmins.add(self.inspector.majmin(os.path.basename(node)))
            if majmins & system:
                continue
            mounted = [m for m in mounts if m["majmin"] in majmins and m["target"] != spec["mount"]["path"]]
            holders = self.inspector.holders(name)
            for node in self.inspector.partitions_of(name).values():
                holders += self.inspector.holders(os.path.basename(node))
            if mounted or [h for h in holders if not self._is_our_md(h)]:
                continue
            if swaps & set(["/dev/" + name]):
                continue
            chosen.append(entry.get("path") or "/dev/" + name)
        if not chosen:
            raise LayoutError(
                "select matched no device (rule %s); devices holding /, /boot, "
                "mounted filesystems or swap are never selected" % (spec["select"],)
            )
        count = spec["select"].get("count")
        if count is not None and len(chosen) != count:
            raise LayoutError(
                "select expects %d device(s) but matched %d: %s (rule %s); nothing was changed"
                % (count, len(chosen), ", ".join(chosen),
                   dict((k, v) for k, v in spec["select"].items() if v is not None))
            )
        return chosen

    def _our_arrays(self, raws):
        if not self.params.get("raid"):
            return []
        ours = []
        for raw in raws:
            for holder in raw["holders"]:
                if holder not in ours and self._is_our_md(holder):
                    ours.append(holder)
        return ours

    def _is_our_md(self, holder):
        raid = self.params.get("raid")
        if not raid or not holder.startswith("md") or not self.runner.which("mdadm"):
            return False
        rc, out, err = self.runner.run(["mdadm", "--detail", "--export", "/dev/" + holder], check=False)
        return rc == 0 and md_name_matches(parse_blkid_export(out).get("MD_NAME"), raid["name"])

    # ------------------------------------------------------------------ report
    def result(self, state, actions):
        mount = self.params["mount"]
        line = fstab_line(state.uuid or NEW_UUID, mount["path"], self.params["filesystem"]["type"],
                          mount.get("options"))
        planned_conf = self.check_mode and any(a.kind == "mdadm-conf" for a in actions)
        return dict(devices=self.public_devices(state), uuid=state.uuid, mount=state.mount, fstab_line=line,
                    initramfs_update_needed=state.initramfs_update_needed or planned_conf)

    def diff(self, state, actions):
        """fstab and mdadm.conf first (as files), then the sections: block devices, mounts,
        directories. Nothing to do, no entry."""
        return render_diff([a for a in actions if a.diff == "file"] + [a for a in actions if a.diff != "file"])
