#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

# The work is done by the action plugin plugins/action/datapath_apply.py on the controller;
# this file holds its documentation (as ansible.builtin.debug does).

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: datapath_apply
short_description: Apply a node's whole data path in one task (facts, plan, every capability module)
version_added: "0.1.0"
requirements:
  - "On the node: Python 3 (standard library only), and the tools of the capabilities it runs (see each
    capability's module)"
  - "On the controller: pydantic and ruamel.yaml (requirements.txt)"
description:
  - The engine of the R(aiinfra.datapath.datapath role,ansible_collections.aiinfra.datapath.datapath_role)
    and of C(playbooks/site.yml). One task per host does what the capability roles would do in
    about twenty tasks, with the same modules and the same variables.
  - It validates O(spec) before reading or changing anything on the node (the first host of
    the play lists every error, the others point there), reads the memory and NUMA layout as
    M(aiinfra.datapath.datapath_facts) does (one shell command, no Python process), computes
    the host's plan as the C(aiinfra.datapath.node_plan) filter does, then calls each selected
    capability's module once, in dependency order, all in one Python process on the node
    (M(aiinfra.datapath.datapath_run)) - M(aiinfra.datapath.sysctl_profile),
    M(aiinfra.datapath.hugepages), M(aiinfra.datapath.kernel_cmdline),
    M(aiinfra.datapath.link_mtu), M(aiinfra.datapath.rail_routing), M(aiinfra.datapath.roce_qos),
    M(aiinfra.datapath.nic_firmware), M(aiinfra.datapath.nic_affinity), M(aiinfra.datapath.ebpf_readiness),
    M(aiinfra.datapath.nvme_layout), M(aiinfra.datapath.nfd_labels). It stops at the first
    capability that fails.
  - Between runs the controller keeps each host's plan (and the payload sent to the node) under
    C($AIINFRA_DATAPATH_CACHE), default C(~/.cache/aiinfra-datapath); C(off) turns it off. A run
    whose spec, groups and variables are those of the kept plan uses it without validating the
    spec again, and instead of reading the memory and NUMA layout first it lets the node check
    the facts the plan assumed before its first call (anything changed - nothing runs, the plan
    is made again).
  - The module arguments are built by the same function the capability roles call through the
    C(aiinfra.datapath.capability_args) filter, in C(plugins/plugin_utils/capabilities.py).
    Precedence - the role variable C(<capability>_<option>) when set, then the host's plan part,
    then the role's default. A variable that tunes a role (for example C(link_mtu_persist) or
    C(nvme_layout_wipe_serials) in group_vars) tunes this task the same way. The variable names
    before 0.3.0 (C(sysctl_*), C(nvme_cache_*), C(k8s_node_*)) still work, with a deprecation
    warning.
  - Each call's arguments are validated on the node against the module's own argument spec,
    and each capability runs through the same runner as its module (lock, check mode, diff).
  - It also does what the roles do around their module call - the initramfs note after an md
    array was recorded, the kubelet restart after HugePage pools changed (opt-in,
    C(hugepages_restart_kubelet) / C(nfd_labels_restart_kubelet); read from the structured
    flags C(pools_changed) and C(hugepages_changed)) - and returns each host's out-of-policy
    NICs in RV(firmware_violations), and its NICs whose firmware settings did not take effect after a
    reboot in RV(nic_config_violations), so that the play can fail once for every host.
  - Tags select capabilities inside the task, with Ansible's rules - C(--tags kernel),
    C(--tags sysctl_profile,link_mtu), C(--skip-tags storage). Each capability answers to its
    name, its group tag (C(kernel), C(network), C(storage), C(k8s)) and its names before 0.3.0
    (C(sysctl), C(mtu), C(qos), C(firmware), C(nvme_cache), C(k8s_node)). Tag the task itself
    V(always).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  action:
    support: full
    description: Runs on the controller and calls the capability modules on the host.
  check_mode:
    support: full
    description: Every module runs in check mode; nothing changes.
  diff_mode:
    support: full
    description: The diffs of every capability module, in order.
  facts:
    support: full
    description: Sets C(datapath_facts), C(datapath_plan) and C(datapath_summary).
  platform:
    support: full
    platforms: posix
    description: Linux nodes; the controller needs pydantic 2 (requirements.txt).
options:
  spec:
    description:
      - The cluster spec (usually the C(datapath) variable). It is validated first, before
        anything on the node is read or changed; an invalid spec fails every host, and the
        first host of the play lists every error.
      - One of O(spec) and O(spec_var) is required; they are mutually exclusive.
    type: dict
  spec_var:
    description:
      - The name of the host variable that holds the cluster spec, read and templated by the
        action instead of passed as O(spec). The role C(aiinfra.datapath.datapath) passes
        V(datapath_spec).
      - Prefer it on large inventories. Ansible sends each host's task arguments back to its main
        process with the host's result, so a spec passed as O(spec) travels back once per host; on
        a 64-node lab that cost two thirds of the main process's CPU in a no-change run of
        C(site.yml) (4.9 against 1.6 s) and 3 s of its 16 s.
    type: str
  capabilities:
    description:
      - The capabilities to apply; they always run in the order of the default.
      - C(sysctl), C(nvme_cache) and C(k8s_node) are the deprecated names of C(sysctl_profile),
        C(nvme_layout) and C(nfd_labels).
    type: list
    elements: str
    choices: [sysctl_profile, hugepages, kernel_cmdline, tuned_profile, link_mtu, rail_routing, roce_qos, nic_firmware,
              nic_config, nic_affinity, ebpf_readiness, nvme_layout, nfd_labels, sysctl, nvme_cache, k8s_node]
    default: [sysctl_profile, hugepages, kernel_cmdline, tuned_profile, link_mtu, rail_routing, roce_qos, nic_firmware,
              nic_config, nic_affinity, ebpf_readiness, nvme_layout, nfd_labels]
  metrics:
    description:
      - Also write the converge metrics (C(aiinfra_datapath_site.prom), the families of
        M(aiinfra.datapath.metrics_textfile) with source C(site)) on the node, at the end of the
        same module call, instead of in a task of their own. C(playbooks/site.yml) sets it and runs
        its own metrics task only where the result lacks C(metrics_written=true) (a spec error,
        nothing to run, a failed batch or kubelet restart).
      - Omitted or V(null) - no metrics are written.
    type: dict
    suboptions:
      directory:
        description:
          - The textfile collector's directory (the default of M(aiinfra.datapath.metrics_textfile) when omitted).
        type: path
seealso:
  - module: aiinfra.datapath.datapath_facts
  - module: aiinfra.datapath.sysctl_profile
  - module: aiinfra.datapath.nvme_layout
"""

EXAMPLES = r"""
- name: Apply the whole data path (what the datapath role does)
  aiinfra.datapath.datapath_apply:
    spec: "{{ datapath }}"
  register: datapath_apply
  tags: [always]

- name: Only the kernel and memory capabilities
  aiinfra.datapath.datapath_apply:
    spec: "{{ datapath }}"
    capabilities: [sysctl, hugepages, kernel_cmdline]

- name: The spec read from a host variable (on large inventories; what the datapath role does)
  aiinfra.datapath.datapath_apply:
    spec_var: datapath
"""

RETURN = r"""
metrics_written:
  description: The node wrote (in check mode - checked) the converge metrics in the same call (O(metrics)).
  type: bool
  returned: success
capabilities:
  description: The capabilities selected by O(capabilities) and the run's tags, in order.
  type: list
  elements: str
  returned: success
  sample: [sysctl_profile, hugepages, kernel_cmdline, link_mtu, roce_qos, nic_firmware, nic_config, nvme_layout,
           nfd_labels]
results:
  description:
    - Per capability, the result of its module (as its role registers it, for example
      C(sysctl_profile_result)); V({}) for a capability not selected, C(skipped=true) for one
      with nothing planned on this host. C(kubelet_restart) appears when kubelet was restarted.
  type: dict
  returned: always
seconds:
  description: Wall-clock seconds of each capability's module call.
  type: dict
  returned: success
  sample: {sysctl_profile: 0.031, link_mtu: 0.022}
phases:
  description:
    - Seconds of each phase on the controller - C(facts) (reading them, or taking those of a kept
      plan), C(plan) (the plan and every capability's module arguments), C(node) (the module call).
  type: dict
  returned: success
  sample: {facts: 0.06, plan: 0.02, node: 1.9}
spec_errors:
  description: How many errors the spec has, when it is invalid (nothing was read or changed).
  type: int
  returned: failure
firmware_violations:
  description:
    - This host's NICs out of firmware policy (as the C(aiinfra.datapath.firmware_violations)
      filter lists them), when C(nic_firmware_fail) is true.
  type: list
  elements: dict
  returned: success
nic_config_violations:
  description:
    - This host's NICs whose firmware settings were set before a reboot and are still not Current after it
      (C(nvconfig-not-applied-after-reboot), as the C(aiinfra.datapath.nic_config_violations) filter lists
      them), when C(nic_config_fail_not_applied) is true.
  type: list
  elements: dict
  returned: success
ansible_facts:
  description: Facts set for the host.
  type: dict
  returned: success
  contains:
    datapath_facts:
      description: The memory section of M(aiinfra.datapath.datapath_facts) (C(memory_bytes), C(numa_nodes)).
      type: dict
    datapath_plan:
      description: The host's plan (docs/plan.md).
      type: dict
    datapath_summary:
      description: What changed, what needs a reboot and what is not supported on this host.
      type: dict
      sample:
        changed: [sysctl_profile, link_mtu]
        failed: []
        reboot_required: false
        reboot_reasons: []
        unsupported: ["roce_qos ens1f0np0: no DCB support (veth)"]
        noncompliant_firmware: []
"""
