"""Types, ranges, unknown keys and hostile input: always a list of errors, never a traceback."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import SpecError, validate_spec

from ._specs import base, example


def paths(errors: list[SpecError]) -> list[str]:
    return [e.path for e in errors]


def one(data: Any) -> SpecError:
    errors = validate_spec(data)
    assert len(errors) == 1, [e.render() for e in errors]
    return errors[0]


def test_base_and_example_are_valid() -> None:
    assert validate_spec(base()) == []
    assert validate_spec(example()) == []


@pytest.mark.parametrize("value", [None, 5, "text", [1, 2], 3.5, True, b"bytes"])
def test_non_mapping_spec(value: Any) -> None:
    err = one(value)
    assert err.path == "datapath"
    assert "must be a mapping" in err.message


def test_unknown_key_with_suggestion() -> None:
    spec = base()
    spec["fabrics"][1]["mtuu"] = 9000
    err = one(spec)
    assert err.path == "datapath.fabrics[1].mtuu"
    assert err.message == "unknown key 'mtuu'"
    assert "did you mean 'mtu'" in err.hint


def test_unknown_top_level_key() -> None:
    spec = base()
    spec["fabric"] = []
    err = one(spec)
    assert err.path == "datapath.fabric"
    assert "did you mean 'fabrics'" in err.hint


def test_every_error_at_once() -> None:
    spec = base()
    spec["fabrics"][0]["mtu"] = 67
    spec["fabrics"][1]["mtu"] = 9217
    spec["fabrics"][1]["roce"]["dscp"] = 64
    spec["fabrics"][1]["roce"]["priority"] = 8
    spec["profiles"][0]["hugepages"]["pages"][0]["size"] = "4M"
    errors = validate_spec(spec)
    assert paths(errors) == sorted([
        "datapath.fabrics[0].mtu", "datapath.fabrics[1].mtu", "datapath.fabrics[1].roce.dscp",
        "datapath.fabrics[1].roce.priority", "datapath.profiles[0].hugepages.pages[0].size",
    ])
    assert "must be >= 68" in errors[0].hint and "must be <= 9216" in errors[1].hint


@pytest.mark.parametrize("value", ["9000", 9000.0, True, None, [9000], {"a": 1}])
def test_wrong_types_are_not_coerced(value: Any) -> None:
    spec = base()
    spec["fabrics"][1]["mtu"] = value
    err = one(spec)
    assert err.path == "datapath.fabrics[1].mtu"
    assert "integer" in err.message


@pytest.mark.parametrize("value", [2**64, -(2**70), 10**400])
def test_huge_numbers(value: int) -> None:
    spec = base()
    spec["fabrics"][1]["mtu"] = value
    assert one(spec).path == "datapath.fabrics[1].mtu"
    spec = base()
    spec["profiles"][0]["hugepages"]["pages"][0]["count"] = value
    assert validate_spec(spec)


def test_float_nan_and_inf_rejected() -> None:
    spec = base()
    spec["profiles"][0]["hugepages"]["max_memory_share"] = float("nan")
    assert one(spec).path == "datapath.profiles[0].hugepages.max_memory_share"


@pytest.mark.parametrize("name", ["a" * 16, "eth 0", "eth/0", "eth;rm", "..", "e..1", "eth$x", "", "ethé0", "a`b"])
def test_bad_interface_names(name: str) -> None:
    spec = base()
    spec["profiles"][0]["interfaces"][0]["name"] = name
    err = one(spec)
    assert err.path == "datapath.profiles[0].interfaces[0].name"


@pytest.mark.parametrize("name", ["eno1", "ens1f0np0", "a" * 15, "bond0.100", "ib0"])
def test_good_interface_names(name: str) -> None:
    spec = base()
    spec["profiles"][0]["interfaces"][0]["name"] = name
    assert validate_spec(spec) == []


@pytest.mark.parametrize("path", ["/", "/etc", "/etc/x", "/usr/local/x", "/var", "/proc/x", "/sys", "/dev/sda",
                                  "/run/x", "/boot", "/lib64/x", "/bin", "relative", "/mnt/../etc", "/mnt//x",
                                  "/mnt/x/", "/mnt/a b", "/tmp"])
def test_system_or_bad_mount_paths(path: str) -> None:
    spec = base()
    spec["profiles"][0]["storage"]["mount"]["path"] = path
    err = one(spec)
    assert err.path == "datapath.profiles[0].storage.mount.path"


@pytest.mark.parametrize("path", ["/mnt/model-cache", "/srv/cache", "/var/lib/models", "/data/nvme"])
def test_good_mount_paths(path: str) -> None:
    spec = base()
    spec["profiles"][0]["storage"]["mount"]["path"] = path
    assert validate_spec(spec) == []


def test_hugetlbfs_may_use_dev_hugepages() -> None:
    spec = base()
    spec["profiles"][0]["hugepages"]["mounts"][0]["path"] = "/dev/hugepages"
    assert validate_spec(spec) == []
    spec["profiles"][0]["hugepages"]["mounts"][0]["path"] = "/dev/shm"
    assert one(spec).path == "datapath.profiles[0].hugepages.mounts[0].path"


def test_unicode_everywhere() -> None:
    spec = base()
    spec["fabrics"][0]["name"] = "管理"
    spec["profiles"][0]["k8s"]["labels"]["ключ"] = "\u202e"
    spec["profiles"][0]["sysctl"]["net.ipv4.\x00"] = "1"
    errors = validate_spec(spec)
    assert {"datapath.fabrics[0].name"} <= set(paths(errors))
    assert all(isinstance(e.render(), str) for e in errors)


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    deep: Any = 1
    for _level in range(5000):
        deep = {"a": deep}
    err = one({"version": 1, "hosts": deep})
    assert err.path == "datapath"
    assert "nested" in err.message


def test_mode_must_be_quoted() -> None:
    spec = base()
    spec["profiles"][0]["storage"]["directories"][0]["mode"] = 755
    err = one(spec)
    assert err.path == "datapath.profiles[0].storage.directories[0].mode"
    assert err.hint == "quote it"


def test_sizes_parse() -> None:
    spec = base()
    for good in ("10GiB", "3.84TB", "512M", 0, "1K"):
        spec["profiles"][0]["storage"]["reserve"] = good
        assert validate_spec(spec) == [], good
    for bad in ("10 parsecs", "-1G", True, 2**61, "99999999999999E"):
        spec["profiles"][0]["storage"]["reserve"] = bad
        assert paths(validate_spec(spec)) == ["datapath.profiles[0].storage.reserve"], bad


def test_dscp2prio_string_keys_accepted() -> None:
    spec = base()
    spec["fabrics"][1]["roce"]["dscp2prio"] = {"10": 1}
    assert validate_spec(spec) == []


def test_sysctl_shorthand_and_removal() -> None:
    spec = base()
    spec["profiles"][0]["sysctl"] = {"net.core.somaxconn": 4096, "vm.max_map_count": None,
                                     "kernel.x": {"value": "1", "mode": "minimum"}}
    assert validate_spec(spec) == []
    spec["profiles"][0]["sysctl"]["bad key"] = 1
    assert paths(validate_spec(spec)) == ['datapath.profiles[0].sysctl["bad key"]']


def test_render_format() -> None:
    err = SpecError("datapath.x", "broken", "fix it", "h1")
    assert err.render() == "datapath.x: broken; fix it (host h1)"
    assert str(SpecError("datapath.x", "broken")) == "datapath.x: broken"


class _Hostile:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        return 1

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def __str__(self) -> str:
        raise RuntimeError("str")


@pytest.mark.parametrize("data", [
    {"version": 1, "fabrics": [{"name": "a", "purpose": "management", "mtu": _Hostile()}]},
    {_Hostile(): 1}, _Hostile(), {None: 1}, {(1, 2): 3}, {"version": 1, "fabrics": {1, 2}},
])
def test_hostile_python_objects(data: Any) -> None:
    errors = validate_spec(data)
    assert errors and all(e.render() for e in errors)
