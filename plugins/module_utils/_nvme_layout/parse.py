# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers and text builders of ``nvme_layout`` (stdlib only).

The outputs of ``lsblk``, ``blkid -p -o export``, ``wipefs -n``, ``sgdisk -p``,
``/proc/self/mountinfo`` and ``mdadm --detail --brief`` are read here, and the lines the
capability writes (the fstab entry, the mdadm.conf ``ARRAY`` line) and the ``mkfs`` command
are built here: functions of their inputs only, so that the unit tests feed them outputs
recorded from real loop devices (tests/fixtures/storage).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._fstab import (
    fstab_entry,
    fstab_fields,
    replace_owned,
    unescape,
)

PART_CODE_RAID = "FD00"
PART_CODE_LINUX = "8300"
# The GPT type GUIDs of those codes (what sfdisk writes; sgdisk -p shows them as the codes).
PART_TYPE_GUIDS = {
    PART_CODE_RAID: "A19D880F-05FC-4D3B-A006-743F0F84911E",
    PART_CODE_LINUX: "0FC63DAF-8483-4772-8E79-3D69D8477DE4",
}
# The partition entry array of a GPT as sfdisk and sgdisk write it: 128 entries of 128 bytes.
GPT_ENTRIES_BYTES = 128 * 128
# A GPT partition name holds 36 UTF-16 code units.
GPT_NAME_MAX = 36
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


class LayoutError(CapabilityError):
    """A layout that cannot be made as asked; nothing was changed unless the message says so."""


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
    match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)(i?B?)\s*\Z", str(value), re.I)
    if not match:
        raise LayoutError("select: cannot read size %r (use bytes or 512G, 3.84TB, 1TiB)" % (value,))
    number, unit, suffix = match.groups()
    power = "KMGTP".find(unit.upper()) + 1 if unit else 0
    base = 1000 if suffix.upper() == "B" and unit else 1024
    if len(number) > 30:  # far beyond any disk (and beyond float and int(str) limits)
        raise LayoutError("select: size %r is out of range" % (value,))
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
    except (ValueError, RecursionError):
        return parse_wipefs_text(body)
    signatures = data.get("signatures") if isinstance(data, dict) else None
    if not isinstance(signatures, list) or not all(isinstance(s, dict) for s in signatures):
        # not wipefs's document: say so rather than read it as "no signatures" (a blank disk)
        raise LayoutError("cannot read the output of wipefs -n -J: %r" % body[:120])
    found = [
        dict(type=s.get("type"), offset=s.get("offset"), label=s.get("label"), uuid=s.get("uuid"))
        for s in signatures
    ]
    for sig in found:
        for key, value in sig.items():
            if value is not None and not isinstance(value, str):
                raise LayoutError("cannot read the output of wipefs -n -J: %s %r is not a string" % (key, value))
    return found


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


_SGDISK_PART = re.compile(r"^\s*([0-9]{1,20})\s+([0-9]{1,20})\s+([0-9]{1,20})\s+\S+\s+\S+\s+([0-9A-Fa-f]{4})\s*(.*)\Z")


def parse_sgdisk(text):
    """``sgdisk -p`` -> {sector_size, sectors, last_usable, partitions: [...]}."""
    info = dict(sector_size=512, sectors=None, last_usable=None, partitions=[])
    for line in strip_header(text or "").splitlines():
        match = re.match(r"^Disk \S+: ([0-9]{1,20}) sectors", line)
        if match:
            info["sectors"] = int(match.group(1))
        match = re.match(r"^Sector size \(logical(?:/physical)?\): ([0-9]{1,20})", line)
        if match:
            info["sector_size"] = int(match.group(1))
        match = re.search(r"last usable sector is ([0-9]{1,20})", line)
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
    """``lsblk -J`` -> its ``blockdevices`` list; LayoutError for output that is not that document."""
    body = strip_header(text or "").strip()
    if not body:
        return []
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise LayoutError("cannot read the output of lsblk -J: %s" % exc)
    devices = data.get("blockdevices", []) if isinstance(data, dict) else None
    if not isinstance(devices, list):
        raise LayoutError("cannot read the output of lsblk -J: no list of block devices in %r" % body[:120])
    for device in devices:
        problem = _lsblk_problem(device)
        if problem:
            raise LayoutError("cannot read the output of lsblk -J: %s" % problem)
    return devices


def _lsblk_problem(device, depth=0):
    """What is wrong with one ``lsblk -J -b`` device object (None when its columns have their types)."""
    if not isinstance(device, dict):
        return "a device is %r, not an object" % (device,)
    for key, value in device.items():
        if key == "children":
            if not isinstance(value, list) or depth > 8:
                return "children of %r is %r" % (device.get("name"), value)
            for child in value:
                problem = _lsblk_problem(child, depth + 1)
                if problem:
                    return problem
        elif key == "mountpoints":
            if not isinstance(value, list) or not all(v is None or isinstance(v, str) for v in value):
                return "mountpoints of %r is %r" % (device.get("name"), value)
        elif key == "size":  # a number with -b (a string of digits from util-linux before 2.33)
            if not (value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
                    or (isinstance(value, str) and re.match(r"^[0-9]{1,20}\Z", value))):
                return "size of %r is %r, not a number of bytes" % (device.get("name"), value)
        elif value is not None and not isinstance(value, (str, bool)):
            return "%s of %r is %r, not text" % (key, device.get("name"), value)
    return None


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
                target=unescape(fields[4]),
                fstype=tail[0],
                source=unescape(tail[1]),
                options=opts,
                super_options=tail[2] if len(tail) > 2 else "",
            )
        )
    return mounts


def parse_mdadm_brief(text):
    """``mdadm --detail --brief`` -> the ARRAY line (first one)."""
    for line in strip_header(text or "").splitlines():
        if line.startswith("ARRAY "):
            return line.strip()
    return None


def md_name_matches(md_name, name):
    """mdadm stores ``homehost:name``; accept both forms."""
    return bool(md_name) and (md_name == name or md_name.split(":", 1)[-1] == name)


# --------------------------------------------------------------------------- file editing


def fstab_line(uuid, path, fstype, options):
    opts = [o for o in (options or []) if o]
    if "nofail" not in opts:
        opts.append("nofail")
    if len(opts) == 1:
        opts.insert(0, "defaults")
    return fstab_entry("UUID=%s" % uuid, path, fstype, opts, 0, 2)


def update_fstab(text, line, mount_path, uuid):
    """Replace our entry (same mount path or same UUID) or append it; other lines stay
    byte-identical. Returns the new text."""

    def ours(raw):
        fields = fstab_fields(raw)
        return bool(fields) and len(fields) >= 2 and (
            fields[1] == mount_path or bool(uuid and fields[0] == "UUID=%s" % uuid))

    return replace_owned(text, line, ours)


def update_mdadm_conf(text, array_line, device, uuid):
    """Add our ARRAY line when absent; replace a stale line for the same device or UUID."""

    def ours(raw):
        fields = raw.split()
        return len(fields) >= 2 and fields[0] == "ARRAY" and (fields[1] == device or ("UUID=%s" % uuid) in fields)

    return replace_owned(text, array_line, ours)


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


def canonical_array_line(brief, name):
    """``mdadm --detail --brief`` names the array by its current node; pin /dev/md/<name>."""
    fields = brief.split()
    if len(fields) >= 2:
        fields[1] = "/dev/md/%s" % name
    return " ".join(fields)


def array_uuid(line):
    match = re.search(r"UUID=(\S+)", line or "")
    return match.group(1) if match and not match.group(1).startswith("<") else None


def conf_has_array(text, brief):
    """Whether mdadm.conf ``text`` has an ARRAY line with the UUID of ``brief``."""
    uuid = array_uuid(brief)
    for line in (text or "").splitlines():
        fields = line.split()
        if fields and fields[0] == "ARRAY" and uuid and ("UUID=%s" % uuid) in fields:
            return True
    return False
