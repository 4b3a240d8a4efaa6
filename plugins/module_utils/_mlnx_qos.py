# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``mlnx_qos`` (Mellanox/mlnx-tools): parse ``mlnx_qos -i IF`` and build its argv.

Options as its optparse defines them: ``--trust pcp|dscp``, ``--pfc`` (8 comma values),
``--dscp2prio set,D,P`` (repeatable), ``-p/--prio_tc``, ``-s/--tsa``, ``-t/--tcbw``.
``--trust`` and ``--dscp2prio`` in one invocation are rejected by the tool ("trust and
dscp2prio commands cannot be used at the same time."), so they are always separate calls.
Both output formats are parsed: the newer one (``tsa: ets, bw: 9%``, buffer lines) and the
older one (``tsa: vendor``, no buffer lines).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

NPRIO = 8

_TC = re.compile(r"^tc:\s*([0-9]+)\s+ratelimit:\s*([^,]+),\s*tsa:\s*(\w+)(?:,\s*bw:\s*([0-9]+)%)?")
_PRIO_OF_TC = re.compile(r"^priority:\s*([0-9]+)")
_DSCP_ROW = re.compile(r"^prio:\s*([0-9]+)\s+dscp:\s*([0-9,\s]*)")
_BIT = re.compile(r"^[01]\Z")


class MlnxQosError(CapabilityError):
    """mlnx_qos output that cannot be parsed, a failed query, or argv the tool refuses."""


def parse_show(text):
    """Parse ``mlnx_qos -i IF`` output into the same state shape as the dcb backend.

    Raises MlnxQosError for output without any mlnx_qos field and for a line whose values cannot
    be what the tool prints (a TC or priority outside 0-7, a DSCP outside 0-63, a bandwidth
    outside 0-100 %, a non-numeric buffer size): a garbled answer is refused, never half-read."""
    state = {"dcbx": None, "trust": None, "dscp2prio": {}, "pfc": None, "pfc_buffer": None,
             "cable_len": None, "ets": {"prio_tc": [None] * NPRIO, "tsa": [None] * NPRIO,
                                        "bw": [None] * NPRIO, "ratelimit": [None] * NPRIO}}
    current_tc = None
    seen_tc = False
    for number, raw in enumerate((text or "").splitlines(), 1):
        line = raw.strip()
        try:
            if line.startswith("DCBX mode:"):
                mode = line.split(":", 1)[1].strip().lower()
                for owner in ("firmware", "os"):
                    if mode.startswith(owner):
                        mode = owner
                state["dcbx"] = mode
            elif line.startswith("Priority trust state:"):
                state["trust"] = line.split(":", 1)[1].strip().lower() or None
            elif line.startswith("Cable len:"):
                value = line.split(":", 1)[1].strip()
                state["cable_len"] = _number(value, 1 << 32) if re.match(r"^[0-9]+\Z", value) else value
            elif _DSCP_ROW.match(line):
                m = _DSCP_ROW.match(line)
                prio = _number(m.group(1), NPRIO)
                for dscp in m.group(2).replace(" ", "").split(","):
                    if dscp:
                        state["dscp2prio"][_number(dscp, 64)] = prio
            elif line.startswith("enabled") and current_tc is None:
                values = line.split()[1:1 + NPRIO]
                if not all(_BIT.match(v) for v in values):
                    raise ValueError("PFC flags are 0 or 1")
                state["pfc"] = [v == "1" for v in values]
            elif line.startswith("buffer") and current_tc is None:
                state["pfc_buffer"] = [_number(v, 1 << 32) for v in line.split()[1:1 + NPRIO]]
            elif _TC.match(line):
                m = _TC.match(line)
                current_tc = _number(m.group(1), NPRIO)
                seen_tc = True
                state["ets"]["tsa"][current_tc] = m.group(3)
                state["ets"]["ratelimit"][current_tc] = m.group(2).strip()
                state["ets"]["bw"][current_tc] = _number(m.group(4), 101) if m.group(4) else None
            elif _PRIO_OF_TC.match(line) and current_tc is not None:
                state["ets"]["prio_tc"][_number(_PRIO_OF_TC.match(line).group(1), NPRIO)] = current_tc
        except ValueError as exc:
            raise MlnxQosError("cannot read mlnx_qos output, line %d %r: %s" % (number, line[:80], exc))
    if not seen_tc and state["pfc"] is None and state["trust"] is None:
        raise MlnxQosError("no mlnx_qos fields found in output")
    return state


def _number(text, limit):
    """A decimal field below ``limit``; ValueError otherwise (garbled output)."""
    if not re.match(r"^[0-9]{1,12}\Z", text or ""):
        raise ValueError("%r is not a number" % (text,))
    value = int(text)
    if value >= limit:
        raise ValueError("%d is out of range (below %d)" % (value, limit))
    return value


def _csv(values):
    return ",".join(str(v) for v in values)


def base(binary, dev):
    return [binary, "-i", dev]


def trust_argv(binary, dev, trust):
    return base(binary, dev) + ["--trust", trust]


def pfc_argv(binary, dev, enabled):
    return base(binary, dev) + ["--pfc", _csv(1 if v else 0 for v in enabled)]


def dscp2prio_argv(binary, dev, mapping):
    argv = base(binary, dev)
    for dscp in sorted(mapping):
        argv += ["--dscp2prio", "set,%d,%d" % (dscp, mapping[dscp])]
    return argv


def ets_argv(binary, dev, prio_tc, tsa, bw):
    return base(binary, dev) + ["-p", _csv(prio_tc), "-s", _csv(tsa), "-t", _csv(bw)]


def check_argv(argv):
    """The tool's own rule, enforced before running: never --trust with --dscp2prio."""
    if "--trust" in argv and "--dscp2prio" in argv:
        raise MlnxQosError("trust and dscp2prio commands cannot be used at the same time")
    return argv


def comparable_ets(ets):
    """ETS as compared: strict TCs print no bandwidth (0), unknown entries stay None."""
    if not ets:
        return None
    bw = [0 if (ets["bw"][i] is None and ets["tsa"][i] == "strict") else ets["bw"][i] for i in range(NPRIO)]
    return {"prio_tc": list(ets["prio_tc"]), "tsa": list(ets["tsa"]), "bw": bw}


class MlnxQosBackend(object):
    """Read and set trust, PFC, DSCP->priority and ETS with the vendor tool."""

    name = "mlnx_qos"
    SETTINGS = {"--trust": "trust", "--dscp2prio": "dscp2prio", "--pfc": "pfc", "-p": "ets"}

    def __init__(self, runner, binary="mlnx_qos"):
        self.runner = runner
        self.binary = binary

    def setting(self, argv):
        """The managed setting (trust, pfc, dscp2prio, ets) an argv of ``commands`` sets."""
        return self.SETTINGS[argv[3]]

    def probe(self, dev):
        rc, out, err = self.runner.run(base(self.binary, dev), check=False)
        if rc == 0:
            return None
        return "mlnx_qos -i %s failed: %s" % (dev, (err or out).strip())

    def read(self, dev):
        rc, out, err = self.runner.run(base(self.binary, dev), check=False)
        if rc != 0:
            raise MlnxQosError("mlnx_qos -i %s failed: %s" % (dev, (err or out).strip()))
        state = parse_show(out)
        state["ets"] = comparable_ets(state["ets"])
        state["notes"] = []
        return state

    def commands(self, dev, want, have):
        cmds = []
        if want.get("trust") and want["trust"] != have.get("trust"):
            cmds.append(trust_argv(self.binary, dev, want["trust"]))
        if want.get("dscp2prio"):
            current = have.get("dscp2prio") or {}
            missing = dict((d, p) for d, p in want["dscp2prio"].items() if current.get(d) != p)
            if missing:
                cmds.append(dscp2prio_argv(self.binary, dev, missing))
        if want.get("pfc") is not None and want["pfc"] != have.get("pfc"):
            cmds.append(pfc_argv(self.binary, dev, want["pfc"]))
        ets = want.get("ets")
        if ets and ets != have.get("ets"):
            cmds.append(ets_argv(self.binary, dev, ets["prio_tc"], ets["tsa"], ets["bw"]))
        return [check_argv(c) for c in cmds]

    def full_commands(self, dev, want):
        return self.commands(dev, want, {"dscp2prio": {}})
