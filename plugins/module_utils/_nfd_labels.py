# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backend of ``nfd_labels``: node-feature-discovery labels from the plan and live facts.

``read()`` collects the facts (cache mount and size, HugePage pools, live MTU per fabric and,
with ``topology``, ``node_topology``'s read of the GPUs and NICs) below a configurable root,
``plan()`` turns plan labels plus facts into the features file content (and, with ``nccl_env``,
the NCCL hints file), ``apply()`` writes it atomically (dot-file in the same directory, then
rename: NFD skips dot-files, so it never reads a half-written file).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import (
    Capability,
    apply_file,
    file_action,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._ebpf_readiness import EbpfReadiness
from ansible_collections.aiinfra.datapath.plugins.module_utils._ebpf_readiness import labels as ebpf_labels
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._nfd_rules import (
    NFD_MAX_FILE_BYTES,
    label_key_error,
    namespace_error,
    nfd_label_error,
    parse_features_file,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology import NodeTopology
from ansible_collections.aiinfra.datapath.plugins.module_utils._node_topology_outputs import (
    LABEL_PREFIX,
    nccl_env,
    topology_labels,
)

DEFAULT_FEATURES_FILE = "/etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath"
HEADER = "# Written by aiinfra.datapath (nfd_labels). Do not edit: changes are overwritten.\n"
HUGEPAGES_RECORD = "# hugepages:"

# Decimal units for the size class: disks are sold in them (3.84 TB -> "4T").
_SIZE_UNITS = (("P", 10 ** 15), ("T", 10 ** 12), ("G", 10 ** 9), ("M", 10 ** 6))


class LabelError(CapabilityError):
    """A label or a features file that node-feature-discovery would not accept."""


def label_text(value):
    """Plan values may arrive as YAML booleans or numbers; labels are strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def size_class(size_bytes):
    """Round a size to the nearest whole decimal unit: 3.84e12 -> ``4T``, 960e9 -> ``960G``."""
    for unit, factor in _SIZE_UNITS:
        if size_bytes >= factor:
            return "%d%s" % (int(round(float(size_bytes) / factor)), unit)
    return "%dK" % max(1, int(round(size_bytes / 1000.0)))


def page_size_name(kib):
    """HugePage size as Kubernetes names the resource: 2048 -> ``2Mi``, 1048576 -> ``1Gi``."""
    if kib % (1024 * 1024) == 0:
        return "%dGi" % (kib // (1024 * 1024))
    if kib % 1024 == 0:
        return "%dMi" % (kib // 1024)
    return "%dKi" % kib


def parse_mountinfo(text):
    """``/proc/self/mountinfo`` -> {mount point: source}."""
    mounts = {}
    for line in (text or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and len(tail) >= 2:
            target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            mounts[target] = tail[1]
    return mounts


def hugepages_record(pools):
    return "%s %s" % (HUGEPAGES_RECORD, " ".join("%s=%d" % (k, pools[k]) for k in sorted(pools)) or "none")


def recorded_hugepages(content):
    for line in (content or "").splitlines():
        if line.startswith(HUGEPAGES_RECORD):
            return line
    return None


class NfdLabels(Capability):
    """One features file: read the facts, plan the content, write it."""

    name = "nfd_labels"

    @classmethod
    def options(cls):
        return dict(
            labels=dict(type="dict", default={}),
            cache_mount=dict(type="path"),
            hugepages=dict(type="bool", default=True),
            interfaces=dict(type="list", elements="dict", default=[]),
            qos=dict(type="list", elements="dict", default=[]),
            roce_ready=dict(type="dict", default={}),
            prefix=dict(type="str", default="aiinfra.io"),
            extra_label_ns=dict(type="list", elements="str", default=[]),
            path=dict(type="path", default=DEFAULT_FEATURES_FILE),
            topology=dict(type="bool", default=False),
            nccl_env=dict(type="path"),
            ebpf=dict(type="dict"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        )

    def validate(self):
        if not self.params["path"].startswith("/"):
            raise LabelError("nfd_labels: path must be absolute, got %r" % self.params["path"])
        nccl = self.params.get("nccl_env")
        if nccl and not nccl.startswith("/"):
            raise LabelError("nfd_labels: nccl_env must be absolute, got %r" % nccl)
        if nccl and not self.params.get("topology"):
            raise LabelError("nfd_labels: nccl_env needs topology: true (the hints come from the node's topology)")
        self.extra_label_ns = list(self.params.get("extra_label_ns") or [])
        for namespace in self.extra_label_ns:
            error = namespace_error(namespace)
            if error:
                raise LabelError("nfd_labels: " + error)
        prefix = self.params["prefix"]
        if label_key_error(prefix + "/x") or "/" in prefix:
            raise LabelError("nfd_labels: prefix %r is not a DNS subdomain (e.g. aiinfra.io)" % prefix)
        error = nfd_label_error(prefix + "/x", "", self.extra_label_ns)
        if error:
            raise LabelError("nfd_labels: prefix %r: %s" % (prefix, error))

    # ------------------------------------------------------------------ facts
    def read(self):
        nccl = self.params.get("nccl_env")
        return dict(file=self.root.read_raw(self.params["path"]), cache=self._cache(),
                    hugepages=self._hugepages(), fabrics=self._fabrics(), topology=self._topology(),
                    nccl_file=self.root.read_raw(nccl) if nccl else None, ebpf=self._ebpf())

    def _ebpf(self):
        """ebpf_readiness's checks of the plan's ebpf section (the same engine): ``{datapath, features,
        findings}``, or None without ``ebpf``."""
        wanted = self.params.get("ebpf")
        if not wanted:
            return None
        params = dict((key, spec.get("default")) for key, spec in EbpfReadiness.options().items())
        params.update((key, value) for key, value in wanted.items() if key in params and value is not None)
        params.update(persist_bpffs=False, root=self.params.get("root") or "/")
        checker = EbpfReadiness(params, self.node)
        findings = checker.evaluate(checker.read())
        return {"datapath": params["datapath"], "features": list(params["features"] or []), "findings": findings}

    def _topology(self):
        """``node_topology``'s read (None without ``topology``); what it could not read stays unknown."""
        if not self.params.get("topology"):
            return None
        return NodeTopology({"lspci": True, "nvidia_smi": True}, self.node).read()["topology"]

    def _cache(self):
        path = self.params["cache_mount"]
        if not path:
            return None
        path = path.rstrip("/") or "/"
        mounts = parse_mountinfo(self.root.read_raw("/proc/self/mountinfo"))
        mounted = path in mounts
        size = None
        if mounted:
            st = os.statvfs(self.root.path(path))
            size = st.f_blocks * st.f_frsize
        return dict(path=path, mounted=mounted, source=mounts.get(path), size_bytes=size,
                    size_class=size_class(size) if size else None)

    def _hugepages(self):
        if not self.params["hugepages"]:
            return {}
        pools = {}
        base = "/sys/kernel/mm/hugepages"
        for entry in self.root.listdir(base):
            match = re.match(r"^hugepages-(\d+)kB\Z", entry)
            if not match:
                continue
            count = self.root.read("%s/%s/nr_hugepages" % (base, entry), default="0")
            pools[page_size_name(int(match.group(1)))] = int(count or 0)
        return pools

    def _fabrics(self):
        roce = set(q.get("fabric") for q in self.params["qos"] if q.get("fabric"))
        ready = self.params["roce_ready"] or {}
        fabrics = {}
        for iface in self.params["interfaces"]:
            name = iface.get("fabric")
            if not name:
                continue
            fabric = fabrics.setdefault(name, dict(mtu=None, interfaces=[], roce=name in roce,
                                                   roce_ready=None))
            mtu = iface.get("mtu")
            live = None
            if iface.get("name"):
                fabric["interfaces"].append(iface["name"])
                live = self.root.read("/sys/class/net/%s/mtu" % iface["name"], default="")
            # The live MTU when the interface is there (what the node really carries), else
            # the plan's; the smallest across the fabric's interfaces is what a job can use.
            value = int(live) if live else (int(mtu) if mtu is not None else None)
            if value is not None and (fabric["mtu"] is None or value < fabric["mtu"]):
                fabric["mtu"] = value
        for name in roce:
            fabrics.setdefault(name, dict(mtu=None, interfaces=[], roce=True, roce_ready=None))
        for name, value in ready.items():
            if name not in fabrics:
                self.warn("roce_ready names fabric %r that has no interface on this node" % name)
                continue
            fabrics[name]["roce_ready"] = bool(value)
        return fabrics

    # ------------------------------------------------------------------ plan
    def plan(self, state):
        self.nccl_text = None
        errors = []
        labels = {}
        for key, value in sorted((self.params["labels"] or {}).items()):
            labels[str(key)] = label_text(value)
        for key, value in sorted(derived_labels(self.params["prefix"], state).items()):
            if key in labels and labels[key] != value:
                self.warn("label %s: the plan says %r, the node says %r; using the node's"
                          % (key, labels[key], value))
            labels[key] = value
        for key, value in sorted(labels.items()):
            error = nfd_label_error(key, value, self.extra_label_ns)
            if error:
                errors.append(error)
        if errors:
            raise LabelError("nfd_labels: nothing was written: %s" % "; ".join(errors), problems=errors)
        self.labels = labels
        lines = [HEADER]
        if self.params["hugepages"]:
            lines.append(hugepages_record(state["hugepages"]) + "\n")
        for key in sorted(labels):
            lines.append("%s=%s\n" % (key, labels[key]))
        after = "".join(lines) if self.params["state"] == "present" else None
        content_size = len((after or "").encode("utf-8", "surrogateescape"))
        if content_size > NFD_MAX_FILE_BYTES:
            raise LabelError("nfd_labels: features file would be %d bytes; node-feature-discovery "
                             "ignores files over 64 kB" % content_size)
        if after is not None:
            # read back the way NFD's local source reads it: the same labels and nothing else
            read_back, problems = parse_features_file(after)
            if problems or read_back != labels:
                raise LabelError("nfd_labels: the features file would not read back as written (%s); "
                                 "nothing was written" % "; ".join(problems or ["labels differ"]))
        self.after = after
        actions = []
        if after != state["file"]:
            actions.append(file_action(self.params["path"], state["file"], after, mode=0o644))
        nccl = self.params.get("nccl_env")
        if nccl:
            # no GPU with an RDMA NIC (or state absent): no hints, an earlier file goes
            hints = nccl_env(state["topology"]) if after is not None and state["topology"] else None
            self.nccl_text = hints
            if hints != state["nccl_file"]:
                actions.append(file_action(nccl, state["nccl_file"], hints, mode=0o644))
        return actions

    def apply(self, state, actions):
        for action in actions:
            apply_file(self.root, action)

    def hugepages_changed(self, state):
        """True when the HugePage pools differ from the ones recorded in the previous file:
        kubelet reads HugePage capacity only at start (kubernetes#81774)."""
        if not self.params["hugepages"] or self.after is None:
            return False
        previous = recorded_hugepages(state["file"])
        if previous is None:
            return any(count > 0 for count in state["hugepages"].values())
        return previous != hugepages_record(state["hugepages"])

    def result(self, state, actions):
        return dict(labels=self.labels, path=self.params["path"], content=self.after,
                    cache=state["cache"], hugepages=state["hugepages"], fabrics=state["fabrics"],
                    hugepages_changed=self.hugepages_changed(state),
                    nccl_env=self.nccl_text)


def derived_labels(prefix, facts):
    """The labels the node's own state gives (cache, HugePages, fabric MTUs, RoCE readiness and,
    when the topology was read, GPU count, GPU to NIC affinity and GPUDirect readiness)."""
    out = {}
    for key, value in topology_labels(facts.get("topology") or {}).items():
        out["%s/%s" % (prefix, key[len(LABEL_PREFIX):])] = value
    cache = facts["cache"]
    if cache is not None:
        out["%s/nvme-cache" % prefix] = "true" if cache["mounted"] else "false"
        if cache["mounted"]:
            out["%s/nvme-cache-size" % prefix] = cache["size_class"]
    for size, count in sorted(facts["hugepages"].items()):
        if count > 0:
            out["%s/hugepages-%s" % (prefix, size)] = "true"
    roce_states = []
    for name, fabric in sorted(facts["fabrics"].items()):
        if fabric["mtu"] is not None:
            out["%s/fabric-%s-mtu" % (prefix, name)] = str(fabric["mtu"])
        if fabric["roce"] and fabric["roce_ready"] is not None:
            out["%s/fabric-%s-roce-ready" % (prefix, name)] = "true" if fabric["roce_ready"] else "false"
            roce_states.append(fabric["roce_ready"])
    if roce_states:
        out["%s/roce-ready" % prefix] = "true" if all(roce_states) else "false"
    ebpf = facts.get("ebpf")
    if ebpf:
        out.update(ebpf_labels(prefix, ebpf["datapath"], ebpf["features"], ebpf["findings"]))
    return out
