"""The YAML event builder (DATAPATH_YAML_BUILDER=events, the default) against PyYAML's path (pyyaml):
the same data and the same errors, its guards (aliases, depth, size, nodes), and the fast reader's
shortcuts (host_vars listing, the inventory ignore pattern)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import cli, loader

# Built by the event builder itself (no fallback).
PLAIN = [
    "",
    "# only a comment\n",
    "---\n",
    "--- foo\n",
    "a: 1\n",
    "plain string",
    "[1, 2, [3, {a: b}]]",
    "a: yes\nb: no\nc: on\nd: off\ne: true\nf: False\ng: Y\nh: n\ni: NULL\nj: ~\nk:\nl: null\n",
    "octal: 0755\nhex: 0x1F\nbin: 0b101\nneg: -42\nplus: +7\nunder: 1_000\nsexa: 1:30\n"
    "big: 123456789012345678901234567890\n",
    "f1: 1.5\nf2: -1e3\nf3: .inf\nf4: -.Inf\nf5: .nan\nf6: 1_0.5\nf7: 190:20:30.15\nf8: 6.8523015e+5\nf9: .5\n",
    "q1: 'yes'\nq2: \"0755\"\nq3: '~'\nq4: \"\"\nq5: ''\n",
    "lit: |\n  line 1\n  line 2\nfold: >-\n  a\n  b\n",
    "dup: 1\nother: 2\ndup: 3\n",
    "1: int key\ntrue: bool key\n~: null key\n1.5: float key\n",
    "- a\n- - b\n  - c\n- {x: [1, {y: [2, 3]}]}\n",
    "%YAML 1.1\n---\nkey: value\n...\n",
    "unicode: \"caf\\u00e9 \\U0001F600\"\nplain: naïve\n",
    "empty_map: {}\nempty_list: []\nnested: {a: {b: {c: {}}}}\n",
    "all:\n  children:\n    gpu:\n      hosts:\n"
    "        gpu-0001: {datapath_memory_bytes: 1099511627776, datapath_numa_nodes: 2}\n",
    "sep: 1:2:3\nver: 1.2.3\nip: 10.0.0.1\ndate_like: 2024-13-45x\n",
    "n1: .NaN\nn2: -.inf\nn3: +.INF\nn4: 0.\nn5: -0\nn6: 0o17\nn7: +0x_1\n",
    "deep: " + "[" * 20 + "]" * 20 + "\n",
]
# Handed to PyYAML's path (the builder declines), which must still give its own data or error.
OTHER = [
    "a: &x 1\nb: *x\n",
    "base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2\n",
    "when: 2001-12-14t21:59:43.10-05:00\nday: 2002-12-14\n",
    "s: !!str 123\ni: !!int '7'\n",
    "b: !!binary aGVsbG8=\n",
    "set: !!set {a, b}\n",
    "omap: !!omap [a: 1, b: 2]\n",
    "pairs: !!pairs [a: 1, a: 2]\n",
    "x: !custom 1\n",
    "x: ! 1\n",
    "x: !!python/object:os.system 'true'\n",
    "? [a, b]\n: unhashable key\n",
    "? {a: 1}\n: unhashable key\n",
    "value: =\n",
    "one: 1\n---\ntwo: 2\n",
    "key: [unclosed\n",
    "key: value\n bad indent: x\n",
    "a: b: c\n",
    "\"unterminated: 1\n",
    "tab:\t\n\tx: 1\n",
    "big: " + "9" * 5000 + "\n",
    "undefined: *nowhere\n",
    "a: &a [*a]\n",
    "dup_anchor: [&a 1, &a 2, *a]\n",
    "deep: " + "[" * 40 + "]" * 40 + "\n",
    "deep: " + "[" * 70 + "]" * 70 + "\n",
    "".join("  " * i + f"k{i}:\n" for i in range(70)),
    "[" * 10000 + "]" * 10000,
]


def _load(text: str, builder: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    monkeypatch.setenv("DATAPATH_YAML_BUILDER", builder)
    try:
        return "ok", loader.load_yaml_text(text, "doc.yml")
    except loader.LoadError as exc:
        return "error", str(exc)


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    # repr: keeps dict order, tells 1 from True and 1.0, and .nan equals itself
    return a[0] == b[0] and repr(a[1]) == repr(b[1]) and type(a[1]) is type(b[1])


@pytest.mark.parametrize("text", PLAIN + OTHER, ids=lambda t: repr(t[:40]))
def test_builders_give_the_same_data_and_errors(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _load(text, "events", monkeypatch)
    slow = _load(text, "pyyaml", monkeypatch)
    assert _same(fast, slow), (fast, slow)


@pytest.mark.parametrize("text", PLAIN, ids=lambda t: repr(t[:40]))
def test_plain_documents_are_built_from_events(text: str) -> None:
    loader._build(text)  # does not decline


@pytest.mark.parametrize("text", OTHER, ids=lambda t: repr(t[:40]))
def test_other_documents_go_to_pyyaml(text: str) -> None:
    with pytest.raises(loader._Decline):
        loader._build(text)


def test_types_and_values() -> None:
    data = loader._build(PLAIN[7] + PLAIN[8].replace("octal", "o2"))
    assert data["a"] is True and data["d"] is False and data["i"] is None and data["k"] is None
    assert data["o2"] == 0o755 and data["hex"] == 31 and data["sexa"] == 90 and data["under"] == 1000


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))


@pytest.mark.parametrize("builder", ["events", "pyyaml"])
def test_guards_with_either_builder(builder: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DATAPATH_YAML_BUILDER", builder)
    with pytest.raises(loader.LoadError, match="alias bomb"):
        loader.load_yaml_text(BILLION_LAUGHS)
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * (loader.MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(loader.LoadError, match="more than 1000 aliases"):
        loader.load_yaml_text(many)
    with pytest.raises(loader.LoadError, match="recursive alias"):
        loader.load_yaml_text("a: &a [*a]\n")
    with pytest.raises(loader.LoadError, match="nested deeper than 64 levels"):
        loader.load_yaml_text("[" * 10000 + "]" * 10000)
    with pytest.raises(loader.LoadError, match="nested deeper than 64 levels"):
        loader.load_yaml_text("".join("  " * i + f"k{i}:\n" for i in range(70)) + "  " * 70 + "x\n")
    # at most MAX_DEPTH // 2 levels are built from events; deeper (but allowed) documents still load
    assert loader.load_yaml_text("x: " + "[" * 60 + "]" * 60) == {"x": eval("[" * 60 + "]" * 60)}  # noqa: S307
    monkeypatch.setattr(loader, "MAX_NODES", 50)
    with pytest.raises(loader.LoadError, match="more than 50 nodes"):
        loader.load_yaml_text("[" + ", ".join(["1"] * 60) + "]")
    assert loader.load_yaml_text("[" + ", ".join(["1"] * 40) + "]") == [1] * 40
    monkeypatch.setattr(loader, "MAX_BYTES", 100)
    with pytest.raises(loader.LoadError, match="larger than 100 bytes"):
        loader.load_yaml_text("a: " + "x" * 200)
    path = tmp_path / "big.yml"
    path.write_text("a: " + "x" * 200)
    assert cli.main(["validate", str(path)]) == 2


def test_unknown_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAPATH_YAML_BUILDER", "ruamel")
    with pytest.raises(loader.LoadError, match="DATAPATH_YAML_BUILDER"):
        loader.load_yaml_text("a: 1")


def test_libyaml_is_used() -> None:
    import yaml
    assert yaml.__with_libyaml__, "PyYAML without libyaml: pip install -r requirements.txt (a binary wheel)"
    assert loader._SafeLoader is yaml.CSafeLoader


def test_ignore_pattern_is_ansible_cores() -> None:
    from ansible.inventory.manager import IGNORED
    assert loader._ignored().pattern == IGNORED.pattern
    assert loader._ignored().flags == IGNORED.flags


def _inventory(tmp_path: Path) -> str:
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "group_vars" / "all" / "datapath.yml").write_text(
        "datapath:\n  version: 1\n  fabrics:\n    - {name: mgmt, purpose: management}\n")
    (tmp_path / "group_vars" / "rack_a.yml").write_text("rack: a\nshared: group\n")
    hosts = "".join(f"        gpu-{n:02d}: {{n: {n}}}\n" for n in range(12))
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars: {shared: all}\n  children:\n    rack_a:\n      hosts:\n" + hosts
        + "    rack_b:\n      vars: {rack: b}\n      hosts:\n        gpu-03:\n        gpu-20: {n: 20}\n"
        + "        Caf\u00e9-1:\n")
    host_vars = tmp_path / "host_vars"
    host_vars.mkdir()
    (host_vars / "gpu-01.yml").write_text("shared: host\n")
    (host_vars / "gpu-02.yaml").write_text("from_yaml: true\n")
    (host_vars / "gpu-04").mkdir()
    (host_vars / "gpu-04" / "a.yml").write_text("from_dir: 1\n")
    (host_vars / "GPU-05.yml").write_text("other_case: true\n")  # not gpu-05's on a case-sensitive disk
    (host_vars / "Caf\u00e9-1.yml").write_text("accent: true\n")
    return str(tmp_path)


def test_fast_reader_matches_ansible_core(tmp_path: Path) -> None:
    target = _inventory(tmp_path)
    fast = loader.load_inventory(target, "yaml")
    core = loader.load_inventory(target, "ansible")
    assert fast.reader == "yaml" and core.reader == "ansible"
    assert fast.hosts == core.hosts
    assert fast.hosts["gpu-01"][1]["shared"] == "host" and fast.hosts["gpu-02"][1]["from_yaml"] is True
    assert fast.hosts["gpu-04"][1]["from_dir"] == 1 and fast.hosts["Caf\u00e9-1"][1]["accent"] is True
    assert fast.hosts["gpu-03"][0] == ["rack_a", "rack_b"]
    assert fast.hosts["gpu-03"][1]["rack"] == "a"  # group_vars/rack_a.yml comes after rack_b's inline vars
    assert fast.spec == core.spec


def test_fast_reader_same_with_either_builder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = _inventory(tmp_path)
    fast = loader.load_inventory(target, "yaml")
    monkeypatch.setenv("DATAPATH_YAML_BUILDER", "pyyaml")
    slow = loader.load_inventory(target, "yaml")
    assert fast.hosts == slow.hosts and fast.spec == slow.spec
    assert list(fast.hosts["gpu-01"][1]) == list(slow.hosts["gpu-01"][1])


def test_may_exist() -> None:
    names = frozenset(loader._fold(n) for n in ["gpu-01.yml", "Caf\u00e9-1.yml", "node"])
    assert loader._may_exist("gpu-01", names) and loader._may_exist("GPU-01", names)
    assert loader._may_exist("cafe\u0301-1", names)  # another normalization of the same name
    assert loader._may_exist("NODE", names) and loader._may_exist("a/b", names)
    assert not loader._may_exist("gpu-02", names) and not loader._may_exist("node.ini", names)


def test_cli_turns_the_collector_back_on(tmp_path: Path) -> None:
    import gc
    assert gc.isenabled()
    assert cli.main(["validate", _inventory(tmp_path)]) in (0, 1)
    assert gc.isenabled()
    assert os.environ.get("DATAPATH_YAML_BUILDER") in (None, "", "events")


def test_inventory_settings_are_ansible_cores() -> None:
    """The recorded names, environment variables, ansible.cfg keys and defaults are ansible-core's
    (a new ansible-core: check its settings, then update SETTINGS_RELEASE and SETTINGS_DEFAULTS)."""
    from ansible import constants as C
    from ansible.release import __version__
    assert __version__ == loader.SETTINGS_RELEASE
    for name, env, keys in loader.INVENTORY_SETTINGS:
        definition = C.config.get_configuration_definition(name)
        assert [e["name"] for e in definition["env"]] == [env]
        assert sorted(i["key"] for i in definition["ini"]) == sorted(keys)
        assert definition.get("type", "string") in ("string", "list")
    # this checkout's ansible.cfg sets none of them, so ansible-core has its defaults here
    assert {name: getattr(C, name) for name, _env, _keys in loader.INVENTORY_SETTINGS} == {
        name: list(value) if isinstance(value, tuple) else value for name, value in loader.SETTINGS_DEFAULTS.items()}


def test_inventory_settings_defaults_only_when_nothing_sets_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for _name, env, _keys in loader.INVENTORY_SETTINGS:
        monkeypatch.delenv(env, raising=False)
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\nforks = 5\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(config))
    assert loader._defaults_apply()
    assert loader.inventory_settings() is loader.SETTINGS_DEFAULTS
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path))  # a directory: its ansible.cfg
    assert loader._defaults_apply()
    for text in ("[defaults]\nHASH_BEHAVIOUR = merge\n", "[inventory]\nenable_plugins = ini\n",
                 "[inventory]\nignore_patterns = x\n", "[defaults]\ninventory_ignore_extensions = .x\n"):
        config.write_text(text)
        assert not loader._defaults_apply(), text
    config.write_text("[defaults]\nforks = 5\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ansible.cfg").write_text("[inventory]\nenable_plugins = ini\n")
    monkeypatch.chdir(tmp_path / "sub")  # ./ansible.cfg is a candidate too (ANSIBLE_CONFIG's may be missing)
    assert not loader._defaults_apply()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANSIBLE_INVENTORY_IGNORE_REGEX", "")
    assert not loader._defaults_apply()
    monkeypatch.delenv("ANSIBLE_INVENTORY_IGNORE_REGEX")
    monkeypatch.setattr(loader, "SETTINGS_RELEASE", "0.0.0")
    assert not loader._defaults_apply()
    # otherwise ansible.constants' values (here: what it read when first imported)
    from ansible import constants as C
    assert loader.inventory_settings() == {name: getattr(C, name) for name, _env, _keys in loader.INVENTORY_SETTINGS}


def test_ignore_pattern_from_the_recorded_defaults() -> None:
    from ansible.inventory.manager import IGNORED
    assert loader._ignored(loader.SETTINGS_DEFAULTS).pattern == IGNORED.pattern


def test_a_declined_document_keeps_no_frame_alive() -> None:
    """The builder's exception is new each time: a shared one kept its last traceback, and through
    the frames' f_back the caller's locals (a whole inventory) until the program ended."""
    import weakref

    class Marker:
        pass

    def caller() -> weakref.ref[Marker]:
        marker = Marker()
        assert loader.load_yaml_text("a: &x 1\nb: *x\n") == {"a": 1, "b": 1}  # declined: PyYAML's path
        return weakref.ref(marker)

    assert caller()() is None


def test_finish_picks_the_spec_most_hosts_share() -> None:
    main, other = {"version": 1}, {"version": 1, "x": 1}
    per_host = {"c": (["g"], {"datapath": other, "v": 1}), "a": (["g"], {"datapath": main}),
                "b": (["g"], {"datapath": main}), "d": (["g"], {}), "e": (["g"], {"datapath": {"version": 1}})}
    inv = loader._finish(per_host, "src", "yaml", [])
    assert inv.spec is main and list(inv.hosts) == ["a", "b", "c", "d", "e"]
    assert inv.hosts["c"] == (["g"], {"v": 1}) and all("datapath" not in v for _g, v in inv.hosts.values())
    assert inv.host_specs == {"c": other, "d": None}  # e's spec equals the main one
    with pytest.raises(loader.LoadError, match="no host has a `datapath` variable"):
        loader._finish({"a": ([], {})}, "src", "yaml", [])
