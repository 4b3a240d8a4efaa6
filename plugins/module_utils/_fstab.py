# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Line-oriented configuration files the collection shares with the admin (stdlib only).

``/etc/fstab`` (hugetlbfs mounts, the NVMe cache) and ``mdadm.conf`` (the cache's array) hold
one line of ours among lines we must leave byte-identical. :func:`replace_owned` puts our line
in place of the lines we own, or appends it. fstab fields are octal-escaped as util-linux
reads them (fstab(5): a space in a path is ``\\040``), so a path with a blank stays one field.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# fstab(5), util-linux mangle(): space, tab, newline and backslash are written octal-escaped
_ESCAPES = (("\\", "\\134"), (" ", "\\040"), ("\t", "\\011"), ("\n", "\\012"))
_OCTAL = re.compile(r"\\([0-7]{3})")


def escape(field):
    """An fstab field as util-linux writes it (``/mnt/model cache`` -> ``/mnt/model\\040cache``)."""
    for raw, escaped in _ESCAPES:
        field = field.replace(raw, escaped)
    return field


def unescape(field):
    """An fstab (or /proc/mounts) field as the path it names."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def fstab_fields(line):
    """The unescaped fields of an fstab line, or None for a comment or a blank line."""
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        return None
    return [unescape(f) for f in fields]


def fstab_entry(source, target, fstype, options, freq=0, passno=0):
    """One fstab line (without newline), every field escaped."""
    return " ".join([escape(source), escape(target), fstype, ",".join(options) or "defaults",
                     str(freq), str(passno)])


def replace_owned(text, line, owned):
    """``text`` with ``line`` in place of the first line ``owned(raw)`` claims and without the others
    it claims (a second entry would fight ours); appended when none is claimed. Every other line
    stays byte-identical."""
    out = []
    placed = False
    for raw in (text or "").splitlines(True):
        if owned(raw):
            if not placed:
                out.append(line + "\n")
                placed = True
            continue
        out.append(raw)
    if not placed:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out.append(line + "\n")
    return "".join(out)
