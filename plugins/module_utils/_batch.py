# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run several capabilities, one after the other, in this one Python process (stdlib only).

``aiinfra.datapath.datapath_run`` hands over a list of calls, each naming a capability and its
arguments. Every call's arguments are checked with ansible's public ``ArgumentSpecValidator``
against the capability's own ``module_spec()`` - the spec its module gives ``AnsibleModule``,
so a call is validated exactly as the module alone would validate it - and the capability
runs through the one runner of the contract (``_capability.run``) with the batch's check
mode and diff. Results are data: nothing is printed, parsed or swapped in global state.

What is saved is a new Python process per module on the node: importing and compiling
AnsiballZ's ``ansible.module_utils.basic`` costs more CPU than most of these capabilities' work.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import os
import time

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._cmdline import KernelCmdline
from ansible_collections.aiinfra.datapath.plugins.module_utils._ebpf_readiness import EbpfReadiness
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._hugepages import NODE_ROOT, HugePages, memory_facts
from ansible_collections.aiinfra.datapath.plugins.module_utils._link_mtu import LinkMtu
from ansible_collections.aiinfra.datapath.plugins.module_utils._metrics_textfile import MetricsTextfile
from ansible_collections.aiinfra.datapath.plugins.module_utils._nfd_labels import NfdLabels
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_config import NicConfig
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity import NicAffinity
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_firmware import NicFirmware
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.layout import NvmeLayout
from ansible_collections.aiinfra.datapath.plugins.module_utils._rail_routing import RailRouting
from ansible_collections.aiinfra.datapath.plugins.module_utils._roce_qos import RoceQos
from ansible_collections.aiinfra.datapath.plugins.module_utils._site_metrics import HEARTBEAT, SOURCE, site_families
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import SysctlProfile
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned_profile import TunedProfile

# The capabilities datapath_run dispatches, in the order the datapath role applies them
# (kernel and memory -> network -> storage -> Kubernetes).
BACKENDS = dict((cls.name, cls) for cls in (
    SysctlProfile, HugePages, KernelCmdline, TunedProfile, LinkMtu, RailRouting, RoceQos, NicFirmware, NicConfig,
    NicAffinity, EbpfReadiness,
    NvmeLayout, NfdLabels))


def run_call(runner, name, args, check_mode=False, diff=False, cls=None):
    """One capability with ``args``, validated as its module validates them; its result dict."""
    cls = cls or BACKENDS[name]
    checked = ArgumentSpecValidator(**cls.module_spec()).validate(args or {})
    if checked.error_messages:
        # worded as AnsibleModule words them when the module runs alone
        messages = ["Unsupported parameters: %s" % error if isinstance(error, UnsupportedError) else "%s" % error
                    for error in checked.errors]
        return dict(failed=True, changed=False, msg="%s: %s" % (name, "; ".join(messages)))
    params = checked.validated_parameters
    try:
        node = Node(runner, cls.node_root(params), check_mode, diff)
    except CapabilityError as exc:
        return dict(failed=True, changed=False, msg="%s: %s" % (name, exc.msg))
    return run(cls, params, node)


def run_calls(runner, calls, check_mode=False, diff=False, stop_on_failure=True):
    """Run ``calls`` ([{module, args}]) in order; return [{module, seconds, result}]."""
    results = []
    for call in calls:
        started = time.monotonic()
        result = run_call(runner, call["module"], call.get("args"), check_mode, diff)
        results.append({"module": call["module"], "seconds": round(time.monotonic() - started, 3),
                        "result": result})
        if stop_on_failure and result.get("failed"):
            break
    return results


def write_metrics(runner, results, options, check_mode=False):
    """After the calls: the converge metrics of these results (``_site_metrics``), written by
    metrics_textfile's capability into ``options.directory`` with the same check mode. The
    result of that call (``changed`` is the file's, not the node's data path)."""
    outcome = {"failed": any(r["result"].get("failed") for r in results),
               "results": dict((r["module"], r["result"]) for r in results)}
    args = {"source": SOURCE, "heartbeat": options.get("heartbeat") or HEARTBEAT,
            "metrics": site_families(outcome), "filesystems": []}
    if options.get("directory"):
        args["directory"] = options["directory"]
    return run_call(runner, MetricsTextfile.name, args, check_mode, False, cls=MetricsTextfile)


def batch_spec():
    """datapath_run's own argument spec."""
    return dict(
        calls=dict(type="list", elements="dict", required=True, options=dict(
            module=dict(type="str", required=True, choices=list(BACKENDS)),
            args=dict(type="dict", default={}),
        )),
        stop_on_failure=dict(type="bool", default=True),
        metrics=dict(type="dict", options=dict(
            directory=dict(type="path"),
            heartbeat=dict(type="str"),
        )),
        expect_facts=dict(type="dict"),
    )


def read_memory_facts():
    """The node facts datapath_apply plans with, read here (see _hugepages.memory_facts)."""
    try:
        with open("/proc/meminfo") as handle:
            meminfo = handle.read()
    except (IOError, OSError):
        meminfo = ""
    try:
        entries = os.listdir(NODE_ROOT)
    except OSError:
        entries = []
    return memory_facts(meminfo, entries)


def facts_differ(expected):
    """The node's facts where they are not ``expected`` (memory_bytes, numa_nodes); else None."""
    actual = read_memory_facts()
    if any(actual.get(key) != expected.get(key) for key in ("memory_bytes", "numa_nodes")):
        return actual
    return None


def batch_main(module):
    """datapath_run's main(): every call, then one result with each call's result."""
    from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import Runner

    magic = importlib.util.MAGIC_NUMBER.hex()
    if module.params.get("expect_facts") is not None:
        actual = facts_differ(module.params["expect_facts"])
        if actual is not None:  # planned for another node: run nothing, say what the node has
            module.exit_json(changed=False, results=[], facts_differ=True, datapath_facts=actual,
                             bytecode_magic=magic)
    results = run_calls(Runner(module), module.params["calls"], module.check_mode, module._diff,
                        module.params["stop_on_failure"])
    changed = any(r["result"].get("changed") for r in results)
    failed = [r for r in results if r["result"].get("failed")]
    extra = {}
    if module.params.get("metrics") is not None:
        extra["metrics"] = write_metrics(Runner(module), results, module.params["metrics"], module.check_mode)
    if failed:
        module.fail_json(msg="%s: %s" % (failed[0]["module"], failed[0]["result"].get("msg", "failed")),
                         changed=changed, results=results, **extra)
    # the payload cache of the controller compiles module_utils for nodes of its own Python
    extra["bytecode_magic"] = magic
    module.exit_json(changed=changed, results=results, **extra)
