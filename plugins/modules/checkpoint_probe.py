#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: checkpoint_probe
short_description: Measure a checkpoint burst on the cache filesystem (P writers, fsync, cold read-back)
version_added: "0.3.0"
description:
  - Starts O(writers) processes together; each writes O(size) / O(writers) bytes to a file of its own
    in O(block_kib) KiB writes and calls C(fsync), as the ranks of a training job save a checkpoint.
  - Then drops each file's pages with C(posix_fadvise(POSIX_FADV_DONTNEED)) on that file (never the
    global C(drop_caches)), reads every file back and compares its sha256 with what was written.
  - Reports each writer's MiB/s and seconds, the slowest writer and the longest duration (the MLPerf
    Storage rule - a checkpoint is done when its last writer is), the burst's aggregate MiB/s and the
    read-back MiB/s.
  - With O(read_file), a reader reads that file sequentially (cold) for one second alone and then
    during the whole burst; RV(checkpoint.read_ratio) is the rate during the burst over the rate alone
    (does a checkpoint starve the readers that feed the GPUs?).
  - Writes only into O(directory), which the module creates (it must not exist) and removes
    afterwards, also when a writer fails; files are opened relative to it without following links.
    The burst is refused (RV(checkpoint.ok=false) with the reason) when O(size) is more than
    O(max_free_share) of the free space of the filesystem holding it.
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
    description: Linux (posix_fadvise, O_DIRECT with O(direct)).
options:
  directory:
    description: The measurement's own directory (absolute; must not exist; removed afterwards).
    type: str
    required: true
  writers:
    description: Writer processes (1 to 64), one file each.
    type: int
    default: 4
  size:
    description: Bytes of the whole checkpoint (at least 1 MiB per writer).
    type: int
    default: 1073741824
  block_kib:
    description: KiB per write call (a multiple of 4 within 4 to 65536).
    type: int
    default: 1024
  direct:
    description: Write with O_DIRECT (else through the page cache, then C(fsync)).
    type: bool
    default: false
  max_free_share:
    description: Largest share of the filesystem's free space the checkpoint may take (0 to 0.9).
    type: float
    default: 0.2
  read_file:
    description: A file read during the burst (for instance the storage probe's test file on the cache).
    type: str
"""

EXAMPLES = r"""
- name: A 4-writer, 4 GiB checkpoint on the model cache, with a reader during the burst
  aiinfra.datapath.checkpoint_probe:
    directory: /mnt/model-cache/.aiinfra-measure/checkpoint
    writers: 4
    size: 4294967296
    read_file: /mnt/model-cache/.aiinfra-measure/probe.bin
  register: checkpoint
"""

RETURN = r"""
checkpoint:
  description: The burst's figures.
  returned: always
  type: dict
  contains:
    ok:
      description: Whether every writer finished and every file read back as written.
      type: bool
    error:
      description: Why not (a refusal, a failed writer, a read-back that differs); null when ok.
      type: str
    writers:
      description: Per writer C(index), C(file), C(ok), C(bytes), C(seconds), C(mib_s), C(error).
      type: list
      elements: dict
    slowest_writer:
      description: C(index), C(mib_s) and C(seconds) of the slowest writer.
      type: dict
    longest_seconds:
      description: The longest writer's duration, write to fsync.
      type: float
    aggregate_mib_s:
      description: All bytes over the burst's span, first start to last fsync.
      type: float
    read_back:
      description: C(bytes), C(seconds), C(mib_s) of the cold read-back, and C(verified) (sha256 equal).
      type: dict
    read_during_mib_s:
      description: The reader's MiB/s during the burst (with O(read_file)).
      type: float
    read_alone_mib_s:
      description: The same reader's MiB/s alone, just before the burst.
      type: float
    read_ratio:
      description: read_during_mib_s / read_alone_mib_s.
      type: float
    removed:
      description: Whether the directory was removed afterwards (null when it was never created).
      type: bool
  sample:
    ok: true
    error: null
    writers: [{index: 0, file: rank-000.ckpt, ok: true, bytes: 268435456, seconds: 0.61, mib_s: 419.7, error: null}]
    slowest_writer: {index: 0, mib_s: 419.7, seconds: 0.61}
    longest_seconds: 0.61
    aggregate_mib_s: 1650.2
    read_back: {bytes: 1073741824, seconds: 0.52, mib_s: 1969.2, verified: true}
    read_during_mib_s: 610.4
    read_alone_mib_s: 1420.9
    read_ratio: 0.43
    removed: true
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._checkpoint_probe import CheckpointProbe


def main():
    module_main(CheckpointProbe)


if __name__ == "__main__":
    main()
