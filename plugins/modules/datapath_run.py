#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: datapath_run
short_description: Run several capability modules of this collection in one Python process on the node
version_added: "0.1.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "the tools of the capabilities it runs (see each capability's module)"
description:
  - The node side of M(aiinfra.datapath.datapath_apply); use that action (or the
    C(aiinfra.datapath.datapath) role), not this module, in playbooks.
  - Runs each listed capability once, in the order given, in one Python process, and returns
    each one's result. Each call's arguments are validated against that module's own argument
    spec (ansible's C(ArgumentSpecValidator)), and the capability runs through the same runner
    as its module - the same checks, node lock, check mode and diff - so it behaves exactly as
    when Ansible runs the module alone; only the start-up of a new Python process and AnsiballZ
    payload per module is saved.
  - Stops at the first module that fails (unless O(stop_on_failure=false)).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Every listed module runs in check mode.
  diff_mode:
    support: full
    description: Every listed module returns its own diff.
  platform:
    support: full
    platforms: posix
    description: Linux nodes, as the modules it runs.
options:
  calls:
    description: The module calls, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      module:
        description: The module of this collection to run.
        type: str
        required: true
        choices: [sysctl_profile, hugepages, kernel_cmdline, tuned_profile, link_mtu, rail_routing, roce_qos,
                  nic_firmware, nic_config, nic_affinity, ebpf_readiness, nvme_layout, nfd_labels]
      args:
        description: The module's arguments, as in a task.
        type: dict
        default: {}
  stop_on_failure:
    description: Run no further module after one failed.
    type: bool
    default: true
  metrics:
    description:
      - After the calls (also after a failed one), write the converge metrics of their results
        (C(aiinfra_datapath_site.prom), as M(aiinfra.datapath.metrics_textfile) writes them for
        source C(site)), in the same check mode. Omitted - none are written.
    type: dict
    suboptions:
      directory:
        description: The textfile collector's directory (metrics_textfile's default when omitted).
        type: path
      heartbeat:
        description: The heartbeat gauge (the site's by default).
        type: str
  expect_facts:
    description:
      - The node facts the calls were planned for (C(memory_bytes), C(numa_nodes), as
        RV(datapath_facts) reports them). Read first; where they differ, no module runs and the
        result says so (RV(facts_differ)), with the facts read, for the caller to plan again.
      - M(aiinfra.datapath.datapath_apply) sends them where it uses a plan kept from an earlier
        run, instead of reading the facts by a command of their own.
    type: dict
seealso:
  - module: aiinfra.datapath.datapath_apply
"""

EXAMPLES = r"""
- name: Two capability modules in one process (what aiinfra.datapath.datapath_apply does)
  aiinfra.datapath.datapath_run:
    calls:
      - module: sysctl_profile
        args:
          keys:
            net.core.rmem_max: {value: "268435456"}
      - module: nfd_labels
        args:
          labels: {aiinfra.io/role: gpu}
"""

RETURN = r"""
facts_differ:
  description: The node's facts are not O(expect_facts); no module ran and RV(results) is empty.
  type: bool
  returned: when O(expect_facts) is set and the facts differ
  sample: true
datapath_facts:
  description: The node's memory facts (C(memory_bytes), C(numa_nodes)) where RV(facts_differ).
  type: dict
  returned: when RV(facts_differ)
  sample: {"gathered": ["memory"], "memory_bytes": 68719476736, "numa_nodes": 2}
bytecode_magic:
  description:
    - The bytecode magic number of the node's Python, in hex (C(a70d0d0a) for Python 3.11).
    - The controller's payload cache (C(aiinfra.datapath.datapath_apply)) then sends the
      module_utils compiled for nodes whose Python is the controller's.
  type: str
  returned: success
  sample: a70d0d0a
metrics:
  description: The result of writing the metrics (O(metrics)), as metrics_textfile returns it.
  type: dict
  returned: when O(metrics) is set
results:
  description: One item per module run, in order.
  type: list
  elements: dict
  returned: always
  contains:
    module:
      description: The module's name.
      type: str
    seconds:
      description: Wall-clock seconds of the module's run.
      type: float
    result:
      description: The module's own result, as it returns it when run alone (without C(invocation)).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aiinfra.datapath.plugins.module_utils._batch import batch_main, batch_spec


def main():
    batch_main(AnsibleModule(argument_spec=batch_spec(), supports_check_mode=True))


if __name__ == "__main__":
    main()
