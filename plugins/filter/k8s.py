# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes manifests for the node-local NVMe caches: filter ``local_volume_manifests``.

Controller side. From the plan of every host (``datapath_plan``) it builds one StorageClass
per local volume class (no provisioner, WaitForFirstConsumer), one PersistentVolume per host
with node affinity to that host, and/or the ConfigMap of the local static provisioner.
Documentation: local_volume_manifests.yml next to this file.

A PersistentVolume never hands the directory that holds the published models to pods: its path is
a directory of its own beside them (``<mount>/<pv_subdir>``, default ``volume``), and a
``pv_subdir`` that is, holds or lies in the model cache directory is refused. The static
provisioner's ConfigMap turns whole mount points into volumes, so it is refused for hosts whose
plan places models on the cache (docs/security.md).

The node affinity matches the label ``kubernetes.io/hostname`` that kubelet sets on its Node:
kubelet takes ``--hostname-override`` or the machine's hostname (``uname -n``), trims it and
lowercases it (k8s.io/component-helpers/node/util GetHostname). So the value here is
``k8s_manifests_node_name`` when set, else the node's ``uname -n`` when facts were gathered
(``ansible_facts.nodename``), else the inventory name; lowercased. It must be a DNS-1123
subdomain of at most 63 characters (a Node name and a label value); otherwise the filter fails
and names the host and the fix. Object names are DNS-1123 subdomains; two hosts whose objects
would get the same name fail with both names.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from ansible.errors import AnsibleFilterError

KINDS = ("storageclass", "pv", "configmap")
DEFAULT_PV_SUBDIR = "volume"
DEFAULT_MODELS_DIR = "models"  # the spec's model_cache.directory default
MANAGED_BY = {"app.kubernetes.io/managed-by": "aiinfra.datapath"}
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
# k8s.io/apimachinery/pkg/util/validation IsDNS1123Subdomain
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _dns_name(text: str) -> str:
    """A DNS subdomain (object name) from free text: lowercase, other characters -> '-'."""
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")
    name = re.sub(r"-{2,}", "-", name)
    return name[:253].rstrip("-.")


def _get(mapping: Any, key: str, default: Any = None) -> Any:
    try:
        value = mapping[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def _quantity(value: Any, host: str) -> str:
    if isinstance(value, bool):
        raise AnsibleFilterError(f"local_volume_manifests: capacity of {host} must be bytes or a quantity")
    if isinstance(value, int):
        if value < 1024 * 1024:
            raise AnsibleFilterError(f"local_volume_manifests: capacity of {host} is {value} bytes, too small")
        return f"{value // (1024 * 1024)}Mi"  # rounded down: never promise more than is there
    text = str(value).strip()
    if text.isdigit():
        return _quantity(int(text), host)
    if not _QUANTITY.match(text):
        raise AnsibleFilterError(
            f"local_volume_manifests: capacity {text!r} of {host} is not a Kubernetes quantity (e.g. 3500Gi)")
    return text


def _first(hv: Any, *names: str) -> Any:
    """The first of ``names`` set on the host (the current variable name, then its old one)."""
    for name in names:
        value = _get(hv, name)
        if value is not None:
            return value
    return None


def _hostname_label(host: str, hv: Any) -> str:
    """The value of kubelet's ``kubernetes.io/hostname`` label for ``host`` (see the module doc)."""
    override = _first(hv, "k8s_manifests_node_name", "k8s_node_name")
    facts = _get(hv, "ansible_facts", {})
    source, name = (("k8s_manifests_node_name", override) if override is not None
                    else ("ansible_facts.nodename", _get(facts, "nodename")) if _get(facts, "nodename")
                    else ("the inventory name", host))
    value = str(name).strip().lower()
    if len(value) > 63 or not _DNS_SUBDOMAIN.match(value):
        raise AnsibleFilterError(
            f"local_volume_manifests: {host}: {source} {str(name)!r} cannot be the Kubernetes node's hostname "
            "label (kubelet's kubernetes.io/hostname: lowercase letters, digits, '-' and '.', at most 63 "
            f"characters); set k8s_manifests_node_name for {host} to the node's name as "
            "`kubectl get nodes -L kubernetes.io/hostname` shows it")
    return value


def _inside(a: str, b: str) -> bool:
    """``a`` is ``b`` or lies below it (normalised POSIX paths)."""
    return a == b or a.startswith(b.rstrip("/") + "/")


def models_dir(plan: Any, mount: str) -> str:
    """The directory that holds the host's published models: the plan's model_cache.cache_dir, else
    the spec's default directory below the mount (a later run may still place models there)."""
    cache_dir = _get(_get(plan, "model_cache", {}), "cache_dir")
    return posixpath.normpath(str(cache_dir) if cache_dir else posixpath.join(mount, DEFAULT_MODELS_DIR))


def volume_dir(host: str, plan: Any, mount: str, subdir: Any, what: str, option: str) -> str:
    """``<mount>/<subdir>``, refused where it is, holds or lies in the model cache directory."""
    sub = str(subdir or "").strip("/")
    if not sub or any(part in ("", ".", "..") for part in sub.split("/")):
        raise AnsibleFilterError(f"{what}: {option} {subdir!r} must be a relative directory below the cache mount "
                                 "(without '.' or '..'): a directory of its own beside the published models")
    path = posixpath.normpath(posixpath.join(mount, sub))
    models = models_dir(plan, mount)
    if _inside(path, models) or _inside(models, path):
        raise AnsibleFilterError(
            f"{what}: {host}: {option} {sub!r} gives pods {path}, which "
            f"{'is' if path == models else 'holds' if _inside(models, path) else 'lies in'} the model cache "
            f"directory {models}: pods would write where the published models are read from. Give {option} a "
            "directory of its own beside it (the default is 'volume')")
    return path


def _node(host: str, hv: Any, kinds: Sequence[str], default_class: str,
          pv_subdir: str = DEFAULT_PV_SUBDIR) -> dict[str, Any] | None:
    plan = _first(hv, "k8s_manifests_plan", "k8s_node_manifests_plan") or _get(hv, "datapath_plan")
    if plan is None:
        raise AnsibleFilterError(
            f"local_volume_manifests: {host} has no datapath_plan (compute it with aiinfra.datapath.node_plan)")
    storage = _get(plan, "nvme_layout")
    if not storage:
        return None
    k8s = _get(plan, "nfd_labels", {})
    mount = posixpath.normpath(str(storage["mount"]["path"]))
    if "configmap" in kinds and _get(plan, "model_cache"):
        raise AnsibleFilterError(
            f"local_volume_manifests: {host} holds models on its cache ({models_dir(plan, mount)}), and the local "
            "static provisioner turns the whole mount point into a volume that pods may write: leave configmap "
            "out of k8s_manifests_kinds for it (the pv kind gives a directory beside the models)")
    node = {
        "host": host,
        "node_name": _hostname_label(host, hv) if "pv" in kinds else None,
        "class": str(_get(k8s, "local_volume_class", default_class)),
        "path": str(storage["mount"]["path"]).rstrip("/"),
        "volume": volume_dir(host, plan, mount, pv_subdir, "local_volume_manifests", "pv_subdir")
        if "pv" in kinds else None,
        "fstype": str(_get(_get(storage, "filesystem", {}), "type", "xfs")),
        "capacity": None,
    }
    if "pv" in kinds:
        capacity = _first(hv, "k8s_manifests_pv_capacity", "k8s_node_pv_capacity")
        if capacity is None:
            result = _first(hv, "nfd_labels_result", "k8s_node_result") or {}
            capacity = _get(_get(result, "cache", {}), "size_bytes")
        if capacity is None:
            raise AnsibleFilterError(
                f"local_volume_manifests: the capacity of {host}'s cache at {node['path']} is unknown: run the "
                "aiinfra.datapath.nfd_labels role on it first (it measures the mounted filesystem) or set "
                "k8s_manifests_pv_capacity for it (e.g. 3500Gi)")
        node["capacity"] = _quantity(capacity, host)
    return node


def local_volume_manifests(hosts: Any, hostvars: Any, kinds: Any = ("storageclass", "pv"),
                           default_class: str = "local-nvme", namespace: str = "kube-system",
                           configmap_name: str = "local-provisioner-config",
                           reclaim_policy: str = "Retain", pv_subdir: str = DEFAULT_PV_SUBDIR) -> list[dict[str, Any]]:
    """[{file, kind, name, object}] sorted by file name; one Kubernetes object per entry."""
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, Sequence):
        raise AnsibleFilterError("local_volume_manifests: input must be a list of hosts (ansible_play_hosts)")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise AnsibleFilterError(f"local_volume_manifests: kinds must be among {', '.join(KINDS)}, got {kinds}")
    if reclaim_policy not in ("Retain", "Delete"):
        raise AnsibleFilterError("local_volume_manifests: reclaim_policy must be Retain or Delete")
    nodes = []
    for host in sorted(str(h) for h in hosts):
        node = _node(host, hostvars[host], kinds, default_class, pv_subdir)
        if node is not None:
            nodes.append(node)

    out: list[dict[str, Any]] = []
    classes: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        if not node["class"] or _dns_name(node["class"]) != node["class"]:
            raise AnsibleFilterError(
                f"local_volume_manifests: local_volume_class {node['class']!r} of {node['host']} is not a DNS name")
        classes.setdefault(node["class"], []).append(node)

    if "storageclass" in kinds:
        for cls in sorted(classes):
            out.append(_entry("StorageClass", cls, {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": cls, "labels": dict(MANAGED_BY)},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
                "reclaimPolicy": reclaim_policy,
            }))

    if "pv" in kinds:
        seen: dict[str, dict[str, Any]] = {}
        for node in nodes:
            name = _dns_name(f"{node['class']}-{node['node_name']}")
            if name in seen:
                other = seen[name]
                raise AnsibleFilterError(
                    f"local_volume_manifests: hosts {other['host']} and {node['host']} both map to the "
                    f"PersistentVolume {name} (Kubernetes node {other['node_name']!r} and {node['node_name']!r}); "
                    "set k8s_manifests_node_name on each to its real node name (two inventory hosts cannot "
                    "be the same node)")
            seen[name] = node
            out.append(_entry("PersistentVolume", name, {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": dict(MANAGED_BY)},
                "spec": {
                    "capacity": {"storage": node["capacity"]},
                    "volumeMode": "Filesystem",
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": reclaim_policy,
                    "storageClassName": node["class"],
                    "local": {"path": node["volume"]},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node["node_name"]]},
                    ]}]}},
                },
            }))

    if "configmap" in kinds and classes:
        # The provisioner discovers mount points *below* hostDir: the cache's parent directory.
        class_map: dict[str, dict[str, Any]] = {}
        owners: dict[str, str] = {}
        for cls, members in sorted(classes.items()):
            dirs = sorted({posixpath.dirname(n["path"]) for n in members})
            if len(dirs) != 1:
                raise AnsibleFilterError(
                    f"local_volume_manifests: class {cls} has caches below different directories {dirs}; "
                    "the local static provisioner needs one discovery directory per class")
            if dirs[0] in owners:
                raise AnsibleFilterError(
                    f"local_volume_manifests: classes {owners[dirs[0]]} and {cls} share the discovery directory "
                    f"{dirs[0]}")
            owners[dirs[0]] = cls
            fstypes = sorted({n["fstype"] for n in members})
            class_map[cls] = {"hostDir": dirs[0], "mountDir": dirs[0], "volumeMode": "Filesystem",
                              "fsType": fstypes[0] if len(fstypes) == 1 else "",
                              "namePattern": posixpath.basename(members[0]["path"])
                              if len({posixpath.basename(n["path"]) for n in members}) == 1 else "*"}
        out.append(_entry("ConfigMap", configmap_name, {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": configmap_name, "namespace": namespace, "labels": dict(MANAGED_BY)},
            "data": {
                "nodeLabelsForPV": "- kubernetes.io/hostname\n",
                "storageClassMap": yaml.safe_dump(class_map, default_flow_style=False, sort_keys=True),
            },
        }))
    return sorted(out, key=lambda e: e["file"])


def _entry(kind: str, name: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    prefix = {"StorageClass": "storageclass", "PersistentVolume": "persistentvolume", "ConfigMap": "configmap"}[kind]
    return {"file": f"{prefix}-{name}.yaml", "kind": kind, "name": name, "object": dict(obj)}


class FilterModule:
    """aiinfra.datapath Kubernetes filters."""

    def filters(self) -> dict[str, Any]:
        return {"local_volume_manifests": local_volume_manifests}
