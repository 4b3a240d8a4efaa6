"""Node checks of KServe's local model cache on the NVMe cache (``k8s.kserve``; docs/models.md).

KServe's node agent (the ``kserve-localmodelnode-agent`` DaemonSet) and its download jobs assume three
things of a node that KServe itself never checks:

* the agent's hostPath (Helm value ``kserve.localmodel.agent.hostPath``, ``/mnt/models`` by default) is the
  LocalModelNodeGroup's ``local.path``: the jobs write below ``local.path`` and the agent looks below its
  hostPath, so where they differ the agent never finds a finished download and starts the job again;
* that directory belongs to the agent's user (``runAsUser: 1000`` in KServe's chart) and the jobs' group
  (the ``localModel`` config's ``fsGroup``, 1000): a local volume is not chowned by the kubelet;
* the models a node group caches fit its ``storageLimit``.

These run on each host's merged settings when the inventory is planned (``datapath validate INVENTORY``, the
``node_plan`` filter), like the other node checks, and name the host. Sources: KServe's chart values
(kserve/kserve charts/kserve-resources/README.md: ``kserve.localmodel.agent.hostPath`` ``/mnt/models``,
``kserve.localmodel.agent.securityContext.runAsUser`` 1000) and the local model cache guide (``fsGroup``: 1000).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .errors import PathPart, SpecError, join_path

if TYPE_CHECKING:
    from .merge import Effective
    from .models import DatapathSpec


def _where(origin: tuple[str, tuple[PathPart, ...]], *below: PathPart) -> str:
    root, path = origin
    return join_path((*path, *below), root)


def _within(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def kserve_issues(spec: DatapathSpec, eff: Effective, host: str, held: Sequence[int]) -> list[SpecError]:
    """What KServe's node agent needs of ``host`` (its merged settings ``eff``, the models it holds ``held``)."""
    if eff.kserve is None:
        return []
    kserve, origin = eff.kserve
    if eff.storage is None:
        return [SpecError(_where(origin), "k8s.kserve without a storage section: KServe's local volume lives on "
                          "the NVMe cache", "add storage (the NVMe cache) or remove k8s.kserve", host)]
    storage, sorigin = eff.storage
    mount = storage.mount.path
    local = posixpath.join(mount, kserve.subdir)
    out: list[SpecError] = []
    cache_dir = posixpath.join(mount, spec.model_cache.directory)
    if _within(local, cache_dir):
        out.append(SpecError(
            _where(origin, "subdir"),
            f"KServe's volume {local} overlaps the model_cache directory {cache_dir}: KServe's node agent deletes "
            "every folder below <volume>/models that no LocalModelCache names",
            "give k8s.kserve.subdir a directory of its own, e.g. kserve", host))
    if kserve.agent_host_path != local:
        out.append(SpecError(
            _where(origin, "agent_host_path"),
            f"KServe's node agent watches hostPath {kserve.agent_host_path}, but the LocalModelNodeGroup's local.path "
            f"is {local}: the agent never sees what its download jobs write there and starts them again, forever",
            f"set k8s.kserve.agent_host_path: {local} and the same path as the KServe chart's "
            f"kserve.localmodel.agent.hostPath (or mount the cache so that <mount>/{kserve.subdir} is "
            f"{kserve.agent_host_path})", host))
    owner = f"{kserve.agent_uid}:{kserve.agent_gid}"
    entry = f"{{path: {kserve.subdir}, owner: '{kserve.agent_uid}', group: '{kserve.agent_gid}', mode: '0755'}}"
    found = [(i, d) for i, d in enumerate(storage.directories) if d.path == kserve.subdir]
    if not found:
        out.append(SpecError(
            _where(sorigin, "directories"),
            f"{local} is not among storage.directories: a local volume's path must exist, and KServe's node agent "
            f"(user {kserve.agent_uid}) and its download jobs (group {kserve.agent_gid}) must own it",
            f"add {entry} to storage.directories", host))
    else:
        index, directory = found[-1]
        if (directory.owner, directory.group) != (str(kserve.agent_uid), str(kserve.agent_gid)):
            out.append(SpecError(
                _where(sorigin, "directories", index),
                f"{local} is owned by {directory.owner}:{directory.group}, but KServe's node agent runs as "
                f"{owner}: its download jobs cannot write there (names map to other ids on other nodes)",
                f"set owner: '{kserve.agent_uid}' and group: '{kserve.agent_gid}' (numeric), or k8s.kserve.agent_uid "
                "and agent_gid to the ids the chart runs the agent with", host))
    if kserve.storage_limit is not None:
        sizes = []
        for index in held:
            model = spec.models[index]
            if model.files and all(f.size is not None for f in model.files):
                # KServe compares whole MiB (LocalModelCache.modelSize, rounded up)
                mib = -(-sum(int(f.size or 0) for f in model.files) // (1 << 20))
                sizes.append((f"{model.name}@{model.version}", mib << 20))
        total = sum(size for _ref, size in sizes)
        if total > kserve.storage_limit:
            listed = ", ".join(f"{ref} {size}" for ref, size in sorted(sizes, key=lambda s: -s[1])[:5])
            out.append(SpecError(
                _where(origin, "storage_limit"),
                f"the models this node caches take {total} bytes, more than k8s.kserve.storage_limit "
                f"{kserve.storage_limit} ({listed}): KServe accepts the LocalModelCaches and the downloads "
                "fail on the node",
                f"raise k8s.kserve.storage_limit to at least {total} (the cache less model_cache.reserve must hold "
                "it), or take models off this node (their groups or hosts)", host))
    return out
