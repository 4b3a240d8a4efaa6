# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rail_routing capability: every NIC of a node on a fabric (a *rail*) gets its own routing.

For each rail of the plan (``rail_routing.rails``): a routing table with the rail's subnet route (and
the fabric's other subnets through the rail's gateway where the rail is routed), a policy rule
``from ADDRESS lookup TABLE`` at the rail's priority, and ``arp_ignore``, ``arp_announce`` and
``rp_filter`` on the rail's interface (through ``_sysctl``'s SysctlProfile: read back, rolled back,
persisted in its own sysctl.d file). The tables and rules are persisted through the node's network
configuration backend (``_netconf``: the backends link_mtu writes to), so that its boot brings them back.

``read`` takes the link table, the addresses, the policy rules and every routing table; ``plan``
matches the rails to interfaces, refuses the interface carrying the Ansible connection (it is left as
it is), takes each rail's address (the plan's, which the interface must hold, else the interface's own
inside the rail's subnets), checks the planned priorities and tables against what the node holds (a
rule or route of someone else there is an error that names it), and lists the actions; ``apply`` sets
the sysctls, the routes, the rules, removes what an earlier plan of ours left, persists, and reads back
``ip route get`` from each rail's address.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import os

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Action, Capability, file_action
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import (
    IpLink,
    describe_match,
    device_facts,
    match_interfaces,
    parse_match,
    ssh_connection_addresses,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf import BACKENDS, apply_change, choose, detect
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import SysctlProfile, canonical_name

PERSIST_CHOICES = ["auto", "networkd", "networkmanager", "netplan", "ifupdown", "none"]
SYSCTL_FILE = "/etc/sysctl.d/90-aiinfra-datapath-rails.conf"
RULES_SECTION = "policy rules"
ROUTES_SECTION = "rail routing tables"
SYSCTL_KEYS = ("arp_ignore", "arp_announce", "rp_filter")
# the tables of ip(8) by name, and where iproute2 keeps the others (names of numbered tables)
TABLE_NAMES = {"local": 255, "main": 254, "default": 253, "unspec": 0}
RT_TABLES = ("/etc/iproute2/rt_tables", "/usr/share/iproute2/rt_tables", "/usr/lib/iproute2/rt_tables")
# Who else uses which table ids and rule priorities (named in a collision): docs/network.md
KNOWN_OWNERS = ((200, 200, "Cilium"), (202, 202, "Cilium"), (2004, 2005, "Cilium"), (52, 52, "Tailscale"),
                (5210, 5270, "Tailscale (rule priorities)"), (253, 255, "the kernel"),
                (10000, 2 ** 32 - 1, "cloud network utilities (amazon-ec2-net-utils and others)"))
RULE_KEYS = ("priority", "src", "srclen", "table", "protocol", "flags")  # a rule of ours has no other selector


class RailRoutingError(CapabilityError):
    """A plan the node cannot take, a collision with someone else's routing, or a change that did not hold."""


def rail_spec():
    """The sub-options of one rail: the plan's ``rail_routing.rails[]`` (docs/plan.md)."""
    return dict(
        fabric=dict(type="str", required=True),
        rail=dict(type="int", required=True),
        name=dict(type="str"),
        interface=dict(type="str"),
        match=dict(type="dict", options=dict(
            name=dict(type="str"), mac=dict(type="str"), pci=dict(type="str"), driver=dict(type="str"),
        )),
        address=dict(type="str"),
        address_ok=dict(type="bool"),
        subnets=dict(type="list", elements="str", default=[]),
        subnet=dict(type="str"),
        gateway=dict(type="str"),
        addressing=dict(type="str"),
        routes=dict(type="list", elements="dict", default=[], options=dict(
            to=dict(type="str", required=True), via=dict(type="str", required=True),
        )),
        table=dict(type="int", required=True),
        priority=dict(type="int", required=True),
        gpu=dict(type="raw"),
    )


# -- parsing ------------------------------------------------------------------------------
def _json(text, what):
    try:
        data = json.loads(text or "[]")
    except (ValueError, RecursionError) as exc:
        raise RailRoutingError("cannot parse '%s' output: %s" % (what, exc))
    if not isinstance(data, list):
        raise RailRoutingError("'%s' did not return a JSON list" % what)
    return [entry for entry in data if isinstance(entry, dict)]


def parse_rt_tables(texts):
    """Table names -> ids from iproute2's rt_tables files (``ID NAME`` lines)."""
    names = dict(TABLE_NAMES)
    for text in texts:
        for raw in (text or "").splitlines():
            fields = raw.split("#", 1)[0].split()
            if len(fields) >= 2 and fields[0].isdigit():
                names.setdefault(fields[1], int(fields[0]))
    return names


def table_id(value, names):
    """The number of a table as ``ip -j`` prints it (a number, a name, or absent: main)."""
    if value is None:
        return TABLE_NAMES["main"]
    text = "%s" % (value,)
    if text.isdigit():
        return int(text)
    return names.get(text)


def owner_of(number):
    for low, high, owner in KNOWN_OWNERS:
        if low <= number <= high:
            return owner
    return None


def rule_text(rule):
    """A rule as ``ip rule`` shows it: ``3101: from 10.0.0.1 lookup 3101 proto static``."""
    parts = ["%s:" % rule.get("priority")]
    if rule.get("not"):
        parts.append("not")
    src = rule.get("src", "all")
    parts.append("from %s%s" % (src, "/%s" % rule["srclen"] if rule.get("srclen") is not None else ""))
    for key, word in (("dst", "to"), ("iifname", "iif"), ("oifname", "oif"), ("fwmark", "fwmark"),
                      ("tos", "tos"), ("ipproto", "ipproto")):
        if rule.get(key) is not None:
            value = rule[key]
            if key == "dst" and rule.get("dstlen") is not None:
                value = "%s/%s" % (value, rule["dstlen"])
            parts.append("%s %s" % (word, value))
    if rule.get("table") is not None:
        parts.append("lookup %s" % rule["table"])
    elif rule.get("action"):
        parts.append(str(rule["action"]))
    if rule.get("protocol"):
        parts.append("proto %s" % rule["protocol"])
    return " ".join(parts)


def route_text(route):
    parts = [str(route.get("dst"))]
    if route.get("gateway"):
        parts.append("via %s" % route["gateway"])
    if route.get("dev"):
        parts.append("dev %s" % route["dev"])
    if route.get("protocol"):
        parts.append("proto %s" % route["protocol"])
    return " ".join(parts)


def _host_len(address):
    return 32 if ipaddress.ip_address(address).version == 4 else 128


def _family(address):
    return "-4" if ipaddress.ip_address(address).version == 4 else "-6"


def _same_src(rule, address):
    src = rule.get("src")
    if src in (None, "all"):
        return False
    length = rule.get("srclen")
    return src == address and (length is None or int(length) == _host_len(address))


def _host_rule(rule):
    """A rule from one host address (``from 10.0.0.1`` or ``from 10.0.0.1/32``)."""
    src = rule.get("src")
    try:
        return src not in (None, "all") and (rule.get("srclen") is None or int(rule["srclen"]) == _host_len(src))
    except ValueError:
        return False


def live_addresses(addr_entries):
    """{ifname: [(address, prefixlen, family)]} of global addresses from ``ip -j addr show``."""
    out = {}
    for entry in addr_entries:
        name = entry.get("ifname")
        infos = entry.get("addr_info")
        if not isinstance(name, str) or not isinstance(infos, list):
            continue
        for info in infos:
            if not isinstance(info, dict) or info.get("scope") not in (None, "global"):
                continue
            if info.get("family") in ("inet", "inet6") and isinstance(info.get("local"), str):
                out.setdefault(name, []).append((info["local"], info.get("prefixlen"), info["family"]))
    return out


def sysctl_key(ifname, key):
    """``net.ipv4.conf.IF.KEY`` in the dotted form (a dot of the interface name written as '/')."""
    return canonical_name("net/ipv4/conf/%s/%s" % (ifname, key))


def probe_address(network, own):
    """An address inside ``network`` other than ``own`` (what ``ip route get`` is asked for)."""
    net = ipaddress.ip_network(network, strict=False)
    for candidate in (net.network_address + 1, net.network_address + 2):
        if candidate in net and str(candidate) != own:
            return str(candidate)
    return str(net.network_address)


class RailSysctl(SysctlProfile):
    """The per-interface keys of the rails, through sysctl_profile's engine, in rail_routing's own file."""

    owner = "rail_routing"


class RailRouting(Capability):
    """Routing table, policy rule and ARP/reverse-path settings of every rail in one call."""

    name = "rail_routing"

    @classmethod
    def options(cls):
        return dict(
            rails=dict(type="list", elements="dict", required=True, options=rail_spec()),
            table_range=dict(type="list", elements="int", required=True),
            arp_ignore=dict(type="int", default=1),
            arp_announce=dict(type="int", default=2),
            rp_filter=dict(type="int", default=2),
            persist=dict(type="str", default="auto", choices=PERSIST_CHOICES),
            sysctl_file=dict(type="path", default=SYSCTL_FILE),
            connection_address=dict(type="str"),
        )

    def validate(self):
        p = self.params
        errors = []
        if len(p["table_range"]) != 2 or not 1 <= p["table_range"][0] <= p["table_range"][1] < 32766:
            errors.append("table_range must be [first, last] with 1 <= first <= last < 32766 (main's rule)")
        for key, allowed in (("arp_ignore", range(0, 9)), ("arp_announce", range(0, 3)), ("rp_filter", range(0, 3))):
            if p[key] not in allowed:
                errors.append("%s %s is outside %d-%d" % (key, p[key], allowed[0], allowed[-1]))
        if not p["sysctl_file"].startswith("/etc/sysctl.d/") or not p["sysctl_file"].endswith(".conf"):
            errors.append("sysctl_file must be a .conf file in /etc/sysctl.d, got %r" % p["sysctl_file"])
        first, last = (p["table_range"] + [0, 0])[:2]
        seen = {}
        for index, rail in enumerate(p["rails"]):
            where = "rails[%d] (%s %s)" % (index, rail["fabric"], rail.get("name") or "rail%d" % rail["rail"])
            for key in ("table", "priority"):
                if not first <= rail[key] <= last:
                    errors.append("%s: %s %d is outside table_range %d-%d" % (where, key, rail[key], first, last))
            for key in ("table", "priority"):
                if (key, rail[key]) in seen:
                    errors.append("%s: %s %d is also %s's" % (where, key, rail[key], seen[(key, rail[key])]))
                seen.setdefault((key, rail[key]), where)
            for text in ([rail.get("address")] if rail.get("address") else []) + [rail.get("gateway")] + [
                    r["via"] for r in rail.get("routes") or []]:
                if text is None:
                    continue
                try:
                    ipaddress.ip_interface(text)
                except ValueError:
                    errors.append("%s: %r is not an IP address" % (where, text))
            nets = list(rail.get("subnets") or []) + [rail.get("subnet")] + [r["to"] for r in rail.get("routes") or []]
            for text in nets:
                if text is None:
                    continue
                try:
                    ipaddress.ip_network(text, strict=False)
                except ValueError:
                    errors.append("%s: %r is not a network" % (where, text))
        if errors:
            raise RailRoutingError("rail_routing: %d problem(s), nothing changed: %s"
                                   % (len(errors), "; ".join(errors)),
                                   errors=errors)

    # -- read ---------------------------------------------------------------------------
    def _ip_json(self, argv, what):
        rc, out, err = self.runner.run([self.ip.ip] + argv, check=False)
        if rc != 0:
            raise RailRoutingError("'%s' failed: %s" % (what, (err or out or "rc %d" % rc).strip()))
        return _json(out, what)

    def read(self):
        self.ip = IpLink(self.runner, ip=self.runner.which("ip") or "ip")
        families = set(["-4"])
        for rail in self.params["rails"]:
            if rail.get("address") and ipaddress.ip_interface(rail["address"]).version == 6:
                families.add("-6")
        addresses = live_addresses(self._ip_json(["-j", "addr", "show"], "ip -j addr show"))
        state = {"links": self.ip.links(), "addresses": addresses,
                 "rules": {}, "routes": {},
                 "tables": parse_rt_tables([self.root.read_raw(p) for p in RT_TABLES] + [
                     self.root.read_raw(os.path.join(RT_TABLES[0] + ".d", n))
                     for n in sorted(self.root.listdir(RT_TABLES[0] + ".d")) if n.endswith(".conf")])}
        for family in sorted(families):
            state["rules"][family] = self._ip_json([family, "-j", "rule", "show"], "ip %s -j rule show" % family)
            state["routes"][family] = self._ip_json([family, "-j", "route", "show", "table", "all"],
                                                    "ip %s -j route show table all" % family)
        return state

    # -- plan ---------------------------------------------------------------------------
    def plan(self, state):
        self.rows, errors = self._resolve(state)
        self.conn = self._guard(state)
        self._addresses(state, errors)
        if errors:
            raise RailRoutingError("rail_routing: %d problem(s), nothing changed: %s"
                                   % (len(errors), "; ".join(errors)),
                                   errors=errors, rails=self._public_rows())
        active = [r for r in self.rows if r["status"] == "configured"]
        route_actions, rule_actions = [], []
        collisions = []
        for family in sorted(state["rules"]):
            mine = [r for r in active if _family(r["address"]) == family]
            rules, problems = self._rule_plan(family, state, mine)
            collisions += problems
            rule_actions += rules
            routes, problems = self._route_plan(family, state, mine)
            collisions += problems
            route_actions += routes
        if collisions:
            raise RailRoutingError("rail_routing: the planned tables or priorities are used by someone else, nothing "
                                   "changed: %s. Choose another rail_routing.table_base in the spec (docs/network.md) "
                                   "or remove what holds them" % "; ".join(collisions),
                                   collisions=collisions, rails=self._public_rows())
        self.sysctl = self._sysctl(active)
        sysctl_actions = self.sysctl.plan(self.sysctl_state) if self.sysctl is not None else []
        sysctl_actions += self._sysctl_file_removal(active)
        # entries peers learned while every NIC answered ARP for every address stay as long as traffic confirms
        # them: a rail whose ARP settings change forgets its neighbours (they are asked again, and now answered
        # by the right NIC only)
        touched = set(a.target for a in sysctl_actions if a.kind == "sysctl")
        changed = sorted(set(r["interface"] for r in active
                             if touched & set(sysctl_key(r["interface"], k) for k in ("arp_ignore", "arp_announce"))))
        neigh = [Action("neigh", name, "ip neigh flush dev %s (learned before its ARP settings)" % name, diff=False,
                        argv=["neigh", "flush", "dev", name], family="-4") for name in changed]
        persist = self._persist_plan(state, active)
        # order of apply: ARP and rp_filter first, then the tables, then the rules that point at them;
        # removals of our old rules before their tables' routes go
        adds = [a for a in route_actions if a.after is not None]
        drops = [a for a in route_actions if a.after is None]
        rule_adds = [a for a in rule_actions if a.after is not None]
        rule_drops = [a for a in rule_actions if a.after is None]
        return sysctl_actions + neigh + adds + rule_drops + rule_adds + drops + persist

    def _resolve(self, state):
        rows, errors, used = [], [], {}
        links = state["links"]
        for index, rail in enumerate(self.params["rails"]):
            name = rail.get("name") or "rail%d" % rail["rail"]
            where = "rails[%d] (%s %s)" % (index, rail["fabric"], name)
            row = {"fabric": rail["fabric"], "rail": rail["rail"], "name": name, "interface": None,
                   "address": None, "subnet": rail.get("subnet"), "gateway": rail.get("gateway"),
                   "routes": list(rail.get("routes") or []), "table": rail["table"], "priority": rail["priority"],
                   "gpu": rail.get("gpu"), "status": "configured", "reason": None, "index": index}
            rows.append(row)
            match = parse_match({"match": rail.get("match"), "name": rail.get("interface")})
            if not match:
                errors.append("%s: give interface or match {name|mac|pci|driver}" % where)
                continue
            names = match_interfaces(links, self.root, match)
            if len(names) != 1:
                errors.append("%s: %s %s (present: %s)" % (
                    where, describe_match(match), "matches no interface" if not names else
                    "matches several interfaces (%s); a rail is one NIC" % ", ".join(names),
                    ", ".join(sorted(links)) or "none"))
                continue
            if rail.get("interface") and rail["interface"] != names[0]:
                errors.append("%s: %s selects %s, but interface says %s" % (
                    where, describe_match(match), names[0], rail["interface"]))
                continue
            if names[0] in used:
                errors.append("%s: %s is also %s; a NIC is one rail" % (where, names[0], used[names[0]]))
                continue
            used[names[0]] = where
            row["interface"] = names[0]
        return rows, errors

    def _guard(self, state):
        """Rails on the interface carrying the Ansible connection are left as they are (a warning)."""
        client, server = ssh_connection_addresses(os.environ)
        address = self.params.get("connection_address")
        try:
            ipaddress.ip_address(address or "")
        except ValueError:
            address = None
        conn = self.ip.connection_interfaces(state["links"], [address, server], client)
        for row in self.rows:
            if row["interface"] and row["interface"] in conn:
                row.update(status="skipped", reason="carries the Ansible connection: left as it is")
                self.warn("rail_routing: %s %s (%s) carries the Ansible connection; its routing, ARP and rp_filter "
                          "are left as they are" % (row["fabric"], row["name"], row["interface"]))
        return conn

    def _addresses(self, state, errors):
        for row in self.rows:
            if row["status"] != "configured" or not row["interface"]:
                continue
            rail = self.params["rails"][row["index"]]
            where = "%s %s (%s)" % (row["fabric"], row["name"], row["interface"])
            nets = [ipaddress.ip_network(t, strict=False) for t in (rail.get("subnets") or [])]
            if rail.get("subnet"):
                nets = [ipaddress.ip_network(rail["subnet"], strict=False)] + nets
            live = state["addresses"].get(row["interface"], [])
            planned = str(ipaddress.ip_interface(rail["address"]).ip) if rail.get("address") else None
            if planned is not None:
                held = [a for a in live if a[0] == planned]
                if not held:
                    errors.append("%s: the plan's address %s is not on the interface (it has %s); fix "
                                  "datapath_addresses or the node's network configuration" % (
                                      where, planned, ", ".join("%s/%s" % a[:2] for a in live) or "none"))
                    continue
                chosen = held[0]
            else:
                inside = [a for a in live if not nets or any(ipaddress.ip_address(a[0]) in n for n in nets
                                                             if n.version == ipaddress.ip_address(a[0]).version)]
                if not inside:
                    row.update(status="skipped", reason="no address in %s on the interface" % (
                        ", ".join(str(n) for n in nets) or "the fabric's subnets"))
                    self.warn("rail_routing: %s has no address %s: not routed (give it one, or its address "
                              "in datapath_addresses)" % (where, "in " + ", ".join(str(n) for n in nets) if nets
                                                          else "on the interface"))
                    continue
                chosen = inside[0]
            address = ipaddress.ip_address(chosen[0])
            if nets and not any(n.version == address.version and address in n for n in nets):
                errors.append("%s: address %s is outside the rail's subnets (%s)" % (
                    where, address, ", ".join(str(n) for n in nets)))
                continue
            row["address"] = str(address)
            if not row["subnet"]:
                found = [n for n in nets if n.version == address.version and address in n]
                row["subnet"] = str(found[0] if found else ipaddress.ip_interface("%s/%s" % chosen[:2]).network)

    # rules ------------------------------------------------------------------------------
    def _rule_plan(self, family, state, rows):
        first, last = self.params["table_range"]
        names = state["tables"]
        live = state["rules"][family]
        planned = dict((r["priority"], r) for r in rows)
        tables = set(r["table"] for r in rows)
        actions, problems, present = [], [], set()
        for rule in live:
            prio = rule.get("priority")
            table = table_id(rule.get("table"), names)
            # a rule of ours: in our range, to a table in our range, from one host address and nothing else
            ours = (isinstance(prio, int) and first <= prio <= last and table is not None and first <= table <= last
                    and set(rule) <= set(RULE_KEYS) and _host_rule(rule))
            row = planned.get(prio)
            if row is not None and ours and table == row["table"] and _same_src(rule, row["address"]):
                present.add(prio)
                continue
            if ours:
                src = "%s/%s" % (rule["src"], rule.get("srclen") or _host_len(rule["src"]))
                actions.append(Action("rule", "priority %d" % prio, "ip %s rule del priority %d from %s lookup %d"
                                      % (family, prio, src, table), before="from %s lookup %d" % (src, table),
                                      after=None, diff=RULES_SECTION,
                                      argv=["rule", "del", "priority", str(prio), "from", src, "lookup", str(table)],
                                      family=family))
                continue
            if row is not None:
                owner = owner_of(prio)
                problems.append("priority %d (%s %s) is taken by the rule '%s'%s" % (
                    prio, row["fabric"], row["name"], rule_text(rule), ", likely %s's" % owner if owner else ""))
            elif table in tables:
                problems.append("table %d is looked up by the rule '%s', which is not rail_routing's" % (
                    table, rule_text(rule)))
        for row in rows:
            if row["priority"] in present:
                continue
            src = "%s/%d" % (row["address"], _host_len(row["address"]))
            actions.append(Action("rule", "priority %d" % row["priority"],
                                  "ip %s rule add priority %d from %s lookup %d"
                                  % (family, row["priority"], src, row["table"]), before=None,
                                  after="from %s lookup %d" % (src, row["table"]), diff=RULES_SECTION,
                                  argv=["rule", "add", "priority", str(row["priority"]), "from", src, "lookup",
                                        str(row["table"])], family=family))
        self._stale_tables = set(table_id(r.get("table"), names) for r in live
                                 if any(a.target == "priority %s" % r.get("priority") and a.after is None
                                        for a in actions))
        return actions, problems

    # routes -----------------------------------------------------------------------------
    def _route_plan(self, family, state, rows):
        names = state["tables"]
        first, last = self.params["table_range"]
        by_table = {}
        for route in state["routes"][family]:
            table = table_id(route.get("table"), names)
            if table is not None and first <= table <= last and route.get("type") in (None, "unicast"):
                by_table.setdefault(table, []).append(route)
        rail_devices = set(r["interface"] for r in self.rows if r["interface"])
        actions, problems = [], []
        for row in rows:
            wanted = [{"dst": row["subnet"], "gateway": None, "dev": row["interface"]}]
            wanted += [{"dst": r["to"], "gateway": r["via"], "dev": row["interface"]} for r in row["routes"]]
            live = by_table.pop(row["table"], [])
            foreign = [r for r in live if r.get("dev") not in rail_devices]
            if foreign:
                owner = owner_of(row["table"])
                problems.append("table %d (%s %s) holds routes that are not rail_routing's: %s%s" % (
                    row["table"], row["fabric"], row["name"], "; ".join(route_text(r) for r in foreign),
                    " (likely %s's)" % owner if owner else ""))
                continue
            have = [(self._dst(r), r.get("gateway"), r.get("dev")) for r in live]
            for want in wanted:
                key = (str(ipaddress.ip_network(want["dst"], strict=False)), want["gateway"], want["dev"])
                if key in have:
                    continue
                argv = ["route", "replace", key[0]] + (["via", want["gateway"]] if want["gateway"] else []) + [
                    "dev", want["dev"]] + ([] if want["gateway"] else ["scope", "link"]) + ["table", str(row["table"])]
                actions.append(Action("route", "table %d %s" % (row["table"], key[0]),
                                      "ip %s %s" % (family, " ".join(argv)), before=None,
                                      after=("via %s dev %s" % (want["gateway"], want["dev"]) if want["gateway"]
                                             else "dev %s" % want["dev"]), diff=ROUTES_SECTION, argv=argv,
                                      family=family))
            keys = [(str(ipaddress.ip_network(w["dst"], strict=False)), w["gateway"], w["dev"]) for w in wanted]
            for number, route in enumerate(live):
                if have[number] not in keys:
                    actions.append(self._route_drop(family, row["table"], route))
        # tables of ours no rule of this plan points at any more: only those whose rule we remove
        for table in sorted(by_table):
            if table in self._stale_tables:
                actions.extend(self._route_drop(family, table, route) for route in by_table[table])
        return actions, problems

    @staticmethod
    def _dst(route):
        dst = route.get("dst")
        if dst == "default":
            return "0.0.0.0/0" if ":" not in (route.get("gateway") or "") else "::/0"
        return str(ipaddress.ip_network(dst, strict=False)) if dst else None

    def _route_drop(self, family, table, route):
        dst = self._dst(route)
        argv = ["route", "del", dst] + (["via", route["gateway"]] if route.get("gateway") else []) + (
            ["dev", route["dev"]] if route.get("dev") else []) + ["table", str(table)]
        return Action("route", "table %d %s" % (table, dst), "ip %s %s" % (family, " ".join(argv)),
                      before=("via %s dev %s" % (route["gateway"], route.get("dev")) if route.get("gateway")
                              else "dev %s" % route.get("dev")), after=None, diff=ROUTES_SECTION, argv=argv,
                      family=family)

    # sysctls ----------------------------------------------------------------------------
    def _sysctl(self, active):
        keys = {}
        for row in active:
            for key in SYSCTL_KEYS:
                keys[sysctl_key(row["interface"], key)] = {"value": str(self.params[key]), "mode": "exact"}
        if not keys:
            self.sysctl_state = None
            return None
        params = {"keys": keys, "file": self.params["sysctl_file"], "persist": self.params["persist"] != "none",
                  "apply": True, "on_override": "warn"}
        profile = RailSysctl(params, self.node)
        profile.validate()
        self.sysctl_state = profile.read()
        return profile

    def _sysctl_file_removal(self, active):
        """No rail left: our sysctl.d file goes (the keys stay as they are live)."""
        if active:
            return []
        before = self.root.read_raw(self.params["sysctl_file"])
        if before is None:
            return []
        return [file_action(self.params["sysctl_file"], before, None, "remove %s (no rail to route)"
                            % self.params["sysctl_file"])]

    # persistence ------------------------------------------------------------------------
    def _persist_plan(self, state, active):
        choice = self.params["persist"]
        self.persist = {"backend": "none", "detected": {}, "changes": [], "notes": []}
        if choice == "none":
            return []
        found = detect(self.root, self.runner, self.runner.which("systemctl"))
        self.persist["detected"] = found
        backend = choose(found) if choice == "auto" else choice
        if backend is None:
            note = ("no network configuration backend found (netplan, NetworkManager, systemd-networkd, ifupdown); "
                    "rail tables and rules not persisted: a reboot loses them")
            self.persist["notes"].append(note)
            if active:
                self.warn(note)
            return []
        self.persist["backend"] = backend
        links = state["links"]
        targets, names = [], set()
        for row in active:
            facts = dict(device_facts(self.root, links, row["interface"]))
            facts["rails"] = [dict((k, row[k]) for k in ("fabric", "rail", "name", "address", "subnet", "routes",
                                                         "table", "priority"))]
            targets.append(facts)
            names.add(row["interface"])
        others = [device_facts(self.root, links, name) for name in sorted(links) if name not in names]
        changes, notes = BACKENDS[backend](self.root, self.runner).plan_routing(targets, others)
        self.persist["notes"].extend(notes)
        self.persist["changes"] = [c.text for c in changes]
        for note in notes:
            self.warn(note)
        return changes

    # -- apply --------------------------------------------------------------------------
    def _ip(self, action):
        self.runner.run([self.ip.ip, action.data["family"]] + action.data["argv"], record=True)

    def _undo(self, action):
        argv = list(action.data["argv"])
        if action.kind == "neigh":
            return None  # forgotten neighbours are asked again
        if action.kind == "rule":
            argv[1] = "del" if argv[1] == "add" else "add"
        elif argv[1] == "del":
            return None  # a removed stale route is not put back
        else:
            argv[1] = "del"
        try:
            self.runner.run([self.ip.ip, action.data["family"]] + argv, check=False, record=True)
        except (CommandError, OSError):
            return "%s (undo FAILED)" % action.target
        return action.target

    def apply(self, state, actions):
        live = [a for a in actions if a.kind in ("neigh", "rule", "route")]
        sysctl = [a for a in actions
                  if a.kind == "sysctl" or (a.kind == "file" and a.target == self.params["sysctl_file"])]
        persist = [a for a in actions if a not in live and a not in sysctl]
        public = [a.public() for a in actions]
        if sysctl and self.sysctl is not None:
            self.sysctl.apply(self.sysctl_state, sysctl)
        elif sysctl:
            for action in sysctl:
                apply_change(self.root, self.runner, action)
        done = []
        try:
            for action in live:
                self._ip(action)
                done.append(action)
            for action in persist:
                apply_change(self.root, self.runner, action)
        except (CommandError, OSError, IOError) as exc:
            undone = [t for t in (self._undo(a) for a in reversed(done)) if t]
            raise RailRoutingError("applying rail routing failed: %s; undid %s" % (exc, ", ".join(undone) or "nothing"),
                                   actions=public, rails=self._public_rows())
        wrong = self.read_back()
        if wrong:
            raise RailRoutingError("rail routing read back differs: %s" % "; ".join(wrong), actions=public,
                                   rails=self._public_rows())

    def read_back(self):
        """``ip route get PEER from ADDRESS`` names the rail's interface for every configured rail."""
        wrong = []
        for row in self.rows:
            if row["status"] != "configured":
                continue
            peer = probe_address(row["subnet"], row["address"])
            rc, out, err = self.runner.run([self.ip.ip, "-j", "route", "get", peer, "from", row["address"]],
                                           check=False)
            found = _json(out, "ip -j route get") if rc == 0 else []
            dev = found[0].get("dev") if found else None
            row["route_get"] = {"peer": peer, "dev": dev}
            if dev != row["interface"]:
                wrong.append("%s %s: ip route get %s from %s leaves by %s, not %s" % (
                    row["fabric"], row["name"], peer, row["address"], dev or (err or "nothing").strip(),
                    row["interface"]))
        return wrong

    def _public_rows(self):
        return [dict((k, v) for k, v in row.items() if k != "index") for row in self.rows]

    def result(self, state, actions):
        return dict(rails=self._public_rows(), connection_interfaces=self.conn, persist=self.persist,
                    sysctl=getattr(self.sysctl, "report", None) if self.sysctl is not None else None,
                    table_range=list(self.params["table_range"]))
