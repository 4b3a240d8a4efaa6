# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pull mode in Kubernetes: filter ``pull_manifests`` (documentation: pull_manifests.yml).

Controller side. The objects of a DaemonSet that makes every selected node apply its own plan
(docs/pull.md): a ServiceAccount with a ClusterRole to annotate Nodes, a ConfigMap with the
entrypoint script (roles/pull_mode/files/datapath-pull-pod.sh), in ``configmap`` mode a
ConfigMap with the inventory (the hosts' groups and the spec), and the DaemonSet itself:
privileged, hostPID and hostNetwork (net.* sysctls and links are per network namespace), the
node's root at /host, a readiness probe that is the last run's result, and a rolling update of
at most ``max_unavailable`` nodes at a time. The revision (the git revision, or a digest of the
inventory ConfigMap) is a pod template annotation, so a new revision rolls the DaemonSet.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.plain import plain as _plain

NAME = "aiinfra-datapath-pull"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "aiinfra.datapath"}
SCRIPT_KEY = "datapath-pull-pod.sh"
SCRIPT_DIR = "/etc/aiinfra-datapath/bin"
INVENTORY_DIR = "/etc/aiinfra-datapath/inventory"
HOST_ROOT = "/host"
SOURCES = ("configmap", "git")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def pull_inventory(hosts: Sequence[str], groups: Mapping[str, Sequence[str]], spec: Any) -> dict[str, str]:
    """The inventory of the ConfigMap: the hosts' groups (YAML inventory) and the spec."""
    wanted = [str(h) for h in hosts]
    children: dict[str, Any] = {}
    for group in sorted(str(g) for g in groups):
        if group in ("all", "ungrouped"):
            continue
        members = [str(h) for h in groups[group] if str(h) in wanted]
        if members:
            children[group] = {"hosts": {h: None for h in members}}
    inventory = {"all": {"hosts": {h: None for h in wanted}, "children": children}}
    return {"hosts.yml": yaml.safe_dump(inventory, sort_keys=False, default_flow_style=False),
            "datapath.yml": yaml.safe_dump({"datapath": _plain(spec)}, sort_keys=False, default_flow_style=False)}


def _check(name: str, value: Any, ok: bool, fix: str) -> None:
    if not ok:
        raise AnsibleFilterError(f"pull_manifests: {name}={value!r}: {fix}")


def pull_manifests(hosts: Sequence[str], groups: Mapping[str, Sequence[str]], spec: Any, script: str,
                   image: str, source: str = "configmap", namespace: str = "kube-system",
                   repo_url: str | None = None, revision: str | None = None, inventory: str | None = None,
                   max_unavailable: int | str = 1, interval: int = 1800,
                   annotation: str = "aiinfra.io/datapath-revision",
                   node_selector: Mapping[str, str] | None = None,
                   tolerations: Sequence[Mapping[str, Any]] | None = None,
                   extra_args: str = "") -> list[dict[str, Any]]:
    """Every object of the pull DaemonSet, as ``[{file, object}]`` (one file per object)."""
    _check("source", source, source in SOURCES, f"use one of {', '.join(SOURCES)}")
    _check("namespace", namespace, bool(_DNS_LABEL.match(str(namespace))) and len(str(namespace)) <= 63,
           "a DNS-1123 label (lowercase letters, digits, '-')")
    _check("image", image, bool(image) and not re.search(r"\s", str(image)), "an image reference")
    _check("annotation", annotation, not annotation or bool(_QUALIFIED.match(str(annotation))),
           "a qualified name (prefix/name), or empty for none")
    _check("interval", interval, str(interval).isdigit(), "seconds, 0 for one run per pod start")
    if isinstance(max_unavailable, str) and not max_unavailable.isdigit():
        _check("max_unavailable", max_unavailable, bool(re.match(r"^[0-9]{1,3}%$", max_unavailable)),
               "a number of nodes or a percentage")
    else:
        max_unavailable = int(max_unavailable)
        _check("max_unavailable", max_unavailable, max_unavailable >= 1, "at least 1")

    meta = {"namespace": namespace, "labels": dict(LABELS)}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": NAME, "labels": dict(LABELS)},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": NAME, "labels": dict(LABELS)},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME + "-script", **meta},
         "data": {SCRIPT_KEY: str(script)}},
    ]
    env: list[dict[str, Any]] = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "DATAPATH_HOST_ROOT", "value": HOST_ROOT},
        {"name": "DATAPATH_SOURCE", "value": source},
        {"name": "DATAPATH_INTERVAL", "value": str(interval)},
        {"name": "DATAPATH_ANNOTATION", "value": str(annotation or "")},
        {"name": "DATAPATH_ARGS", "value": str(extra_args or "")},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "host-root", "mountPath": HOST_ROOT, "mountPropagation": "HostToContainer"},
        {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}},
        {"name": "script", "configMap": {"name": NAME + "-script", "defaultMode": 0o755}},
    ]
    if source == "git":
        _check("repo_url", repo_url, bool(repo_url), "the inventory repository (k8s_manifests_pull_repo_url)")
        _check("inventory", inventory, bool(inventory), "the inventory's path in the repository")
        revision = str(revision or "main")
        env += [{"name": "DATAPATH_REPO_URL", "value": str(repo_url)},
                {"name": "DATAPATH_REVISION", "value": revision},
                {"name": "DATAPATH_INVENTORY", "value": str(inventory)}]
    else:
        data = pull_inventory(hosts, groups, spec)
        revision = "cm-" + hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME + "-inventory", **meta},
                        "data": data})
        env += [{"name": "DATAPATH_REVISION", "value": revision},
                {"name": "DATAPATH_INVENTORY", "value": INVENTORY_DIR}]
        mounts.append({"name": "inventory", "mountPath": INVENTORY_DIR, "readOnly": True})
        volumes.append({"name": "inventory", "configMap": {"name": NAME + "-inventory", "items": [
            {"key": "hosts.yml", "path": "hosts.yml"},
            {"key": "datapath.yml", "path": "group_vars/all/datapath.yml"}]}})
    script_path = f"{SCRIPT_DIR}/{SCRIPT_KEY}"
    pod: dict[str, Any] = {
        "serviceAccountName": NAME,
        "hostPID": True,
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "priorityClassName": "system-node-critical",
        "terminationGracePeriodSeconds": 30,
        "containers": [{
            "name": "datapath",
            "image": str(image),
            "command": ["/bin/sh", script_path, "run"],
            "env": env,
            "securityContext": {"privileged": True},
            "readinessProbe": {"exec": {"command": ["/bin/sh", script_path, "ready"]},
                               "initialDelaySeconds": 10, "periodSeconds": 30, "failureThreshold": 1},
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    }
    if node_selector:
        pod["nodeSelector"] = {str(k): str(v) for k, v in node_selector.items()}
    if tolerations:
        pod["tolerations"] = _plain(list(tolerations))
    objects.append({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": NAME, **meta},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable}},
            # a pod is available once its first run succeeded (readiness), then the next node rolls
            "minReadySeconds": 0,
            "template": {
                "metadata": {"labels": dict(LABELS), "annotations": {
                    "aiinfra.io/datapath-revision": revision,
                    "aiinfra.io/datapath-script": hashlib.sha256(str(script).encode()).hexdigest()[:12]}},
                "spec": pod,
            },
        },
    })
    return [{"file": f"{NAME}-{obj['kind'].lower()}{_suffix(obj)}.yaml", "object": obj} for obj in objects]


def _suffix(obj: Mapping[str, Any]) -> str:
    name = str(obj["metadata"]["name"])
    return name[len(NAME):] if name.startswith(NAME) else "-" + name


class FilterModule:
    """aiinfra.datapath pull-mode filters."""

    def filters(self) -> dict[str, Any]:
        return {"pull_manifests": pull_manifests}
