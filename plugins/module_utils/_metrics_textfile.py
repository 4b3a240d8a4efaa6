# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backend of ``metrics_textfile``: one Prometheus text-format file per source for
node_exporter's textfile collector.

The controller computes the metric families (``plugins/plugin_utils/telemetry.py``) from what
a playbook already knows; this backend checks names and values against the exposition format,
renders the file deterministically and writes it atomically (a dot-file ending in ``.tmp`` in
the same directory, then rename: the collector reads only ``*.prom``, so it never reads a
half-written file).

The optional *heartbeat* gauge carries the time of the run. It is the one value that differs
on every run, so it does not count as a change: when everything else is the same, a real run
rewrites the file with the new time and reports ``changed: false`` (a second converge stays
idempotent, and an alert on a stale run still sees each run). Check mode writes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import os
import re
import time

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import (
    Action,
    Capability,
    apply_file,
    file_action,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._nfd_labels import parse_mountinfo

DEFAULT_DIRECTORY = "/var/lib/node_exporter/textfile_collector"
PREFIX = "aiinfra_datapath_"
FILE_MODE = 0o644
TYPES = ("gauge", "counter", "untyped")
# https://prometheus.io/docs/concepts/data_model/#metric-names-and-labels
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*\Z")
_SOURCE = re.compile(r"^[a-z0-9][a-z0-9_]*\Z")
# node_exporter refuses a textfile whose sample carries a timestamp, and a family whose name a
# histogram or summary would claim needs their exposition rules; neither is offered here.
_RESERVED_SUFFIXES = ("_bucket", "_created")


class MetricsError(CapabilityError):
    """A metric family, label or value the exposition format (or node_exporter) refuses."""


def file_name(source):
    return "%s%s.prom" % (PREFIX, source)


def escape_help(text):
    """HELP text: backslash and line feed escaped (exposition format 0.0.4)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label_value(text):
    """Label value: backslash, double quote and line feed escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_value(value):
    """A sample value as the text format writes it: integers without a point, floats
    round-trip exact (``repr``), ``NaN`` / ``+Inf`` / ``-Inf`` spelt as Prometheus does."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return "%d" % value
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return "%d" % int(value)
    return repr(value)


def _number(value, where):
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            pass
    raise MetricsError("metrics_textfile: %s: value %r is not a number" % (where, value))


def label_text(value):
    """Label values arrive as YAML scalars; Prometheus labels are strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "%s" % (value,)


def normalise(families, heartbeat=None):
    """Check ``families`` and return them as ``[(name, help, type, [(labels, value)])]``.

    Samples whose value is ``None`` (a figure not measured) are left out; a family left without
    samples is left out as well (a HELP line without samples says nothing).
    """
    seen = set()
    out = []
    for index, family in enumerate(families or []):
        if not isinstance(family, dict):
            raise MetricsError("metrics_textfile: metrics[%d] must be a dict, got %r" % (index, family))
        name = family.get("name")
        where = "metrics[%d] (%s)" % (index, name)
        if not isinstance(name, str) or not _METRIC_NAME.match(name):
            raise MetricsError("metrics_textfile: %s: %r is not a Prometheus metric name "
                               "([a-zA-Z_:][a-zA-Z0-9_:]*)" % (where, name))
        if not name.startswith(PREFIX):
            raise MetricsError("metrics_textfile: %s: the name must start with %s" % (where, PREFIX))
        if name.endswith(_RESERVED_SUFFIXES):
            raise MetricsError("metrics_textfile: %s: names ending in %s belong to histograms"
                               % (where, " or ".join(_RESERVED_SUFFIXES)))
        if name in seen or name == heartbeat:
            raise MetricsError("metrics_textfile: %s: the metric is given twice (one family per name)" % where)
        seen.add(name)
        kind = family.get("type") or "gauge"
        if kind not in TYPES:
            raise MetricsError("metrics_textfile: %s: type must be one of %s, got %r" % (where, ", ".join(TYPES), kind))
        if kind == "counter" and not name.endswith("_total"):
            raise MetricsError("metrics_textfile: %s: a counter's name ends in _total" % where)
        text = family.get("help")
        if not isinstance(text, str) or not text.strip():
            raise MetricsError("metrics_textfile: %s: help is required (one line on what it measures)" % where)
        samples = []
        label_sets = set()
        if not isinstance(family.get("samples") or [], list):
            raise MetricsError("metrics_textfile: %s: samples must be a list of {labels, value}, got %r"
                               % (where, family.get("samples")))
        for number, sample in enumerate(family.get("samples") or []):
            spot = "%s samples[%d]" % (where, number)
            if not isinstance(sample, dict):
                raise MetricsError("metrics_textfile: %s must be a dict with labels and value" % spot)
            labels = sample.get("labels") or {}
            if not isinstance(labels, dict):
                raise MetricsError("metrics_textfile: %s: labels must be a dict" % spot)
            pairs = []
            for key in sorted(labels):
                if not isinstance(key, str) or not _LABEL_NAME.match(key) or key.startswith("__"):
                    raise MetricsError("metrics_textfile: %s: %r is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, "
                                       "not starting with __)" % (spot, key))
                if labels[key] is None:
                    continue
                pairs.append((key, label_text(labels[key])))
            pairs = tuple(pairs)
            if pairs in label_sets:
                raise MetricsError("metrics_textfile: %s: labels %s are given twice" % (spot, dict(pairs)))
            label_sets.add(pairs)
            value = sample.get("value")
            if value is None:
                continue
            value = _number(value, spot)
            if kind == "counter" and not isinstance(value, bool) and value < 0:
                raise MetricsError("metrics_textfile: %s: a counter is never negative" % spot)
            samples.append((pairs, value))
        if samples:
            out.append((name, " ".join(text.split()), kind, samples))
    return out


def render(source, families, heartbeat=None, now=None):
    """The file's text: a header comment, then per family HELP, TYPE and its samples."""
    lines = ["# Written by aiinfra.datapath (metrics_textfile, source %s). Do not edit." % source]
    if heartbeat:
        lines += ["# HELP %s Unix time of the last %s run that wrote this file." % (heartbeat, source),
                  "# TYPE %s gauge" % heartbeat,
                  "%s %s" % (heartbeat, format_value(now if now is not None else 0))]
    for name, text, kind, samples in families:
        lines.append("# HELP %s %s" % (name, escape_help(text)))
        lines.append("# TYPE %s %s" % (name, kind))
        for pairs, value in samples:
            labels = ",".join('%s="%s"' % (key, escape_label_value(val)) for key, val in pairs)
            lines.append("%s%s %s" % (name, "{%s}" % labels if labels else "", format_value(value)))
    return "\n".join(lines) + "\n"


def without_heartbeat(content, heartbeat):
    """``content`` with the heartbeat's sample line blanked: what decides ``changed``."""
    if content is None or not heartbeat:
        return content
    prefix = heartbeat + " "
    return "\n".join(heartbeat if line.startswith(prefix) else line for line in content.split("\n"))


# The families measured on the node itself (option ``filesystems``): read when the file is written.
FILESYSTEM_FAMILIES = (
    ("aiinfra_datapath_cache_filesystem_mounted",
     "1 when the model cache path is a mount point (its own filesystem), 0 when not."),
    ("aiinfra_datapath_cache_filesystem_size_bytes", "Size of the model cache filesystem in bytes."),
    ("aiinfra_datapath_cache_filesystem_free_bytes",
     "Bytes of the model cache filesystem available to unprivileged writers (statvfs f_bavail)."),
    ("aiinfra_datapath_cache_reserve_bytes",
     "Free bytes the model cache keeps on its filesystem (model_cache.reserve_bytes of the plan)."),
)


def filesystem_families(root, filesystems):
    """Families for ``filesystems`` (``[{path, reserve_bytes}]``), read below ``root``."""
    mounts = parse_mountinfo(root.read_raw("/proc/self/mountinfo"))
    samples = dict((name, []) for name, _help in FILESYSTEM_FAMILIES)
    for entry in filesystems:
        path = entry["path"].rstrip("/") or "/"
        labels = {"mountpoint": path}
        mounted = path in mounts
        samples["aiinfra_datapath_cache_filesystem_mounted"].append(dict(labels=labels, value=int(mounted)))
        if mounted and os.path.isdir(root.path(path)):
            st = os.statvfs(root.path(path))
            samples["aiinfra_datapath_cache_filesystem_size_bytes"].append(
                dict(labels=labels, value=st.f_blocks * st.f_frsize))
            samples["aiinfra_datapath_cache_filesystem_free_bytes"].append(
                dict(labels=labels, value=st.f_bavail * st.f_frsize))
        samples["aiinfra_datapath_cache_reserve_bytes"].append(dict(labels=labels, value=entry.get("reserve_bytes")))
    return [dict(name=name, help=text, type="gauge", samples=samples[name]) for name, text in FILESYSTEM_FAMILIES]


class MetricsTextfile(Capability):
    """One ``aiinfra_datapath_<source>.prom`` file: check, render, compare, write."""

    name = "metrics_textfile"

    @classmethod
    def options(cls):
        return dict(
            source=dict(type="str", required=True),
            metrics=dict(type="list", elements="dict", default=[]),
            directory=dict(type="path", default=DEFAULT_DIRECTORY),
            heartbeat=dict(type="str"),
            filesystems=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                reserve_bytes=dict(type="int"),
            )),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        )

    def lock_file(self):
        # Each source owns its file and writes it by rename; nothing here races with the
        # capabilities that change the node, so the node lock is not taken.
        return None

    def validate(self):
        params = self.params
        if not _SOURCE.match(params["source"] or ""):
            raise MetricsError("metrics_textfile: source %r must be lowercase letters, digits and _ "
                               "(it names the file aiinfra_datapath_<source>.prom)" % (params["source"],))
        if not (params["directory"] or "").startswith("/"):
            raise MetricsError("metrics_textfile: directory must be absolute, got %r" % (params["directory"],))
        heartbeat = params.get("heartbeat")
        if heartbeat and (not _METRIC_NAME.match(heartbeat) or not heartbeat.startswith(PREFIX)):
            raise MetricsError("metrics_textfile: heartbeat %r must be a metric name starting with %s"
                               % (heartbeat, PREFIX))
        for entry in params["filesystems"]:
            if not entry["path"].startswith("/"):
                raise MetricsError("metrics_textfile: filesystems path must be absolute, got %r" % (entry["path"],))
        names = set(f.get("name") for f in params["metrics"] or []
                    if isinstance(f, dict) and isinstance(f.get("name"), str))
        if params["filesystems"] and names & set(n for n, _help in FILESYSTEM_FAMILIES):
            raise MetricsError("metrics_textfile: metrics must not name the filesystems families (%s)"
                               % ", ".join(sorted(names & set(n for n, _help in FILESYSTEM_FAMILIES))))
        self.families = normalise(params["metrics"], heartbeat) if params["state"] == "present" else []
        self.path = "%s/%s" % (params["directory"].rstrip("/"), file_name(params["source"]))

    def read(self):
        directory = self.params["directory"]
        return dict(file=self.root.read_raw(self.path), directory=self.root.exists(directory))

    def plan(self, state):
        heartbeat = self.params.get("heartbeat")
        if self.params["state"] == "absent":
            self.content = None
            return [file_action(self.path, state["file"], None)] if state["file"] is not None else []
        if self.params["filesystems"]:
            self.families += normalise(filesystem_families(self.root, self.params["filesystems"]))
        self.content = render(self.params["source"], self.families, heartbeat, int(time.time()))
        actions = []
        if not state["directory"]:
            actions.append(Action("directory", self.params["directory"], "create %s" % self.params["directory"],
                                  after="directory", diff=False))
        if without_heartbeat(state["file"], heartbeat) != without_heartbeat(self.content, heartbeat):
            actions.append(file_action(self.path, state["file"], self.content, mode=FILE_MODE))
        return actions

    def needs_apply(self, state, actions):
        # the heartbeat alone: refresh the time without calling it a change
        return bool(actions) or (self.content is not None and state["file"] != self.content)

    def apply(self, state, actions):
        if not actions:
            apply_file(self.root, file_action(self.path, state["file"], self.content, mode=FILE_MODE))
            return
        for action in actions:
            if action.kind == "file":
                apply_file(self.root, action)
            elif action.kind == "directory":
                pass  # atomic_write creates it (0755) with the file

    def result(self, state, actions):
        return dict(path=self.path, content=self.content,
                    families=len(self.families), samples=sum(len(f[3]) for f in self.families))
