"""Read spec files and inventories the way ansible-core reads them, with size, depth and alias limits.

An inventory is any source ansible-core reads: an INI or YAML file, a directory of them, with
``group_vars/`` and ``host_vars/`` next to it. Two readers give the same result:

* ansible-core's own ``InventoryManager`` and ``VariableManager`` (its public API, on the
  controller): hosts, groups and each host's variables, ``datapath`` included, with Ansible's
  precedence. It reads everything Ansible reads (INI, YAML, TOML, scripts, host ranges,
  ``ansible_group_priority``, vaulted files need a vault secret and are refused).
* a fast reader for the common case, a directory whose only inventory file is YAML and whose
  ``group_vars``/``host_vars`` hold only ``.yml``/``.yaml`` files: the same precedence as
  ansible-core (inline group vars, ``group_vars/all``, ``group_vars/<group>`` by depth then
  name, inline host vars, ``host_vars/<host>``), about three times faster on 10,000 hosts. It
  hands anything else to ansible-core; tests/interop/test_spec_cli.py compares the two.

YAML is read as Ansible reads it (PyYAML, YAML 1.1: ``yes``/``no``/``on``/``off`` are booleans,
``0755`` is an octal number). Everything this module reads itself is limited to 16 MiB per file,
64 levels of nesting, 1000 aliases and 2,000,000 nodes after alias expansion; for ansible-core's
reader the files are checked for size first and what it returns for the depth and expansion.
Jinja expressions are not evaluated by either reader.
"""

from __future__ import annotations

import contextlib
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import sources

try:
    import yaml
    from yaml.events import (
        AliasEvent,
        CollectionEndEvent,
        CollectionStartEvent,
        DocumentEndEvent,
        DocumentStartEvent,
        MappingEndEvent,
        MappingStartEvent,
        ScalarEvent,
        SequenceEndEvent,
        SequenceStartEvent,
        StreamEndEvent,
    )
    from yaml.nodes import ScalarNode

    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml, as ansible-core uses it
    YAMLError = yaml.YAMLError
except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
    yaml = None

    class YAMLError(Exception):  # type: ignore[no-redef]
        """Never raised: stands in so that this module imports without PyYAML."""

    AliasEvent = CollectionEndEvent = CollectionStartEvent = YAMLError
    DocumentEndEvent = DocumentStartEvent = MappingEndEvent = MappingStartEvent = ScalarEvent = YAMLError
    SequenceEndEvent = SequenceStartEvent = StreamEndEvent = ScalarNode = YAMLError

MAX_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_ALIASES = 1000
MAX_NODES = 2_000_000
HOST_LIMIT = 200_000
GROUP_DEPTH = 32
READERS = ("auto", "ansible", "yaml")
YAML_EXTS = (".yml", ".yaml")
# What ansible-core's VariableManager adds to every host (not inventory data).
MAGIC_VARS = frozenset({
    "ansible_config_file", "ansible_playbook_python", "ansible_version", "group_names", "groups", "inventory_dir",
    "inventory_file", "inventory_hostname", "inventory_hostname_short", "playbook_dir", "omit", "ansible_check_mode",
    "ansible_diff_mode", "ansible_forks", "ansible_inventory_sources", "ansible_run_tags", "ansible_skip_tags",
    "ansible_verbosity",
})


class LoadError(Exception):
    """The input cannot be used (CLI exit 2)."""


class _NotPlain(Exception):
    """The fast reader cannot read this inventory exactly as ansible-core does: use ansible-core."""


def _need_yaml() -> None:
    if yaml is None:
        raise ImportError("the datapath CLI needs PyYAML (it comes with ansible-core): pip install -r requirements.txt")


def _check_events(text: str, name: str) -> None:
    depth = aliases = 0
    try:
        for event in yaml.parse(text, Loader=_SafeLoader):
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise LoadError(f"{name}: nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
            elif isinstance(event, AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise LoadError(f"{name}: more than {MAX_ALIASES} aliases")
    except YAMLError as exc:
        if "nesting depth" in str(exc):  # libyaml's own limit (1000 levels) met while scanning ahead
            raise LoadError(f"{name}: nested deeper than {MAX_DEPTH} levels") from None
        raise LoadError(f"{name}: not valid YAML: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def _expanded_size(root: Any, memo: dict[int, int] | None = None, limit: int | None = None) -> int:
    """Number of nodes once aliases are expanded; raises LoadError on cycles, bombs, deep nesting.

    ``memo`` may be shared between calls on values that share parts (Ansible's host variables).
    ``limit`` defaults to MAX_NODES.
    """
    memo = {} if memo is None else memo
    limit = MAX_NODES if limit is None else limit
    on_stack: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        if len(on_stack) > MAX_DEPTH:
            raise LoadError(f"nested deeper than {MAX_DEPTH} levels")
        obj, done = stack.pop()
        if not isinstance(obj, (dict, list)):
            continue
        key = id(obj)
        if done:
            on_stack.discard(key)
            children = obj.values() if isinstance(obj, dict) else obj
            total = 1 + sum(memo.get(id(c), 1) for c in children)
            if total > limit:
                raise LoadError(f"document expands to more than {limit} nodes (alias bomb?)")
            memo[key] = total
            continue
        if key in memo:
            continue
        if key in on_stack:
            raise LoadError("document refers to itself (recursive alias)")
        on_stack.add(key)
        stack.append((obj, True))
        for child in (obj.values() if isinstance(obj, dict) else obj):
            if isinstance(child, (dict, list)) and id(child) not in memo:
                if id(child) in on_stack:
                    raise LoadError("document refers to itself (recursive alias)")
                stack.append((child, False))
    return memo.get(id(root), 1)


def _bracket_depth(text: str) -> int:
    """Rough flow-collection nesting depth (quotes ignored): decides whether to pre-scan events."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


# --------------------------------------------------------------------------- the event builder
BUILDERS = ("events", "pyyaml")
"""How a document becomes Python data (environment variable DATAPATH_YAML_BUILDER):

* ``events`` (default): libyaml's parser events, built into dicts and lists by :func:`_build`, a
  single loop that also counts depth and nodes, so no guard needs a second pass. It builds only
  the plain subset (no anchor, alias, explicit tag, merge key, timestamp or collection as a key,
  one document, at most ``_FAST_DEPTH`` levels); it hands anything else, and any error, to
* ``pyyaml``: PyYAML's composer and SafeConstructor (Python code) over the same parser, then
  :func:`_expanded_size`. Every error message comes from this path, so both give the same data
  and the same errors (tests/unit/plugins/plugin_utils/cluster_spec/test_loader_fast.py).
"""
_FAST_DEPTH = MAX_DEPTH // 2
_NULL, _BOOL, _INT, _FLOAT, _STR = (f"tag:yaml.org,2002:{t}" for t in ("null", "bool", "int", "float", "str"))
_SIMPLE_TAGS = frozenset({_NULL, _BOOL, _INT, _FLOAT})


class _Decline(Exception):
    """The event builder does not build this document: the PyYAML path reads it.

    Raised as a new instance each time: a shared one would keep its last traceback, and through
    its frames the caller's whole inventory, alive until the program ends."""


_MISS = object()


def _builder() -> str:
    name = os.environ.get("DATAPATH_YAML_BUILDER", "events") or "events"
    if name not in BUILDERS:
        raise LoadError(f"DATAPATH_YAML_BUILDER={name!r}: use one of {', '.join(BUILDERS)}")
    return name


def _build(text: str, dups: list[Any] | None = None) -> Any:
    """The document of ``text`` as PyYAML's SafeLoader builds it, from parser events; raises
    :class:`_Decline` outside the plain subset (see BUILDERS) or on any error. Keys given twice in
    one mapping are appended to ``dups`` (when given); the last value wins, as in PyYAML."""
    loader = _SafeLoader(text)
    # A plain scalar is resolved as the loader resolves it (YAML 1.1 implicit types); only those
    # whose first character starts an implicit type need it, and each distinct one is built once.
    first_chars = frozenset(k for k in loader.yaml_implicit_resolvers if k)
    wildcard = None in loader.yaml_implicit_resolvers
    resolve = loader.resolve
    constructors = loader.yaml_constructors
    built: dict[str, Any] = {}
    miss = _MISS
    try:
        get = loader.get_event
        get()  # StreamStartEvent
        event = get()
        if type(event) is StreamEndEvent:  # pylint: disable=unidiomatic-typecheck  # exact types: the fast path
            return None
        if type(event) is not DocumentStartEvent:  # pylint: disable=unidiomatic-typecheck  # exact types: the fast path
            raise _Decline
        holder: list[Any] = []
        stack: list[Any] = []  # the open collections above ``cur``
        cur: Any = holder
        is_map = False
        key: Any = miss  # a mapping's key waiting for its value
        nodes = 0
        max_nodes = MAX_NODES
        max_depth = _FAST_DEPTH
        while True:
            event = get()
            kind = type(event)
            if kind is ScalarEvent:
                if event.anchor is not None or event.tag is not None:
                    raise _Decline
                nodes += 1
                value = event.value
                if event.implicit[0] and (wildcard or not value or value[0] in first_chars):
                    found = built.get(value, miss)
                    if found is miss:
                        tag = resolve(ScalarNode, value, (True, False))
                        if tag in _SIMPLE_TAGS:
                            found = constructors[tag](loader, ScalarNode(tag, value))
                        elif tag != _STR:
                            raise _Decline  # timestamp, merge key `<<`, value `=`: the PyYAML path
                        else:
                            found = value
                        built[value] = found
                    value = found
                if not is_map:
                    cur.append(value)
                elif key is miss:
                    if dups is not None and value in cur:
                        dups.append(value)  # a duplicate key: the caller notes where (sources.py)
                    key = value
                else:
                    cur[key] = value
                    key = miss
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                if event.anchor is not None or event.tag is not None or (is_map and key is miss):
                    raise _Decline  # anchored, tagged, or a collection as a mapping key
                nodes += 1
                new: Any = {} if kind is MappingStartEvent else []
                if is_map:
                    cur[key] = new
                    key = miss
                else:
                    cur.append(new)
                stack.append(cur)
                if len(stack) > max_depth:
                    raise _Decline
                cur = new
                is_map = kind is MappingStartEvent
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                cur = stack.pop()
                is_map = type(cur) is dict  # pylint: disable=unidiomatic-typecheck  # exact types: the fast path
            elif kind is DocumentEndEvent:
                break
            else:  # AliasEvent
                raise _Decline
        if nodes > max_nodes or type(get()) is not StreamEndEvent:  # pylint: disable=unidiomatic-typecheck  # exact types: the fast path
            raise _Decline  # too many nodes, or a second document: the PyYAML path says so
        return holder[0]
    except _Decline:
        raise
    except Exception:  # a parse error, an int too long to convert, ...: reported by the PyYAML path
        raise _Decline from None
    finally:
        loader.dispose()


def load_yaml_text(text: str, name: str = "<input>") -> Any:
    _need_yaml()
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise LoadError(f"{name}: larger than {MAX_BYTES} bytes")
    if _builder() == "events":
        dups: list[Any] | None = [] if sources.active() else None
        with contextlib.suppress(_Decline):
            data = _build(text, dups)
            if dups:
                sources.note_duplicates(text, name)
            return data
    return _load_pyyaml(text, name)


def _load_pyyaml(text: str, name: str) -> Any:
    if "&" in text or _bracket_depth(text) > MAX_DEPTH // 2:
        # Anchors (alias bombs) or enough brackets to nest deeply: count events before building
        # anything. Plain block YAML skips this pass; its depth is checked after loading.
        _check_events(text, name)
    try:
        data = yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - a safe loader
    except YAMLError as exc:
        raise LoadError(f"{name}: not valid YAML: {_first_line(exc)}") from None
    except RecursionError:
        raise LoadError(f"{name}: nested deeper than the parser can follow") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise LoadError(f"{name}: cannot be loaded: {type(exc).__name__}") from None
    _expanded_size(data)
    sources.note_duplicates(text, name)  # only while a caller collects (datapath validate)
    return data


def _read_text(path: str) -> str:
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise LoadError(f"{path}: larger than {MAX_BYTES} bytes")
        with open(path, encoding="utf-8") as handle:
            return handle.read(MAX_BYTES + 1)
    except UnicodeDecodeError:
        raise LoadError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot be read: {exc.strerror or exc}") from None


def load_yaml_file(path: str) -> Any:
    return load_yaml_text(_read_text(path), path)


def load_spec_file(path: str) -> Any:
    """The ``datapath`` value of a vars file."""
    data = load_yaml_file(path)
    if not isinstance(data, Mapping) or "datapath" not in data:
        raise LoadError(f"{path}: no top-level `datapath` key")
    return data["datapath"]


# --------------------------------------------------------------------------- the result
@dataclass
class Inventory:
    """What the CLI needs from an inventory: each host's groups, variables and spec."""

    spec: Any
    """The spec of a vars file, or the `datapath` most hosts have."""
    spec_source: str
    hosts: dict[str, tuple[list[str], dict[str, Any]]] = field(default_factory=dict)
    """host -> (group_names, inventory variables without `datapath`)."""
    host_specs: dict[str, Any] = field(default_factory=dict)
    """Hosts whose `datapath` is another value than `spec` (None: the host has none)."""
    reader: str = "file"
    """file (a vars file), yaml (the fast reader) or ansible (ansible-core's)."""
    warnings: list[str] = field(default_factory=list)

    def spec_of(self, host: str) -> Any:
        return self.host_specs[host] if host in self.host_specs else self.spec

    def specs(self) -> list[tuple[Any, list[str]]]:
        """``[(spec, hosts)]``: the main spec first, then every other one (hosts sorted)."""
        others: list[tuple[Any, list[str]]] = []
        for host in sorted(self.host_specs):
            value = self.host_specs[host]
            for entry in others:
                if entry[0] is value or entry[0] == value:
                    entry[1].append(host)
                    break
            else:
                others.append((value, [host]))
        main = [h for h in sorted(self.hosts) if h not in self.host_specs]
        return [(self.spec, main), *others]


def _finish(per_host: dict[str, tuple[list[str], dict[str, Any]]], source: str, reader: str,
            warnings: list[str]) -> Inventory:
    """Split each host's `datapath` from its variables; the spec most hosts share is the main one.

    Each host's variables dict is its own (both readers build one per host): it is changed in place.
    """
    if not per_host:
        raise LoadError(f"{source}: the inventory has no hosts")
    # One comprehension or C-level call per step (100,000 hosts pass here); counts and values are
    # keyed by id, in the order of the first host (sorted) that has each value.
    hosts = {host: per_host[host] for host in sorted(per_host)}
    specs = {host: entry[1].pop("datapath", None) for host, entry in hosts.items()}
    counts = Counter(map(id, specs.values()))
    values = dict(zip(map(id, specs.values()), specs.values(), strict=True))
    counts.pop(id(None), None)
    values.pop(id(None), None)
    if not values:
        raise LoadError(f"{source}: no host has a `datapath` variable (put the spec in group_vars/all/datapath.yml)")
    main = values[max(counts, key=counts.__getitem__)]
    inv = Inventory(spec=main, spec_source=source, hosts=hosts, reader=reader, warnings=warnings)
    inv.host_specs = {h: v for h, v in specs.items() if v is not main and v != main}
    return inv


# --------------------------------------------------------------------------- the fast YAML reader
# ansible-core's settings that decide whether (and how) the fast reader may read a directory:
# (name in ansible.constants, its environment variable, its keys in ansible.cfg).
INVENTORY_SETTINGS = (
    ("DEFAULT_HASH_BEHAVIOUR", "ANSIBLE_HASH_BEHAVIOUR", ("hash_behaviour",)),
    ("INVENTORY_ENABLED", "ANSIBLE_INVENTORY_ENABLED", ("enable_plugins",)),
    ("INVENTORY_IGNORE_EXTS", "ANSIBLE_INVENTORY_IGNORE", ("inventory_ignore_extensions", "ignore_extensions")),
    ("INVENTORY_IGNORE_PATTERNS", "ANSIBLE_INVENTORY_IGNORE_REGEX", ("inventory_ignore_patterns", "ignore_patterns")),
)
# Their defaults in this ansible-core release (the pin in requirements.txt); a unit test compares
# both tables with ansible-core's own definitions and values.
SETTINGS_RELEASE = "2.19.14"
SETTINGS_DEFAULTS: Mapping[str, Any] = {
    "DEFAULT_HASH_BEHAVIOUR": "replace",
    "INVENTORY_ENABLED": ("host_list", "script", "auto", "yaml", "ini", "toml"),
    "INVENTORY_IGNORE_EXTS": (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg",
                              ".retry"),
    "INVENTORY_IGNORE_PATTERNS": (),
}


def _config_candidates() -> list[str]:
    """Every ansible.cfg that ansible-core's find_ini_config_file may pick (it takes the first that
    exists: $ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg, /etc/ansible/ansible.cfg)."""
    paths: list[str] = []
    env = os.environ.get("ANSIBLE_CONFIG")
    if env is not None:
        path = os.path.abspath(os.path.expandvars(os.path.expanduser(env)))
        paths.append(os.path.join(path, "ansible.cfg") if os.path.isdir(path) else path)
    paths.append(os.path.join(os.getcwd(), "ansible.cfg"))
    paths.append(os.path.expanduser("~/.ansible.cfg"))
    paths.append("/etc/ansible/ansible.cfg")
    return paths


def _defaults_apply() -> bool:
    """True when ansible-core would use :data:`SETTINGS_DEFAULTS`: this release, none of the
    settings' environment variables set, and no ansible.cfg it could read mentions their keys."""
    if any(env in os.environ for _name, env, _keys in INVENTORY_SETTINGS):
        return False
    try:
        from ansible.release import __version__
        candidates = _config_candidates()
    except (ImportError, OSError):
        return False
    if __version__ != SETTINGS_RELEASE:
        return False
    for path in candidates:
        if not os.path.exists(path):
            continue
        if not path.endswith((".cfg", ".ini")):
            return False  # ansible-core decides what such a file means
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read(MAX_BYTES + 1).lower()
        except OSError:
            return False
        if any(key in text for _name, _env, keys in INVENTORY_SETTINGS for key in keys):
            return False
    return True


def inventory_settings() -> Mapping[str, Any]:
    """The settings of :data:`INVENTORY_SETTINGS`, as ``ansible.constants`` has them. Importing
    that module reads ansible-core's whole configuration (a tenth of a second, a sixth of a run of
    10,000 hosts), so its defaults are used when nothing can change them (:func:`_defaults_apply`)."""
    if _defaults_apply():
        return SETTINGS_DEFAULTS
    from ansible import constants as C
    return {name: getattr(C, name) for name, _env, _keys in INVENTORY_SETTINGS}


def _to_bytes(value: Any) -> bytes:
    """ansible-core's ``to_bytes`` for settings (str, or bytes kept as they are)."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogateescape")


def _ignored(settings: Mapping[str, Any] | None = None) -> re.Pattern[bytes]:
    """ansible-core's ``ansible.inventory.manager.IGNORED``, built by the same expression from its
    settings without importing the inventory manager (a sixth of a small run's time); a unit test
    checks that both are the same pattern."""
    settings = inventory_settings() if settings is None else settings
    always = [br"^\.", b"^host_vars$", b"^group_vars$", b"^vars_plugins$"]
    patterns = [_to_bytes(x) for x in settings["INVENTORY_IGNORE_PATTERNS"]]
    exts = [b"%s$" % _to_bytes(re.escape(x)) for x in settings["INVENTORY_IGNORE_EXTS"]]
    return re.compile(b"|".join(always + patterns + exts))


def _inventory_entries(directory: str, settings: Mapping[str, Any] | None = None) -> list[str]:
    """The directory entries ansible-core takes as inventory sources (its own ignore rules)."""
    ignored = _ignored(settings)
    return [n for n in sorted(os.listdir(directory)) if not ignored.search(os.fsencode(n))]


def _plain_vars_dir(path: str) -> None:
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise _NotPlain(f"{path} is not a directory")
    for base, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith(".") or name.endswith("~"):
                continue
            if not name.endswith(YAML_EXTS):
                raise _NotPlain(f"{os.path.join(base, name)} is not a .yml/.yaml file")


def fast_source(directory: str) -> str:
    """The one YAML inventory file of ``directory``, when the fast reader can read it; else raises
    :class:`_NotPlain` with the reason."""
    settings = inventory_settings()
    if settings["DEFAULT_HASH_BEHAVIOUR"] != "replace" or "yaml" not in settings["INVENTORY_ENABLED"]:
        raise _NotPlain("ansible.cfg changes how inventories are read (hash_behaviour, enabled plugins)")
    entries = _inventory_entries(directory, settings)
    if len(entries) != 1 or not entries[0].endswith(YAML_EXTS):
        raise _NotPlain(f"{directory} holds {len(entries)} inventory sources, not one YAML file: {entries[:5]}")
    source = os.path.join(directory, entries[0])
    if not os.path.isfile(source):
        raise _NotPlain(f"{source} is not a file")
    for sub in ("group_vars", "host_vars"):
        _plain_vars_dir(os.path.join(directory, sub))
    return source


@dataclass
class _Group:
    parents: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)


class _FastReader:
    """ansible-core's YAML inventory plugin and host_group_vars, for plain inventories (see above)."""

    def __init__(self, source: str, basedir: str) -> None:
        self.source = source
        self.basedir = basedir
        self.groups: dict[str, _Group] = {"all": _Group(), "ungrouped": _Group()}
        self.direct: dict[str, list[str]] = {}
        self.inline: dict[str, dict[str, Any]] = {}
        self._files: dict[tuple[str, str], dict[str, Any]] = {}
        self._depth: dict[str, int] = {}

    def read(self) -> dict[str, tuple[list[str], dict[str, Any]]]:
        data = load_yaml_file(self.source)
        if not isinstance(data, dict) or not data or data.get("plugin"):
            raise _NotPlain(f"{self.source} is not a YAML inventory of groups")
        for name, body in data.items():
            self._group(name, body, 0)
        for name, body in self.groups.items():
            if name != "all" and not body.parents:
                body.parents.append("all")
        out: dict[str, tuple[list[str], dict[str, Any]]] = {}
        # Everything up to the host's own variables depends only on its groups: built once per set.
        shared: dict[frozenset[str], tuple[list[str], dict[str, Any]]] = {}
        host_files = self._host_vars_names()
        for host, direct in self.direct.items():
            key = frozenset(direct)
            found = shared.get(key)
            if found is None:
                groups = self._ancestors(direct)
                if groups - {"all", "ungrouped"}:
                    groups.discard("ungrouped")
                else:
                    groups.add("ungrouped")
                ordered = sorted(groups - {"all"}, key=lambda g: (self.depth(g), 1, g))
                base: dict[str, Any] = dict(self.groups["all"].vars)
                for group in ordered:
                    base.update(self.groups[group].vars)
                base.update(self._vars_files("group_vars", "all"))
                for group in ordered:
                    base.update(self._vars_files("group_vars", group))
                found = shared[key] = (sorted(groups - {"all"}), base)
            names, base = found
            hvars = dict(base)
            inline = self.inline.get(host)
            if inline:
                hvars.update(inline)
            if host_files is None or (host_files and _may_exist(host, host_files)):
                hvars.update(self._vars_files("host_vars", host))
            out[host] = (list(names), hvars)
        return out

    def _host_vars_names(self) -> frozenset[str] | None:
        """The names in host_vars/ (folded, see :func:`_fold`); empty when there is no host_vars/,
        None when it cannot be listed (then every host's files are looked up one by one)."""
        path = os.path.join(self.basedir, "host_vars")
        if not os.path.exists(path):
            return frozenset()
        try:
            return frozenset(_fold(name) for name in os.listdir(path))
        except OSError:
            return None

    def _group(self, name: Any, body: Any, depth: int) -> None:
        if not isinstance(name, str) or not name or depth > GROUP_DEPTH:
            raise _NotPlain(f"group {name!r}")
        group = self.groups.setdefault(name, _Group())
        if body is None:
            return
        if not isinstance(body, dict):
            raise _NotPlain(f"group {name!r} is not a mapping")
        for key, value in body.items():
            if key not in ("vars", "children", "hosts") or not isinstance(value, (dict, type(None))):
                raise _NotPlain(f"group {name!r}: key {key!r}")
            if value is None:
                continue
            if key == "vars":
                if "ansible_group_priority" in value or not all(isinstance(k, str) for k in value):
                    raise _NotPlain(f"group {name!r}: vars")
                group.vars.update(value)
            elif key == "children":
                for child, child_body in value.items():
                    self._group(child, child_body, depth + 1)
                    if child == "all" or child in self._ancestors([name]):
                        raise _NotPlain(f"group {child!r} is its own ancestor")
                    if name not in self.groups[child].parents:
                        self.groups[child].parents.append(name)
            else:
                self._hosts(name, value)

    def _hosts(self, group: str, hosts: dict[Any, Any]) -> None:
        """The hosts of ``group`` (one loop: 100,000 hosts may pass here)."""
        direct_of, inline_of, sep = self.direct, self.inline, os.sep
        for host, hvars in hosts.items():
            # ranges (node[01:16]), ports (node:2222) and IPv6 are ansible-core's to expand
            if (not isinstance(host, str) or not host or "[" in host or "]" in host or ":" in host
                    or host.startswith(sep)):
                raise _NotPlain(f"host pattern {host!r}")
            # exact key types: the fast path
            if hvars is not None and (not isinstance(hvars, dict)
                                      or not all(type(k) is str for k in hvars)):  # pylint: disable=unidiomatic-typecheck
                raise _NotPlain(f"host {host!r}: variables")
            direct = direct_of.get(host)
            if direct is None:
                if len(direct_of) >= HOST_LIMIT:
                    raise LoadError(f"{self.source}: more than {HOST_LIMIT} hosts")
                direct_of[host] = [group]
                inline_of[host] = dict(hvars) if hvars else {}  # a copy: YAML aliases may share one dict
            else:
                if group not in direct:
                    direct.append(group)
                if hvars:
                    inline_of[host].update(hvars)

    def _ancestors(self, groups: list[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(groups)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self.groups[name].parents)
        return seen | {"all"}

    def depth(self, name: str) -> int:
        """Ansible's Group.depth: the longest path from `all`."""
        found = self._depth.get(name)
        if found is None:
            parents = self.groups[name].parents
            found = 0 if name == "all" else 1 + max((self.depth(p) for p in parents), default=0)
            self._depth[name] = found
        return found

    def _vars_files(self, sub: str, name: str) -> dict[str, Any]:
        """DataLoader.find_vars_files + host_group_vars: the first of <name> (a directory: its files,
        sorted, recursively), <name>.yml, <name>.yaml, <name>.json; empty files are skipped."""
        key = (sub, name)
        found = self._files.get(key)
        if found is not None:
            return found
        base = os.path.join(self.basedir, sub, name)
        paths: list[str] = []
        for ext in ("", ".yml", ".yaml", ".json"):
            path = base + ext
            if os.path.exists(path):
                if os.path.isdir(path):
                    paths = _dir_files(path)
                elif ext in ("", ".json"):
                    raise _NotPlain(f"{path} is not a .yml/.yaml file")
                else:
                    paths = [path]
                break
        found = {}
        for path in paths:
            data = load_yaml_file(path)
            if not data:
                continue
            if not isinstance(data, dict):
                raise LoadError(f"{path}: a vars file must be a mapping")
            found.update(data)
        self._files[key] = found
        return found


def _fold(name: str) -> str:
    """Unicode's compatibility caseless form of a file name: names that a case- or
    normalization-insensitive file system takes as one have the same form (and some others too)."""
    nfkd = unicodedata.normalize
    return nfkd("NFKD", nfkd("NFKD", nfkd("NFD", name).casefold()).casefold())


def _may_exist(host: str, names: frozenset[str]) -> bool:
    """False when none of host_vars/<host>{,.yml,.yaml,.json} can exist (``names``: the folded
    listing of host_vars/); a name with a path separator is always looked up."""
    if os.sep in host or (os.altsep and os.altsep in host) or host in (".", ".."):
        return True
    if host.isascii():  # the common case: its folded form is its lower case
        lower = host.lower()
        return any(lower + ext in names for ext in ("", ".yml", ".yaml", ".json"))
    return any(_fold(host + ext) in names for ext in ("", ".yml", ".yaml", ".json"))


def _dir_files(path: str) -> list[str]:
    out: list[str] = []
    for name in sorted(os.listdir(path)):
        if name.startswith(".") or name.endswith("~"):
            continue
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.splitext(name)[1]:
            out.extend(_dir_files(full))
        elif os.path.isfile(full):
            if not name.endswith(YAML_EXTS):
                raise _NotPlain(f"{full} is not a .yml/.yaml file")
            out.append(full)
    return out


# --------------------------------------------------------------------------- ansible-core's reader
def _check_sizes(target: str) -> None:
    """No file ansible-core would read is over MAX_BYTES (checked before it reads anything)."""
    roots = [target] if os.path.isdir(target) else [target] + [
        os.path.join(os.path.dirname(target) or ".", sub) for sub in ("group_vars", "host_vars")]
    for root in roots:
        if os.path.isfile(root):
            if os.path.getsize(root) > MAX_BYTES:
                raise LoadError(f"{root}: larger than {MAX_BYTES} bytes")
            continue
        for base, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(base, name)
                if os.path.isfile(path) and os.path.getsize(path) > MAX_BYTES:
                    raise LoadError(f"{path}: larger than {MAX_BYTES} bytes")


def _untag(value: Any, memo: dict[int, Any], depth: int = 0) -> Any:
    """Ansible's tagged values (2.19 data tagging) -> plain dict/list/str/int/float/bool/None.

    ``memo`` (by id) converts a value every host shares (the spec of group_vars/all) once, and the
    hosts then share the plain copy too.
    """
    if depth > MAX_DEPTH:
        raise LoadError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (Mapping, list, tuple)):
        found = memo.get(id(value))
        if found is not None:
            return found[1]
        if isinstance(value, Mapping):
            plain: Any = {_untag(k, memo, depth + 1): _untag(v, memo, depth + 1) for k, v in value.items()}
        else:
            plain = [_untag(v, memo, depth + 1) for v in value]
        memo[id(value)] = (value, plain)  # the original is kept so that its id stays unique
        return plain
    return value


@contextlib.contextmanager
def _captured_warnings(out: list[tuple[str, BaseException | None]]) -> Iterator[None]:
    """ansible-core's warnings (and the reasons a source failed to parse) as data, not on stderr."""
    from ansible.utils.display import Display
    display = Display()

    def warning(msg: str, *args: Any, **kwargs: Any) -> None:
        if not sources.from_ansible_warning(str(msg), kwargs.get("obj")):  # a duplicate key: a warning of ours
            out.append((str(msg), None))

    def error_as_warning(msg: str | None, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        out.append((str(msg or ""), exception))

    saved = {name: display.__dict__.get(name) for name in ("warning", "error_as_warning")}
    display.warning = warning
    display.error_as_warning = error_as_warning
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                display.__dict__.pop(name, None)
            else:
                display.__dict__[name] = value


def _reason(exc: BaseException | None) -> str:
    text = " ".join(str(exc or "").split())
    cause = exc.__cause__ if exc is not None else None
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({' '.join(str(cause).split())})"
    return text[:400]


def ansible_inventory(target: str) -> Inventory:
    """Hosts, groups and variables of any inventory source, read by ansible-core itself."""
    _check_sizes(target)
    try:
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.manager import VariableManager
    except ImportError as exc:  # pragma: no cover - ansible-core is a dependency
        raise LoadError(f"reading {target} needs ansible-core: {exc}") from None
    events: list[tuple[str, BaseException | None]] = []
    try:
        with _captured_warnings(events):
            loader = DataLoader()
            manager = InventoryManager(loader=loader, sources=[target])
            variables = VariableManager(loader=loader, inventory=manager)
            hosts = manager.get_hosts()
            if len(hosts) > HOST_LIMIT:
                raise LoadError(f"{target}: more than {HOST_LIMIT} hosts")
            raw = {h.name: (sorted(g.name for g in h.get_groups() if g.name != "all"),
                            variables.get_vars(host=h, include_hostvars=False)) for h in hosts}
    except LoadError:
        raise
    except AnsibleError as exc:
        raise LoadError(f"{target}: ansible-core cannot read it: {_reason(exc)}") from None
    except RecursionError:
        raise LoadError(f"{target}: nested deeper than the parser can follow") from None
    failures = [(msg, exc) for msg, exc in events if exc is not None and "Failed to parse" in msg]
    unparsed = [msg for msg, exc in events if msg.startswith("Unable to parse")]
    if failures or unparsed:
        reasons = "; ".join(f"{msg.rstrip('.')}: {_reason(exc)}" for msg, exc in failures) or "; ".join(unparsed)
        raise LoadError(f"{target}: not an inventory ansible-core can read: {reasons}")
    sizes: dict[int, int] = {}
    plains: dict[int, Any] = {}
    per_host: dict[str, tuple[list[str], dict[str, Any]]] = {}
    try:
        for name, (groups, hvars) in raw.items():
            _expanded_size(hvars, sizes)
            plain = {str(k): _untag(v, plains) for k, v in hvars.items() if k not in MAGIC_VARS}
            if plain.get("ansible_facts") == {}:
                plain.pop("ansible_facts")
            per_host[name] = (groups, plain)
    except AnsibleError as exc:  # e.g. a vaulted value without a vault secret
        raise LoadError(f"{target}: {_reason(exc)} (the datapath CLI reads no vault secrets)") from None
    warnings = [msg for msg, exc in events if exc is None and not msg.startswith("Unable to parse")]
    return _finish(per_host, target, "ansible", warnings)


# --------------------------------------------------------------------------- entry points
def load_inventory(target: str, reader: str = "auto") -> Inventory:
    """An inventory directory or file: the fast reader when it can (``reader`` auto or yaml), else
    ansible-core's (auto or ansible)."""
    if reader not in READERS:
        raise LoadError(f"unknown inventory reader {reader!r}; use one of {', '.join(READERS)}")
    if reader != "ansible" and os.path.isdir(target):
        try:
            source = fast_source(target)
            return _finish(_FastReader(source, target).read(), target, "yaml", [])
        except _NotPlain as why:
            if reader == "yaml":
                raise LoadError(f"{target}: the fast YAML reader cannot read it exactly ({why}); "
                                "use --inventory-reader ansible") from None
    elif reader == "yaml":
        raise LoadError(f"{target}: the fast YAML reader reads inventory directories only")
    return ansible_inventory(target)


def load_target(target: str, reader: str = "auto") -> Inventory:
    """What the CLI validates: a vars file with a ``datapath`` key, or an inventory (file or directory)."""
    if os.path.isdir(target):
        return load_inventory(target, reader)
    if not os.path.exists(target):
        raise LoadError(f"{target}: no such file or directory")
    yaml_file = target.endswith((*YAML_EXTS, ".json"))
    try:
        data = load_yaml_file(target)
    except LoadError:
        if yaml_file:
            raise  # a YAML file that is not YAML: that is the error
        data = None  # an INI inventory (or another format ansible-core reads)
    if isinstance(data, Mapping) and "datapath" in data:
        return Inventory(spec=data["datapath"], spec_source=target)
    try:
        return load_inventory(target, "ansible" if reader == "auto" else reader)
    except LoadError as exc:
        if not yaml_file:
            raise
        # YAML without `datapath`: a spec file with a typo, or an inventory that did not work out
        reason = str(exc).removeprefix(f"{target}: ")
        raise LoadError(f"{target}: no top-level `datapath` key (a spec file), and as an inventory: {reason}") from None


__all__ = ["BUILDERS", "Inventory", "LoadError", "READERS", "load_inventory", "load_spec_file", "load_target",
           "load_yaml_file", "load_yaml_text"]
