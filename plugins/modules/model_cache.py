#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_cache
short_description: Place versioned, verified model artifacts on the node's local cache filesystem
version_added: 0.1.0
requirements:
  - "Python 3 on the node (standard library only); HTTP(S) and S3 are built in"
description:
  - Fills a models directory on the node's cache filesystem (the local NVMe laid out by
    M(aiinfra.datapath.nvme_layout)) with the declared model versions before workloads need
    them, in one call per node.
  - "Flow: validate every model; resolve its files (O(models[].files), or the O(models[].manifest)
    read from the source); decide per version whether it is present, must be fetched or
    replaced; compute the bytes still to move and the space, evicting least-recently-used
    unpinned versions when needed; then, outside check mode, fetch, verify, publish and switch
    the C(current) pointers."
  - B(Layout.) C(<cache_dir>/<name>/<version>/) holds a published version and is never modified
    after publishing; C(<cache_dir>/<name>/current) is a relative symlink to the version in use,
    switched atomically (new symlink, then rename); C(<cache_dir>/<name>/.versions/<version>.json)
    holds the metadata (files, sha256, sizes, bytes, published_at, last_used); partial
    downloads live in C(<cache_dir>/.staging/<name>/<version>/<path>.part).
  - B(Verified while writing.) The sha256 of each file is computed in the same pass that
    writes it (a reader, a hasher and a writer overlap on large buffers, so verifying costs
    little over a plain copy). A checksum mismatch fails the model, deletes the bad partial
    file, publishes nothing and names the model, the file, the expected and the actual sha256.
  - B(Resume.) A partial file left by an interrupted run (or an interrupted transfer within
    this run, up to O(retries) times) is re-hashed locally and the download continues with
    C(Range) (HTTP 206). A source that answers 200 instead restarts the file from byte 0.
  - B(Page cache.) While a file is written, what is already on the disk (flushed every 128 MiB
    in the background) and hashed leaves the page cache (C(POSIX_FADV_DONTNEED)); a copy keeps its
    last 128 MiB or so cached (from a local path, also what is yet to be hashed), so warming a
    model larger than the node's memory does not push the node's working set out, and the copy
    reuses the pages it just freed. A model server then reads the model from the local disk, the
    cache's purpose.
  - B(Atomic publish.) Files are fsynced, the staging version directory is renamed to
    C(<cache_dir>/<name>/<version>) (same filesystem), then C(current) is switched. A reader never
    sees a half-written version.
  - B(Space.) Before downloading, the bytes still to fetch (from O(models[].files[].size),
    else HTTP C(HEAD) Content-Length or C(stat)) are compared with the free space
    (C(statvfs) f_bavail * f_frsize). When free minus needed would drop below
    O(reserve_bytes), least-recently-used unpinned versions are evicted (oldest C(last_used)
    first) until it fits; when it still does not fit, the module fails before downloading
    anything, with the needed, free, reserve and evictable figures. While writing, it also
    stops when the free space would drop below the reserve (for files of unknown size); the
    partial file is kept for the next run.
  - B(Idempotent.) A published version whose metadata lists the requested files and whose
    files pass O(verify_existing) is C(present); no network I/O is done for it (except
    reading a manifest that O(models[].manifest_sha256) does not pin) and C(changed) stays
    false. Updating C(last_used) alone is not a change.
  - Holds the cache lock (O(lock_file)) for the whole run, in check mode as in a real run.
  - B(Hostile neighbours.) Every path below O(cache_dir) is opened without following symbolic
    links (directory descriptors walked with C(O_NOFOLLOW|O_DIRECTORY), a new C(.part) created
    with C(O_EXCL), modes set with C(fchmod)); a link where the cache expects a directory or a
    file fails the run naming it. O(cache_dir) and every directory below it must be owned by
    the user the module runs as and not writable by group or others, the directories above it
    owned by root (or that user) and not writable by others unless sticky; otherwise the module
    fails and changes nothing. C(.staging) is mode 0700. Redirects are followed only to http(s),
    never from https to http, at most 5; to another origin without C(Authorization), C(X-Amz-*)
    or O(headers) (a signed S3 request is refused there). A Content-Length that is not a
    non-negative number, a body longer than the file's size and a manifest over 16 MiB fail
    with a message. See docs/security.md.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Resolves files and sizes (reads manifests, sends C(HEAD) requests), reports
      what would be fetched, evicted and switched, and creates, writes or deletes nothing below
      O(cache_dir). It takes the cache lock (O(lock_file)) as a real run does.
  diff_mode:
    support: full
    description: Shows each C(current) pointer the run switches (or removes with an evicted
      version) before and after, in one section C(current versions).
  platform:
    support: full
    platforms: posix
    description: Linux nodes; Python 3 standard library only.
options:
  cache_dir:
    description:
      - The models directory on the cache filesystem, for example C(/mnt/model-cache/models).
        An absolute path on the node (this module has no node root).
      - Created (mode O(dir_mode)) when missing; its parent must exist.
      - It must be owned by the user the module runs as and not writable by group or others,
        and so must every directory below it; never hand it to pods read-write.
      - C(root) is a deprecated alias (removed in 1.0.0); in the other modules of this collection
        C(root) means the node's filesystem root.
    type: path
    required: true
    aliases: [root]
  require_mount:
    description:
      - When set, the module refuses (fails and changes nothing) unless this path is a mount
        point (from C(/proc/self/mountinfo)) and O(cache_dir) is below it, so that an unmounted
        cache never fills the root filesystem.
    type: path
  models:
    description:
      - The model versions this node holds. Each is pinned (never evicted).
      - When a name is listed with several versions, C(current) points to the last one listed.
      - May be empty (only O(pinned) and eviction bookkeeping then apply).
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Model name, C(^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$), not C(current).
        type: str
        required: true
      version:
        description: Version, same pattern as O(models[].name).
        type: str
        required: true
      source:
        description:
          - Where the files are. C(/abs/dir) or C(file:///abs/dir) (a local or shared
            filesystem), C(http://host[:port]/prefix) or C(https://...), or
            C(s3://bucket/prefix) (see O(s3)).
          - A file's location is the source, C(/) and the file's path.
        type: str
        required: true
      files:
        description:
          - The files of the version. When empty, O(models[].manifest) is read instead.
        type: list
        elements: dict
        default: []
        suboptions:
          path:
            description: Relative path (no C(..), no leading C(/), not ending in C(.part)).
            type: str
            required: true
          sha256:
            description: Expected sha256, 64 lowercase hex characters.
            type: str
            required: true
          size:
            description: Size in bytes, or null to ask the source (C(HEAD), C(stat)).
            type: int
      manifest:
        description:
          - Relative path below the source of a C(sha256sum)-format file (C(<hex>  <path>)
            lines) listing the files; used when O(models[].files) is empty.
        type: str
      manifest_sha256:
        description:
          - Pins the manifest itself. A manifest with another sha256 fails the model.
          - With it, a present version needs no network I/O at all.
        type: str
  pinned:
    description: Extra versions, as C(name@version), that are never evicted.
    type: list
    elements: str
    default: []
  reserve_bytes:
    description:
      - Free bytes always kept on the cache filesystem.
      - Unset, 1% of the cache filesystem, at least 64 MiB and at most 4 GiB (never 0, so that a
        wrong size or an endless body stops before the disk is full). V(0) keeps no reserve.
      - When space is short, partial downloads of versions no longer asked for are removed
        (V(discard) actions) before any published version is evicted.
    type: int
  bandwidth_limit:
    description:
      - Per-node cap in bytes per second for the data read from the sources (a token
        bucket in the copy loop); C(0) is unlimited.
      - The cluster-wide limit is the number of nodes warming at once (C(throttle) in the
        role) times this cap.
    type: int
    default: 0
  evict:
    description: Whether least-recently-used unpinned versions may be evicted to honour O(reserve_bytes).
    type: bool
    default: true
  verify_existing:
    description:
      - How an already published version is re-checked. C(size) compares sizes and what was
        recorded of each file when it was verified (inode, size, mtime, ctime), and re-hashes a
        file where any of it differs (bytes swapped for others of the same size are found);
        C(sha256) re-hashes every file (reads the whole version). A version that fails is
        fetched again and replaces the bad one.
      - Metadata written before this record existed has none; each such file is re-hashed once
        and its record kept.
    type: str
    choices: [size, sha256]
    default: size
  headers:
    description: Extra HTTP request headers (for example an C(Authorization) token).
    type: dict
    default: {}
  s3:
    description: Settings of C(s3://) sources. Requests are path-style and signed with AWS Signature Version 4.
    type: dict
    suboptions:
      endpoint_url:
        description: The S3 endpoint, for example C(https://minio.storage.example:9000).
          Default C(https://s3.<region>.amazonaws.com).
        type: str
      region:
        description: Region of the signature.
        type: str
        default: us-east-1
      access_key:
        description: Access key id; without it requests are sent unsigned (public buckets).
        type: str
      secret_key:
        description: Secret access key.
        type: str
      session_token:
        description: Session token of temporary credentials (sent as C(X-Amz-Security-Token)).
        type: str
  timeout:
    description: Seconds to wait on a network connection or read.
    type: int
    default: 30
  retries:
    description:
      - How often a transient source error (connection reset, short read, timeout, HTTP 5xx
        or 429) is retried; each retry resumes where the transfer stopped.
    type: int
    default: 3
  validate_certs:
    description:
      - Whether HTTPS certificates are verified. V(false) prints a warning, and so does a
        manifest read over plain http (or without certificate checks) that
        O(models[].manifest_sha256) does not pin.
    type: bool
    default: true
  ca_path:
    description: CA bundle file or directory for HTTPS sources.
    type: path
  file_mode:
    description:
      - Mode of published files (octal string); a mode that lets group or others write is refused.
    type: str
    default: "0644"
  dir_mode:
    description:
      - Mode of the directories the module creates (octal string); a mode that lets group or others
        write is refused.
    type: str
    default: "0755"
  lock_file:
    description:
      - The lock held for the whole run, so that two warm-ups of one node never interleave.
      - It is the cache's own lock, not the node lock of the other modules, which would make
        a C(site.yml) run wait for a long download and fail. The warm-up touches nothing those
        modules manage (only files below O(cache_dir)).
      - Taken in check mode too, so that a check never plans against a cache another run is changing.
    type: path
    default: /run/aiinfra-datapath-model-cache.lock
  peers:
    description:
      - Peer fan-out (docs/models.md, "Peer fan-out"). Nodes that already published a version and serve it
        read-only to this node, in the order to try them (the controller's wave plan, rack-local first). Each
        file is read from the first peer that answers; the origin (O(models[].source)) is the last resort.
      - Every byte is verified against O(models[].files[].sha256) as from the origin. A peer whose bytes fail
        verification is excluded for the rest of the run and named in C(excluded_peers) of RV(models), and the file
        is fetched again, whole, from the next peer or the origin. A peer that dies mid-transfer costs a
        C(Range) resume from the next one, never a failed version.
      - Peers get the run's token (O(peer_token)) and nothing else; O(headers) and O(s3) credentials go to the
        origin only.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The peer's inventory name (reported in C(sources) of RV(models)).
        type: str
        required: true
      url:
        description: The peer server, C(http://<fabric address>:<port>) (an IP address; no path, no credentials).
        type: str
        required: true
  peer_token:
    description:
      - The run's token, sent to the peers as C(Authorization) C(Bearer); required with O(peers). At least 16
        characters; a peer server answers nobody without it.
    type: str
notes:
  - Eviction deletes whole versions that no O(models) entry and no O(pinned) entry names. A
    version is only ever evicted when its metadata exists (a directory placed by hand below
    O(cache_dir) is never deleted).
  - The cache lock (O(lock_file)) is held for the whole download; a second warm-up of the
    same node waits for it (up to 60 s) and then fails with a clear message.
seealso:
  - module: aiinfra.datapath.nvme_layout
"""

EXAMPLES = r"""
- name: Warm the node's cache from the plan
  aiinfra.datapath.model_cache:
    cache_dir: "{{ datapath_plan.model_cache.cache_dir }}"
    require_mount: "{{ datapath_plan.model_cache.require_mount }}"
    reserve_bytes: "{{ datapath_plan.model_cache.reserve_bytes }}"
    bandwidth_limit: "{{ datapath_plan.model_cache.bandwidth_limit }}"
    models: "{{ datapath_plan.model_cache.models }}"
  throttle: 8

- name: One model from an HTTP mirror, files listed
  aiinfra.datapath.model_cache:
    cache_dir: /mnt/model-cache/models
    require_mount: /mnt/model-cache
    reserve_bytes: 107374182400            # keep 100 GiB free
    bandwidth_limit: 500000000             # 500 MB/s per node
    models:
      - name: llama-3-8b
        version: "2024-07-01"
        source: http://mirror.storage.example/models/llama-3-8b/2024-07-01
        files:
          - {path: config.json, sha256: 0f5d3a..., size: 654}
          - {path: model-00001-of-00004.safetensors, sha256: 9a3b1c..., size: 4976698672}

- name: From S3 (MinIO), files listed by a pinned manifest
  aiinfra.datapath.model_cache:
    cache_dir: /mnt/model-cache/models
    models:
      - name: mistral-7b
        version: v0.3
        source: s3://models/mistral-7b/v0.3
        manifest: SHA256SUMS
        manifest_sha256: 4c1e8f...
    s3:
      endpoint_url: https://minio.storage.example:9000
      access_key: "{{ vault_minio_access_key }}"
      secret_key: "{{ vault_minio_secret_key }}"
    pinned: [mistral-7b@v0.2]              # keep the previous version for a rollback
"""

RETURN = r"""
models:
  description:
    - One entry per O(models) entry. C(status) is C(present), C(published) or (check mode)
      C(would_publish); C(files) lists path, sha256 and size; C(bytes_moved) counts bytes
      read from the source in this run, C(resumed_bytes) the bytes not fetched again thanks
      to a partial file or a resumed transfer; C(seconds) and C(throughput_bytes_per_s) time
      the transfer.
    - C(stage_seconds) says where the transfer's C(seconds) went, along the copy's critical path
      (they add up to C(seconds)). V(source) is waiting for the source, the socket of an HTTP or
      S3 source. V(copy) is the kernel's copy of a local file, which reads the source and writes
      the cache in one step. V(hash) is SHA-256, including a partial file hashed again before a
      resume. V(disk) is waiting for the cache's own disk, writes that are behind and the flushes
      that make the copy durable. V(limit) is the pauses of O(bandwidth_limit). V(other) is
      everything else, such as requests, opening files and the pauses between retries.
    - C(bottleneck) names the largest of them, or is null when nothing was transferred. For
      example, V(disk) on a warm-up means that a faster source would not have helped.
    - C(sources) says, per file fetched, where its bytes came from, in order - a list of C(from) (V(origin) or a
      peer's name) and C(at) (the byte it took over at; a resume after a peer died starts past 0).
      C(excluded_peers) names the peers whose bytes failed verification in this run.
  returned: always
  type: list
  elements: dict
  sample:
    - name: llama-3-8b
      version: "2024-07-01"
      status: published
      path: /mnt/model-cache/models/llama-3-8b/2024-07-01
      files: [{path: config.json, sha256: 0f5d3a..., size: 654}]
      bytes_moved: 16060522496
      resumed_bytes: 0
      seconds: 9.412
      throughput_bytes_per_s: 1706387005
      stage_seconds: {source: 3.906, copy: 0.0, hash: 1.122, disk: 4.301, limit: 0.0, other: 0.083}
      bottleneck: disk
      sources: {"config.json": [{from: gpu-node-02, at: 0}]}
      excluded_peers: []
evicted:
  description: Versions evicted (in check mode, that would be evicted) to honour the reserve.
  returned: always
  type: list
  elements: dict
  sample: [{name: llama-2-7b, version: v1, bytes: 13476839424}]
free_bytes:
  description: Free bytes on the cache filesystem after the run.
  returned: always
  type: int
  sample: 3012844969984
reserve_bytes:
  description: The reserve that was honoured.
  returned: always
  type: int
  sample: 107374182400
actions:
  description:
    - What the module did, or would do in check mode, in order (see docs/architecture.md).
      V(create) creates O(cache_dir); V(discard) removes a partial download of a version no
      longer asked for, to make room; V(evict) deletes a published version C(name@version)
      (destructive); V(replace) names a published version that failed verification and is
      fetched again; V(fetch) downloads and publishes C(name@version); V(adopt) records
      metadata for a version whose files were already in place; V(switch) moves
      C(<name>/current) from version C(before) to version C(after) (null means no pointer).
    - Each action is a dict - C(kind), C(target), C(before), C(after), C(destructive) (data is lost),
      C(reboot) (takes effect at the next boot) and C(text) (the line a person reads); see docs/architecture.md.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: evict, target: llama-2-7b@v1, before: published, after: null, destructive: true, reboot: false,
       text: "evict llama-2-7b@v1 (13476839424 bytes, last used 2024-05-02T10:00:00Z)"}
    - {kind: fetch, target: llama-3-8b@2024-07-01, before: null, after: published, destructive: false,
       reboot: false, text: "fetch llama-3-8b@2024-07-01 from http://mirror/...: 2 files, 4976699326 bytes to move"}
    - {kind: switch, target: llama-3-8b/current, before: null, after: "2024-07-01", destructive: false,
       reboot: false, text: "switch llama-3-8b/current: None -> 2024-07-01"}
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache.cache import ModelCache


def main():
    module_main(ModelCache)


if __name__ == "__main__":
    main()
