# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""datapath_facts' ``routing`` section: what the audit compares with the plan's rails (stdlib only).

The policy rules (``ip -j rule show``, IPv4 and IPv6), the routes of every table but local, main and
default (``ip -j route show table all``) by table id, each interface's global addresses and its
``arp_ignore``, ``arp_announce`` and ``rp_filter`` (and ``conf/all``'s), read with the parsers
rail_routing plans with.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.aiinfra.datapath.plugins.module_utils._rail_routing import (
    RT_TABLES,
    SYSCTL_KEYS,
    live_addresses,
    parse_rt_tables,
    sysctl_key,
    table_id,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import read_key

SKIPPED_TABLES = (253, 254, 255)


def _json(runner, argv):
    rc, out, err = runner.run(argv, check=False)
    if rc != 0:
        raise OSError("'%s' failed: %s" % (" ".join(argv), (err or out or "rc %d" % rc).strip()))
    data = json.loads(out or "[]")
    return [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []


def routing_facts(host, runner, names):
    """The section for the interfaces ``names``; raises OSError/ValueError when ``ip`` cannot be read."""
    ip = runner.which("ip")
    if not ip:
        raise OSError("iproute2's ip is not installed")
    tables = parse_rt_tables([host.read_raw(p) for p in RT_TABLES])
    rules, routes = [], {}
    for family in ("-4", "-6"):
        for rule in _json(runner, [ip, family, "-j", "rule", "show"]):
            rule = dict(rule)
            rule["table_id"] = table_id(rule.get("table"), tables)
            rule["family"] = family
            rules.append(rule)
        for route in _json(runner, [ip, family, "-j", "route", "show", "table", "all"]):
            number = table_id(route.get("table"), tables)
            if number is None or number in SKIPPED_TABLES or route.get("type") not in (None, "unicast"):
                continue
            routes.setdefault(str(number), []).append(
                dict((k, route.get(k)) for k in ("dst", "gateway", "dev", "scope", "protocol") if route.get(k)))
    addresses = dict((name, ["%s/%s" % (a, p) for a, p, _f in found])
                     for name, found in live_addresses(_json(runner, [ip, "-j", "addr", "show"])).items())
    sysctl = {}
    for name in ["all"] + list(names):
        entry = {}
        for key in SYSCTL_KEYS:
            state, value = read_key(host, sysctl_key(name, key))
            entry[key] = value if state in ("ok", "read_only") else None
        sysctl[name] = entry
    return {"rules": rules, "tables": routes, "addresses": addresses, "sysctl": sysctl}
