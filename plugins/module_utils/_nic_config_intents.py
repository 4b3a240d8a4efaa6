# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which NV parameters each ``nic_config`` intent sets (stdlib only, no other import).

Read by the module (``_nic_config_params``), the audit and the spec's cross-check that an entry's
``raw`` parameters are none an intent of the same entry sets (``cluster_spec/checks_nic_config.py``,
which loads this file by its path where the collection is not importable: keep it self-contained).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

LINK_TYPES = {"ib": ("IB", 1), "eth": ("ETH", 2)}
# The parameters each intent sets: a name, or a pattern with the port number (spec cross-check)
INTENT_PARAMS = (
    ("link_type", (r"LINK_TYPE_P\d+",)),
    ("sriov", ("SRIOV_EN", "NUM_OF_VFS")),
    ("ats", ("ATS_ENABLED",)),
    ("roce", (r"ROCE_CC_PRIO_MASK_P\d+", r"CNP_DSCP_P\d+", r"CNP_802P_PRIO_P\d+")),
)
# Parameters the tool shows only when another one holds a value (mlxconfig_host.db dependencies):
# reported as hidden, with what would show them, never set blindly.
HIDDEN_BY = {
    "MAX_ACC_OUT_READ": ("ADVANCED_PCI_SETTINGS", 1, "True(1)"),
}

_INDEXED = re.compile(r"^(?P<base>[A-Za-z_][A-Za-z0-9_]*)\[(?P<index>\d+)\]\Z")


def split_index(name):
    """``NAME[3]`` -> (``NAME``, 3); any other name -> (name, None)."""
    match = _INDEXED.match(name or "")
    if not match:
        return name, None
    return match.group("base"), int(match.group("index"))


def intent_of(param):
    """The intent that sets parameter ``param`` (``link_type`` ...), or None (a raw parameter)."""
    base, _index = split_index(param)
    for intent, patterns in INTENT_PARAMS:
        if any(re.match("^%s$" % pattern, base or "") for pattern in patterns):
            return intent
    return None


def raw_clashes(raw, intents):
    """Raw parameter names that a set intent also sets: ``[(param, intent)]`` (spec cross-check).

    ``intents``: the names of the intents the entry sets (``link_type``, ``sriov``, ``ats``, ``roce``).
    """
    out = []
    for param in sorted(raw or {}):
        intent = intent_of(param)
        if intent is not None and intent in intents:
            out.append((param, intent))
    return out
