# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HugePages backend (stdlib only): pools per page size and NUMA node, THP, hugetlbfs.

``HugePageSetup.read()`` reads the pools, THP and mounts; ``plan()`` validates everything
and returns the actions; ``apply()`` writes the pools and reads them back, because the
kernel silently allocates fewer pages than asked when memory is fragmented.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import pwd
import re

from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import atomic_write
from ansible_collections.aiinfra.datapath.plugins.module_utils._sysctl import (
    find_overrides,
    render_conf,
)

SIZES_KB = {"2M": 2048, "1G": 1048576}
POOL_DIR = "/sys/kernel/mm/hugepages/hugepages-%dkB"
NODE_ROOT = "/sys/devices/system/node"
NODE_POOL_DIR = NODE_ROOT + "/node%s/hugepages/hugepages-%dkB"
THP_DIR = "/sys/kernel/mm/transparent_hugepage"
THP_CHOICES = {
    "enabled": ("always", "madvise", "never"),
    "defrag": ("always", "defer", "defer+madvise", "madvise", "never"),
}
DEFAULT_SYSCTL_FILE = "/etc/sysctl.d/90-aiinfra-datapath-hugepages.conf"
DEFAULT_BOOT_UNIT_FILE = "/etc/tmpfiles.d/aiinfra-datapath-hugepages.conf"
TMPFILES_HEADER = (
    "# Managed by aiinfra.datapath.hugepages; changes here are overwritten.\n"
    "# systemd-tmpfiles writes these sysfs values at boot.\n"
)
FSTAB_MARK = "# aiinfra.datapath.hugepages"


class HugePagesError(Exception):
    def __init__(self, msg, **result):
        Exception.__init__(self, msg)
        self.msg = msg
        self.result = result


def size_label(kb):
    for label, value in SIZES_KB.items():
        if value == kb:
            return label
    return "%dkB" % kb


def parse_meminfo(text):
    info = {}
    for line in (text or "").splitlines():
        if ":" not in line:
            continue
        name, rest = line.split(":", 1)
        fields = rest.split()
        if fields and fields[0].isdigit():
            info[name.strip()] = int(fields[0])
    return info


def parse_pagesize(text):
    """``2M`` / ``1024M`` / ``1G`` / ``2048k`` (hugetlbfs mount option) -> kB."""
    match = re.match(r"^(\d+)([kKmMgG])?[bB]?$", text.strip())
    if not match:
        return None
    number = int(match.group(1))
    unit = (match.group(2) or "k").lower()
    return number * {"k": 1, "m": 1024, "g": 1024 * 1024}[unit] if unit != "k" else number


def _int(host, path):
    text = host.read(path)
    if text is None or not text.strip().lstrip("-").isdigit():
        return None
    return int(text)


def parse_mounts(text):
    mounts = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        mounts[point] = {"source": fields[0], "fstype": fields[2],
                         "options": fields[3].split(",")}
    return mounts


def resolve_id(value, kind):
    """Owner / group name or number -> numeric id (on the node)."""
    text = str(value)
    if text.isdigit():
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
            match = re.match(r"^node(\d+)$", entry)
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


class HugePageSetup(object):
    """Everything the ``hugepages`` module manages on one node."""

    def __init__(self, host, runner, params):
        self.host = host
        self.runner = runner
        self.params = params
        self.warnings = []
        self.actions = []
        self.pools = {}
        self.reboot_required = False

    # -- read -------------------------------------------------------------------------
    def read(self):
        self.meminfo = parse_meminfo(self.host.read_raw("/proc/meminfo"))
        self.default_kb = self.meminfo.get("Hugepagesize")
        for label, kb in SIZES_KB.items():
            self.pools[label] = Pool(self.host, kb)
            if self.pools[label].supported:
                self.pools[label].read()
        self.thp = {}
        for name in THP_CHOICES:
            text = self.host.read(THP_DIR + "/" + name)
            if text is None:
                continue
            match = re.search(r"\[([^\]]+)\]", text)
            self.thp[name] = {
                "current": match.group(1) if match else text.strip(),
                "available": [word.strip("[]") for word in text.split()],
            }
        self.mounts = parse_mounts(self.host.read_raw("/proc/mounts"))
        self.files_before = {}
        for key in ("sysctl_file", "boot_unit_file", "fstab"):
            self.files_before[key] = self.host.read_raw(self.params[key])

    # -- validate and plan ------------------------------------------------------------
    def plan(self):
        problems = []
        self.page_plans = []
        seen = set()
        for index, page in enumerate(self.params["pages"] or []):
            where = "pages[%d] (%s)" % (index, page["size"])
            if page["size"] in seen:
                problems.append("%s: size given twice" % where)
                continue
            seen.add(page["size"])
            pool = self.pools[page["size"]]
            plan = self._plan_page(where, page, pool, problems)
            if plan is not None:
                self.page_plans.append(plan)
        self.thp_plan = self._plan_thp(problems)
        self.mount_plans = self._plan_mounts(problems)
        if problems:
            raise HugePagesError("nothing was changed: " + "; ".join(problems), problems=problems)
        self.files_after = self._render_files()

    def _plan_page(self, where, page, pool, problems):
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
                "nodes_before": pool.node_counts(), "writes": []}
        if persist == "sysctl" and pool.kb != self.default_kb:
            problems.append("%s: persist sysctl (vm.nr_hugepages) only covers the default page "
                            "size (%s); use cmdline or boot_unit"
                            % (where, size_label(self.default_kb or 0)))
        if per_node:
            targets = {}
            for node, count in per_node.items():
                node = str(node)
                if isinstance(count, str) and count.strip().isdigit():
                    count = int(count)
                if not node.isdigit() or not isinstance(count, int) or isinstance(count, bool) \
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
                    plan["writes"].append((pool.node_path(node), have["nr"], targets[node]))
            growth = sum(max(0, targets[n] - pool.nodes[n]["nr"]) for n in targets)
        else:
            if page["count"] < pool.in_use:
                problems.append(
                    "%s: refusing to shrink to %d pages: %d are in use or reserved "
                    "(HugePages total %d, free %d, reserved %d); stop the workloads using them "
                    "first" % (where, page["count"], pool.in_use, pool.nr, pool.free, pool.resv))
            if page["count"] != pool.nr:
                plan["writes"].append((pool.total_path, pool.nr, page["count"]))
            growth = max(0, page["count"] - pool.nr)
        available_kb = self.meminfo.get("MemAvailable")
        plan["fits"] = available_kb is None or growth * pool.kb <= available_kb
        if not plan["fits"]:
            # asking the kernel anyway would take every free page of the node for a while
            plan["not_attempted"] = (
                "not attempted: %d more %s pages need %d MiB, MemAvailable is %d MiB"
                % (growth, page["size"], growth * pool.kb // 1024, available_kb // 1024))
            plan["writes"] = [w for w in plan["writes"] if w[2] <= w[1]]
        return plan

    def _plan_thp(self, problems):
        wanted = self.params.get("thp") or {}
        plan = {}
        for name in sorted(THP_CHOICES):
            value = wanted.get(name)
            if value is None:
                continue
            if value not in THP_CHOICES[name]:
                problems.append("thp.%s: %r is not one of %s" % (name, value, ", ".join(THP_CHOICES[name])))
                continue
            if name not in self.thp:
                problems.append("thp.%s: %s/%s does not exist on this kernel"
                                % (name, THP_DIR, name))
                continue
            if value not in self.thp[name]["available"]:
                problems.append("thp.%s: %r is not offered by this kernel (offers: %s)"
                                % (name, value, ", ".join(self.thp[name]["available"])))
                continue
            plan[name] = {"before": self.thp[name]["current"], "after": value}
        return plan

    def _plan_mounts(self, problems):
        plans = []
        for index, mount in enumerate(self.params.get("mounts") or []):
            where = "mounts[%d] (%s)" % (index, mount["path"])
            kb = SIZES_KB[mount["size"]]
            if not mount["path"].startswith("/"):
                problems.append("%s: path must be absolute" % where)
                continue
            if not self.pools[mount["size"]].supported:
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
            current = self.mounts.get(mount["path"])
            real = self.host.path(mount["path"])
            if current is not None:
                if current["fstype"] != "hugetlbfs":
                    problems.append("%s: %s is mounted there; refusing to mount over it"
                                    % (where, current["fstype"]))
                    continue
                size = [o.split("=", 1)[1] for o in current["options"] if o.startswith("pagesize=")]
                have_kb = parse_pagesize(size[0]) if size else self.default_kb
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

    def _render_files(self):
        files = {}
        sysctl_values = {}
        tmpfiles = []
        cmdline = []
        for plan in self.page_plans:
            if plan["persist"] == "sysctl":
                sysctl_values["vm.nr_hugepages"] = str(plan["requested"])
            elif plan["persist"] == "boot_unit":
                if plan["per_node"]:
                    for node in sorted(plan["per_node"], key=int):
                        tmpfiles.append("w %s - - - - %d\n" % (
                            NODE_POOL_DIR % (node, plan["kb"]) + "/nr_hugepages",
                            plan["per_node"][node]))
                else:
                    tmpfiles.append("w %s/nr_hugepages - - - - %d\n"
                                    % (POOL_DIR % plan["kb"], plan["requested"]))
            elif plan["persist"] == "cmdline":
                cmdline.append("hugepagesz=%s" % plan["size"])
                if plan["per_node"]:
                    cmdline.append("hugepages=" + ",".join(
                        "%s:%d" % (node, plan["per_node"][node])
                        for node in sorted(plan["per_node"], key=int)))
                else:
                    cmdline.append("hugepages=%d" % plan["requested"])
        for name in sorted(self.thp_plan):
            tmpfiles.append("w %s/%s - - - - %s\n" % (THP_DIR, name, self.thp_plan[name]["after"]))
        self.cmdline_args = cmdline
        files["sysctl_file"] = render_conf(sysctl_values, module="hugepages") \
            if sysctl_values else None
        files["boot_unit_file"] = TMPFILES_HEADER + "".join(tmpfiles) if tmpfiles else None
        files["fstab"] = self._render_fstab()
        self.sysctl_values = sysctl_values
        return files

    def _render_fstab(self):
        before = self.files_before["fstab"]
        if not self.mount_plans:
            return before
        lines = (before or "").splitlines(True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        for plan in self.mount_plans:
            wanted = "hugetlbfs %s hugetlbfs %s 0 0\n" % (plan["path"], plan["options"])
            found = False
            kept = []
            for line in lines:
                fields = line.split()
                if fields and not fields[0].startswith("#") and len(fields) >= 2 \
                        and fields[1] == plan["path"]:
                    if not found:
                        kept.append(wanted)
                        found = True
                    continue  # a second entry for the same mount point would fight ours
                kept.append(line)
            if not found:
                kept.append(wanted)
            lines = kept
        return "".join(lines)

    # -- report -----------------------------------------------------------------------
    def planned_actions(self):
        actions = []
        for plan in self.page_plans:
            for path, before, after in plan["writes"]:
                actions.append("write %s: %d -> %d" % (path, before, after))
        for name in sorted(self.thp_plan):
            item = self.thp_plan[name]
            if item["before"] != item["after"]:
                actions.append("write %s/%s: %s -> %s" % (THP_DIR, name, item["before"], item["after"]))
        for plan in self.mount_plans:
            if plan["mount"]:
                actions.append("mount -t hugetlbfs -o %s hugetlbfs %s" % (plan["options"], plan["path"]))
            elif plan["fix_owner"]:
                actions.append("set owner/mode of %s: %s -> %d:%d %04o" % (
                    plan["path"], plan["owner_before"], plan["uid"], plan["gid"], plan["mode"]))
        for key in ("sysctl_file", "boot_unit_file", "fstab"):
            if self.files_after[key] != self.files_before[key]:
                verb = "remove" if self.files_after[key] is None else "write"
                actions.append("%s %s" % (verb, self.params[key]))
        return actions

    def overrides(self):
        if not self.sysctl_values:
            return []
        return find_overrides(self.host, self.params["sysctl_file"], self.sysctl_values)

    # -- apply ------------------------------------------------------------------------
    def apply_pools(self):
        """Write every pool, read back; return the per-size outcome."""
        done = []
        outcome = []
        for plan in self.page_plans:
            errors = [plan["not_attempted"]] if "not_attempted" in plan else []
            for path, before, after in plan["writes"]:
                try:
                    self.host.write(path, "%d\n" % after)
                    done.append((path, before))
                except (IOError, OSError) as exc:
                    errors.append("%s: %s" % (path, exc.strerror or exc))
            pool = Pool(self.host, plan["kb"]).read()
            plan["allocated"] = pool.nr
            plan["nodes_after"] = pool.node_counts()
            short = self._shortfall(plan, pool)
            outcome.append((plan, short, errors))
        return done, outcome

    def _shortfall(self, plan, pool):
        if plan["per_node"]:
            return any(pool.nodes[n]["nr"] < plan["per_node"][n] for n in plan["per_node"])
        return pool.nr < plan["requested"]

    def rollback(self, done):
        restored = []
        for path, before in reversed(done):
            try:
                self.host.write(path, "%d\n" % before)
                restored.append({"path": path, "restored": before, "ok": True})
            except (IOError, OSError) as exc:
                restored.append({"path": path, "restored": before, "ok": False, "error": str(exc)})
        return restored

    def shortfall_message(self, plan, errors):
        wanted = _fmt_nodes(plan["per_node"]) if plan["per_node"] else "total"
        text = ("%s pages: requested %d (%s), allocated %d (%s); before %d (%s)"
                % (plan["size"], plan["requested"], wanted, plan["allocated"],
                   _fmt_nodes(plan["nodes_after"]), plan["before"],
                   _fmt_nodes(plan["nodes_before"])))
        if errors:
            text += "; " + "; ".join(errors)
        return text

    def apply_thp(self):
        for name in sorted(self.thp_plan):
            item = self.thp_plan[name]
            if item["before"] == item["after"]:
                continue
            try:
                self.host.write(THP_DIR + "/" + name, item["after"] + "\n")
            except (IOError, OSError) as exc:
                raise HugePagesError("thp.%s: kernel refused %r (%s)"
                                     % (name, item["after"], exc.strerror or exc))

    def apply_mounts(self):
        for plan in self.mount_plans:
            real = self.host.path(plan["path"])
            if plan["mount"]:
                if not os.path.isdir(real):
                    os.makedirs(real, 0o755)
                self.runner.run([self.runner.which("mount") or "mount", "-t", "hugetlbfs", "-o", plan["options"],
                                 "hugetlbfs", real], record=True)
            elif plan["fix_owner"]:
                os.chown(real, plan["uid"], plan["gid"])
                os.chmod(real, plan["mode"])

    def write_files(self):
        for key in ("sysctl_file", "boot_unit_file", "fstab"):
            after = self.files_after[key]
            if after == self.files_before[key]:
                continue
            path = self.host.path(self.params[key])
            if after is None:
                os.unlink(path)
            else:
                atomic_write(path, after, mode=0o644)
