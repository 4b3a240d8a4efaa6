#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ebpf_readiness
short_description: Is the node ready for an eBPF datapath (Cilium) with the features the spec names
version_added: "0.4.0"
description:
  - Read only, except the one opt-in write O(persist_bpffs). Returns findings, each with its severity and fix,
    and whether each planned feature is ready; it does not fail on a finding (the audit and the role's gate do).
  - "The kernel: its release against Cilium's minimums (5.10, or 4.18 on RHEL 8.10; BPF host routing 5.10; IPv6
    BIG TCP 5.19, IPv4 BIG TCP 6.3; netkit 6.8) and its configuration (C(/proc/config.gz), else
    C(/boot/config-RELEASE)) against the options Cilium needs (C(CONFIG_BPF), C(CONFIG_BPF_SYSCALL),
    C(CONFIG_CGROUP_BPF) ...; C(CONFIG_NETKIT=y) for netkit, C(CONFIG_FIB_RULES) for native routing)."
  - C(net.core.bpf_jit_enable); bpffs mounted at C(/sys/fs/bpf) and mounted at every boot (an fstab line, a
    C(sys-fs-bpf.mount) unit, or systemd as PID 1, which mounts it itself); a cgroup2 mount.
  - The device the datapath uses (O(device), else the interface of the default route) - its MTU against the
    fabric's (O(fabric_mtu), else the MTU the plan gives that interface in O(interfaces)); for BIG TCP the largest
    packet its driver takes (C(tso_max_size)) and its C(gso_max_size).
  - Routing tables in use on the node (C(ip rule), C(ip route show table all)) that collide with the datapath's
    own (Cilium - 200, 202, 2004, 2005).
requirements:
  - "Python 3 on the node (standard library only)"
  - "ip from iproute2 (ip -j) for the routing-table and device checks"
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: The same findings; with O(persist_bpffs) the fstab line and mount it would add.
  diff_mode:
    support: full
    description: The fstab change of O(persist_bpffs).
  platform:
    support: full
    platforms: posix
    description: Linux procfs, C(ip) (iproute2).
options:
  datapath:
    description: The eBPF datapath.
    type: str
    choices: [cilium]
    default: cilium
  features:
    description: The datapath features to check.
    type: list
    elements: str
    choices: [native-routing, bpf-host-routing, big-tcp, netkit]
    default: []
  ip_families:
    description: The address families BIG TCP is enabled for (IPv4 needs kernel 6.3, IPv6 5.19).
    type: list
    elements: str
    choices: [ipv4, ipv6]
    default: [ipv4]
  device:
    description: The interface the datapath uses; default the interface of the default route (what Cilium picks).
    type: str
  fabric:
    description: The fabric the datapath runs on (for messages).
    type: str
  fabric_mtu:
    description: The MTU the device must carry; default the MTU O(interfaces) gives the device.
    type: int
  interfaces:
    description: The plan's interfaces (C(name), C(fabric), C(mtu)), to find the device's fabric and MTU.
    type: list
    elements: dict
    default: []
  route_tables:
    description: The routing table ids the datapath uses itself; default the datapath's (Cilium - 200, 202, 2004, 2005).
    type: list
    elements: int
  kernel_config:
    description: The kernel configuration to read instead of C(/proc/config.gz) and C(/boot/config-RELEASE).
    type: path
  persist_bpffs:
    description:
      - Opt-in - add C(bpffs /sys/fs/bpf bpf rw,nosuid,nodev,noexec,relatime,mode=700 0 0) to O(fstab) where no line
        mounts bpffs there, and mount it now where it is not mounted.
    type: bool
    default: false
  fstab:
    description: The fstab to read and, with O(persist_bpffs), to write.
    type: path
    default: /etc/fstab
extends_documentation_fragment:
  - aiinfra.datapath.node
notes:
  - Cilium's requirements are taken from its documentation (Documentation/operations/system_requirements.rst and
    performance/tuning.rst of cilium/cilium) and its routing-table constants (pkg/datapath/linux/linux_defaults).
  - C(nfd_labels) publishes the result as node labels (C(aiinfra.io/ebpf-ready), C(aiinfra.io/ebpf-netkit), ...),
    computed by this module's checks, so that workloads select ready nodes.
seealso:
  - module: aiinfra.datapath.nfd_labels
  - module: aiinfra.datapath.link_mtu
"""

EXAMPLES = r"""
- name: Ready for Cilium with netkit and BIG TCP on the rdma fabric?
  aiinfra.datapath.ebpf_readiness:
    features: [native-routing, bpf-host-routing, big-tcp, netkit]
    fabric: rdma
    fabric_mtu: 9000
  register: ebpf

- name: Also mount bpffs at /sys/fs/bpf, now and at every boot
  aiinfra.datapath.ebpf_readiness:
    persist_bpffs: true
  become: true
"""

RETURN = r"""
ready:
  description: No error finding.
  returned: always
  type: bool
features:
  description: Per planned feature whether it is ready (no error finding names it or the base).
  returned: always
  type: dict
  sample: {bpf-host-routing: true, netkit: false}
findings:
  description:
    - Every problem found, each with C(check), C(feature) (null - the base), C(severity), C(message) and C(fix).
  returned: always
  type: list
  elements: dict
  sample:
    - check: kernel_config
      feature: netkit
      severity: error
      message: "netkit needs CONFIG_NETKIT=y; /proc/config.gz has CONFIG_NETKIT=n"
      fix: "use a kernel built with CONFIG_NETKIT=y, or leave netkit out of ebpf.features"
kernel:
  description: The running kernel's release.
  returned: always
  type: str
kernel_config:
  description: The configuration file read (null - none was readable).
  returned: always
  type: str
bpffs:
  description: Whether bpffs is mounted at /sys/fs/bpf and mounted at every boot.
  returned: always
  type: dict
device:
  description: The device checked, its MTU, the fabric and the MTU it must carry.
  returned: always
  type: dict
counts:
  description: How many findings of each severity.
  returned: always
  type: dict
  sample: {error: 1, warning: 0, info: 0}
reboot_required:
  description: Always false.
  returned: always
  type: bool
actions:
  description: The fstab line and the mount of O(persist_bpffs) (empty otherwise).
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._ebpf_readiness import EbpfReadiness


def main():
    module_main(EbpfReadiness)


if __name__ == "__main__":
    main()
