"""JSON Schema of the spec file (a YAML document with a ``datapath`` key), for editors and CI.

The schema is generated from the models and is at least as strict as the validator wherever
JSON Schema can say it: every model rejects unknown keys (``additionalProperties: false``),
keyed maps constrain their keys (``propertyNames``: the key type's pattern and length, or the
integer range as decimal strings), and what the models check in Python is written again here
in JSON Schema terms:

* :data:`BEFORE`: each before-validator of the scalar types (paths, sizes, interface names,
  sources, label keys, sysctl values) -> the JSON Schema of exactly the values it accepts;
* :data:`CHECK_SCHEMAS`: the cross-checks JSON Schema can express inside one object ("exactly
  one of", "needs", unique scalars, if/then on a kind); docs/spec.md says for every cross-check
  whether the schema enforces it (yes / partly / no).

What stays in Python only: checks across objects (fabric references, unique names, subnets
that overlap), arithmetic (ETS shares, HugePages against memory), the RoCE priority rules, and
a few ranges a pattern cannot bound (a size string's value). A document the validator accepts
is always accepted by the schema (tests/interop/test_spec_schema.py proves it with
check-jsonschema); the reverse holds except for those checks.

Patterns are ECMA-262 regular expressions (JSON Schema's dialect, which check-jsonschema uses):
``$`` is the end of the text. Python's ``re.search`` (the ``jsonschema`` library's default)
also lets ``$`` match before a final newline.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ._node import derived
from ._pydantic import HAS_PYDANTIC
from ._types import (
    MAX_BYTES,
    SYSTEM_DIRS,
    SYSTEM_TREES,
    _check_ifname,
    _hugetlbfs_path,
    _model_file_path,
    _model_source,
    _mount_path,
    _rel_path,
    parse_size,
)
from .models import DatapathSpec, Roce, SysctlSetting, _int_keys, _no_bool, _sysctl_shorthand, _sysctl_value

try:
    from ._types import _check_label_key
except ImportError:  # pragma: no cover - label keys without a before-validator
    _check_label_key = None  # type: ignore[assignment]

if HAS_PYDANTIC:
    from pydantic.json_schema import GenerateJsonSchema
else:  # pragma: no cover - ansible-test's import sanity has no pydantic
    GenerateJsonSchema = object  # type: ignore[assignment,misc]

SCHEMA_ID = "https://github.com/aiinfra/datapath/blob/main/docs/schema/datapath.schema.json"
Fragment = dict[str, Any]

# --------------------------------------------------------------------------- paths
_WS = r"[\t\n\v\f\r ]"  # Python's ASCII \s
# A path that posixpath.normpath would change: '//', a trailing '/', a '.' or '..' segment.
_NOT_NORMALISED = r"//|/$|(^|/)\.\.?(/|$)"
MOUNT_PATH: Fragment = {
    "type": "string", "maxLength": 255, "pattern": "^/[A-Za-z0-9._/@+-]*$",
    "not": {"anyOf": [
        {"pattern": _NOT_NORMALISED},
        {"enum": list(SYSTEM_DIRS)},
        {"pattern": "^/(" + "|".join(tree[1:] for tree in SYSTEM_TREES) + ")(/|$)"},
        {"pattern": "^/lib"},
    ]},
}
HUGE_MOUNT_PATH: Fragment = {"anyOf": [
    {"type": "string", "pattern": "^/dev/hugepages(-(2M|1G|2MB|1GB))?$"}, MOUNT_PATH]}
REL_PATH: Fragment = {
    "type": "string", "pattern": "^[A-Za-z0-9._/@+-]{1,255}$",
    "anyOf": [{"const": "."}, {"not": {"pattern": "^/|" + _NOT_NORMALISED}}],
}
MODEL_FILE_PATH: Fragment = {
    "type": "string", "pattern": "^[A-Za-z0-9._/@+=,-]{1,1024}$", "not": {"pattern": "^/|" + _NOT_NORMALISED},
}
_SEG = "[A-Za-z0-9._@+=,~%-]+"
_PATHS = f"(/|(/{_SEG})+)"
_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = rf"({_LABEL}(\.{_LABEL})*|\[[0-9A-Fa-f:.]{{2,45}}\])"
# 1-65535, with the leading zeros int() accepts in at most five digits
PORT = ("(0{0,4}[1-9]|0{0,3}[1-9][0-9]|0{0,2}[1-9][0-9]{2}|0?[1-9][0-9]{3}|[1-5][0-9]{4}|6[0-4][0-9]{3}"
        "|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])")
MODEL_SOURCE: Fragment = {
    "type": "string", "maxLength": 2048,
    "anyOf": [
        {"pattern": f"^{_PATHS}$"},
        {"pattern": f"^file://{_PATHS}$"},
        {"pattern": f"^https?://{_HOST}(:{PORT})?{_PATHS}?$"},
        {"pattern": f"^s3://[a-z0-9][a-z0-9.-]{{1,61}}[a-z0-9]{_PATHS}?$"},
    ],
    "not": {"pattern": r"/\.\.?(/|$)"},
}
SIZE_TEXT = (f"^{_WS}*[0-9]{{1,15}}(\\.[0-9]{{1,6}})?{_WS}*[KMGTPEkmgtpe]?[iI]?[bB]?{_WS}*$")
SIZE: Fragment = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_BYTES},
                            {"type": "string", "pattern": SIZE_TEXT}]}
IFNAME: Fragment = {"type": "string", "minLength": 1, "maxLength": 15, "pattern": "^[A-Za-z0-9+.@_-]+$",
                    "not": {"pattern": r"\.\.|^\.$"}}
# node-feature-discovery (plugins/module_utils/_nfd_rules.py): a prefix of at most 253 characters,
# not kubernetes.io or *.kubernetes.io unless it is (below) feature.node or profile.node.kubernetes.io.
LABEL_KEY_EXTRA: Fragment = {"not": {"anyOf": [
    {"pattern": "^[^/]{254,}/"},
    {"allOf": [{"pattern": r"^([^/]*\.)?kubernetes\.io/"},
               {"not": {"pattern": r"^([^/]*\.)?(feature|profile)\.node\.kubernetes\.io/"}}]},
]}}


def _pattern_of(model: Any, field: str) -> str:
    for meta in model.model_fields[field].metadata:
        if getattr(meta, "pattern", None):
            return str(meta.pattern)
    raise LookupError(f"{model.__name__}.{field} has no pattern")  # pragma: no cover


def _sysctl_value_schema(inner: Fragment) -> Fragment:
    text = {"type": "string", "pattern": _pattern_of(SysctlSetting, "value")}
    return {**{k: v for k, v in inner.items() if k == "description"}, "anyOf": [{"type": "integer"}, text]}


def _sysctl_map_schema(inner: Fragment) -> Fragment:
    # `key: value` is shorthand for `key: {value: value}`
    values = inner.get("additionalProperties") or {}
    choices = values.get("anyOf", [values])
    text = {"type": "string", "pattern": _pattern_of(SysctlSetting, "value")}
    return {**inner, "additionalProperties": {"anyOf": [{"type": "integer"}, text, *choices]}}


def _replace(fragment: Fragment) -> Callable[[Fragment], Fragment]:
    def build(inner: Fragment) -> Fragment:
        keep = {k: v for k, v in inner.items() if k in ("description", "title")}
        return {**keep, **json.loads(json.dumps(fragment))}
    return build


def _extend(fragment: Fragment) -> Callable[[Fragment], Fragment]:
    def build(inner: Fragment) -> Fragment:
        return {**inner, **json.loads(json.dumps(fragment))}
    return build


def _same(inner: Fragment) -> Fragment:
    return inner


# Each before-validator of the models -> how its JSON Schema is built from the inner one.
# tests/unit/.../test_schema.py fails when a model gains a before-validator missing here.
BEFORE: dict[Callable[..., Any], Callable[[Fragment], Fragment]] = {
    _check_ifname: _replace(IFNAME),
    parse_size: _replace(SIZE),
    _mount_path: _replace(MOUNT_PATH),
    _hugetlbfs_path: _replace(HUGE_MOUNT_PATH),
    _rel_path: _replace(REL_PATH),
    _model_file_path: _replace(MODEL_FILE_PATH),
    _model_source: _replace(MODEL_SOURCE),
    _sysctl_value: _sysctl_value_schema,
    _sysctl_shorthand: _sysctl_map_schema,
    _int_keys: _same,  # the integer keys are constrained by INT_KEYS (dict_schema)
    _no_bool: _same,  # JSON Schema keeps booleans apart from integers already (const 1 rejects true)
}
# roce.preset fills only keys that are absent, and every key of Roce is optional: the raw block has Roce's schema
BEFORE[getattr(Roce, "_fill_preset")] = _same  # noqa: B009  (the bound classmethod pydantic calls)
if _check_label_key is not None:
    BEFORE[_check_label_key] = _extend(LABEL_KEY_EXTRA)

# Integer-keyed maps (after _int_keys): the keys a YAML or JSON reader sees as strings, i.e. the
# decimal integer itself or a digit string of at most 3 characters, within the key's range.
INT_KEYS: dict[tuple[int, int], str] = {
    (0, 63): "^(0{0,2}[0-9]|0?[1-5][0-9]|0?6[0-3])$",
    (0, 1023): "^([0-9]{1,3}|10[01][0-9]|102[0-3])$",
}


def _given(*names: str) -> Fragment:
    """Every name is present and not null."""
    return {"required": list(names), "properties": {n: {"not": {"type": "null"}} for n in names}}


def _is(name: str, *values: Any) -> Fragment:
    """``name`` is present and one of ``values``."""
    return {"required": [name], "properties": {name: {"enum": list(values)}}}


def _pool(size: str, persist: str) -> Fragment:
    return {"required": ["size", "persist"],
            "properties": {"size": {"const": size}, "persist": {"const": persist}}}


def _with_size(size: str) -> Fragment:
    return {"required": ["size"], "properties": {"size": {"const": size}}}


# cross-check name -> (model, "yes" or "partly: <what only the validator checks>", fragments)
CHECK_SCHEMAS: dict[str, tuple[str, str, list[Fragment]]] = {
    "match-one": ("InterfaceMatch", "yes", [{"oneOf": [_given(k) for k in ("name", "mac", "pci", "driver")]}]),
    "name-or-match": ("Interface", "yes", [
        {"oneOf": [_given("name"), _given("match")]},
        {"if": _is("mtu_override", True), "then": _given("mtu")},
    ]),
    "pool-amount": ("HugePagePool", "yes", [
        {"oneOf": [_given("count"), _given("memory_share"), _given("per_node")]},
        {"if": _given("per_node"), "then": {"not": _is("numa_split", "even")}},
        {"if": _is("persist", "sysctl"), "then": {"not": {"anyOf": [_given("per_node"), _is("numa_split", "even")]}}},
    ]),
    "pools-and-mounts": ("HugePages", "partly: mount paths are unique", [
        *({"properties": {"pages": {"not": {"contains": _with_size(size), "minContains": 2}}}}
          for size in ("2M", "1G")),
        *({"if": {"required": ["mounts"], "properties": {"mounts": {"contains": _with_size(size)}}},
           "then": {"required": ["pages"], "properties": {"pages": {"contains": _with_size(size)}}}}
          for size in ("2M", "1G")),
        {"if": _is("default_size", "1G"),
         "then": {"properties": {"pages": {"not": {"contains": _pool("2M", "sysctl")}}}},
         "else": {"properties": {"pages": {"not": {"contains": _pool("1G", "sysctl")}}}}},
    ]),
    "firmware-rule": ("FirmwarePolicy", "yes", [
        {"anyOf": [_given("driver"), _given("psid")]},
        {"oneOf": [_given("min_version"), {"required": ["allowed"], "properties": {"allowed": {"minItems": 1}}}]},
    ]),
    "storage-devices": ("Storage", "partly: directory paths are unique and the reserve fits the devices", [
        {"oneOf": [_given("devices"), _given("select")]},
        {"properties": {"devices": {"minItems": 1, "uniqueItems": True}, "wipe_serials": {"uniqueItems": True},
                        "filesystem": {"if": _is("type", "ext4"),
                                       "else": {"properties": {"label": {"maxLength": 12}}}}}},
        {"if": _given("raid"),
         "then": {"properties": {"devices": {"minItems": 2}, "select": {"properties": {"count": {"minimum": 2}}}}},
         "else": {"properties": {"devices": {"maxItems": 1}, "select": {"properties": {"count": {"maximum": 1}}}}}},
    ]),
    "model-files": ("Model", "partly: file paths are unique, none is below or the staging name of another", [
        {"oneOf": [{"required": ["files"], "properties": {"files": {"minItems": 1}}}, _given("manifest")]},
        {"if": _given("manifest_sha256"), "then": _given("manifest")},
    ]),
    "model-targets": ("Model", "yes", [
        {"properties": {"groups": {"uniqueItems": True}, "hosts": {"uniqueItems": True}}}]),
    "pfc-priorities-unique": ("Roce", "yes", [{"properties": {"pfc_priorities": {"uniqueItems": True}}}]),
    "roce-settings-match-kind": ("Fabric", "yes", [
        {"if": _given("roce"), "then": _is("kind", "roce")},
        {"if": _is("purpose", "rdma"), "then": _is("kind", "roce", "infiniband")},
    ]),
    "management-not-rdma": ("Fabric", "yes", [
        {"if": _is("purpose", "management"), "then": {"not": _is("kind", "roce", "infiniband")}}]),
    "roce-mtu-possible": ("Fabric", "yes", [
        {"if": _is("kind", "roce"), "then": {"properties": {"mtu": {"minimum": derived.ROCE_MIN_LINK_MTU}}}}]),
    "minimum-needs-integers": ("SysctlSetting", "yes", [
        {"if": _is("mode", "minimum"),
         "then": {"properties": {"value": {"pattern": "^ *(-?[0-9](_?[0-9])*( +-?[0-9](_?[0-9])*)*)? *$"}}}}]),
}


def check_coverage(name: str) -> str:
    """How much of cross-check ``name`` the JSON Schema enforces: yes, partly: ..., or no."""
    found = CHECK_SCHEMAS.get(name)
    if not found:
        return "no"
    if found[1].startswith("partly: "):
        return "partly; only the validator checks that " + found[1][len("partly: "):]
    return found[1]


def _core_int_bounds(core: Any) -> tuple[int, int] | None:
    if isinstance(core, dict) and core.get("type") == "int":
        return int(core.get("ge", 0)), int(core.get("le", -1))
    return None


class _SpecJsonSchema(GenerateJsonSchema):
    """pydantic's generator, plus the before-validators and strict keys of keyed maps."""

    def function_before_schema(self, schema: Any) -> Fragment:
        rule = BEFORE.get(schema["function"]["function"])
        if rule is None:  # unknown: the default (tests fail on it)
            return dict(super().function_before_schema(schema))
        if rule in (_sysctl_map_schema, _same):
            inner = self.generate_inner(schema["schema"])
        else:
            inner = dict(super().function_before_schema(schema))
        return rule(dict(inner))

    def dict_schema(self, schema: Any) -> Fragment:
        out: Fragment = {"type": "object"}
        values = dict(self.generate_inner(schema["values_schema"])) if "values_schema" in schema else {}
        values.pop("title", None)
        out["additionalProperties"] = values or True
        keys = schema.get("keys_schema")
        if keys is not None:
            bounds = _core_int_bounds(keys)
            if bounds is not None:
                if bounds not in INT_KEYS:
                    raise LookupError(f"no key pattern for integer keys {bounds}: add it to schema.INT_KEYS")
                out["propertyNames"] = {"pattern": INT_KEYS[bounds]}
            else:
                names = dict(self.generate_inner(keys))
                for unused in ("title", "type"):
                    names.pop(unused, None)
                if names:
                    out["propertyNames"] = names
        self.update_with_validations(out, schema, self.ValidationsMapping.object)
        return out


_NOT_KEYWORDS = ("ge", "le", "gt", "lt")  # pydantic writes these when it cannot place a bound


def _clean(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _clean(v) for k, v in node.items() if k not in _NOT_KEYWORDS or not isinstance(v, (int, float))}
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def json_schema() -> dict[str, Any]:
    inner = DatapathSpec.model_json_schema(ref_template="#/$defs/{model}", mode="validation",
                                           schema_generator=_SpecJsonSchema)
    defs = inner.pop("$defs", {})
    defs["DatapathSpec"] = inner
    for _name, (model, _coverage, fragments) in CHECK_SCHEMAS.items():
        defs[model].setdefault("allOf", []).extend(json.loads(json.dumps(fragments)))
    return _clean({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "aiinfra.datapath cluster spec",
        "description": "A variables file with the `datapath` key (e.g. group_vars/all/datapath.yml); other "
                       "variables of the file are not checked. Cross-checks between objects (fabric references, "
                       "unique names, overlapping subnets, RoCE priorities, sums and memory) are checked by "
                       "`datapath validate` only (docs/spec.md).",
        "type": "object",
        "properties": {"datapath": {"$ref": "#/$defs/DatapathSpec"}},
        "required": ["datapath"],
        "$defs": dict(sorted(defs.items())),
    })


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
