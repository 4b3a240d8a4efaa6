# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pull mode in Kubernetes: filter ``pull_manifests`` (documentation: pull_manifests.yml).

Controller side. The objects of a DaemonSet that makes every selected node apply its own plan
(docs/pull.md): a ServiceAccount with a ClusterRole to annotate Nodes and a ValidatingAdmissionPolicy
that lets it change only the Node its pod runs on (the service account token's node-name claim,
``authentication.kubernetes.io/node-name``) and only the annotation it owns, a ConfigMap with the
entrypoint script (roles/pull_mode/files/datapath-pull-pod.sh), in ``configmap`` mode a
ConfigMap with the inventory (the hosts' groups and the spec), and the DaemonSet itself:
privileged, hostPID and hostNetwork (net.* sysctls and links are per network namespace), the
node's root at /host, a readiness probe that is the last run's result, and a rolling update of
at most ``max_unavailable`` nodes at a time. The revision (the git revision, or a digest of the
inventory ConfigMap) is a pod template annotation, so a new revision rolls the DaemonSet.

What the pods run as root is verified: the image is pinned by digest (a tag is refused unless
``allow_image_tag``), and in git mode the checkout is a pinned commit or is signed by one of
``verify_keys`` (``git verify-commit``); a repository URL with credentials in it is refused (a
deploy key comes from a Secret, ``repo_secret``). :func:`repo_url_problem` and
:func:`unit_problems` are the same checks for the ``pull_mode`` role's systemd unit.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

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
KEYS_DIR = "/etc/aiinfra-datapath/verify-keys"
GIT_SECRET_DIR = "/etc/aiinfra-datapath/git"
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}\Z")
_COMMIT = re.compile(r"\A([0-9a-f]{40}|[0-9a-f]{64})\Z")
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


def repo_url_problem(url: Any) -> str | None:
    """Why ``url`` must not be written where others read it (a unit file, a pod spec): a password or
    token in it. None when it holds none (``git@host:path`` and ``ssh://git@host/...`` name a user only)."""
    text = str(url or "")
    if "://" not in text:
        return None  # scp-like git@host:path or a local path: no secret in it
    try:
        parts = urlsplit(text)
    except ValueError:
        return "it is not a URL"
    if parts.password is not None or (parts.scheme in ("http", "https") and parts.username):
        return ("it carries credentials (%s://<secret>@%s); a unit file and a pod spec are readable by others: use a "
                "deploy key or a git credential helper instead" % (parts.scheme, parts.hostname))
    return None


def is_commit(revision: Any) -> bool:
    """A full commit id (SHA-1 or SHA-256): a revision nobody can move."""
    return bool(_COMMIT.match(str(revision or "")))


def unit_problems(repo_url: Any, verify_commit: Any, verify_keys: Any, commit: Any,
                  allow_unverified: Any = False) -> list[str]:
    """Why the pull_mode role must not install its unit (the role fails with these, each with its fix)."""
    problems = []
    why = repo_url_problem(repo_url)
    if why:
        problems.append(f"pull_mode_repo_url: {why} (pull_mode_ssh_key or pull_mode_git_credentials, files 0600)")
    if commit and not is_commit(commit):
        problems.append(f"pull_mode_commit {commit!r} is not a full commit id (40 or 64 hex characters)")
    verified = bool(verify_commit) and bool(verify_keys)
    if bool(verify_commit) and not verify_keys and not commit:
        problems.append("pull_mode_verify_commit is true but pull_mode_verify_keys is empty: give the public keys "
                        "(ASCII-armored) that sign the inventory repository's commits, or pin pull_mode_commit")
    elif not verified and not commit and not allow_unverified:
        problems.append("the node would run whatever the repository holds as root: set pull_mode_verify_commit with "
                        "pull_mode_verify_keys, or pin pull_mode_commit (pull_mode_allow_unverified: true accepts "
                        "the risk)")
    return problems


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
                   extra_args: str = "", verify_keys: Sequence[str] | None = None,
                   allow_unverified: bool = False, allow_image_tag: bool = False,
                   repo_secret: str | None = None) -> list[dict[str, Any]]:
    """Every object of the pull DaemonSet, as ``[{file, object}]`` (one file per object)."""
    _check("source", source, source in SOURCES, f"use one of {', '.join(SOURCES)}")
    _check("namespace", namespace, bool(_DNS_LABEL.match(str(namespace))) and len(str(namespace)) <= 63,
           "a DNS-1123 label (lowercase letters, digits, '-')")
    _check("image", image, bool(image) and not re.search(r"\s", str(image)),
           "the execution environment image by digest (k8s_manifests_pull_image=registry/datapath-ee@sha256:...)")
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
        # RBAC cannot name "the pod's own Node": the ValidatingAdmissionPolicy below narrows the patch
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": NAME, "labels": dict(LABELS)},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"] if annotation else ["get"]}]},
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
    if annotation:
        objects += admission_policy(namespace, str(annotation))
    if source == "git":
        _check("repo_url", repo_url, bool(repo_url), "the inventory repository (k8s_manifests_pull_repo_url)")
        _check("inventory", inventory, bool(inventory), "the inventory's path in the repository")
        why = repo_url_problem(repo_url)
        _check("repo_url", repo_url, why is None, f"{why} (k8s_manifests_pull_repo_secret: a Secret with "
                                                  "ssh-privatekey and known_hosts)")
        revision = str(revision or "main")
        keys = [str(k) for k in (verify_keys or []) if str(k).strip()]
        _check("verify_keys", verify_keys, bool(keys) or is_commit(revision) or bool(allow_unverified),
               "the pods would run whatever the repository holds as root: give k8s_manifests_pull_verify_keys (the "
               "ASCII-armored public keys that sign its commits; git verify-commit checks each checkout) or pin "
               "k8s_manifests_pull_revision to a full commit id (k8s_manifests_pull_allow_unverified: true accepts "
               "the risk)")
        env += [{"name": "DATAPATH_REPO_URL", "value": str(repo_url)},
                {"name": "DATAPATH_REVISION", "value": revision},
                {"name": "DATAPATH_INVENTORY", "value": str(inventory)}]
        if keys:
            objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": NAME + "-verify-keys", **meta},
                            "data": {f"key-{i}.asc": key for i, key in enumerate(keys)}})
            env.append({"name": "DATAPATH_VERIFY_KEYS", "value": KEYS_DIR})
            mounts.append({"name": "verify-keys", "mountPath": KEYS_DIR, "readOnly": True})
            volumes.append({"name": "verify-keys", "configMap": {"name": NAME + "-verify-keys"}})
        elif not is_commit(revision):
            env.append({"name": "DATAPATH_ALLOW_UNVERIFIED", "value": "true"})
        if repo_secret:
            env.append({"name": "GIT_SSH_COMMAND", "value": (
                f"ssh -i {GIT_SECRET_DIR}/ssh-privatekey -o IdentitiesOnly=yes "
                f"-o UserKnownHostsFile={GIT_SECRET_DIR}/known_hosts -o StrictHostKeyChecking=yes")})
            mounts.append({"name": "git-credentials", "mountPath": GIT_SECRET_DIR, "readOnly": True})
            secret = {"secretName": str(repo_secret), "defaultMode": 0o400}
            volumes.append({"name": "git-credentials", "secret": secret})
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
    _check("image", image, bool(_DIGEST.search(str(image))) or bool(allow_image_tag),
           "pin the execution environment image by digest (registry/datapath-ee@sha256:<64 hex>): a tag such as "
           "latest can be moved to other code that runs as root on every node (k8s_manifests_pull_allow_image_tag: "
           "true accepts a tag)")
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


def admission_policy(namespace: str, annotation: str) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.30+) and its binding:
    an update of a Node by the pull DaemonSet's service account is admitted only for the Node its pod
    runs on (the token's node-name claim, Kubernetes 1.30+ bound service account tokens) and only when
    it changes nothing but ``annotation``: not the other annotations, the labels, the spec (taints,
    unschedulable) or the finalizers."""
    user = f"system:serviceaccount:{namespace}:{NAME}"
    key = json.dumps(annotation)  # a CEL string literal (double-quoted, escaped like JSON)

    def others(obj: str) -> str:
        return f"(has({obj}.metadata.annotations) ? {obj}.metadata.annotations : {{}})"

    def same(field: str, empty: str) -> str:
        return (f"(has(object.metadata.{field}) ? object.metadata.{field} : {empty}) == "
                f"(has(oldObject.metadata.{field}) ? oldObject.metadata.{field} : {empty})")

    validations = [
        {"expression": (f"has(request.userInfo.extra) && '{NODE_NAME_CLAIM}' in request.userInfo.extra && "
                        f"size(request.userInfo.extra['{NODE_NAME_CLAIM}']) == 1 && "
                        f"request.userInfo.extra['{NODE_NAME_CLAIM}'][0] == object.metadata.name"),
         "message": "the pull DaemonSet may change only the Node its pod runs on",
         "reason": "Forbidden"},
        {"expression": (f"{others('object')}.filter(k, k != {key}).all(k, k in {others('oldObject')} && "
                        f"{others('oldObject')}[k] == {others('object')}[k]) && "
                        f"{others('oldObject')}.filter(k, k != {key}).all(k, k in {others('object')})"),
         "message": f"the pull DaemonSet may change no annotation but {annotation}", "reason": "Forbidden"},
        {"expression": same("labels", "{}"), "message": "the pull DaemonSet may not change a Node's labels",
         "reason": "Forbidden"},
        {"expression": "object.spec == oldObject.spec",
         "message": "the pull DaemonSet may not change a Node's spec (taints, unschedulable, podCIDR)",
         "reason": "Forbidden"},
        {"expression": same("finalizers", "[]") + " && " + same("ownerReferences", "[]"),
         "message": "the pull DaemonSet may not change a Node's finalizers or owners", "reason": "Forbidden"},
    ]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME + "-own-node", "labels": dict(LABELS)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["UPDATE"], "resources": ["nodes"]}]},
            "matchConditions": [{"name": "pull-service-account",
                                 "expression": f"request.userInfo.username == {json.dumps(user)}"}],
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME + "-own-node", "labels": dict(LABELS)},
        "spec": {"policyName": NAME + "-own-node", "validationActions": ["Deny"]},
    }
    return [policy, binding]


def _suffix(obj: Mapping[str, Any]) -> str:
    name = str(obj["metadata"]["name"])
    return name[len(NAME):] if name.startswith(NAME) else "-" + name


class FilterModule:
    """aiinfra.datapath pull-mode filters."""

    def filters(self) -> dict[str, Any]:
        return {"pull_manifests": pull_manifests, "pull_unit_problems": unit_problems}
