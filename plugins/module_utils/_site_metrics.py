# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converge metrics of one node from the results of its capabilities (stdlib only).

Shared by the two places that write ``aiinfra_datapath_site.prom``: the node itself, at the end of
``datapath_run``'s batch (so that a converge needs no second module call for its metrics), and the
controller's ``datapath_metrics('site')`` filter (plugins/plugin_utils/telemetry.py), which writes
them when the batch did not run. The metrics' names, labels and help live here;
telemetry.CATALOGUE takes them from here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# the capabilities a converge reports on (tuned_profile only persists what others set)
CAPABILITIES = ("sysctl_profile", "hugepages", "kernel_cmdline", "link_mtu", "roce_qos", "nic_firmware",
                "nic_config", "nic_affinity", "ebpf_readiness", "nvme_layout", "nfd_labels")
SOURCE = "site"
HEARTBEAT = "aiinfra_datapath_converge_last_run_timestamp_seconds"

# (name, labels, help), in the order they are written; all gauges
METRICS = (
    ("aiinfra_datapath_converge_success", (),
     "1 when the last converge (site.yml) of the node succeeded, 0 when a capability or the spec failed."),
    ("aiinfra_datapath_converge_capability_failed", ("capability",),
     "1 when the capability failed in the last converge."),
    ("aiinfra_datapath_reboot_required", (),
     "1 when a change of the last converge takes effect only after a reboot (kernel arguments, boot-time HugePages, "
     "NIC firmware settings)."),
    ("aiinfra_datapath_nic_firmware_compliant", ("interface",),
     "1 when the NIC firmware meets the spec's policy, 0 when it does not (interfaces with a known version)."),
    ("aiinfra_datapath_nic_firmware_info", ("interface", "driver", "psid", "firmware_version", "status"),
     "NIC firmware of an interface and its compliance status (compliant, noncompliant, unknown); value 1."),
    ("aiinfra_datapath_nic_config_reboot_required", ("pci", "psid"),
     "Firmware (NV) settings of the NIC that wait in Next Boot for a reboot (nic_config): the number of parameters."),
    ("aiinfra_datapath_nic_config_apply_failed", ("pci", "psid"),
     "Firmware (NV) settings of the NIC still not Current after the reboot they were set for "
     "(nvconfig-not-applied-after-reboot; never rebooted for again): the number of parameters."),
    ("aiinfra_datapath_nic_affinity_compliant", ("interface",),
     "1 when every completion IRQ of a data interface runs on the CPU nic_affinity planned (NIC-local, outside "
     "the reserved and isolated CPUs), 0 when one does not."),
    ("aiinfra_datapath_nic_affinity_misplaced_ratio", ("interface",),
     "Share of a data interface's completion IRQs that run on another CPU than planned (0..1)."),
    ("aiinfra_datapath_ebpf_readiness_passed", (),
     "1 when ebpf_readiness found nothing that keeps the node from the planned eBPF datapath, 0 when it did."),
    ("aiinfra_datapath_ebpf_feature_passed", ("feature",),
     "1 when the node is ready for a planned datapath feature (native-routing, bpf-host-routing, big-tcp, "
     "netkit), 0 when not."),
)
_LABELS = dict((name, labels) for name, labels, _help in METRICS)


def _m(value):
    return value if isinstance(value, dict) else {}


def _l(value):
    return value if isinstance(value, (list, tuple)) else []


def site_families(apply_result):
    """The metric families (metrics_textfile's ``metrics``) of a ``datapath_apply`` result:
    ``{failed, results: {capability: result}}``; an empty or missing result is a failed converge."""
    samples = {}

    def add(name, value, **labels):
        if set(labels) != set(_LABELS[name]):
            raise ValueError("%s takes labels %s, got %s" % (name, _LABELS[name], tuple(labels)))
        samples.setdefault(name, []).append(
            {"labels": dict((k, "" if v is None else str(v)) for k, v in labels.items()), "value": value})

    result = _m(apply_result)
    results = _m(result.get("results"))
    add("aiinfra_datapath_converge_success", 0 if result.get("failed") or not result else 1)
    for name in CAPABILITIES:
        outcome = _m(results.get(name))
        if not outcome or outcome.get("skipped"):
            continue
        add("aiinfra_datapath_converge_capability_failed", int(bool(outcome.get("failed"))), capability=name)
    if results:
        reboot = bool(_m(results.get("kernel_cmdline")).get("reboot_required")
                      or _m(results.get("hugepages")).get("reboot_required")
                      or _m(results.get("nic_config")).get("reboot_required"))
        add("aiinfra_datapath_reboot_required", int(reboot))
    for row in _l(_m(results.get("nic_firmware")).get("compliance")):
        row = _m(row)
        interface, status = row.get("interface"), row.get("status") or "unknown"
        if status in ("compliant", "noncompliant"):
            add("aiinfra_datapath_nic_firmware_compliant", int(status == "compliant"), interface=interface)
        add("aiinfra_datapath_nic_firmware_info", 1, interface=interface, driver=row.get("driver"),
            psid=row.get("psid"), firmware_version=row.get("firmware_version"), status=status)
    nvconfig = _m(results.get("nic_config"))
    if nvconfig and not nvconfig.get("skipped") and not nvconfig.get("failed"):
        for device in _l(nvconfig.get("devices")):
            device = _m(device)
            if device.get("config") is None:
                continue
            states = [_m(p).get("state") for p in _l(device.get("params"))]
            pci, psid = device.get("pci"), device.get("psid")
            add("aiinfra_datapath_nic_config_reboot_required", sum(1 for s in states if s in ("set", "pending")),
                pci=pci, psid=psid)
            add("aiinfra_datapath_nic_config_apply_failed", sum(1 for s in states if s == "not_applied"),
                pci=pci, psid=psid)
    affinity = _m(results.get("nic_affinity"))
    if not affinity.get("skipped"):
        for row in _l(affinity.get("interfaces")):
            row = _m(row)
            irqs = [_m(item) for item in _l(row.get("irqs")) if _m(item).get("cpu") is not None]
            if not irqs:
                continue
            misplaced = len([i for i in irqs if not i.get("placed")])
            add("aiinfra_datapath_nic_affinity_compliant", int(not misplaced), interface=row.get("interface"))
            add("aiinfra_datapath_nic_affinity_misplaced_ratio", round(float(misplaced) / len(irqs), 6),
                interface=row.get("interface"))
    ebpf = _m(results.get("ebpf_readiness"))
    if "ready" in ebpf and not ebpf.get("skipped"):
        add("aiinfra_datapath_ebpf_readiness_passed", int(bool(ebpf.get("ready"))))
        for feature, ready in sorted(_m(ebpf.get("features")).items()):
            add("aiinfra_datapath_ebpf_feature_passed", int(bool(ready)), feature=feature)
    return [{"name": name, "help": help_text, "type": "gauge", "samples": samples[name]}
            for name, _labels, help_text in METRICS if name in samples]
