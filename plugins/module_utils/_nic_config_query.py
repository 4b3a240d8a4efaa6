# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``mlxconfig`` / ``mstconfig`` query output, parsed column by column (stdlib only).

The table the tools print (mstflint ``mlxconfig/mlxcfg_ui.cpp``: ``printConfHeader``,
``printSingleParam``)::

    Configurations:                                      Default         Current         Next Boot
    *        LINK_TYPE_P1                                IB(1)           IB(1)           ETH(2)
     RO      SOME_READ_ONLY_PARAM                        0               0               0
             ESWITCH_HAIRPIN_DESCRIPTORS                 Array[0..7]     Array[0..7]     Array[0..7]

* The header names the columns that follow: ``Default``, ``Current`` and ``Next Boot`` with ``-e``
  when the firmware can read them, ``Next Boot`` alone without ``-e`` (or where it cannot), and
  ``New`` after them in the table ``set`` prints. Columns are read in the header's order.
* A row starts with ``*`` when Next Boot differs from Default or Current, and carries ``RO`` when the
  parameter is read-only. Its values are one token each: ``NAME(n)`` (an enum or a boolean, with
  its number), a bare number, a bare name, ``0x...`` (BYTES), ``Array[a..b]`` (an array, to be
  queried again as ``NAME[a..b]``: :func:`array_query`), or ``N/A`` (not readable). Versions differ
  in widths (16, 20 or 33 characters), and a value wider than its column is followed by one space,
  so rows are split on blanks, never by position. Each column is read on its own: one row may say
  ``7``, ``HOST_0(1)`` and ``DEVICE_DEFAULT(0)``.
* A row whose values do not match the header's columns is kept in ``unparsed``; nothing is guessed.
* ``-E- ...`` lines are errors: ``Unknown Parameter X`` and ``The Device doesn't support X parameter``
  name a parameter that this device or firmware does not expose (:func:`parse_error`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


HEADER_LABELS = (("Default", "default"), ("Current", "current"), ("Next Boot", "next_boot"), ("New", "new"))
COLUMNS = ("default", "current", "next_boot")
_ROW = re.compile(r"^(?P<diff>\*)?\s*(?:(?P<ro>RO)\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?)"
                  r"(?P<rest>(?:\s+\S+)*)\s*\Z")
_NAMED = re.compile(r"^(?P<name>.*\S)?\((?P<number>-?[0-9]+|0x[0-9a-fA-F]+)\)\Z")
_ARRAY = re.compile(r"^Array\[(?P<first>\d+)\.\.(?P<last>\d+)\]\Z")
_NUMBER = re.compile(r"^-?[0-9]+\Z")
_HEX = re.compile(r"^0x[0-9a-fA-F]+\Z")
HEADER_FIELDS = (("Device type:", "device_type"), ("Name:", "part_number"), ("Description:", "description"),
                 ("Device:", "device"))
NOT_READABLE = "Device Firmware does not support reading "
_ERRORS = (
    ("unknown", re.compile(r"Unknown Parameter:?\s+(?P<param>[A-Za-z_][A-Za-z0-9_]*(?:\[[0-9.]+\])?)")),
    ("unsupported", re.compile(r"The Device doesn't support (?P<param>[A-Za-z_][A-Za-z0-9_]*(?:\[[0-9.]+\])?) "
                               r"parameter")),
)


def parse_value(token):
    """One column's value: ``{text, name, number, array, unknown}`` (absent parts None/False)."""
    value = {"text": token, "name": None, "number": None, "array": None, "unknown": False}
    if token == "N/A":
        value["unknown"] = True
        return value
    match = _ARRAY.match(token)
    if match:
        value["array"] = [int(match.group("first")), int(match.group("last"))]
        return value
    match = _NAMED.match(token)
    if match:
        number = match.group("number")
        value["name"] = match.group("name")
        value["number"] = int(number, 16) if number.startswith("0x") else int(number)
        return value
    if _NUMBER.match(token):
        value["number"] = int(token)
    elif _HEX.match(token):
        value["number"] = int(token, 16)
    else:
        value["name"] = token
    return value


def header_columns(line):
    """The columns a ``Configurations:`` header names, in its order (``default``, ...)."""
    rest = line.split("Configurations:", 1)[1]
    found = []
    for label, key in HEADER_LABELS:
        position = rest.find(label)
        if position >= 0:
            found.append((position, key))
    return [key for _position, key in sorted(found)]


def parse_row(line, columns):
    """A table row -> ``{name, values: {column: value}, modified, read_only}``; None when the line is
    not a row; ``{name, unparsed: text}`` when its values do not fit ``columns``."""
    match = _ROW.match(line.rstrip("\n"))
    if not match:
        return None
    tokens = (match.group("rest") or "").split()
    if len(tokens) != len(columns):
        return {"name": match.group("name"), "unparsed": line.strip(),
                "reason": "%d value(s) for %d column(s) (%s)" % (len(tokens), len(columns), ", ".join(columns))}
    return {"name": match.group("name"), "modified": bool(match.group("diff")),
            "read_only": bool(match.group("ro")),
            "values": dict((column, parse_value(tokens[i])) for i, column in enumerate(columns))}


def parse_error(line):
    """A ``-E-`` line -> ``{kind: unknown|unsupported|error, param, text}``."""
    text = line.strip()
    if text.startswith("-E-"):
        text = text[3:].strip()
    for kind, pattern in _ERRORS:
        match = pattern.search(text)
        if match:
            return {"kind": kind, "param": match.group("param"), "text": text}
    return {"kind": "error", "param": None, "text": text}


def parse_rows(text, columns):
    """Rows of a table (or of part of one, without its header) read with the given columns."""
    params, order, unparsed = {}, [], []
    for line in (text or "").splitlines():
        row = parse_row(line, columns)
        if row is None:
            continue
        if "unparsed" in row:
            unparsed.append(row)
            continue
        if row["name"] not in params:
            order.append(row["name"])
        params[row["name"]] = row
    return params, order, unparsed


def parse_query(text):
    """A whole ``mlxconfig -d DEV [-e] query [PARAM...]`` (or ``set``) output of one device.

    Returns ``{device_type, part_number, description, device, columns, params: {NAME: row}, order,
    arrays: {NAME: [first, last]}, unparsed: [...], errors: [...], not_readable: [...], devices}``;
    ``devices`` counts the ``Device #N:`` blocks (the caller names one device with ``-d``).
    """
    result = {"device_type": None, "part_number": None, "description": None, "device": None, "columns": [],
              "params": {}, "order": [], "arrays": {}, "unparsed": [], "errors": [], "not_readable": [],
              "devices": 0}
    columns = None
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if re.match(r"^Device #\d+:\Z", stripped):
            result["devices"] += 1
            continue
        if stripped.startswith("-E-"):
            result["errors"].append(parse_error(stripped))
            continue
        if stripped.startswith("Configurations:"):
            columns = header_columns(stripped)
            result["columns"] = list(columns)
            continue
        if stripped.startswith(NOT_READABLE):
            result["not_readable"].append(stripped[len(NOT_READABLE):].strip())
            continue
        if columns is None:
            for label, key in HEADER_FIELDS:
                if stripped.startswith(label):
                    result[key] = stripped[len(label):].strip() or None
            continue
        if stripped.startswith(("The '*'", "The 'RO'", "Apply new Configuration", "Applying", "-I-", "-W-")):
            continue
        row = parse_row(line, columns)
        if row is None:
            continue
        if "unparsed" in row:
            result["unparsed"].append(row)
            continue
        name = row["name"]
        if name not in result["params"]:
            result["order"].append(name)
        result["params"][name] = row
        for value in row["values"].values():
            if value["array"] is not None:
                result["arrays"][name] = list(value["array"])
                break
    return result


def array_query(name, bounds):
    """The argument that queries every index of an array parameter: ``NAME[a..b]``."""
    return "%s[%d..%d]" % (name, bounds[0], bounds[1])


def display(value):
    """How the tool prints a value: ``NAME(n)``, ``n``, ``NAME`` or its text."""
    if value is None:
        return None
    if value.get("name") is not None and value.get("number") is not None:
        return "%s(%d)" % (value["name"], value["number"])
    if value.get("number") is not None:
        return "%d" % value["number"]
    if value.get("name") is not None:
        return value["name"]
    return value.get("text")


def encodings(row):
    """``{NAME (upper case): number}`` that the row's own columns show (``DEVICE_DEFAULT(0)`` in one
    column lets a bare ``DEVICE_DEFAULT`` or ``0`` in another be compared)."""
    known = {}
    for value in (row or {}).get("values", {}).values():
        if value.get("name") is not None and value.get("number") is not None:
            known[value["name"].upper()] = value["number"]
    return known
