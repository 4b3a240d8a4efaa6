#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: metrics_textfile
short_description: Write node metrics for node_exporter's textfile collector, one file per source
version_added: "0.4.0"
requirements:
  - "Python 3 on the node (standard library only)"
  - "node_exporter with its textfile collector reads the files (not needed to write them)"
description:
  - Writes O(directory)/C(aiinfra_datapath_<source>.prom) in the Prometheus text exposition format
    (version 0.0.4) - a C(HELP) and a C(TYPE) line per metric family, then its samples - for
    node_exporter's textfile collector (C(--collector.textfile.directory)) to expose.
  - One file per O(source) (C(site), C(audit), C(measure), C(model_cache)), so that the playbooks
    never overwrite each other's figures. Each metric name belongs to one source only
    (node_exporter refuses a name that two files give with different help).
  - The file is written atomically (a dot-file ending in C(.tmp) in the same directory, then
    rename; the collector reads only C(*.prom)) with mode 0644, and only when its content changes.
  - Names are checked before anything is written - the C(aiinfra_datapath_) prefix, the metric and
    label name syntax, counters ending in C(_total), one family per name, one sample per label set,
    numeric values - and every error names the family and sample. Label values are escaped
    (backslash, double quote, line feed), as are help texts. No sample carries a timestamp
    (node_exporter refuses them in textfiles).
  - The metric families come from the controller; the playbooks build them with the
    C(aiinfra.datapath.datapath_metrics) filter from what they already collected. docs/telemetry.md
    lists every metric, its meaning and source.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Reports the file it would write and the diff; writes nothing.
  diff_mode:
    support: full
    description: The file's content before and after (the heartbeat line included).
  platform:
    support: full
    platforms: posix
    description: Any POSIX node; node_exporter's textfile collector reads the files.
options:
  source:
    description:
      - What the figures come from; names the file C(aiinfra_datapath_<source>.prom). Lowercase
        letters, digits and C(_).
    type: str
    required: true
  metrics:
    description:
      - The metric families, in the order they are written.
      - Each is a dict - C(name) (starting with C(aiinfra_datapath_), base units in the name),
        C(help) (one line), C(type) (V(gauge), the default, V(counter) or V(untyped)) and
        C(samples), a list of C({labels, value}). A sample whose C(value) is V(null) (a figure
        not measured) is left out, and so is a family left without samples. A label whose value
        is V(null) is left out of that sample.
    type: list
    elements: dict
    default: []
  directory:
    description:
      - The textfile collector's directory. Created (0755) when missing.
      - Debian's prometheus-node-exporter package reads C(/var/lib/prometheus/node-exporter) by
        default; point O(directory) there, or its C(--collector.textfile.directory) here.
    type: path
    default: /var/lib/node_exporter/textfile_collector
  heartbeat:
    description:
      - Name of a gauge the module sets to the time of the run (Unix seconds), for an alert on a
        stale run.
      - The heartbeat alone is not a change - when only its value differs, a real run rewrites the
        file with the new time and reports C(changed=false), so that a second run stays idempotent.
    type: str
  filesystems:
    description:
      - Model cache filesystems measured on the node when the file is written (after O(metrics))
        - C(aiinfra_datapath_cache_filesystem_mounted), C(aiinfra_datapath_cache_filesystem_size_bytes),
        C(aiinfra_datapath_cache_filesystem_free_bytes) (statvfs C(f_bavail), what a model
        download can use) and C(aiinfra_datapath_cache_reserve_bytes), each labelled C(mountpoint).
      - A path that is not a mount point gets C(mounted 0) and no size (the figures would be the
        root filesystem's).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The cache's mount point.
        type: path
        required: true
      reserve_bytes:
        description: The free bytes the cache keeps (left out when V(null)).
        type: int
  state:
    description: V(absent) removes the source's file.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - aiinfra.datapath.node
notes:
  - Values are the figures of the run that wrote the file. node_exporter exposes the file's
    modification time as C(node_textfile_mtime_seconds) and C(node_textfile_scrape_error) when a
    file cannot be parsed.
seealso:
  - name: node_exporter textfile collector
    description: Where the files go and how they are read.
    link: https://github.com/prometheus/node_exporter#textfile-collector
  - name: Prometheus exposition formats
    description: The text format written here.
    link: https://prometheus.io/docs/instrumenting/exposition_formats/
  - name: Metric and label naming
    description: The conventions the names follow (prefix, base units, C(_info)).
    link: https://prometheus.io/docs/practices/naming/
"""

EXAMPLES = r"""
- name: Converge figures of this node
  aiinfra.datapath.metrics_textfile:
    source: site
    heartbeat: aiinfra_datapath_converge_last_run_timestamp_seconds
    metrics:
      - name: aiinfra_datapath_reboot_required
        help: 1 when a change of the last converge takes effect only after a reboot.
        samples: [{value: 0}]
      - name: aiinfra_datapath_converge_capability_failed
        help: 1 when the capability failed in the last converge.
        samples:
          - {labels: {capability: sysctl_profile}, value: 0}
          - {labels: {capability: hugepages}, value: 1}

- name: Figures built from the audit by the collection's filter
  aiinfra.datapath.metrics_textfile:
    source: audit
    directory: /var/lib/prometheus/node-exporter
    metrics: "{{ hostvars[inventory_hostname] | aiinfra.datapath.datapath_metrics('audit') }}"

- name: Remove the measure figures
  aiinfra.datapath.metrics_textfile:
    source: measure
    state: absent
"""

RETURN = r"""
path:
  description: The file written (or that would be written, or removed).
  returned: always
  type: str
  sample: /var/lib/node_exporter/textfile_collector/aiinfra_datapath_site.prom
content:
  description: The file's content (null with O(state=absent)).
  returned: always
  type: str
  sample: |
    # Written by aiinfra.datapath (metrics_textfile, source site). Do not edit.
    # HELP aiinfra_datapath_reboot_required 1 when a change of the last converge takes effect only after a reboot.
    # TYPE aiinfra_datapath_reboot_required gauge
    aiinfra_datapath_reboot_required 0
families:
  description: Metric families written (families without samples are left out).
  returned: always
  type: int
  sample: 7
samples:
  description: Samples written.
  returned: always
  type: int
  sample: 31
actions:
  description:
    - What the module did, or would do in check mode - V(directory) when O(directory) is created,
      V(file) when the file is written or removed (C(before) and C(after) are its content).
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive) (data is lost),
      C(reboot) (takes effect at the next boot) and C(text) (the line a person reads); see docs/architecture.md.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: file, target: /var/lib/node_exporter/textfile_collector/aiinfra_datapath_site.prom, before: null,
       after: "# Written by aiinfra.datapath ...", destructive: false, reboot: false,
       text: "write /var/lib/node_exporter/textfile_collector/aiinfra_datapath_site.prom"}
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._metrics_textfile import MetricsTextfile


def main():
    module_main(MetricsTextfile)


if __name__ == "__main__":
    main()
