"""Issue 38, point 2: `datapath validate` warns about what validates but is almost certainly a mistake.

Each registered warning check has a case here (a spec and an inventory of the kind a platform team
writes: INI, groups train/infer under gpu, no gpu_nodes group); --strict makes warnings fail; the
warnings reach text, JSON and JUnit with the file and line they came from; duplicate keys are found
whichever reader reads the inventory; the sysctl key list names its source and knows the keys this
collection and its example use.
"""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import _sysctl_keys, builtin, cli
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.loader import load_inventory
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.spec_warnings import (
    WARNING_CHECKS,
    WarningContext,
    accepts_bool,
    run_warnings,
)

from ._specs import EXAMPLE

HOSTS_INI = "[train]\ntrain-01\ntrain-02\n[infer]\ninfer-01\n[gpu:children]\ntrain\ninfer\n"
SPEC = """\
datapath:
  version: 1
  fabrics:
    - {name: mgmt, purpose: management, subnets: [192.0.2.0/24]}
    - {name: rail0, purpose: rdma, kind: roce, mtu: 9000, subnets: [10.100.0.0/20]}
  profiles:
    - name: gpu
      sysctl:
        vm.swappiness: 10
"""


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(list(argv), out), out.getvalue()


def inventory(tmp_path: Path, spec: str = SPEC, hosts: str = HOSTS_INI, host_vars: dict[str, str] | None = None,
              ) -> Path:
    (tmp_path / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (tmp_path / "hosts.ini").write_text(hosts)
    (tmp_path / "group_vars" / "all" / "datapath.yml").write_text(spec)
    for host, text in (host_vars or {}).items():
        (tmp_path / "host_vars").mkdir(exist_ok=True)
        (tmp_path / "host_vars" / f"{host}.yml").write_text(text)
    return tmp_path


def warnings_of(target: Path | str, *extra: str) -> list[dict[str, Any]]:
    code, out = run("validate", str(target), "--format", "json", *extra)
    data = json.loads(out)
    assert code in (0, 1), out
    return list(data["warnings"])


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# --------------------------------------------------------------------------- one case per check
def _profile_group(tmp: Path) -> tuple[Path, str, str]:
    spec = SPEC.replace("    - name: gpu\n", "    - name: gpu_nodes\n")
    return inventory(tmp, spec), "datapath.profiles[0].name", "profile 'gpu_nodes' applies to the inventory group"


def _profile_groups_list(tmp: Path) -> tuple[Path, str, str]:
    spec = SPEC.replace("    - name: gpu\n", "    - name: gpu\n      groups: [train, inferr]\n")
    return inventory(tmp, spec), "datapath.profiles[0].groups[1]", "group 'inferr' has no host in the inventory"


def _host_override(tmp: Path) -> tuple[Path, str, str]:
    spec = SPEC + "  hosts:\n    train-1:\n      sysctl: {vm.swappiness: 5}\n"
    return inventory(tmp, spec), "datapath.hosts.train-1", "host 'train-1' is not in the inventory"


def _model_group(tmp: Path) -> tuple[Path, str, str]:
    spec = SPEC + ("  models:\n    - {name: llama, version: v1, source: /srv/models/llama, groups: [inference],\n"
                   "       files: [{path: a.bin, sha256: " + "a" * 64 + "}]}\n")
    return inventory(tmp, spec), "datapath.models[0].groups[0]", "is for group 'inference', which has no host"


def _address_unknown_fabric(tmp: Path) -> tuple[Path, str, str]:
    return (inventory(tmp, host_vars={"train-01": "datapath_addresses: {rail1: 10.100.0.11}\n"}),
            'datapath_addresses["rail1"]', "fabric 'rail1' is not defined")


def _address_outside(tmp: Path) -> tuple[Path, str, str]:
    return (inventory(tmp, host_vars={"train-01": "datapath_addresses: {rail0: 10.200.0.11}\n"}),
            'datapath_addresses["rail0"]', "10.200.0.11 is outside the subnets of fabric rail0")


def _duplicate(tmp: Path) -> tuple[Path, str, str]:
    spec = SPEC + "        vm.swappiness: 60\n"
    return inventory(tmp, spec), "datapath.profiles[0].sysctl", "key 'vm.swappiness' is given twice (first at line 9)"


def _sysctl_typo(tmp: Path) -> tuple[Path, str, str]:
    spec = SPEC.replace("vm.swappiness", "vm.swapiness")
    return inventory(tmp, spec), 'datapath.profiles[0].sysctl["vm.swapiness"]', "no kernel has the sysctl key"


def _bool_word(tmp: Path) -> tuple[Path, str, str]:
    spec = SPEC.replace("    - name: gpu\n", "    - name: gpu\n      k8s: {labels: {aiinfra.io/ready: yes}}\n")
    return inventory(tmp, spec), 'datapath.profiles[0].k8s.labels["aiinfra.io/ready"]', \
        "yes is read as the boolean true (YAML 1.1)"


def _switch_default_lossy(tmp: Path) -> tuple[Path, str, str]:
    spec = SPEC.replace("subnets: [10.100.0.0/20]}", "subnets: [10.100.0.0/20],\n       switch: {os: sonic}}")
    return inventory(tmp, spec), "datapath.fabrics[1].switch.os", \
        "DSCP 26 (the default roce.dscp) -> TC 1 (lossy) in sonic's default maps (DSCP_TO_TC_MAP|AZURE)"


CASES = [
    ("profile-matches-no-host", _profile_group), ("profile-matches-no-host", _profile_groups_list),
    ("host-override-unknown", _host_override), ("model-target-unknown", _model_group),
    ("address-outside-fabric", _address_unknown_fabric), ("address-outside-fabric", _address_outside),
    ("yaml-duplicate-key", _duplicate), ("sysctl-key-unknown", _sysctl_typo), ("yaml-boolean-word", _bool_word),
    ("switch-default-map-lossy", _switch_default_lossy),
]


@pytest.mark.parametrize(("check", "make"), CASES, ids=[f"{c}-{i}" for i, (c, _m) in enumerate(CASES)])
def test_each_warning(tmp_path: Path, check: str, make: Any) -> None:
    target, path, message = make(tmp_path)
    found = [w for w in warnings_of(target) if w["check"] == check]
    assert [(w["path"], message in w["message"]) for w in found] == [(path, True)], found
    # the same without the inventory's hosts is no warning about them (a spec file has no inventory)
    assert found[0]["fix"], "every warning says how to fix it"


def test_every_registered_warning_has_a_case() -> None:
    assert set(WARNING_CHECKS) <= {c for c, _m in CASES}, "add a case for each new warning check"


def test_the_clean_inventory_and_the_example_have_no_warnings(tmp_path: Path) -> None:
    assert warnings_of(inventory(tmp_path)) == []
    assert warnings_of(EXAMPLE) == []


def test_did_you_mean_and_file_and_line(tmp_path: Path) -> None:
    target, _path, _message = _sysctl_typo(tmp_path)
    (found,) = warnings_of(target)
    spec_file = str(target / "group_vars" / "all" / "datapath.yml")
    assert (found["fix"], found["file"], found["line"]) == ("did you mean vm.swappiness?", spec_file, 9)
    per_device = SPEC.replace("vm.swappiness: 10", "net.ipv4.conf.ens1f0np0.rp_filtr: 2\n        "
                              "net.ipv4.conf.ens1f0np0.rp_filter: 2\n        net.ipv6.conf.all.disable_ipv6: 1")
    (found,) = warnings_of(inventory(tmp_path, per_device))
    assert found["fix"] == "did you mean net.ipv4.conf.ens1f0np0.rp_filter?"
    meant = SPEC.replace("vm.swappiness: 10", "net.netfilter.nf_conntrack_mx: {value: 1, ignore_missing: true}")
    assert warnings_of(inventory(tmp_path, meant)) == []


def test_profile_group_warning_suggests_the_inventory_groups(tmp_path: Path) -> None:
    target, _path, _message = _profile_group(tmp_path)
    (found,) = warnings_of(target)
    assert found["fix"].startswith("did you mean 'gpu'? ") and "the inventory has gpu, infer, train" in found["fix"]
    assert found["line"] == line_of(SPEC, "- name: gpu")


# --------------------------------------------------------------------------- --strict and the formats
def test_strict_makes_warnings_fail_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, _path, _message = _sysctl_typo(tmp_path)
    code, out = run("validate", str(target))
    assert code == 0 and "1 warning(s)" in out.splitlines()[-1]
    assert out.splitlines()[0].startswith('warning: datapath.profiles[0].sysctl["vm.swapiness"]: no kernel has')
    capsys.readouterr()
    code, out = run("validate", str(target), "--strict")
    assert code == 1 and "(--strict: they fail the run)" in out
    assert capsys.readouterr().err == f"datapath: exit 1: 1 warning(s) with --strict in {target}\n"
    data = json.loads(run("validate", str(target), "--strict", "--format", "json")[1])
    assert (data["valid"], data["strict"], data["exit_code"], len(data["warnings"])) == (True, True, 1, 1)


def test_warnings_are_junit_system_out(tmp_path: Path) -> None:
    target, _path, _message = _address_outside(tmp_path)
    code, out = run("validate", str(target), "--format", "junit")
    suite = ET.fromstring(out)
    assert code == 0 and suite.get("failures") == "0"
    outputs = {c.get("name"): c.findtext("system-out") for c in suite.findall("testcase") if c.find("system-out")
               is not None}
    assert list(outputs) == ["host train-01"]
    assert "10.200.0.11 is outside the subnets of fabric rail0" in outputs["host train-01"]


# --------------------------------------------------------------------------- duplicate keys, both readers
@pytest.mark.parametrize("reader", ["auto", "ansible", "yaml"])
def test_duplicate_keys_from_both_readers(tmp_path: Path, reader: str) -> None:
    spec = SPEC + "        vm.swappiness: 60\n"
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    gpu:\n      hosts:\n        n1:\n        n2:\n"
                                        "        n1:\n")
    (tmp_path / "group_vars" / "all" / "datapath.yml").write_text(spec)
    found = [(w["file"], w["line"], w["message"]) for w in warnings_of(tmp_path, "--inventory-reader", reader)
             if w["check"] == "yaml-duplicate-key"]
    assert found == [
        (str(tmp_path / "group_vars" / "all" / "datapath.yml"), 10,
         "key 'vm.swappiness' is given twice (first at line 9); the value at line 10 wins"),
        (str(tmp_path / "hosts.yml"), 7, "key 'n1' is given twice (first at line 5); the value at line 7 wins"),
    ]
    assert load_inventory(str(tmp_path), "ansible" if reader == "ansible" else "auto").spec["profiles"][0][
        "sysctl"] == {"vm.swappiness": 60}  # what both readers keep: the last value


def test_ansible_core_duplicate_warning_is_not_printed_twice(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _duplicate(tmp_path)
    run("validate", str(tmp_path / "hosts.ini"))
    assert "Found duplicate mapping key" not in capsys.readouterr().err


# --------------------------------------------------------------------------- booleans, the key list
def test_accepts_bool_follows_the_models() -> None:
    assert accepts_bool(("fabrics", 1, "roce", "ecn"))
    assert accepts_bool(("profiles", 0, "sysctl", "vm.x", "ignore_missing"))
    assert not accepts_bool(("profiles", 0, "sysctl", "vm.x"))
    assert not accepts_bool(("fabrics", 0, "mtu"))
    assert not accepts_bool(("profiles", 0, "k8s", "labels", "a/b"))
    assert accepts_bool(("no_such_key",))  # its own error says so


def test_bool_words_where_booleans_belong_are_fine(tmp_path: Path) -> None:
    spec = SPEC.replace("{name: rail0, purpose: rdma, kind: roce, mtu: 9000, subnets: [10.100.0.0/20]}",
                        "{name: rail0, purpose: rdma, kind: roce, mtu: 9000, subnets: [10.100.0.0/20],"
                        " roce: {ecn: on}}")
    assert warnings_of(inventory(tmp_path, spec)) == []
    spec = SPEC.replace("vm.swappiness: 10", "kernel.numa_balancing: off")
    (found,) = warnings_of(inventory(tmp_path, spec))
    assert (found["check"], found["fix"]) == ("yaml-boolean-word",
                                              'write 0 for a number, or "off" (quoted) for the word')


def test_the_key_list_names_its_source_and_knows_our_keys() -> None:
    assert re.match(r"Linux \d+\.\d+\.\d+ Documentation", _sysctl_keys.SOURCES[0])
    assert len(_sysctl_keys.KEYS) > 500
    ctx = WarningContext({"profiles": [{"name": "p", "sysctl": {key: 1 for key in builtin.SYSCTL}}]})
    assert run_warnings(ctx) == []  # every key of the built-in profile
    assert {"vm.swappiness", "net.core.rmem_max", "net.ipv4.conf.*.rp_filter"} <= _sysctl_keys.KEYS
