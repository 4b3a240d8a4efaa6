# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capability contract and its one runner (stdlib only).

Every module of this collection is a *capability*: a backend class with

* ``name``: the module name, also the name of its role, tag, plan part and result key;
* ``module_spec()``: the argument spec and its cross-option rules, as ``AnsibleModule`` and
  ``ArgumentSpecValidator`` take them (keyword arguments);
* ``validate()``: checks of the parameters beyond the argument spec, before anything is read;
* ``read()``: the state of the node, read only through ``self.root`` (a ``HostRoot``, so that
  tests point it at a temporary tree) and ``self.runner`` (argv lists only);
* ``plan(state)``: the list of :class:`Action` that would bring the node to what the
  parameters ask for. Nothing changes in ``read`` and ``plan``;
* ``apply(state, actions)``: does them (never in check mode);
* ``result(state, actions)``: the module's own return values, read from state and actions.

:func:`run` is the one runner every capability goes through, alone (:func:`module_main`) or
batched by ``aiinfra.datapath.datapath_run``: it holds the capability's lock around read ->
plan -> apply in check mode as in a real run, returns the structured actions, renders the
diff from the same actions, and maps :class:`CapabilityError` and ``OSError`` to a failed
result with the message. Anything else is a bug and keeps its traceback.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import (
    DEFAULT_LOCK_PATH,
    HostRoot,
    atomic_write,
    no_lock,
    node_lock,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import Runner

# The option every node-changing module shares (doc fragment aiinfra.datapath.node).
ROOT_OPTION = dict(root=dict(type="path", default="/"))

# Keyword arguments of AnsibleModule that ArgumentSpecValidator takes as well.
SPEC_KEYS = ("argument_spec", "mutually_exclusive", "required_together", "required_one_of",
             "required_if", "required_by")


class Action(object):
    """One change a capability makes (or, in check mode, would make).

    ``kind`` says what sort of change (``sysctl``, ``pool``, ``mtu``, ``file``, ``partition``...),
    ``target`` what it changes (a key, a path, an interface, a device), ``before`` and
    ``after`` the value on either side (``None``: absent), ``destructive`` whether data is
    lost, ``reboot`` whether it takes effect only after a reboot, and ``text`` the line a
    person reads. ``diff`` says how it shows in ``--diff``: ``"file"`` (``before`` and
    ``after`` are file contents, ``target`` is the path), a section title (one
    ``target = value`` line in that section), or ``False`` (not shown: a command whose
    effect other actions show). ``data`` holds what ``apply`` needs and is not returned.
    """

    __slots__ = ("kind", "target", "before", "after", "destructive", "reboot", "text", "diff", "data")
    FIELDS = ("kind", "target", "before", "after", "destructive", "reboot", "text")

    def __init__(self, kind, target, text, before=None, after=None, destructive=False, reboot=False,
                 diff=None, **data):
        self.kind = kind
        self.target = target
        self.text = text
        self.before = before
        self.after = after
        self.destructive = bool(destructive)
        self.reboot = bool(reboot)
        self.diff = kind if diff is None else diff
        self.data = data

    def public(self):
        """The action as the module returns it."""
        return dict((name, getattr(self, name)) for name in self.FIELDS)

    def __repr__(self):
        return "Action(%s)" % self.text


def file_action(path, before, after, text=None, **data):
    """Write (``after`` a string) or remove (``after`` None) the node file ``path``."""
    verb = "remove" if after is None else "write"
    return Action("file", path, text or "%s %s" % (verb, path), before=before, after=after, diff="file", **data)


def apply_file(root, action):
    """Do a :func:`file_action` below ``root``: atomic write (mode from ``data["mode"]``, else
    the file's current mode, else 0644) or removal."""
    path = root.path(action.target)
    if action.after is None:
        if os.path.lexists(path):
            os.unlink(path)
        return
    mode = action.data.get("mode")
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except OSError:
            mode = 0o644
    atomic_write(path, action.after, mode=mode)


def _value_text(value):
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return "%s" % (value,)


def render_diff(actions):
    """Ansible's diff list from the actions: one entry per file, one per section of values.

    Entries keep the order in which their first action comes; a value section lists each
    target once (``target = before`` / ``target = after``; an absent side has no line).
    """
    entries = []
    sections = {}
    for action in actions:
        if action.diff is False:
            continue
        if action.diff == "file":
            entries.append(dict(before_header=action.target, after_header=action.target,
                                before=action.before or "", after=action.after or ""))
            continue
        entry = sections.get(action.diff)
        if entry is None:
            entry = dict(before_header=action.diff, after_header=action.diff, before="", after="")
            sections[action.diff] = entry
            entries.append(entry)
        if action.before is not None:
            entry["before"] += "%s = %s\n" % (action.target, _value_text(action.before))
        if action.after is not None:
            entry["after"] += "%s = %s\n" % (action.target, _value_text(action.after))
    return entries


class Node(object):
    """What a capability may use of the node: its root, a command runner, the run's mode."""

    def __init__(self, runner, root="/", check_mode=False, diff=False):
        if not isinstance(root, str) or not os.path.isabs(root):
            raise CapabilityError("root must be an absolute path, got %r" % (root,))
        self.root = HostRoot(root)
        self.runner = runner
        self.check_mode = bool(check_mode)
        self.diff = bool(diff)
        self.warnings = []

    def warn(self, message):
        if message not in self.warnings:
            self.warnings.append(message)


class Capability(object):
    """Base class of every backend; see the module docstring for the contract."""

    name = None
    read_only = False  # True: changes nothing, takes no lock, returns no ``actions``
    uses_root = True  # has the shared ``root`` option (doc fragment aiinfra.datapath.node)

    @classmethod
    def options(cls):
        """The capability's own options: its argument spec without the shared ``root``."""
        raise NotImplementedError

    @classmethod
    def argument_spec(cls):
        spec = dict(cls.options())
        if cls.uses_root:
            spec.update(ROOT_OPTION)
        return spec

    @classmethod
    def module_spec(cls):
        """``AnsibleModule`` / ``ArgumentSpecValidator`` keyword arguments."""
        return dict(argument_spec=cls.argument_spec())

    @classmethod
    def node_root(cls, params):
        """The node's filesystem root from ``params``: the ``root`` option where the spec has one."""
        return (params.get("root") or "/") if cls.uses_root else "/"

    def __init__(self, params, node):
        self.params = params
        self.node = node
        self.root = node.root
        self.runner = node.runner
        self.check_mode = node.check_mode

    def warn(self, message):
        self.node.warn(message)

    def lock_file(self):
        """The lock held around read -> plan -> apply (None for a read-only capability)."""
        return None if self.read_only else self.root.path(DEFAULT_LOCK_PATH)

    def validate(self):
        """Parameter checks the argument spec cannot express; raise CapabilityError."""

    def read(self):
        return None

    def plan(self, state):
        return []

    def needs_apply(self, state, actions):
        return bool(actions)

    def apply(self, state, actions):
        """Do ``actions``; raise CapabilityError with what was rolled back on failure."""

    def result(self, state, actions):
        return {}

    def diff(self, state, actions):
        return render_diff(actions)


def run(cls, params, node):
    """Run capability ``cls`` with validated ``params`` on ``node``; return its result dict.

    The result has ``changed``, ``actions`` (the structured actions), ``diff`` (with diff
    mode), the capability's own values and ``warnings``; a failure has ``failed: true`` and
    ``msg`` plus the fields the error carries.
    """
    try:
        capability = cls(params, node)
        capability.validate()
        lock = capability.lock_file()
        with node_lock(lock) if lock else no_lock():
            state = capability.read()
            actions = capability.plan(state)
            if not node.check_mode and capability.needs_apply(state, actions):
                capability.apply(state, actions)
            result = capability.result(state, actions)
        result.setdefault("changed", bool(actions))
        if not capability.read_only:
            result["actions"] = [action.public() for action in actions]
        if node.diff:
            diff = capability.diff(state, actions)
            if diff:
                result["diff"] = diff
    except CapabilityError as exc:
        result = dict(exc.result)
        result.update(failed=True, msg=exc.msg)
        result.setdefault("changed", False)
    except (IOError, OSError) as exc:
        result = dict(failed=True, changed=False, msg="%s: %s" % (cls.name, exc))
    if node.warnings:
        result["warnings"] = list(node.warnings)
    return result


def module_main(cls):
    """The whole ``main()`` of a capability module: validate, run, exit."""
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(supports_check_mode=True, **cls.module_spec())
    try:
        node = Node(Runner(module), cls.node_root(module.params), module.check_mode, module._diff)
    except CapabilityError as exc:
        module.fail_json(msg=exc.msg)
    result = run(cls, module.params, node)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)
