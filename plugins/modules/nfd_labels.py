# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nfd_labels
short_description: Write node-feature-discovery labels for the node's data path (features.d)
version_added: 0.1.0
requirements:
  - "Python 3 on the node (standard library only)"
  - "node-feature-discovery's nfd-worker reads the features file"
  - "lspci from pciutils (topology labels; optional)"
description:
  - Computes Kubernetes node labels from the plan's C(k8s.labels) plus live facts of the
    node and writes them to one node-feature-discovery (NFD) local feature file, so that
    NFD publishes them as node labels.
  - "Derived labels (with O(prefix) C(aiinfra.io)): C(aiinfra.io/nvme-cache=true|false)
    (O(cache_mount) mounted or not), C(aiinfra.io/nvme-cache-size=4T) (filesystem size
    rounded to a whole decimal unit, so a 3.84 TB disk is C(4T)),
    C(aiinfra.io/hugepages-2Mi=true) per HugePage size with a non-zero pool,
    C(aiinfra.io/fabric-<fabric>-mtu=9000) per fabric (the smallest live MTU of the
    fabric's interfaces, else the plan's), C(aiinfra.io/fabric-<fabric>-roce-ready=true|false)
    and C(aiinfra.io/roce-ready) for RoCE fabrics named in O(roce_ready)."
  - A derived label wins over a plan label of the same key (with a warning); the node's
    state is the truth.
  - Every key and value is checked before anything is written, against the Kubernetes label
    syntax (name and value at most 63 characters, prefix a DNS subdomain) and against the rules
    by which nfd-master drops labels (ported from node-feature-discovery v0.18.3,
    C(pkg/apis/nfd/validate/validate.go) and C(pkg/nfd-master/nfd-master.go)) - a key must have a
    prefix (nfd-master would publish an unprefixed C(gpu) as C(feature.node.kubernetes.io/gpu), or
    unprefixed with its C(DisableAutoPrefix) feature gate, so the module refuses it and names the
    fix), and its namespace must not be C(kubernetes.io) or a C(*.kubernetes.io) other than
    C(feature.node.kubernetes.io) and C(profile.node.kubernetes.io) and their sub-namespaces
    (nfd-master only logs C(ignoring label) for those), unless O(extra_label_ns) lists it.
  - The written file is read back the way NFD's local source reads it (comment and directive
    lines, C(key=value)); it must give exactly the labels planned.
  - The file is written atomically (a dot-file in the same directory, then rename; NFD
    skips dot-files) and only when its content differs.
  - The file also records the HugePage pools in a comment line;
    RV(hugepages_changed) says when they differ from the last run, which is when kubelet
    must be restarted to publish the new capacity (it reads it only at start,
    kubernetes#81774).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Reads the facts, computes the file and reports the change without writing.
  diff_mode:
    support: full
    description: Shows the features file before and after.
  platform:
    support: full
    platforms: posix
    description: Any Linux node; the labels are read by node-feature-discovery's local source.
options:
  labels:
    description: Static labels from the plan (C(k8s.labels)); values may be strings, numbers or booleans.
    type: dict
    default: {}
  cache_mount:
    description:
      - Mount point of the local NVMe cache (the plan's C(storage.mount.path)); null when the
        node has no cache, then no cache labels are written.
    type: path
  hugepages:
    description: Add a label per HugePage size whose pool is not empty.
    type: bool
    default: true
  interfaces:
    description:
      - The plan's C(interfaces) list, unchanged; C(fabric), C(name) and C(mtu) are used.
    type: list
    elements: dict
    default: []
  qos:
    description:
      - The plan's C(qos) list, unchanged; its C(fabric) values name the RoCE fabrics.
    type: list
    elements: dict
    default: []
  roce_ready:
    description:
      - Fabric name to readiness, from the RoCE QoS results of the run (for example true when
        C(aiinfra.datapath.roce_qos) succeeded and PFC is on). Fabrics not named get no
        readiness label.
    type: dict
    default: {}
  prefix:
    description: Label prefix of the derived labels (a DNS subdomain that nfd-master accepts).
    type: str
    default: aiinfra.io
  extra_label_ns:
    description:
      - Label namespaces that the cluster's nfd-master allows beyond its defaults - the entries of
        its C(extraLabelNs) configuration (command line C(-extra-label-ns)), for example
        C(node-role.kubernetes.io). nfd-master compares them exactly (no wildcards), and so does
        this module.
      - Labels in C(kubernetes.io) and C(*.kubernetes.io) namespaces are refused unless listed here.
      - A namespace the cluster's nfd-master denies with C(denyLabelNs), or labels its
        C(labelWhiteList) filters out, cannot be seen from the node; they are not checked.
    type: list
    elements: str
    default: []
  path:
    description: The features file. NFD reads every non-dot file in C(features.d).
    type: path
    default: /etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath
  topology:
    description:
      - Read the node's GPU, NIC and PCIe topology as M(aiinfra.datapath.node_topology) does (C(lspci)
        and C(nvidia-smi) when installed) and add, on a node with GPUs, C(PREFIX/gpu-count),
        C(PREFIX/gpu-nic-affinity) (the farthest class any GPU has to its nearest RDMA NIC, V(pix) ..
        V(sys), V(none) when a GPU has none), C(PREFIX/gpudirect-rdma) (V(true) when a peer-memory module
        is loaded, every GPU has an RDMA NIC and no ACS redirect is on those paths) and
        C(PREFIX/gpudirect-storage). A node without GPUs gets none of them.
    type: bool
    default: false
  nccl_env:
    description:
      - Also write this file of NCCL hints from the topology (needs O(topology)) - each GPU's nearest
        RDMA devices in GPU (rail) order as C(AIINFRA_GPU<i>_HCA) and C(NCCL_IB_HCA="=mlx5_0,...")
        (the leading C(=) makes NCCL match the names exactly). On a node without a GPU that has an
        RDMA NIC, and with O(state=absent), the file is removed.
      - Null writes no such file. The role passes C(/etc/aiinfra-datapath/nccl.env).
    type: path
  ebpf:
    description:
      - The eBPF datapath section of the plan (its C(ebpf_readiness) part - C(datapath), C(features),
        C(ip_families), C(device), C(fabric), C(fabric_mtu)). The node is checked as
        M(aiinfra.datapath.ebpf_readiness) checks it (the same code) and labelled C(PREFIX/ebpf-ready)
        (no error finding), C(PREFIX/ebpf-datapath) and C(PREFIX/ebpf-FEATURE) per planned feature
        (C(true) or C(false)), so that workloads select nodes ready for the datapath.
      - Null labels nothing of it. The role passes the plan's part.
    type: dict
  state:
    description: C(absent) removes the file.
    type: str
    choices: [present, absent]
    default: present
  root:
    description:
      - For tests. Directory that O(path), C(/proc), C(/sys) and O(cache_mount) resolve below.
    type: path
    default: /
notes:
  - NFD ignores feature files over 64 kB; the module refuses to write one.
  - The cluster spec (C(k8s.labels)) accepts only the keys nfd-master publishes with its default
    configuration; labels in namespaces that only your nfd-master's C(extraLabelNs) allows are set
    with O(labels) and O(extra_label_ns) (role variables C(nfd_labels_labels),
    C(nfd_labels_extra_label_ns)).
seealso:
  - name: node-feature-discovery local source
    description: The features.d file format.
    link: https://kubernetes-sigs.github.io/node-feature-discovery/stable/usage/customization-guide.html#local-feature-source
  - name: nfd-master extraLabelNs
    description: The namespaces nfd-master allows beyond its defaults.
    link: https://kubernetes-sigs.github.io/node-feature-discovery/stable/reference/master-configuration-reference.html#extralabelns
"""

EXAMPLES = r"""
- name: Publish the node's data-path labels through node-feature-discovery
  aiinfra.datapath.nfd_labels:
    labels: "{{ datapath_plan['nfd_labels']['labels'] }}"
    cache_mount: "{{ datapath_plan['nvme_layout']['mount']['path'] if datapath_plan['nvme_layout'] else none }}"
    interfaces: "{{ datapath_plan['link_mtu']['interfaces'] }}"
    qos: "{{ datapath_plan['roce_qos']['interfaces'] }}"
    roce_ready: {rail0: true, rail1: true}
  register: nfd

- name: With the GPU topology labels and the NCCL hints file
  aiinfra.datapath.nfd_labels:
    labels: {}
    topology: true
    nccl_env: /etc/aiinfra-datapath/nccl.env
  become: true

- name: Remove the labels file
  aiinfra.datapath.nfd_labels:
    state: absent
"""

RETURN = r"""
labels:
  description: The labels written (or that would be written), by key.
  returned: always
  type: dict
  sample:
    aiinfra.io/nvme-cache: "true"
    aiinfra.io/nvme-cache-size: 4T
    aiinfra.io/hugepages-2Mi: "true"
    aiinfra.io/fabric-rail0-mtu: "9000"
path:
  description: The features file.
  returned: always
  type: str
  sample: /etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath
content:
  description: The file content written (null with O(state=absent)).
  returned: always
  type: str
cache:
  description: The cache facts; null without O(cache_mount).
  returned: always
  type: dict
  sample: {path: /mnt/model-cache, mounted: true, source: /dev/nvme1n1p1, size_bytes: 3840000000000, size_class: 4T}
hugepages:
  description: HugePage pool sizes (pages) by Kubernetes size name.
  returned: always
  type: dict
  sample: {2Mi: 1024, 1Gi: 0}
fabrics:
  description: Per fabric the MTU used for the label, its interfaces, whether it is RoCE and ready.
  returned: always
  type: dict
  sample: {rail0: {mtu: 9000, interfaces: [ens1f0np0], roce: true, roce_ready: true}}
actions:
  description:
    - What the module did, or would do in check mode - one V(file) action when the features file
      O(path) is written (or removed with O(state=absent)), one for O(nccl_env) when it changes;
      C(before) and C(after) are the content.
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive) (data is lost),
      C(reboot) (takes effect at the next boot) and C(text) (the line a person reads); see docs/architecture.md.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: file, target: /etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath, before: null,
       after: "# Written by aiinfra.datapath (nfd_labels)...", destructive: false, reboot: false,
       text: "write /etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath"}
hugepages_changed:
  description: True when the HugePage pools differ from those recorded by the previous run (restart kubelet).
  returned: always
  type: bool
nccl_env:
  description: The content of O(nccl_env) written (null without O(nccl_env), or when there are no hints).
  returned: always
  type: str
  sample: "NCCL_IB_HCA=\"=mlx5_0,mlx5_1\"\nAIINFRA_GPU0_HCA=mlx5_0\nAIINFRA_GPU1_HCA=mlx5_1\n"
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._nfd_labels import NfdLabels


def main():
    module_main(NfdLabels)


if __name__ == "__main__":
    main()
