# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sysctl_profile
short_description: Apply and persist a whole sysctl profile in one call
version_added: 0.1.0
description:
  - Reads every requested kernel parameter from C(/proc/sys) first and fails before
    touching anything when a key does not exist on this kernel or is read-only here
    (for example C(net.core.rmem_max) inside a child network namespace), naming every
    bad key.
  - Writes only the live values that differ, reads each one back, and fails when the
    kernel rejects (for example C(EINVAL)) or silently clamps a value, naming the key,
    the wanted and the actual value. Keys already changed by this call are rolled back,
    and so is a clamped key itself.
  - Holds the node lock (C(/run/aiinfra-datapath.lock) below O(root)) from the first read
    to the last write, so that two runs at once never leave live values and file apart.
  - Multi-value keys such as C(net.ipv4.tcp_rmem) are compared field by field, so
    whitespace and the tabs in C(/proc) output never cause a change.
  - Persists the profile in its own file (written atomically with mode C(0644), only when
    the content differs). Other files are never edited.
  - Reports keys that a file applied later at boot would override, following the order of
    systemd-sysctl (C(/etc/sysctl.d), C(/run/sysctl.d), C(/usr/local/lib/sysctl.d),
    C(/usr/lib/sysctl.d), C(/lib/sysctl.d); same-name files mask each other; lexical order
    by file name; C(/etc/sysctl.conf) last).
  - Reports for each key whether it is held per network namespace (C(netns)) or for the
    whole kernel (C(global)).
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description: Computes the same plan and touches nothing.
  diff_mode:
    support: full
    description: Shows live values and the managed file before and after.
  platform:
    support: full
    platforms: posix
    description: Linux nodes with C(/proc/sys).
options:
  keys:
    description:
      - The kernel parameters, by name (dotted C(net.core.rmem_max) or slash form).
      - Each value is either a scalar (an exact value) or a dictionary with the
        suboptions below.
      - C(value) (required) is the wanted value; multi-value keys are written as one
        string with fields separated by blanks.
      - C(mode) is C(exact) (default) or C(minimum). C(minimum) only raises, field by
        field for multi-value keys; fields already higher are kept, and the file persists
        the resulting value so that a boot never lowers it.
      - C(ignore_missing) (default C(false)) skips, instead of failing, a key that does
        not exist on this kernel or is read-only here; a skipped key is not written to the
        file.
      - C(scope) (C(netns) or C(global)) is accepted from the node plan and reported; when
        omitted the module decides from the key name.
    type: dict
    required: true
  file:
    description:
      - The managed file that persists the profile. The module owns it entirely.
    type: path
    default: /etc/sysctl.d/90-aiinfra-datapath.conf
  apply:
    description:
      - Whether to change live values now. With C(false) only the file is written and the
        keys report C(persist_only).
    type: bool
    default: true
  on_override:
    description:
      - What to do when a file applied later at boot sets one of the keys to another value.
      - C(warn) returns the overrides and a warning; C(fail) fails before changing anything.
    type: str
    choices: [warn, fail]
    default: warn
  root:
    description:
      - For tests. Directory that C(/proc), C(/etc) and the other node paths resolve below.
    type: path
    default: /
notes:
  - Writing a C(global) key from inside a network namespace changes the whole kernel.
seealso:
  - module: aiinfra.datapath.hugepages
"""

EXAMPLES = r"""
- name: Apply the node plan's sysctl profile
  aiinfra.datapath.sysctl_profile:
    keys: "{{ datapath_plan.sysctl.keys }}"
    file: "{{ datapath_plan.sysctl.file }}"

- name: Raise socket buffers, never lower them
  aiinfra.datapath.sysctl_profile:
    keys:
      net.core.rmem_max: {value: "16777216", mode: minimum}
      net.ipv4.tcp_rmem: {value: "4096 131072 16777216", mode: minimum}
      vm.zone_reclaim_mode: 1
      net.ipv4.tcp_fastopen: {value: "3", ignore_missing: true}
    on_override: fail
"""

RETURN = r"""
keys:
  description: Per key what was found and done, keyed by the dotted name.
  returned: always
  type: dict
  sample:
    net.ipv4.tcp_rmem:
      before: "4096 87380 6291456"
      after: "4096 131072 16777216"
      wanted: "4096 131072 16777216"
      target: "4096 131072 16777216"
      mode: minimum
      scope: netns
      action: set
actions:
  description: What the module did, or would do in check mode, in order.
  returned: always
  type: list
  elements: str
  sample: ["set net.ipv4.tcp_rmem: 4096 87380 6291456 -> 4096 131072 16777216",
           "write /etc/sysctl.d/90-aiinfra-datapath.conf"]
file:
  description: The managed file.
  returned: always
  type: str
  sample: /etc/sysctl.d/90-aiinfra-datapath.conf
file_changed:
  description: Whether the managed file was (or would be) rewritten.
  returned: always
  type: bool
overrides:
  description: Keys that a file applied later at boot sets to another value.
  returned: always
  type: list
  elements: dict
  sample: [{key: vm.swappiness, file: /etc/sysctl.d/99-local.conf, value: "60",
            wanted: "10", reason: applied after the managed file at boot}]
rollback:
  description: Keys restored after the kernel rejected or clamped a value (on failure only).
  returned: failure
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import (
    HostRoot,
    LockTimeout,
    host_root,
    lock_path,
    no_lock,
    node_lock,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import (
    SysctlError,
    SysctlProfile,
    find_overrides,
    live_text,
    normalise_keys,
    render_conf,
    scope_of,
)


def argument_spec():
    return dict(
        keys=dict(type="dict", required=True, no_log=False),
        file=dict(type="path", default="/etc/sysctl.d/90-aiinfra-datapath.conf"),
        apply=dict(type="bool", default=True),
        on_override=dict(type="str", choices=["warn", "fail"], default="warn"),
        root=dict(type="path", default="/"),
    )


def run(module):
    params = module.params
    if not params["file"].startswith("/"):
        raise SysctlError("file must be an absolute path, got %r" % params["file"])
    host = HostRoot(params["root"])
    keys = normalise_keys(params["keys"])
    for name in sorted(keys):
        if keys[name]["scope"] != keys[name].pop("detected_scope"):
            module.warn("%s: the plan says scope %s, this module classifies it as %s; reported as "
                        "given" % (name, keys[name]["scope"], scope_of(name)))
    profile = SysctlProfile(host, keys, managed_file=params["file"],
                            apply_live=params["apply"], on_override=params["on_override"])
    profile.read()
    report, writes = profile.plan()
    values = profile.file_values(report)
    overrides = find_overrides(host, params["file"], values)
    if overrides and params["on_override"] == "fail":
        raise SysctlError(
            "nothing was changed; files applied after %s at boot override: %s"
            % (params["file"], "; ".join("%s=%s in %s" % (o["key"], o["value"], o["file"])
                                         for o in overrides)),
            overrides=overrides, keys=report)
    for item in overrides:
        module.warn("%s: %s (%s) %s; the boot value will be %r, not %r"
                    % (item["key"], item["file"], item["reason"], "overrides the profile",
                       item["value"], item["wanted"]))

    content = render_conf(values)
    file_changed = content != profile.file_before
    actions = ["set %s: %s -> %s" % (name, before, after) for name, before, after in writes]
    if file_changed:
        actions.append("write %s" % params["file"])

    result = dict(changed=bool(writes) or file_changed, keys=report, actions=actions,
                  file=params["file"], file_changed=file_changed, overrides=overrides)
    if module._diff:
        before_live = dict((n, e["before"]) for n, e in report.items())
        after_live = dict((n, e["after"]) for n, e in report.items())
        result["diff"] = [
            dict(before_header="live kernel values", after_header="live kernel values",
                 before=live_text(before_live), after=live_text(after_live)),
            dict(before_header=params["file"], after_header=params["file"],
                 before=profile.file_before or "", after=content),
        ]
    if module.check_mode or not result["changed"]:
        return result
    profile.apply(writes)
    if file_changed:
        profile.persist(content)
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    host = host_root(module)
    try:
        # one lock around read -> plan -> apply -> persist: a run never plans against a state
        # that another run is changing (check mode changes nothing and takes no lock)
        with node_lock(lock_path(host)) if not module.check_mode else no_lock():
            result = run(module)
    except SysctlError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    except LockTimeout as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="sysctl_profile: %s" % exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
