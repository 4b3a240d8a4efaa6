# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""KServe's local model cache on the NVMe caches: filter ``kserve_manifests``.

Controller side. From the plan of every host (``datapath_plan``) it builds

* one ``LocalModelNodeGroup`` (serving.kserve.io/v1alpha1) per local volume class with an NVMe
  cache: its PersistentVolume spec is a local volume on the cache (``<mount>/<subdir>``, our
  StorageClass), its node affinity selects the nodes whose cache is mounted (our NFD label
  ``<prefix>/nvme-cache=true``) among the class's nodes (kubelet's ``kubernetes.io/hostname``,
  resolved as for the local PersistentVolumes), and ``storageLimit`` is the smallest cache of the
  class less the model cache's reserve;
* one ``LocalModelCache`` per model version the plans place on a cache: ``sourceModelUri`` (the
  spec's source where KServe's storage initializer can read it: ``s3://``, or one file over
  ``http(s)://``; else ``k8s_manifests_kserve_source_uris``), ``modelSize`` (the sum of the
  files' sizes) and ``nodeGroups`` (the classes of the hosts that hold it).

KServe's node agent deletes every folder below ``<volume>/models`` that no LocalModelCache names,
so the volume is a directory of its own (``subdir``, default ``kserve``), never the model_cache
directory. Validated against KServe's CRD schemas in tests/interop/test_kserve.py.
Documentation: kserve_manifests.yml next to this file; docs/models.md (KServe).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter.k8s import (
    MANAGED_BY,
    _dns_name,
    _first,
    _get,
    _hostname_label,
    _quantity,
    volume_dir,
)

API_VERSION = "serving.kserve.io/v1alpha1"
_SIZE = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei)?$")
_UNITS = {None: 1, "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4, "Pi": 1024 ** 5, "Ei": 1024 ** 6}


def _bytes(quantity: str) -> int | None:
    match = _SIZE.match(quantity)
    return int(match.group(1)) * _UNITS[match.group(2)] if match else None


def _mi(value: int) -> str:
    return f"{value // (1024 * 1024)}Mi"  # rounded down: never promise more than is there


def source_uri(model: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(uri, None)`` where KServe's storage initializer can download the version, else ``(None, why)``."""
    source = str(model.get("source") or "").rstrip("/")
    files = list(model.get("files") or [])
    if source.startswith("s3://"):
        return source, None
    if source.startswith(("http://", "https://")):
        if len(files) == 1 and not model.get("manifest"):
            return f"{source}/{files[0]['path']}", None
        what = f"{len(files)} files" if files else "its files in a manifest"
        return None, ("KServe's storage initializer fetches one file (or archive) per http(s) URI; "
                      f"this version has {what}")
    return None, f"KServe cannot read the source {source!r} (a path on the nodes or the controller)"


def kserve_manifests(hosts: Any, hostvars: Any, subdir: str = "kserve", label_prefix: str = "aiinfra.io",
                     default_class: str = "local-nvme", source_uris: Any = None, model_sizes: Any = None,
                     storage_limit: Any = None) -> dict[str, Any]:
    """``{objects: [{file, kind, name, object}], skipped: [text]}``; objects sorted by file name."""
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, Sequence):
        raise AnsibleFilterError("kserve_manifests: input must be a list of hosts (ansible_play_hosts)")
    subdir = str(subdir or "").strip("/")
    if not subdir or ".." in subdir.split("/"):
        raise AnsibleFilterError("kserve_manifests: subdir must be a relative directory below the cache mount "
                                 "(KServe deletes unknown folders below <volume>/models: never the model_cache one)")
    uris = dict(source_uris or {})
    sizes = dict(model_sizes or {})
    classes: dict[str, list[dict[str, Any]]] = {}
    models: dict[str, dict[str, Any]] = {}
    for host in sorted(str(h) for h in hosts):
        hv = hostvars[host]
        plan = _first(hv, "k8s_manifests_plan") or _get(hv, "datapath_plan")
        if plan is None:
            raise AnsibleFilterError(
                f"kserve_manifests: {host} has no datapath_plan (compute it with aiinfra.datapath.node_plan)")
        storage = _get(plan, "nvme_layout")
        if not storage:
            continue
        cls = str(_get(_get(plan, "nfd_labels", {}), "local_volume_class", default_class))
        capacity = _first(hv, "k8s_manifests_pv_capacity")
        if capacity is None:
            capacity = _get(_get(_first(hv, "nfd_labels_result") or {}, "cache", {}), "size_bytes")
        cache = _get(plan, "model_cache", {})
        mount = posixpath.normpath(str(storage["mount"]["path"]))
        node = {"host": host, "node_name": _hostname_label(host, hv),
                # KServe's node agent writes (and deletes) there: never the model_cache directory
                "path": volume_dir(host, plan, mount, subdir, "kserve_manifests", "subdir"),
                "capacity": None if capacity is None else _bytes(_quantity(capacity, host)),
                "reserve": int(_get(cache, "reserve_bytes", 0) or 0)}
        classes.setdefault(cls, []).append(node)
        for item in _get(cache, "models", []) or []:
            ref = f"{item['name']}@{item['version']}"
            entry = models.setdefault(ref, {"model": item, "classes": set()})
            entry["classes"].add(cls)

    out: list[dict[str, Any]] = []
    skipped: list[str] = []
    for cls, nodes in sorted(classes.items()):
        if _dns_name(cls) != cls:
            raise AnsibleFilterError(f"kserve_manifests: local_volume_class {cls!r} is not a DNS name")
        paths = sorted({n["path"] for n in nodes})
        if len(paths) != 1:
            raise AnsibleFilterError(
                f"kserve_manifests: the nodes of class {cls} mount their caches at different paths ({paths}); a "
                "LocalModelNodeGroup has one local path: give them one mount path or separate classes")
        if storage_limit is not None:
            limit = _quantity(storage_limit, cls)
        else:
            unknown = [n["host"] for n in nodes if n["capacity"] is None]
            if unknown:
                raise AnsibleFilterError(
                    f"kserve_manifests: the cache size of {', '.join(unknown)} is unknown: run the "
                    "aiinfra.datapath.nfd_labels role on them first or set k8s_manifests_pv_capacity (or "
                    "k8s_manifests_kserve_storage_limit)")
            limit = _mi(min(n["capacity"] - n["reserve"] for n in nodes))
            if _bytes(limit) in (None, 0):
                raise AnsibleFilterError(f"kserve_manifests: the caches of class {cls} have no room beyond "
                                         "their reserve")
        out.append(_entry("LocalModelNodeGroup", cls, {
            "apiVersion": API_VERSION,
            "kind": "LocalModelNodeGroup",
            "metadata": {"name": cls, "labels": dict(MANAGED_BY)},
            "spec": {
                "storageLimit": limit,
                "persistentVolumeSpec": {
                    "accessModes": ["ReadWriteOnce"],
                    "volumeMode": "Filesystem",
                    "capacity": {"storage": limit},
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": cls,
                    "local": {"path": paths[0]},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": f"{label_prefix}/nvme-cache", "operator": "In", "values": ["true"]},
                        {"key": "kubernetes.io/hostname", "operator": "In",
                         "values": sorted(n["node_name"] for n in nodes)},
                    ]}]}},
                },
                "persistentVolumeClaimSpec": {
                    "accessModes": ["ReadWriteOnce"],
                    "volumeMode": "Filesystem",
                    "storageClassName": cls,
                    "resources": {"requests": {"storage": limit}},
                },
            },
        }))

    names: dict[str, str] = {}
    limits = {o["name"]: _bytes(o["object"]["spec"]["storageLimit"]) for o in out}
    cached: dict[str, list[tuple[str, int]]] = {cls: [] for cls in limits}
    for ref, entry in sorted(models.items()):
        model = entry["model"]
        uri = uris.get(ref)
        if uri is None:
            uri, why = source_uri(model)
            if uri is None:
                skipped.append(f"{ref}: {why}; warm it with model_cache.yml or set "
                               f"k8s_manifests_kserve_source_uris['{ref}'] (s3://, gs://, hf://)")
                continue
        size = sizes.get(ref)
        if size is None:
            files = list(model.get("files") or [])
            if not files or any(f.get("size") is None for f in files):
                skipped.append(f"{ref}: its size is unknown (files without size, or a manifest); give every file's "
                               f"size in the spec or set k8s_manifests_kserve_model_sizes['{ref}']")
                continue
            size = sum(int(f["size"]) for f in files)
        name = _dns_name(f"{model['name']}-{model['version']}".replace("_", "-").replace(".", "-"))
        if name in names:
            raise AnsibleFilterError(f"kserve_manifests: {names[name]} and {ref} both become LocalModelCache {name}")
        names[name] = ref
        quantity = size if isinstance(size, str) else _ceil_quantity(int(size))
        for cls in entry["classes"]:
            cached[cls].append((ref, _bytes(quantity) or 0))
        out.append(_entry("LocalModelCache", name, {
            "apiVersion": API_VERSION,
            "kind": "LocalModelCache",
            "metadata": {"name": name, "labels": dict(MANAGED_BY),
                         "annotations": {"aiinfra.io/model": ref}},
            "spec": {
                "sourceModelUri": str(uri),
                "modelSize": quantity,
                "nodeGroups": sorted(entry["classes"]),
            },
        }))
    for cls, held in sorted(cached.items()):
        total, limit = sum(size for _ref, size in held), limits[cls]
        if limit is not None and total > limit:
            # KServe accepts the objects and the node agent's downloads fail on the nodes: refuse here
            listed = ", ".join(f"{ref} {size}" for ref, size in sorted(held, key=lambda h: -h[1])[:5])
            raise AnsibleFilterError(
                f"kserve_manifests: the LocalModelCaches of node group {cls} take {total} bytes, more than its "
                f"storageLimit {limit} ({listed}): raise k8s_manifests_kserve_storage_limit (the caches less "
                "model_cache.reserve must hold it), use larger caches, or take models off the class's hosts")
    return {"objects": sorted(out, key=lambda e: e["file"]), "skipped": skipped}


def _ceil_quantity(value: int) -> str:
    """A model's size rounded up to a whole MiB: KServe compares it with the node group's storageLimit."""
    mib = 1024 * 1024
    return f"{-(-value // mib)}Mi"


def _entry(kind: str, name: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"file": f"{kind.lower()}-{name}.yaml", "kind": kind, "name": name, "object": dict(obj)}


class FilterModule:
    """aiinfra.datapath KServe filters."""

    def filters(self) -> dict[str, Any]:
        return {"kserve_manifests": kserve_manifests}
