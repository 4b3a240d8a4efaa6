# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a ``nic_config`` entry asks of one device, in mlxconfig parameters (stdlib only).

One place says which NV parameters each named intent sets, so that the node (the module), the
audit (controller) and the spec's cross-check that intents and ``raw`` do not set the same key
all read the same table:

==================  ===================================================================
intent              parameters (per port ``_P<n>`` where the device has the port)
==================  ===================================================================
``link_type``       ``LINK_TYPE_P<n>`` = ``IB(1)`` / ``ETH(2)``
``sriov``           ``SRIOV_EN`` = ``True(1)`` / ``False(0)``, ``NUM_OF_VFS`` = n
``ats``             ``ATS_ENABLED`` = ``True(1)`` / ``False(0)``
``roce``            ``ROCE_CC_PRIO_MASK_P<n>`` (bit p: congestion control on priority p),
                    ``CNP_DSCP_P<n>``, ``CNP_802P_PRIO_P<n>`` (from the fabric's ``roce``)
``raw``             any parameter by its mlxconfig name (``NAME`` or ``NAME[i]``)
==================  ===================================================================

``max_read_request`` is not an NV parameter: it is the PCIe Device Control register of each
physical function (set at run time, lost at a reset), handled by the module beside the NV settings.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config_intents import (
    HIDDEN_BY,
    LINK_TYPES,
    split_index,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config_query import encodings

PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?\Z")
NAME_VALUE = re.compile(r"^[A-Za-z0-9_.:+-]{1,64}\Z")
MATCH_KEYS = ("psid", "part_number", "driver")


def wanted_value(value):
    """A desired value -> ``{name, number}``: booleans are ``True(1)``/``False(0)``, integers and
    digit strings numbers, other strings enum names (``ETH``, ``DEVICE_DEFAULT``)."""
    if isinstance(value, bool):
        return {"name": "True" if value else "False", "number": 1 if value else 0}
    if isinstance(value, int):
        return {"name": None, "number": value}
    text = ("%s" % value).strip()
    if re.match(r"^-?[0-9]+\Z", text):
        return {"name": None, "number": int(text)}
    if re.match(r"^0x[0-9a-fA-F]+\Z", text):
        return {"name": None, "number": int(text, 16)}
    if text.lower() in ("true", "false"):
        return wanted_value(text.lower() == "true")
    return {"name": text, "number": None}


def resolved(wanted, row):
    """``wanted`` with the missing half filled from the encodings the device's own row shows."""
    known = encodings(row)
    out = dict(wanted)
    if out.get("number") is None and out.get("name") is not None:
        out["number"] = known.get(out["name"].upper())
    if out.get("name") is None and out.get("number") is not None:
        names = [name for name, number in known.items() if number == out["number"]]
        if len(names) == 1:
            for value in row.get("values", {}).values():
                if value.get("name") and value["name"].upper() == names[0]:
                    out["name"] = value["name"]
    return out


def matches(value, wanted):
    """Whether a parsed column value holds ``wanted``: True, False, or None (the column says N/A or
    is not printed)."""
    if value is None or value.get("unknown"):
        return None
    if value.get("number") is not None and wanted.get("number") is not None:
        return value["number"] == wanted["number"]
    if value.get("name") is not None and wanted.get("name") is not None:
        return value["name"].upper() == wanted["name"].upper()
    return False


def text_of(wanted):
    """How ``wanted`` reads in a diff (``ETH(2)``, ``8``, ``DEVICE_DEFAULT``)."""
    if wanted.get("name") is not None and wanted.get("number") is not None:
        return "%s(%d)" % (wanted["name"], wanted["number"])
    if wanted.get("number") is not None:
        return "%d" % wanted["number"]
    return wanted.get("name")


def set_argument(param, wanted):
    """``PARAM=VALUE`` for ``mlxconfig set``: the number where it is known, else the name."""
    value = wanted["number"] if wanted.get("number") is not None else wanted["name"]
    return "%s=%s" % (param, value)


def ports(params, base):
    """Port numbers n of the device that has ``<base>_P<n>`` parameters, ascending."""
    found = []
    for name in params:
        match = re.match(r"^%s_P(\d+)$" % re.escape(base), name)
        if match:
            found.append(int(match.group(1)))
    return sorted(found)


def select(device, configs):
    """The most specific entry for a device (PSID > part number > driver, added up): (index, why-not).

    A part number matches the tool's ``Name:`` with or without its board revision (``_Ax``...).
    """
    best, best_score = None, -1
    for index, config in enumerate(configs):
        score = 0
        if config.get("psid"):
            if (device.get("psid") or "").strip().lower() != config["psid"].strip().lower():
                continue
            score += 4
        if config.get("part_number"):
            name = (device.get("part_number") or "").strip().upper()
            want = config["part_number"].strip().upper()
            if not (name == want or name.startswith(want + "_")):
                continue
            score += 2
        if config.get("driver"):
            if device.get("driver") != config["driver"]:
                continue
            score += 1
        if score == 0:
            continue
        if score > best_score:
            best, best_score = index, score
    if best is None:
        return None, "no nic_config entry for PSID %s, part number %s, driver %s" % (
            device.get("psid") or "?", device.get("part_number") or "?", device.get("driver") or "?")
    return best, None


def desired(config, params):
    """The parameters ``config`` sets on a device whose query shows ``params`` ({NAME: row}).

    Returns ``(wanted, unsupported)``: ``wanted`` is a list of ``(param, {name, number}, intent)`` in a
    stable order; ``unsupported`` a list of ``{param, intent, reason}`` for what this device does not
    show (hidden behind another parameter, or not exposed at all).
    """
    wanted, unsupported = [], []

    def port_params(intent, base, value):
        numbers = ports(params, base)
        if not numbers:
            unsupported.append({"param": "%s_P<n>" % base, "intent": intent,
                                "reason": "the device shows no %s_P<n> parameter" % base
                                + (" (its link type is fixed)" if base == "LINK_TYPE" else "")})
        for number in numbers:
            wanted.append(("%s_P%d" % (base, number), dict(value), intent))

    def one(intent, param, value):
        wanted.append((param, dict(value), intent))

    if config.get("link_type"):
        name, number = LINK_TYPES[config["link_type"]]
        port_params("link_type", "LINK_TYPE", {"name": name, "number": number})
    sriov = config.get("sriov")
    if sriov:
        one("sriov", "SRIOV_EN", wanted_value(bool(sriov.get("enabled"))))
        if sriov.get("num_vfs") is not None:
            one("sriov", "NUM_OF_VFS", {"name": None, "number": int(sriov["num_vfs"])})
    if config.get("ats") is not None:
        one("ats", "ATS_ENABLED", wanted_value(bool(config["ats"])))
    roce = config.get("roce")
    if roce:
        for base, key in (("ROCE_CC_PRIO_MASK", "prio_mask"), ("CNP_DSCP", "cnp_dscp"),
                          ("CNP_802P_PRIO", "cnp_priority")):
            if roce.get(key) is not None:
                port_params("roce", base, {"name": None, "number": int(roce[key])})
    for param in sorted(config.get("raw") or {}):
        one("raw", param, wanted_value(config["raw"][param]))
    present = []
    for param, value, intent in wanted:
        if param in params:
            present.append((param, resolved(value, params[param]), intent))
            continue
        base, index = split_index(param)
        if index is not None and base in params:
            unsupported.append({"param": param, "intent": intent,
                                "reason": "%s is an array: its index %d was not read" % (base, index)})
            continue
        hidden = HIDDEN_BY.get(base)
        if hidden and hidden[0] in params:
            unsupported.append({"param": param, "intent": intent,
                                "reason": "hidden: the tool shows %s only while %s is %s (Current %s)" % (
                                    param, hidden[0], hidden[2],
                                    _current_text(params[hidden[0]]))})
            continue
        unsupported.append({"param": param, "intent": intent,
                            "reason": "this device (or its firmware) does not expose %s" % param})
    return present, unsupported


def _current_text(row):
    values = (row or {}).get("values", {})
    value = values.get("current") or values.get("next_boot") or {}
    return value.get("text") or "?"
