# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: roce_qos
short_description: Configure RoCE lossless QoS (trust, PFC, DSCP map, ETS, ECN, CNP, RoCE ToS/mode)
version_added: "0.1.0"
description:
  - Configures, per RoCE interface, the trust mode, PFC per priority, the DSCP to priority
    map (APP table), ETS (priority to traffic class, TSA, bandwidths), ECN enable per
    priority for the reaction (C(roce_rp)) and notification (C(roce_np)) points, the CNP
    DSCP and 802.1p priority, and the default RoCE ToS and RoCE mode of the RDMA device behind
    the netdev (rdma_cm configfs).
  - Reads the current state, changes only what differs, then reads it back and fails if the
    device did not take a setting.
  - Backends, chosen per interface with O(backend=auto) V(mlnx_qos) when the vendor tool is
    installed and the vendor driver's C(/sys/class/net/IF/qos) exists, else iproute2 V(dcb).
    ECN and CNP use C(/sys/class/net/IF/ecn/...) when present (vendor driver only); rdma_cm
    uses C(CONFIGFS/rdma_cm/HCA/ports/N/default_roce_mode|default_roce_tos).
  - On a device without DCB support (virtual interfaces such as veth, or a driver that answers
    "Operation not supported") the interface is reported with RV(interfaces[].supported=false)
    and its reason; nothing is changed.
  - Warns when firmware DCBX (C(mlnx_qos) "DCBX mode - Firmware controlled", dcb C(lld_managed))
    or a running lldpad may override the host settings; RV(interfaces[].dcbx_owner) names it.
  - These NIC settings are runtime-only. With O(persist=true) the module saves the full list of
    steps to C(/etc/aiinfra-datapath/roce_qos.json) and installs and enables
    C(aiinfra-roce-qos.service), a oneshot unit running
    C(/usr/local/libexec/aiinfra-datapath/roce-qos-apply) (Python 3 stdlib) at boot.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Reads everything, reports the commands and writes it would run, changes nothing.
  diff_mode:
    support: full
    description: Before/after of every managed setting.
  platform:
    support: full
    platforms: posix
    description: Linux with iproute2 C(dcb) or Mellanox C(mlnx_qos).
options:
  interfaces:
    description:
      - The RoCE interfaces, in the shape of the plan's C(qos) items.
      - Omitted settings are left alone.
    type: list
    elements: dict
    required: true
    suboptions:
      interface:
        description: Interface name. Either this or O(interfaces[].match).
        type: str
      match:
        description: Selector (every key must match exactly one interface).
        type: dict
        suboptions:
          name:
            description: Interface name.
            type: str
          mac:
            description: MAC address.
            type: str
          pci:
            description: PCI address of the device.
            type: str
          driver:
            description: Kernel driver of the device.
            type: str
      fabric:
        description: Fabric name, reported back only.
        type: str
      trust:
        description: Which header classifies traffic. dcb sets C(apptrust order dscp pcp) or C(order pcp).
        type: str
        choices: [dscp, pcp]
      pfc_priorities:
        description: Priorities with PFC enabled; every other priority is set to no PFC.
        type: list
        elements: int
      dscp2prio:
        description:
          - DSCP (0-63, keys may be strings) to priority (0-7).
          - DSCP values not listed are left as they are.
        type: dict
      ets:
        description: Enhanced transmission selection.
        type: dict
        suboptions:
          prio_tc:
            description: Traffic class of each priority 0-7 (8 values).
            type: list
            elements: int
          tsa:
            description: Scheduler of each traffic class (8 values, V(strict), V(ets), V(vendor) or V(cbs)).
            type: list
            elements: str
          bw:
            description: Bandwidth percent of each traffic class (8 values); the ets classes sum to 100.
            type: list
            elements: int
      ecn:
        description: ECN enabled per priority; priorities not listed are disabled.
        type: dict
        suboptions:
          rp:
            description: Priorities with the reaction point (sender rate limiting) enabled.
            type: list
            elements: int
          np:
            description: Priorities with the notification point (CNP generation) enabled.
            type: list
            elements: int
      cnp:
        description: Marking of congestion notification packets.
        type: dict
        suboptions:
          dscp:
            description: DSCP of CNPs (0-63).
            type: int
          priority:
            description: 802.1p priority of CNPs (0-7).
            type: int
      roce_tos:
        description:
          - Default ToS byte of RDMA-CM connections (0-255). DSCP 26 with ECT(0) is 106 (26 << 2 | 2).
        type: int
      roce_mode:
        description: Default RoCE mode of RDMA-CM connections.
        type: str
        choices: [v2, v1]
      roce_mtu:
        description:
          - RoCE path MTU the plan expects (derived from the netdev MTU). Only checked; a warning
            says when the interface's MTU gives a smaller RoCE MTU.
        type: int
  backend:
    description: Tool used for trust, PFC, DSCP map and ETS.
    type: str
    choices: [auto, dcb, mlnx_qos]
    default: auto
  persist:
    description: Install the boot-time unit and state file that re-apply the settings.
    type: bool
    default: true
  configfs_root:
    description: Where configfs is mounted on the node.
    type: path
    default: /sys/kernel/config
  root:
    description: Root of the node's filesystem (for tests). Commands still run on the node.
    type: path
    default: /
notes:
  - Firmware defaults (mlxconfig) and LLDP DCBX on the switch side are not changed; if the
    firmware owns DCBX, run C(mlnx_qos -i IF -d os) or configure the firmware first.
  - ECN sysfs exists only with the vendor (MLNX_OFED/DOCA) driver; with the inbox driver the
    ECN settings are reported as not set.
seealso:
  - module: aiinfra.datapath.link_mtu
"""

EXAMPLES = r"""
- name: Lossless RoCE on priority 3, CNPs on 6 (the usual AI-fabric values)
  aiinfra.datapath.roce_qos:
    interfaces:
      - interface: ens1f0np0
        trust: dscp
        pfc_priorities: [3]
        dscp2prio: {"26": 3, "48": 6}
        ets:
          prio_tc: [0, 1, 2, 3, 4, 5, 6, 7]
          tsa: [ets, ets, ets, ets, ets, ets, strict, ets]
          bw: [10, 10, 10, 50, 10, 0, 0, 10]
        ecn: {rp: [3], np: [3]}
        cnp: {dscp: 48, priority: 6}
        roce_tos: 106
        roce_mode: v2

- name: From the plan, vendor tool forced
  aiinfra.datapath.roce_qos:
    interfaces: "{{ plan.qos }}"
    backend: mlnx_qos
"""

RETURN = r"""
interfaces:
  description: One entry per interface.
  returned: always
  type: list
  elements: dict
  contains:
    interface:
      description: Interface name.
      type: str
    supported:
      description: Whether the device supports DCB; V(false) means nothing was changed.
      type: bool
    reason:
      description: Why the interface is not supported.
      type: str
    backend:
      description: Backend used (V(dcb) or V(mlnx_qos)).
      type: str
    rdma_device:
      description: RDMA device behind the netdev.
      type: str
    dcbx_owner:
      description: Who owns DCBX when known (V(os), V(firmware), V(lld_managed), V(lldpad)).
      type: str
    before:
      description: Managed settings as read.
      type: dict
    after:
      description: Managed settings as wanted.
      type: dict
    actions:
      description: Commands and writes for this interface.
      type: list
      elements: str
    notes:
      description: Settings that could not be applied on this device and why.
      type: list
      elements: str
    changed:
      description: Whether this interface changed.
      type: bool
  sample:
    - {interface: veth0, supported: false, reason: "no /sys/class/net/veth0/device: virtual interface",
       changed: false, actions: [], notes: []}
actions:
  description: Every command and write, in order, including persistence files.
  returned: always
  type: list
  elements: str
persist:
  description: Boot-time re-apply files and whether they changed.
  returned: always
  type: dict
  contains:
    enabled:
      description: Value of O(persist).
      type: bool
    changes:
      description: Files written (or that would be).
      type: list
      elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aiinfra.datapath.plugins.module_utils._dcb import DcbBackend, DcbError
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import (
    LockTimeout, atomic_write, host_root, lock_path, no_lock, node_lock,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._iplink import (
    describe_match, match_interfaces, parse_match,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._mlnx_qos import MlnxQosBackend, MlnxQosError
from ansible_collections.aiinfra.datapath.plugins.module_utils._roce_qos import (
    APPLY_SCRIPT, APPLY_SCRIPT_TEXT, STATE_FILE, UNIT_FILE, UNIT_LINK, UNIT_TEXT, RoceDevice,
    consistency_warnings, describe_step, iboe_mtu, normalize, run_step, running_lldpad,
    state_document, sysfs_steps,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError, Runner

MATCH = dict(name=dict(type="str"), mac=dict(type="str"), pci=dict(type="str"), driver=dict(type="str"))


def argument_spec():
    return dict(
        interfaces=dict(type="list", elements="dict", required=True, options=dict(
            interface=dict(type="str"),
            match=dict(type="dict", options=MATCH),
            fabric=dict(type="str"),
            trust=dict(type="str", choices=["dscp", "pcp"]),
            pfc_priorities=dict(type="list", elements="int"),
            dscp2prio=dict(type="dict"),
            ets=dict(type="dict", options=dict(prio_tc=dict(type="list", elements="int"),
                                               tsa=dict(type="list", elements="str"),
                                               bw=dict(type="list", elements="int"))),
            ecn=dict(type="dict", options=dict(rp=dict(type="list", elements="int"),
                                               np=dict(type="list", elements="int"))),
            cnp=dict(type="dict", options=dict(dscp=dict(type="int"), priority=dict(type="int"))),
            roce_tos=dict(type="int"),
            roce_mode=dict(type="str", choices=["v2", "v1"]),
            roce_mtu=dict(type="int"),
        )),
        backend=dict(type="str", default="auto", choices=["auto", "dcb", "mlnx_qos"]),
        persist=dict(type="bool", default=True),
        configfs_root=dict(type="path", default="/sys/kernel/config"),
        root=dict(type="path", default="/"),
    )


def sysfs_links(host):
    links = {}
    for name in host.listdir("/sys/class/net"):
        links[name] = {"address": host.read("/sys/class/net/%s/address" % name, "")}
    return links


def pick_backend(choice, dev, tools, runner):
    """(backend object, None) or (None, reason)."""
    if choice == "auto":
        if tools.get("mlnx_qos") and dev.has_vendor_qos():
            choice = "mlnx_qos"
        elif tools.get("dcb"):
            choice = "dcb"
        elif tools.get("mlnx_qos"):
            choice = "mlnx_qos"
        else:
            return None, "neither iproute2 dcb nor mlnx_qos is installed"
    if not tools.get(choice):
        return None, "%s is not installed" % choice
    cls = MlnxQosBackend if choice == "mlnx_qos" else DcbBackend
    return cls(runner, tools[choice]), None


def plan_interface(module, host, runner, tools, name, want, notes, quiet=False):
    """Read one interface; return its result row, differing steps and full replay steps."""
    p = module.params
    dev = RoceDevice(host, name, p["configfs_root"])
    row = {"interface": name, "supported": True, "reason": None, "backend": None, "rdma_device": None,
           "dcbx_owner": None, "before": {}, "after": {}, "actions": [], "notes": notes, "changed": False}
    if not dev.has_device():
        row.update(supported=False, reason="no /sys/class/net/%s/device: virtual interface without a "
                                           "NIC driver, DCB not supported" % name)
        return row, [], []
    backend, reason = pick_backend(p["backend"], dev, tools, runner)
    if backend is None:
        row.update(supported=False, reason=reason)
        return row, [], []
    row["backend"] = backend.name
    reason = backend.probe(name)
    if reason:
        row.update(supported=False, reason="%s: %s" % (backend.name, reason))
        return row, [], []
    have = backend.read(name)
    row["rdma_device"] = dev.rdma_device()
    bwant = dict(want)
    if want.get("trust") and have.get("apptrust_error"):
        notes.append("trust: dcb cannot set it here (%s); needs iproute2 >= 6.2 or mlnx_qos"
                     % have["apptrust_error"])
        bwant["trust"] = None
    if want.get("trust") == "pcp" and want.get("dscp2prio"):
        notes.append("dscp2prio is set but trust is pcp: the DSCP map has no effect")
    cmds = backend.commands(name, bwant, have)
    full = [{"op": "run", "argv": c} for c in backend.full_commands(name, bwant)]
    for key in ("trust", "pfc", "dscp2prio", "ets"):
        if bwant.get(key) is not None:
            value = have.get(key)
            if key == "dscp2prio":
                value = dict((str(d), have.get(key, {}).get(d)) for d in sorted(bwant[key]))
                row["after"][key] = dict((str(d), v) for d, v in sorted(bwant[key].items()))
            else:
                row["after"][key] = bwant[key]
            row["before"][key] = value
    before, after, steps, sys_full = sysfs_steps(dev, want, notes)
    row["before"].update(before)
    row["after"].update(after)
    owners = []
    if have.get("dcbx") == "firmware":
        owners.append("firmware")
    elif have.get("dcbx") and "lld_managed" in have["dcbx"]:
        owners.append("lld_managed")
    if tools.get("lldpad_pids"):
        owners.append("lldpad")
    if owners:
        row["dcbx_owner"] = owners[0]
        if not quiet:
            module.warn("%s: DCBX is owned by %s, which may override these host settings "
                        "(mlnx_qos -i %s -d os, or stop lldpad)" % (name, " and ".join(owners), name))
    elif have.get("dcbx") in ("os",) or (have.get("dcbx") and "host" in have["dcbx"]):
        row["dcbx_owner"] = "os"
    if want.get("roce_mtu"):
        mtu = host.read("/sys/class/net/%s/mtu" % name, "")
        if mtu.isdigit() and (iboe_mtu(int(mtu)) or 0) < want["roce_mtu"]:
            notes.append("roce_mtu: MTU %s of %s gives RoCE MTU %s, plan expects %d; set the link MTU first"
                         % (mtu, name, iboe_mtu(int(mtu)), want["roce_mtu"]))
    all_steps = [{"op": "run", "argv": c} for c in cmds] + steps
    row["actions"] = [describe_step(s) for s in all_steps]
    row["changed"] = bool(all_steps)
    return row, all_steps, full + sys_full


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    host = host_root(module)
    try:
        # one lock around read -> plan -> apply -> persist, so that a run never plans against a
        # state that another run is changing (none in check mode: nothing changes)
        with node_lock(lock_path(host)) if not module.check_mode else no_lock():
            run(module, host)
    except LockTimeout as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="roce_qos: %s" % exc)


def run(module, host):
    """Read, plan, apply and persist; ends in exit_json or fail_json."""
    p = module.params
    runner = Runner(module)

    links = sysfs_links(host)
    errors, resolved = [], []
    for index, item in enumerate(p["interfaces"]):
        where = "interfaces[%d]" % index
        match = parse_match({"name": item.get("interface"), "match": item.get("match")})
        if not match:
            errors.append("%s: give interface or match" % where)
            continue
        names = match_interfaces(links, host, match)
        if len(names) != 1:
            errors.append("%s: %s matches %s interfaces (%s); it must match exactly one"
                          % (where, describe_match(match), len(names), ", ".join(names) or "none present"))
            continue
        want, errs = normalize(item, where)
        errors.extend(errs)
        resolved.append((names[0], want))
    if len(set(n for n, w in resolved)) != len(resolved):
        errors.append("an interface appears more than once in interfaces")
    if errors:
        module.fail_json(msg="roce_qos: %d problem(s), nothing changed: %s"
                         % (len(errors), "; ".join(errors)), errors=errors)

    tools = {"dcb": runner.which("dcb"), "mlnx_qos": runner.which("mlnx_qos"),
             "lldpad_pids": running_lldpad(host)}
    rows, plans, replay = [], [], {}
    try:
        for name, want in resolved:
            for warning in consistency_warnings(name, want):
                module.warn(warning)
            row, steps, full = plan_interface(module, host, runner, tools, name, want, [])
            for note in row["notes"]:
                module.warn("%s: %s" % (name, note))
            rows.append(row)
            plans.append((row, steps))
            if row["supported"]:
                replay[name] = {"backend": row["backend"], "steps": full}
    except (DcbError, MlnxQosError, CommandError) as exc:
        module.fail_json(msg="reading QoS state failed: %s" % exc)

    persist = {"enabled": p["persist"], "changes": []}
    files = []
    if p["persist"] and replay:
        files = [(STATE_FILE, state_document(replay), 0o644), (APPLY_SCRIPT, APPLY_SCRIPT_TEXT, 0o755),
                 (UNIT_FILE, UNIT_TEXT, 0o644)]
        files = [(path, text, mode) for path, text, mode in files if host.read_raw(path) != text]
        persist["changes"] = ["write %s" % f[0] for f in files]
        link_ok = os.path.islink(host.path(UNIT_LINK)) and os.readlink(host.path(UNIT_LINK)) == UNIT_FILE
        if not link_ok:
            persist["changes"].append("enable %s (link %s)" % (os.path.basename(UNIT_FILE), UNIT_LINK))

    actions = [a for row in rows for a in row["actions"]] + persist["changes"]
    diff = {"before": dict((r["interface"], r["before"]) for r in rows if r["changed"]),
            "after": dict((r["interface"], r["after"]) for r in rows if r["changed"])}
    for path, text, _mode in files:
        diff["before"][path] = host.read_raw(path) or ""
        diff["after"][path] = text
    result = dict(changed=bool(actions), interfaces=rows, actions=actions, persist=persist, diff=diff)
    if module.check_mode or not actions:
        module.exit_json(**result)

    try:
        for _row, steps in plans:
            for step in steps:
                run_step(step, host, runner)
        for path, text, mode in files:
            atomic_write(host.path(path), text, mode=mode)
        if p["persist"] and replay and "enable" in " ".join(persist["changes"]):
            link = host.path(UNIT_LINK)
            if not os.path.isdir(os.path.dirname(link)):
                os.makedirs(os.path.dirname(link), 0o755)
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(UNIT_FILE, link)
    except (CommandError, OSError, IOError) as exc:
        module.fail_json(msg="applying RoCE QoS failed: %s" % exc, **result)

    # Read back: a second plan must be empty, or the device refused a setting.
    left = []
    for name, want in resolved:
        row, steps, dummy = plan_interface(module, host, runner, tools, name, want, [], quiet=True)
        left.extend("%s: %s" % (name, s) for s in row["actions"])
    if left:
        module.fail_json(msg="read back differs after applying, the device did not take: %s"
                         % "; ".join(left), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
