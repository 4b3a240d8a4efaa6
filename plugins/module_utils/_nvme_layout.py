# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backend of ``nvme_layout``: read the block devices, classify them, plan, then act.

The flow follows linux-system-roles storage: every device is inspected with several tools
(``lsblk``, ``wipefs -n``, ``blkid -p``, the GPT, ``mdadm --examine``) because any one of
them alone misses something ("blkid saw nothing" is not "empty" when the device holds a
partition table). Then each device is classified, the data-loss guard runs over *all*
devices, and only then an ordered action list is computed and, outside check mode, run.

Parsing and planning are pure functions over the recorded tool outputs so that the unit
tests can feed them outputs captured from real loop devices.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import grp
import json
import os
import pwd
import re
import stat
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import atomic_write
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError

PART_CODE_RAID = "FD00"
PART_CODE_LINUX = "8300"
ALIGN_BYTES = 1024 * 1024
XFS_MIN_BYTES = 300 * 1024 * 1024
PT_SIGNATURES = ("gpt", "PMBR")
# Bytes read directly at each end of a device whose probes found nothing: a blank device
# (or a sparse loop image) reads zeros there, anything else is data no tool recognised.
RAW_CHECK_BYTES = 1024 * 1024
# Mount flags the kernel shows per mount and that ``mount -o remount`` changes safely.
VFS_FLAGS = (
    "noatime",
    "nodiratime",
    "relatime",
    "strictatime",
    "lazytime",
    "nosuid",
    "nodev",
    "noexec",
    "ro",
    "rw",
)

LSBLK_COLUMNS = "NAME,PATH,TYPE,SIZE,FSTYPE,LABEL,UUID,PARTTYPE,PARTLABEL,MOUNTPOINTS,SERIAL,WWN,MODEL,TRAN,PKNAME"


class LayoutError(Exception):
    def __init__(self, msg, **result):
        Exception.__init__(self, msg)
        self.msg = msg
        self.result = result


# --------------------------------------------------------------------------- parsing


def strip_header(text):
    """Drop the ``# ...`` header lines of a recorded fixture (harmless on live output)."""
    lines = text.splitlines(True)
    while lines and lines[0].startswith("# "):
        lines.pop(0)
    return "".join(lines)


def parse_size(value):
    """``512G`` / ``3.84TB`` / ``1TiB`` / ``1000`` -> bytes. K/M/G/T and KiB.. are powers of
    1024, KB/MB/GB/TB powers of 1000."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)(i?B?)\s*$", str(value), re.I)
    if not match:
        raise LayoutError("select: cannot read size %r (use bytes or 512G, 3.84TB, 1TiB)" % (value,))
    number, unit, suffix = match.groups()
    power = "KMGTP".find(unit.upper()) + 1 if unit else 0
    base = 1000 if suffix.upper() == "B" and unit else 1024
    return int(float(number) * base**power)


def parse_blkid_export(text):
    """``blkid -p -o export`` -> dict (empty when nothing was found, rc 2)."""
    result = {}
    for line in strip_header(text or "").splitlines():
        if "=" in line:
            key, dummy, value = line.partition("=")
            result[key.strip()] = value.strip()
    return result


def parse_wipefs_json(text):
    """``wipefs -n -J`` -> list of {type, offset, label, uuid}."""
    body = strip_header(text or "").strip()
    if not body:
        return []
    try:
        data = json.loads(body)
    except ValueError:
        return parse_wipefs_text(body)
    return [
        dict(type=s.get("type"), offset=s.get("offset"), label=s.get("label"), uuid=s.get("uuid"))
        for s in data.get("signatures", [])
    ]


def parse_wipefs_text(text):
    """Older ``wipefs -n`` table output (``DEVICE OFFSET TYPE UUID LABEL``)."""
    result = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1].startswith("0x"):
            result.append(
                dict(
                    type=fields[2],
                    offset=fields[1],
                    uuid=fields[3] if len(fields) > 3 else None,
                    label=" ".join(fields[4:]) or None,
                )
            )
    return result


_SGDISK_PART = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+([0-9A-Fa-f]{4})\s*(.*)$")


def parse_sgdisk(text):
    """``sgdisk -p`` -> {sector_size, sectors, last_usable, partitions: [...]}."""
    info = dict(sector_size=512, sectors=None, last_usable=None, partitions=[])
    for line in strip_header(text or "").splitlines():
        match = re.match(r"^Disk \S+: (\d+) sectors", line)
        if match:
            info["sectors"] = int(match.group(1))
        match = re.match(r"^Sector size \(logical(?:/physical)?\): (\d+)", line)
        if match:
            info["sector_size"] = int(match.group(1))
        match = re.search(r"last usable sector is (\d+)", line)
        if match:
            info["last_usable"] = int(match.group(1))
        match = _SGDISK_PART.match(line)
        if match:
            info["partitions"].append(
                dict(
                    number=int(match.group(1)),
                    start=int(match.group(2)),
                    end=int(match.group(3)),
                    code=match.group(4).upper(),
                    name=match.group(5).strip(),
                )
            )
    return info


def parse_lsblk(text):
    body = strip_header(text or "").strip()
    if not body:
        return []
    return json.loads(body).get("blockdevices", [])


def parse_mountinfo(text):
    """``/proc/self/mountinfo`` -> list of {majmin, target, fstype, source, options}."""
    mounts = []
    for line in (text or "").splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        tail = right.split()
        if len(fields) < 6 or len(tail) < 2:
            continue
        opts = fields[5].split(",") + (tail[2].split(",") if len(tail) > 2 else [])
        mounts.append(
            dict(
                majmin=fields[2],
                target=_unescape(fields[4]),
                fstype=tail[0],
                source=_unescape(tail[1]),
                options=opts,
                super_options=tail[2] if len(tail) > 2 else "",
            )
        )
    return mounts


def _unescape(path):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def parse_mdadm_brief(text):
    """``mdadm --detail --brief`` -> the ARRAY line (first one)."""
    for line in strip_header(text or "").splitlines():
        if line.startswith("ARRAY "):
            return line.strip()
    return None


def md_name_matches(md_name, name):
    """mdadm stores ``homehost:name``; accept both forms."""
    return bool(md_name) and (md_name == name or md_name.split(":", 1)[-1] == name)


# --------------------------------------------------------------------------- device state


def describe_signature(sig):
    kind = sig.get("type") or "unknown"
    if kind == "linux_raid_member":
        return "linux_raid_member (md superblock%s)" % (" name=%s" % sig["label"] if sig.get("label") else "")
    if kind in ("LVM2_member", "crypto_LUKS", "swap", "zfs_member"):
        return kind
    words = "%s filesystem" % kind
    if sig.get("label"):
        words += " label=%s" % sig["label"]
    return words


def describe_content(blkid):
    if not blkid.get("TYPE"):
        return None
    return describe_signature(dict(type=blkid["TYPE"], label=blkid.get("LABEL")))


def build_device(raw):
    """Turn the raw tool outputs of one device (see ``Inspector.inspect``) into a state dict."""
    tree = parse_lsblk(raw.get("lsblk"))
    top = tree[0] if tree else {}
    blkid = parse_blkid_export(raw.get("blkid"))
    gpt = parse_sgdisk(raw["sgdisk"]) if raw.get("sgdisk") else None
    partitions = []
    for entry in (gpt or {}).get("partitions", []):
        part = dict(entry)
        node = raw.get("partition_nodes", {}).get(entry["number"])
        part["node"] = node
        pblkid = parse_blkid_export(raw.get("part_blkid", {}).get(entry["number"]))
        part["blkid"] = pblkid
        part["signatures"] = parse_wipefs_json(raw.get("part_wipefs", {}).get(entry["number"]))
        part["examine"] = parse_blkid_export(raw.get("part_examine", {}).get(entry["number"]))
        if not part["examine"] and pblkid.get("TYPE") == "linux_raid_member":
            # No partition node to run mdadm --examine on (yet): blkid, probing at the
            # partition's offset, reports the md name as LABEL and the array UUID.
            part["examine"] = dict(
                MD_NAME=pblkid.get("LABEL"), MD_UUID=(pblkid.get("UUID") or "").replace("-", ""), FROM_BLKID="1"
            )
        partitions.append(part)
    return dict(
        path=raw["path"],
        device=raw["device"],
        name=os.path.basename(raw["device"]),
        majmin=raw.get("majmin"),
        type=top.get("type"),
        size=top.get("size") if top.get("size") is not None else raw.get("size"),
        serial=top.get("serial"),
        wwn=top.get("wwn"),
        model=(top.get("model") or "").strip() or None,
        tran=top.get("tran"),
        backing_file=raw.get("backing_file"),
        ro=raw.get("ro", False),
        signatures=parse_wipefs_json(raw.get("wipefs")),
        blkid=blkid,
        pttype=blkid.get("PTTYPE"),
        gpt=gpt,
        partitions=partitions,
        examine=parse_blkid_export(raw.get("examine")),
        mounts=raw.get("mounts", []),
        holders=raw.get("holders", []),
        swap=raw.get("swap", False),
        aliases=raw.get("aliases", []),
        probe_errors=list(raw.get("probe_errors") or []),
        vanished=raw.get("vanished"),
        raw_read=raw.get("raw_read"),
    )


def content_state(blkid, signatures, examine, spec, n_members):
    """What a member (partition or whole device) holds, relative to the wanted layout.

    Returns (state, description): state is ``empty``, ``fs-ours``, ``raid-ours`` or
    ``foreign``.
    """
    kinds = [s.get("type") for s in signatures] or ([blkid["TYPE"]] if blkid.get("TYPE") else [])
    if not kinds and not blkid.get("PTTYPE"):
        return "empty", None
    raid = spec.get("raid")
    fs = spec["filesystem"]
    fstype = blkid.get("TYPE") or (kinds[0] if kinds else None)
    if raid and fstype == "linux_raid_member" and len(set(kinds)) <= 1:
        geometry_ok = examine.get("FROM_BLKID") or (
            examine.get("MD_LEVEL") in ("raid0", "0") and str(examine.get("MD_DEVICES")) == str(n_members)
        )
        if md_name_matches(examine.get("MD_NAME"), raid["name"]) and geometry_ok:
            return "raid-ours", None
        return "foreign", "linux_raid_member of array %s (level %s, %s devices)" % (
            examine.get("MD_NAME") or "?",
            examine.get("MD_LEVEL") or "?",
            examine.get("MD_DEVICES") or "?",
        )
    if not raid and fstype == fs["type"] and blkid.get("LABEL") == fs["label"] and len(set(kinds)) <= 1:
        return "fs-ours", None
    found = [describe_signature(s) for s in signatures] or [
        describe_signature(dict(type=fstype, label=blkid.get("LABEL")))
    ]
    if blkid.get("PTTYPE"):
        found.insert(0, "%s partition table" % blkid["PTTYPE"])
    return "foreign", ", ".join(_dedupe(found))


def _dedupe(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def classify(dev, spec, n_members):
    """Classify one device: empty | ours-exact | ours-partial | foreign | in-use |
    vanished (no media, size 0) | unprobeable (a probe or the direct read failed).

    Adds ``class``, ``found`` (what is on it, in words), ``member`` (the node that is or
    will be the array member / filesystem device) and ``member_state``.
    """
    mount_path = spec["mount"]["path"]
    found = []
    other_mounts = [m for m in dev["mounts"] if m["target"] != mount_path]
    for mount in other_mounts:
        found.append("%s mounted at %s" % (mount["source"], mount["target"]))
    foreign_holders = [h for h in dev["holders"] if h not in spec.get("_our_holders", [])]
    if dev["swap"]:
        found.append("active swap")
    if other_mounts or dev["swap"] or foreign_holders:
        found.extend("held by %s" % h for h in foreign_holders)
        return _set(dev, "in-use", found, None, None)
    if dev["ro"]:
        return _set(dev, "in-use", ["read-only device"], None, None)
    if dev.get("vanished") or str(dev.get("size")) == "0":
        why = dev.get("vanished") or "device vanished or has no media: %s has size 0" % dev["device"]
        return _set(dev, "vanished", [why], None, None)
    if dev.get("probe_errors"):
        return _set(dev, "unprobeable", list(dev["probe_errors"]), None, None)
    raw_read = dev.get("raw_read") or {}
    if raw_read.get("error"):
        return _set(dev, "unprobeable", ["cannot read the device: %s" % raw_read["error"]], None, None)
    _classify_content(dev, spec, n_members)
    if dev["class"] == "empty" and raw_read.get("nonzero"):
        # wipefs and blkid found no signature, yet the device is not blank: data of a kind
        # no tool recognises (or signatures erased with wipefs -a over a filesystem).
        _set(
            dev,
            "foreign",
            ["unknown data (non-zero bytes in the %s, no signature found by wipefs or blkid)" % raw_read["nonzero"]],
            dev["member"],
            dev["member_state"],
        )
        dev["unknown_data"] = True
    return dev


def _classify_content(dev, spec, n_members):
    """Classify by the signatures the probes found (the device is probed and not in use)."""
    found = []
    sigs = dev["signatures"]
    whole_kinds = [s["type"] for s in sigs]
    if spec.get("partition", True):
        if not sigs and not dev["pttype"] and not dev["blkid"].get("TYPE"):
            return _set(dev, "empty", [], None, "missing")
        parts = dev["partitions"]
        pt_only = all(k in PT_SIGNATURES for k in whole_kinds)
        label = spec.get("partition_label") or "aiinfra-cache"
        if dev["pttype"] == "gpt" and pt_only and dev["gpt"] is not None:
            sector = dev["gpt"]["sector_size"]
            if (
                len(parts) == 1
                and parts[0]["number"] == 1
                and parts[0]["name"] == label
                and parts[0]["start"] * sector == ALIGN_BYTES
            ):
                part = parts[0]
                state, what = content_state(part["blkid"], part["signatures"], part["examine"], spec, n_members)
                member = part["node"]
                dev["needs_rescan"] = not member
                if state == "empty":
                    return _set(dev, "ours-partial", ["gpt partition %s (no content)" % label], member, "empty")
                if state in ("fs-ours", "raid-ours"):
                    return _set(
                        dev,
                        "ours-exact",
                        ["gpt partition %s with %s" % (label, describe_content(part["blkid"]))],
                        member,
                        state,
                    )
                return _set(dev, "foreign", ["gpt partition %s holding %s" % (label, what)], member, "foreign")
            if not parts:
                found.append("gpt partition table with no partitions")
            else:
                found.append(
                    "gpt partition table with %d partition%s (%s)"
                    % (
                        len(parts),
                        "" if len(parts) == 1 else "s",
                        ", ".join("%d:%s" % (p["number"], p["name"] or "unnamed") for p in parts),
                    )
                )
                for part in parts:
                    what = describe_content(part["blkid"])
                    if what:
                        found.append("partition %d holds %s" % (part["number"], what))
            return _set(dev, "foreign", found, None, "foreign")
        state, what = content_state(
            dev["blkid"],
            sigs,
            dev["examine"],
            dict(spec, raid=None, filesystem=dict(type="-", label="-")),
            n_members,
        )
        return _set(dev, "foreign", [what or "unknown signature"], None, "foreign")

    # whole-device members
    state, what = content_state(dev["blkid"], sigs, dev["examine"], spec, n_members)
    if state == "empty":
        return _set(dev, "empty", [], dev["device"], "empty")
    if state in ("fs-ours", "raid-ours"):
        return _set(dev, "ours-exact", [describe_content(dev["blkid"])], dev["device"], state)
    return _set(dev, "foreign", [what], dev["device"], "foreign")


def _set(dev, klass, found, member, member_state):
    dev["class"] = klass
    dev["found"] = found
    dev["member"] = member
    dev["member_state"] = member_state
    return dev


def wipe_allowed(dev, wipe_ids):
    """A device may be wiped when the wipe list names its serial, WWN, one of its paths
    (as given, resolved, /dev/disk/by-id links) or, for a loop device, its backing file."""
    ids = set(i for i in (dev.get("serial"), dev.get("wwn"), dev["path"], dev["device"], dev.get("backing_file")) if i)
    ids.update(dev.get("aliases") or [])
    if dev.get("wwn") and dev["wwn"].startswith("0x"):
        ids.add(dev["wwn"][2:])
    for wanted in wipe_ids:
        if wanted in ids:
            return True
        if wanted.startswith("/") and os.path.realpath(wanted) == dev["device"] and os.path.exists(wanted):
            if stat.S_ISBLK(os.stat(wanted).st_mode):
                return True
    return False


# --------------------------------------------------------------------------- file editing


def fstab_line(uuid, path, fstype, options):
    opts = [o for o in (options or []) if o]
    if "nofail" not in opts:
        opts.append("nofail")
    if len(opts) == 1:
        opts.insert(0, "defaults")
    return "UUID=%s %s %s %s 0 2" % (uuid, path, fstype, ",".join(opts))


def update_fstab(text, line, mount_path, uuid):
    """Replace our entry (same mount path or same UUID) or append it; other lines stay
    byte-identical. Returns the new text."""
    text = text or ""
    lines = text.splitlines(True)
    out = []
    placed = False
    for raw in lines:
        fields = raw.split()
        ours = (
            fields
            and not fields[0].startswith("#")
            and len(fields) >= 2
            and (fields[1] == mount_path or (uuid and fields[0] == "UUID=%s" % uuid))
        )
        if ours:
            if not placed:
                out.append(line + "\n")
                placed = True
            continue
        out.append(raw)
    if not placed:
        if out and not out[-1].endswith("\n"):
            out[-1] = out[-1] + "\n"
        out.append(line + "\n")
    return "".join(out)


def update_mdadm_conf(text, array_line, device, uuid):
    """Add our ARRAY line when absent; replace a stale line for the same device or UUID."""
    text = text or ""
    out = []
    placed = False
    for raw in text.splitlines(True):
        fields = raw.split()
        ours = len(fields) >= 2 and fields[0] == "ARRAY" and (fields[1] == device or ("UUID=%s" % uuid) in fields)
        if ours:
            if not placed:
                out.append(array_line + "\n")
                placed = True
            continue
        out.append(raw)
    if not placed:
        if out and not out[-1].endswith("\n"):
            out[-1] = out[-1] + "\n"
        out.append(array_line + "\n")
    return "".join(out)


def mkfs_argv(fs, raid, n_members, target, force):
    """mkfs command with stripe geometry matching the array (or none for one device)."""
    if fs["type"] == "xfs":
        argv = ["mkfs.xfs", "-L", fs["label"]]
        if raid and n_members > 1:
            # mkfs.xfs reads MD geometry itself; stated explicitly so that it is also right
            # on top of a device that hides it.
            argv += ["-d", "su=%dk,sw=%d" % (raid["chunk_kib"], n_members)]
        if force:
            argv.append("-f")
    else:
        argv = ["mkfs.ext4", "-L", fs["label"]]
        if raid and n_members > 1:
            stride = max(1, raid["chunk_kib"] // 4)
            argv += ["-E", "stride=%d,stripe-width=%d" % (stride, stride * n_members)]
        if force:
            argv.append("-F")
    return argv + [target]


def mount_options_missing(mount, wanted):
    have = set(mount["options"]) | set(mount["super_options"].split(","))
    return [o for o in wanted if o not in have and o != "defaults"]


# --------------------------------------------------------------------------- inspection


class Inspector(object):
    """Runs the read-only tools. ``run(argv) -> (rc, out, err)`` never changes state."""

    def __init__(self, runner, sys_root="/sys", proc_root="/proc"):
        self.runner = runner
        self.sys_root = sys_root
        self.proc_root = proc_root

    def _read(self, path, default=None):
        try:
            with open(path) as handle:
                return handle.read().strip()
        except (IOError, OSError):
            return default

    def _sysblock(self, name):
        return os.path.join(self.sys_root, "class", "block", name)

    def mountinfo(self):
        return parse_mountinfo(self._read(os.path.join(self.proc_root, "self", "mountinfo"), ""))

    def swaps(self):
        text = self._read(os.path.join(self.proc_root, "swaps"), "")
        return set(os.path.realpath(line.split()[0]) for line in text.splitlines()[1:] if line.strip())

    def system_majmins(self, mounts):
        """Devices behind /, /boot and /boot/efi, also through an overlay root (the lab)."""
        result = set()
        for mount in mounts:
            if mount["target"] not in ("/", "/boot", "/boot/efi", "/usr", "/var"):
                continue
            result.add(mount["majmin"])
            if mount["fstype"] == "overlay":
                for opt in mount["super_options"].split(","):
                    key, dummy, value = opt.partition("=")
                    if key in ("lowerdir", "upperdir", "workdir"):
                        for part in value.split(":"):
                            try:
                                st = os.stat(part)
                            except OSError:
                                continue
                            result.add("%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev)))
        return result

    def partitions_of(self, name):
        """{number: /dev node} of the partitions the kernel knows."""
        result = {}
        for child in sorted(os.listdir(self._sysblock(name))) if os.path.isdir(self._sysblock(name)) else []:
            number = self._read(os.path.join(self._sysblock(name), child, "partition"))
            if number and number.isdigit():
                result[int(number)] = "/dev/" + child
        return result

    def majmin(self, name):
        return self._read(os.path.join(self._sysblock(name), "dev"))

    def holders(self, name):
        path = os.path.join(self._sysblock(name), "holders")
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    def inspect(self, path, mounts, swaps):
        device = os.path.realpath(path)
        try:
            mode = os.stat(device).st_mode
        except OSError:
            raise LayoutError("device %s does not exist" % path)
        if not stat.S_ISBLK(mode):
            raise LayoutError("%s (%s) is not a block device" % (path, device))
        name = os.path.basename(device)
        raw = dict(
            path=path,
            device=device,
            majmin=self.majmin(name),
            ro=self._read(os.path.join(self._sysblock(name), "ro")) == "1",
            backing_file=self._read(os.path.join(self._sysblock(name), "loop", "backing_file")),
            aliases=self._aliases(device),
        )
        errors = raw["probe_errors"] = []
        raw["vanished"] = self.vanished(device)
        if raw["vanished"]:
            # No media: every probe would read nothing and call it blank.
            raw.update(lsblk="", wipefs="", blkid="", partition_nodes={}, part_blkid={}, part_wipefs={},
                       part_examine={}, holders=self.holders(name), mounts=[], swap=False)
            return raw
        raw["lsblk"] = self._probe_out(["lsblk", "-J", "-b", "-o", LSBLK_COLUMNS, "-d", device], errors)
        if not errors and not parse_lsblk(raw["lsblk"]):
            errors.append("cannot probe %s: lsblk -d listed no device" % device)
        raw["wipefs"] = self._probe_out(["wipefs", "-n", "-J", device], errors)
        raw["blkid"] = self._probe_out(["blkid", "-p", "-o", "export", device], errors)
        raw["raw_read"] = read_ends(device)
        if raw["raw_read"]["size"] == 0:
            raw["vanished"] = "device vanished or has no media: %s has size 0" % device
        if parse_blkid_export(raw["blkid"]).get("PTTYPE") == "gpt":
            raw["sgdisk"] = self._out(["sgdisk", "-p", device])
        nodes = self.partitions_of(name)
        raw["partition_nodes"] = nodes
        raw["part_blkid"], raw["part_wipefs"], raw["part_examine"] = {}, {}, {}
        gpt = parse_sgdisk(raw.get("sgdisk")) if raw.get("sgdisk") else dict(partitions=[], sector_size=512)
        majmins = set([raw["majmin"]])
        holders = list(self.holders(name))
        for part in gpt["partitions"]:
            number = part["number"]
            node = nodes.get(number)
            if node:
                majmins.add(self.majmin(os.path.basename(node)))
                holders.extend(self.holders(os.path.basename(node)))
                raw["part_blkid"][number] = self._probe_out(["blkid", "-p", "-o", "export", node], errors)
                raw["part_wipefs"][number] = self._probe_out(["wipefs", "-n", "-J", node], errors)
                target = node
            else:
                # The kernel has not read the table (yet): probe the partition through the
                # whole device at its offset, read-only.
                sector = gpt["sector_size"]
                raw["part_blkid"][number] = self._probe_out(
                    [
                        "blkid",
                        "-p",
                        "-o",
                        "export",
                        "-O",
                        str(part["start"] * sector),
                        "-S",
                        str((part["end"] - part["start"] + 1) * sector),
                        device,
                    ],
                    errors,
                )
                target = None
            if target and parse_blkid_export(raw["part_blkid"][number]).get("TYPE") == "linux_raid_member":
                raw["part_examine"][number] = self._out(["mdadm", "--examine", "--export", target])
        if parse_blkid_export(raw["blkid"]).get("TYPE") == "linux_raid_member":
            raw["examine"] = self._out(["mdadm", "--examine", "--export", device])
        raw["holders"] = sorted(set(holders))
        raw["mounts"] = [m for m in mounts if m["majmin"] in majmins]
        raw["swap"] = bool(swaps & (set([device]) | set(nodes.values())))
        return raw

    def _aliases(self, device):
        result = []
        base = "/dev/disk/by-id"
        if os.path.isdir(base):
            for entry in sorted(os.listdir(base)):
                full = os.path.join(base, entry)
                if os.path.realpath(full) == device:
                    result.append(full)
        return result

    def vanished(self, device):
        """Why ``device`` has no media (a detached loop device keeps its node, size 0), or None."""
        try:
            if not stat.S_ISBLK(os.stat(device).st_mode):
                return "device vanished or has no media: %s is no longer a block device" % device
        except OSError:
            return "device vanished or has no media: %s no longer exists" % device
        size = self._read(os.path.join(self._sysblock(os.path.basename(device)), "size"))
        if size is not None and size.strip() == "0":
            return "device vanished or has no media: %s has size 0" % device
        return None

    def _probe_out(self, argv, errors):
        """Output of a read-only probe; a probe that fails adds to ``errors`` (the device is
        then unprobeable: an unreadable device must never look blank)."""
        if not self.runner.which(argv[0]):
            raise LayoutError("%s is not installed on this node; nvme_layout needs it" % argv[0])
        rc, out, err = self.runner.run(argv, check=False)
        if probe_failed(argv, rc, err):
            text = (err or out or "").strip()
            errors.append(
                "cannot probe %s: %s failed (rc %s)%s"
                % (argv[-1], " ".join(argv[:2]), rc, ": %s" % text[:200] if text else "")
            )
            return ""
        return out

    def _out(self, argv):
        if not self.runner.which(argv[0]):
            if argv[0] == "mdadm":
                return ""
            raise LayoutError("%s is not installed on this node; nvme_layout needs it" % argv[0])
        rc, out, err = self.runner.run(argv, check=False)
        # blkid: rc 2 = nothing found; wipefs/sgdisk print errors on devices without a table.
        return out if rc in (0, 2) else ""

    def candidates(self):
        """Whole disks for ``select``: ``lsblk -d`` type disk (never loop, md, rom, dm)."""
        rc, out, err = self.runner.run(["lsblk", "-J", "-b", "-d", "-o", LSBLK_COLUMNS], check=False)
        if rc != 0:
            raise LayoutError("lsblk failed: %s" % (err or out).strip())
        return parse_lsblk(out)


def probe_failed(argv, rc, err):
    """``blkid`` exits 2 for "nothing found", but also when it cannot open the device: only a
    silent rc 2 means nothing found. ``lsblk`` and ``wipefs -n`` must exit 0."""
    if argv[0] == "blkid":
        return rc not in (0, 2) or (rc == 2 and bool((err or "").strip()))
    return rc != 0


def read_ends(device, size=RAW_CHECK_BYTES):
    """Read the first and last ``size`` bytes of ``device`` directly (read-only, cheap).

    Returns {nonzero: None or "first MiB"/"last MiB", error: None or text, size: bytes}."""
    result = dict(nonzero=None, error=None, size=None)
    try:
        fd = os.open(device, os.O_RDONLY)
    except OSError as exc:
        result["error"] = "open(%s): %s" % (device, exc.strerror or exc)
        return result
    try:
        total = os.lseek(fd, 0, os.SEEK_END)
        result["size"] = total
        for where, offset in (("first MiB", 0), ("last MiB", max(0, total - size))):
            os.lseek(fd, offset, os.SEEK_SET)
            want = min(size, total - offset)
            data = b""
            while len(data) < want:
                chunk = os.read(fd, want - len(data))
                if not chunk:
                    break
                data += chunk
            if len(data) < want:
                result["error"] = "short read of the %s of %s (%d of %d bytes)" % (where, device, len(data), want)
                return result
            if data.count(b"\0") != len(data):
                result["nonzero"] = where
                return result
    except OSError as exc:
        result["error"] = "read(%s): %s" % (device, exc.strerror or exc)
    finally:
        os.close(fd)
    return result


def match_rule(entry, rule):
    if entry.get("type") != "disk":
        return False
    if rule.get("model") and not fnmatch.fnmatch((entry.get("model") or "").strip().lower(), rule["model"].lower()):
        return False
    if rule.get("transport") and (entry.get("tran") or "") != rule["transport"]:
        return False
    size = int(entry.get("size") or 0)
    if rule.get("min_size") is not None and size < parse_size(rule["min_size"]):
        return False
    if rule.get("max_size") is not None and size > parse_size(rule["max_size"]):
        return False
    return True


# --------------------------------------------------------------------------- the layout


class NvmeLayout(object):
    """read() -> plan() -> apply() for one node."""

    def __init__(self, runner, spec, host, check_mode=False, inspector=None):
        self.runner = runner
        self.spec = spec
        self.host = host
        self.check_mode = check_mode
        self.inspector = inspector or Inspector(runner)
        self.devices = []
        self.actions = []
        self.warnings = []
        self.initramfs_update_needed = False
        self.uuid = None
        self.force_mkfs = False

    # ------------------------------------------------------------------ read
    def resolve_paths(self, mounts, swaps):
        spec = self.spec
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

    def required_tools(self):
        spec = self.spec
        tools = ["lsblk", "wipefs", "blkid", "sgdisk", "mount", "mkfs.%s" % spec["filesystem"]["type"]]
        if spec.get("raid"):
            tools.append("mdadm")
        return tools

    def read(self):
        missing = [t for t in self.required_tools() if not self.runner.which(t)]
        if not self.runner.which("partprobe") and not self.runner.which("blockdev"):
            missing.append("partprobe (parted) or blockdev")
        if missing:
            raise LayoutError("nothing was changed; tools missing on this node: %s" % ", ".join(missing))
        self.mounts = self.inspector.mountinfo()
        swaps = self.inspector.swaps()
        paths = self.resolve_paths(self.mounts, swaps)
        seen = {}
        for path in paths:
            real = os.path.realpath(path)
            if real in seen:
                raise LayoutError("devices: %s and %s are the same device %s" % (seen[real], path, real))
            seen[real] = path
        if self.spec.get("raid") is None and len(paths) != 1:
            raise LayoutError(
                "raid is null, so exactly one device is needed; got %d (%s)" % (len(paths), ", ".join(paths))
            )
        system = self.inspector.system_majmins(self.mounts)
        raws = [self.inspector.inspect(p, self.mounts, swaps) for p in paths]
        spec = dict(self.spec)
        # md arrays that may hold our members: only an array whose name is ours.
        spec["_our_holders"] = self._our_arrays(raws)
        for raw in raws:
            dev = classify(build_device(raw), spec, len(paths))
            if raw["majmin"] in system or set(m["majmin"] for m in raw["mounts"]) & system:
                _set(dev, "in-use", dev["found"] + ["holds the root or boot filesystem"], None, None)
            dev["wipe_allowed"] = wipe_allowed(dev, self.spec.get("wipe_serials") or [])
            self.devices.append(dev)

    def _our_arrays(self, raws):
        raid = self.spec.get("raid")
        if not raid:
            return []
        ours = []
        for raw in raws:
            for holder in raw["holders"]:
                if holder not in ours and self._is_our_md(holder):
                    ours.append(holder)
        return ours

    def _is_our_md(self, holder):
        raid = self.spec.get("raid")
        if not raid or not holder.startswith("md") or not self.runner.which("mdadm"):
            return False
        rc, out, err = self.runner.run(["mdadm", "--detail", "--export", "/dev/" + holder], check=False)
        return rc == 0 and md_name_matches(parse_blkid_export(out).get("MD_NAME"), raid["name"])

    # ------------------------------------------------------------------ guard
    def guard(self):
        """Refuse before anything destructive happens on any device."""
        refused = []
        for dev in self.devices:
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
                refused.append("%s (%s) holds %s" % (dev["path"], dev["device"], "; ".join(dev["found"])))
        if refused:
            raise LayoutError(
                "nothing was changed on any device; refusing to destroy data: %s. To allow wiping "
                "a device name it in wipe_serials (serial, WWN, /dev/disk/by-id path, or for a "
                "loop device its path or backing file)." % " | ".join(refused),
                devices=self.public_devices(),
                actions=[],
            )

    # ------------------------------------------------------------------ plan
    def plan(self):
        """Ordered action list; each action is a dict {action, target, detail}."""
        spec = self.spec
        raid = spec.get("raid")
        partition = spec.get("partition", True)
        acts = []
        fresh_target = False
        for dev in self.devices:
            if dev["class"] == "foreign":
                acts.append(
                    dict(
                        action="wipe",
                        target=dev["device"],
                        detail="erase %s (allowed by wipe_serials)" % "; ".join(dev["found"]),
                    )
                )
                dev["member_state"] = "missing" if partition else "empty"
                dev["_fresh"] = True
            if partition and dev["member_state"] == "missing":
                acts.append(
                    dict(
                        action="partition",
                        target=dev["device"],
                        detail="GPT, partition 1 from 1 MiB to the end, type %s, name %s"
                        % (
                            PART_CODE_RAID if raid else PART_CODE_LINUX,
                            spec.get("partition_label") or "aiinfra-cache",
                        ),
                    )
                )
                dev["_fresh"] = True
            elif partition and dev.get("needs_rescan"):
                acts.append(
                    dict(
                        action="rescan",
                        target=dev["device"],
                        detail="partprobe: the kernel has not read the partition table",
                    )
                )
        self._check_partition_sizes()
        states = [d["member_state"] for d in self.devices]
        self.array = None
        if raid:
            self.array = self._array_state()
            members_desc = ", ".join(d["device"] for d in self.devices)
            if self.array["assembled"]:
                pass
            elif all(s == "raid-ours" for s in states) and self.array["uuids_agree"]:
                acts.append(
                    dict(
                        action="assemble-array",
                        target="/dev/md/%s" % raid["name"],
                        detail="mdadm --assemble from %s" % members_desc,
                    )
                )
            elif any(s == "raid-ours" for s in states):
                raise LayoutError(
                    "nothing was changed; members of array %s disagree (%s): some carry its md "
                    "superblock and some do not, or the superblocks name different arrays. Name "
                    "all devices in wipe_serials to rebuild it."
                    % (
                        raid["name"],
                        ", ".join("%s: %s" % (d["device"], d["member_state"]) for d in self.devices),
                    ),
                    devices=self.public_devices(),
                    actions=[],
                )
            else:
                acts.append(
                    dict(
                        action="create-array",
                        target="/dev/md/%s" % raid["name"],
                        detail="RAID%d, chunk %d KiB, metadata 1.2, members %s"
                        % (raid["level"], raid["chunk_kib"], members_desc),
                    )
                )
                fresh_target = True
        else:
            dev = self.devices[0]
            fresh_target = dev["member_state"] in ("missing", "empty") or bool(dev.get("_fresh"))
        fs = spec["filesystem"]
        fs_state = self._fs_state(fresh_target)
        if fs_state == "foreign":
            raise LayoutError(
                "nothing was changed; %s holds %s, not %s label=%s. Name its devices in "
                "wipe_serials to recreate it." % (self.fs_target, self.fs_found, fs["type"], fs["label"]),
                devices=self.public_devices(),
                actions=[],
            )
        if fs_state == "missing" and fs["type"] == "xfs":
            self._check_xfs_size()
        if fs_state in ("missing", "unknown"):
            acts.append(
                dict(
                    action="mkfs",
                    target=self.fs_target or "(new %s)" % ("array" if raid else "partition"),
                    detail="%s label=%s%s"
                    % (
                        fs["type"],
                        fs["label"],
                        "" if fs_state == "missing" else " (unless the assembled array already holds it)",
                    ),
                )
            )
        mount_path = spec["mount"]["path"]
        mounted = [m for m in self.mounts if m["target"] == mount_path]
        fs_majmin = self._majmin_of(self.fs_target) if self.fs_target else None
        self.mount_state = dict(path=mount_path, mounted=False, options=spec["mount"].get("options") or [])
        if mounted:
            top = mounted[-1]
            if fs_majmin and top["majmin"] == fs_majmin:
                self.mount_state.update(mounted=True, source=top["source"])
                missing = mount_options_missing(top, self.mount_state["options"])
                flags = [o for o in missing if o in VFS_FLAGS]
                if flags:
                    acts.append(
                        dict(
                            action="remount",
                            target=mount_path,
                            detail="add mount options %s" % ",".join(flags),
                        )
                    )
                other = [o for o in missing if o not in VFS_FLAGS]
                if other:
                    self.warnings.append(
                        "%s is mounted without %s; they take effect at the next mount" % (mount_path, ",".join(other))
                    )
            else:
                raise LayoutError(
                    "nothing was changed; %s is already a mount point of %s, not of "
                    "our filesystem" % (mount_path, top["source"]),
                    devices=self.public_devices(),
                    actions=[],
                )
        else:
            if not os.path.isdir(mount_path):
                acts.append(dict(action="mkdir", target=mount_path, detail="mount point, mode 0755"))
            acts.append(
                dict(
                    action="mount",
                    target=mount_path,
                    detail="%s -o %s" % (fs["type"], ",".join(self.mount_state["options"]) or "defaults"),
                )
            )
        self.plan_files(acts)
        self.plan_directories(acts)
        self.actions = acts
        return acts

    def _check_xfs_size(self):
        """mkfs.xfs refuses filesystems under 300 MiB; refuse before partitioning instead."""
        overhead = (ALIGN_BYTES + (self.spec.get("reserve_bytes") or 0)) if self.spec.get("partition", True) else 0
        sizes = [int(d.get("size") or 0) - overhead for d in self.devices]
        total = sum(sizes) if self.spec.get("raid") else sizes[0]
        if 0 < total < XFS_MIN_BYTES:
            raise LayoutError(
                "nothing was changed; xfs needs at least 300 MiB, the layout leaves %d MiB on %s; "
                "use bigger devices or filesystem.type ext4"
                % (total // (1024 * 1024), ", ".join(d["device"] for d in self.devices)),
                devices=self.public_devices(),
                actions=[],
            )

    def _check_partition_sizes(self):
        """Our partition is never resized; say so when it differs from the declared layout."""
        if not self.spec.get("partition", True):
            return
        reserve = self.spec.get("reserve_bytes") or 0
        for dev in self.devices:
            gpt = dev.get("gpt")
            if dev["class"] not in ("ours-exact", "ours-partial") or not gpt or not gpt.get("last_usable"):
                continue
            sector = gpt["sector_size"]
            wanted = gpt["last_usable"] - reserve // sector
            end = dev["partitions"][0]["end"]
            if abs(end - wanted) > ALIGN_BYTES // sector:
                self.warnings.append(
                    "partition 1 of %s ends at sector %d, the layout (reserve_bytes=%d) wants about %d; "
                    "it is not resized (name the device in wipe_serials and wipe it to recreate)"
                    % (dev["device"], end, reserve, wanted)
                )

    def _majmin_of(self, node):
        try:
            st = os.stat(node)
        except OSError:
            return None
        return "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))

    def _array_state(self):
        raid = self.spec["raid"]
        holders = set()
        uuids = set()
        for dev in self.devices:
            member = dev["member"]
            if dev["member_state"] == "raid-ours":
                if member:
                    holders.update(h for h in self.inspector.holders(os.path.basename(member)) if h.startswith("md"))
                uuid = self._examine(dev).get("MD_UUID")
                uuids.add(re.sub("[:-]", "", uuid).lower() if uuid else None)
        assembled = None
        if len(holders) == 1 and all(d["member_state"] == "raid-ours" and d["member"] for d in self.devices):
            name = holders.pop()
            if all(name in self.inspector.holders(os.path.basename(d["member"])) for d in self.devices):
                assembled = "/dev/" + name
        return dict(
            assembled=assembled,
            uuids_agree=len(uuids) == 1 and None not in uuids,
            uuid=uuids.pop() if len(uuids) == 1 else None,
            device="/dev/md/%s" % raid["name"],
        )

    def _examine(self, dev):
        if dev["partitions"]:
            return dev["partitions"][0]["examine"]
        return dev["examine"]

    def _fs_state(self, fresh):
        """missing | ours | foreign | unknown (array not assembled yet)."""
        fs = self.spec["filesystem"]
        self.fs_found = None
        if self.spec.get("raid"):
            self.fs_target = self.array["assembled"]
            if not self.fs_target:
                return "missing" if fresh else "unknown"
        else:
            dev = self.devices[0]
            self.fs_target = dev["member"] if not dev.get("_fresh") else None
            if fresh:
                return "missing"
            if not self.fs_target:
                # Partition node not there yet (rescan planned): its content was probed
                # through the whole device at the partition's offset.
                blkid = dev["partitions"][0]["blkid"] if dev["partitions"] else {}
                self.uuid = blkid.get("UUID")
                return "ours" if dev["member_state"] == "fs-ours" else "missing"
        blkid = self._probe(self.fs_target)
        if not blkid.get("TYPE") and not blkid.get("PTTYPE"):
            return "missing"
        if blkid.get("TYPE") == fs["type"] and blkid.get("LABEL") == fs["label"]:
            self.uuid = blkid.get("UUID")
            return "ours"
        self.fs_found = describe_content(blkid) or "a %s partition table" % blkid.get("PTTYPE")
        if all(d["wipe_allowed"] for d in self.devices):
            self.force_mkfs = True
            return "missing"
        return "foreign"

    def _probe(self, node, strict=True):
        """blkid of ``node``; a failed probe (not "nothing found") raises when ``strict``, so
        that an unreadable target is never taken for a blank one."""
        argv = ["blkid", "-p", "-o", "export", node]
        rc, out, err = self.runner.run(argv, check=False)
        if strict and probe_failed(argv, rc, err):
            raise LayoutError(
                "stopped before any further change: cannot probe %s: blkid -p failed (rc %s)%s"
                % (node, rc, ": %s" % err.strip()[:200] if (err or "").strip() else ""),
                devices=self.public_devices(),
                actions=[],
            )
        return parse_blkid_export(out) if rc == 0 else {}

    def plan_files(self, acts):
        spec = self.spec
        fs = spec["filesystem"]
        mount = spec["mount"]
        fstab_path = self.host.path(spec["fstab"])
        before = _read_file(fstab_path)
        uuid = self.uuid or "<uuid of the new filesystem>"
        line = fstab_line(uuid, mount["path"], fs["type"], mount.get("options"))
        after = update_fstab(before, line, mount["path"], self.uuid)
        self.fstab = dict(path=fstab_path, before=before or "", after=after, line=line)
        if after != (before or ""):
            acts.append(dict(action="fstab", target=fstab_path, detail=line))
        self.mdadm = None
        if spec.get("raid"):
            conf_path = self.host.path(spec["mdadm_conf"])
            conf_before = _read_file(conf_path)
            brief = None
            if self.array and self.array["assembled"]:
                rc, out, err = self.runner.run(["mdadm", "--detail", "--brief", self.array["assembled"]], check=False)
                brief = parse_mdadm_brief(out) if rc == 0 else None
            predicted = brief or "ARRAY /dev/md/%s metadata=1.2 name=%s UUID=<uuid of the new array>" % (
                spec["raid"]["name"],
                spec["raid"]["name"],
            )
            present = brief is not None and self._conf_has(conf_before, brief)
            after = conf_before or ""
            if not present:
                after = update_mdadm_conf(
                    conf_before,
                    _canonical_array_line(predicted, spec["raid"]["name"]),
                    "/dev/md/%s" % spec["raid"]["name"],
                    _array_uuid(predicted),
                )
                acts.append(dict(action="mdadm-conf", target=conf_path, detail=predicted))
            self.mdadm = dict(path=conf_path, before=conf_before or "", after=after)

    @staticmethod
    def _conf_has(text, brief):
        uuid = _array_uuid(brief)
        for line in (text or "").splitlines():
            fields = line.split()
            if fields and fields[0] == "ARRAY" and uuid and ("UUID=%s" % uuid) in fields:
                return True
        return False

    def plan_directories(self, acts):
        base = self.spec["mount"]["path"]
        self.dir_plan = []
        for item in self.spec.get("directories") or []:
            rel = item["path"]
            if rel.startswith("/") or ".." in rel.split("/"):
                raise LayoutError("directories: path %r must be relative to the mount point without '..'" % rel)
            full = os.path.join(base, rel)
            uid, gid = _ids(item.get("owner"), item.get("group"))
            mode = int(str(item["mode"]), 8) if item.get("mode") is not None else None
            wanted = dict(path=full, uid=uid, gid=gid, mode=mode)
            if self.mount_state["mounted"]:
                changes = _dir_changes(wanted)
            else:
                # Not mounted yet: what the filesystem holds is seen only after the mount;
                # the real run drops this action when the directory is already right.
                changes = ["create or verify after mount"]
            if changes:
                acts.append(
                    dict(
                        action="directory",
                        target=full,
                        detail="%s (owner %s, group %s, mode %s)"
                        % (
                            "/".join(changes),
                            item.get("owner") or "-",
                            item.get("group") or "-",
                            item.get("mode") or "-",
                        ),
                    )
                )
                self.dir_plan.append(wanted)

    # ------------------------------------------------------------------ apply
    def apply(self):
        spec = self.spec
        # The plan was made from what the devices held a moment ago; a device that went away
        # since (a detached loop device keeps its node with size 0) stops everything here.
        check = getattr(self.inspector, "vanished", None)
        gone = []
        if check is not None:
            for device in self.devices:
                why = check(device["device"])
                if why:
                    gone.append(why)
        if gone:
            raise LayoutError(
                "nothing was changed on any device; %s" % " | ".join(gone), devices=self.public_devices(), actions=[]
            )
        raid = spec.get("raid")
        fs = spec["filesystem"]
        n = len(self.devices)
        fresh_fs_target = self.force_mkfs
        for act in self.actions:
            kind = act["action"]
            if kind == "wipe":
                self._wipe(self._dev(act["target"]))
            elif kind == "partition":
                dev = self._dev(act["target"])
                end = "0"
                reserve = spec.get("reserve_bytes") or 0
                if reserve:
                    end = "-%dK" % (reserve // 1024)
                self._run(
                    [
                        "sgdisk",
                        "-n",
                        "1:1MiB:%s" % end,
                        "-t",
                        "1:%s" % (PART_CODE_RAID if raid else PART_CODE_LINUX),
                        "-c",
                        "1:%s" % (spec.get("partition_label") or "aiinfra-cache"),
                        dev["device"],
                    ]
                )
                dev["member"] = self._reread(dev["device"])
                # Stale signatures of older data at the same offset belong to nothing now.
                self._run(["wipefs", "-a", dev["member"]])
                dev["member_state"] = "empty"
                fresh_fs_target = True
            elif kind == "rescan":
                dev = self._dev(act["target"])
                dev["member"] = self._reread(dev["device"])
                if raid is None:
                    self.fs_target = dev["member"]
            elif kind == "create-array":
                members = [d["member"] if spec.get("partition", True) else d["device"] for d in self.devices]
                self._run(
                    [
                        "mdadm",
                        "--create",
                        act["target"],
                        "--run",
                        "--level=%d" % raid["level"],
                        "--raid-devices=%d" % n,
                        "--chunk=%dK" % raid["chunk_kib"],
                        "--metadata=1.2",
                        "--name=%s" % raid["name"],
                    ]
                    + members
                )
                self.fs_target = self._array_node(members)
                fresh_fs_target = True
            elif kind == "assemble-array":
                members = [d["member"] for d in self.devices]
                self._run(["mdadm", "--assemble", act["target"]] + members)
                self.fs_target = self._array_node(members)
            elif kind == "mkfs":
                if raid is None:
                    self.fs_target = self.devices[0]["member"]
                blkid = self._probe(self.fs_target)
                if blkid.get("TYPE") == fs["type"] and blkid.get("LABEL") == fs["label"]:
                    self.uuid = blkid.get("UUID")
                    act["detail"] += " (already present after assemble; skipped)"
                    act["skipped"] = True
                    continue
                if (blkid.get("TYPE") or blkid.get("PTTYPE")) and not fresh_fs_target:
                    raise LayoutError("refusing mkfs on %s: it holds %s" % (self.fs_target, describe_content(blkid)))
                self._run(mkfs_argv(fs, raid, n, self.fs_target, force=fresh_fs_target))
                self.uuid = self._probe(self.fs_target, strict=False).get("UUID")
                act["target"] = self.fs_target
            elif kind == "mkdir":
                os.makedirs(act["target"], 0o755)
            elif kind == "mount":
                opts = spec["mount"].get("options") or []
                argv = ["mount", "-t", fs["type"]]
                if opts:
                    argv += ["-o", ",".join(opts)]
                self._run(argv + [self.fs_target, act["target"]])
                self.mount_state["mounted"] = True
            elif kind == "remount":
                self._run(["mount", "-o", "remount," + ",".join(spec["mount"]["options"]), act["target"]])
            elif kind == "fstab":
                line = fstab_line(self.uuid, spec["mount"]["path"], fs["type"], spec["mount"].get("options"))
                after = update_fstab(self.fstab["before"], line, spec["mount"]["path"], self.uuid)
                self.fstab.update(after=after, line=line)
                act["detail"] = line
                atomic_write(self.fstab["path"], after, mode=_mode_of(self.fstab["path"], 0o644))
            elif kind == "mdadm-conf":
                rc, out, err = self._run(["mdadm", "--detail", "--brief", self.fs_target], record=False)
                brief = parse_mdadm_brief(out)
                if not brief:
                    raise LayoutError("mdadm --detail --brief %s printed no ARRAY line" % self.fs_target)
                line = _canonical_array_line(brief, raid["name"])
                after = update_mdadm_conf(self.mdadm["before"], line, "/dev/md/%s" % raid["name"], _array_uuid(brief))
                self.mdadm["after"] = after
                act["detail"] = line
                atomic_write(self.mdadm["path"], after, mode=_mode_of(self.mdadm["path"], 0o644))
                self.initramfs_update_needed = True
            elif kind == "directory":
                want = [w for w in self.dir_plan if w["path"] == act["target"]][0]
                changes = _dir_changes(want)
                if not changes:
                    act["skipped"] = True
                    continue
                act["detail"] = "%s%s" % ("/".join(changes), act["detail"][act["detail"].index(" (") :])
                self._apply_directory(want)
        # Actions that turned out to be no-ops once the real state was visible (mkfs of an
        # assembled array that already holds our filesystem, directories already right).
        self.actions = [a for a in self.actions if not a.pop("skipped", False)]
        if not self.uuid and self.fs_target:
            self.uuid = self._probe(self.fs_target, strict=False).get("UUID")

    @staticmethod
    def _apply_directory(want):
        if not os.path.isdir(want["path"]):
            os.makedirs(want["path"])
        if want["uid"] is not None or want["gid"] is not None:
            os.chown(
                want["path"],
                -1 if want["uid"] is None else want["uid"],
                -1 if want["gid"] is None else want["gid"],
            )
        if want["mode"] is not None:
            os.chmod(want["path"], want["mode"])

    def _dev(self, device):
        for dev in self.devices:
            if dev["device"] == device:
                return dev
        raise LayoutError("internal: unknown device %s" % device)

    def _run(self, argv, record=True):
        try:
            return self.runner.run(argv, record=record)
        except CommandError as exc:  # name the step and what was done before it
            raise LayoutError(
                "%s; actions done before: %s"
                % (exc, ", ".join("%s %s" % (c[0], c[-1]) for c in self.runner.commands[:-1]) or "none")
            )

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
            holders = [
                set(h for h in self.inspector.holders(os.path.basename(m)) if h.startswith("md")) for m in members
            ]
            common = set.intersection(*holders) if holders else set()
            if common:
                return "/dev/" + sorted(common)[0]
            time.sleep(0.1)
        raise LayoutError("array over %s did not appear" % ", ".join(members))

    # ------------------------------------------------------------------ report
    def fstab_line_now(self):
        mount = self.spec["mount"]
        uuid = self.uuid or "<uuid of the new filesystem>"
        return fstab_line(uuid, mount["path"], self.spec["filesystem"]["type"], mount.get("options"))

    def public_devices(self):
        keys = (
            "path",
            "device",
            "size",
            "serial",
            "wwn",
            "model",
            "tran",
            "backing_file",
            "class",
            "found",
            "member",
            "wipe_allowed",
        )
        return [dict((k, d.get(k)) for k in keys) for d in self.devices]

    def diff_data(self):
        result = [
            dict(
                before_header=self.fstab["path"],
                after_header=self.fstab["path"],
                before=self.fstab["before"],
                after=self.fstab["after"],
            )
        ]
        if self.mdadm:
            result.append(
                dict(
                    before_header=self.mdadm["path"],
                    after_header=self.mdadm["path"],
                    before=self.mdadm["before"],
                    after=self.mdadm["after"],
                )
            )
        result.append(
            dict(
                before_header="block devices",
                after_header="block devices",
                before="".join("%s: %s\n" % (d["device"], "; ".join(d["found"]) or "empty") for d in self.devices),
                after="".join("%s %s\n" % (a["action"], a["target"]) for a in self.actions),
            )
        )
        return result


def _dir_changes(want):
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


def _canonical_array_line(brief, name):
    """``mdadm --detail --brief`` names the array by its current node; pin /dev/md/<name>."""
    fields = brief.split()
    if len(fields) >= 2:
        fields[1] = "/dev/md/%s" % name
    return " ".join(fields)


def _array_uuid(line):
    match = re.search(r"UUID=(\S+)", line or "")
    return match.group(1) if match and not match.group(1).startswith("<") else None


def _read_file(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _mode_of(path, default):
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return default


def _ids(owner, group):
    uid = gid = None
    try:
        if owner is not None:
            uid = int(owner) if str(owner).isdigit() else pwd.getpwnam(owner).pw_uid
        if group is not None:
            gid = int(group) if str(group).isdigit() else grp.getgrnam(group).gr_gid
    except KeyError as exc:
        raise LayoutError("directories: unknown user or group %s" % exc)
    return uid, gid
