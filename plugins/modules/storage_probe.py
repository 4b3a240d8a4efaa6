#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: storage_probe
short_description: Measure read throughput, random-read IOPS and latency of devices and files, and a cold model load
version_added: "0.4.0"
requirements:
  - "Python 3 on the node (standard library only) for the builtin tool"
  - "fio (tool: fio; optional)"
description:
  - For each target (a block device or a regular file) measures the sequential read throughput
    (MiB/s over O(seq_bytes), capped by the target's size, in O(seq_block_kib) KiB reads) and,
    for each queue depth of O(queue_depths), 4 KiB random reads at aligned random offsets for
    O(random_seconds), giving IOPS and latency p50/p99 in microseconds.
  - The built-in reader (O(tool=builtin)) uses O_DIRECT reads into page-aligned buffers. Queue
    depth N is N forked worker processes, each doing one C(preadv) at a time, each read timed
    with C(time.perf_counter_ns); the percentiles are over all samples of all workers, and every
    worker is reaped before the module returns. The sequential pass stops after 60 seconds even
    if not all its bytes were read (RV(targets[].seq_bytes_read) says how many).
  - On a node with fewer cores than the queue depth, the built-in reader's latency at that depth
    includes CPU scheduling waits (N synchronous readers share the cores); fio's libaio submits
    all N reads from one thread and does not.
  - O(tool=fio) runs fio with C(--output-format=json --readonly) and the target's direct flag
    (C(--direct=1) by default), ioengine C(libaio) (C(psync) with N jobs where libaio cannot be
    loaded), bounded by C(--runtime), and reports the same figures. Without fio on the node the
    built-in reader runs, with a warning, and RV(targets[].tool) says V(builtin).
  - With O(model), every file below a cached model's directory is read once and cold; each file's
    cached pages are dropped first with C(posix_fadvise(POSIX_FADV_DONTNEED)) on that file (never
    the global C(drop_caches)). Returns files, bytes, seconds and MiB/s.
  - Only reads. The one write it ever does is creating a test file the user named
    (O(targets[].create_size)).
  - A target that cannot be opened, refuses O_DIRECT or is smaller than 1 MiB is returned with
    C(ok=false) and the reason. The module fails only on bad parameters.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: >-
      Stats every target and the model directory and says what would be read; nothing is
      opened for reading and nothing is created.
  diff_mode:
    support: none
    description: No diff; a created test file is an action of kind V(file).
  platform:
    support: full
    platforms: posix
    description: Linux (O_DIRECT, posix_fadvise). fio optional.
options:
  targets:
    description: Devices and files to read.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Name reported back (unique).
        type: str
        required: true
      path:
        description: Absolute path of a block device or a regular file.
        type: str
        required: true
      create_size:
        description:
          - When above 0 and O(targets[].path) is a file that does not exist, create it with this
            many bytes of non-zero data, fsynced, before reading it (at least 1 MiB). An existing
            file is never touched. Refused for a device path.
        type: int
        default: 0
      direct:
        description:
          - Read with O_DIRECT (bypass the page cache). Set V(false) for a filesystem that refuses
            O_DIRECT; the reads then go through the page cache (the target's cached pages are
            dropped before each pass, but random reads can hit the cache they fill).
        type: bool
        default: true
  seq_bytes:
    description: Bytes read sequentially per target, capped by the target's size.
    type: int
    default: 268435456
  seq_block_kib:
    description: Size of each sequential read in KiB (multiple of 4, 4 to 65536).
    type: int
    default: 1024
  random_seconds:
    description: Seconds of random reads per queue depth (at most 300).
    type: float
    default: 3.0
  queue_depths:
    description: Queue depths of the random-read passes, each 1 to 256.
    type: list
    elements: int
    default: [1, 32]
  seq_block_sizes_kib:
    description:
      - Block sizes in KiB (each a multiple of 4 within 4 to 65536) of extra sequential passes, one
        per size, each over the same bytes as the main pass; their MiB/s are returned in
        RV(targets[].sequential_by_block). The saturation sweep of measure.yml uses 4 to 4096.
      - Empty (the default) runs no extra pass.
    type: list
    elements: int
    default: []
  tool:
    description: The reader.
    type: str
    choices: [builtin, fio]
    default: builtin
  model:
    description: The model load probe.
    type: dict
    suboptions:
      path:
        description: Absolute path of a cached model's directory.
        type: str
        required: true
notes:
  - Takes no node lock; it changes nothing the other modules manage.
  - Figures of a file on a filesystem include the filesystem; a raw device target is the device
    alone. Reading a device the system uses competes with its load.
seealso:
  - module: aiinfra.datapath.nvme_layout
  - module: aiinfra.datapath.model_cache
"""

EXAMPLES = r"""
- name: The NVMe cache device raw, and a test file on its filesystem
  aiinfra.datapath.storage_probe:
    targets:
      - {name: nvme0n1, path: /dev/nvme0n1}
      - {name: cache, path: /mnt/model-cache/.storage-probe, create_size: 1073741824}
    queue_depths: [1, 32]
    model: {path: /mnt/model-cache/models/llama-3-8b}
  register: storage

- name: The same with fio
  aiinfra.datapath.storage_probe:
    targets: [{name: nvme0n1, path: /dev/nvme0n1}]
    tool: fio
"""

RETURN = r"""
targets:
  description: One entry per target, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The target's name.
      type: str
    path:
      description: Its path.
      type: str
    kind:
      description: V(device) or V(file); V(null) when it could not be examined.
      type: str
    tool:
      description: The reader that ran, V(builtin) or V(fio).
      type: str
    direct:
      description: Whether O_DIRECT was used.
      type: bool
    size:
      description: Size in bytes.
      type: int
    ok:
      description: Whether it was measured (in check mode, whether it would be).
      type: bool
    error:
      description: Why not, or V(null).
      type: str
    seq_read_mib_s:
      description: Sequential read throughput in MiB/s.
      type: float
    seq_bytes_read:
      description: Bytes the sequential pass read.
      type: int
    random:
      description: Per queue depth (string key), C(iops), C(p50_us) and C(p99_us).
      type: dict
    sequential_by_block:
      description: Per block size in KiB (string key), the sequential read MiB/s; only with O(seq_block_sizes_kib).
      type: dict
      returned: when O(seq_block_sizes_kib) is given
    would_read:
      description: >-
        In check mode, what would be read (C(seq_bytes), C(seq_block_kib), C(random_block_kib),
        C(queue_depths), C(random_seconds), C(create_size)); otherwise V(null).
      type: dict
  sample:
    - {name: nvme0n1, path: /dev/nvme0n1, kind: device, tool: builtin, direct: true, size: 3840755982336,
       ok: true, error: null, seq_read_mib_s: 3120.4, seq_bytes_read: 268435456, would_read: null,
       random: {"1": {iops: 11850.3, p50_us: 80.1, p99_us: 121.7},
                "32": {iops: 402113.0, p50_us: 77.9, p99_us: 160.2}}}
model_load:
  description: >-
    The model load probe (C(path), C(files), C(bytes), C(seconds), C(mib_s), C(ok), C(error));
    V(null) without O(model).
  returned: always
  type: dict
  sample: {path: /mnt/model-cache/models/llama-3-8b, files: 7, bytes: 16060617216, seconds: 6.41,
           mib_s: 2389.6, ok: true, error: null}
actions:
  description: The created test files (kind V(file)); empty when nothing was created.
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import module_main
from ansible_collections.aiinfra.datapath.plugins.module_utils._storage_probe import StorageProbe


def main():
    module_main(StorageProbe)


if __name__ == "__main__":
    main()
