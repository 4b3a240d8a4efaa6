# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hugepages
short_description: Size HugePage pools per page size and NUMA node, THP and hugetlbfs mounts
version_added: 0.1.0
description:
  - Sets the number of 2M and 1G HugePages, as a total
    (C(/sys/kernel/mm/hugepages/hugepages-<kB>kB/nr_hugepages)) or per NUMA node
    (C(/sys/devices/system/node/nodeN/hugepages/...)), and reads the pools back.
  - The kernel silently allocates fewer pages than asked when memory is fragmented. A
    shortfall is never a silent success; it fails (rolling back the pools changed in this
    call) or warns, with requested against allocated pages per NUMA node. A growth larger
    than C(MemAvailable) is not attempted at all.
  - Refuses to shrink a pool below the pages in use (C(nr - free + reserved)).
  - Persists what the plan asks for. C(sysctl) writes C(vm.nr_hugepages) for the default
    page size to its own file. C(boot_unit) writes systemd-tmpfiles C(w) lines. C(cmdline)
    returns the arguments in C(cmdline_args) for M(aiinfra.datapath.kernel_cmdline);
    this module never edits the boot loader.
  - Sets transparent hugepages (C(enabled), C(defrag)) live and persists them in the
    tmpfiles file.
  - Mounts hugetlbfs per page size and keeps one entry per mount point in fstab.
author:
  - aiinfra.datapath contributors (@aiinfra)
attributes:
  check_mode:
    support: full
    description:
      - Computes the same actions and touches nothing. Fragmentation cannot be predicted,
        so a shortfall only shows in a real run.
  diff_mode:
    support: full
    description: Shows pool sizes, THP and the managed files before and after.
  platform:
    support: full
    platforms: posix
    description: Linux nodes with sysfs.
options:
  pages:
    description: The pools, one entry per page size.
    type: list
    elements: dict
    default: []
    suboptions:
      size:
        description: The page size.
        type: str
        required: true
        choices: ["2M", "1G"]
      count:
        description: Total number of pages of this size.
        type: int
        required: true
      per_node:
        description:
          - Pages per NUMA node (node number -> count). They must add up to O(pages[].count).
          - When omitted the kernel spreads the total over the nodes.
        type: dict
      persist:
        description: How the count survives a reboot.
        type: str
        choices: [sysctl, cmdline, boot_unit, none]
        default: sysctl
  on_shortfall:
    description: Fail (and roll back the pools) or only warn when the kernel allocates fewer pages.
    type: str
    choices: [fail, warn]
    default: fail
  thp:
    description: Transparent hugepage settings, live and persisted in O(boot_unit_file).
    type: dict
    suboptions:
      enabled:
        description:
          - Value for C(/sys/kernel/mm/transparent_hugepage/enabled) (C(always), C(madvise),
            C(never)); checked against what the kernel offers. Null leaves it alone.
        type: str
      defrag:
        description:
          - Value for C(/sys/kernel/mm/transparent_hugepage/defrag) (C(always), C(defer),
            C(defer+madvise), C(madvise), C(never)); checked against what the kernel offers.
            Null leaves it alone.
        type: str
  mounts:
    description: hugetlbfs mounts, persisted in O(fstab).
    type: list
    elements: dict
    default: []
    suboptions:
      size:
        description: Page size of the mount.
        type: str
        required: true
        choices: ["2M", "1G"]
      path:
        description: Mount point (created when missing).
        type: path
        required: true
      owner:
        description: Owner of the mount root (name or number).
        type: str
        default: root
      group:
        description: Group of the mount root (name or number).
        type: str
        default: root
      mode:
        description: Octal mode of the mount root.
        type: str
        default: "0755"
  sysctl_file:
    description: Own managed file for C(vm.nr_hugepages); removed when nothing persists via sysctl.
    type: path
    default: /etc/sysctl.d/90-aiinfra-datapath-hugepages.conf
  boot_unit_file:
    description:
      - Own managed systemd-tmpfiles file for per-node and non-default sizes with
        C(persist=boot_unit) and for THP; removed when empty.
    type: path
    default: /etc/tmpfiles.d/aiinfra-datapath-hugepages.conf
  fstab:
    description: The fstab that receives the hugetlbfs entries (other lines are kept as they are).
    type: path
    default: /etc/fstab
  root:
    description: For tests. Directory that C(/proc), C(/sys) and C(/etc) resolve below.
    type: path
    default: /
notes:
  - The HugePage pools and THP are global to the kernel, also when run inside a container
    or network namespace.
  - Kubernetes kubelet reads HugePage capacity at start; restart it after a change.
seealso:
  - module: aiinfra.datapath.kernel_cmdline
"""

EXAMPLES = r"""
- name: Apply the node plan's HugePages
  aiinfra.datapath.hugepages:
    pages: "{{ datapath_plan.hugepages.pages }}"
    thp: "{{ datapath_plan.hugepages.thp }}"
    mounts: "{{ datapath_plan.hugepages.mounts }}"
  register: datapath_hugepages

- name: Hand the boot arguments over to the kernel command line
  aiinfra.datapath.kernel_cmdline:
    args: "{{ datapath_hugepages.cmdline_args }}"

- name: 64 pages of 2M now, persisted via sysctl
  aiinfra.datapath.hugepages:
    pages:
      - {size: 2M, count: 64}
    on_shortfall: fail
"""

RETURN = r"""
pages:
  description: Per page size what was found and done.
  returned: always
  type: list
  elements: dict
  sample:
    - {size: 2M, requested: 64, before: 0, after: 64, per_node: null,
       nodes_before: {"0": 0}, nodes_after: {"0": 64}, persist: sysctl, shortfall: false}
thp:
  description: THP settings before and after.
  returned: always
  type: dict
  sample: {enabled: {before: always, after: madvise}}
mounts:
  description: The hugetlbfs mounts and the options they are mounted with.
  returned: always
  type: list
  elements: dict
cmdline_args:
  description: Kernel arguments that C(persist=cmdline) pages need, for M(aiinfra.datapath.kernel_cmdline).
  returned: always
  type: list
  elements: str
  sample: [hugepagesz=1G, "hugepages=0:4,1:4"]
reboot_required:
  description: Pages could not be allocated now but are persisted on the kernel command line.
  returned: always
  type: bool
actions:
  description: What the module did, or would do in check mode, in order.
  returned: always
  type: list
  elements: str
overrides:
  description: Files applied later at boot that set C(vm.nr_hugepages) to another value.
  returned: always
  type: list
  elements: dict
rollback:
  description: Pools restored after a shortfall (on failure only).
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
from ansible_collections.aiinfra.datapath.plugins.module_utils._hugepages import (
    HugePageSetup,
    HugePagesError,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import (
    CommandError,
    Runner,
)


def argument_spec():
    return dict(
        pages=dict(type="list", elements="dict", default=[], options=dict(
            size=dict(type="str", required=True, choices=["2M", "1G"]),
            count=dict(type="int", required=True),
            per_node=dict(type="dict"),
            persist=dict(type="str", default="sysctl",
                         choices=["sysctl", "cmdline", "boot_unit", "none"]),
        )),
        on_shortfall=dict(type="str", choices=["fail", "warn"], default="fail"),
        thp=dict(type="dict", options=dict(
            # choices are checked in the backend: a null from the plan means "leave alone"
            enabled=dict(type="str"),
            defrag=dict(type="str"),
        )),
        mounts=dict(type="list", elements="dict", default=[], options=dict(
            size=dict(type="str", required=True, choices=["2M", "1G"]),
            path=dict(type="path", required=True),
            owner=dict(type="str", default="root"),
            group=dict(type="str", default="root"),
            mode=dict(type="str", default="0755"),
        )),
        sysctl_file=dict(type="path", default="/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf"),
        boot_unit_file=dict(type="path", default="/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf"),
        fstab=dict(type="path", default="/etc/fstab"),
        root=dict(type="path", default="/"),
    )


def _page_report(plan, after=None, shortfall=False):
    return dict(size=plan["size"], requested=plan["requested"], before=plan["before"],
                after=plan["requested"] if after is None else after,
                per_node=plan["per_node"] or None, nodes_before=plan["nodes_before"],
                nodes_after=plan.get("nodes_after", plan["per_node"] or {}),
                persist=plan["persist"], shortfall=shortfall)


def _pool_text(reports):
    lines = []
    for item in reports:
        lines.append("%s total = %s\n" % (item["size"], item["after"]))
        for node in sorted(item["nodes_after"] or {}, key=int):
            lines.append("%s node%s = %s\n" % (item["size"], node, item["nodes_after"][node]))
    return "".join(lines)


def run(module):
    params = module.params
    host = HostRoot(params["root"])
    setup = HugePageSetup(host, Runner(module), params)
    setup.read()
    setup.plan()
    actions = setup.planned_actions()
    overrides = setup.overrides()
    for item in overrides:
        module.warn("vm.nr_hugepages: %s (%s) sets %r; the boot value will not be %r"
                    % (item["file"], item["reason"], item["value"], item["wanted"]))
    reports = [_page_report(plan) for plan in setup.page_plans]
    result = dict(
        changed=bool(actions), actions=actions, pages=reports,
        thp=setup.thp_plan, cmdline_args=setup.cmdline_args,
        mounts=[dict(path=m["path"], size=m["size"], options=m["options"]) for m in setup.mount_plans],
        overrides=overrides,
        reboot_required=any(p["persist"] == "cmdline" and "not_attempted" in p for p in setup.page_plans),
    )
    before_reports = [dict(r, after=r["before"], nodes_after=r["nodes_before"]) for r in reports]

    if module.check_mode:
        # the one shortfall that is known beforehand: growth beyond MemAvailable
        reports = []
        for plan in setup.page_plans:
            if "not_attempted" not in plan:
                reports.append(_page_report(plan))
                continue
            plan["allocated"], plan["nodes_after"] = plan["before"], plan["nodes_before"]
            reports.append(_page_report(plan, after=plan["before"], shortfall=True))
            message = setup.shortfall_message(plan, [plan["not_attempted"]])
            if plan["persist"] == "cmdline":
                module.warn(message + "; the pages are persisted on the kernel command line "
                            "and are allocated at the next boot")
            elif params["on_shortfall"] == "warn":
                module.warn(message)
            else:
                raise HugePagesError("the kernel would allocate fewer HugePages than requested: "
                                     "%s; nothing was changed" % message, pages=reports)
        result["pages"] = reports

    if not module.check_mode and (actions or any("not_attempted" in p for p in setup.page_plans)):
        done, outcome = setup.apply_pools()
        failures = []
        reports = []
        for plan, short, errors in outcome:
            reports.append(_page_report(plan, after=plan["allocated"], shortfall=short))
            if not short:
                continue
            message = setup.shortfall_message(plan, errors)
            if plan["persist"] == "cmdline":
                result["reboot_required"] = True
                module.warn(message + "; the pages are persisted on the kernel command line "
                            "and are allocated at the next boot")
            elif params["on_shortfall"] == "warn":
                module.warn(message)
            else:
                failures.append(message)
        result["pages"] = reports
        if failures:
            rollback = setup.rollback(done)
            raise HugePagesError(
                "the kernel allocated fewer HugePages than requested (memory fragmented or "
                "too small): %s; pools changed in this run were restored"
                % "; ".join(failures), pages=reports, rollback=rollback)
        setup.apply_thp()
        setup.apply_mounts()
        setup.write_files()

    if module._diff:
        result["diff"] = [
            dict(before_header="hugepage pools", after_header="hugepage pools",
                 before=_pool_text(before_reports), after=_pool_text(result["pages"])),
            dict(before_header="transparent hugepages", after_header="transparent hugepages",
                 before="".join("%s = %s\n" % (k, v["before"]) for k, v in sorted(setup.thp_plan.items())),
                 after="".join("%s = %s\n" % (k, v["after"]) for k, v in sorted(setup.thp_plan.items()))),
        ]
        for key in ("sysctl_file", "boot_unit_file", "fstab"):
            result["diff"].append(dict(
                before_header=params[key], after_header=params[key],
                before=setup.files_before[key] or "", after=setup.files_after[key] or ""))
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    host = host_root(module)
    try:
        # one lock around read -> plan -> apply -> persist (none in check mode: nothing changes)
        with node_lock(lock_path(host)) if not module.check_mode else no_lock():
            result = run(module)
    except HugePagesError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    except CommandError as exc:
        module.fail_json(msg=str(exc), rc=exc.rc, stdout=exc.out, stderr=exc.err)
    except LockTimeout as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="hugepages: %s" % exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
