# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Channels and ring sizes persisted in systemd's ``.link`` files, which udev applies when a device
appears (stdlib only; systemd.link(5): ``RxChannels=``, ``TxChannels=``, ``OtherChannels=``,
``CombinedChannels=``, ``RxBufferSize=``, ``TxBufferSize=``).

udev applies the **first** ``.link`` that matches a device, so the settings go into a drop-in of that
file (``NAME.link.d/91-aiinfra-queues.conf``) and never into a second ``.link``. Where only
``99-default.link`` matches, the device gets a ``.link`` of its own, ``10-aiinfra-IF.link``: the name
``link_mtu`` gives its own one, so that the two capabilities share one file and udev finds both drop-ins
(link_mtu writes that file again with its MTU; our drop-in stays). A ``.link`` that would also reach
devices this run does not plan is left alone (with a note). netplan and ifupdown have no such settings:
there the link-up unit sets them when the interface comes up, at boot too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import file_action
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_systemd import (
    DEFAULT_LINK,
    LINK_KEYS,
    OWN_DIR,
    chain,
    dropins,
    parse_unit,
    unit_files,
)

HEADER = "Managed by aiinfra.datapath.nic_affinity; changes here are overwritten."
DROPIN = "91-aiinfra-queues.conf"
OWN_LINK = OWN_DIR + "/10-aiinfra-%s.link"
LINK_SETTINGS = (("channels", "rx", "RxChannels"), ("channels", "tx", "TxChannels"),
                 ("channels", "other", "OtherChannels"), ("channels", "combined", "CombinedChannels"),
                 ("rings", "rx", "RxBufferSize"), ("rings", "tx", "TxBufferSize"))
DEFAULT_POLICIES = ("NamePolicy=keep kernel database onboard slot path",
                    "AlternativeNamesPolicy=database onboard slot path", "MACAddressPolicy=persistent")


def link_lines(channels, rings):
    """The ``[Link]`` lines for the planned counts (None: not set)."""
    values = {"channels": channels or {}, "rings": rings or {}}
    return ["%s=%d" % (key, values[part][name]) for part, name, key in LINK_SETTINGS
            if values[part].get(name) is not None]


def _default_lines(host, files):
    path = dict(files).get(DEFAULT_LINK)
    if not path:
        return list(DEFAULT_POLICIES)
    lines = []
    for source in [path] + dropins(host, DEFAULT_LINK):
        lines.extend("%s=%s" % kv for kv in parse_unit(host.read_raw(source)).get("Link", []))
    return lines or list(DEFAULT_POLICIES)


def plan_links(host, targets, others=()):
    """``(actions, notes, planned paths)``: ``targets`` are device facts (``_iplink.device_facts``) with
    ``lines`` (their ``[Link]`` settings); ``others`` the node's other devices."""
    files = unit_files(host, ".link")
    chains = dict((d["name"], chain(host, files, LINK_KEYS, d, stop=DEFAULT_LINK)[0])
                  for d in list(targets) + list(others))
    actions, notes, planned = [], [], set()
    for target in targets:
        name = target["name"]
        found = chains[name]
        if found and found[-1][1] is True:
            bases = [path for path, _answer in found]
        else:
            own = OWN_LINK % name
            bases = [path for path, _answer in found] + [own]
            if host.read_raw(own) is None:
                match = "Path=%s" % target["path"] if target.get("path") else "OriginalName=%s" % name
                text = ("# %s\n# The .link of %s; udev applies one .link per device, so this one repeats the [Link]\n"
                        "# settings of 99-default.link, whose place it takes for %s. Queue settings: the drop-in.\n"
                        "[Match]\n%s\n\n[Link]\n%s\n"
                        % (HEADER, name, name, match, "\n".join(_default_lines(host, files))))
                actions.append(file_action(own, None, text, mode=0o644))
            planned.add(own)
        for base in bases:
            reach = sorted(o["name"] for o in others if base in [p for p, _a in chains.get(o["name"], ())])
            if reach and base != OWN_LINK % name:
                notes.append("%s: %s also matches %s; queue settings not persisted there (the link-up unit sets "
                             "them)" % (name, base, ", ".join(reach)))
                continue
            path = "%s/%s.d/%s" % (OWN_DIR, os.path.basename(base), DROPIN)
            text = "# %s\n# Queues of %s (%s).\n[Link]\n%s\n" % (HEADER, name, base, "\n".join(target["lines"]))
            planned.add(path)
            before = host.read_raw(path)
            if before != text:
                actions.append(file_action(path, before, text, mode=0o644))
    return actions, notes, planned


def cleanup(host, planned):
    """Remove our drop-ins and our own ``.link`` files that this plan no longer writes."""
    removals = []
    for entry in host.listdir(OWN_DIR):
        paths = ["%s/%s/%s" % (OWN_DIR, entry, DROPIN)] if entry.endswith(".d") else ["%s/%s" % (OWN_DIR, entry)]
        for path in paths:
            if path in planned:
                continue
            before = host.read_raw(path)
            if before is not None and before.startswith("# " + HEADER):
                removals.append(file_action(path, before, None))
    return removals
