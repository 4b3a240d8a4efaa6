# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node-feature-discovery's label rules, ported (stdlib only, no other import of the collection).

One implementation for the ``nfd_labels`` module (every label it writes) and for the cluster
spec (the label keys of ``k8s.labels``; ``cluster_spec/_node.py`` loads this file the way it
loads ``_derived.py``, also for the ``datapath`` console script). :func:`nfd_label_error` says
why nfd-master would not publish a label, with the fix; :func:`parse_features_file` reads a
features.d file the way NFD's local source does.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Kubernetes label syntax (k8s.io/apimachinery/pkg/util/validation: IsQualifiedName,
# IsValidLabelValue, IsDNS1123Subdomain).
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")

# node-feature-discovery's label rules, ported from kubernetes-sigs/node-feature-discovery v0.18.3
# (the rules are the same on master as of v0.20.0-devel):
# - pkg/apis/nfd/validate/validate.go, Label(): the key must pass IsQualifiedName; an unprefixed key
#   is ErrUnprefixedKeysNotAllowed; the namespace kubernetes.io and every *.kubernetes.io is
#   ErrNSNotAllowed, except feature.node.kubernetes.io, profile.node.kubernetes.io and their
#   sub-namespaces; the value must pass IsValidLabelValue.
# - pkg/nfd-master/nfd-master.go, filterFeatureLabel(): a not-allowed (or denyLabelNs-denied)
#   namespace passes only when extraLabelNs (-extra-label-ns) lists it, compared exactly (no
#   wildcards); otherwise nfd-master logs "ignoring label" and publishes nothing for it.
#   refreshNodeFeatures()/addNsToMapKeys(): an unprefixed name is published as
#   feature.node.kubernetes.io/<name>, or as it is (unprefixed) when the DisableAutoPrefix
#   feature gate is on; the docs (usage/customization-guide.md) say unprefixed names "should not
#   be used" and that this "will change in a future version".
# - source/local/local.go, parseFeatureFile(): each line is trimmed; '#' starts a comment and
#   '# +' a directive (expiry-time, no-label, no-feature; any other is an error); "key=value",
#   a bare key means "true"; dot-files and files over 65536 bytes are skipped.
# We refuse an unprefixed key (with the fix) rather than prefix it: the label NFD publishes for it
# depends on a feature gate of the cluster and differs from the key the admin wrote.
FEATURE_LABEL_NS = "feature.node.kubernetes.io"
PROFILE_LABEL_NS = "profile.node.kubernetes.io"
NFD_DIRECTIVE_PREFIX = "# +"
NFD_DIRECTIVES = ("expiry-time", "no-label", "no-feature")
NFD_MAX_FILE_BYTES = 65536
# The fix for a namespace nfd-master allows only through its extraLabelNs; callers other than
# the module (the spec) pass their own.
EXTRA_NS_FIX = ("or, if your nfd-master lists %(ns)s in extraLabelNs (-extra-label-ns), add %(ns)s to "
                "this module's extra_label_ns (role variable nfd_labels_extra_label_ns)")


def label_key_error(key):
    """Why ``key`` is not a valid Kubernetes label key (IsQualifiedName), or None."""
    if not isinstance(key, str) or not key:
        return "empty label key"
    parts = key.split("/")
    if len(parts) > 2:
        return ("label key %r has more than one '/': write prefix/name with a DNS subdomain prefix"
                % key)
    prefix, name = (parts[0], parts[1]) if len(parts) == 2 else ("", parts[0])
    if len(parts) == 2:
        if not prefix:
            return "label key %r has an empty prefix" % key
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            return ("label key %r: prefix %r must be a lowercase DNS subdomain of at most 253 "
                    "characters" % (key, prefix))
    if not name or len(name) > 63 or not _NAME.match(name):
        return ("label key %r: name %r must be 1-63 characters [A-Za-z0-9-_.], starting and "
                "ending alphanumeric" % (key, name))
    return None


def label_value_error(key, value):
    """Why ``value`` is not a valid Kubernetes label value (IsValidLabelValue), or None."""
    if value == "":
        return None
    if not isinstance(value, str) or len(value) > 63 or not _NAME.match(value):
        return ("label %s: value %r must be at most 63 characters [A-Za-z0-9-_.], starting and "
                "ending alphanumeric" % (key, value))
    return None


def namespace_error(namespace):
    """Why ``namespace`` cannot be an extra label namespace (a DNS subdomain), or None."""
    if not isinstance(namespace, str) or not namespace or len(namespace) > 253 \
            or not _DNS_SUBDOMAIN.match(namespace):
        return ("extra_label_ns: %r is not a label namespace (a lowercase DNS subdomain such as "
                "node-role.kubernetes.io)" % (namespace,))
    return None


def nfd_denied(namespace):
    """True when nfd-master refuses ``namespace`` unless its extraLabelNs lists it."""
    if namespace != "kubernetes.io" and not namespace.endswith(".kubernetes.io"):
        return False
    return not any(namespace == ns or namespace.endswith("." + ns)
                   for ns in (FEATURE_LABEL_NS, PROFILE_LABEL_NS))


def nfd_label_error(key, value="", extra_label_ns=(), extra_ns_fix=EXTRA_NS_FIX):
    """Why nfd-master would not publish the label ``key=value`` (NFD's rules, ported above), or
    None. ``extra_label_ns``: the namespaces the cluster's nfd-master lists in extraLabelNs."""
    error = label_key_error(key) or label_value_error(key, value)
    if error:
        return error
    if "/" not in key:
        return ("label key %r has no prefix: nfd-master publishes it as %s/%s, or unprefixed when its "
                "DisableAutoPrefix feature gate is on; write the prefix yourself, e.g. aiinfra.io/%s "
                "(or %s/%s for NFD's own namespace)" % (key, FEATURE_LABEL_NS, key, key, FEATURE_LABEL_NS, key))
    namespace = key.split("/", 1)[0]
    if nfd_denied(namespace) and namespace not in (extra_label_ns or ()):
        return ("label key %r: nfd-master ignores labels in %s (kubernetes.io and *.kubernetes.io are "
                "denied except %s and %s); use a prefix of your own, e.g. aiinfra.io/%s, %s"
                % (key, namespace, FEATURE_LABEL_NS, PROFILE_LABEL_NS, key.split("/", 1)[1],
                   extra_ns_fix % {"ns": namespace}))
    return None


def parse_features_file(text):
    """``(labels, problems)`` of a features.d file, read the way NFD's local source reads it
    (source/local/local.go parseFeatureFile, without expiry): the label of every line and what
    NFD would log about it or the file."""
    labels = {}
    problems = []
    if len((text or "").encode("utf-8", "surrogateescape")) > NFD_MAX_FILE_BYTES:
        problems.append("the file is over %d bytes: NFD skips it" % NFD_MAX_FILE_BYTES)
    for number, raw in enumerate((text or "").split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith(NFD_DIRECTIVE_PREFIX):
                name = line[len(NFD_DIRECTIVE_PREFIX):].split("=", 1)[0]
                if name not in NFD_DIRECTIVES:
                    problems.append("line %d: %r is read as an unknown NFD directive" % (number, line))
                else:
                    problems.append("line %d: %r is an NFD directive" % (number, line))
            continue
        key, sep, value = line.partition("=")
        labels[key] = value if sep else "true"
    return labels, problems
