"""The per-host plan: effective settings plus derived values, as plain JSON-ready data.

The shape is documented in docs/plan.md; roles pass each part unchanged to one module.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from ._node import derived
from ._types import PAGE_BYTES
from .checks import effective_issues, interface_key, pool_count, roce_mtu, roce_tos
from .checks_kserve import kserve_issues
from .errors import SpecError, SpecValidationError, join_path
from .merge import Effective, effective
from .models import DatapathSpec, Fabric, HugePagePool, Interface
from .plan_host_stack import ebpf_part, nic_affinity_part
from .plan_measure import measure_part, measure_template
from .plan_nic_config import ecn_priorities, nic_config_part
from .plan_rails import rails_part, rails_template

PLAN_VERSION = 2
SYSCTL_FILE = "/etc/sysctl.d/90-aiinfra-datapath.conf"

# The scope of a sysctl key (netns or global): one rule for the plan and the module.
GLOBAL_NET_KEYS = derived.GLOBAL_NET_KEYS
sysctl_scope = derived.sysctl_scope


def node_facts(facts: Mapping[str, Any] | None) -> tuple[int | None, int | None]:
    """Memory bytes and NUMA node count from hostvars-like facts (None when unknown).

    Reads ``datapath_memory_bytes`` / ``datapath_numa_nodes`` (inventory or datapath_facts),
    ``datapath_facts.{memory_bytes,numa_nodes}``, and Ansible's ``ansible_memtotal_mb`` /
    ``ansible_facts.memtotal_mb``.
    """
    if type(facts) is not dict and not isinstance(facts, Mapping):  # pylint: disable=unidiomatic-typecheck
        return None, None
    gathered = facts.get("datapath_facts")
    ansible = facts.get("ansible_facts")
    gathered = gathered if gathered is not None and isinstance(gathered, Mapping) else {}
    ansible = ansible if ansible is not None and isinstance(ansible, Mapping) else {}
    memory = _number(facts.get("datapath_memory_bytes")) or _number(gathered.get("memory_bytes"))
    if memory is None:
        mb = _number(facts.get("ansible_memtotal_mb")) or _number(ansible.get("memtotal_mb"))
        memory = mb * 1024 * 1024 if mb else None
    numa = _number(facts.get("datapath_numa_nodes")) or _number(gathered.get("numa_nodes"))
    return memory, (numa if numa is None or numa <= 64 else None)


def _number(value: Any) -> int | None:
    if type(value) is int:  # pylint: disable=unidiomatic-typecheck  # the common case (not a bool)
        return value if 0 < value < 2**60 else None
    if isinstance(value, bool) or value is None:
        return None
    try:
        result = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return result if 0 < result < 2**60 else None


BACKENDS = ("files", "tuned")
TUNED_PROFILE = "aiinfra-datapath"


def node_backend(facts: Mapping[str, Any] | None) -> str | None:
    """The persistence backend from hostvars ``datapath_backend`` (``files``, the default, or
    ``tuned``); None when the value is not one of them (the caller reports it)."""
    value = (facts.get("datapath_backend") if type(facts) is dict  # pylint: disable=unidiomatic-typecheck
             or (facts is not None and isinstance(facts, Mapping)) else None)
    if value in (None, ""):
        return "files"
    return value if value in BACKENDS else None


def _split(count: int, nodes: int) -> dict[int, int]:
    base, extra = divmod(count, nodes)
    return {node: base + (1 if node < extra else 0) for node in range(nodes)}


def _persist(pool: HugePagePool, default_size: str, per_node: bool) -> str:
    if pool.persist != "auto":
        return pool.persist
    if pool.size == "1G":
        return "cmdline"
    if per_node or pool.size != default_size:
        return "boot_unit"
    return "sysctl"


def _hugepages(eff: Effective, numa_nodes: int) -> tuple[dict[str, Any], list[str]]:
    part: dict[str, Any] = {"pages": [], "bytes_per_node": {}, "mounts": [],
                            "thp": {"enabled": eff.thp_enabled, "defrag": eff.thp_defrag}}
    args: list[str] = []
    if eff.hugepages is None:
        return part, args
    hp = eff.hugepages[0]
    default = hp.default_size or "2M"
    if hp.default_size:
        args.append(f"default_hugepagesz={hp.default_size}")
    per_node_bytes = {node: 0 for node in range(numa_nodes)}
    for pool in sorted(hp.pages, key=lambda p: PAGE_BYTES[p.size]):
        count = pool_count(pool, eff.memory)
        per_node: dict[int, int] | None = None
        if pool.per_node is not None:
            per_node = dict(sorted(pool.per_node.items()))
        elif pool.numa_split == "even":
            per_node = _split(count, numa_nodes)
        persist = _persist(pool, default, per_node is not None)
        part["pages"].append({"size": pool.size, "count": count, "persist": persist,
                              "per_node": None if per_node is None else {str(k): v for k, v in per_node.items()}})
        spread = per_node if per_node is not None else _split(count, numa_nodes)
        for node, pages in spread.items():
            per_node_bytes[node] = per_node_bytes.get(node, 0) + pages * PAGE_BYTES[pool.size]
        if persist == "cmdline":
            amount = ",".join(f"{k}:{v}" for k, v in per_node.items()) if per_node is not None else str(count)
            args.extend([f"hugepagesz={pool.size}", f"hugepages={amount}"])
    part["bytes_per_node"] = {str(node): value for node, value in sorted(per_node_bytes.items())}
    part["mounts"] = [m.model_dump(mode="json") for m in hp.mounts]
    return part, args


def _match(iface: Interface) -> dict[str, str]:
    key, value = interface_key(iface)
    return {key: value}


def _qos(iface: Interface, fabric: Fabric, mtu: int) -> dict[str, Any]:
    from .models import Roce
    roce = fabric.roce or Roce()
    dscp2prio = dict(roce.dscp2prio)
    dscp2prio[roce.dscp] = roce.priority
    dscp2prio[roce.cnp.dscp] = roce.cnp.priority
    ecn_prios = ecn_priorities(roce)
    return {
        "interface": iface.name if iface.name is not None else (iface.match.name if iface.match else None),
        "match": _match(iface),
        "fabric": fabric.name,
        "trust": roce.trust,
        "pfc_priorities": sorted(set(roce.pfc_priorities)),
        "dscp2prio": {str(k): v for k, v in sorted(dscp2prio.items())},
        "ets": {"prio_tc": list(roce.ets.prio_tc), "tsa": list(roce.ets.tsa), "bw": list(roce.ets.bw)},
        "ecn": {"rp": ecn_prios, "np": ecn_prios},
        "cnp": {"dscp": roce.cnp.dscp, "priority": roce.cnp.priority},
        "roce_tos": roce.tos if roce.tos is not None else roce_tos(roce.dscp, roce.ecn),
        "roce_mode": roce.mode,
        "roce_mtu": roce_mtu(mtu),
    }


def held_models(spec: DatapathSpec, eff: Effective, named: Sequence[int]) -> list[int]:
    """Indexes of the models the node holds: those naming it (``named``), plus, when it has storage,
    those naming no groups and no hosts."""
    return [index for index, model in enumerate(spec.models)
            if index in named or (eff.storage is not None and not model.groups and not model.hosts)]


def model_issues(spec: DatapathSpec, eff: Effective, host: str, groups: Sequence[str],
                 named: Sequence[int], listed: Mapping[int, int] | None = None) -> list[SpecError]:
    """A node named by a model (group or host) must have storage to hold it. ``listed``: where each
    model lists ``host`` ({model index: first position in its hosts}); by default each list is searched."""
    if eff.storage is not None:
        return []
    out = []
    for index in named:
        model = spec.models[index]
        if listed is not None:
            position = listed.get(index)
        else:
            position = model.hosts.index(host) if host in model.hosts else None
        if position is not None:
            where: tuple[Any, ...] = ("models", index, "hosts", position)
            why = "it is listed in hosts"
        else:
            group = next(g for g in model.groups if g in groups or g == "all")
            where, why = ("models", index, "groups", model.groups.index(group)), f"it is in group {group}"
        out.append(SpecError(join_path(where), f"the host must hold model {model.name}@{model.version} ({why}) "
                             "but has no storage section",
                             "add storage (the NVMe cache) to one of its profiles, or take the host out of the "
                             "model's groups/hosts", host))
    return out


def _models(spec: DatapathSpec, eff: Effective, held: Sequence[int]) -> dict[str, Any] | None:
    if eff.storage is None or not held:
        return None
    mount = eff.storage[0].mount.path
    cache = spec.model_cache
    items = []
    for index in held:
        model = spec.models[index]
        items.append({"name": model.name, "version": model.version, "source": model.source,
                      "files": [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in model.files],
                      "manifest": model.manifest, "manifest_sha256": model.manifest_sha256})
    return {"cache_dir": posixpath.join(mount, cache.directory), "require_mount": mount,
            "reserve_bytes": cache.reserve, "bandwidth_limit": cache.bandwidth_limit or 0,
            "concurrency": cache.concurrency, "models": items}


def build_plan(spec: DatapathSpec, host: str, eff: Effective, named_models: Sequence[int] = (),
               backend: str = "files") -> dict[str, Any]:
    """Assemble the plan dict for ``host`` from its merged settings (no validation here).

    ``named_models``: indexes of the models that name the host or one of its groups. ``backend``:
    ``files`` (sysctl.d, tmpfiles.d, grub.d) or ``tuned`` (one TuneD profile, ``tuned_profile``, persists
    the sysctls, THP and kernel arguments; the other parts still set the live values).
    """
    numa_nodes = eff.numa_nodes or 1
    sysctl = {key: {"value": setting.value, "mode": setting.mode, "scope": sysctl_scope(key),
                    "ignore_missing": setting.ignore_missing}
              for key, (setting, _origin) in sorted(eff.sysctl.items())}
    hugepages, args = _hugepages(eff, numa_nodes)
    if eff.kernel_args is not None:
        args.extend(arg for arg in eff.kernel_args[0] if arg not in args)
    fabrics = {f.name: f for f in spec.fabrics}
    interfaces, qos = [], []
    for iface in eff.interfaces[0] if eff.interfaces else []:
        fabric = fabrics[iface.fabric]
        mtu = iface.mtu if iface.mtu is not None else fabric.mtu
        name = iface.name if iface.name is not None else (iface.match.name if iface.match else None)
        interfaces.append({"name": name,
                           "match": _match(iface), "fabric": fabric.name, "mtu": mtu})
        if fabric.kind == "roce":
            qos.append(_qos(iface, fabric, mtu))
    storage: dict[str, Any] | None = None
    if eff.storage is not None:
        st = eff.storage[0]
        storage = {
            "devices": list(st.devices) if st.devices is not None else None,
            "select": st.select.model_dump(mode="json") if st.select is not None else None,
            "raid": st.raid.model_dump(mode="json") if st.raid is not None else None,
            "filesystem": st.filesystem.model_dump(mode="json"),
            "mount": st.mount.model_dump(mode="json"),
            "directories": [d.model_dump(mode="json") for d in st.directories],
            "reserve_bytes": st.reserve,
            "wipe_serials": list(st.wipe_serials),
        }
    reboot = bool(args) or any(p["persist"] == "cmdline" for p in hugepages["pages"])
    tuned = backend == "tuned"
    tuned_part = {"name": TUNED_PROFILE, "sysctl": sysctl, "thp": hugepages["thp"],
                  "kernel_args": list(args)} if tuned else None
    return {
        "version": PLAN_VERSION,
        "host": host,
        "profiles": list(eff.layers),
        "reboot_required": reboot,
        "backend": backend,
        "sysctl_profile": {"file": SYSCTL_FILE, "keys": sysctl, "persist": not tuned},
        "hugepages": {**hugepages, "thp_persist": not tuned},
        "kernel_cmdline": {"args": args, "backend": "tuned" if tuned else None},
        "tuned_profile": tuned_part,
        "link_mtu": {"interfaces": interfaces},
        # host-independent here; Planner.plan adds the host's addresses and GPUs (plan_rails.rails_part)
        "rail_routing": rails_template(spec, eff),
        "roce_qos": {"interfaces": qos},
        "nic_firmware": {"policies": [{"driver": p.driver, "psid": p.psid, "min_version": p.min_version,
                                       "allowed": list(p.allowed)} for p in eff.firmware]},
        # NV settings of the NICs per PSID / part number / driver (module nic_config; plan_nic_config.py)
        "nic_config": nic_config_part(spec, eff),
        "nvme_layout": storage,
        "nfd_labels": {"labels": dict(sorted(eff.labels.items())),
                       "local_volume_class": eff.local_volume_class[0] if eff.local_volume_class else None},
        "model_cache": _models(spec, eff, held_models(spec, eff, named_models)),
        # what the audit expects of node_topology's result (plugin_utils/topology_findings.py); null: no section
        "node_topology": eff.topology.model_dump(mode="json") if eff.topology is not None else None,
        # host-independent here; Planner.plan adds the host's addresses (plan_measure.measure_part)
        "measure": measure_template(spec, eff, held_models(spec, eff, named_models)),
        # IRQ and queue placement of the data NICs, and eBPF datapath readiness (plan_host_stack.py)
        "nic_affinity": nic_affinity_part(spec, eff, interfaces),
        "ebpf_readiness": ebpf_part(spec, eff, interfaces),
    }


class Planner:
    """Plans many hosts of one validated spec; hosts that share profiles and facts share the work.

    ``plan()`` returns a new top-level dict per host whose nested parts are shared with other
    hosts of the same shape: treat them as read-only (``copy.deepcopy`` before changing one).
    :func:`node_plan` returns a fully independent copy.
    """

    def __init__(self, spec: DatapathSpec) -> None:
        self.spec = spec
        self._cache: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._checked: set[tuple[Any, ...]] = set()  # shapes :meth:`check` has seen (no errors)
        # Which profiles and models a host gets (merge.matching_profiles, matching_models): the part
        # its groups select, once per list of groups, and the ones that list the host, looked up
        # by name (a profile or model may list 100,000 hosts: no list is scanned per host).
        self._by_groups: dict[tuple[str, ...], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        # host -> {profile or model index: the host's first position in its hosts}
        self._listed: tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]] = ({}, {})
        for listed, host_lists in ((self._listed[0], [p.hosts for p in spec.profiles]),
                                   (self._listed[1], [m.hosts for m in spec.models])):
            for index, names in enumerate(host_lists):
                for position, name in enumerate(names):
                    listed.setdefault(name, {}).setdefault(index, position)
        # Shapes with node errors: their merged settings and effective_issues (which do not depend on
        # the host), so that 100,000 hosts of one broken shape do not each merge and check it again.
        self._broken: dict[tuple[Any, ...], tuple[Effective, list[tuple[Any, str, str]]]] = {}

    def _selected(self, host: str, groups: list[str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(matching_profiles, matching_models) of ``host`` in ``groups``, as tuples."""
        key = tuple(groups)
        found = self._by_groups.get(key)
        if found is None:
            member = set(groups) | {"all"}  # every host is in all (group_names never lists it)
            found = (tuple(index for index, prof in enumerate(self.spec.profiles)
                           if member.intersection(prof.groups if prof.groups is not None else [prof.name])),
                     tuple(index for index, model in enumerate(self.spec.models) if member.intersection(model.groups)))
            self._by_groups[key] = found
        by_profile, by_model = self._listed
        if host in by_profile or host in by_model:
            found = (tuple(sorted(by_profile.get(host, {}).keys() | set(found[0]))),
                     tuple(sorted(by_model.get(host, {}).keys() | set(found[1]))))
        return found

    @property
    def templates(self) -> int:
        """How many distinct plans were computed (the rest were shared)."""
        return len(self._cache)

    def plan(self, host: str, groups: Sequence[str] = (), facts: Mapping[str, Any] | None = None,
             ) -> dict[str, Any]:
        """The plan of ``host``; raises :class:`SpecValidationError` naming the host on node errors."""
        template = self.template(host, groups, facts)
        plan = dict(template)
        plan["host"] = host
        plan["measure"] = measure_part(template["measure"], facts)
        plan["rail_routing"] = rails_part(template["rail_routing"], facts)
        return plan

    def template(self, host: str, groups: Sequence[str] = (), facts: Mapping[str, Any] | None = None,
                 ) -> dict[str, Any]:
        """What ``host``'s plan shares with the hosts of its shape (read-only; no ``host``, and the
        ``measure`` part without its addresses); raises as :meth:`plan` does."""
        key, build = self._shape(host, groups, facts, self._cache)
        if build is None:
            return self._cache[key]
        # Round-trip once so that the template is plain JSON data (str keys, no tuples).
        template: dict[str, Any] = json.loads(json.dumps(build()))
        self._cache[key] = template
        return template

    def check(self, host: str, groups: Sequence[str] = (), facts: Mapping[str, Any] | None = None) -> None:
        """Raises as :meth:`template` does: what validation needs. Each shape's plan is built once
        too (a host that cannot be planned fails here as well), but neither kept nor round-tripped
        through JSON like a template (with 1% of 100,000 hosts overridden, that was a third of the time)."""
        key, build = self._shape(host, groups, facts, self._checked)
        if build is not None and key not in self._cache:
            build()
        self._checked.add(key)

    def _shape(self, host: str, groups: Sequence[str], facts: Mapping[str, Any] | None, known: Container[Any],
               ) -> tuple[tuple[Any, ...], Callable[[], dict[str, Any]] | None]:
        """The key of ``host``'s shape and, unless ``known`` holds it, what builds its plan; raises
        :class:`SpecValidationError` naming the host on node errors (those of a known shape have none)."""
        if not isinstance(host, str) or not host:
            raise SpecValidationError([SpecError("host", "host must be a non-empty string",
                                                 "pass inventory_hostname")])
        group_list = ([g for g in groups if isinstance(g, str)]
                      if isinstance(groups, (list, tuple, set, frozenset)) else [])
        memory, numa = node_facts(facts)
        backend = node_backend(facts)
        if backend is None:
            raise SpecValidationError([SpecError(
                "datapath_backend", "datapath_backend must be one of %s, got %r"
                % (", ".join(BACKENDS), (facts or {}).get("datapath_backend")),
                "set the inventory variable datapath_backend to files (the default) or tuned", host)])
        indexes, named = self._selected(host, group_list)
        override = host in self.spec.hosts
        # Groups matter only through the profiles and models they select, so both are in the key.
        key = (indexes, host if override else None, memory, numa, named, backend)
        if key in known:
            return key, None
        broken = self._broken.get(key)
        if broken is None:
            eff = effective(self.spec, indexes, host if override else None)
            if memory is not None:
                eff.memory = memory
            if numa is not None:
                eff.numa_nodes = numa
            issues = list(effective_issues(eff, host))
        else:
            eff, issues = broken
        errors = [SpecError(join_path(origin[1], origin[0]), message, hint, host) for origin, message, hint in issues]
        errors.extend(model_issues(self.spec, eff, host, group_list, named, self._listed[1].get(host, {})))
        errors.extend(kserve_issues(self.spec, eff, host, held_models(self.spec, eff, named)))
        if errors:
            self._broken[key] = (eff, issues)
            raise SpecValidationError(errors)
        return key, lambda: build_plan(self.spec, "", eff, named, backend)


def deep_copy(value: Any) -> Any:
    """Copy plain JSON data (dicts, lists, scalars); faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deep_copy(v) for v in value]
    return value
