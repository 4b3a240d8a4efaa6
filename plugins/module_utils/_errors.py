# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one error base class of the collection's node-side code (stdlib only).

Every failure a capability reports on purpose is a ``CapabilityError``: a message for the
user plus result fields (``errors``, ``rollback``, ``devices`` ...) that the runner returns
with ``failed: true``. The runner maps nothing else but ``OSError`` to a failed result, so a
real bug still shows its traceback.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class CapabilityError(Exception):
    """A failure with a message for the user and result fields for the caller."""

    def __init__(self, msg, **result):
        Exception.__init__(self, msg)
        self.msg = msg
        self.result = result

    def __str__(self):
        return self.msg
