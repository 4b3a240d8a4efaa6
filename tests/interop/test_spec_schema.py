"""docs/schema/datapath.schema.json read by check-jsonschema, the program editors' and CI's users run.

What this proves, with check-jsonschema's own validator (ECMA-262 regexes through regress, built
the way its CLI builds it) and its CLI:

* every document ``validate_spec`` accepts, the schema accepts (hypothesis: whole documents from
  the spec strategies of tests/unit/.../test_properties.py and from mutations of a document that
  holds every model, written to YAML and read back by each side's own YAML reader);
* for each constrained value type (paths, sizes, interface names, sources, label keys, sysctl
  keys and values, integer and host keys) and each cross-check the schema carries: the schema
  accepts exactly what the validator accepts, except where docs/spec.md says it cannot (a
  size's value, the cross-checks marked "partly");
* a listed table of documents the schema must reject (``Bad Key!``, ``a.io/b/c``, mount paths
  with spaces or relative, MTU 9217, an unknown key at every level, ...), also through the CLI.

Case counts are printed at the end (``pytest -s`` or the terminal summary).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import models, validate_spec
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec._pydantic import ValidationError
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec._types import MAX_BYTES, parse_size
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.loader import load_yaml_text
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.schema import (
    CHECK_SCHEMAS,
    MODEL_SOURCE,
    SIZE_TEXT,
    schema_text,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .spec_common import (
    EXAMPLE,
    SCHEMA_FILE,
    SHA,
    at,
    cj_cli,
    cj_errors,
    cj_load_yaml,
    full_spec,
    run,
    tool,
    walk_dicts,
    yaml_text,
)

pytestmark = pytest.mark.interop

CASES: Counter[str] = Counter()
MANY = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
DOCS = settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
ACCEPTED: list[dict[str, Any]] = []  # documents both accepted, for the CLI run at the end


def _unit_strategies() -> Any:
    """The spec strategies of the unit property tests (imported the way pytest imports them)."""
    base = os.path.join(os.path.dirname(__file__), "..", "unit", "plugins")
    if base not in sys.path:
        sys.path.insert(0, os.path.abspath(base))
    return importlib.import_module("plugin_utils.cluster_spec.test_properties")


def _norm(value: Any) -> Any:
    """What check-jsonschema makes of YAML data: mapping keys become strings."""
    if isinstance(value, dict):
        return {str(k): _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def _accepts(model: type[Any], data: Any) -> bool:
    try:
        model.model_validate(data)
    except ValidationError:
        return False
    return True


# --------------------------------------------------------------------------- the schema file
def test_schema_file_is_fresh_and_a_valid_2020_12_schema() -> None:
    with open(SCHEMA_FILE, encoding="utf-8") as handle:
        assert handle.read() == schema_text(), "regenerate: python -m aiinfra_datapath_spec.docgen --write docs"
    proc = run([tool("check-jsonschema"), "--check-metaschema", SCHEMA_FILE])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_example_inventory_spec_passes_the_cli() -> None:
    path = os.path.join(EXAMPLE, "group_vars", "all", "datapath.yml")
    assert cj_cli([path]) == {path: []}


# --------------------------------------------------------------------------- value types
PATH_CHARS = "/ab.-_@+19 A~%:,=\n\x00é"
MOUNT_EDGES = ["/", "//", "//etc", "//mnt/x", "/mnt", "/mnt/x", "/mnt/x/", "/mnt/./x", "/mnt/../x", "/mnt/..x",
               "/mnt/x.", "/lib", "/lib64/x", "/library", "/var", "/var/x", "/var/lib", "/var/lib/x", "/etc",
               "/etcx", "/etc/x", "/proc", "/sys/x", "/run/x", "/boot", "/usr/local/x", "/dev/hugepages",
               "/dev/hugepages-1G", "/dev/hugepages-2MB", "/dev/hugepages-3G", "/dev/hugepagesx", "/dev/x",
               "/lost+found", "/lost+found/x", "/snap", "/srv", "/srv/x", "/mnt/a b", "mnt/x", "/mnt/x\n",
               "/" + "a" * 254, "/" + "a" * 255, "/mnt/x@y+z", "/.", "/..", "/...", "/.x", "/tmp", "/tmp/x", ""]
REL_EDGES = [".", "..", "./x", "x/.", "a/..", "../a", "a//b", "/a", "a/", "a", "a/b", ".hidden", "...", "a/..b",
             "a" * 255, "a" * 256, "x\n", "", "a b", "a=b", "a,b"]
SOURCE_EDGES = ["/", "//", "/a", "/a/", "/a//b", "/a/./b", "/a/.", "/a/..", "file:///", "file://", "file:///a",
                "file:////a", "file://a", "http://h", "http://h/", "http://h//", "http://h:0/", "http://h:65535/a",
                "http://h:65536", "http://h:00080/x", "http://h:000080/x", "http://[::1]:8080/a", "http://[::1]",
                "https://a.b.c/x/y", "s3://bucket", "s3://bu/x", "s3://b/x", "s3://Bucket/x", "s3://b.c-d/x/",
                "ftp://h/x", "HTTP://h/x", "http://u@h/x", "http://h/x?y", "http://h/x#y", "http://h/a b",
                "http://-h/x", "http://h-/x", "http://h/.", "http://h/..", "http://h/a/../b", "http://h/%20",
                "http://h/~u", "http://h:/x", "http://h:123456/x", "/a@b", "s3://bucket/a@b", "http://h/x/y.z",
                "http://h.-x/", "http://" + "a" * 64 + "/x", "/" + "a" * 2048, "relative/x", "http://h/x\n"]
IFNAME_EDGES = ["", ".", "..", "a..b", "a.b", "eth0", "x" * 15, "x" * 16, "eth 0", "eth/0", "é", "eth0\n", "a:b",
                "a@b", "+", "-", "_", "eno1.100", "a*b", "a\x7f"]
LABEL_EDGES = ["Bad Key!", "a.io/b/c", "kubernetes.io/x", "x.kubernetes.io/y", "feature.node.kubernetes.io/x",
               "a.feature.node.kubernetes.io/x", "profile.node.kubernetes.io/x", "node-role.kubernetes.io/x",
               "nokubernetes.io/x", "kubernetes.iox/y", "a" * 250 + ".io/x", "a" * 251 + ".io/x",
               "aiinfra.io/" + "x" * 63, "aiinfra.io/" + "x" * 64, "x", "aiinfra.io/x\n", "Aiinfra.io/x",
               "aiinfra.io/-x", "aiinfra.io/x_y.z", "/x", "aiinfra.io/"]
SYSCTL_KEY_EDGES = ["vm", "vm.x", "VM.x", "a.b.c.d.e.f.g.h.i", "a.b.c.d.e.f.g.h.i.j", "net.ipv4.conf.*.rp_filter",
                    "x." + "a" * 126, "x." + "a" * 127, "vm.x\n", "vm..x", "vm.x.", "-.x"]
SIZE_CHARS = "0123456789.KMGTPEkmgtpeiIbB \t\n\x0b\x0c\r\x1c\u00a0\u212a"
SYSCTL_VALUE_CHARS = "0123456789 -_aZ.:/\n+٣"
HOST_EDGES = ["h", "gpu-node-01", "_h", "-h", "h:1", "a" * 253, "a" * 254, "h/x", "h\n", "é"]


def _text(alphabet: str, size: int = 16) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, max_size=size)


def _regex(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True)


mount_paths = st.one_of(st.sampled_from(MOUNT_EDGES), _regex(r"/[A-Za-z0-9._/@+-]{0,20}"),
                        _text(PATH_CHARS).map(lambda s: "/" + s), _text(PATH_CHARS))
rel_paths = st.one_of(st.sampled_from(REL_EDGES), _regex(r"[A-Za-z0-9._/@+-]{1,12}"), _text(PATH_CHARS))
file_paths = st.one_of(st.sampled_from(REL_EDGES), _regex(r"[A-Za-z0-9._/@+=,-]{1,12}"), _text(PATH_CHARS))
sources = st.one_of(st.sampled_from(SOURCE_EDGES), *(_regex(branch["pattern"]) for branch in MODEL_SOURCE["anyOf"]),
                    _text("/:.a1[]@?#%~-").map(lambda s: "http://h" + s), _text(PATH_CHARS).map(lambda s: "/" + s))
ifnames = st.one_of(st.sampled_from(IFNAME_EDGES), _text("ab.-+@_:/ é\n%=0", 17), _regex(r"[A-Za-z0-9+.@_-]{1,16}"))
label_keys = st.one_of(st.sampled_from(LABEL_EDGES),
                       _regex(r"[a-z0-9.-]{0,12}(kubernetes\.io)?/[A-Za-z0-9._-]{0,8}"), _text("a.-/_Z9 !", 12))
sysctl_keys = st.one_of(st.sampled_from(SYSCTL_KEY_EDGES), _regex(r"[a-z0-9_.*A-Z-]{1,20}"),
                        _regex(r"[a-z0-9_-]{1,6}(\.[A-Za-z0-9_*-]{1,6}){1,9}"))
sizes = st.one_of(st.integers(-2, 2**61), st.sampled_from([0, MAX_BYTES, MAX_BYTES + 1, True, 1.5]),
                  _text(SIZE_CHARS, 12), _regex(SIZE_TEXT.replace("[\\t\\n\\v\\f\\r ]", "[ \\t\\n]")))
sysctl_values = st.one_of(st.integers(-(10**6), 10**6), _text(SYSCTL_VALUE_CHARS, 12),
                          _regex(r"-?[0-9](_?[0-9]){0,3}( +-?[0-9]{1,3}){0,3}"), st.booleans())
int_keys = st.one_of(st.integers(-3, 1100), _text("0123456789٣+- ", 5),
                     st.sampled_from(["063", "0063", "64", "1023", "1024", "0000", "000", "26", "48"]))
host_keys = st.one_of(st.sampled_from(HOST_EDGES), _regex(r"[A-Za-z0-9_.:-]{1,12}"))


def _prio_for(key: Any) -> int:
    try:
        number = int(key)
    except (TypeError, ValueError):
        return 0
    return {26: 3, 48: 6}.get(number, 0)


def _int_alternative(data: dict[str, Any], field: str) -> dict[str, Any]:
    """The same data with a digit key as an integer (a YAML reader's `26:` rather than `"26":`)."""
    out = copy.deepcopy(data)
    out[field] = {(int(k) if isinstance(k, str) and k.isascii() and k.isdigit() else k): v
                  for k, v in out[field].items()}
    return out


# (name, model, pointer, build(value) -> data, strategy, exact: True, or a predicate naming the allowed difference)
TypeCase = tuple[str, type[Any], str, Callable[[Any], Any], st.SearchStrategy[Any], Any]
TYPE_CASES: list[TypeCase] = [
    ("mount path", models.StorageMount, "/$defs/StorageMount", lambda v: {"path": v}, mount_paths, True),
    ("hugetlbfs path", models.HugeMount, "/$defs/HugeMount", lambda v: {"size": "2M", "path": v}, mount_paths, True),
    ("directory", models.Directory, "/$defs/Directory", lambda v: {"path": v}, rel_paths, True),
    ("model file path", models.ModelFile, "/$defs/ModelFile", lambda v: {"path": v, "sha256": SHA}, file_paths, True),
    ("model source", models.Model, "/$defs/Model",
     lambda v: {"name": "m", "version": "v", "source": v, "manifest": "SUMS"}, sources, True),
    ("interface name", models.InterfaceMatch, "/$defs/InterfaceMatch", lambda v: {"name": v}, ifnames, True),
    ("size", models.ModelCache, "/$defs/ModelCache", lambda v: {"reserve": v}, sizes, "size range"),
    ("label key", models.K8s, "/$defs/K8s", lambda v: {"labels": {v: "x"}}, label_keys, True),
    ("sysctl key", models.ProfileBody, "/$defs/ProfileBody", lambda v: {"sysctl": {v: 1}}, sysctl_keys, True),
    ("sysctl value", models.SysctlSetting, "/$defs/SysctlSetting", lambda v: {"value": v}, sysctl_values, True),
    ("sysctl minimum value", models.SysctlSetting, "/$defs/SysctlSetting",
     lambda v: {"value": v, "mode": "minimum"}, sysctl_values, True),
    ("sysctl shorthand value", models.ProfileBody, "/$defs/ProfileBody", lambda v: {"sysctl": {"vm.x": v}},
     sysctl_values, True),
    ("dscp2prio key", models.Roce, "/$defs/Roce", lambda v: {"dscp2prio": {v: _prio_for(v)}}, int_keys, "dscp2prio"),
    ("per_node key", models.HugePagePool, "/$defs/HugePagePool", lambda v: {"size": "2M", "per_node": {v: 1}},
     int_keys, "per_node"),
    ("host key", models.DatapathSpec, "/$defs/DatapathSpec", lambda v: {"version": 1, "hosts": {v: {}}}, host_keys,
     True),
]


def _size_too_large(value: Any) -> bool:
    try:
        parse_size(value)
    except ValueError as exc:
        return "larger than" in str(exc)
    return False


@pytest.mark.parametrize("case", TYPE_CASES, ids=[c[0] for c in TYPE_CASES])
def test_value_types_schema_accepts_exactly_what_the_validator_accepts(case: TypeCase) -> None:
    name, model, pointer, build, strategy, exact = case

    @MANY
    @given(strategy)
    def check(value: Any) -> None:
        data = build(value)
        ours = _accepts(model, data)
        theirs = not cj_errors(_norm(data), pointer)
        CASES[f"{name} ({'valid' if ours else 'invalid'})"] += 1
        if ours:
            assert theirs, f"{name} {value!r}: the validator accepts it, the schema does not: " \
                           f"{cj_errors(_norm(data), pointer)}"
        elif theirs:
            if exact == "size range":
                assert _size_too_large(value), f"{name} {value!r}: only the schema accepts it"
            elif exact in ("dscp2prio", "per_node"):
                assert _accepts(model, _int_alternative(data, exact)), f"{name} {value!r}: only the schema accepts it"
            else:
                pytest.fail(f"{name} {value!r}: the schema accepts it, the validator does not")

    check()


# --------------------------------------------------------------------------- cross-checks in the schema
maybe = st.none
match_st = st.fixed_dictionaries({}, optional={
    "name": st.sampled_from([None, "eno1"]), "mac": st.sampled_from([None, "00:11:22:33:44:55"]),
    "pci": st.sampled_from([None, "0000:1a:00.0"]), "driver": st.sampled_from([None, "mlx5_core"])})
interface_st = st.fixed_dictionaries({"fabric": st.just("mgmt")}, optional={
    "name": st.sampled_from([None, "eno1"]), "match": st.one_of(st.none(), match_st),
    "mtu": st.one_of(st.none(), st.sampled_from([1500, 9000])), "mtu_override": st.booleans()})
pool_st = st.fixed_dictionaries({"size": st.sampled_from(["2M", "1G"])}, optional={
    "count": st.sampled_from([None, 0, 8]), "memory_share": st.sampled_from([None, 0.25]),
    "per_node": st.sampled_from([None, {0: 2}]), "numa_split": st.sampled_from(["kernel", "even"]),
    "persist": st.sampled_from(["auto", "sysctl", "cmdline", "boot_unit"])})
simple_pool = st.fixed_dictionaries({"size": st.sampled_from(["2M", "1G"]), "count": st.just(4)}, optional={
    "persist": st.sampled_from(["auto", "sysctl", "cmdline", "boot_unit"])})
hugepages_st = st.fixed_dictionaries({}, optional={
    "default_size": st.sampled_from([None, "2M", "1G"]), "pages": st.lists(simple_pool, max_size=2),
    "mounts": st.lists(st.fixed_dictionaries({"size": st.sampled_from(["2M", "1G"]),
                                              "path": st.sampled_from(["/dev/hugepages", "/mnt/h1", "/mnt/h2"])}),
                       max_size=3)})
firmware_st = st.fixed_dictionaries({}, optional={
    "driver": st.sampled_from([None, "mlx5_core"]), "psid": st.sampled_from([None, "MT_0000000838"]),
    "min_version": st.sampled_from([None, "28.39.3560"]), "allowed": st.sampled_from([[], ["28.39.3560"]])})
storage_st = st.fixed_dictionaries({"mount": st.just({"path": "/mnt/cache"})}, optional={
    "devices": st.sampled_from([None, [], ["/dev/sda"], ["/dev/sda", "/dev/sdb"], ["/dev/sda", "/dev/sda"],
                                ["/dev/sda", "/dev/sdb", "/dev/sdc"]]),
    "select": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"count": st.sampled_from([None, 1, 2, 3])})),
    "raid": st.sampled_from([None, {}, {"level": 0}]),
    "filesystem": st.fixed_dictionaries({}, optional={"type": st.sampled_from(["xfs", "ext4"]),
                                                      "label": st.sampled_from(["cache", "model-cache-x", "m" * 16])}),
    "wipe_serials": st.sampled_from([[], ["S1"], ["S1", "S1"], ["S1", "S2"]])})
model_st = st.fixed_dictionaries({"name": st.just("m"), "version": st.just("v"), "source": st.just("/models/m")},
                                 optional={
    "files": st.lists(st.sampled_from([{"path": "a", "sha256": SHA}, {"path": "b", "sha256": SHA},
                                       {"path": "c/d", "sha256": SHA}]), max_size=3),
    "manifest": st.sampled_from([None, "SUMS"]), "manifest_sha256": st.sampled_from([None, SHA]),
    "groups": st.lists(st.sampled_from(["g1", "g2"]), max_size=3),
    "hosts": st.lists(st.sampled_from(["h1", "h2"]), max_size=3)})
roce_st = st.fixed_dictionaries({}, optional={"pfc_priorities": st.lists(st.integers(0, 7), max_size=4),
                                              "ecn": st.booleans(), "priority": st.integers(0, 7)})
fabric_st = st.fixed_dictionaries({"name": st.just("f"), "purpose": st.sampled_from(
    ["management", "storage", "rdma", "service"])}, optional={
    "kind": st.sampled_from(["ethernet", "roce", "infiniband"]), "mtu": st.sampled_from([68, 351, 352, 1500, 9000]),
    "roce": st.sampled_from([None, {}])})
setting_st = st.fixed_dictionaries({"value": sysctl_values}, optional={"mode": st.sampled_from(["exact", "minimum"])})


def _unique_paths(items: list[dict[str, Any]]) -> bool:
    paths = [i["path"] for i in items]
    return len(set(paths)) == len(paths)


def _plain_files(data: dict[str, Any]) -> bool:
    paths = [f["path"] for f in data.get("files", [])]
    return len(set(paths)) == len(paths) and not any(p.startswith(q + "/") for p in paths for q in paths)


# (model, strategy, when the schema must be exact: a predicate on the data, or False: one direction only)
CheckCase = tuple[type[Any], st.SearchStrategy[Any], Callable[[Any], bool]]
CHECK_CASES: dict[str, CheckCase] = {
    "InterfaceMatch": (models.InterfaceMatch, match_st, lambda d: True),
    "Interface": (models.Interface, interface_st, lambda d: True),
    "HugePagePool": (models.HugePagePool, pool_st, lambda d: True),
    "HugePages": (models.HugePages, hugepages_st, lambda d: _unique_paths(d.get("mounts", []))),
    "FirmwarePolicy": (models.FirmwarePolicy, firmware_st, lambda d: True),
    "Storage": (models.Storage, storage_st, lambda d: True),
    "Model": (models.Model, model_st, _plain_files),
    "Roce": (models.Roce, roce_st, lambda d: False),
    "Fabric": (models.Fabric, fabric_st, lambda d: True),
    "SysctlSetting": (models.SysctlSetting, setting_st, lambda d: True),
}


def test_every_check_in_the_schema_has_a_property_case() -> None:
    assert {model for model, _coverage, _fragments in CHECK_SCHEMAS.values()} <= set(CHECK_CASES)


@pytest.mark.parametrize("name", sorted(CHECK_CASES))
def test_cross_checks_in_the_schema_match_the_validator(name: str) -> None:
    model, strategy, exact = CHECK_CASES[name]

    @MANY
    @given(strategy)
    def check(data: dict[str, Any]) -> None:
        ours = _accepts(model, data)
        theirs = not cj_errors(_norm(data), f"/$defs/{name}")
        CASES[f"{name} object ({'valid' if ours else 'invalid'})"] += 1
        if ours:
            assert theirs, f"{name} {data!r}: the validator accepts it, the schema does not: " \
                           f"{cj_errors(_norm(data), f'/$defs/{name}')}"
        elif theirs:
            assert not exact(data), f"{name} {data!r}: the schema accepts it, the validator does not"

    check()


# --------------------------------------------------------------------------- whole documents
# Slots of full_spec() and what may go there (mostly valid values, some not).
SLOTS: list[tuple[tuple[Any, ...], st.SearchStrategy[Any]]] = [
    (("profiles", 0, "storage", "mount", "path"), mount_paths),
    (("hosts", "gpu-node-01", "storage", "mount", "path"), mount_paths),
    (("profiles", 0, "hugepages", "mounts", 0, "path"), mount_paths),
    (("profiles", 0, "storage", "directories", 0, "path"), rel_paths),
    (("model_cache", "directory"), rel_paths),
    (("models", 0, "files", 0, "path"), file_paths),
    (("models", 0, "source"), sources),
    (("profiles", 0, "storage", "reserve"), sizes),
    (("model_cache", "reserve"), sizes),
    (("model_cache", "bandwidth_limit"), sizes),
    (("profiles", 0, "node", "memory"), sizes),
    (("profiles", 0, "interfaces", 0, "name"), ifnames),
    (("profiles", 0, "k8s", "labels"), st.dictionaries(label_keys, st.sampled_from(["true", "", None, "x y"]),
                                                       max_size=3)),
    (("profiles", 0, "sysctl"), st.dictionaries(sysctl_keys, st.one_of(sysctl_values, setting_st, st.none()),
                                                max_size=3)),
    (("fabrics", 1, "roce", "dscp2prio"), st.dictionaries(int_keys, st.integers(0, 7), max_size=3)),
    (("profiles", 0, "hugepages", "pages", 1, "per_node"), st.dictionaries(int_keys, st.integers(0, 4), max_size=2)),
    (("fabrics", 1, "mtu"), st.integers(60, 9300)),
    (("fabrics", 0), fabric_st.map(lambda f: {**f, "name": "mgmt"})),
    (("fabrics", 1, "roce"), roce_st),
    (("profiles", 0, "interfaces", 1), interface_st.map(lambda i: {**i, "fabric": "rail0"})),
    (("profiles", 0, "hugepages"), hugepages_st),
    (("profiles", 0, "firmware", 0), firmware_st),
    (("hosts", "gpu-node-01", "storage"), storage_st),
    (("models", 0), model_st),
]


@st.composite
def mutated_full_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec = full_spec()
    for index in draw(st.lists(st.integers(0, len(SLOTS) - 1), min_size=1, max_size=4, unique=True)):
        path, strategy = SLOTS[index]
        try:
            parent = at(spec, path[:-1])
            parent[path[-1]]  # the slot exists (an earlier draw may have replaced its parent)
        except (KeyError, IndexError, TypeError):
            continue
        parent[path[-1]] = draw(strategy)
    return spec


def _documents() -> st.SearchStrategy[Any]:
    unit = _unit_strategies()
    return st.one_of(mutated_full_specs(), unit.valid_specs(), unit.mutated())


def _canonical(data: Any) -> str:
    return json.dumps(_norm(data), sort_keys=True, default=str)


def _both(doc: Any) -> tuple[list[Any], list[str], str]:
    text = yaml_text({"datapath": doc})
    ours = validate_spec(load_yaml_text(text)["datapath"])
    theirs = cj_errors(cj_load_yaml(text))
    return ours, theirs, text


@DOCS
@given(_documents())
def test_every_document_the_validator_accepts_the_schema_accepts(doc: Any) -> None:
    try:
        ours, theirs, _text = _both(doc)
    except Exception as exc:  # a value YAML cannot carry (a control character): not a document
        if type(exc).__module__.startswith("ruamel"):
            return
        raise
    if _canonical(load_yaml_text(_text)) != _canonical(cj_load_yaml(_text)):
        # YAML 1.1 (Ansible, datapath validate) and 1.2 (check-jsonschema) read this text differently
        CASES["documents read differently by YAML 1.1 and 1.2 (skipped)"] += 1
        return
    CASES["documents (invalid)" if ours else "documents (valid)"] += 1
    if ours:  # the validator's errors: nothing to prove about the schema
        if theirs:
            CASES["documents (invalid): the schema rejects them too"] += 1
        return
    assert not theirs, f"the validator accepts, check-jsonschema rejects:\n{theirs}\n{json.dumps(doc, default=repr)}"
    if len(ACCEPTED) < 60:
        ACCEPTED.append(doc)


# --------------------------------------------------------------------------- what the schema must reject
def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(spec: dict[str, Any]) -> None:
        at(spec, path[:-1])[path[-1]] = value
    return mutate


def _add_label(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda spec: spec["profiles"][0]["k8s"]["labels"].update({key: "x"})


REJECT: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("label key Bad Key!", _add_label("Bad Key!")),
    ("label key a.io/b/c", _add_label("a.io/b/c")),
    ("label key without a prefix", _add_label("rack")),
    ("label key in kubernetes.io", _add_label("node-role.kubernetes.io/gpu")),
    ("label key with a 254-character prefix", _add_label("a" * 251 + ".io/x")),
    ("label value with a space", _set(("profiles", 0, "k8s", "labels", "aiinfra.io/nvme-cache"), "a b")),
    ("mount path with a space", _set(("profiles", 0, "storage", "mount", "path"), "/mnt/model cache")),
    ("relative mount path", _set(("profiles", 0, "storage", "mount", "path"), "mnt/model-cache")),
    ("mount path not normalised", _set(("profiles", 0, "storage", "mount", "path"), "/mnt/a/../b")),
    ("mount path //etc", _set(("profiles", 0, "storage", "mount", "path"), "//etc")),
    ("mount path in a system tree", _set(("profiles", 0, "storage", "mount", "path"), "/usr/cache")),
    ("mount path /var/lib", _set(("profiles", 0, "storage", "mount", "path"), "/var/lib")),
    ("hugetlbfs mount in /dev", _set(("profiles", 0, "hugepages", "mounts", 0, "path"), "/dev/shm")),
    ("directory with ..", _set(("profiles", 0, "storage", "directories", 0, "path"), "../etc")),
    ("MTU 9217", _set(("fabrics", 0, "mtu"), 9217)),
    ("MTU 67", _set(("fabrics", 0, "mtu"), 67)),
    ("MTU as a string", _set(("fabrics", 0, "mtu"), "9000")),
    ("RoCE fabric with MTU 351", _set(("fabrics", 1, "mtu"), 351)),
    ("RoCE settings on ethernet", _set(("fabrics", 0, "roce"), {})),
    ("rdma fabric of kind ethernet", _set(("fabrics", 1, "kind"), "ethernet")),
    ("unknown enum value", _set(("fabrics", 0, "purpose"), "backup")),
    ("interface name too long", _set(("profiles", 0, "interfaces", 0, "name"), "x" * 16)),
    ("interface name with /", _set(("profiles", 0, "interfaces", 0, "name"), "eth/0")),
    ("interface with name and match", _set(("profiles", 0, "interfaces", 0, "match"), {"name": "eno1"})),
    ("match with two keys", _set(("profiles", 0, "interfaces", 1, "match"), {"pci": "0000:1a:00.0",
                                                                             "driver": "mlx5_core"})),
    ("size with an unknown unit", _set(("profiles", 0, "storage", "reserve"), "10 GB/s")),
    ("negative size", _set(("model_cache", "reserve"), -1)),
    ("sysctl key without a dot", _set(("profiles", 0, "sysctl", "vm"), 1)),
    ("sysctl value with a ;", _set(("profiles", 0, "sysctl", "vm.x"), "1;reboot")),
    ("sysctl minimum of a word", _set(("profiles", 0, "sysctl", "vm.x"), {"value": "abc", "mode": "minimum"})),
    ("DSCP key 64", _set(("fabrics", 1, "roce", "dscp2prio"), {64: 1})),
    ("NUMA node key 1024", _set(("profiles", 0, "hugepages", "pages", 1, "per_node"), {1024: 1})),
    ("PFC priority twice", _set(("fabrics", 1, "roce", "pfc_priorities"), [3, 3])),
    ("pool with count and per_node", _set(("profiles", 0, "hugepages", "pages", 0, "per_node"), {0: 1})),
    ("two 2M pools", _set(("profiles", 0, "hugepages", "pages", 1), {"size": "2M", "count": 1})),
    ("mount without a pool", _set(("profiles", 0, "hugepages", "pages"), [{"size": "2M", "count": 1}])),
    ("storage with devices and select", _set(("profiles", 0, "storage", "select"), {"count": 2})),
    ("RAID0 of one device", _set(("profiles", 0, "storage", "devices"), ["/dev/sda"])),
    ("a device twice", _set(("profiles", 0, "storage", "devices"), ["/dev/sda", "/dev/sda"])),
    ("XFS label of 13 characters", _set(("profiles", 0, "storage", "filesystem", "label"), "model-cache-x")),
    ("firmware with min_version and allowed", _set(("profiles", 0, "firmware", 0, "allowed"), ["1.2"])),
    ("model with files and a manifest", _set(("models", 0, "manifest"), "SHA256SUMS")),
    ("model source with credentials", _set(("models", 0, "source"), "https://user:pw@models.example.com/x")),
    ("model source with a port 0", _set(("models", 0, "source"), "https://models.example.com:0/x")),
    ("model file path ..", _set(("models", 0, "files", 0, "path"), "../x")),
    ("model group twice", _set(("models", 0, "groups"), ["gpu", "gpu"])),
    ("host name with a /", _set(("hosts", "a/b"), {})),
    ("version 2", _set(("version",), 2)),
    ("builtin profile unknown", _set(("builtin_profile",), "ai")),
]


def _unknown_key_cases() -> list[tuple[str, Callable[[dict[str, Any]], None]]]:
    """`Bad Key!` in every mapping of full_spec(), and `colour` in every one that is a model."""
    out = []
    for path in walk_dicts(full_spec()):
        where = "datapath" + "".join(f"[{p!r}]" for p in path)
        out.append((f"Bad Key! in {where}", lambda s, p=path: at(s, p).update({"Bad Key!": 1})))
        probe = full_spec()
        at(probe, path).update({"colour": 1})
        if any("unknown key 'colour'" in e.message for e in validate_spec(probe)):
            out.append((f"unknown key colour in {where}", lambda s, p=path: at(s, p).update({"colour": 1})))
    return out


ALL_REJECT = REJECT + _unknown_key_cases()


@pytest.mark.parametrize(("name", "mutate"), ALL_REJECT, ids=[c[0] for c in ALL_REJECT])
def test_schema_rejects(name: str, mutate: Callable[[dict[str, Any]], None]) -> None:
    spec = full_spec()
    mutate(spec)
    ours, theirs, _text = _both(spec)
    CASES["listed rejections"] += 1
    assert ours, f"{name}: the validator should reject it too"
    assert theirs, f"{name}: check-jsonschema accepts it"


def test_cli_rejects_the_listed_documents_and_accepts_the_valid_ones(tmp_path: Any) -> None:
    """The same, through the check-jsonschema command line, in one run each."""
    bad = []
    for index, (_name, mutate) in enumerate(ALL_REJECT):
        spec = full_spec()
        mutate(spec)
        path = tmp_path / f"reject-{index:03d}.yml"
        path.write_text(yaml_text({"datapath": spec}))
        bad.append(str(path))
    result = cj_cli(bad)
    missed = [ALL_REJECT[i][0] for i, f in enumerate(bad) if not result[f]]
    assert not missed, f"check-jsonschema accepts: {missed}"
    good = []
    for index, doc in enumerate([full_spec(), *ACCEPTED]):
        path = tmp_path / f"accept-{index:03d}.yml"
        path.write_text(yaml_text({"datapath": doc}))
        good.append(str(path))
    result = cj_cli(good)
    assert all(not errors for errors in result.values()), {f: e for f, e in result.items() if e}
    CASES["CLI files rejected"] += len(bad)
    CASES["CLI files accepted"] += len(good)


def test_zz_report_case_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\ncheck-jsonschema cases: {dict(sorted(CASES.items()))}")
