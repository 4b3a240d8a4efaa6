# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kernel command line capability (stdlib only).

Boot loaders differ in data, not in flow: each boot loader class names the paths and tools
that reveal it, how it persists arguments (its actions: the drop-in file, the commands that
regenerate the configuration) and how the distribution signals a pending reboot.
``KernelCmdline`` compares the wanted arguments with the running kernel's, plans the boot
loader's actions and the reboot flag, and does them: every action is data (a file, a command
argv, the flag).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import shlex

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import (
    Action,
    Capability,
    apply_file,
    file_action,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import atomic_write

DEFAULT_DROP_IN = "/etc/default/grub.d/90-aiinfra-datapath.cfg"
STATE_FILE = "/etc/aiinfra-datapath/kernel_cmdline.json"
DROP_IN_HEADER = (
    "# Managed by aiinfra.datapath.kernel_cmdline; changes here are overwritten.\n"
    "# Sourced after /etc/default/grub; appends the node plan's kernel arguments.\n"
)
GRUBBY_DIFF = "grubby default kernel args"
# The drop-in is sourced by sh: an argument must not be able to leave its quotes.
SAFE_ARG = re.compile(r"^[A-Za-z0-9_.,:=+/@%-][A-Za-z0-9_.,:=+/@%~^-]*\Z")


class CmdlineError(CapabilityError):
    """Kernel arguments or a boot loader state this module cannot work with."""


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


def check_args(args, remove):
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
        match = re.match(r'^\s*(?:export\s+)?GRUB_CMDLINE_LINUX(?:_DEFAULT)?=(["\']?)(.*)\1\s*\Z', line)
        if match:
            tokens.extend(t for t in split_cmdline(match.group(2)) if not t.startswith("$"))
    return tokens


def command_action(runner, argv, reboot, target=None, before=None, after=None, diff=False):
    """Run ``argv`` (its tool resolved in PATH when applied); the text is ``run <argv>``."""
    words = " ".join(argv)
    return Action("command", target or words, "run " + words, before=before, after=after,
                  reboot=reboot, diff=diff, argv=[runner.which(argv[0]) or argv[0]] + list(argv[1:]))


class Bootloader(object):
    """No boot loader this module can manage (container, lab node): nothing to persist."""

    name = "none"
    detect_paths = ()
    tools = ()
    update_argv = {}
    reboot_flag = None
    persists = False

    def __init__(self, root, runner, params):
        self.root = root
        self.runner = runner
        self.params = params
        self.tool = None

    @classmethod
    def detect(cls, root, runner):
        if not any(root.exists(path) for path in cls.detect_paths):
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

    def read(self):
        return {}

    def plan(self, state, args, remove):
        """The actions that persist ``args`` and drop ``remove`` (none here)."""
        return []

    def not_removable(self, state, remove):
        """``token (in file)`` for each argument to remove that a file we do not own sets."""
        return []


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
        foreign = []
        sources = ["/etc/default/grub"] + [
            "/etc/default/grub.d/" + name for name in self.root.listdir("/etc/default/grub.d")
            if name.endswith(".cfg")]
        for path in sources:
            if path == self.params["drop_in"]:
                continue
            for token in grub_assignments(self.root.read_raw(path)):
                foreign.append((path, token))
        return {"file": self.root.read_raw(self.params["drop_in"]), "foreign": foreign}

    def render(self, args):
        if not args:
            return None
        return DROP_IN_HEADER + 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX %s"\n' % " ".join(args)

    def not_removable(self, state, remove):
        return sorted(set("%s (in %s)" % (token, path) for path, token in state["foreign"]
                          for spec in remove if matches(spec, token)))

    def plan(self, state, args, remove):
        after = self.render(args)
        if after == state["file"]:
            return []
        actions = [file_action(self.params["drop_in"], state["file"], after, mode=0o644, reboot=self.persists)]
        argv = self.update_argv.get(self.tool or "")
        if self.params["update_bootloader"] and argv:
            actions.append(command_action(self.runner, argv, reboot=True))
        return actions


class DropInOnly(GrubDropIn):
    """No boot loader, but the plan asks for the drop-in anyway (image builds, the lab)."""

    name = "none"
    tools = ()
    update_argv = {}
    reboot_flag = None
    persists = False


class Grubby(Bootloader):
    """RHEL family: grubby on every kernel entry; only the arguments we added are removed."""

    name = "grubby"
    detect_paths = ("/boot/loader/entries", "/boot/grub2", "/boot/efi/EFI")
    tools = ("grubby",)
    persists = True

    def read(self):
        raw = self.root.read_raw(STATE_FILE)
        try:
            saved = json.loads(raw) if raw else {}
        except ValueError:
            raise CmdlineError("%s is not valid JSON; fix or remove it" % STATE_FILE)
        _rc, out, _err = self.runner.run([self.runner.which("grubby") or "grubby", "--info=DEFAULT"])
        args = ""
        for line in out.splitlines():
            match = re.match(r'^args="?(.*?)"?\Z', line.strip())
            if match:
                args = match.group(1)
        return {"file": raw, "saved": saved, "current": split_cmdline(args)}

    def plan(self, state, args, remove):
        names = [arg_name(arg) for arg in args]
        repeated = sorted(set(name for name in names if names.count(name) > 1))
        if repeated:
            raise CmdlineError(
                "grubby keeps one value per argument name and would collapse repeated %s; "
                "persist the second page size with the hugepages module's boot_unit instead"
                % ", ".join(repeated))
        current = state["current"]
        # only what this module added itself may be removed again
        added_before = list(state["saved"].get("added") or [])
        to_remove = []
        for arg in added_before:
            if arg not in args and arg in current:
                to_remove.append(arg)
        for spec in remove:
            for token in current:
                if matches(spec, token) and token not in to_remove:
                    to_remove.append(token)
        to_add = [arg for arg in args if arg not in current]
        actions = []
        # each command shows the default entry's arguments before and after it
        if to_remove:
            after = [t for t in current if t not in to_remove]
            actions.append(self._command("--remove-args=%s" % " ".join(to_remove), current, after))
            current = after
        if to_add:
            actions.append(self._command("--args=%s" % " ".join(to_add), current, current + to_add))
        saved_after = {"args": list(args), "added": [arg for arg in args if arg in to_add or arg in added_before]}
        if state["saved"] != saved_after:
            actions.append(file_action(STATE_FILE, state["file"],
                                       json.dumps(saved_after, indent=2, sort_keys=True) + "\n", mode=0o644))
        return actions

    def _command(self, option, before, after):
        return command_action(self.runner, ["grubby", "--update-kernel=ALL", option], reboot=True,
                              target="default kernel args", before=" ".join(before),
                              after=" ".join(after), diff=GRUBBY_DIFF)


class TunedBootloader(GrubDropIn):
    """The TuneD backend: the arguments are in the TuneD profile's [bootloader] section
    (aiinfra.datapath.tuned_profile) and TuneD hands them to the boot loader. Our grub.d drop-in
    of an earlier backend is removed (then update-grub), so no argument is set twice."""

    name = "tuned"
    boot_paths = ("/boot/grub", "/boot/grub2", "/boot/loader/entries")

    def __init__(self, root, runner, params):
        super(TunedBootloader, self).__init__(root, runner, params)
        # TuneD's bootloader plugin needs a boot loader too: without one (a container, the lab)
        # nothing persists the arguments and no reboot brings them
        self.persists = any(root.exists(path) for path in self.boot_paths)
        self.reboot_flag = GrubDropIn.reboot_flag if self.persists else None

    def not_removable(self, state, remove):
        return []

    def plan(self, state, args, remove):
        if state["file"] is None:
            return []
        actions = [file_action(self.params["drop_in"], state["file"], None,
                               "remove %s (the TuneD profile carries the arguments)" % self.params["drop_in"],
                               reboot=False)]
        argv = self.update_argv.get(self.tool or "")
        if self.params["update_bootloader"] and argv:
            actions.append(command_action(self.runner, argv, reboot=False))
        return actions


BACKENDS = {"grub_d": GrubDropIn, "grubby": Grubby}
AUTO_ORDER = (GrubDropIn, Grubby)


def choose_backend(root, runner, params):
    """The boot loader of this node (or the one ``params["backend"]`` names)."""
    wanted = params["backend"]
    if wanted == "tuned":
        backend = TunedBootloader(root, runner, params)
        backend.find_tool()
        return backend
    if wanted == "none":
        cls = DropInOnly if params["when_no_bootloader"] == "write_drop_in" else Bootloader
        return cls(root, runner, params)
    if wanted in BACKENDS:
        backend = BACKENDS[wanted](root, runner, params)
        if not backend.find_tool() and (wanted == "grubby" or params["update_bootloader"]):
            raise CmdlineError("backend %s needs %s on this node, none found in PATH"
                               % (wanted, " or ".join(backend.tools)))
        return backend
    for cls in AUTO_ORDER:
        if cls.detect(root, runner):
            backend = cls(root, runner, params)
            backend.find_tool()
            return backend
    cls = DropInOnly if params["when_no_bootloader"] == "write_drop_in" else Bootloader
    return cls(root, runner, params)


class KernelCmdline(Capability):
    """Wanted and removed kernel arguments against the boot loader and the running kernel."""

    name = "kernel_cmdline"

    @classmethod
    def options(cls):
        return dict(
            args=dict(type="list", elements="str", default=[]),
            remove=dict(type="list", elements="str", default=[]),
            backend=dict(type="str", choices=["auto", "grub_d", "grubby", "none", "tuned"], default="auto"),
            drop_in=dict(type="path", default=DEFAULT_DROP_IN),
            update_bootloader=dict(type="bool", default=True),
            when_no_bootloader=dict(type="str", choices=["skip", "write_drop_in"], default="skip"),
        )

    def validate(self):
        self.args = [str(a) for a in self.params["args"]]
        self.remove = [str(r) for r in self.params["remove"]]
        check_args(self.args, self.remove)

    def read(self):
        self.backend = choose_backend(self.root, self.runner, self.params)
        flag = self.backend.reboot_flag
        return {"boot": self.backend.read(),
                "running": split_cmdline(self.root.read("/proc/cmdline", default="")),
                "flag_exists": bool(flag) and self.root.exists(flag)}

    def plan(self, state):
        backend = self.backend
        actions = backend.plan(state["boot"], self.args, self.remove)
        running = state["running"]
        args = self.args
        self.missing = [] if is_subsequence(args, running) else [a for a in args if a not in running] or list(args)
        self.still_present = [t for t in running if any(matches(spec, t) for spec in self.remove)]
        self.not_removable = backend.not_removable(state["boot"], self.remove)
        foreign_tokens = set(text.split(" (in ", 1)[0] for text in self.not_removable)
        self.reboot_required = backend.persists and bool(
            self.missing or [t for t in self.still_present if t not in foreign_tokens])
        for text in self.not_removable:
            self.warn("cannot remove %s: that file is not managed by this module" % text)
        if not backend.persists and (self.missing or self.still_present):
            self.warn("no boot loader managed here (bootloader: none): the running kernel lacks %s"
                      % " ".join(self.missing + ["-" + t for t in self.still_present]))
        if self.params["backend"] == "grub_d" and not self.params["update_bootloader"] and actions:
            self.warn("update_bootloader is false: run update-grub before the next boot")
        flag = backend.reboot_flag
        if self.reboot_required and flag and not state["flag_exists"]:
            actions.append(Action("flag", flag, "touch %s" % flag, after="", diff=False))
        return actions

    def apply(self, state, actions):
        for action in actions:
            if action.kind == "file":
                apply_file(self.root, action)
            elif action.kind == "command":
                self.runner.run(list(action.data["argv"]), record=True)
            elif action.kind == "flag":
                atomic_write(self.root.path(action.target), "", mode=0o644)

    def result(self, state, actions):
        return dict(bootloader=self.backend.name, args=self.args, proc_cmdline=state["running"],
                    missing=self.missing, still_present=self.still_present,
                    not_removable=self.not_removable, reboot_required=self.reboot_required)
