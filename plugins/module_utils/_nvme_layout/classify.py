# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each device holds, relative to the wanted layout (stdlib only).

``build_device`` turns the raw tool outputs of one device (``probe.Inspector.inspect``) into
a state dict; ``classify`` names its class (``empty``, ``ours-exact``, ``ours-partial``,
``foreign``, ``in-use``, ``vanished``, ``unprobeable``) and what is on it in words, which the
data-loss guard and the planner read. Pure functions of their inputs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import stat

from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import (
    ALIGN_BYTES,
    PT_SIGNATURES,
    md_name_matches,
    parse_blkid_export,
    parse_lsblk,
    parse_sgdisk,
    parse_wipefs_json,
)


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
        nvme=raw.get("nvme"),
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
        return set_class(dev, "in-use", found, None, None)
    if dev["ro"]:
        return set_class(dev, "in-use", ["read-only device"], None, None)
    if dev.get("vanished") or str(dev.get("size")) == "0":
        why = dev.get("vanished") or "device vanished or has no media: %s has size 0" % dev["device"]
        return set_class(dev, "vanished", [why], None, None)
    if dev.get("probe_errors"):
        return set_class(dev, "unprobeable", list(dev["probe_errors"]), None, None)
    raw_read = dev.get("raw_read") or {}
    if raw_read.get("error"):
        return set_class(dev, "unprobeable", ["cannot read the device: %s" % raw_read["error"]], None, None)
    _classify_content(dev, spec, n_members)
    if dev["class"] == "empty" and raw_read.get("nonzero"):
        # wipefs and blkid found no signature, yet the device is not blank: data of a kind
        # no tool recognises (or signatures erased with wipefs -a over a filesystem).
        set_class(
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
            return set_class(dev, "empty", [], None, "missing")
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
                    return set_class(dev, "ours-partial", ["gpt partition %s (no content)" % label], member, "empty")
                if state in ("fs-ours", "raid-ours"):
                    return set_class(
                        dev,
                        "ours-exact",
                        ["gpt partition %s with %s" % (label, describe_content(part["blkid"]))],
                        member,
                        state,
                    )
                return set_class(dev, "foreign", ["gpt partition %s holding %s" % (label, what)], member, "foreign")
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
            return set_class(dev, "foreign", found, None, "foreign")
        state, what = content_state(
            dev["blkid"],
            sigs,
            dev["examine"],
            dict(spec, raid=None, filesystem=dict(type="-", label="-")),
            n_members,
        )
        return set_class(dev, "foreign", [what or "unknown signature"], None, "foreign")

    # whole-device members
    state, what = content_state(dev["blkid"], sigs, dev["examine"], spec, n_members)
    if state == "empty":
        return set_class(dev, "empty", [], dev["device"], "empty")
    if state in ("fs-ours", "raid-ours"):
        return set_class(dev, "ours-exact", [describe_content(dev["blkid"])], dev["device"], state)
    return set_class(dev, "foreign", [what], dev["device"], "foreign")


def set_class(dev, klass, found, member, member_state):
    dev["class"] = klass
    dev["found"] = found
    dev["member"] = member
    dev["member_state"] = member_state
    return dev


def _hex(text):
    """Hex digits of an identifier as sysfs or a person writes it (``00 25 38 ..``, ``eui.0025..``,
    a UUID with dashes), lowercased; None when it is not hex."""
    text = (text or "").strip().lower()
    for prefix in ("eui.", "uuid.", "0x"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    digits = re.sub(r"[\s:-]", "", text)
    return digits if digits and re.match(r"\A[0-9a-f]+\Z", digits) else None


def nvme_ids(nvme):
    """The identities that name one NVMe namespace (never its controller alone): the wwid, the
    EUI-64 and NGUID (hex, any separators), ``<controller serial>:<nsid>``."""
    ids = set()
    if nvme.get("wwid"):
        ids.add(nvme["wwid"].strip().lower())
    for key, length in (("eui", 16), ("nguid", 32)):
        digits = _hex(nvme.get(key))
        if digits and len(digits) == length and set(digits) != set("0"):
            ids.add(digits)
    if nvme.get("serial") and nvme.get("nsid"):
        ids.add("%s:%s" % (nvme["serial"], nvme["nsid"]))
    return ids


def _namespace_named(nvme, wanted, dev):
    """Whether ``wanted`` names this namespace itself (see :func:`nvme_ids`)."""
    ids = nvme_ids(nvme)
    if wanted.strip().lower() in ids or wanted in ids:
        return True
    digits = _hex(wanted)
    if digits and digits in ids:
        return True
    if wanted.startswith("/dev/disk/by-id/") and wanted in (dev.get("aliases") or []):
        leaf = os.path.basename(wanted)
        # udev's nvme-<wwid> link, or nvme-<model>_<serial>_<nsid> (systemd 254 and later)
        return bool((nvme.get("wwid") and leaf == "nvme-" + nvme["wwid"].strip())
                    or (nvme.get("nsid") and nvme.get("serial") and leaf.endswith("_%s_%s" % (
                        nvme["serial"], nvme["nsid"]))))
    return False


def wipe_decision(dev, wipe_ids):
    """(allowed, notes): whether the wipe list names ``dev``, and what to tell the user.

    An NVMe namespace is named only by its own identity (:func:`nvme_ids`, or a by-id link of one).
    Its controller's serial alone (or a ``nvme-<model>_<serial>`` link) is shared by every namespace
    of the controller: it is accepted, with a deprecation note, only while exactly one namespace on
    the node has that serial, and refused otherwise, naming the namespace identities to use. A kernel
    name (``/dev/nvme1n1``) is never accepted for a namespace: it can name another disk after a reboot.
    Other devices keep the rules of :func:`wipe_allowed`."""
    nvme = dev.get("nvme")
    if not nvme:
        return wipe_allowed(dev, wipe_ids), []
    notes = []
    for wanted in wipe_ids:
        if _namespace_named(nvme, wanted, dev):
            return True, []
    for wanted in wipe_ids:
        controller = bool(nvme.get("serial")) and (
            wanted == nvme["serial"] or (wanted.startswith("/dev/disk/by-id/") and wanted in (dev.get("aliases") or [])
                                         and wanted.endswith("_" + nvme["serial"])))
        if controller:
            shared = nvme.get("same_serial") or [nvme.get("name")]
            use = namespace_names(nvme)
            if len(shared) == 1:
                return True, ["wipe_serials: %r is the serial of the NVMe controller of %s, not the namespace's own "
                              "identity; accepted because it is the only namespace with that serial, deprecated "
                              "(refused in 1.0.0): write %s instead" % (wanted, dev["device"], use)]
            notes.append("%r is the serial of an NVMe controller that %d namespaces share (%s): it names none of "
                         "them; write the namespace's own identity, %s" % (
                             wanted, len(shared), ", ".join("/dev/" + n for n in shared), use))
        elif wanted in (dev["path"], dev["device"]) or (
                wanted.startswith("/dev/") and not wanted.startswith("/dev/disk/")
                and os.path.realpath(wanted) == dev["device"]):
            notes.append("%r is a kernel name, which can name another disk after a reboot; write the namespace's "
                         "own identity, %s" % (wanted, namespace_names(nvme)))
    return False, notes


def namespace_names(nvme):
    """How the user may name this namespace in wipe_serials (for messages)."""
    names = []
    if nvme.get("serial") and nvme.get("nsid"):
        names.append("%s:%s" % (nvme["serial"], nvme["nsid"]))
    if nvme.get("wwid"):
        names.append(nvme["wwid"].strip())
    digits = _hex(nvme.get("nguid"))
    if digits and len(digits) == 32 and set(digits) != set("0"):
        names.append(digits)
    return " or ".join(names) or "its EUI-64, NGUID or WWN (cat /sys/block/%s/wwid)" % nvme.get("name")


def wipe_allowed(dev, wipe_ids):
    """A device may be wiped when the wipe list names its serial, WWN, one of its paths
    (as given, resolved, /dev/disk/by-id links) or, for a loop device, its backing file.
    (An NVMe namespace: :func:`wipe_decision`.)"""
    if dev.get("nvme"):
        return wipe_decision(dev, wipe_ids)[0]
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
