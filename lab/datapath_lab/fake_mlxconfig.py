#!/usr/bin/python3
"""A stand-in for NVIDIA's ``mlxconfig`` (and ``mlxfwreset``) on a lab node (standard library only).

The lab installs this file as ``/usr/local/sbin/mlxconfig`` and ``/usr/local/sbin/mlxfwreset`` inside a
node's overlay, never on the host (``datapath-lab nic-firmware NODE``). It keeps one state file per
device (adapter) in ``/var/lib/datapath-lab/nvconfig/``: each parameter's Default, Current and Next
Boot values. ``set`` writes Next Boot; the lab's reboot (``datapath-lab reboot``) copies Next Boot to
Current, unless the device's firmware is "broken" (``datapath-lab nic-firmware NODE --broken``), when
it does not. ``mlxfwreset`` does the same copy at once.

It prints what mstflint's ``mlxconfig`` prints (``mlxconfig/mlxcfg_ui.cpp`` of mstflint 4.34:
``printOpening``, ``printConfHeader``, ``printSingleParam``; the set dialogue of ``setDevCfg``), so
that the collection reads it with the parser it uses on real devices
(tests/fixtures/nic_config/ holds recorded outputs of real devices in the same format).

Commands: ``mlxconfig -d DEV [-e] [-y] q|query [NAME|NAME[a..b]...]``, ``mlxconfig -d DEV [-y] s|set
NAME=VALUE...``, ``mlxfwreset -d|--device DEV reset [-y|--yes]``. DEV is a PCI address (with or without
its domain) of any function of the device.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
from typing import Any

STATE_DIR = "/var/lib/datapath-lab/nvconfig"
ERROR = 3  # MLX_CFG_ERROR, mlxcfg_status.h
NEXT = "Next Boot"


class FakeError(Exception):
    pass


# --------------------------------------------------------------------------- the device
def _bdf(text: str) -> str:
    text = text.strip().lower()
    if re.match(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", text):
        return "0000:" + text
    return text


def device_files(state_dir: str) -> list[str]:
    try:
        names = sorted(os.listdir(state_dir))
    except OSError:
        return []
    return [os.path.join(state_dir, n) for n in names if n.endswith(".json")]


def find_device(state_dir: str, dev: str) -> str:
    bdf = _bdf(dev)
    for path in device_files(state_dir):
        with open(path) as handle:
            if bdf in json.load(handle).get("functions", []):
                return path
    raise FakeError(f"Failed to open device: {dev}")


def load(path: str) -> dict[str, Any]:
    with open(path) as handle:
        return json.load(handle)


def save(path: str, device: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(device, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)


def visible(device: dict[str, Any], param: dict[str, Any]) -> bool:
    """A parameter behind another (MAX_ACC_OUT_READ behind ADVANCED_PCI_SETTINGS) shows while the other's
    Current value is the one it needs (mlxconfig_host.db dependencies are read from the running config)."""
    rule = param.get("visible_if")
    if not rule:
        return True
    other = next((p for p in device["params"] if p["name"] == rule[0]), None)
    return other is not None and other["current"] == rule[1]


def text(param: dict[str, Any], value: int) -> str:
    """mlxconfig's printValue: NAME(n) for an enum or boolean, else the number."""
    if param["kind"] == "bool":
        return "True(1)" if value else "False(0)"
    for name, number in (param.get("choices") or {}).items():
        if number == value:
            return f"{name}({number})"
    return str(value)


def parse_value(param: dict[str, Any], raw: str) -> int:
    raw = raw.strip()
    if param["kind"] == "bool":
        if raw.lower() in ("1", "true"):
            return 1
        if raw.lower() in ("0", "false"):
            return 0
        raise FakeError(f"Bad value {raw} for parameter {param['name']}")
    choices = param.get("choices") or {}
    for name, number in choices.items():
        if raw.upper() == name.upper():
            return number
    if not re.match(r"^(0x[0-9a-fA-F]+|[0-9]+)$", raw):
        raise FakeError(f"Bad value {raw} for parameter {param['name']}")
    number = int(raw, 0)
    if choices and number not in choices.values():
        raise FakeError(f"Bad value {raw} for parameter {param['name']}")
    if number > int(param.get("max", 2**32 - 1)):
        raise FakeError(f"Parameter {param['name']} value {number} is out of range (maximum {param.get('max')})")
    return number


# --------------------------------------------------------------------------- printing (mstflint 4.34)
def opening(device: dict[str, Any], dev: str) -> str:
    out = "\nDevice #1:\n----------\n\n"
    for label, value in (("Device type:", device["device_type"]), ("Name:", device["name"]),
                         ("Description:", device["description"]), ("Device:", dev)):
        out += "%-20s%-20s\n" % (label, value)
    return out + "\n"


def conf_header(enhanced: bool, new: bool) -> str:
    if enhanced:
        line = "%-20s%44s%20s%18s" % ("Configurations:", "Default", "Current", NEXT)
    else:
        line = "%-20s%46s" % ("Configurations:", NEXT)
    if new:
        line += "       %s" % "New"
    return line + "\n"


def value_cell(value: str, last: bool) -> str:
    cell = "%-20s" % value
    return cell if last or len(cell) < 20 else cell + " "


def row(name: str, values: list[str], modified: bool, read_only: bool = False) -> str:
    out = "%s%s     %-44s" % ("*" if modified else " ", "RO" if read_only else "  ", name)
    for index, value in enumerate(values):
        out += value_cell(value, index == len(values) - 1)
    return out + "\n"


def rows_of(param: dict[str, Any], enhanced: bool, index: int | None = None) -> tuple[str, bool]:
    """One row, or (array) one summary row; (text, modified)."""
    if param["kind"] == "array":
        if index is None:
            summary = "Array[0..%d]" % (param["length"] - 1)
            return row(param["name"], [summary] * (3 if enhanced else 1), False), False
        values = [param[k][index] for k in ("default", "current", "next")]
        name = "%s[%d]" % (param["name"], index)
        element = dict(param, kind=param.get("element", "int"))
    else:
        values = [param["default"], param["current"], param["next"]]
        name = param["name"]
        element = param
    default, current, nxt = values
    modified = enhanced and (nxt != default or nxt != current)
    shown = [text(element, v) for v in (values if enhanced else [nxt])]
    return row(name, shown, modified, bool(param.get("read_only"))), modified


def query(device: dict[str, Any], dev: str, names: list[str], enhanced: bool) -> tuple[int, str]:
    out = opening(device, dev) + conf_header(enhanced, False)
    by_name = {p["name"]: p for p in device["params"] if visible(device, p)}
    picked: list[tuple[dict[str, Any], int | None]] = []
    if not names:
        picked = [(p, None) for p in device["params"] if visible(device, p)]
    for name in names:
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)(?:\.\.(\d+))?\])?$", name)
        param = by_name.get(match.group(1)) if match else None
        if param is None or match is None:
            return ERROR, out + f"-E- The Device doesn't support {name} parameter\n"
        if match.group(2) is not None:
            if param["kind"] != "array":
                return ERROR, out + f"-E- The Device doesn't support {name} parameter\n"
            first = int(match.group(2))
            last = int(match.group(3)) if match.group(3) is not None else first
            if last >= param["length"]:
                return ERROR, out + f"-E- Index {last} of {param['name']} is out of range\n"
            picked.extend((param, i) for i in range(first, last + 1))
        else:
            picked.append((param, None))
    modified_any = False
    for param, index in picked:
        line, modified = rows_of(param, enhanced, index)
        out += line
        modified_any = modified_any or modified
    if modified_any:
        out += "The '*' shows parameters with next value different from default/current value.\n"
    return 0, out


def set_values(path: str, dev: str, assignments: list[str]) -> tuple[int, str]:
    with open(path) as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        device = load(path)
        out = opening(device, dev) + conf_header(False, True)
        by_name = {p["name"]: p for p in device["params"] if visible(device, p)}
        changes: list[tuple[dict[str, Any], int | None, int]] = []
        for assignment in assignments:
            name, sep, raw = assignment.partition("=")
            match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?$", name)
            param = by_name.get(match.group(1)) if match and sep else None
            if param is None or match is None:
                return ERROR, out + f"-E- The Device doesn't support {name} parameter\n"
            if param.get("read_only"):
                return ERROR, out + f"-E- Operation is not supported (Read only TLV: {name})\n"
            index = int(match.group(2)) if match.group(2) is not None else None
            if (index is None) != (param["kind"] != "array"):
                return ERROR, out + f"-E- The Device doesn't support {name} parameter\n"
            element = dict(param, kind=param.get("element", "int")) if index is not None else param
            try:
                value = parse_value(element, raw)
            except FakeError as exc:
                return ERROR, out + f"-E- {exc}\n"
            changes.append((param, index, value))
        for param, index, value in changes:
            element = dict(param, kind=param.get("element", "int")) if index is not None else param
            before = param["next"][index] if index is not None else param["next"]
            name = param["name"] if index is None else "%s[%d]" % (param["name"], index)
            out += row(name, [text(element, before), text(element, value)], False)
        out += "\n Apply new Configuration? (y/n) [n] : y\n"
        for param, index, value in changes:
            if index is None:
                param["next"] = value
            else:
                param["next"][index] = value
        save(path, device)
    out += "Applying... Done!\n-I- Please reboot machine to load new configurations.\n"
    return 0, out


def apply_next_boot(device: dict[str, Any]) -> list[str]:
    """What a boot (or a firmware reset) does on healthy firmware: Current := Next Boot. Returns the
    parameters that changed."""
    changed = []
    for param in device["params"]:
        if param["current"] != param["next"]:
            param["current"] = json.loads(json.dumps(param["next"]))
            changed.append(param["name"])
    return changed


def fw_reset(path: str, dev: str) -> tuple[int, str]:
    with open(path) as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        device = load(path)
        if device.get("firmware") != "broken":
            apply_next_boot(device)
            save(path, device)
    return 0, (f"The reset level for device, {dev} is:\n\n3: Driver restart and PCI reset\n"
               "Continue with reset?[y/N] y\n-I- Sending Reset Command To Fw             -Done\n"
               "-I- Resetting PCI                            -Done\n"
               "-I- Restarting MST                           -Done\n")


# --------------------------------------------------------------------------- the command line
def main(argv: list[str], state_dir: str = STATE_DIR) -> tuple[int, str]:
    prog = os.path.basename(argv[0])
    args = list(argv[1:])
    dev, enhanced, rest = None, False, []
    while args:
        arg = args.pop(0)
        if arg in ("-d", "--dev", "--device"):
            dev = args.pop(0) if args else None
        elif arg in ("-e", "--enable_verbosity"):
            enhanced = True
        elif arg in ("-y", "--yes", "--skip_vm_check"):
            continue
        else:
            rest.append(arg)
    if not dev:
        return ERROR, "-E- no device given (-d DEVICE): this lab mlxconfig answers for one device at a time\n"
    try:
        path = find_device(state_dir, dev)
    except FakeError as exc:
        return ERROR, f"-E- {exc}\n"
    if prog.endswith("fwreset"):
        if rest[:1] not in (["reset"], ["r"]):
            return ERROR, "-E- only 'reset' is simulated\n"
        return fw_reset(path, dev)
    if not rest:
        return ERROR, "-E- No command found. For more information please read the help message:\n"
    command, params = rest[0], rest[1:]
    if command in ("q", "query"):
        return query(load(path), dev, params, enhanced)
    if command in ("s", "set"):
        if not params:
            return ERROR, "-E- missing parameters to set\n"
        return set_values(path, dev, params)
    return ERROR, f"-E- Unknown command: {command}\n"


if __name__ == "__main__":
    code, output = main(sys.argv)
    sys.stdout.write(output)
    sys.exit(code)
