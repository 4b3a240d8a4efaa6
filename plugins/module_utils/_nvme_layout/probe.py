# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What is on each device: the read-only probes of ``nvme_layout`` (stdlib only).

Every device is inspected with several tools (``lsblk``, ``wipefs -n``, ``blkid -p``, the GPT,
``mdadm --examine``) and a direct read of its first and last MiB, because any one of them
alone misses something ("blkid saw nothing" is not "empty" when the device holds a partition
table). sysfs and procfs (``/sys/class/block``, ``/proc/self/mountinfo``, ``/proc/swaps``) are
read below the capability's root (a ``HostRoot``); device nodes (``/dev/...``) and the
commands are the node's own.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re
import stat

from ansible_collections.aiinfra.datapath.plugins.module_utils._derived import lsblk_transport
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import (
    LSBLK_COLUMNS,
    RAW_CHECK_BYTES,
    LayoutError,
    parse_blkid_export,
    parse_lsblk,
    parse_mountinfo,
    parse_sgdisk,
    parse_size,
)

SYS_BLOCK = "/sys/class/block"
NVME_NAMESPACE = re.compile(r"\Anvme[0-9]{1,5}n[0-9]{1,5}\Z")  # a namespace block device (not nvmeXcYnZ paths)


class Inspector(object):
    """Runs the read-only tools (``run(argv) -> (rc, out, err)`` never changes state) and reads
    sysfs/procfs below ``root`` (a ``HostRoot``)."""

    def __init__(self, runner, root):
        self.runner = runner
        self.root = root

    def _read(self, path):
        """Stripped text of a sysfs/procfs file below the root; None when it cannot be read."""
        try:
            return self.root.read(path)
        except (IOError, OSError):
            return None

    @staticmethod
    def _sysblock(name, *parts):
        return "/".join((SYS_BLOCK, name) + parts)

    def mountinfo(self):
        return parse_mountinfo(self._read("/proc/self/mountinfo") or "")

    def swaps(self):
        text = self._read("/proc/swaps") or ""
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
        for child in self.root.listdir(self._sysblock(name)):
            number = self._read(self._sysblock(name, child, "partition"))
            if number and re.match(r"^[0-9]{1,6}\Z", number):
                result[int(number)] = "/dev/" + child
        return result

    def majmin(self, name):
        return self._read(self._sysblock(name, "dev"))

    def logical_sector_size(self, name):
        """The device's logical sector in bytes (the unit of a partition table's sectors)."""
        text = self._read(self._sysblock(name, "queue", "logical_block_size")) or ""
        if not re.match(r"^[0-9]{3,5}\Z", text) or int(text) % 512:
            raise LayoutError("cannot read the logical sector size of %s (queue/logical_block_size: %r)"
                              % (name, text))
        return int(text)

    def holders(self, name):
        return self.root.listdir(self._sysblock(name, "holders"))

    def nvme_identity(self, name):
        """The namespace's own identity from sysfs (drivers/nvme/host/sysfs.c): ``wwid``, ``eui``
        (EUI-64, ``%8ph``), ``nguid`` (``%pU``), ``nsid``, the controller's ``serial`` and the
        namespaces that share that serial (a serial belongs to the controller, not the namespace).
        None for a device that is not an NVMe namespace."""
        if not NVME_NAMESPACE.match(name):
            return None
        serial = (self._read(self._sysblock(name, "device", "serial")) or "").strip() or None
        identity = dict(
            name=name,
            wwid=self._read(self._sysblock(name, "wwid")),
            eui=self._read(self._sysblock(name, "eui")),
            nguid=self._read(self._sysblock(name, "nguid")),
            nsid=self._read(self._sysblock(name, "nsid")),
            serial=serial,
            same_serial=[],
        )
        if serial:
            for entry in sorted(self.root.listdir(SYS_BLOCK)):
                if NVME_NAMESPACE.match(entry):
                    theirs = (self._read(self._sysblock(entry, "device", "serial")) or "").strip()
                    if theirs == serial:
                        identity["same_serial"].append(entry)
        return identity

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
            ro=self._read(self._sysblock(name, "ro")) == "1",
            backing_file=self._read(self._sysblock(name, "loop", "backing_file")),
            aliases=self._aliases(device),
            nvme=self.nvme_identity(name),
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
        size = self._read(self._sysblock(os.path.basename(device), "size"))
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
    # The spec's words (pcie, tcp, rdma, fc) and lsblk's (nvme, sata, ...) both select: lsblk
    # says "nvme" for every NVMe transport.
    if rule.get("transport") and (entry.get("tran") or "") != lsblk_transport(rule["transport"]):
        return False
    size = int(entry.get("size") or 0)
    if rule.get("min_size") is not None and size < parse_size(rule["min_size"]):
        return False
    if rule.get("max_size") is not None and size > parse_size(rule["max_size"]):
        return False
    return True
