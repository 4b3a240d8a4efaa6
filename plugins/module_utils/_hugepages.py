# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HugePages capability (stdlib only): pools per page size and NUMA node, THP, hugetlbfs.

``HugePages.read()`` reads the pools, THP, mounts and managed files; ``plan()`` validates
everything and returns the actions (in check mode it also reports the one shortfall known
beforehand: growth beyond ``MemAvailable``); ``apply()`` writes the pools and reads them back,
because the kernel silently allocates fewer pages than asked when memory is fragmented. The
texts of the managed files come from ``_hugepages_files``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import pwd
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import (
    Action,
    Capability,
    apply_file,
    file_action,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._fstab import unescape
from ansible_collections.aiinfra.datapath.plugins.module_utils._tuned import load as load_tuned
from ansible_collections.aiinfra.datapath.plugins.module_utils._hugepages_files import (
    DEFAULT_BOOT_UNIT_FILE,
    DEFAULT_SYSCTL_FILE,
    FILE_KEYS,
    cmdline_args,
    render_files,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import find_overrides

SIZES_KB = {"2M": 2048, "1G": 1048576}
POOL_DIR = "/sys/kernel/mm/hugepages/hugepages-%dkB"
NODE_ROOT = "/sys/devices/system/node"
NODE_POOL_DIR = NODE_ROOT + "/node%s/hugepages/hugepages-%dkB"
THP_DIR = "/sys/kernel/mm/transparent_hugepage"
THP_CHOICES = {
    "enabled": ("always", "madvise", "never"),
    "defrag": ("always", "defer", "defer+madvise", "madvise", "never"),
}
# diff sections of the value actions
POOL_DIFF = "hugepage pools"
THP_DIFF = "transparent hugepages"
MOUNT_DIFF = "hugetlbfs mounts"
PERSISTED_ON_CMDLINE = ("; the pages are persisted on the kernel command line and are allocated "
                        "at the next boot")


class HugePagesError(CapabilityError):
    """A HugePages request that cannot be met as asked (nothing changed, or rolled back)."""


def size_label(kb):
    for label, value in SIZES_KB.items():
        if value == kb:
            return label
    return "%dkB" % kb


def memory_facts(meminfo, node_entries):
    """datapath_apply's node facts: MemTotal in bytes and the count of NUMA nodes, from the text of
    /proc/meminfo and the names in /sys/devices/system/node (the action reads them by one shell
    command; datapath_run reads them itself to check the facts a kept plan assumed)."""
    total = parse_meminfo(meminfo).get("MemTotal")
    count = len([name for name in node_entries if re.match(r"^node\d+\Z", name)])
    return {"gathered": ["memory"], "memory_bytes": total * 1024 if total is not None else None,
            "numa_nodes": count or None}


def parse_meminfo(text):
    info = {}
    for line in (text or "").splitlines():
        if ":" not in line:
            continue
        name, rest = line.split(":", 1)
        fields = rest.split()
        if fields and re.match(r"^[0-9]{1,20}\Z", fields[0]):
            info[name.strip()] = int(fields[0])
    return info


def parse_pagesize(text):
    """``2M`` / ``1024M`` / ``1G`` / ``2048k`` (hugetlbfs mount option) -> kB."""
    match = re.match(r"^([0-9]{1,15})([kKmMgG])?[bB]?\Z", text.strip())
    if not match:
        return None
    number = int(match.group(1))
    unit = (match.group(2) or "k").lower()
    return number * {"k": 1, "m": 1024, "g": 1024 * 1024}[unit] if unit != "k" else number


def _int(host, path):
    text = host.read(path)
    if text is None or not re.match(r"^-?[0-9]{1,20}\Z", text.strip()):
        return None
    return int(text)


def parse_mounts(text):
    mounts = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point = unescape(fields[1])
        mounts[point] = {"source": fields[0], "fstype": fields[2],
                         "options": fields[3].split(",")}
    return mounts


def resolve_id(value, kind):
    """Owner / group name or number -> numeric id (on the node)."""
    text = str(value)
    if re.match(r"^[0-9]{1,10}\Z", text):
        return int(text)
    try:
        if kind == "owner":
            return pwd.getpwnam(text).pw_uid
        return grp.getgrnam(text).gr_gid
    except KeyError:
        return None


class Pool(object):
    """One page size: the global counters and, where NUMA nodes exist, the per-node ones."""

    def __init__(self, host, kb):
        self.host = host
        self.kb = kb
        self.dir = POOL_DIR % kb
        self.nodes = {}

    @property
    def supported(self):
        return self.host.exists(self.dir + "/nr_hugepages")

    def read(self):
        self.nr = _int(self.host, self.dir + "/nr_hugepages") or 0
        self.free = _int(self.host, self.dir + "/free_hugepages") or 0
        self.resv = _int(self.host, self.dir + "/resv_hugepages") or 0
        self.surplus = _int(self.host, self.dir + "/surplus_hugepages") or 0
        self.nodes = {}
        for entry in self.host.listdir(NODE_ROOT):
            match = re.match(r"^node(\d+)\Z", entry)
            if not match:
                continue
            base = NODE_POOL_DIR % (match.group(1), self.kb)
            if self.host.exists(base + "/nr_hugepages"):
                self.nodes[match.group(1)] = {
                    "nr": _int(self.host, base + "/nr_hugepages") or 0,
                    "free": _int(self.host, base + "/free_hugepages") or 0,
                }
        return self

    @property
    def in_use(self):
        # reserved pages are still counted as free but are promised to a mapping
        return self.nr - self.free + self.resv

    def node_counts(self):
        return dict((node, self.nodes[node]["nr"]) for node in sorted(self.nodes, key=int))

    def node_path(self, node):
        return NODE_POOL_DIR % (node, self.kb) + "/nr_hugepages"

    @property
    def total_path(self):
        return self.dir + "/nr_hugepages"


def _fmt_nodes(counts):
    return ", ".join("node%s: %s" % (node, counts[node]) for node in sorted(counts, key=int)) or "-"


def page_report(plan, after=None, shortfall=False):
    """One entry of the ``pages`` result."""
    return dict(size=plan["size"], requested=plan["requested"], before=plan["before"],
                after=plan["requested"] if after is None else after,
                per_node=plan["per_node"] or None, nodes_before=plan["nodes_before"],
                nodes_after=plan.get("nodes_after", plan["per_node"] or {}),
                persist=plan["persist"], shortfall=shortfall)


def shortfall_message(plan, errors):
    wanted = _fmt_nodes(plan["per_node"]) if plan["per_node"] else "total"
    text = ("%s pages: requested %d (%s), allocated %d (%s); before %d (%s)"
            % (plan["size"], plan["requested"], wanted, plan["allocated"],
               _fmt_nodes(plan["nodes_after"]), plan["before"], _fmt_nodes(plan["nodes_before"])))
    if errors:
        text += "; " + "; ".join(errors)
    return text


def pool_action(path, before, after, node=None):
    """Write ``after`` pages to one ``nr_hugepages`` file (``node``: a NUMA node's, else the total)."""
    return Action("pool", path, "write %s: %d -> %d" % (path, before, after), before=before,
                  after=after, diff=POOL_DIFF, node=node)


class HugePages(Capability):
    """Everything the ``hugepages`` module manages on one node."""

    name = "hugepages"

    @classmethod
    def options(cls):
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
                # choices are checked in plan(): a null from the plan means "leave alone"
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
            thp_persist=dict(type="bool", default=True),
            sysctl_file=dict(type="path", default=DEFAULT_SYSCTL_FILE),
            boot_unit_file=dict(type="path", default=DEFAULT_BOOT_UNIT_FILE),
            fstab=dict(type="path", default="/etc/fstab"),
        )

    # -- read -------------------------------------------------------------------------
    def read(self):
        meminfo = parse_meminfo(self.root.read_raw("/proc/meminfo"))
        pools = {}
        for label, kb in SIZES_KB.items():
            pools[label] = Pool(self.root, kb)
            if pools[label].supported:
                pools[label].read()
        thp = {}
        for name in THP_CHOICES:
            text = self.root.read(THP_DIR + "/" + name)
            if text is None:
                continue
            match = re.search(r"\[([^\]]+)\]", text)
            thp[name] = {
                "current": match.group(1) if match else text.strip(),
                "available": [word.strip("[]") for word in text.split()],
            }
        try:
            tuned = load_tuned(self.root)
        except (IOError, OSError) as exc:
            tuned = None
            self.warn("the active TuneD profile could not be read: %s" % exc)
        return dict(meminfo=meminfo, default_kb=meminfo.get("Hugepagesize"), pools=pools, thp=thp,
                    mounts=parse_mounts(self.root.read_raw("/proc/mounts")),
                    files=dict((key, self.root.read_raw(self.params[key])) for key in FILE_KEYS), tuned=tuned)

    # -- validate and plan ------------------------------------------------------------
    def plan(self, state):
        problems = []
        self.page_plans = []
        seen = set()
        for index, page in enumerate(self.params["pages"] or []):
            where = "pages[%d] (%s)" % (index, page["size"])
            if page["size"] in seen:
                problems.append("%s: size given twice" % where)
                continue
            seen.add(page["size"])
            plan = self._plan_page(state, where, page, state["pools"][page["size"]], problems)
            if plan is not None:
                self.page_plans.append(plan)
        self.thp_plan = self._plan_thp(state, problems)
        self.tuned = self._tuned_thp(state.get("tuned"))
        self.mount_plans = self._plan_mounts(state, problems)
        if problems:
            raise HugePagesError("nothing was changed: " + "; ".join(problems), problems=problems)
        # thp_persist false: another backend (the TuneD profile's [vm]) sets THP at boot
        thp_boot = self.thp_plan if self.params.get("thp_persist", True) else {}
        files, values = render_files(self.page_plans, thp_boot, self.mount_plans, state["files"], THP_DIR)
        self.cmdline_args = cmdline_args(self.page_plans)
        self.overrides = find_overrides(self.root, self.params["sysctl_file"], values) if values else []
        for item in self.overrides:
            self.warn("vm.nr_hugepages: %s (%s) sets %r; the boot value will not be %r"
                      % (item["file"], item["reason"], item["value"], item["wanted"]))
        self.reports = [page_report(plan) for plan in self.page_plans]
        self.reboot_required = any(p["persist"] == "cmdline" and "not_attempted" in p for p in self.page_plans)
        actions = self._actions(state, files)
        if self.check_mode:
            self._predict_shortfalls()
        return actions

    def _plan_page(self, state, where, page, pool, problems):
        if page["count"] < 0:
            problems.append("%s: count must be >= 0, got %d" % (where, page["count"]))
            return None
        if not pool.supported:
            problems.append("%s: this kernel/CPU offers no %s pages (%s missing)"
                            % (where, page["size"], pool.dir))
            return None
        per_node = page.get("per_node")
        persist = page["persist"]
        plan = {"size": page["size"], "kb": pool.kb, "persist": persist,
                "requested": page["count"], "before": pool.nr, "per_node": None,
                "nodes_before": pool.node_counts(), "writes": [], "total_path": pool.total_path,
                "node_paths": dict((node, pool.node_path(node)) for node in pool.nodes)}
        if persist == "sysctl" and pool.kb != state["default_kb"]:
            problems.append("%s: persist sysctl (vm.nr_hugepages) only covers the default page "
                            "size (%s); use cmdline or boot_unit"
                            % (where, size_label(state["default_kb"] or 0)))
        if per_node:
            targets = {}
            for node, count in per_node.items():
                node = str(node)
                if isinstance(count, str) and re.match(r"^[0-9]{1,15}\Z", count.strip()):
                    count = int(count)
                if not re.match(r"^[0-9]{1,6}\Z", node) or not isinstance(count, int) or isinstance(count, bool) \
                        or count < 0:
                    problems.append("%s: per_node needs node number -> count >= 0, got %r: %r"
                                    % (where, node, count))
                    continue
                if node not in pool.nodes:
                    problems.append("%s: NUMA node %s does not exist here (nodes: %s)"
                                    % (where, node, ", ".join(sorted(pool.nodes, key=int)) or "none"))
                    continue
                targets[node] = count
            if sum(targets.values()) != page["count"] and len(targets) == len(per_node):
                problems.append("%s: per_node counts add up to %d, count is %d"
                                % (where, sum(targets.values()), page["count"]))
            if persist == "sysctl":
                problems.append("%s: per_node counts cannot be persisted with sysctl "
                                "(vm.nr_hugepages is a total); use cmdline or boot_unit" % where)
            plan["per_node"] = targets
            for node in sorted(targets, key=int):
                have = pool.nodes[node]
                in_use = have["nr"] - have["free"]
                if targets[node] < in_use:
                    problems.append(
                        "%s: refusing to shrink node%s to %d pages: %d are in use "
                        "(nr_hugepages %d, free %d); stop the workloads using them first"
                        % (where, node, targets[node], in_use, have["nr"], have["free"]))
                if targets[node] != have["nr"]:
                    plan["writes"].append(pool_action(pool.node_path(node), have["nr"], targets[node], node))
            growth = sum(max(0, targets[n] - pool.nodes[n]["nr"]) for n in targets)
        else:
            if page["count"] < pool.in_use:
                problems.append(
                    "%s: refusing to shrink to %d pages: %d are in use or reserved "
                    "(HugePages total %d, free %d, reserved %d); stop the workloads using them "
                    "first" % (where, page["count"], pool.in_use, pool.nr, pool.free, pool.resv))
            if page["count"] != pool.nr:
                plan["writes"].append(pool_action(pool.total_path, pool.nr, page["count"]))
            growth = max(0, page["count"] - pool.nr)
        available_kb = state["meminfo"].get("MemAvailable")
        plan["fits"] = available_kb is None or growth * pool.kb <= available_kb
        if not plan["fits"]:
            # asking the kernel anyway would take every free page of the node for a while
            plan["not_attempted"] = (
                "not attempted: %d more %s pages need %d MiB, MemAvailable is %d MiB"
                % (growth, page["size"], growth * pool.kb // 1024, available_kb // 1024))
            plan["writes"] = [w for w in plan["writes"] if w.after <= w.before]
        return plan

    def _plan_thp(self, state, problems):
        wanted = self.params.get("thp") or {}
        plan = {}
        for name in sorted(THP_CHOICES):
            value = wanted.get(name)
            if value is None:
                continue
            if value not in THP_CHOICES[name]:
                problems.append("thp.%s: %r is not one of %s" % (name, value, ", ".join(THP_CHOICES[name])))
                continue
            if name not in state["thp"]:
                problems.append("thp.%s: %s/%s does not exist on this kernel"
                                % (name, THP_DIR, name))
                continue
            if value not in state["thp"][name]["available"]:
                problems.append("thp.%s: %r is not offered by this kernel (offers: %s)"
                                % (name, value, ", ".join(state["thp"][name]["available"])))
                continue
            plan[name] = {"before": state["thp"][name]["current"], "after": value}
        return plan

    def _tuned_thp(self, tuned):
        """The active TuneD profile's [vm] transparent_hugepages against the planned THP mode: TuneD
        writes it when it starts, after the boot's tmpfiles line, so a different value is TuneD's."""
        if not tuned:
            return None
        conflicts = []
        theirs = tuned["vm"].get("transparent_hugepages")
        ours = (self.thp_plan.get("enabled") or {}).get("after")
        if theirs and ours and theirs["value"] != ours:
            conflicts.append({"key": "transparent_hugepages", "value": theirs["value"], "wanted": ours,
                              "file": theirs["file"], "profile": " ".join(tuned["profiles"]), "wins": "tuned"})
            self.warn("THP: the active TuneD profile %s sets transparent_hugepages=%s in %s, and TuneD writes it "
                      "when it starts, after this module's boot file: THP ends as %s, not %s; set it in the "
                      "profile's [vm] section or remove it there"
                      % (" ".join(tuned["profiles"]), theirs["value"], theirs["file"], theirs["value"], ours))
        return {"profiles": tuned["profiles"], "files": tuned["files"], "conflicts": conflicts}

    def _plan_mounts(self, state, problems):
        plans = []
        for index, mount in enumerate(self.params.get("mounts") or []):
            where = "mounts[%d] (%s)" % (index, mount["path"])
            kb = SIZES_KB[mount["size"]]
            if not mount["path"].startswith("/"):
                problems.append("%s: path must be absolute" % where)
                continue
            if not state["pools"][mount["size"]].supported:
                problems.append("%s: this kernel offers no %s pages" % (where, mount["size"]))
                continue
            uid = resolve_id(mount["owner"], "owner")
            gid = resolve_id(mount["group"], "group")
            try:
                mode = int(str(mount["mode"]), 8)
            except ValueError:
                mode = None
            if uid is None:
                problems.append("%s: owner %r does not exist on this node" % (where, mount["owner"]))
            if gid is None:
                problems.append("%s: group %r does not exist on this node" % (where, mount["group"]))
            if mode is None or mode > 0o7777:
                problems.append("%s: mode must be octal like '0770', got %r" % (where, mount["mode"]))
            if None in (uid, gid, mode):
                continue
            options = "pagesize=%s,uid=%d,gid=%d,mode=%04o" % (mount["size"], uid, gid, mode)
            plan = {"path": mount["path"], "size": mount["size"], "options": options,
                    "uid": uid, "gid": gid, "mode": mode, "mount": False, "fix_owner": False}
            current = state["mounts"].get(mount["path"])
            real = self.root.path(mount["path"])
            if current is not None:
                if current["fstype"] != "hugetlbfs":
                    problems.append("%s: %s is mounted there; refusing to mount over it"
                                    % (where, current["fstype"]))
                    continue
                size = [o.split("=", 1)[1] for o in current["options"] if o.startswith("pagesize=")]
                have_kb = parse_pagesize(size[0]) if size else state["default_kb"]
                if have_kb != kb:
                    problems.append("%s: mounted with pagesize %s, wanted %s; unmount it first "
                                    "(refusing to unmount a hugetlbfs that may be in use)"
                                    % (where, size_label(have_kb or 0), mount["size"]))
                    continue
                st = os.stat(real)
                if (st.st_uid, st.st_gid, st.st_mode & 0o7777) != (uid, gid, mode):
                    plan["fix_owner"] = True
                    plan["owner_before"] = "%d:%d %04o" % (st.st_uid, st.st_gid, st.st_mode & 0o7777)
            else:
                if os.path.exists(real) and not os.path.isdir(real):
                    problems.append("%s: exists and is not a directory" % where)
                    continue
                plan["mount"] = True
            plans.append(plan)
        return plans

    def _actions(self, state, files):
        actions = []
        for plan in self.page_plans:
            actions.extend(plan["writes"])
        for name in sorted(self.thp_plan):
            item = self.thp_plan[name]
            if item["before"] != item["after"]:
                path = THP_DIR + "/" + name
                actions.append(Action("thp", path, "write %s: %s -> %s" % (path, item["before"], item["after"]),
                                      before=item["before"], after=item["after"], diff=THP_DIFF, name=name))
        for plan in self.mount_plans:
            if plan["mount"]:
                actions.append(Action("mount", plan["path"], "mount -t hugetlbfs -o %s hugetlbfs %s"
                                      % (plan["options"], plan["path"]), after=plan["options"],
                                      diff=MOUNT_DIFF, plan=plan))
            elif plan["fix_owner"]:
                owner = "%d:%d %04o" % (plan["uid"], plan["gid"], plan["mode"])
                actions.append(Action("owner", plan["path"], "set owner/mode of %s: %s -> %s"
                                      % (plan["path"], plan["owner_before"], owner),
                                      before=plan["owner_before"], after=owner, diff=MOUNT_DIFF, plan=plan))
        for key in FILE_KEYS:
            if files[key] != state["files"][key]:
                actions.append(file_action(self.params[key], state["files"][key], files[key], mode=0o644))
        return actions

    # -- shortfalls -------------------------------------------------------------------
    def _shortfall(self, plan, errors):
        """Warn about a shortfall, or return its message when it must fail the run."""
        message = shortfall_message(plan, errors)
        if plan["persist"] == "cmdline":
            self.reboot_required = True
            self.warn(message + PERSISTED_ON_CMDLINE)
        elif self.params["on_shortfall"] == "warn":
            self.warn(message)
        else:
            return message
        return None

    def _predict_shortfalls(self):
        """Check mode: the one shortfall known beforehand, growth beyond MemAvailable."""
        reports = []
        for plan in self.page_plans:
            if "not_attempted" not in plan:
                reports.append(page_report(plan))
                continue
            plan["allocated"], plan["nodes_after"] = plan["before"], plan["nodes_before"]
            reports.append(page_report(plan, after=plan["before"], shortfall=True))
            failure = self._shortfall(plan, [plan["not_attempted"]])
            if failure:
                raise HugePagesError("the kernel would allocate fewer HugePages than requested: "
                                     "%s; nothing was changed" % failure, pages=reports)
        self.reports = reports

    # -- apply ------------------------------------------------------------------------
    def needs_apply(self, state, actions):
        # a growth that is not attempted still reads the pools back and reports the shortfall
        return bool(actions) or any("not_attempted" in plan for plan in self.page_plans)

    def apply(self, state, actions):
        """Pools first (read back; a shortfall fails and rolls back, or warns), then the rest."""
        done, outcome = self._apply_pools()
        failures = []
        self.reports = []
        for plan, short, errors in outcome:
            self.reports.append(page_report(plan, after=plan["allocated"], shortfall=short))
            failure = self._shortfall(plan, errors) if short else None
            if failure:
                failures.append(failure)
        if failures:
            rollback = self.rollback(done)
            raise HugePagesError(
                "the kernel allocated fewer HugePages than requested (memory fragmented or "
                "too small): %s; pools changed in this run were restored"
                % "; ".join(failures), pages=self.reports, rollback=rollback)
        for action in actions:
            if action.kind == "thp":
                try:
                    self.root.write(action.target, action.after + "\n")
                except (IOError, OSError) as exc:
                    raise HugePagesError("thp.%s: kernel refused %r (%s)"
                                         % (action.data["name"], action.after, exc.strerror or exc))
            elif action.kind in ("mount", "owner"):
                self._apply_mount(action)
            elif action.kind == "file":
                apply_file(self.root, action)

    def _apply_pools(self):
        """Write every pool, read it back (the pool actions' ``after`` becomes what the kernel
        holds); return the writes done and the per-size outcome."""
        done = []
        outcome = []
        for plan in self.page_plans:
            errors = [plan["not_attempted"]] if "not_attempted" in plan else []
            for action in plan["writes"]:
                try:
                    self.root.write(action.target, "%d\n" % action.after)
                    done.append((action.target, action.before))
                except (IOError, OSError) as exc:
                    errors.append("%s: %s" % (action.target, exc.strerror or exc))
            pool = Pool(self.root, plan["kb"]).read()
            plan["allocated"] = pool.nr
            plan["nodes_after"] = pool.node_counts()
            for action in plan["writes"]:
                node = action.data["node"]
                action.after = pool.nr if node is None else plan["nodes_after"].get(node, action.after)
            if plan["per_node"]:
                short = any(pool.nodes[n]["nr"] < plan["per_node"][n] for n in plan["per_node"])
            else:
                short = pool.nr < plan["requested"]
            outcome.append((plan, short, errors))
        return done, outcome

    def rollback(self, done):
        restored = []
        for path, before in reversed(done):
            try:
                self.root.write(path, "%d\n" % before)
                restored.append({"path": path, "restored": before, "ok": True})
            except (IOError, OSError) as exc:
                restored.append({"path": path, "restored": before, "ok": False, "error": str(exc)})
        return restored

    def _apply_mount(self, action):
        plan = action.data["plan"]
        real = self.root.path(plan["path"])
        if action.kind == "mount":
            if not os.path.isdir(real):
                os.makedirs(real, 0o755)
            self.runner.run([self.runner.which("mount") or "mount", "-t", "hugetlbfs", "-o", plan["options"],
                             "hugetlbfs", real], record=True)
        else:
            os.chown(real, plan["uid"], plan["gid"])
            os.chmod(real, plan["mode"])

    # -- report -----------------------------------------------------------------------
    def result(self, state, actions):
        return dict(
            pages=self.reports, thp=self.thp_plan, cmdline_args=self.cmdline_args,
            mounts=[dict(path=m["path"], size=m["size"], options=m["options"]) for m in self.mount_plans],
            overrides=self.overrides, reboot_required=self.reboot_required, tuned=self.tuned,
            pools_changed=any(action.kind == "pool" for action in actions),
        )
