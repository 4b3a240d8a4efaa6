"""Module arguments fuzzed directly (bypassing the spec): wrong types, out-of-range values,
hostile strings, and hypothesis-generated values for every parameter of every module.

Safety: every module runs with ``root`` pointing at a temporary tree (where it has one) and
``AnsibleModule.run_command`` replaced by a recorder that runs nothing and answers rc=127,
so no fuzzed argument can reach the host: nothing is executed, nothing outside tmp written.
The recorder also shows whether a hostile string would have reached a command line, and
that it would be one argv element (no shell).

Outcomes: ``fail_json`` (clean refusal), ``exit_json`` (accepted: harmless values such as an
unknown interface name that is simply not found) or a Python exception escaping ``main()``
(a traceback: the goal is 0).
"""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible_collections.aiinfra.datapath.plugins.modules import (
    checkpoint_probe,
    datapath_facts,
    hugepages,
    kernel_cmdline,
    link_mtu,
    metadata_probe,
    metrics_textfile,
    model_cache,
    net_probe,
    nfd_labels,
    nic_firmware,
    node_topology,
    nvme_layout,
    path_check,
    pcie_acs,
    rdma_counters,
    roce_qos,
    storage_probe,
    sysctl_profile,
    tuned_profile,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest_plugins = ["reliability_log"]

HOSTILE = ["eth0; reboot", "$(touch /tmp/pwned)", "`id`", "../../../etc/shadow", "a b\tc", "x\ny",
           "-rf", "--help", "", " ", "\x00", "ä" * 300, "A" * 5000, "/", "*", "${IFS}", "|cat", "&&", "%s%n",
           "\udcff", "\u202e\u2066x", "{{ lookup('pipe', 'id') }}"]
BAD_NUMBERS = [-1, 0, 2**31, 2**64, -(2**63), 10**30, 1.5, float("inf"), float("nan"), "1e309", "nan", "12abc", True,
               10**400, -0.0, 1e-320, "0x10", " 42 "]
BAD_TYPES: list[Any] = [None, [], {}, [1, 2], {"a": 1}, "string", 3, [None], [{"x": "y"}],
                        {"__class__": "x", "": None}, [[[[[[[[[[[]]]]]]]]]]], "[1, 2]"]

MODULES = {
    "sysctl_profile": (sysctl_profile, lambda r: {"keys": {"vm.swappiness": 10}, "root": r}),
    "hugepages": (hugepages, lambda r: {"pages": [{"size": "2M", "count": 4}], "root": r}),
    "kernel_cmdline": (kernel_cmdline, lambda r: {"args": ["iommu=pt"], "root": r}),
    "link_mtu": (link_mtu, lambda r: {"interfaces": [{"name": "eno1", "mtu": 9000}], "root": r}),
    "roce_qos": (roce_qos, lambda r: {"interfaces": [{"interface": "ens1f0np0", "trust": "dscp",
                                                      "pfc_priorities": [3]}], "root": r}),
    "nic_firmware": (nic_firmware, lambda r: {"interfaces": ["ens1f0np0"], "root": r}),
    "nvme_layout": (nvme_layout, lambda r: {"devices": ["/dev/nvme0n1"], "filesystem": {"label": "cache"},
                                            "mount": {"path": "/mnt/model-cache"}, "root": r}),
    "nfd_labels": (nfd_labels, lambda r: {"labels": {"aiinfra.io/x": "y"}, "root": r}),
    "datapath_facts": (datapath_facts, lambda r: {"sysctl_keys": ["vm.swappiness"], "root": r}),
    "path_check": (path_check, lambda r: {"targets": [{"fabric": "rdma", "mtu": 9000,
                                                       "peers": [{"name": "n2", "address": "198.18.2.12"}]}],
                                          "count": 1, "timeout": 1}),
    "tuned_profile": (tuned_profile, lambda r: {"name": "aiinfra-datapath", "include": "throughput-performance",
                                                "sysctl": {"vm.swappiness": {"value": "10", "mode": "exact"}},
                                                "thp": {"enabled": "madvise"}, "kernel_args": ["iommu=pt"],
                                                "profile_dir": "/etc/tuned", "activate": True, "root": r}),
    "pcie_acs": (pcie_acs, lambda r: {"state": "off", "nvme": True, "runtime": True,
                                      "unit_file": "/etc/systemd/system/aiinfra-pcie-acs.service", "root": r}),
    "node_topology": (node_topology, lambda r: {"lspci": True, "nvidia_smi": True, "root": r}),
    "rdma_counters": (rdma_counters, lambda r: {"interfaces": ["ens1f0np0"], "root": r}),
    "metrics_textfile": (metrics_textfile, lambda r: {
        "source": "site", "heartbeat": "aiinfra_datapath_converge_last_run_timestamp_seconds",
        "metrics": [{"name": "aiinfra_datapath_reboot_required", "help": "1 after a change that needs a reboot",
                     "samples": [{"labels": {"capability": "hugepages"}, "value": 0}]}],
        "directory": "/var/lib/node_exporter/textfile_collector",
        "filesystems": [{"path": "/mnt/model-cache", "reserve_bytes": 0}], "state": "present", "root": r}),
    # no root of their own (node paths, sockets): fuzzed in check mode, which opens nothing and writes nothing
    "storage_probe": (storage_probe, lambda r: {
        "targets": [{"name": "nvme0", "path": "/dev/nvme0n1", "create_size": 0, "direct": True}],
        "seq_bytes": 1048576, "seq_block_kib": 1024, "random_seconds": 0.5, "queue_depths": [1, 4],
        "tool": "builtin", "model": {"path": "/mnt/model-cache/models/m/1"}}),
    "net_probe": (net_probe, lambda r: {
        "role": "client", "address": "198.18.1.12", "source": "198.18.1.11", "port": 5201, "streams": 1,
        "duration": 0.1, "max_bytes": 0, "wait": 0.1, "latency_interval": 0.02, "tool": "builtin",
        "allowed_networks": ["198.18.0.0/15"], "socket_buffer": 4194304, "root": r, "token": "0" * 32}),
    "model_cache": (model_cache, lambda r: {
        "cache_dir": r + "/cache", "lock_file": r + "/run/model-cache.lock",
        "models": [{"name": "m", "version": "1", "source": "file:///nonexistent/dp-reliability/m",
                    "files": [{"path": "config.json", "sha256": "0" * 64, "size": 2}]}],
        "pinned": ["m"], "reserve_bytes": 0, "bandwidth_limit": 0, "evict": True, "verify_existing": "size",
        "headers": {"X-Site": "lab"}, "timeout": 1, "retries": 0, "file_mode": "0644", "dir_mode": "0755"}),
    "checkpoint_probe": (checkpoint_probe, lambda r: {
        "directory": r + "/ckpt", "writers": 2, "size": 2097152, "block_kib": 1024, "direct": False,
        "max_free_share": 0.2, "read_file": r + "/probe.bin"}),
    "metadata_probe": (metadata_probe, lambda r: {
        "directory": r + "/meta", "sets": [{"name": "dataset", "files": 10, "size": 4096}], "width": 2,
        "max_free_share": 0.2}),
}
# Run in check mode only: their paths are the node's own, not below a test root (storage_probe,
# model_cache), or a real run opens sockets (net_probe).
CHECK_MODE = {"storage_probe", "net_probe", "model_cache", "checkpoint_probe", "metadata_probe"}
# Parameters kept at their base value (inside the test's tmp): the host paths a check-mode run still
# creates (model_cache's lock file) or lists.
FIXED = {"model_cache": {"cache_dir", "lock_file"}, "storage_probe": {"model"}}

MODEL_VALUES: list[Any] = ["/mnt/x", [], None, {"path": None}, {"path": 1}, {"path": "rel/m"},
                           {"path": "/nonexistent/dp-reliability"}, {"path": "/dev/null"}, {"path": "/x", "extra": 1},
                           {"path": "\x00"}]
# Values inside free-form dicts that one-at-a-time replacement does not reach.
EXTRA: dict[str, list[tuple[tuple[Any, ...], Any]]] = {
    "roce_qos": [(("interfaces", 0, "dscp2prio"), {"26": v}) for v in (float("inf"), float("nan"), 2**70, "x", None)]
    + [(("interfaces", 0, "dscp2prio"), {k: 3}) for k in ("inf", "-1", "64", "$(id)")],
    "sysctl_profile": [(("keys",), {k: 1}) for k in ("../../etc/passwd", "vm/../../x", "a b", "x;reboot", "$(id)",
                                                     "", ".", "vm..swappiness", "\x00")]
    + [(("keys",), {"vm.swappiness": v}) for v in (float("inf"), 2**70, "1; reboot", {"value": None}, [1, [2]])],
    "nfd_labels": [(("labels",), {k: "v"}) for k in ("../x", "a b", "x=y", "$(id)", "\n", "a" * 300)]
    + [(("path",), p) for p in ("../../../etc/passwd", "relative", "/etc/kubernetes/../../tmp/x")],
    # model.path is fixed above: "/" would make even a check-mode run walk the whole host filesystem
    "storage_probe": [(("model",), v) for v in MODEL_VALUES],
    "tuned_profile": [(("sysctl",), {k: {"value": "1"}}) for k in ("../../etc/passwd", "a b", "x;reboot", "$(id)", "")]
    + [(("sysctl",), {"vm.swappiness": v})
       for v in ("1\n[main]\ninclude=x", {"value": "1", "mode": "max"}, {"value": None}, {"mode": "exact"}, [1, 2], "")]
    + [(("kernel_args",), [v]) for v in ("a b", "", "x\ny", "$(id)")]
    + [(("include",), v) for v in ("a,../b", "a;b", " , ", "${f:exec:/bin/sh}")],
    "metrics_textfile": [(("metrics",), [m]) for m in (
        {"name": "x y", "samples": [{"value": 1}]}, {"name": "ok", "samples": [{"value": "nan"}]},
        {"name": "ok", "samples": [{"labels": {"a b": "c"}, "value": 1}]},
        {"name": "ok", "samples": [{"labels": {"a": "c\"\n}"}, "value": 1}]},
        {"name": "ok", "help": "line\nbreak", "samples": [{"value": 1}]}, {"name": "ok", "samples": None},
        {"name": "ok", "samples": [{"value": float("inf")}]}, {"name": "ok", "type": "histogram", "samples": []})],
}


def _paths(args: dict[str, Any], fixed: set[str] | None = None) -> list[tuple[Any, ...]]:
    """Every parameter path in the base args (top level and one level into list/dict)."""
    out: list[tuple[Any, ...]] = []
    for key, value in args.items():
        if key == "root" or key in (fixed or set()):
            continue
        out.append((key,))
        if isinstance(value, list) and value and isinstance(value[0], dict):
            out.extend((key, 0, sub) for sub in value[0])
        elif isinstance(value, list) and value:
            out.append((key, 0))
        elif isinstance(value, dict):
            out.extend((key, sub) for sub in value)
    return out


def _set(args: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    new = copy.deepcopy(args)
    cur: Any = new
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value
    return new


class Harness:
    def __init__(self, run_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.run_module = run_module
        self.tmp = tmp_path
        self.argvs: list[list[str]] = []
        self.outcomes: Counter[str] = Counter()
        self.tracebacks: list[str] = []
        self.runs = 0

        def fake_run_command(module: Any, args: Any, *a: Any, **kw: Any) -> tuple[int, str, str]:
            assert isinstance(args, list), "a module passed a shell string to run_command: %r" % (args,)
            self.argvs.append([str(x) for x in args])
            return 127, "", "blocked by the reliability fuzz harness"

        def no_dns(*a: Any, **kw: Any) -> Any:
            raise socket.gaierror(socket.EAI_NONAME, "no DNS in the fuzz harness")

        def no_network(*a: Any, **kw: Any) -> Any:
            raise OSError(101, "no network in the fuzz harness")

        def no_process(*a: Any, **kw: Any) -> Any:
            raise OSError(1, "no process started by the fuzz harness")

        monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command)
        monkeypatch.setattr(socket.socket, "connect", no_network)
        monkeypatch.setattr(socket.socket, "bind", no_network)
        monkeypatch.setattr(socket, "create_connection", no_network)
        monkeypatch.setattr(subprocess, "Popen", no_process)
        self.cwd = tmp_path / "cwd"  # a relative `root` resolves here, never in the checkout
        self.cwd.mkdir()
        monkeypatch.chdir(self.cwd)
        monkeypatch.setattr(socket, "getaddrinfo", no_dns)

    def root(self) -> str:
        self.runs += 1
        root = self.tmp / f"root{self.runs}"
        for sub in ("proc/sys/vm", "sys/class/net", "etc/sysctl.d", "run", "sys/kernel/mm/hugepages",
                    "etc/tuned/throughput-performance", "proc/net"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "proc/sys/vm/swappiness").write_text("60\n")
        for nic in ("eno1", "ens1f0np0"):  # present, so interface-level validation is reached
            (root / "sys/class/net" / nic).mkdir(parents=True, exist_ok=True)
            for attr, value in (("mtu", "1500"), ("address", "02:dd:00:00:00:01"), ("operstate", "up"),
                                ("type", "1"), ("ifindex", "2")):
                (root / "sys/class/net" / nic / attr).write_text(value + "\n")
        (root / "proc/meminfo").write_text("MemTotal: 1000000 kB\nMemAvailable: 500000 kB\nHugepagesize: 2048 kB\n")
        (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/vda1\n")
        (root / "etc/tuned/throughput-performance/tuned.conf").write_text(
            "[main]\nsummary=base\n[sysctl]\nvm.swappiness=30\n")
        (root / "etc/tuned/active_profile").write_text("throughput-performance\n")
        return str(root)

    def call(self, module: Any, args: dict[str, Any], check_mode: bool = False) -> str:
        try:
            self.run_module(module.main, args, check_mode=check_mode)
            outcome = "accepted"
        except AssertionError as exc:
            text = str(exc)
            if text.startswith("module failed:"):
                outcome = "refused"
            else:
                outcome = "traceback"
                self.tracebacks.append(f"{module.__name__}: {text[:300]}")
        except SystemExit:
            outcome = "refused"  # AnsibleModule's own exit on argument errors before fail_json
        except Exception as exc:  # noqa: BLE001 - any escaping exception is the defect being counted
            outcome = "traceback"
            self.tracebacks.append(_where(module, exc, args))
        self.outcomes[outcome] += 1
        return outcome


def _where(module: Any, exc: BaseException, args: dict[str, Any]) -> str:
    """``module: Error: text at FILE:LINE (fn) for {args}``; FILE is the innermost frame, shortened."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = ""
    if frames:
        f = frames[-1]
        name = f.filename
        for marker in ("plugins/", "ansible/module_utils/"):
            if marker in name:
                name = name[name.index(marker):]
                break
        at = " at %s:%s (%s)" % (name, f.lineno, f.name)
    shown = {k: v for k, v in args.items() if k != "root"}
    return f"{module.__name__.rsplit('.', 1)[-1]}: {type(exc).__name__}: {exc}{at} for {shown!r}"[:400]


def _split(tracebacks: list[str]) -> tuple[list[str], list[str]]:
    """(tracebacks raised in this collection's code, tracebacks raised inside ansible-core)."""
    core = [t for t in tracebacks if " at ansible/module_utils/" in t]
    return [t for t in tracebacks if t not in core], core


# Defects found by this file in module code (owned elsewhere): the case is recorded as failed
# and the test xfails until the module is fixed (strict: a fix turns it into a reminder).
KNOWN = {
}
CORE_NOTE = ("ansible-core %s argument validation raised before the module's own code ran (a non-dict "
             "value for a dict parameter with `options`: TypeError in set_fallbacks(); Infinity for an int "
             "parameter: OverflowError in check_type_int(); a lone surrogate such as \\udcff in a string "
             "parameter: UnicodeEncodeError in AnsibleModule)")


def _judge(name: str, case: Any, tracebacks: list[str]) -> None:
    ours, core = _split(tracebacks)
    case.traceback(len(tracebacks), core=len(core))
    for tb in sorted(set(ours))[:4]:
        case.finding("traceback: " + tb)
    if core:
        import ansible

        case.finding(CORE_NOTE % ansible.__version__ + f" ({len(core)}x here), e.g. " + core[0])
    if ours and name in KNOWN:
        pytest.xfail(KNOWN[name])
    assert not ours, ours[:5]


@pytest.fixture
def harness(run_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    return Harness(run_module, tmp_path, monkeypatch)


def _hostile_argvs(h: Harness) -> list[list[str]]:
    return [argv for argv in h.argvs if any(bad.strip() and bad in " ".join(argv) for bad in HOSTILE[:4])]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_fuzz_module_arguments(name: str, harness: Harness, reliability) -> None:
    module, base = MODULES[name]
    with reliability.case(f"fuzz-args-{name}", f"{name}: each parameter set to hostile strings, absurd numbers "
                          "and wrong types, one at a time", area="module arguments") as case:
        tried = 0
        check = name in CHECK_MODE
        for path in _paths(base("/x"), FIXED.get(name)):
            for value in HOSTILE + BAD_NUMBERS + BAD_TYPES:
                args = _set(base(harness.root()), path, value)
                harness.call(module, args, check_mode=check)
                tried += 1
        for path, value in EXTRA.get(name, []):
            harness.call(module, _set(base(harness.root()), path, value), check_mode=check)
            tried += 1
        # a wrong root itself: relative, missing, a file
        for root in ("relative/dir", "/nonexistent/dp-reliability", str(harness.tmp / "file")):
            (harness.tmp / "file").write_text("x")
            args = base(root) if "root" in base("/x") else base(str(harness.tmp / "fixed"))
            harness.call(module, args, check_mode=check)
            tried += 1
        case.hostile(tried)
        written = sorted(str(p.relative_to(harness.cwd)) for p in harness.cwd.rglob("*") if p.is_file())
        if written:
            case.finding(f"{name} accepts a relative root ('relative/dir') and wrote below the module's working "
                         f"directory: {', '.join(written)}; reject a non-absolute root in argument validation")
        if name not in KNOWN:
            assert not written, written
        shell = [a for a in harness.argvs if len(a) == 1 and " " in a[0]]
        case.did("%d calls: refused with fail_json %d, accepted %d, tracebacks %d; %d command(s) would have "
                 "run (blocked), hostile strings in %d of them, always as single argv elements"
                 % (tried, harness.outcomes["refused"], harness.outcomes["accepted"],
                    harness.outcomes["traceback"], len(harness.argvs), len(_hostile_argvs(harness))))
        assert not shell
        _judge(name, case, harness.tracebacks)
        case.checked("no Python exception escaped the collection's code; every command was an argv list, "
                     "never a shell string")
        case.checked("nothing executed on the host (run_command blocked), files only under a tmp root")


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != "nvme_layout" and "root" in MODULES[n][1]("/x")))
def test_relative_root_refused(name: str, run_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module, base = MODULES[name]
    monkeypatch.chdir(tmp_path)
    result = run_module(module.main, base("relative/dir"), expect_failure=True)
    assert "root must be an absolute path" in result["msg"], result["msg"]
    assert not any(tmp_path.rglob("*"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
    | st.sampled_from(HOSTILE),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)

PROPERTY_RUNS: Counter[str] = Counter()
TRACEBACKS: list[str] = []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_property_module_arguments(name: str, run_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   reliability) -> None:
    module, base = MODULES[name]
    h = Harness(run_module, tmp_path, monkeypatch)
    paths = _paths(base("/x"), FIXED.get(name))

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
    @given(st.sampled_from(paths), json_values)
    def run(path: tuple[Any, ...], value: Any) -> None:
        PROPERTY_RUNS[name] += 1
        h.call(module, _set(base(h.root()), path, value), check_mode=name in CHECK_MODE)

    with reliability.case(f"property-args-{name}", f"{name}: hypothesis-generated JSON values for a random "
                          "parameter", area="module arguments") as case:
        run()
        case.hostile(PROPERTY_RUNS[name], property_based=PROPERTY_RUNS[name])
        case.did("%d hypothesis runs: refused %d, accepted %d, tracebacks %d"
                 % (PROPERTY_RUNS[name], h.outcomes["refused"], h.outcomes["accepted"], h.outcomes["traceback"]))
        _judge(name, case, h.tracebacks)
        case.checked("no Python exception escaped the collection's code for any generated value")
