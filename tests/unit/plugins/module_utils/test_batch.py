"""datapath_run's batch: real capabilities, one after the other, in this process, validated as their modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _batch, _capability

REPO = Path(__file__).resolve().parents[4]
FEATURES = "etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath"


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text("22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw\n")
    (root / "proc/sys/net/core").mkdir(parents=True)
    (root / "proc/sys/net/core/somaxconn").write_text("4096\n")
    (root / "sys/kernel/mm/hugepages").mkdir(parents=True)
    return root


def calls(root: Path, label: str = "inference") -> list[dict[str, Any]]:
    return [
        {"module": "sysctl_profile", "args": {"root": str(root), "keys": {"net.core.somaxconn": {"value": "8192"}},
                                              "file": "/etc/sysctl.d/90-test.conf"}},
        {"module": "nfd_labels", "args": {"root": str(root), "labels": {"aiinfra.io/team": label},
                                          "hugepages": False}},
    ]


def run(batch: list[dict[str, Any]], check_mode: bool = False, stop: bool = True) -> list[dict[str, Any]]:
    return _batch.run_calls(None, batch, check_mode=check_mode, diff=True, stop_on_failure=stop)


def test_runs_each_capability_once_in_order_with_its_own_arguments(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    results = run(calls(root))
    assert [r["module"] for r in results] == ["sysctl_profile", "nfd_labels"]
    assert all(r["result"]["changed"] for r in results), results
    assert (root / "proc/sys/net/core/somaxconn").read_text().strip() == "8192"
    assert "aiinfra.io/team=inference" in (root / FEATURES).read_text()
    assert all(isinstance(r["seconds"], float) for r in results)
    assert [a["kind"] for a in results[0]["result"]["actions"]] == ["sysctl", "file"]
    # the same capabilities again: nothing left to change
    again = run(calls(root))
    assert [r["result"]["changed"] for r in again] == [False, False]
    assert [r["result"]["actions"] for r in again] == [[], []]


def test_check_mode_and_diff_reach_every_capability(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    results = run(calls(root), check_mode=True)
    assert [r["result"]["changed"] for r in results] == [True, True]
    assert all(r["result"].get("diff") for r in results), results
    assert (root / "proc/sys/net/core/somaxconn").read_text().strip() == "4096"
    assert not (root / FEATURES).exists()


def test_stops_at_the_first_failure(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    batch = calls(root)
    batch[0]["args"]["keys"] = {"net.core.no_such_key": {"value": "1"}}
    results = run(batch)
    assert [r["module"] for r in results] == ["sysctl_profile"]
    assert results[0]["result"]["failed"]
    assert len(run(batch, stop=False)) == 2


@pytest.mark.parametrize("args, message", [
    ({"keys": {}, "bogus": 1}, "sysctl_profile: Unsupported parameters"),
    ({}, "sysctl_profile: missing required arguments: keys"),
    ({"keys": {}, "apply": "maybe"}, "sysctl_profile: argument 'apply' is of type"),
    ({"keys": {}, "root": "relative/dir"}, "sysctl_profile: root must be an absolute path"),
])
def test_arguments_are_validated_with_the_modules_own_spec(args: dict[str, Any], message: str) -> None:
    (only,) = run([{"module": "sysctl_profile", "args": args}])
    assert only["result"]["failed"] and only["result"]["msg"].startswith(message), only


def test_no_private_ansible_globals_no_symlinks_no_stdout() -> None:
    """The batch dispatches backends by name: no _ANSIBLE_ARGS swap, no parsing of printed output."""
    plugins = REPO / "plugins"
    for path in plugins.rglob("*"):
        assert not path.is_symlink(), f"{path} is a symbolic link"
        if path.suffix == ".py":
            assert "_ANSIBLE_ARGS" not in path.read_text(), path
    assert set(_batch.BACKENDS) == {"sysctl_profile", "hugepages", "kernel_cmdline", "tuned_profile", "link_mtu",
                                    "rail_routing", "roce_qos", "nic_firmware", "nic_config", "nic_affinity",
                                    "ebpf_readiness", "nvme_layout",
                                    "nfd_labels"}


def test_batched_capabilities_take_no_secrets() -> None:
    """datapath_run echoes its calls' arguments in its invocation: no capability it dispatches may
    have a no_log option (model_cache, which has credentials, is not batched)."""
    def secrets(spec: dict[str, Any]) -> list[str]:
        found = []
        for name, option in spec.items():
            if option.get("no_log"):
                found.append(name)
            found += secrets(option.get("options") or {})
        return found

    for name, cls in _batch.BACKENDS.items():
        assert secrets(cls.argument_spec()) == [], name
        assert issubclass(cls, _capability.Capability) and cls.name == name


def prom_samples(path: Path) -> dict[str, str]:
    """``name{labels}`` -> value of a textfile, heartbeat left out."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.rsplit(" ", 1) for line in lines if "last_run_timestamp" not in line)


def test_metrics_written_by_the_batch_equal_the_controllers(tmp_path: Path) -> None:
    """The node's converge metrics, written after the calls in the same process: the catalogue's families,
    with the figures of these results."""
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils import telemetry

    root = make_root(tmp_path)
    results = run(calls(root))
    directory = tmp_path / "textfile"
    written = _batch.write_metrics(None, results, {"directory": str(directory)})
    assert written["changed"] and not written.get("failed"), written
    # every family is the catalogue's (source site, its help and its labels), as docs/telemetry.md lists them
    families = _batch.site_families({"failed": False, "results": {r["module"]: r["result"] for r in results}})
    assert [f["name"] for f in families] == [
        "aiinfra_datapath_converge_success", "aiinfra_datapath_converge_capability_failed",
        "aiinfra_datapath_reboot_required"]
    for family in families:
        metric = telemetry.BY_NAME[family["name"]]
        assert (metric.source, metric.help, metric.type) == ("site", family["help"], family["type"])
        assert all(set(sample["labels"]) == set(metric.labels) for sample in family["samples"]), family
    samples = prom_samples(directory / "aiinfra_datapath_site.prom")
    assert samples == {
        "aiinfra_datapath_converge_success": "1",
        'aiinfra_datapath_converge_capability_failed{capability="sysctl_profile"}': "0",
        'aiinfra_datapath_converge_capability_failed{capability="nfd_labels"}': "0",
        "aiinfra_datapath_reboot_required": "0",
    }
    # a failed call: the converge failed, and the capability is named
    batch = calls(root)
    batch[0]["args"]["keys"] = {"net.core.no_such_key": {"value": "1"}}
    _batch.write_metrics(None, run(batch), {"directory": str(directory)})
    samples = prom_samples(directory / "aiinfra_datapath_site.prom")
    assert samples["aiinfra_datapath_converge_success"] == "0"
    assert samples['aiinfra_datapath_converge_capability_failed{capability="sysctl_profile"}'] == "1"


def test_metrics_in_check_mode_write_nothing(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    directory = tmp_path / "textfile"
    written = _batch.write_metrics(None, run(calls(root), check_mode=True), {"directory": str(directory)},
                                   check_mode=True)
    assert written["changed"] and not written.get("failed"), written
    assert not (directory / "aiinfra_datapath_site.prom").exists()


def test_the_node_reads_the_facts_the_action_reads() -> None:
    """datapath_run's own reading of memory and NUMA nodes equals the action's (one function, two readers)."""
    from ansible_collections.aiinfra.datapath.plugins.module_utils._hugepages import NODE_ROOT, memory_facts

    with open("/proc/meminfo") as handle:
        meminfo = handle.read()
    names = sorted(Path(NODE_ROOT).iterdir()) if Path(NODE_ROOT).is_dir() else []
    # the action's shell command prints `ls` of the node directory after the marker
    assert _batch.read_memory_facts() == memory_facts(meminfo, [p.name for p in names])
    facts = _batch.read_memory_facts()
    assert facts["memory_bytes"] and facts["memory_bytes"] % 1024 == 0
    assert _batch.facts_differ({"memory_bytes": facts["memory_bytes"], "numa_nodes": facts["numa_nodes"]}) is None
    assert _batch.facts_differ({"memory_bytes": facts["memory_bytes"] + 1024, "numa_nodes": facts["numa_nodes"]}) \
        == facts
    assert memory_facts("MemTotal:  1024 kB\n", ["node0", "node1", "possible", "has_cpu"]) == \
        {"gathered": ["memory"], "memory_bytes": 1 << 20, "numa_nodes": 2}
    assert memory_facts("", []) == {"gathered": ["memory"], "memory_bytes": None, "numa_nodes": None}


def test_facts_other_than_expected_run_nothing(tmp_path: Path, run_module: Any) -> None:
    """A plan kept for other facts (memory, NUMA nodes) must not be applied: datapath_run reads the
    facts first and returns them without running a call; with the facts expected, it runs."""
    from ansible_collections.aiinfra.datapath.plugins.modules import datapath_run

    root = make_root(tmp_path)
    actual = _batch.read_memory_facts()
    other = {"memory_bytes": (actual["memory_bytes"] or 0) * 2, "numa_nodes": actual["numa_nodes"]}
    result = run_module(datapath_run.main, {"calls": calls(root), "expect_facts": other})
    assert result["facts_differ"] is True and result["results"] == [] and result["changed"] is False
    assert result["datapath_facts"] == actual
    assert not (root / FEATURES).exists() and (root / "proc/sys/net/core/somaxconn").read_text() == "4096\n"

    expected = {"memory_bytes": actual["memory_bytes"], "numa_nodes": actual["numa_nodes"]}
    result = run_module(datapath_run.main, {"calls": calls(root), "expect_facts": expected})
    assert "facts_differ" not in result
    assert [r["module"] for r in result["results"]] == ["sysctl_profile", "nfd_labels"]
    assert (root / FEATURES).exists()
