# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the hugepages capability persists (stdlib only): the texts of its managed files.

``vm.nr_hugepages`` for the default page size in its own sysctl file, systemd-tmpfiles ``w``
lines for per-node pools, other page sizes and THP, one fstab entry per hugetlbfs mount, and
the kernel arguments that ``persist=cmdline`` pages hand over to ``kernel_cmdline``. The
page plans carry the sysfs paths, so nothing here knows sysfs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.aiinfra.datapath.plugins.module_utils._fstab import fstab_entry, fstab_fields, replace_owned
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import render_conf

DEFAULT_SYSCTL_FILE = "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf"
DEFAULT_BOOT_UNIT_FILE = "/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf"
TMPFILES_HEADER = (
    "# Managed by aiinfra.datapath.hugepages; changes here are overwritten.\n"
    "# systemd-tmpfiles writes these sysfs values at boot.\n"
)
FILE_KEYS = ("sysctl_file", "boot_unit_file", "fstab")


def sysctl_values(page_plans):
    """``{"vm.nr_hugepages": count}`` for the page size persisted with sysctl (or empty)."""
    values = {}
    for plan in page_plans:
        if plan["persist"] == "sysctl":
            values["vm.nr_hugepages"] = str(plan["requested"])
    return values


def cmdline_args(page_plans):
    """Kernel arguments of the ``persist=cmdline`` pages, in the order of the pages."""
    args = []
    for plan in page_plans:
        if plan["persist"] != "cmdline":
            continue
        args.append("hugepagesz=%s" % plan["size"])
        if plan["per_node"]:
            args.append("hugepages=" + ",".join(
                "%s:%d" % (node, plan["per_node"][node]) for node in sorted(plan["per_node"], key=int)))
        else:
            args.append("hugepages=%d" % plan["requested"])
    return args


def render_tmpfiles(page_plans, thp_plan, thp_dir):
    """The tmpfiles text (``persist=boot_unit`` pools, then THP); None when there is nothing."""
    lines = []
    for plan in page_plans:
        if plan["persist"] != "boot_unit":
            continue
        if plan["per_node"]:
            for node in sorted(plan["per_node"], key=int):
                lines.append("w %s - - - - %d\n" % (plan["node_paths"][node], plan["per_node"][node]))
        else:
            lines.append("w %s - - - - %d\n" % (plan["total_path"], plan["requested"]))
    for name in sorted(thp_plan):
        lines.append("w %s/%s - - - - %s\n" % (thp_dir, name, thp_plan[name]["after"]))
    return TMPFILES_HEADER + "".join(lines) if lines else None


def render_fstab(before, mount_plans):
    """``before`` with one ``hugetlbfs`` line per mount point (other lines kept as they are)."""
    text = before
    for plan in mount_plans:
        line = fstab_entry("hugetlbfs", plan["path"], "hugetlbfs", [plan["options"]])

        def ours(raw, path=plan["path"]):
            fields = fstab_fields(raw)
            return bool(fields) and len(fields) >= 2 and fields[1] == path

        text = replace_owned(text, line, ours)
    return text


def render_files(page_plans, thp_plan, mount_plans, files_before, thp_dir):
    """``{sysctl_file, boot_unit_file, fstab: text or None}`` and the sysctl values."""
    values = sysctl_values(page_plans)
    files = {
        "sysctl_file": render_conf(values, module="hugepages") if values else None,
        "boot_unit_file": render_tmpfiles(page_plans, thp_plan, thp_dir),
        "fstab": render_fstab(files_before["fstab"], mount_plans),
    }
    return files, values
