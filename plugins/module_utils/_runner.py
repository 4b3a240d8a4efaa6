# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run node tools with argv lists only (never a shell string built from spec values)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError


class CommandError(CapabilityError):
    """A node command that failed: the message names it; rc, stdout and stderr go in the result."""

    def __init__(self, argv, rc, out, err):
        self.argv = list(argv)
        self.rc = rc
        self.out = out
        self.err = err
        CapabilityError.__init__(
            self, "%s failed (rc=%s): %s" % (" ".join(argv), rc, (err or out or "").strip()),
            rc=rc, stdout=out, stderr=err)


class Runner(object):
    """Thin wrapper over ``AnsibleModule.run_command`` that records what it ran.

    ``commands`` keeps every argv that changed state, so that modules can return the list of
    actions they took (or, in check mode, would take).
    """

    def __init__(self, module):
        self.module = module
        self.commands = []

    def which(self, name, required=False):
        return self.module.get_bin_path(name, required=required)

    def run(self, argv, check=True, data=None, record=False):
        if not isinstance(argv, (list, tuple)):
            raise TypeError("argv must be a list")
        rc, out, err = self.module.run_command(list(argv), data=data, environ_update={"LC_ALL": "C"})
        if record:
            self.commands.append(list(argv))
        if check and rc != 0:
            raise CommandError(argv, rc, out, err)
        return rc, out, err
