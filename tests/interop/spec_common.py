"""Shared by the tests/interop/test_spec_*.py modules: the real readers (check-jsonschema,
xmlschema, ansible-core's inventory parser) and spec documents to feed them.

Nothing here starts a service or touches the network: every reader is a library or a CLI
reading files in a temporary directory.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from ruamel.yaml import YAML

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCHEMA_FILE = os.path.join(REPO, "docs", "schema", "datapath.schema.json")
JUNIT_XSD = os.path.join(REPO, "tests", "interop", "schemas", "junit.xsd")
EXAMPLE = os.path.join(REPO, "inventories", "example")
BIN = os.path.dirname(sys.executable)


def tool(name: str) -> str:
    """The path of a reader's CLI (the venv's first); skips the test only when it is truly absent."""
    found = os.path.join(BIN, name)
    if os.access(found, os.X_OK):
        return found
    other = shutil.which(name)
    if other is None:
        pytest.skip(f"{name} is not installed (scripts/bootstrap.sh installs it)")
    return other


def run(argv: Sequence[str], cwd: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False)


# --------------------------------------------------------------------------- YAML
def yaml_text(data: Any) -> str:
    out = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.dump(data, out)
    return out.getvalue()


# --------------------------------------------------------------------------- check-jsonschema
@functools.cache
def cj_validator(pointer: str = "") -> Any:
    """check-jsonschema's own validator (ECMA-262 regexes through regress, as its CLI builds it) for
    docs/schema/datapath.schema.json, or for the sub-schema at the JSON pointer ``pointer``."""
    cj = pytest.importorskip("check_jsonschema")
    del cj
    from check_jsonschema.formats import FormatOptions
    from check_jsonschema.regex_variants import RegexImplementation, RegexVariantName
    from check_jsonschema.schema_loader import SchemaLoader

    path = SCHEMA_FILE
    if pointer:
        with open(SCHEMA_FILE, encoding="utf-8") as handle:
            schema = json.load(handle)
        sub = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#" + pointer}
        path = os.path.join(_tmpdir(), pointer.strip("/").replace("/", "_") + ".json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(sub, handle)
    impl = RegexImplementation(RegexVariantName.default)
    return SchemaLoader(path).get_validator(path, {}, FormatOptions(regex_impl=impl), impl, False)


@functools.lru_cache(maxsize=1)
def _tmpdir() -> str:
    import tempfile
    return tempfile.mkdtemp(prefix="dpi-spec-schema-")


@functools.lru_cache(maxsize=1)
def cj_parser() -> Any:
    from check_jsonschema.parsers import ParserSet
    return ParserSet()


def cj_load_yaml(text: str) -> Any:
    """A YAML document as check-jsonschema's CLI reads it (ruamel, keys turned into strings)."""
    return cj_parser().parse_data_with_path(text.encode("utf-8"), "doc.yaml", "yaml")


def cj_errors(instance: Any, pointer: str = "") -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in cj_validator(pointer).iter_errors(instance)]


def cj_cli(files: Sequence[str]) -> dict[str, list[str]]:
    """Run the check-jsonschema CLI once over ``files``; ``{file: [error, ...]}`` for every file."""
    proc = run([tool("check-jsonschema"), "-o", "json", "--schemafile", SCHEMA_FILE, *files])
    report = json.loads(proc.stdout)
    out: dict[str, list[str]] = {f: [] for f in files}
    for err in report.get("errors", []):
        out.setdefault(err["filename"], []).append(f"{err['path']}: {err['message']}")
    for err in report.get("parse_errors", []):
        out.setdefault(err["filename"], []).append(f"parse error: {err.get('message')}")
    assert proc.returncode == (1 if any(out.values()) else 0), proc.stdout + proc.stderr
    return out


# --------------------------------------------------------------------------- documents
SHA = "0123456789abcdef" * 4


def full_spec() -> dict[str, Any]:
    """A valid spec that holds every model of the spec at least once (fresh copy)."""
    return copy.deepcopy({
        "version": 1,
        "builtin_profile": "ai-gpu-node",
        "fabrics": [
            {"name": "mgmt", "purpose": "management", "kind": "ethernet", "mtu": 1500, "subnets": ["192.0.2.0/24"],
             "description": "management"},
            {"name": "rail0", "purpose": "rdma", "kind": "roce", "mtu": 9000, "subnets": ["10.100.0.0/20"],
             "roce": {"mode": "v2", "trust": "dscp", "dscp": 26, "priority": 3, "pfc_priorities": [3], "ecn": True,
                      "cnp": {"dscp": 48, "priority": 6}, "tos": 106, "dscp2prio": {10: 1},
                      "ets": {"prio_tc": [0, 1, 2, 3, 4, 5, 6, 7], "tsa": ["ets"] * 6 + ["strict", "ets"],
                              "bw": [10, 10, 10, 50, 10, 0, 0, 10]}}},
        ],
        "profiles": [{
            "name": "gpu", "groups": ["gpu"], "hosts": ["extra-1"],
            "node": {"memory": "2TiB", "numa_nodes": 2},
            "sysctl": {"vm.zone_reclaim_mode": 0, "net.core.rmem_max": {"value": 67108864, "mode": "minimum"},
                       "net.core.somaxconn": {"value": "4096", "mode": "exact", "ignore_missing": False,
                                              "source": "test"}},
            "hugepages": {"default_size": "2M", "max_memory_share": 0.5,
                          "pages": [{"size": "2M", "count": 1024}, {"size": "1G", "per_node": {0: 4, 1: 4},
                                                                    "persist": "cmdline"}],
                          "mounts": [{"size": "1G", "path": "/dev/hugepages-1G", "owner": "root", "group": "root",
                                      "mode": "0770"}]},
            "thp": {"enabled": "madvise", "defrag": "defer+madvise"},
            "kernel_args": ["iommu=pt"],
            "interfaces": [{"name": "eno1", "fabric": "mgmt"},
                           {"match": {"pci": "0000:1a:00.0"}, "fabric": "rail0", "mtu": 9000}],
            "firmware": [{"driver": "mlx5_core", "psid": "MT_0000000838", "min_version": "28.39.3560"}],
            "storage": {"devices": ["/dev/disk/by-id/nvme-A", "/dev/disk/by-id/nvme-B"],
                        "raid": {"level": 0, "chunk_kib": 512, "name": "md-cache"},
                        "filesystem": {"type": "xfs", "label": "model-cache"},
                        "mount": {"path": "/mnt/model-cache", "options": ["noatime"]},
                        "directories": [{"path": "models", "owner": "root", "group": "root", "mode": "0755"}],
                        "reserve": "10GiB", "wipe_serials": ["S1"]},
            "k8s": {"labels": {"aiinfra.io/nvme-cache": "true"}, "local_volume_class": "local-nvme"},
        }],
        "hosts": {"gpu-node-01": {
            "storage": {"select": {"model": "SAMSUNG*", "min_size": "3.84TB", "transport": "pcie", "count": 1},
                        "mount": {"path": "/srv/cache"}},
            "k8s": {"labels": {"aiinfra.io/canary": "true"}}}},
        "model_cache": {"directory": "models", "reserve": "200GiB", "bandwidth_limit": "1GiB", "concurrency": 8},
        "models": [{"name": "llama", "version": "v1", "source": "https://models.example.com/llama/v1",
                    "files": [{"path": "weights/model.safetensors", "sha256": SHA, "size": 10}],
                    "groups": ["gpu"], "hosts": ["gpu-node-01"]}],
    })


def walk_dicts(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every mapping in ``data`` (the root included)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(data, dict):
        out.append(path)
        for key, value in data.items():
            out.extend(walk_dicts(value, (*path, key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out.extend(walk_dicts(value, (*path, index)))
    return out


def at(data: Any, path: Sequence[Any]) -> Any:
    for part in path:
        data = data[part]
    return data
