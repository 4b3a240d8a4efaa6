"""Class 5 - role variables and direct module calls get the spec's checks.

The attacker writes a role variable or calls a module directly (an inventory someone else edits, a
playbook from a less trusted repository) and the module runs as root. A sysctl key is a path below
/proc/sys: written with slashes and '..' it must not reach /etc; a name check must not accept a
trailing newline; a probe must not send traffic outside the fabric's subnets. Real files in a
temporary node root and the modules' ``main()``.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.modules import datapath_facts, model_cache, path_check, sysctl_profile
from netfakes import FakeRunner, use

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def node(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    for rel, text in (("proc/sys/vm/swappiness", "60\n"), ("etc/victim", "original\n"),
                      ("etc/shadow", "root:$6$secret-hash:19000:0:99999:7:::\n")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize("key", ["kernel/../../../etc/victim", "vm/../../../etc/victim"])
def test_a_sysctl_key_cannot_write_outside_proc_sys(run_module, node: Path, key: str) -> None:
    result = run_module(sysctl_profile.main, {"keys": {key: "evil", "vm.swappiness": "10"}, "root": str(node),
                                              "persist": False}, expect_failure=True)
    assert "not a valid sysctl name" in result["msg"] and "below /proc/sys" in result["msg"], result["msg"]
    assert (node / "etc/victim").read_text() == "original\n"
    assert (node / "proc/sys/vm/swappiness").read_text() == "60\n", "nothing is applied when one key is refused"


def test_a_sysctl_key_cannot_read_outside_proc_sys(run_module, node: Path) -> None:
    result = run_module(datapath_facts.main, {"root": str(node), "gather": ["sysctl"],
                                              "sysctl_keys": ["vm.swappiness", "kernel/../../../etc/shadow"]},
                        expect_failure=True)
    assert "below /proc/sys" in result["msg"] and "secret-hash" not in str(result), result


def test_a_name_with_a_trailing_newline_is_refused(run_module, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "w").write_bytes(b"x")
    result = run_module(model_cache.main, {
        "cache_dir": str(tmp_path / "models"), "lock_file": str(tmp_path / "lock"),
        "models": [{"name": "llama\n", "version": "1", "source": str(tmp_path / "src"),
                    "files": [{"path": "w", "sha256": hashlib.sha256(b"x").hexdigest()}]}]},
        expect_failure=True)
    assert "must match" in result["msg"], result["msg"]
    assert not (tmp_path / "models").exists()


def test_name_checks_of_the_node_side_use_full_string_anchors() -> None:
    """No pattern in module_utils ends in '$' without re.M: '$' also matches before a final newline."""
    loose = []
    for path in sorted((REPO / "plugins" / "module_utils").rglob("*.py")):
        for call in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and isinstance(call.func.value, ast.Name) and call.func.value.id == "re"
                    and call.func.attr in ("match", "compile", "search", "fullmatch") and call.args):
                continue
            pattern = call.args[0]
            flags = ast.unparse(call.args[2] if len(call.args) > 2 else call.args[1] if len(call.args) > 1
                                and call.func.attr == "compile" else ast.Constant(0))
            flags += " ".join(ast.unparse(k.value) for k in call.keywords if k.arg == "flags")
            if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str) \
                    and re.search(r"(?<!\\)\$\Z", pattern.value) and not re.search(r"\b(M|MULTILINE)\b", flags):
                loose.append("%s:%d %r" % (path.relative_to(REPO), call.lineno, pattern.value))
    assert loose == []


def test_path_check_never_pings_outside_the_fabrics_subnets(run_module, monkeypatch) -> None:
    runner = use(monkeypatch, FakeRunner([lambda argv: (0, "", "")], which={"ping": "/usr/bin/ping"}))
    target = {"fabric": "rdma", "mtu": 9000, "interface": "ens1f0np0", "subnets": ["198.18.1.0/24"],
              "peers": [{"name": "node2", "address": "198.18.1.12"},
                        {"name": "injected", "address": "203.0.113.7"}]}   # a stray inventory address
    result = run_module(path_check.main, {"targets": [target]}, expect_failure=True)
    assert "peer injected address 203.0.113.7 is outside the fabric's subnets" in result["msg"], result["msg"]
    assert runner.calls == [], "a ping was sent"
    no_subnets = dict(target, peers=target["peers"][:1])
    no_subnets.pop("subnets")
    result = run_module(path_check.main, {"targets": [no_subnets]}, expect_failure=True)
    assert "subnets is required" in result["msg"] and runner.calls == []


def test_the_verify_role_gives_path_check_the_fabrics_subnets() -> None:
    from ansible_collections.aiinfra.datapath.plugins.filter.network import path_targets

    spec = {"fabrics": [{"name": "rdma", "subnets": ["198.18.1.0/24"]}]}
    hostvars = {h: {"datapath": spec, "datapath_addresses": {"rdma": "198.18.1.%d" % i}}
                for i, h in enumerate(["node1", "node2"], start=11)}
    [target] = path_targets([{"name": "ens1f0np0", "fabric": "rdma", "mtu": 9000}], hostvars,
                            ["node1", "node2"], "node1")
    assert target["subnets"] == ["198.18.1.0/24"]
