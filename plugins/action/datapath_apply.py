# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin behind ``aiinfra.datapath.datapath_apply`` (docs: plugins/modules/datapath_apply.py).

One task per host instead of one per capability: it validates the spec, reads the node's
memory facts, computes the plan, builds every selected capability's module arguments with the
same function the capability roles use (plugins/plugin_utils/capabilities.py), and runs all of
them in one Python process on the node (aiinfra.datapath.datapath_run). It reads the
capabilities' structured results - never their texts - for the kubelet restart, the firmware
gate and the summary.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Mapping
from typing import Any

from ansible import constants as C
from ansible import context
from ansible.errors import AnsibleActionFail
from ansible.executor.interpreter_discovery import InterpreterDiscoveryRequiredError
from ansible.executor.module_common import modify_module
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.aiinfra.datapath.plugins.filter.network import firmware_violations
from ansible_collections.aiinfra.datapath.plugins.module_utils._hugepages import NODE_ROOT, memory_facts
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import capabilities as caps
from ansible_collections.aiinfra.datapath.plugins.plugin_utils import payload_cache, plan_cache
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.plain import NOT_PLAIN, plain_data

# cluster_spec (pydantic: 0.2 s to import) is imported when a host's plan is not kept from an
# earlier run (plugin_utils/plan_cache.py). Where no plan of this code is kept, it is imported
# here, in ansible's main process, once, before the forks that run the hosts.
_SPEC: dict[str, Any] = {}


def _cluster_spec() -> Any:
    """The cluster_spec package; AnsibleActionFail when pydantic is missing (at run, not at import)."""
    if "module" not in _SPEC:
        try:
            from ansible_collections.aiinfra.datapath.plugins.plugin_utils import cluster_spec
        except ImportError as exc:
            _SPEC["module"], _SPEC["error"] = None, exc
        else:
            _SPEC["module"] = cluster_spec
    if _SPEC["module"] is None:
        raise AnsibleActionFail(f"{COLLECTION}.datapath_apply: install pydantic on the controller "
                                f"(python3 -m pip install 'pydantic>=2,<3'): {_SPEC['error']}")
    try:
        _SPEC["module"].require_pydantic()
    except ImportError as exc:  # MissingPydantic: the spec package imported with its stand-ins
        raise AnsibleActionFail(f"{COLLECTION}.datapath_apply: {exc}") from None
    return _SPEC["module"]


COLLECTION = "aiinfra.datapath"
MARK = "--aiinfra-datapath-numa--"

# the variables of node_plan's facts argument (see plugin_utils/cluster_spec/plan.py node_facts)
# (and ansible_facts.memtotal_mb)
PLAN_FACT_VARS = ("datapath_memory_bytes", "datapath_numa_nodes", "ansible_memtotal_mb", "datapath_backend")
# host variables a capability's derived argument reads (the lockout guard's address)
DERIVE_VARS = ("datapath_connection_address", "ansible_host", "inventory_hostname")

display = Display()

if not plan_cache.warm():
    try:
        _cluster_spec()
    except AnsibleActionFail:
        pass  # said when the action runs


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)


def kubelet_restart_needed(settings: Mapping[str, Mapping[str, Any]], results: Mapping[str, Any]) -> bool:
    """The hugepages and nfd_labels kubelet handlers as one decision (restart once at most)."""
    hugepages = results.get("hugepages") or {}
    labels = results.get("nfd_labels") or {}
    return bool((_bool(settings["hugepages"]["restart_kubelet"]) and hugepages.get("pools_changed"))
                or (_bool(settings["nfd_labels"]["restart_kubelet"]) and labels.get("hugepages_changed")))


def summary(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What changed, what needs a reboot and what this hardware does not support, from the results."""
    qos = results.get("roce_qos") or {}
    cmdline = results.get("kernel_cmdline") or {}
    firmware = results.get("nic_firmware") or {}
    unsupported = [f"roce_qos {item.get('interface', '?')}: {item.get('reason') or 'not supported'}"
                   for item in qos.get("interfaces") or [] if not item.get("supported", True)]
    if cmdline.get("bootloader") == "none" and cmdline.get("missing"):
        unsupported.append("kernel_cmdline: no boot loader found; not persisted: " + " ".join(cmdline["missing"]))
    unsupported += [f"nic_firmware {row.get('interface')}: {row.get('reason')}"
                    for row in firmware.get("compliance") or [] if row.get("status") == "unknown"]
    return {
        "changed": [name for name, r in results.items() if isinstance(r, Mapping) and r.get("changed")],
        "failed": [name for name, r in results.items() if isinstance(r, Mapping) and r.get("failed")],
        "reboot_required": bool(cmdline.get("reboot_required")
                                or (results.get("hugepages") or {}).get("reboot_required")),
        "reboot_reasons": list(cmdline.get("missing") or []) + list(cmdline.get("still_present") or []),
        "unsupported": unsupported,
        "noncompliant_firmware": [row.get("interface") for row in firmware.get("compliance") or []
                                  if row.get("status") == "noncompliant"],
    }


# "{{ name }}" or "{{ name | default(none) }}": a variable that names another, nothing else
VARIABLE_REFERENCE = re.compile(r"\A\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\|\s*default\(\s*(?:none|None)\s*\)\s*)?\}\}\Z")


def plain_variable(variables: Mapping[str, Any], name: str, hops: int = 4) -> Any:
    """The value of variable ``name`` without templating, following ``"{{ other }}"`` and
    ``"{{ other | default(none) }}"`` up to ``hops`` times (an undefined ``other`` with the default
    is None, as templating gives); NOT_PLAIN where only templating can tell."""
    value = variables[name]
    for _hop in range(hops):
        match = VARIABLE_REFERENCE.match(value) if isinstance(value, str) else None
        if not match:
            break
        if match.group(1) not in variables:
            return None if match.group(2) else NOT_PLAIN
        value = variables[match.group(1)]
    return plain_data(value)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("spec", "spec_var", "capabilities", "validate", "metrics"))
    _requires_connection = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars if task_vars is not None else {}
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        wanted = self._wanted(args.get("capabilities"))
        host = str(task_vars.get("inventory_hostname"))
        templar = self._templar.copy_with_new_env(available_variables=task_vars)
        spec_data = self._spec(args, task_vars, templar, host)
        clock = [time.monotonic()]
        phases: dict[str, float] = {}

        def lap(name: str) -> None:
            now = time.monotonic()
            phases[name] = round(now - clock[0], 3)
            clock[0] = now

        # 0. the spec, validated before anything is read or changed on the node. Every host
        #    checks it (milliseconds); the first host of the play lists every error, the others
        #    point there, so that a broken spec is reported once, in full.
        kept = plan_cache.PlanCache(host)
        spec_key = plan_cache.spec_key(spec_data)
        errors = [] if kept.spec_valid(spec_key) else _cluster_spec().validate_spec(spec_data)
        if errors:
            play_hosts = [str(h) for h in templar.template(task_vars.get("ansible_play_hosts") or [host])]
            first = play_hosts[0] if play_hosts else host
            if host == first:
                lines = "\n".join(f"  - {e.render()}" for e in errors)
                message = f"the cluster spec has {len(errors)} error(s); nothing was changed:\n{lines}"
            else:
                message = f"the cluster spec has {len(errors)} error(s), listed under {first}; nothing was changed"
            result.update(failed=True, msg=message, spec_errors=len(errors))
            return result

        # 1. facts: memory and NUMA nodes, as datapath_facts' memory section reads them. Where this
        #    host's plan is kept from an earlier run with the same spec, groups and variables, the
        #    facts it was computed from are assumed and the node checks them before its first call
        #    (datapath_run's expect_facts): no separate round trip. Else one shell command reads them.
        plan_facts: dict[str, Any] = {}
        for name in PLAN_FACT_VARS:
            if name in task_vars:
                plan_facts[name] = templar.template(task_vars[name])
        # of Ansible's gathered facts the plan reads memtotal_mb alone (node_facts); the rest
        # (uptime, dates) would only make the plan's key change on every run
        ansible_facts = task_vars.get("ansible_facts")
        if isinstance(ansible_facts, Mapping) and "memtotal_mb" in ansible_facts:
            plan_facts["ansible_facts"] = {"memtotal_mb": templar.template(ansible_facts["memtotal_mb"])}
        groups = [str(g) for g in templar.template(task_vars.get("group_names", []))]
        inputs_key = plan_cache.plan_key(spec_key, host, groups, plan_facts)
        assumed = kept.facts(inputs_key)
        gathered = assumed if assumed is not None else self._memory_facts()
        lap("facts")

        # 3. which capabilities run (datapath_capabilities and this run's tags)
        run_tags = task_vars.get("ansible_run_tags") or context.CLIARGS.get("tags") or ()
        skip_tags = task_vars.get("ansible_skip_tags") or context.CLIARGS.get("skip_tags") or ()
        selected = [name for name in caps.ORDER
                    if name in wanted and caps.selected_by_tags(caps.CAPABILITIES[name].tags, run_tags, skip_tags)]

        def lookup(name: str) -> Any:
            return templar.template(task_vars[name]) if name in task_vars else None

        def deprecated(message: str) -> None:
            display.deprecated(message, version="1.0.0", collection_name="aiinfra.datapath")

        derive_vars = {name: lookup(name) for name in DERIVE_VARS}
        values = {name: caps.values_from_variables(name, lookup, deprecated if name in selected else None)
                  for name in caps.ORDER}

        def planned(gathered: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]],
                                                       dict[str, Any], list[dict[str, Any]]]:
            """2. the plan for these facts; 3. every capability's settings and module arguments
            (the same function the capability roles call through their filter)."""
            facts = dict(plan_facts, datapath_facts=gathered)
            key = plan_cache.plan_key(spec_key, host, groups, facts)
            plan = kept.plan(key)
            if plan is None:
                spec = _cluster_spec()
                try:
                    plan = spec.node_plan(spec_data, host, groups, facts)
                except spec.SpecValidationError as exc:
                    lines = "\n".join(f"  - {e.render()}" for e in exc.errors)
                    raise AnsibleActionFail(f"{host}: the plan cannot be built:\n{lines}") from None
                outcome = kept.keep(spec_key, key, plan, inputs_key, gathered)
                display.vvv(f"plan computed; for later runs: {outcome}", host=host)
            else:
                display.vvv("plan kept from an earlier run with the same spec, code, groups and facts", host=host)
            settings: dict[str, dict[str, Any]] = {}
            results: dict[str, Any] = {name: {} for name in caps.ORDER}
            calls: list[dict[str, Any]] = []
            for name in caps.ORDER:
                settings[name] = caps.settings(name, plan, values[name], derive_vars)
                if name not in selected:
                    continue
                module_args = caps.capability_args(name, plan, values[name], derive_vars)
                if module_args is None:
                    results[name] = {"changed": False, "skipped": True,
                                     "skip_reason": f"nothing planned for {name} on this host"}
                    continue
                calls.append({"module": name, "args": module_args})
            return plan, settings, results, calls

        metrics = args.get("metrics")
        if metrics is not None and not isinstance(metrics, Mapping):
            raise AnsibleActionFail(f"datapath_apply: metrics must be a dict (directory), got {type(metrics).__name__}")
        plan, settings, results, calls = planned(gathered)
        if assumed is not None and not calls and metrics is None:
            # no module call to check the assumed facts: read them, and plan again where they changed
            gathered = self._memory_facts()
            if gathered != assumed:
                plan, settings, results, calls = planned(gathered)
        lap("plan")

        # 4. every module call in one Python process on the node
        diffs: list[Any] = []
        warnings: list[Any] = []
        timings: dict[str, float] = {}
        failed_capability = None
        metrics_written = False
        if calls or metrics is not None:  # with nothing to run, the call writes the metrics alone
            batch_args: dict[str, Any] = {"calls": calls}
            if metrics is not None:
                # the converge metrics written by the batch itself, after the calls: no second module call
                directory = metrics.get("directory")
                batch_args["metrics"] = {"directory": to_text(directory) if directory else None}
            cache = self._payload_cache(task_vars)
            if cache:
                primed = cache(payload_cache.prime)
                if primed in ("missing", "stale"):  # built now, with bytecode, before any node runs it
                    primed = f"{primed}; {self._build_payload(cache, task_vars)}"
                display.vvv(f"datapath_run payload from the cache of earlier runs: {primed}", host=host)
            if assumed is not None:
                batch_args["expect_facts"] = {k: assumed.get(k) for k in ("memory_bytes", "numa_nodes")}
            batch = self._execute_module(module_name=f"{COLLECTION}.datapath_run",
                                         module_args=batch_args, task_vars=task_vars)
            if batch.get("facts_differ") and isinstance(batch.get("datapath_facts"), Mapping):
                # the node's memory or NUMA nodes changed since the plan was kept: nothing ran there;
                # plan again for the facts the node reported and call once more
                display.vvv(f"facts changed since the plan was kept: {batch['datapath_facts']}", host=host)
                gathered = dict(batch["datapath_facts"])
                plan, settings, results, calls = planned(gathered)
                batch_args["calls"] = calls
                batch_args.pop("expect_facts")
                batch = (self._execute_module(module_name=f"{COLLECTION}.datapath_run",
                                              module_args=batch_args, task_vars=task_vars)
                         if calls or metrics is not None else {"results": []})
            if cache:
                keep = functools.partial(payload_cache.keep, node_magic=batch.get("bytecode_magic"))
                display.vvv(f"datapath_run payload for later runs: {cache(keep)}", host=host)
            written = batch.get("metrics")
            if isinstance(written, Mapping):
                if written.get("failed"):
                    warnings.append(f"metrics_textfile: {to_text(written.get('msg', 'failed'))}")
                else:
                    metrics_written = True
            warnings.extend(batch.get("warnings") or [])  # the batch's own: ansible's message objects
            if batch.get("deprecations"):
                result["deprecations"] = batch["deprecations"]
            ran = batch.get("results")
            if not isinstance(ran, list):  # the batch itself failed (argument error, no Python...)
                result.update(failed=True, msg=f"datapath_run: {to_text(batch.get('msg', 'failed'))}",
                              results=results, ansible_facts={"datapath_facts": gathered, "datapath_plan": plan})
                return result
            for item in ran:
                name = item["module"]
                outcome = dict(item.get("result") or {})
                warnings.extend(f"{name}: {w}" for w in outcome.pop("warnings", None) or [])
                timings[name] = item.get("seconds")
                results[name] = outcome
                if outcome.get("diff"):
                    diffs.extend(outcome["diff"] if isinstance(outcome["diff"], list) else [outcome["diff"]])
                if outcome.get("failed"):
                    failed_capability = name
                    break
                if name == "nvme_layout" and outcome.get("initramfs_update_needed"):
                    warnings.append(f"{host}: the md array was added to {settings[name]['mdadm_conf']}; rebuild "
                                    "the initramfs (update-initramfs -u or dracut -f) so that it is assembled "
                                    "under its name at boot.")
        lap("node")

        # 5. the hugepages and nfd_labels kubelet handlers, once
        if failed_capability is None and kubelet_restart_needed(settings, results):
            service = settings["nfd_labels"]["kubelet_service"] or settings["hugepages"]["kubelet_service"]
            restart = self._execute_module(module_name="ansible.legacy.systemd_service",
                                           module_args={"name": service, "state": "restarted"},
                                           task_vars=task_vars)
            restart.pop("invocation", None)
            results["kubelet_restart"] = restart
            if restart.get("failed"):
                failed_capability = "kubelet_restart"

        # 6. the firmware gate's input (the play fails once, for every host) and the summary
        violations: list[dict[str, Any]] = []
        firmware = settings["nic_firmware"]
        if results["nic_firmware"].get("compliance") is not None and _bool(firmware["fail"]):
            violations = firmware_violations({host: {"datapath_plan": plan, "r": results["nic_firmware"]}}, [host],
                                             "r", _bool(firmware["fail_on_unknown"]), firmware["policies"])
        changed = any(bool(r.get("changed")) for r in results.values() if isinstance(r, Mapping))
        if failed_capability == "kubelet_restart":
            metrics_written = False  # the node wrote a success its kubelet restart then undid
        result.update(
            changed=changed,
            metrics_written=metrics_written,
            capabilities=selected,
            results=results,
            seconds=timings,
            phases=phases,
            firmware_violations=violations,
            ansible_facts={"datapath_facts": gathered, "datapath_plan": plan, "datapath_summary": summary(results)},
        )
        if diffs:
            result["diff"] = diffs
        if warnings:
            result["warnings"] = warnings
        if failed_capability is not None:
            failure = results[failed_capability]
            result.update(failed=True, msg=f"{failed_capability}: {to_text(failure.get('msg', 'failed'))}")
        return result

    def _build_payload(self, cache: Any, task_vars: dict[str, Any]) -> str:
        """Where no payload was kept (or it was stale): ansible's own build of datapath_run into
        this run's file, now, and the module_utils compiled into it before any node runs it (the
        module's own call reads that file); returns what payload_cache.add_bytecode did."""

        def build(_fqn: str, path: str, compression: str) -> str:
            try:
                modify_module(module_name=f"{COLLECTION}.datapath_run", module_path=path, module_args={},
                              templar=self._templar, task_vars=task_vars, module_compression=compression,
                              remote_is_local=bool(getattr(self._connection, "_remote_is_local", False)))
            except InterpreterDiscoveryRequiredError:
                pass  # the payload is built (before the interpreter is looked up): discovered by the module's call
            return "built"

        built = cache(build)
        return f"{built}, bytecode {cache(payload_cache.add_bytecode)}" if built == "built" else built

    def _payload_cache(self, task_vars: dict[str, Any]) -> Any:
        """``step(prime, a build, add_bytecode or keep) -> outcome`` for datapath_run's payload
        (plugin_utils/payload_cache.py), or None where the module does not resolve to a collection
        file. A cache that fails is no cache."""
        try:
            found = self._shared_loader_obj.module_loader.find_plugin_with_context(
                f"{COLLECTION}.datapath_run", ".py", collection_list=self._task.collections)
            path = found.plugin_resolved_path or ""
            match = re.search(r"ansible_collections/(\w+)/(\w+)/plugins/modules/(\w+)\.py$", path)
            if not match:
                return None
            fqn = "ansible_collections.{}.{}.plugins.modules.{}".format(*match.groups())
            compression = C.config.get_config_value("DEFAULT_MODULE_COMPRESSION", variables=task_vars)
        except Exception as exc:  # noqa: BLE001 - the payload is then built as usual
            display.vvv(f"datapath_run payload cache not used: {exc}")
            return None

        def step(function: Any) -> str:
            try:
                return str(function(fqn, path, compression))
            except Exception as exc:  # noqa: BLE001 - never fail a converge over a cache
                return f"error ({exc})"
        return step

    @staticmethod
    def _spec(args: Mapping[str, Any], task_vars: Mapping[str, Any], templar: Any, host: str) -> Any:
        """The cluster spec: O(spec), or the host variable O(spec_var) names, templated here. With
        spec_var the spec is not part of the task's arguments, which ansible's worker sends back to
        its main process with every host's result: a spec of 64 hosts, 64 times, was two thirds of
        the main process's CPU in a 64-node re-run (its garbage collection most of it).

        A spec_var that holds plain data (no string in it that ansible would template), directly or
        through ``"{{ name }}"`` / ``"{{ name | default(none) }}"`` (the role's default,
        ``datapath_spec: "{{ datapath | default(none) }}"``), is copied as it is (:func:`plain_data`):
        templating it gives the same data, and cost 30 ms of the controller's CPU per host for the
        lab's spec (ansible 2.19 finalises every value of the result). Anything else is templated."""
        spec_data = args.get("spec")
        spec_var = args.get("spec_var")
        if spec_var is not None:
            if spec_data is not None:
                raise AnsibleActionFail("datapath_apply: spec and spec_var are mutually exclusive")
            if not isinstance(spec_var, str) or spec_var not in task_vars:
                raise AnsibleActionFail(f"datapath_apply: spec_var {spec_var!r} names no variable of {host}")
            spec_data = plain_variable(task_vars, spec_var)
            if spec_data is NOT_PLAIN:
                spec_data = templar.template(task_vars[spec_var])
        if spec_data is None:
            raise AnsibleActionFail("datapath_apply: no cluster spec (set the `datapath` variable)")
        return spec_data

    def _wanted(self, given: Any) -> list[str]:
        """``capabilities`` with the names before 0.3.0 mapped to today's."""
        if given is None:
            return list(caps.ORDER)
        if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, (list, tuple)):
            raise AnsibleActionFail(f"datapath_apply: capabilities must be a list of names, got {given!r}")
        wanted = []
        for name in (str(c) for c in given):
            if name in caps.ROLE_ALIASES:
                display.deprecated(f"the capability name {name} is deprecated; use {caps.ROLE_ALIASES[name]}",
                                   version="1.0.0", collection_name="aiinfra.datapath")
                name = caps.ROLE_ALIASES[name]
            wanted.append(name)
        unknown = [c for c in wanted if c not in caps.CAPABILITIES]
        if unknown:
            raise AnsibleActionFail(f"datapath_apply: unknown capabilities {unknown}; known: {list(caps.ORDER)}")
        return wanted

    def _memory_facts(self) -> dict[str, Any]:
        """``datapath_facts`` with only its memory section: MemTotal and the NUMA node count."""
        command = f"LC_ALL=C cat /proc/meminfo && echo {MARK} && ls {NODE_ROOT} 2>/dev/null; exit 0"
        out = self._low_level_execute_command(command, sudoable=True)
        text = to_text(out.get("stdout", ""))
        if out.get("rc") != 0 or MARK not in text:
            raise AnsibleActionFail(f"datapath_apply: cannot read /proc/meminfo on the node: "
                                    f"rc={out.get('rc')} {to_text(out.get('stderr', ''))[-500:]}")
        meminfo, _mark, nodes = text.partition(MARK)
        return memory_facts(meminfo, nodes.split())
