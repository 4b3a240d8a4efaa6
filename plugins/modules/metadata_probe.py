#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: metadata_probe
short_description: Measure small files and metadata on the cache filesystem (create, stat, read, unlink)
version_added: "0.3.0"
description:
  - For each set of O(sets) creates C(files) files of C(size) bytes in a tree of O(width) directories,
    then stats, reads and unlinks each; every operation is timed. Returns per set and operation the
    operations per second and the latency p50/p99 in microseconds.
  - Each file's pages are dropped with C(posix_fadvise(POSIX_FADV_DONTNEED)) on that file before it is
    read (never the global C(drop_caches)), so reads are cold.
  - The defaults are a model's shard set (64 files of 4 MiB) and a dataset of small files (2,000 of 4 KiB).
  - Writes only into O(directory), which the module creates (it must not exist) and removes afterwards,
    also on failure; paths are opened relative to directory descriptors without following links. A set
    larger than O(max_free_share) of the free space is refused (RV(metadata.ok=false) with the reason).
requirements:
  - "Python 3 on the node (standard library only)"
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Checks the directory and the free space and says what would be written; writes nothing.
  diff_mode:
    support: none
    description: No diff; nothing of the node's configuration changes.
  platform:
    support: full
    platforms: posix
    description: Linux (posix_fadvise, openat).
options:
  directory:
    description: The measurement's own directory (absolute; must not exist; removed afterwards).
    type: str
    required: true
  sets:
    description: The file sets, each measured in turn.
    type: list
    elements: dict
    default:
      - {name: shards, files: 64, size: 4194304}
      - {name: dataset, files: 2000, size: 4096}
    suboptions:
      name:
        description: The set's name in the result.
        type: str
        required: true
      files:
        description: Number of files (1 to 1000000).
        type: int
        required: true
      size:
        description: Bytes per file (0 to 1 GiB).
        type: int
        required: true
  width:
    description: Directories the files are spread over (1 to 4096).
    type: int
    default: 64
  max_free_share:
    description: Largest share of the filesystem's free space one set may take (0 to 0.9).
    type: float
    default: 0.2
"""

EXAMPLES = r"""
- name: Small files and metadata on the model cache
  aiinfra.datapath.metadata_probe:
    directory: /mnt/model-cache/.aiinfra-measure/metadata
    sets:
      - {name: dataset, files: 10000, size: 4096}
  register: metadata
"""

RETURN = r"""
metadata:
  description: The figures.
  returned: always
  type: dict
  contains:
    ok:
      description: Whether every set ran.
      type: bool
    error:
      description: Why not; null when ok.
      type: str
    sets:
      description: >-
        Per set C(name), C(files), C(size), C(ok), C(error) and C(ops) - per operation (C(create), C(stat),
        C(read), C(unlink)) C(ops_s), C(p50_us), C(p99_us), C(ops).
      type: list
      elements: dict
    removed:
      description: Whether the directory was removed afterwards (null when it was never created).
      type: bool
  sample:
    ok: true
    error: null
    removed: true
    sets:
      - name: dataset
        files: 2000
        size: 4096
        ok: true
        error: null
        ops:
          create: {ops_s: 21450.3, p50_us: 38.2, p99_us: 121.9, ops: 2000}
          stat: {ops_s: 310020.7, p50_us: 2.9, p99_us: 6.1, ops: 2000}
          read: {ops_s: 40211.4, p50_us: 21.0, p99_us: 60.3, ops: 2000}
          unlink: {ops_s: 30100.2, p50_us: 27.5, p99_us: 80.0, ops: 2000}
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._metadata_probe import MetadataProbe


def main():
    module_main(MetadataProbe)


if __name__ == "__main__":
    main()
