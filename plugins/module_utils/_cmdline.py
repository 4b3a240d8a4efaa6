# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kernel command line backend (stdlib only).

Boot loaders differ in data, not in flow: each backend class names the paths and tools
that reveal it, how it persists arguments, how it regenerates its configuration and how
the distribution signals a pending reboot.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shlex

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import atomic_write

DEFAULT_DROP_IN = "/etc/default/grub.d/90-aiinfra-datapath.cfg"
STATE_FILE = "/etc/aiinfra-datapath/kernel_cmdline.json"
DROP_IN_HEADER = (
    "# Managed by aiinfra.datapath.kernel_cmdline; changes here are overwritten.\n"
    "# Sourced after /etc/default/grub; appends the node plan's kernel arguments.\n"
)
# The drop-in is sourced by sh: an argument must not be able to leave its quotes.
SAFE_ARG = re.compile(r"^[A-Za-z0-9_.,:=+/@%-][A-Za-z0-9_.,:=+/@%~^-]*$")


class CmdlineError(Exception):
    def __init__(self, msg, **result):
        Exception.__init__(self, msg)
        self.msg = msg
        self.result = result


def split_cmdline(text):
    try:
        return shlex.split(text or "")
    except ValueError:
        return (text or "").split()


def arg_name(arg):
    return arg.split("=", 1)[0]


def matches(spec, token):
    """A removal spec ``name`` matches every ``name`` / ``name=...``; ``name=v`` only itself."""
    if "=" in spec:
        return token == spec
    return arg_name(token) == spec


def is_subsequence(wanted, tokens):
    """The wanted arguments appear in this order (repeated names keep their pairing)."""
    position = 0
    for arg in wanted:
        try:
            position = tokens.index(arg, position) + 1
        except ValueError:
            return False
    return True


def validate(args, remove):
    problems = []
    for field, values in (("args", args), ("remove", remove)):
        for index, arg in enumerate(values):
            if not SAFE_ARG.match(arg or ""):
                problems.append("%s[%d] %r: kernel arguments here are name or name=value without "
                                "blanks, quotes, $, ` or \\" % (field, index, arg))
    for spec in remove:
        clash = [arg for arg in args if matches(spec, arg)]
        if clash:
            problems.append("remove %r also matches wanted argument(s) %s" % (spec, ", ".join(clash)))
    if problems:
        raise CmdlineError("invalid arguments: " + "; ".join(problems), problems=problems)


def grub_assignments(text):
    """Tokens assigned to GRUB_CMDLINE_LINUX(_DEFAULT) in a grub defaults file."""
    tokens = []
    for line in (text or "").splitlines():
        match = re.match(r'^\s*(?:export\s+)?GRUB_CMDLINE_LINUX(?:_DEFAULT)?=(["\']?)(.*)\1\s*$', line)
        if match:
            tokens.extend(t for t in split_cmdline(match.group(2)) if not t.startswith("$"))
    return tokens


class Bootloader(object):
    """No boot loader this module can manage (container, lab node)."""

    name = "none"
    detect_paths = ()
    tools = ()
    update_argv = {}
    reboot_flag = None
    persists = False

    def __init__(self, host, runner, params):
        self.host = host
        self.runner = runner
        self.params = params
        self.tool = None

    @classmethod
    def detect(cls, host, runner):
        if not any(host.exists(path) for path in cls.detect_paths):
            return None
        for tool in cls.tools:
            if runner.which(tool):
                return tool
        return None

    def find_tool(self):
        for tool in self.tools:
            path = self.runner.which(tool)
            if path:
                self.tool = tool
                return path
        return None

    # read / plan / apply with nothing to do
    def read(self):
        self.before = None

    def plan(self, args, remove):
        return []

    def apply(self, plan):
        pass

    def diff(self):
        return None


class GrubDropIn(Bootloader):
    """Debian / Ubuntu: our own file in /etc/default/grub.d, then update-grub."""

    name = "grub_d"
    detect_paths = ("/boot/grub",)
    tools = ("update-grub", "grub-mkconfig")
    update_argv = {"update-grub": ["update-grub"],
                   "grub-mkconfig": ["grub-mkconfig", "-o", "/boot/grub/grub.cfg"]}
    reboot_flag = "/run/reboot-required"
    persists = True

    def read(self):
        self.before = self.host.read_raw(self.params["drop_in"])
        foreign = []
        sources = ["/etc/default/grub"] + [
            "/etc/default/grub.d/" + name for name in self.host.listdir("/etc/default/grub.d")
            if name.endswith(".cfg")]
        for path in sources:
            if path == self.params["drop_in"]:
                continue
            for token in grub_assignments(self.host.read_raw(path)):
                foreign.append((path, token))
        self.foreign = foreign

    def render(self, args):
        if not args:
            return None
        return DROP_IN_HEADER + 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX %s"\n' % " ".join(args)

    def plan(self, args, remove):
        self.after = self.render(args)
        self.not_removable = sorted(set(
            "%s (in %s)" % (token, path) for path, token in self.foreign
            for spec in remove if matches(spec, token)))
        actions = []
        if self.after != self.before:
            verb = "remove" if self.after is None else "write"
            actions.append("%s %s" % (verb, self.params["drop_in"]))
            if self.params["update_bootloader"] and self.regenerates:
                argv = self.update_argv.get(self.tool or "", [])
                if argv:
                    actions.append("run " + " ".join(argv))
        return actions

    @property
    def regenerates(self):
        return self.tool is not None

    def apply(self, plan):
        if self.after == self.before:
            return
        path = self.host.path(self.params["drop_in"])
        if self.after is None:
            os.unlink(path)
        else:
            atomic_write(path, self.after, mode=0o644)
        if self.params["update_bootloader"] and self.regenerates:
            argv = list(self.update_argv[self.tool])
            argv[0] = self.runner.which(self.tool) or argv[0]
            self.runner.run(argv, record=True)

    def diff(self):
        return dict(before_header=self.params["drop_in"], after_header=self.params["drop_in"],
                    before=self.before or "", after=self.after or "")


class DropInOnly(GrubDropIn):
    """No boot loader, but the plan asks for the drop-in anyway (image builds, the lab)."""

    name = "none"
    tools = ()
    reboot_flag = None
    persists = False

    @property
    def regenerates(self):
        return False


class Grubby(Bootloader):
    """RHEL family: grubby on every kernel entry; only the arguments we added are removed."""

    name = "grubby"
    detect_paths = ("/boot/loader/entries", "/boot/grub2", "/boot/efi/EFI")
    tools = ("grubby",)
    persists = True

    def read(self):
        raw = self.host.read_raw(STATE_FILE)
        try:
            self.state = json.loads(raw) if raw else {}
        except ValueError:
            raise CmdlineError("%s is not valid JSON; fix or remove it" % STATE_FILE)
        # only what this module added itself may be removed again
        self.added_before = list(self.state.get("added") or [])
        _rc, out, _err = self.runner.run([self.runner.which("grubby") or "grubby", "--info=DEFAULT"])
        args = ""
        for line in out.splitlines():
            match = re.match(r'^args="?(.*?)"?$', line.strip())
            if match:
                args = match.group(1)
        self.current = split_cmdline(args)
        self.before = " ".join(self.current)

    def plan(self, args, remove):
        names = [arg_name(arg) for arg in args]
        repeated = sorted(set(name for name in names if names.count(name) > 1))
        if repeated:
            raise CmdlineError(
                "grubby keeps one value per argument name and would collapse repeated %s; "
                "persist the second page size with the hugepages module's boot_unit instead"
                % ", ".join(repeated))
        self.to_remove = []
        for arg in self.added_before:
            if arg not in args and arg in self.current:
                self.to_remove.append(arg)
        for spec in remove:
            for token in self.current:
                if matches(spec, token) and token not in self.to_remove:
                    self.to_remove.append(token)
        self.to_add = [arg for arg in args if arg not in self.current]
        added = [arg for arg in args if arg in self.to_add or arg in self.added_before]
        self.state_after = {"args": list(args), "added": added}
        self.after = " ".join([t for t in self.current if t not in self.to_remove] + self.to_add)
        actions = []
        if self.to_remove:
            actions.append("run grubby --update-kernel=ALL --remove-args=%s" % " ".join(self.to_remove))
        if self.to_add:
            actions.append("run grubby --update-kernel=ALL --args=%s" % " ".join(self.to_add))
        if self.state != self.state_after:
            actions.append("write %s" % STATE_FILE)
        return actions

    def apply(self, plan):
        grubby = self.runner.which("grubby") or "grubby"
        if self.to_remove:
            self.runner.run([grubby, "--update-kernel=ALL",
                             "--remove-args=%s" % " ".join(self.to_remove)], record=True)
        if self.to_add:
            self.runner.run([grubby, "--update-kernel=ALL",
                             "--args=%s" % " ".join(self.to_add)], record=True)
        if self.state != self.state_after:
            atomic_write(self.host.path(STATE_FILE),
                         json.dumps(self.state_after, indent=2, sort_keys=True) + "\n", mode=0o644)

    def diff(self):
        return dict(before_header="grubby default kernel args", after_header="grubby default kernel args",
                    before=self.before + "\n", after=self.after + "\n")


BACKENDS = {"grub_d": GrubDropIn, "grubby": Grubby}
AUTO_ORDER = (GrubDropIn, Grubby)


def choose_backend(host, runner, params):
    """Return (backend instance, reason)."""
    wanted = params["backend"]
    if wanted == "none":
        cls = DropInOnly if params["when_no_bootloader"] == "write_drop_in" else Bootloader
        return cls(host, runner, params)
    if wanted in BACKENDS:
        backend = BACKENDS[wanted](host, runner, params)
        if not backend.find_tool() and (wanted == "grubby" or params["update_bootloader"]):
            raise CmdlineError("backend %s needs %s on this node, none found in PATH"
                               % (wanted, " or ".join(backend.tools)))
        return backend
    for cls in AUTO_ORDER:
        if cls.detect(host, runner):
            backend = cls(host, runner, params)
            backend.find_tool()
            return backend
    cls = DropInOnly if params["when_no_bootloader"] == "write_drop_in" else Bootloader
    return cls(host, runner, params)
