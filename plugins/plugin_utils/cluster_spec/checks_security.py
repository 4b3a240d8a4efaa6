"""Cross-checks against inputs that would let the wrong thing happen to a node (docs/security.md),
registered like those in :mod:`.checks`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .errors import Issue
from .registry import cross_check

if TYPE_CHECKING:
    from .models import Storage

# Kernel names of disks and NVMe namespaces: they are handed out in the order the devices are found,
# so /dev/nvme1n1 can be another disk after a reboot or a firmware update.
KERNEL_DISK = re.compile(r"\A/dev/(nvme[0-9]+(c[0-9]+)?n[0-9]+(p[0-9]+)?|[shv]d[a-z]+[0-9]*|xvd[a-z]+[0-9]*)\Z")


@cross_check("Storage", "wipe-serials-stable", reads=("wipe_serials",))
def check_wipe_serials(storage: Storage) -> Iterator[Issue]:
    """wipe_serials names devices by an identity that stays theirs: never a kernel name such as /dev/nvme1n1."""
    for index, entry in enumerate(storage.wipe_serials):
        if KERNEL_DISK.match(entry):
            yield Issue(("wipe_serials", index),
                        f"{entry} is a kernel name: it can name another disk after a reboot, and that disk would be "
                        "wiped", "name an NVMe namespace by <serial>:<nsid> (cat /sys/block/nvme1n1/device/serial "
                        "/sys/block/nvme1n1/nsid), its EUI-64, NGUID or WWN (cat /sys/block/nvme1n1/wwid), or a "
                        "/dev/disk/by-id/nvme-eui.* link; other disks by serial or WWN (lsblk -o NAME,SERIAL,WWN)")
