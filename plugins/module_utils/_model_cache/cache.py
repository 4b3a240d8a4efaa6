# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model cache capability (stdlib only): versioned, verified model artifacts on the node's cache.

``ModelCache`` follows the capability contract (``_capability.py``):

* ``read``: resolves every model's files (listed, or read from its manifest) and sizes (given,
  ``HEAD`` or ``stat``), decides whether the version is present, missing, corrupt or to be
  adopted, and reads the ``current`` pointers, the installed versions and the free space;
* ``plan``: the actions, in the order ``apply`` does them: ``create`` the cache directory,
  ``evict`` least-recently-used unpinned versions while the bytes to fetch would leave less
  than the reserve free (or fail before anything is downloaded), ``replace``/``fetch`` or
  ``adopt`` each version, then ``switch`` the ``current`` pointers;
* ``apply``: does them (the verified copy is in ``transfer``, the layout on disk in ``layout``).

Updating ``last_used`` of a present version is bookkeeping, not an action: ``changed`` stays
false. The lock is the cache's own (``lock_file``), not the node lock: the cache directory is
an absolute path on the node, not below a node root.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re
import time

from urllib.parse import quote

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Action, Capability
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.layout import (
    MOUNTINFO,
    CacheDir,
    check_mount,
    iso_time,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.sources import (
    ModelCacheError,
    make_source,
    normalise_files,
    normalise_models,
    parse_manifest,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.peer import PeerSource
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.safe import DirFd
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.transfer import STAGES, Transfer

MODEL_CACHE_LOCK_PATH = "/run/aiinfra-datapath-model-cache.lock"
CURRENT_SECTION = "current versions"  # the diff section of the switch actions


def free_bytes(path):
    """Bytes an unprivileged writer may still use on the filesystem holding ``path``.

    Every free-space figure of the capability is read through this function (the seam unit
    tests replace to model a small filesystem).
    """
    while not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fs_bytes(path):
    """Size of the filesystem holding ``path`` (the default reserve is a share of it)."""
    while not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


# The reserve when none is given: 1 % of the cache filesystem, at least 64 MiB and at most 4 GiB,
# never 0: an endless body or a wrong size stops there instead of filling the node's disk.
DEFAULT_RESERVE_SHARE = 0.01
DEFAULT_RESERVE_MIN = 64 << 20
DEFAULT_RESERVE_MAX = 4 << 30


_PEER_URL = re.compile(r"\Ahttp://(\[[0-9A-Fa-f:.]{2,45}\]|[0-9]{1,3}(\.[0-9]{1,3}){3}):[0-9]{1,5}\Z")


def check_peers(peers, token):
    """The planned peers (``[{name, url}]``, url ``http://<fabric address>:<port>``) and the run's token."""
    if not peers:
        return []
    if not token or len(token) < 16:
        raise ModelCacheError("peers need peer_token, the run's token (16 characters or more): a peer server "
                              "answers nobody without it")
    out = []
    for peer in peers:
        url = str(peer.get("url") or "").rstrip("/")
        if not _PEER_URL.match(url):
            raise ModelCacheError("peer %s: url %r is not http://<fabric address>:<port> (an IP address: peers are "
                                  "reached on the fabric, without names, paths or credentials)"
                                  % (peer.get("name"), peer.get("url")))
        out.append(dict(name=str(peer["name"]), url=url))
    return out


def default_reserve(path):
    return int(min(max(fs_bytes(path) * DEFAULT_RESERVE_SHARE, DEFAULT_RESERVE_MIN), DEFAULT_RESERVE_MAX))


def switch_action(name, before, after):
    return Action("switch", "%s/current" % name, "switch %s/current: %s -> %s" % (name, before, after),
                  before=before, after=after, diff=CURRENT_SECTION, name=name)


def time_split(split, elapsed):
    """``stage_seconds`` (where a fetch's ``elapsed`` seconds went, by :data:`STAGES`; ``other``
    is what the copies' own stages leave: requests, opening files, retries' pauses) and
    ``bottleneck``, the stage that took the most (None for a run that took no time)."""
    stages = dict((stage, round(max(split.get(stage, 0.0), 0.0), 3)) for stage in STAGES if stage != "other")
    stages["other"] = round(max(elapsed - sum(split.get(stage, 0.0) for stage in stages), 0.0), 3)
    bottleneck = max(STAGES, key=lambda stage: stages[stage]) if elapsed > 0 and any(stages.values()) else None
    return dict(stage_seconds=stages, bottleneck=bottleneck)


class ModelCache(Capability):
    """Fill one models directory with the declared versions: read -> plan -> apply."""

    name = "model_cache"
    uses_root = False  # the cache directory is an absolute path on the node (option cache_dir)
    mountinfo = MOUNTINFO

    @classmethod
    def options(cls):
        return dict(
            cache_dir=dict(type="path", required=True, aliases=["root"], deprecated_aliases=[
                dict(name="root", version="1.0.0", collection_name="aiinfra.datapath")]),
            require_mount=dict(type="path"),
            models=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                version=dict(type="str", required=True),
                source=dict(type="str", required=True),
                files=dict(type="list", elements="dict", default=[], options=dict(
                    path=dict(type="str", required=True),
                    sha256=dict(type="str", required=True),
                    size=dict(type="int"),
                )),
                manifest=dict(type="str"),
                manifest_sha256=dict(type="str"),
            )),
            pinned=dict(type="list", elements="str", default=[]),
            reserve_bytes=dict(type="int"),
            bandwidth_limit=dict(type="int", default=0),
            evict=dict(type="bool", default=True),
            verify_existing=dict(type="str", choices=["size", "sha256"], default="size"),
            headers=dict(type="dict", default={}, no_log=True),
            s3=dict(type="dict", options=dict(
                endpoint_url=dict(type="str"),
                region=dict(type="str", default="us-east-1"),
                access_key=dict(type="str", no_log=False),
                secret_key=dict(type="str", no_log=True),
                session_token=dict(type="str", no_log=True),
            )),
            timeout=dict(type="int", default=30),
            retries=dict(type="int", default=3),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            file_mode=dict(type="str", default="0644"),
            dir_mode=dict(type="str", default="0755"),
            lock_file=dict(type="path", default=MODEL_CACHE_LOCK_PATH),
            peers=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                url=dict(type="str", required=True),
            )),
            peer_token=dict(type="str", no_log=True),
        )

    def lock_file(self):
        """The cache's own lock (an absolute node path), held in check mode as in a real run."""
        return self.params.get("lock_file") or MODEL_CACHE_LOCK_PATH

    def validate(self):
        params = self.params
        cache_dir = params.get("cache_dir")
        if not cache_dir or not cache_dir.startswith("/"):
            raise ModelCacheError("cache_dir must be an absolute path, got %r" % (cache_dir,))
        for key in ("reserve_bytes", "bandwidth_limit", "retries"):
            if int(params.get(key) or 0) < 0:
                raise ModelCacheError("%s must not be negative" % key)
        modes = {}
        for key, default in (("file_mode", "0644"), ("dir_mode", "0755")):
            value = params.get(key)
            try:
                modes[key] = int(str(value or default), 8)
            except ValueError:
                raise ModelCacheError("%s %r is not an octal mode" % (key, value))
            if modes[key] & ~0o777 or modes[key] & 0o022:
                raise ModelCacheError(
                    "%s %s would let group or others change the published models (or is not a plain 0-0777 mode); "
                    "use a mode without group and other write, e.g. %s" % (key, value, default))
        self.items, self.pins = normalise_models(params.get("models"), params.get("pinned"))
        reserve = params.get("reserve_bytes")
        self.reserve = default_reserve(cache_dir) if reserve is None else int(reserve)
        self.warn_insecure_sources()
        self.peers = check_peers(params.get("peers") or [], params.get("peer_token"))
        self.cache = CacheDir(cache_dir, file_mode=modes["file_mode"], dir_mode=modes["dir_mode"])
        retries = params.get("retries")
        self.transfer = Transfer(retries=3 if retries is None else retries,
                                 rate=int(params.get("bandwidth_limit") or 0),
                                 dir_mode=modes["dir_mode"], warn=self.warn)

    def warn_insecure_sources(self):
        """What a man in the middle could choose, said once per run (the sha256 of every file still holds)."""
        params = self.params
        if params.get("validate_certs") is False and any(i["kind"] in ("http", "s3") for i in self.items):
            self.warn("validate_certs is false: the TLS certificates of the model sources are not checked, so "
                      "anyone on the path can answer for them (the files' sha256 still has to match)")
        endpoint = ((params.get("s3") or {}).get("endpoint_url") or "")
        for item in self.items:
            if not item["manifest"] or item["manifest_sha256"]:
                continue
            plain = (item["kind"] == "http" and item["source"].startswith("http://")) or (
                item["kind"] == "s3" and endpoint.startswith("http://"))
            unchecked = item["kind"] in ("http", "s3") and params.get("validate_certs") is False
            if plain or unchecked:
                self.warn("%s: the manifest %s is read %s without manifest_sha256: whoever can change that "
                          "traffic chooses the files and checksums; pin it with manifest_sha256"
                          % (item["what"], item["manifest"],
                             "over plain http" if plain else "without certificate checks"))

    # ---- read
    def read(self):
        cache_dir = self.params["cache_dir"]
        parent = os.path.dirname(cache_dir.rstrip("/"))
        if not os.path.isdir(parent):
            raise ModelCacheError("the parent of cache_dir, %s, does not exist (is the cache filesystem mounted?)"
                                  % parent)
        if self.params.get("require_mount"):
            check_mount(cache_dir, self.params["require_mount"], self.mountinfo)
        with DirFd(self.cache.root()) as root:  # refuses a tree others can write, or a link for it
            created = root is None
        verify = self.params.get("verify_existing") or "size"
        models = []
        for item in self.items:
            source = make_source(item, self.params)
            if self.peers:
                # peer fan-out: the planned peers first, the origin last; every byte verified as from the origin
                source = PeerSource([(p["name"], "%s/%s/%s" % (p["url"], quote(item["name"]), quote(item["version"])))
                                     for p in self.peers], source, self.params["peer_token"],
                                    timeout=self.params.get("timeout") or 30)
            files, manifest_sha = self.resolve_files(item, source)
            status, reason, records = self.cache.check_existing(item, files, verify)
            model = dict(item=item, source=source, files=files, manifest_sha256=manifest_sha, state=status,
                         reason=reason, fetch=[], needed=0, outcome=None, records=records)
            if status in ("missing", "corrupt"):
                for entry in files:
                    size = entry["size"]
                    if size is None:
                        size = self.transfer.retry(lambda e=entry, s=source: s.size(e["path"]), item, entry["path"])
                    have = self.cache.part_size(item, entry["path"])
                    if size is None:
                        todo = 0
                    else:
                        todo = max(size - have, 0) if have <= size else size
                    model["fetch"].append(dict(entry, expected_size=size, have=have))
                    model["needed"] += todo
            models.append(model)
        current = dict((item["name"], self.cache.current(item["name"])) for item in self.items)
        keep = set((item["name"], item["version"]) for item in self.items)
        return dict(created=created, models=models, current=current, installed=self.cache.installed(),
                    stray=self.cache.stray_parts(keep), free=free_bytes(self.cache.path))

    def resolve_files(self, item, source):
        """The requested files of an item; reads the manifest when files are not given."""
        if item["files"]:
            return item["files"], None
        meta = self.cache.meta(item["name"], item["version"])
        if (item["manifest_sha256"] and isinstance(meta, dict)
                and meta.get("manifest_sha256") == item["manifest_sha256"] and meta.get("files")):
            # a pinned manifest that was already used: no network I/O for a present version
            return normalise_files(meta["files"], item["what"]), item["manifest_sha256"]
        raw = self.transfer.retry(lambda: source.read_small(item["manifest"]), item, item["manifest"])
        actual = hashlib.sha256(raw).hexdigest()
        if item["manifest_sha256"] and actual != item["manifest_sha256"]:
            raise ModelCacheError(
                "%s: manifest %s has sha256 %s, expected %s (nothing was published)"
                % (item["what"], source.describe(item["manifest"]), actual, item["manifest_sha256"]),
                model=item["name"], version=item["version"], file=item["manifest"],
                expected_sha256=item["manifest_sha256"], actual_sha256=actual)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelCacheError("%s: manifest %s is not UTF-8 text" % (item["what"], item["manifest"]))
        return parse_manifest(text, "%s manifest %s" % (item["what"], item["manifest"])), actual

    # ---- plan
    def plan(self, state):
        """create, evictions, per version replace/fetch or adopt, then the switches."""
        head = []
        if state["created"]:
            head.append(Action("create", self.cache.path, "create %s" % self.cache.path, after="directory",
                               diff=False))
        last = {}
        for item in self.items:
            last[item["name"]] = item["version"]
        work = []
        needed = 0
        for model in state["models"]:
            item = model["item"]
            key = "%s@%s" % (item["name"], item["version"])
            if model["state"] in ("missing", "corrupt"):
                needed += model["needed"]
                before = None
                if model["state"] == "corrupt":
                    before = "corrupt"
                    work.append(Action("replace", key, "replace %s: %s" % (key, model["reason"]),
                                       before=before, after="published", diff=False))
                work.append(Action("fetch", key, "fetch %s from %s: %d files, %d bytes to move" % (
                    key, item["source"], len(model["files"]), model["needed"]),
                    before=before, after="published", diff=False, model=model))
            elif model["state"] == "adopt":
                work.append(Action("adopt", key, "adopt %s: files already in place and verified" % key,
                                   before="unrecorded", after="published", diff=False, model=model))
        switches = [switch_action(name, state["current"][name], last[name]) for name in sorted(last)
                    if state["current"][name] != last[name]]
        evictions = self.plan_evictions(state, needed, set(last), head + work + switches)
        return head + evictions + work + switches

    def plan_evictions(self, state, needed, names, planned):
        """Make ``needed`` fit above the reserve: first the partial downloads of versions no longer
        asked for, then least-recently-used unpinned versions."""
        free = state["free"]
        deficit = needed + self.reserve - free
        if deficit <= 0 or not needed:
            return []
        discards = []
        for stray in state.get("stray") or []:
            if deficit <= 0:
                break
            key = stray["name"] if stray["version"] is None else "%s@%s" % (stray["name"], stray["version"])
            discards.append(Action("discard", key, "discard the partial download %s (%d bytes, no longer asked for)"
                                   % (key, stray["bytes"]), before="partial", after=None, diff=False, stray=stray))
            deficit -= stray["bytes"]
        if deficit <= 0:
            return discards
        candidates = [v for v in state["installed"] if (v["name"], v["version"]) not in self.pins]
        candidates.sort(key=lambda v: (v["last_used"], v["name"], v["version"]))
        evictable = sum(v["bytes"] for v in candidates)
        allowed = self.params.get("evict", True)
        if not allowed or evictable < deficit:
            raise ModelCacheError(
                "not enough space on the cache filesystem of %s: need %d bytes, %d free, reserve %d, "
                "%d bytes evictable in %d unpinned versions%s; nothing was downloaded"
                % (self.cache.path, needed, free, self.reserve, evictable if allowed else 0,
                   len(candidates) if allowed else 0, "" if allowed else " (evict is false)"),
                needed_bytes=needed, free_bytes=free, reserve_bytes=self.reserve,
                evictable_bytes=evictable, actions=[action.public() for action in planned])
        actions = []
        freed = 0
        for version in candidates:
            if freed >= deficit:
                break
            name = version["name"]
            if version["current"] and name not in names:
                # the pointer goes with the version (a listed model's pointer is switched anyway)
                actions.append(switch_action(name, version["version"], None))
            key = "%s@%s" % (name, version["version"])
            actions.append(Action("evict", key, "evict %s (%d bytes, last used %s)" % (
                key, version["bytes"], iso_time(version["last_used"])),
                before="published", after=None, destructive=True, diff=False, version=version))
            freed += version["bytes"]
        return discards + actions

    # ---- apply
    def needs_apply(self, state, actions):
        # present versions get their last_used updated even when nothing else is to do
        return bool(actions) or any(model["state"] == "present" for model in state["models"])

    def apply(self, state, actions):
        for model in state["models"]:
            if model["state"] == "present":
                self.cache.touch(model["item"], model.get("records"))
        for action in actions:
            if action.kind == "create":
                self.cache.create()
            elif action.kind == "discard":
                self.cache.discard_staged(action.data["stray"]["name"], action.data["stray"]["version"])
            elif action.kind == "evict":
                self.cache.evict(action.data["version"]["name"], action.data["version"]["version"])
            elif action.kind == "fetch":
                self.fetch_and_publish(action.data["model"])
            elif action.kind == "adopt":
                self.adopt(action.data["model"])
            elif action.kind == "switch":
                if action.after is None:
                    self.cache.unpoint(action.data["name"], action.before)
                else:
                    self.cache.switch(action.data["name"], action.after)
            # "replace": the fetch that follows it replaces the version

    def space_check(self, n):
        # statvfs is cheap next to a multi-MiB write; checked per buffer
        free = free_bytes(self.cache.path)
        if free - n < self.reserve:
            raise ModelCacheError(
                "stopped writing: free space on the cache filesystem of %s would drop below the reserve "
                "(%d free, writing %d, reserve %d); nothing was published, the partial file is kept for resume"
                % (self.cache.path, free, n, self.reserve), free_bytes=free, reserve_bytes=self.reserve)

    def fetch_and_publish(self, model):
        item = model["item"]
        staging = self.cache.staging_dir(item["name"], item["version"])
        staging_fd = self.cache.open_staging(item, create=True)
        try:
            self._fetch_into(model, item, staging, staging_fd)
        finally:
            os.close(staging_fd)

    def _fetch_into(self, model, item, staging, staging_fd):
        started = time.monotonic()
        outcome = dict(bytes_moved=0, resumed_bytes=0, seconds=0.0, throughput_bytes_per_s=0)
        split = dict.fromkeys(STAGES, 0.0)
        final = []
        for entry in model["fetch"]:
            moved, resumed, size = self.transfer.fetch_file(item, model["source"], staging_fd, entry,
                                                            space_check=self.space_check, split=split,
                                                            staging_path=staging)
            outcome["bytes_moved"] += moved
            outcome["resumed_bytes"] += resumed
            final.append(dict(path=entry["path"], sha256=entry["sha256"], size=size))
        elapsed = time.monotonic() - started
        outcome["seconds"] = round(elapsed, 3)
        if outcome["seconds"] > 0:
            outcome["throughput_bytes_per_s"] = int(outcome["bytes_moved"] / outcome["seconds"])
        outcome.update(time_split(split, elapsed))
        source = model["source"]
        if getattr(source, "kind", None) == "peers":
            outcome["sources"] = dict((e["path"], source.sources.get(e["path"], [])) for e in model["fetch"])
            outcome["excluded_peers"] = sorted(source.excluded)
        else:
            outcome["sources"] = dict((e["path"], [{"from": "origin", "at": e.get("have") or 0}])
                                      for e in model["fetch"])
        # every file verified: drop the suffixes, fix modes, fsync the tree, then publish
        records = self.cache.publish(item, final)
        outcome["files"] = final
        self.cache.write_meta(item, model["manifest_sha256"], final, verified=records)
        self.cache.move_into_place(item)
        model["outcome"] = outcome

    def adopt(self, model):
        item = model["item"]
        records = model.get("records") or {}
        # every file was hashed just now (check_existing): its record holds the size it was verified at
        self.cache.write_meta(item, model["manifest_sha256"], [
            dict(f, size=records[f["path"]][1]) for f in model["files"]], verified=records)

    # ---- result
    def result(self, state, actions):
        models = []
        for model in state["models"]:
            item = model["item"]
            entry = dict(name=item["name"], version=item["version"],
                         path=self.cache.version_dir(item["name"], item["version"]),
                         files=[dict(path=f["path"], sha256=f["sha256"], size=f["size"]) for f in model["files"]],
                         bytes_moved=0, resumed_bytes=0, seconds=0.0, throughput_bytes_per_s=0,
                         stage_seconds=dict.fromkeys(STAGES, 0.0), bottleneck=None, sources={},
                         excluded_peers=[])
            if model["state"] == "present":
                entry["status"] = "present"
            elif self.check_mode:
                entry["status"] = "would_publish"
            else:
                entry.update(model["outcome"] or {})
                entry["status"] = "published"
            models.append(entry)
        evicted = [dict(name=a.data["version"]["name"], version=a.data["version"]["version"],
                        bytes=a.data["version"]["bytes"]) for a in actions if a.kind == "evict"]
        return dict(models=models, evicted=evicted, free_bytes=free_bytes(self.cache.path),
                    reserve_bytes=self.reserve)
