# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""iproute2 ``dcb``: parse its JSON and text output, build its argv (stdlib only).

Syntax (iproute2 man pages dcb-pfc(8), dcb-app(8), dcb-ets(8), dcb-apptrust(8)):

* ``dcb pfc set dev DEV prio-pfc 0:off 1:off 2:off 3:on ...``
* ``dcb app replace dev DEV dscp-prio 26:3 48:6``
* ``dcb ets set dev DEV prio-tc 0:0 ... tc-tsa 0:ets ... tc-bw 0:10 ...``
* ``dcb apptrust set dev DEV order dscp pcp``

JSON (``dcb -j``): ``prio_pfc`` is an array of 8 booleans, ``dscp_prio`` an array of
``[dscp, prio]`` pairs with numeric DSCP, ``order`` an array of selector names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

NPRIO = 8

# DSCP names dcb prints without -N (iproute2 rt_dsfield names): CSx = 8x, AFxy = 8x + 2y, EF = 46.
DSCP_NAMES = dict([("CS%d" % x, 8 * x) for x in range(8)]
                  + [("AF%d%d" % (x, y), 8 * x + 2 * y) for x in range(1, 5) for y in range(1, 4)]
                  + [("EF", 46)])

# Keys of the text format whose values are "index:value" pairs.
_PAIR_KEYS = ("prio-pfc", "prio-tc", "tc-tsa", "tc-bw", "dscp-prio", "pcp-prio", "prio-buffer",
              "buffer-size", "default-prio", "ets-cap", "reco-tc-bw", "reco-tc-tsa", "reco-prio-tc")
_SCALAR_KEYS = ("pfc-cap", "macsec-bypass", "delay", "total-size", "willing", "ets-cap", "cbs")

UNSUPPORTED_MARKERS = ("Operation not supported", "not supported")
TRUST_ORDER = {"dscp": ["dscp", "pcp"], "pcp": ["pcp"]}


class DcbError(CapabilityError):
    """dcb output that cannot be parsed, or a query that failed."""


def dscp_value(token):
    token = str(token)
    if re.match(r"^[0-9]{1,2}\Z", token) and int(token) < 64:
        return int(token)
    if token.upper() in DSCP_NAMES:
        return DSCP_NAMES[token.upper()]
    if re.match(r"^0[xX][0-9a-fA-F]{1,2}\Z", token) and int(token, 16) < 64:
        return int(token, 16)
    raise DcbError("unknown DSCP name %r" % token)


def _index(token, limit):
    """A decimal index below ``limit`` (a priority, a TC); ValueError otherwise."""
    if not re.match(r"^[0-9]{1,3}\Z", token) or int(token) >= limit:
        raise ValueError("%r is not a number below %d" % (token, limit))
    return int(token)


def _scalar(value):
    if value in ("on", "off"):
        return value == "on"
    return int(value) if re.match(r"^[0-9]{1,18}\Z", value) else value


def parse_text(text):
    """Parse ``dcb OBJECT show`` text into a dict keyed like the JSON output.

    ``prio-pfc 0:off 3:on`` -> ``{"prio_pfc": [False, False, False, True, ...]}``;
    ``dscp-prio AF31:3 CS6:6`` -> ``{"dscp_prio": [[26, 3], [48, 6]]}``;
    ``order: port pcp ethtype`` -> ``{"order": ["port", "pcp", "ethtype"]}``.
    """
    out = {}
    tokens = (text or "").split()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "order:":
            out["order"] = tokens[i + 1:]
            break
        if tok in _SCALAR_KEYS and i + 1 < len(tokens) and ":" not in tokens[i + 1]:
            out[tok.replace("-", "_")] = _scalar(tokens[i + 1])
            i += 2
            continue
        if tok in _PAIR_KEYS:
            pairs = []
            i += 1
            while i < len(tokens) and ":" in tokens[i] and not tokens[i].endswith(":"):
                left, right = tokens[i].split(":", 1)
                pairs.append((left, right))
                i += 1
            key = tok.replace("-", "_")
            try:
                if tok == "dscp-prio":
                    out[key] = [[dscp_value(k), _index(v, NPRIO)] for k, v in pairs]
                elif tok in ("pcp-prio",):
                    out[key] = [[k, _index(v, NPRIO)] for k, v in pairs]
                else:
                    arr = [None] * NPRIO
                    for k, v in pairs:
                        keys = range(NPRIO) if k == "all" else [_index(k, NPRIO)]
                        for idx in keys:
                            arr[idx] = _scalar(v) if tok != "buffer-size" else v
                    out[key] = arr
            except ValueError as exc:
                raise DcbError("cannot read dcb %s: %s" % (tok, exc))
            continue
        i += 1
    return out


def parse_json(text):
    try:
        data = json.loads(text or "{}")
    except (ValueError, RecursionError) as exc:
        raise DcbError("cannot parse dcb JSON: %s" % exc)
    if not isinstance(data, dict):
        raise DcbError("dcb JSON is not an object")
    return data


def _list(data, key, obj):
    """``data[key]`` of a ``dcb -j OBJ show`` answer: a list (empty when absent), else DcbError."""
    value = data.get(key) or []
    if not isinstance(value, list):
        raise DcbError("dcb %s show: %s is not a list: %r" % (obj, key, value))
    return value


def _small_int(value, limit):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit


def unsupported_reason(rc, out, err):
    """The device's reason when dcb says the operation is unsupported, else None."""
    text = (err or "") + (out or "")
    if rc != 0 and any(m in text for m in UNSUPPORTED_MARKERS):
        return text.strip().splitlines()[0] if text.strip() else "Operation not supported"
    return None


def pfc_list(priorities):
    return [p in priorities for p in range(NPRIO)]


def _pairs(values, fmt=str):
    return ["%d:%s" % (i, fmt(v)) for i, v in enumerate(values)]


def pfc_set_argv(dcb, dev, enabled):
    return [dcb, "pfc", "set", "dev", dev, "prio-pfc"] + _pairs(enabled, lambda v: "on" if v else "off")


def app_replace_argv(dcb, dev, dscp2prio):
    return [dcb, "app", "replace", "dev", dev, "dscp-prio"] + [
        "%d:%d" % (d, dscp2prio[d]) for d in sorted(dscp2prio)]


def ets_set_argv(dcb, dev, prio_tc, tsa, bw):
    return ([dcb, "ets", "set", "dev", dev, "prio-tc"] + _pairs(prio_tc)
            + ["tc-tsa"] + _pairs(tsa) + ["tc-bw"] + _pairs(bw))


def apptrust_set_argv(dcb, dev, order):
    return [dcb, "apptrust", "set", "dev", dev, "order"] + list(order)


class DcbBackend(object):
    """Read and set PFC, APP (DSCP), ETS and trust with iproute2 ``dcb``."""

    name = "dcb"
    SETTINGS = {"apptrust": "trust", "pfc": "pfc", "app": "dscp2prio", "ets": "ets"}

    def __init__(self, runner, binary="dcb"):
        self.runner = runner
        self.dcb = binary

    def setting(self, argv):
        """The managed setting (trust, pfc, dscp2prio, ets) an argv of ``commands`` sets."""
        return self.SETTINGS[argv[1]]

    def _show(self, obj, dev):
        rc, out, err = self.runner.run([self.dcb, "-j", obj, "show", "dev", dev], check=False)
        return rc, out, err

    def probe(self, dev):
        """None when the device answers DCB queries, else the reason it does not."""
        rc, out, err = self._show("pfc", dev)
        if rc == 0:
            return None
        return unsupported_reason(rc, out, err) or ("dcb pfc show failed: %s" % (err or out).strip())

    def read(self, dev):
        state = {"dcbx": None, "notes": []}
        rc, out, err = self._show("pfc", dev)
        if rc != 0:
            raise DcbError("dcb pfc show dev %s failed: %s" % (dev, (err or out).strip()))
        pfc = _list(parse_json(out), "prio_pfc", "pfc")
        if not all(isinstance(x, (bool, int)) for x in pfc):
            raise DcbError("dcb pfc show dev %s: prio_pfc is not a list of flags: %r" % (dev, pfc[:NPRIO]))
        state["pfc"] = [bool(x) for x in pfc or [False] * NPRIO]
        rc, out, err = self._show("app", dev)
        state["dscp2prio"] = {}
        if rc == 0:
            prios = {}
            for pair in _list(parse_json(out), "dscp_prio", "app"):
                if not (isinstance(pair, list) and len(pair) == 2 and _small_int(pair[0], 64)
                        and _small_int(pair[1], NPRIO)):
                    raise DcbError("dcb app show dev %s: %r is not a [dscp, priority] pair" % (dev, pair))
                dscp, prio = pair
                prios.setdefault(dscp, set()).add(prio)
            # A DSCP with several APP entries is ambiguous: report it so that "replace" fixes it.
            state["dscp2prio"] = dict((d, p.pop() if len(p) == 1 else sorted(p)) for d, p in prios.items())
        rc, out, err = self._show("ets", dev)
        if rc == 0:
            ets = parse_json(out)
            state["ets"] = {"prio_tc": ets.get("prio_tc"), "tsa": ets.get("tc_tsa"), "bw": ets.get("tc_bw")}
        else:
            state["ets"] = None
            state["notes"].append("ets: %s" % (err or out).strip())
        rc, out, err = self._show("apptrust", dev)
        if rc == 0:
            order = _list(parse_json(out), "order", "apptrust")
            if not all(isinstance(x, str) for x in order):
                raise DcbError("dcb apptrust show dev %s: order is not a list of names: %r" % (dev, order))
            state["trust_order"] = order
            state["trust"] = "dscp" if order[:1] == ["dscp"] else ("pcp" if order[:1] == ["pcp"] else None)
        else:
            # iproute2 < 6.2 has no apptrust object ('Object "apptrust" is unknown').
            state["trust"] = state["trust_order"] = None
            state["apptrust_error"] = (err or out).strip() or "dcb apptrust show failed"
        rc, out, err = self._show("dcbx", dev)
        if rc == 0:
            dcbx = parse_json(out)
            state["dcbx"] = sorted(k for k, v in dcbx.items() if v is True)
        return state

    def commands(self, dev, want, have):
        """Argv lists that bring ``have`` to ``want`` (only what differs)."""
        cmds = []
        if (want.get("trust") and not have.get("apptrust_error")
                and have.get("trust_order") != TRUST_ORDER[want["trust"]]):
            cmds.append(apptrust_set_argv(self.dcb, dev, TRUST_ORDER[want["trust"]]))
        if want.get("pfc") is not None and want["pfc"] != have.get("pfc"):
            cmds.append(pfc_set_argv(self.dcb, dev, want["pfc"]))
        if want.get("dscp2prio"):
            current = have.get("dscp2prio") or {}
            missing = dict((d, p) for d, p in want["dscp2prio"].items() if current.get(d) != p)
            if missing:
                cmds.append(app_replace_argv(self.dcb, dev, missing))
        ets = want.get("ets")
        if ets and ets != have.get("ets"):
            cmds.append(ets_set_argv(self.dcb, dev, ets["prio_tc"], ets["tsa"], ets["bw"]))
        return cmds

    def full_commands(self, dev, want):
        """Every setting, unconditionally: what the boot-time unit replays."""
        return self.commands(dev, want, {"dscp2prio": {}})
