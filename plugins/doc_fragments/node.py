# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function


class ModuleDocFragment(object):
    """What every module of this collection that reads or changes the node shares."""

    # The node's filesystem root (every module that reads node files through module_utils._fs).
    DOCUMENTATION = r"""
options:
  root:
    description:
      - For tests. The directory that C(/proc), C(/sys), C(/etc), C(/run) and every other node
        path resolve below. Commands still run on the node itself.
    type: path
    default: /
"""

    # The node lock, for the modules that change the node (capability runner).
    LOCK = r"""
options: {}
notes:
  - Holds the node lock (C(/run/aiinfra-datapath.lock) below O(root)) from the first read to the
    last change, in check mode as in a real run, so that two runs of the collection on one node
    never plan against a state the other is changing. A second run waits up to 60 seconds, then
    fails with a clear message.
"""
