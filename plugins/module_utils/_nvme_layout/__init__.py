# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backend of ``aiinfra.datapath.nvme_layout`` (stdlib only), by concern.

* ``parse``: the pure parsers of the tools' outputs (lsblk, blkid, wipefs, sgdisk, mountinfo,
  mdadm) and the builders of the fstab entry, the mdadm.conf line and the mkfs command;
* ``probe``: the ``Inspector``, what is on each device (read-only tools, sysfs and procfs
  below the node root), and the ``select`` rule;
* ``classify``: each device's class relative to the wanted layout;
* ``plan``: the data-loss guard and the ordered actions; ``steps``: running them;
* ``layout``: the capability ``NvmeLayout`` (argument spec, validate, read, plan, apply, result).
"""
