# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kernel_cmdline
short_description: Add and remove kernel command line arguments, touching only its own
version_added: 0.1.0
description:
  - Keeps an ordered list of kernel arguments, repeated names included
    (C(hugepagesz=2M hugepages=512 hugepagesz=1G hugepages=8)), in the boot loader
    configuration, idempotently.
  - Debian and Ubuntu (C(grub_d)) get one drop-in file in C(/etc/default/grub.d) that
    appends to C(GRUB_CMDLINE_LINUX), then C(update-grub). Arguments set in files the
    module does not own are never edited; removing them is reported instead.
  - The RHEL family (C(grubby)) is changed with C(grubby --update-kernel=ALL). The module
    remembers the arguments it added in C(/etc/aiinfra-datapath/kernel_cmdline.json), so
    that dropping one from O(args) removes only what it added itself.
  - Reports C(reboot_required) when the running kernel (C(/proc/cmdline)) lacks a wanted
    argument or still has a removed one, and signals it the distribution's way
    (C(/run/reboot-required) on Debian). It never reboots.
  - Where no boot loader is found (containers, the lab) it reports C(bootloader=none) and
    writes nothing, or only the drop-in with O(when_no_bootloader=write_drop_in).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Computes the same actions and touches nothing.
  diff_mode:
    support: full
    description: Shows the drop-in file or the grubby arguments before and after.
  platform:
    support: full
    platforms: posix
    description: Linux nodes booting with GRUB (Debian family) or grubby (RHEL family).
options:
  args:
    description:
      - Wanted arguments, in order (C(name) or C(name=value), no blanks or quotes).
        Repeated names are kept as given.
    type: list
    elements: str
    default: []
  remove:
    description:
      - Arguments to remove. C(name) removes every C(name) and C(name=...); C(name=value)
        only that one.
    type: list
    elements: str
    default: []
  backend:
    description: Boot loader backend; C(auto) detects it from C(/boot) and the tools in PATH.
    type: str
    choices: [auto, grub_d, grubby, none]
    default: auto
  drop_in:
    description: The drop-in the C(grub_d) backend owns.
    type: path
    default: /etc/default/grub.d/90-aiinfra-datapath.cfg
  update_bootloader:
    description: Regenerate the boot loader configuration (C(update-grub)) after a change.
    type: bool
    default: true
  when_no_bootloader:
    description:
      - With no boot loader found, C(skip) writes nothing; C(write_drop_in) writes only the
        drop-in (for images that get a boot loader later).
    type: str
    choices: [skip, write_drop_in]
    default: skip
  root:
    description: For tests. Directory that C(/proc), C(/boot), C(/etc) and C(/run) resolve below.
    type: path
    default: /
seealso:
  - module: aiinfra.datapath.hugepages
"""

EXAMPLES = r"""
- name: Kernel arguments from the node plan
  aiinfra.datapath.kernel_cmdline:
    args: "{{ datapath_plan.kernel_cmdline.args }}"
  register: datapath_kernel_cmdline

- name: Two page sizes on the command line, drop an old option
  aiinfra.datapath.kernel_cmdline:
    args: [hugepagesz=2M, hugepages=512, hugepagesz=1G, hugepages=8, iommu=pt]
    remove: [transparent_hugepage]
"""

RETURN = r"""
bootloader:
  description: The backend used (C(grub_d), C(grubby) or C(none)).
  returned: always
  type: str
  sample: grub_d
args:
  description: The wanted arguments, in order.
  returned: always
  type: list
  elements: str
proc_cmdline:
  description: Arguments of the running kernel.
  returned: always
  type: list
  elements: str
missing:
  description: Wanted arguments the running kernel does not have yet (in order).
  returned: always
  type: list
  elements: str
still_present:
  description: Running kernel arguments that O(remove) asks to drop.
  returned: always
  type: list
  elements: str
not_removable:
  description: Arguments to remove that files the module does not own set (grub_d).
  returned: always
  type: list
  elements: str
reboot_required:
  description: The boot configuration differs from the running kernel; a reboot applies it.
  returned: always
  type: bool
actions:
  description: What the module did, or would do in check mode, in order.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aiinfra.datapath.plugins.module_utils._cmdline import (
    CmdlineError,
    choose_backend,
    is_subsequence,
    matches,
    split_cmdline,
    validate,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import (
    HostRoot,
    LockTimeout,
    atomic_write,
    host_root,
    lock_path,
    no_lock,
    node_lock,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import (
    CommandError,
    Runner,
)


def argument_spec():
    return dict(
        args=dict(type="list", elements="str", default=[]),
        remove=dict(type="list", elements="str", default=[]),
        backend=dict(type="str", choices=["auto", "grub_d", "grubby", "none"], default="auto"),
        drop_in=dict(type="path", default="/etc/default/grub.d/90-aiinfra-datapath.cfg"),
        update_bootloader=dict(type="bool", default=True),
        when_no_bootloader=dict(type="str", choices=["skip", "write_drop_in"], default="skip"),
        root=dict(type="path", default="/"),
    )


def run(module):
    params = module.params
    args = [str(a) for a in params["args"]]
    remove = [str(r) for r in params["remove"]]
    validate(args, remove)
    host = HostRoot(params["root"])
    runner = Runner(module)
    backend = choose_backend(host, runner, params)
    backend.read()
    actions = backend.plan(args, remove)

    running = split_cmdline(host.read("/proc/cmdline", default=""))
    missing = [] if is_subsequence(args, running) else [a for a in args if a not in running] or list(args)
    still_present = [t for t in running if any(matches(spec, t) for spec in remove)]
    not_removable = list(getattr(backend, "not_removable", []))
    foreign_tokens = set(text.split(" (in ", 1)[0] for text in not_removable)
    reboot_required = backend.persists and bool(
        missing or [t for t in still_present if t not in foreign_tokens])
    for text in not_removable:
        module.warn("cannot remove %s: that file is not managed by this module" % text)
    if not backend.persists and (missing or still_present):
        module.warn("no boot loader managed here (bootloader: none): the running kernel lacks %s"
                    % " ".join(missing + ["-" + t for t in still_present]))
    if params["backend"] == "grub_d" and not params["update_bootloader"] and actions:
        module.warn("update_bootloader is false: run update-grub before the next boot")

    flag = backend.reboot_flag
    if reboot_required and flag and not host.exists(flag):
        actions.append("touch %s" % flag)

    result = dict(changed=bool(actions), bootloader=backend.name, args=args,
                  proc_cmdline=running, missing=missing, still_present=still_present,
                  not_removable=not_removable, reboot_required=reboot_required,
                  actions=actions)
    diff = backend.diff()
    if module._diff and diff is not None:
        result["diff"] = diff
    if module.check_mode or not actions:
        return result
    backend.apply(actions)
    if reboot_required and flag and not host.exists(flag):
        atomic_write(host.path(flag), "", mode=0o644)
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    host = host_root(module)
    try:
        # one lock around read -> plan -> apply -> persist (none in check mode: nothing changes)
        with node_lock(lock_path(host)) if not module.check_mode else no_lock():
            result = run(module)
    except CmdlineError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    except CommandError as exc:
        module.fail_json(msg=str(exc), rc=exc.rc, stdout=exc.out, stderr=exc.err)
    except LockTimeout as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="kernel_cmdline: %s" % exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
