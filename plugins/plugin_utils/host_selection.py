# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which hosts the collection's playbooks run on: ``datapath_hosts``, else every host the spec plans.

One selector for every playbook (site, audit, verify, measure, model_cache, k8s_manifests, pcie_acs,
rolling_reboot). ``datapath_hosts`` is an Ansible host pattern (a string or a list); unset, the
default is computed from the cluster spec: the groups its profiles and models name (a profile's
``groups``, or the group named like the profile), the hosts they list, and the hosts of its
``hosts`` overrides; ``all`` when a profile is named ``all`` or lists ``groups: [all]``. Groups and
hosts this inventory lacks are left out (and named when nothing is left). The per-playbook names
of before 0.4.0 (``audit_hosts``, ``verify_hosts``, ...) still work, with a deprecation warning.

Controller side, plain data in (the unvalidated spec: the playbooks validate it afterwards), no
pydantic: a spec with errors still selects its hosts, so that the run reaches the task that names
the errors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SELECTOR = "datapath_hosts"
"""The one variable that chooses the hosts of every playbook."""

OLD_SELECTORS = ("audit_hosts", "verify_hosts", "measure_hosts", "model_cache_hosts", "k8s_manifests_hosts",
                 "pcie_acs_hosts", "datapath_reboot_hosts")
"""The per-playbook selectors before 0.4.0; each still works in its own playbook, deprecated."""


@dataclass
class Selection:
    """The host patterns of a play and where they came from."""

    patterns: list[str]
    """Ansible host patterns, in order (hosts of several patterns are run once)."""
    source: str
    """``datapath_hosts``, an old selector's name, or ``spec`` (computed from the cluster spec)."""
    why: str
    """One line for the run's log: what was selected and why."""
    missing: list[str] = field(default_factory=list)
    """Groups the spec's profiles or models name that this inventory does not have."""
    deprecated: str | None = None
    """The deprecation message when an old selector was used."""
    spec_defined: bool = True
    """Whether the inventory defines the cluster spec ``datapath`` at all."""

    def empty_message(self) -> str:
        """Why no host matched, and the one variable to set."""
        groups = ", ".join(self.patterns) or "nothing"
        if self.source == "spec":
            if not self.spec_defined:
                return (f"the cluster spec `datapath` is not defined for this inventory, so no host is planned: "
                        f"define it (usually inventories/<env>/group_vars/all/datapath.yml), or set "
                        f"{SELECTOR} to the hosts to run on (a group or host pattern, e.g. -e {SELECTOR}=gpu)")
            if self.missing:
                return (f"the cluster spec plans no host of this inventory: its profiles and models name "
                        f"the group(s) {', '.join(self.missing)}, which this inventory does not have. Name "
                        f"your groups in the profiles (`groups: [train, infer]`, or `groups: [all]` for every "
                        f"host), or set {SELECTOR} to the hosts to run on (a group or host pattern, e.g. "
                        f"-e {SELECTOR}=gpu)")
            return (f"the cluster spec plans no host of this inventory (no profile, model or host override "
                    f"names one of its groups or hosts). Name your groups in the profiles (`groups: [gpu]`), "
                    f"or set {SELECTOR} to the hosts to run on (e.g. -e {SELECTOR}=gpu)")
        return (f"{self.source} ({groups}) matches no host of this inventory: set {SELECTOR} to a group or "
                f"host pattern of it (e.g. -e {SELECTOR}=gpu), or leave it unset to run on every host the "
                f"spec plans")

    def as_dict(self) -> dict[str, Any]:
        return {"patterns": list(self.patterns), "source": self.source, "why": self.why,
                "missing": list(self.missing), "deprecated": self.deprecated,
                "empty_message": self.empty_message()}


def _as_patterns(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        return [str(item) for item in value if isinstance(item, str) and item.strip()]
    return [str(value)]


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        return [item for item in value if isinstance(item, str)]
    return []


def spec_patterns(spec: Any, groups: Mapping[str, Sequence[str]]) -> tuple[list[str], list[str]]:
    """(patterns, missing groups): every host the spec plans, as groups and host names.

    ``groups`` is Ansible's ``groups`` (group -> its hosts, ``all`` included). Hosts already in a
    selected group are not listed again (a pattern of 100,000 host names costs Ansible a scan each).
    """
    if not isinstance(spec, Mapping):
        return [], []
    wanted_groups: list[str] = []
    wanted_hosts: list[str] = []
    for key in ("profiles", "models"):
        entries = spec.get(key)
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, Mapping):
                continue
            named = entry.get("groups")
            if key == "profiles" and named is None:
                named = [entry.get("name")]
            wanted_groups.extend(_names(named))
            wanted_hosts.extend(_names(entry.get("hosts")))
    overrides = spec.get("hosts")
    if isinstance(overrides, Mapping):
        wanted_hosts.extend(name for name in overrides if isinstance(name, str))
    if "all" in wanted_groups:
        return ["all"], []
    patterns: list[str] = []
    missing: list[str] = []
    covered: set[str] = set()
    for group in dict.fromkeys(wanted_groups):
        if group in groups:
            patterns.append(group)
            covered.update(groups[group] or ())
        else:
            missing.append(group)
    known = set(groups.get("all") or ()) | set(groups.get("ungrouped") or ())
    patterns.extend(host for host in dict.fromkeys(wanted_hosts) if host in known and host not in covered)
    return patterns, missing


def select(lookup: Callable[[str], Any], groups: Mapping[str, Sequence[str]], old: str | None = None,
           spec_errors: Callable[[Any], int] | None = None) -> Selection:
    """The hosts of a playbook: ``datapath_hosts``, else ``old`` (deprecated), else the spec's.

    ``lookup(name)`` reads an inventory or extra variable (None when unset); ``old`` is the
    playbook's selector before 0.4.0.
    """
    given = lookup(SELECTOR)
    if given is not None:
        patterns = _as_patterns(given)
        return Selection(patterns, SELECTOR, f"{SELECTOR}: {', '.join(patterns) or '(empty)'}")
    if old:
        if old not in OLD_SELECTORS:
            raise ValueError(f"unknown old selector {old!r}; one of {', '.join(OLD_SELECTORS)}")
        given = lookup(old)
        if given is not None:
            patterns = _as_patterns(given)
            return Selection(patterns, old, f"{old} (deprecated): {', '.join(patterns) or '(empty)'}",
                             deprecated=f"the variable {old} is deprecated; set {SELECTOR} (one selector for "
                                        f"every aiinfra.datapath playbook). {old} stops working in 1.0.0.")
    spec = lookup("datapath")
    patterns, missing = spec_patterns(spec, groups)
    if not patterns and spec is not None and spec_errors is not None:
        count = spec_errors(spec)
        if count:
            # an invalid spec plans nothing: every host, so that the converge reports the errors on each
            # (validated before anything changes) and records the failed run (its metrics), as before
            return Selection(["all"], "spec", f"every host: the cluster spec has {count} error(s), which each "
                                              f"host's run reports before anything changes", missing)
    if spec is None:
        why = f"the cluster spec `datapath` is not defined for this inventory, and {SELECTOR} is not set"
    else:
        why = (f"every host the spec plans ({', '.join(patterns) or 'none'}; set {SELECTOR} to choose)"
               + (f"; not in this inventory: {', '.join(missing)}" if missing else ""))
    return Selection(patterns, "spec", why, missing, spec_defined=spec is not None)


def spec_host(groups: Mapping[str, Sequence[str]], has: Callable[[str], bool], limit: int = 256) -> str | None:
    """A host whose variables hold the spec: the first host of the inventory, else the first host
    of each group (a spec in one group's group_vars), at most ``limit`` looked at."""
    seen: set[str] = set()
    for members in [groups.get("all") or ()] + [hosts for name, hosts in groups.items() if name != "all"]:
        for host in list(members)[:1]:
            if host in seen:
                continue
            seen.add(host)
            if has(host):
                return host
            if len(seen) >= limit:
                return None
    return None
