#!/bin/sh
# aiinfra.datapath pull mode in a Kubernetes pod: the entrypoint of the DaemonSet that
# playbooks/k8s_manifests.yml renders (-e k8s_manifests_pull=true; docs/pull.md). It runs in the
# execution environment image, privileged, with the node's root mounted at DATAPATH_HOST_ROOT,
# and applies the node's own plan with playbooks/local.yml; modules run on the node's root
# through the chroot connection, so the node needs only its own python3.
#
#   datapath-pull-pod.sh run     apply now, then again every DATAPATH_INTERVAL seconds (0: once)
#   datapath-pull-pod.sh once    apply once; the exit status is the run's
#   datapath-pull-pod.sh ready   exit 0 when this pod's last run and the node's last-run.json succeeded
#
# Environment (the DaemonSet sets it):
#   NODE_NAME              the node's name in the inventory (downward API: spec.nodeName)
#   DATAPATH_HOST_ROOT     where the node's root is mounted (/host; / runs on the local root)
#   DATAPATH_SOURCE        configmap (the inventory is mounted) or git (cloned at a revision)
#   DATAPATH_INVENTORY     configmap: the mounted inventory; git: its path inside the repository
#   DATAPATH_REPO_URL      git: the repository
#   DATAPATH_REVISION      git: the revision to check out (a full commit id is pinned: checked after
#                          the checkout); configmap: the content's revision
#   DATAPATH_VERIFY_KEYS   git: a directory of ASCII-armored public keys (*.asc); the checked-out commit
#                          must be signed by one of them (git verify-commit), else nothing runs
#   DATAPATH_ALLOW_UNVERIFIED  git: "true" runs a branch or tag without a signature check
#   DATAPATH_PLAYBOOK      default aiinfra.datapath.local (the installed collection's local.yml)
#   DATAPATH_STATE_DIR     on the node, default /var/lib/aiinfra-datapath (last-run.json)
#   DATAPATH_ANNOTATION    node annotation set to the applied revision (empty: none)
#   DATAPATH_WORK          scratch directory in the container, default /tmp/aiinfra-datapath
#   DATAPATH_ARGS          more ansible-playbook arguments (split on blanks)
set -u

HOST_ROOT=${DATAPATH_HOST_ROOT:-/host}
STATE_DIR=${DATAPATH_STATE_DIR:-/var/lib/aiinfra-datapath}
WORK=${DATAPATH_WORK:-/tmp/aiinfra-datapath}
PLAYBOOK=${DATAPATH_PLAYBOOK:-aiinfra.datapath.local}
LAST_RUN=${HOST_ROOT%/}$STATE_DIR/last-run.json

say() { printf '%s datapath-pull-pod: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

ready() {
    # the readiness probe: this pod's last run succeeded (a new pod is not ready before its first
    # run ends, so a rolling update waits for it), and so did the node's last run, whatever ran it
    [ "$(cat "$WORK/last-status" 2>/dev/null)" = 0 ] && [ -r "$LAST_RUN" ] \
        && grep -q '"result": "succeeded"' "$LAST_RUN"
}

# a full commit id (SHA-1 or SHA-256): nobody can move it
pinned() {
    case $1 in
        *[!0-9a-f]*) return 1 ;;
    esac
    [ "${#1}" -eq 40 ] || [ "${#1}" -eq 64 ]
}

# git: the checked-out commit is the pinned one, or signed by one of DATAPATH_VERIFY_KEYS (a keyring of
# this pod's own, rebuilt every time); nothing else runs as root on the node
verify() {
    head=$(git -C "$1" rev-parse HEAD) || return 1
    if pinned "$DATAPATH_REVISION"; then
        [ "$head" = "$DATAPATH_REVISION" ] || { say "checked out $head, not the pinned commit $DATAPATH_REVISION"; return 1; }
        [ -n "${DATAPATH_VERIFY_KEYS:-}" ] || return 0
    fi
    if [ -n "${DATAPATH_VERIFY_KEYS:-}" ]; then
        keyring=$WORK/gnupg
        rm -rf "$keyring" && mkdir -m 0700 "$keyring" || return 1
        for key in "$DATAPATH_VERIFY_KEYS"/*.asc; do
            [ -r "$key" ] || { say "no public key (*.asc) in $DATAPATH_VERIFY_KEYS"; return 1; }
            # its exit status also says whether an agent answered (none is needed): a key that did not go
            # in makes verify-commit fail below, so nothing unverified runs either way
            GNUPGHOME=$keyring gpg --batch --quiet --no-autostart --import "$key" 2>/dev/null || :
        done
        if ! GNUPGHOME=$keyring git -C "$1" verify-commit "$head" 2>"$WORK/verify.err"; then
            say "commit $head of $DATAPATH_REPO_URL is not signed by a key of $DATAPATH_VERIFY_KEYS; nothing was run"
            sed 's/^/    /' "$WORK/verify.err" >&2
            return 1
        fi
        return 0
    fi
    [ "${DATAPATH_ALLOW_UNVERIFIED:-}" = true ] && return 0
    say "refusing to run $DATAPATH_REVISION of $DATAPATH_REPO_URL unverified: set DATAPATH_VERIFY_KEYS or pin a commit"
    return 1
}

# git: a clone of the repository at DATAPATH_REVISION in $WORK/repo, verified; prints the commit
checkout() {
    repo=$WORK/repo
    if [ ! -d "$repo/.git" ]; then
        rm -rf "$repo" && git clone --quiet --no-checkout "$DATAPATH_REPO_URL" "$repo" || return 1
    fi
    git -C "$repo" fetch --quiet origin "$DATAPATH_REVISION" || return 1
    git -C "$repo" checkout --quiet --force --detach FETCH_HEAD || return 1
    verify "$repo" || return 1
    git -C "$repo" rev-parse HEAD
}

annotate() {
    # the applied revision on the Node object, through the API with the pod's service account
    [ -n "${DATAPATH_ANNOTATION:-}" ] || return 0
    if [ -z "${KUBERNETES_SERVICE_HOST:-}" ]; then
        say "not in a cluster: node annotation $DATAPATH_ANNOTATION not set"
        return 0
    fi
    python3 - "$NODE_NAME" "$DATAPATH_ANNOTATION" "$1" <<'PY' || say "could not annotate node $NODE_NAME"
import json, os, ssl, sys, urllib.request
node, key, value = sys.argv[1:4]
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
with open(sa + "/token") as handle:
    token = handle.read().strip()
host = os.environ["KUBERNETES_SERVICE_HOST"]
host = "[%s]" % host if ":" in host else host
url = "https://%s:%s/api/v1/nodes/%s" % (host, os.environ.get("KUBERNETES_SERVICE_PORT", "443"), node)
body = json.dumps({"metadata": {"annotations": {key: value}}}).encode()
request = urllib.request.Request(url, data=body, method="PATCH", headers={
    "Authorization": "Bearer " + token, "Content-Type": "application/merge-patch+json"})
urllib.request.urlopen(request, context=ssl.create_default_context(cafile=sa + "/ca.crt"), timeout=30).read()
PY
}

once() {
    : "${NODE_NAME:?NODE_NAME is not set (downward API spec.nodeName)}"
    mkdir -p "$WORK" || return 1
    revision=${DATAPATH_REVISION:-}
    case ${DATAPATH_SOURCE:-configmap} in
        git)
            : "${DATAPATH_REPO_URL:?DATAPATH_REPO_URL is not set}" "${DATAPATH_REVISION:=main}"
            revision=$(checkout) || { say "cannot check out $DATAPATH_REVISION of $DATAPATH_REPO_URL"; return 1; }
            inventory=$WORK/repo/${DATAPATH_INVENTORY:?DATAPATH_INVENTORY is not set} ;;
        configmap)
            inventory=${DATAPATH_INVENTORY:-/etc/aiinfra-datapath/inventory} ;;
        *)
            say "DATAPATH_SOURCE must be configmap or git"; return 2 ;;
    esac
    # The node reached through its mounted root: the chroot connection (host variables of this
    # second inventory source win over the first's for this node)
    if [ "$HOST_ROOT" = / ]; then
        connection='"ansible_connection": "local"'
    else
        connection='"ansible_connection": "community.general.chroot", "ansible_host": "'"$HOST_ROOT"'"'
    fi
    printf '{"all": {"hosts": {"%s": {%s}}}}\n' "$NODE_NAME" "$connection" > "$WORK/pod.yml"
    say "applying the plan of $NODE_NAME at revision ${revision:-unknown} ($inventory)"
    # shellcheck disable=SC2086  # DATAPATH_ARGS is a list of words
    ansible-playbook -i "$inventory" -i "$WORK/pod.yml" --limit "$NODE_NAME,localhost" \
        -e "datapath_node_name=$NODE_NAME" -e "datapath_pull_state_dir=$STATE_DIR" \
        -e "{\"datapath_pull_revision\": \"$revision\"}" ${DATAPATH_ARGS:-} "$PLAYBOOK"
    rc=$?
    if [ "$rc" -eq 0 ]; then
        annotate "$revision"
    else
        say "the run failed (exit status $rc); $LAST_RUN says why"
    fi
    return "$rc"
}

# one run, its exit status kept for the readiness probe (also when it failed before the playbook)
run_once() {
    once
    rc=$?
    mkdir -p "$WORK" && echo "$rc" > "$WORK/last-status"
    return "$rc"
}

case ${1:-run} in
    ready) ready ;;
    once) run_once ;;
    run)
        while :; do
            run_once
            [ "${DATAPATH_INTERVAL:-1800}" -gt 0 ] || exit 0
            sleep "${DATAPATH_INTERVAL:-1800}"
        done ;;
    *) echo "usage: $0 run|once|ready" >&2; exit 2 ;;
esac
