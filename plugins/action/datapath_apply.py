# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin behind ``aiinfra.datapath.datapath_apply`` (docs: plugins/modules/datapath_apply.py).

One task per host instead of about twenty: it collects the node's facts, computes its plan and
runs the capability modules in dependency order, each exactly once, from this one worker.

The capability roles stay the single source of truth. For each capability this plugin reads
the role's ``defaults/main.yml`` and the module task of its ``tasks/main.yml``, and templates
that task's arguments and ``when`` with: role defaults < the host's variables < the task's own
``vars`` < this run's plan and earlier results. A variable that changes a role (for example
``link_mtu_persist`` in group_vars) therefore changes this path the same way. What the roles do
in extra tasks (the NVMe device count check, the kubelet restart handlers, the firmware gate,
the initramfs note) is done here explicitly, with the roles' own variables.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from ansible import context
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template

try:
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils import cluster_spec as _spec
except ImportError as exc:  # pydantic missing: say so when the action runs, not at import
    _spec = None
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

from ansible_collections.aiinfra.datapath.plugins.filter.network import firmware_violations
from ansible_collections.aiinfra.datapath.plugins.module_utils._hugepages import NODE_ROOT, parse_meminfo

COLLECTION = "aiinfra.datapath"
ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")

# capability -> (role, module, registered result variable, tags that select it)
CAPABILITIES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "sysctl": ("sysctl", "sysctl_profile", "sysctl_result", ("kernel", "sysctl")),
    "hugepages": ("hugepages", "hugepages", "hugepages_result", ("kernel", "hugepages")),
    "kernel_cmdline": ("kernel_cmdline", "kernel_cmdline", "kernel_cmdline_result", ("kernel", "kernel_cmdline")),
    "link_mtu": ("link_mtu", "link_mtu", "link_mtu_result", ("network", "mtu", "link_mtu")),
    "roce_qos": ("roce_qos", "roce_qos", "roce_qos_result", ("network", "qos", "roce_qos")),
    "nic_firmware": ("nic_firmware", "nic_firmware", "nic_firmware_result", ("network", "firmware", "nic_firmware")),
    "nvme_cache": ("nvme_cache", "nvme_layout", "nvme_cache_result", ("storage", "nvme_cache")),
    "k8s_node": ("k8s_node", "nfd_labels", "k8s_node_result", ("k8s", "k8s_node")),
}
ORDER = tuple(CAPABILITIES)

MARK = "--aiinfra-datapath-numa--"

# the variables of node_plan's facts argument (see plugin_utils/cluster_spec/plan.py node_facts)
PLAN_FACT_VARS = ("datapath_memory_bytes", "datapath_numa_nodes", "ansible_memtotal_mb", "ansible_facts")


def selected_by_tags(tags: tuple[str, ...], run_tags: Any, skip_tags: Any) -> bool:
    """Ansible's tag rules for a task tagged ``tags``: selected by ``--tags`` (all, tagged or one
    of its tags; nothing given means all) and not deselected by ``--skip-tags``."""
    run = {str(t) for t in (run_tags or ())} or {"all"}
    skip = {str(t) for t in (skip_tags or ())}
    if skip & (set(tags) | {"tagged"}):
        return False
    return bool(run & ({"all", "tagged"} | set(tags)))


def kubelet_restart_needed(variables: Mapping[str, Any], results: Mapping[str, Any]) -> bool:
    """The two capability roles' kubelet handlers, as one decision (restart once at most)."""
    hp = results.get("hugepages") or {}
    k8s = results.get("k8s_node") or {}
    pools_changed = any("/nr_hugepages: " in str(a) for a in hp.get("actions") or [])
    return bool((_bool(variables.get("hugepages_restart_kubelet")) and pools_changed)
                or (_bool(variables.get("k8s_node_restart_kubelet")) and k8s.get("hugepages_changed")))


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("spec", "capabilities", "validate"))
    _requires_connection = True

    # ---- role files ---------------------------------------------------------------------------------
    def _role_parts(self, role: str, module: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The role's defaults and the task that calls the capability module."""
        base = os.path.join(ROLES_DIR, role)
        defaults = self._loader.load_from_file(os.path.join(base, "defaults", "main.yml"),
                                               trusted_as_template=True) or {}
        tasks = self._loader.load_from_file(os.path.join(base, "tasks", "main.yml"),
                                            trusted_as_template=True) or []
        fqcn = f"{COLLECTION}.{module}"
        for task in tasks:
            if isinstance(task, Mapping) and fqcn in task:
                return dict(defaults), dict(task)
        raise AnsibleActionFail(f"role {COLLECTION}.{role} has no {fqcn} task ({base}/tasks/main.yml)")

    # ---- templating ---------------------------------------------------------------------------------
    def _templar_for(self, variables: Mapping[str, Any]) -> Any:
        return self._templar.copy_with_new_env(available_variables=variables)

    def _conditions_hold(self, templar: Any, when: Any) -> bool:
        if when is None:
            return True
        for condition in when if isinstance(when, list) else [when]:
            if not templar.evaluate_conditional(condition):
                return False
        return True

    # ---- the run ------------------------------------------------------------------------------------
    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars if task_vars is not None else {}
        result = super().run(tmp, task_vars)
        del tmp
        if _spec is None:
            raise AnsibleActionFail(f"{COLLECTION}.datapath_apply needs pydantic>=2 on the controller "
                                    f"(pip install -r requirements.txt): {_IMPORT_ERROR}")
        args = self._task.args
        spec_data = args.get("spec")
        if spec_data is None:
            raise AnsibleActionFail("datapath_apply: no cluster spec (set the `datapath` variable)")
        wanted = args.get("capabilities")
        wanted = list(ORDER) if wanted is None else [str(c) for c in wanted]
        unknown = [c for c in wanted if c not in CAPABILITIES]
        if unknown:
            raise AnsibleActionFail(f"datapath_apply: unknown capabilities {unknown}; known: {list(ORDER)}")
        host = str(task_vars.get("inventory_hostname"))
        host_templar = self._templar_for(task_vars)
        clock = [time.monotonic()]
        phases: dict[str, float] = {}

        def lap(name: str) -> None:
            now = time.monotonic()
            phases[name] = round(now - clock[0], 3)
            clock[0] = now

        # 0. the spec, validated before anything is read or changed on the node. Every host
        #    checks it (milliseconds); the first host of the play lists every error, the others
        #    point there, so that a broken spec is reported once, in full.
        errors = _spec.validate_spec(spec_data)
        if errors:
            play_hosts = [str(h) for h in host_templar.template(task_vars.get("ansible_play_hosts") or [host])]
            first = play_hosts[0] if play_hosts else host
            if host == first:
                lines = "\n".join(f"  - {e.render()}" for e in errors)
                message = f"the cluster spec has {len(errors)} error(s); nothing was changed:\n{lines}"
            else:
                message = f"the cluster spec has {len(errors)} error(s), listed under {first}; nothing was changed"
            result.update(failed=True, msg=message, spec_errors=len(errors))
            return result

        # 1. facts: memory and NUMA nodes, as datapath_facts' memory section reads them, by one
        #    shell command (no Python process on the node for two kernel files)
        gathered = self._memory_facts()
        lap("facts")

        # 2. the plan
        plan_facts: dict[str, Any] = {"datapath_facts": gathered}
        for name in PLAN_FACT_VARS:
            if name in task_vars:
                plan_facts[name] = host_templar.template(task_vars[name])
        groups = [str(g) for g in host_templar.template(task_vars.get("group_names", []))]
        try:
            plan = _spec.node_plan(spec_data, host, groups, plan_facts)
        except _spec.SpecValidationError as exc:
            lines = "\n".join(f"  - {e.render()}" for e in exc.errors)
            raise AnsibleActionFail(f"{host}: the plan cannot be built:\n{lines}") from None
        lap("plan")

        # 3. which capabilities run: datapath_capabilities and the tags of this run
        run_tags = task_vars.get("ansible_run_tags") or context.CLIARGS.get("tags") or ()
        skip_tags = task_vars.get("ansible_skip_tags") or context.CLIARGS.get("skip_tags") or ()
        selected = [c for c in ORDER if c in wanted and selected_by_tags(CAPABILITIES[c][3], run_tags, skip_tags)]

        # 4. one module call per capability, in dependency order, all in one Python process on
        #    the node (aiinfra.datapath.datapath_run): the arguments are templated here, per role
        results: dict[str, Any] = {c: {} for c in ORDER}
        diffs: list[Any] = []
        warnings: list[str] = []
        timings: dict[str, float] = {}
        layered: dict[str, Any] = dict(task_vars)
        layered.update(datapath_plan=plan, datapath_facts=gathered)
        for _role, _module, result_var, _tags in CAPABILITIES.values():
            layered[result_var] = {}  # never a stale result of an earlier play
        # one scope for every selected role (their variables are prefixed with the role's name):
        # all their defaults < the host's variables < all their module tasks' own vars
        parts = {cap: self._role_parts(*CAPABILITIES[cap][:2]) for cap in selected}
        scope: dict[str, Any] = {}
        for cap in selected:
            scope.update(parts[cap][0])
        scope.update(layered)
        for cap in selected:
            scope.update(parts[cap][1].get("vars") or {})
        templar = self._templar_for(scope)
        calls: list[dict[str, Any]] = []
        for cap in selected:
            _role, module, result_var, _tags = CAPABILITIES[cap]
            task = parts[cap][1]
            if not self._conditions_hold(templar, task.get("when")):
                results[cap] = {"changed": False, "skipped": True,
                                "skip_reason": f"nothing planned for {cap} on this host"}
                continue
            calls.append({"module": module, "args": templar.template(task[f"{COLLECTION}.{module}"])})
        lap("arguments")
        failed_capability = None
        if calls:
            batch = self._execute_module(module_name=f"{COLLECTION}.datapath_run",
                                         module_args={"calls": calls}, task_vars=task_vars)
            warnings.extend(to_text(w) for w in batch.get("warnings", []) or [])
            by_module = {CAPABILITIES[c][1]: c for c in selected}
            ran = batch.get("results")
            if not isinstance(ran, list):  # the batch itself failed (argument error, no Python...)
                result.update(failed=True, msg=f"datapath_run: {to_text(batch.get('msg', 'failed'))}",
                              results=results, ansible_facts={"datapath_facts": gathered, "datapath_plan": plan})
                return result
            for item in ran:
                cap = by_module[item["module"]]
                outcome = dict(item.get("result") or {})
                outcome.pop("warnings", None)  # reported once, by the batch
                outcome.pop("deprecations", None)
                timings[cap] = item.get("seconds")
                results[cap] = outcome
                if outcome.get("diff"):
                    diffs.extend(outcome["diff"] if isinstance(outcome["diff"], list) else [outcome["diff"]])
                if outcome.get("failed"):
                    failed_capability = cap
                    break
                note = self._note(cap, templar, outcome, host)
                if note:
                    warnings.append(note)

        lap("node")

        # 5. the roles' kubelet handlers, once
        wants: dict[str, Any] = {name: templar.template(scope[name]) for name in
                                 ("hugepages_restart_kubelet", "k8s_node_restart_kubelet") if name in scope}
        if failed_capability is None and kubelet_restart_needed(wants, results):
            service = templar.template(
                scope.get("k8s_node_kubelet_service") or scope.get("hugepages_kubelet_service") or "kubelet")
            restart = self._execute_module(module_name="ansible.legacy.systemd_service",
                                           module_args={"name": service, "state": "restarted"},
                                           task_vars=task_vars)
            restart.pop("invocation", None)
            results["kubelet_restart"] = restart
            if restart.get("failed"):
                failed_capability = "kubelet_restart"

        # 6. the firmware gate's input and the summary
        violations: list[dict[str, Any]] = []
        if results["nic_firmware"].get("compliance") is not None:
            if _bool(templar.template(scope.get("nic_firmware_fail", True))):
                violations = firmware_violations(
                    {host: {"datapath_plan": plan, "r": results["nic_firmware"]}}, [host], "r",
                    _bool(templar.template(scope.get("nic_firmware_fail_on_unknown", False))),
                    templar.template(scope.get("nic_firmware_policies", [])))
        for cap in ORDER:
            layered[CAPABILITIES[cap][2]] = results[cap]
        summary = self._summary(layered)
        warnings = list(dict.fromkeys(warnings))

        changed = any(bool(r.get("changed")) for r in results.values() if isinstance(r, Mapping))
        result.update(
            changed=changed,
            capabilities=selected,
            results=results,
            seconds=timings,
            phases=phases,
            firmware_violations=violations,
            ansible_facts={"datapath_facts": gathered, "datapath_plan": plan, "datapath_summary": summary},
        )
        if diffs:
            result["diff"] = diffs
        if warnings:
            result["warnings"] = warnings
        if failed_capability is not None:
            failure = results[failed_capability]
            result.update(failed=True, msg=f"{failed_capability}: {to_text(failure.get('msg', 'failed'))}")
        return result

    def _memory_facts(self) -> dict[str, Any]:
        """``datapath_facts`` with only its memory section: MemTotal and the NUMA node count."""
        command = f"LC_ALL=C cat /proc/meminfo && echo {MARK} && ls {NODE_ROOT} 2>/dev/null; exit 0"
        out = self._low_level_execute_command(command, sudoable=True)
        text = to_text(out.get("stdout", ""))
        if out.get("rc") != 0 or MARK not in text:
            raise AnsibleActionFail(f"datapath_apply: cannot read /proc/meminfo on the node: "
                                    f"rc={out.get('rc')} {to_text(out.get('stderr', ''))[-500:]}")
        meminfo, _mark, nodes = text.partition(MARK)
        total = parse_meminfo(meminfo).get("MemTotal")
        count = len([n for n in nodes.split() if re.match(r"^node\d+$", n)])
        return {"gathered": ["memory"], "memory_bytes": total * 1024 if total is not None else None,
                "numa_nodes": count or None}

    # ---- what the roles' extra tasks do -------------------------------------------------------------
    def _note(self, cap: str, templar: Any, outcome: Mapping[str, Any], host: str) -> str | None:
        if cap == "nvme_cache" and outcome.get("initramfs_update_needed"):
            conf = templar.template(templar.available_variables.get("nvme_cache_mdadm_conf"))
            return (f"{host}: the md array was added to {conf}; rebuild the initramfs "
                    "(update-initramfs -u or dracut -f) so that it is assembled under its name at boot.")
        return None

    def _summary(self, variables: Mapping[str, Any]) -> Any:
        """The datapath role's summary.json.j2, rendered with this run's results."""
        path = os.path.join(ROLES_DIR, "datapath", "templates", "summary.json.j2")
        with open(path, encoding="utf-8") as handle:
            source = trust_as_template(handle.read())
        rendered = self._templar_for(variables).template(source)
        if isinstance(rendered, str):
            return json.loads(rendered)
        return rendered
