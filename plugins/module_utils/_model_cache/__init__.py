# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model cache warm-up backend of ``aiinfra.datapath.model_cache`` (stdlib only), by concern.

* ``sources``: what a model names (validation of models, files and manifests) and where its
  files come from (local or ``file://`` directories, HTTP(S), S3 with AWS SigV4 signing);
* ``transfer``: the verified copy (reader, hasher and writer overlapping on large buffers,
  sha256 computed while writing, bandwidth token bucket, resume with ``Range``, retries,
  kernel writeback started while copying);
* ``cache``: the cache on disk (layout, metadata, ``current`` pointers, least-recently-used
  eviction under the reserve) and the capability ``ModelCache``.
"""
