# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Numeric version comparison for firmware and driver versions (stdlib only).

``28.39.3560 < 28.41.1000`` is compared field by field as integers, never as strings.
Non-numeric suffixes ("-1.1.9", " (MT_0000000838)") are split into their own fields.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_TOKEN = re.compile(r"[0-9]+|[A-Za-z]+")


def version_key(version):
    """Return a tuple that orders versions numerically: '28.39.3560' -> (28, 39, 3560)."""
    if version is None:
        return ()
    text = str(version).strip().split(" ", 1)[0]
    key = []
    for token in _TOKEN.findall(text):
        if token.isdigit() and len(token) <= 30:  # longer: garbage, ordered as text
            key.append((0, int(token), ""))
        else:
            key.append((1, 0, token.lower()))
    return tuple(key)


def compare_versions(left, right):
    """Return -1, 0 or 1 as ``left`` is older than, equal to or newer than ``right``."""
    a, b = version_key(left), version_key(right)
    # Pad with zeros so that 28.39 == 28.39.0
    length = max(len(a), len(b))
    pad = (0, 0, "")
    a = a + (pad,) * (length - len(a))
    b = b + (pad,) * (length - len(b))
    return (a > b) - (a < b)
