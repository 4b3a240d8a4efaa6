# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run node tools with argv lists only (never a shell string built from spec values).

:func:`spawn` runs them without ``AnsibleModule.run_command``'s ``preexec_fn``: Python then
starts the child with vfork (3.10 and later) instead of copying the module's address space with
fork. On a lab node that was 1.6 ms of CPU per command instead of 4.1 ms (the module is a 45 MB
process), and a converge runs about ten of them per node. What ``run_command`` does beyond the
fork is kept: the same environment (the module's own plus ``run_command_environ_update``, the
payload's zip dropped from PYTHONPATH), ``data`` written to stdin with a newline added, output
read until the command has exited and its pipes are drained (not until every pipe is closed: a
daemon that the command started may hold them), and text decoded with surrogateescape.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import os
import selectors
import subprocess

from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError

READ_SIZE = 32768


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


def command_env(environ, module_update=None, update=None):
    """The environment of a node command, as ``run_command`` builds it: the module's environment,
    ``module_update`` (the module's ``run_command_environ_update``), then ``update``; the AnsiballZ
    zip and debug directory dropped from PYTHONPATH (a Python tool must not import the payload)."""
    env = dict(environ)
    env.update(module_update or {})
    env.update(update or {})
    if "PYTHONPATH" in env:
        paths = [p for p in env["PYTHONPATH"].split(":")
                 if p and not p.endswith("/ansible_modlib.zip") and not p.endswith("/debug_dir")]
        if paths:
            env["PYTHONPATH"] = ":".join(paths)
        else:
            del env["PYTHONPATH"]
    return env


def spawn(argv, data=None, env=None):
    """Run ``argv`` (a list; no shell); return (rc, stdout, stderr) as text.

    ``data``: written to the command's stdin, with a newline added (as ``run_command`` does);
    without it the command inherits stdin. A command that cannot be started returns rc 127 (not
    found) or 126 (not executable, or an argument holds a NUL byte), as a shell would, with the
    reason in stderr.
    """
    args = [a if isinstance(a, (str, bytes)) else str(a) for a in argv if a is not None]
    try:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE if data else None, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, close_fds=True, env=env)
    except OSError as exc:
        rc = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
        return rc, "", "%s: %s" % (args[0] if args else "", exc.strerror or exc)
    except ValueError as exc:  # an argument with a NUL byte: no exec can pass it
        return 126, "", "%s: cannot be run: %s" % (args[0] if args else "", exc)
    out, err = [], []
    selector = selectors.PollSelector() if hasattr(selectors, "PollSelector") else selectors.SelectSelector()
    try:
        for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
            fd = stream.fileno()
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
            selector.register(stream, selectors.EVENT_READ, sink)
        if data:
            text = data + "\n" if isinstance(data, str) else data + b"\n"
            try:
                proc.stdin.write(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the command did not read all of it; its rc and output say why
        while True:
            events = selector.select(1)
            for event in events:
                key = event[0]
                chunk = key.fileobj.read(READ_SIZE)
                if chunk is None:
                    continue
                if not chunk:
                    selector.unregister(key.fileobj)
                else:
                    key.data.append(chunk)
            if (not events or not selector.get_map()) and proc.poll() is not None:
                # exited, and nothing was ready: what is left in the pipes belongs to what it started
                break
            if not selector.get_map():
                proc.wait()
                break
    finally:
        selector.close()
        proc.stdout.close()
        proc.stderr.close()
        if proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass
    return (proc.returncode, b"".join(out).decode("utf-8", "surrogateescape"),
            b"".join(err).decode("utf-8", "surrogateescape"))


def _ansible_run_command(module):
    """``module.run_command`` is ansible's own (not one that a subclass or a test brought)."""
    func = getattr(getattr(module, "run_command", None), "__func__", None)
    return (getattr(func, "__module__", None) == "ansible.module_utils.basic"
            and getattr(func, "__qualname__", None) == "AnsibleModule.run_command")


class Runner(object):
    """Runs node commands for a module and records what it ran.

    ``commands`` keeps every argv that changed state, so that modules can return the list of
    actions they took (or, in check mode, would take). Commands run through :func:`spawn` (vfork,
    ``run_command``'s environment); where ``module.run_command`` is not ansible's own (a subclass's,
    or a recorder that tests put in its place) that is called instead, as before.
    """

    def __init__(self, module):
        self.module = module
        self.commands = []
        self._spawn = _ansible_run_command(module)

    def which(self, name, required=False):
        return self.module.get_bin_path(name, required=required)

    def run(self, argv, check=True, data=None, record=False):
        if not isinstance(argv, (list, tuple)):
            raise TypeError("argv must be a list")
        if self._spawn:
            env = command_env(os.environ, getattr(self.module, "run_command_environ_update", None), {"LC_ALL": "C"})
            rc, out, err = spawn(list(argv), data=data, env=env)
        else:
            rc, out, err = self.module.run_command(list(argv), data=data, environ_update={"LC_ALL": "C"})
        if record:
            self.commands.append(list(argv))
        if check and rc != 0:
            raise CommandError(argv, rc, out, err)
        return rc, out, err
