"""Recorded tool output and node files, mutated, through the parsers the modules use.

Every input is a recorded output under tests/fixtures (lspci -vvv, nvidia-smi topo -m / -q -x,
mlnx_qos, dcb -j, ethtool, devlink, ip -j, /proc/net, iperf3 and fio JSON, TuneD profiles,
lsblk/wipefs/blkid/sgdisk, kubectl Node) or a node file of the shape the kernel or tool writes
(tests/unit/hostile_samples.py), turned into deterministic hostile variants by
tests/hostile_text.py: truncated, lines dropped, repeated, shuffled, numbers made absurd
(negative, 2**64, 5000 digits, nan, Unicode digits), tokens replaced by NUL, shell
metacharacters, path traversal, ANSI escapes, bytes flipped into invalid UTF-8, CRLF, spliced
with another tool's output; JSON documents with a node retyped, deleted or nested 200 deep.

Each variant goes through the same function the module calls on that output (a parser, or a
backend's ``read`` behind a fake runner that answers the mutated output, or the whole
capability). The rule checked: the call returns a value of the documented shape that
JSON-encodes (what ``exit_json`` does with it), or raises the error the caller turns into a
clean failure (``CapabilityError`` and its subclasses; ``ValueError`` where the caller catches
that), with a message. Anything else is a traceback in this collection's code.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.aiinfra.datapath.plugins.filter import drift_audit
from ansible_collections.aiinfra.datapath.plugins.module_utils import (
    _cmdline,
    _datapath_facts,
    _dcb,
    _hugepages,
    _iplink,
    _mlnx_qos,
    _net_probe_parse,
    _netconf_systemd,
    _netconf_yaml,
    _nfd_labels,
    _nfd_rules,
    _nic_firmware,
    _path_check,
    _rdma_counters,
    _storage_probe_fio,
    _sysctl,
    _tuned,
    _version,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils import _node_topology as _nt
from ansible_collections.aiinfra.datapath.plugins.module_utils import _node_topology_parse as _ntp
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._errors import CapabilityError
from ansible_collections.aiinfra.datapath.plugins.module_utils._model_cache import sources as _mc_sources
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout import classify as _nv_classify
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout import parse as _nv_parse

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (TESTS, os.path.join(TESTS, "unit"), os.path.join(TESTS, "unit", "plugins")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import hostile_samples as S  # noqa: E402
from hostile_text import json_variants, variants  # noqa: E402
from netfakes import FakeRunner  # noqa: E402
from plugin_utils.audit._data import facts as audit_facts  # noqa: E402
from plugin_utils.audit._data import plan as audit_plan  # noqa: E402
from storagefakes import raw_device  # noqa: E402
from storagefakes import spec as storage_spec  # noqa: E402
from topofakes import SysRoot, machine  # noqa: E402

pytest_plugins = ["reliability_log"]

FIXTURES = Path(TESTS) / "fixtures"


def fx(rel: str) -> str:
    return (FIXTURES / rel).read_text()


def fx_glob(pattern: str) -> list[tuple[str, str]]:
    return [(str(p.relative_to(FIXTURES)), p.read_text()) for p in sorted(FIXTURES.glob(pattern))
            if not p.name.endswith(".source")]


@dataclass
class Target:
    """One parser (or backend read) and the recorded inputs it is fed, mutated."""

    id: str
    what: str                                  # the output, as the fault line of the report says it
    fn: Callable[[str], Any]                   # what the module does with that output
    inputs: list[tuple[str, str]]              # (fixture name, recorded text)
    per_input: int                             # text variants per recorded input
    json_per_input: int = 0                    # JSON-structure variants per input (JSON outputs)
    allowed: tuple[type[BaseException], ...] = (CapabilityError,)
    shape: Any = (dict, list)                  # what a successful parse returns
    limit: int = 0                             # the real source's size bound (0: none): longer variants cut
    check: Callable[[str, str, Any], str | None] | None = None   # extra rule: (input, variant, result) -> problem
    notes: list[str] = field(default_factory=list)


# -- consumers: what the modules do after parsing -------------------------------------------------------

def _link_table(text: str) -> dict[str, Any]:
    """``ip -j -d link show`` as link_mtu reads it: parsed, then every link's kind, parent, MTU limits,
    depth and related devices (the lockout guard's view)."""
    links = _iplink.parse_link_json(text)
    return {name: {"kind": _iplink.link_kind(link), "parent": _iplink.link_parent(link),
                   "limits": _iplink.mtu_limits(links, name, {}), "depth": _iplink.depth(links, name),
                   "related": sorted(_iplink.related(links, name)),
                   "slaves": _iplink.bond_slaves(links, name)} for name, link in links.items()}


def _addresses(text: str) -> dict[str, Any]:
    return {"holding": _iplink.interfaces_with_address(text, "198.18.0.11"), "route": _iplink.route_device(text)}


class AnswerRunner:
    """A runner whose every command answers from ``answers`` (argv[index] -> (rc, out, err))."""

    def __init__(self, answers: dict[str, tuple[int, str, str]], index: int) -> None:
        self.answers = answers
        self.index = index
        self.argvs: list[list[str]] = []

    def run(self, argv: list[str], check: bool = False) -> tuple[int, str, str]:
        assert isinstance(argv, list)
        self.argvs.append(list(argv))
        return self.answers.get(argv[self.index], (0, "{}", ""))


DCB_OBJECTS = ("pfc", "app", "ets", "apptrust")
DCB_RECORDED = {obj: fx(f"network/dcb/{obj}-show.json") for obj in DCB_OBJECTS}


def _dcb_read(obj: str) -> Callable[[str], Any]:
    def read(text: str) -> Any:
        answers = {o: (0, DCB_RECORDED[o], "") for o in DCB_OBJECTS}
        answers["dcbx"] = (0, '{"host":true,"ieee":true}', "")
        answers[obj] = (0, text, "")
        return _dcb.DcbBackend(AnswerRunner(answers, 2)).read("eth0")
    return read


def _mlnx_read(text: str) -> Any:
    return _mlnx_qos.MlnxQosBackend(AnswerRunner({"-i": (0, text, "")}, 1)).read("ens1f0np0")


def _iperf3(text: str) -> Any:
    data = _net_probe_parse.load_iperf3(text)
    return {"client": _net_probe_parse.iperf3_summary(data, "client"),
            "server": _net_probe_parse.iperf3_summary(data, "server"),
            "retry": _net_probe_parse.iperf3_connect_failed(data)}


PROC_NET = dict(fx_glob("measure/net/proc/*"))


def _proc_net(text: str) -> Any:
    counters = _net_probe_parse.parse_proc_net(text)
    before = _net_probe_parse.parse_proc_net(PROC_NET["measure/net/proc/node1-netstat.before"])
    return {"counters": counters, "delta": _net_probe_parse.netstat_delta(before, counters)}


def _tcp_info(text: str) -> Any:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = text.encode("utf-8", "surrogateescape")
    info = _net_probe_parse.parse_tcp_info(raw)
    return {"info": info, "summary": _net_probe_parse.summarise_tcp_info([info, info])}


class FileHost:
    """The node files TuneD's loader reads, from a dict (read_raw / read / exists / listdir)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def read_raw(self, path: str) -> str | None:
        return self.files.get(path)

    def read(self, path: str, default: Any = None) -> Any:
        text = self.files.get(path)
        return default if text is None else text.strip()

    def exists(self, path: str) -> bool:
        return path in self.files or any(p.startswith(path.rstrip("/") + "/") for p in self.files)

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/", 1)[0] for p in self.files if p.startswith(prefix)})


TUNED_FILES = {
    "/etc/tuned/active_profile": "network-throughput\n",
    "/etc/tuned/tuned-main.conf": fx("tuned/etc/tuned/tuned-main.conf"),
    "/usr/lib/tuned/network-throughput/tuned.conf": fx("tuned/usr/lib/tuned/network-throughput/tuned.conf"),
    "/usr/lib/tuned/throughput-performance/tuned.conf": fx("tuned/usr/lib/tuned/throughput-performance/tuned.conf"),
}


def _tuned_load(path: str) -> Callable[[str], Any]:
    def load(text: str) -> Any:
        files = dict(TUNED_FILES)
        files[path] = text
        found = _tuned.load(FileHost(files))
        if found is not None:
            found["conflicts"] = _tuned.sysctl_conflicts(found, {"net.core.rmem_max": "268435456"}, lambda a, b: a == b)
        return found
    return load


STORAGE_SCENARIOS = ("empty", "foreign-ext4", "foreign-gpt2", "ours-partition", "ours-xfs", "ours-xfs-whole")
HOLDS_DATA = ("foreign-ext4", "foreign-gpt2")


def _storage(scenario: str, output: str) -> Callable[[str], Any]:
    """One tool output of a recorded device replaced; the device built and classified as nvme_layout
    does before its data-loss guard."""
    def classify(text: str) -> Any:
        raw = raw_device(scenario)
        if output in ("blkid-p1", "wipefs-p1"):
            raw["part_blkid" if output == "blkid-p1" else "part_wipefs"][1] = text
        else:
            raw[output] = text
        dev = _nv_classify.classify(_nv_classify.build_device(raw), storage_spec(), 1)
        return {"class": dev["class"], "found": dev.get("found"), "member": dev.get("member")}
    return classify


def _never_empty(recorded: str, variant: str, result: Any) -> str | None:
    if result["class"] == "empty":
        return "a device holding data was classified empty (the wipe guard would let it through)"
    return None


def _storage_inputs(scenario: str) -> list[tuple[str, str, str]]:
    raw = raw_device(scenario)
    out = [(name, raw[name]) for name in ("lsblk", "wipefs", "blkid", "sgdisk") if raw.get(name)]
    if raw["part_blkid"]:
        out += [("blkid-p1", raw["part_blkid"][1]), ("wipefs-p1", raw["part_wipefs"][1])]
    return [(scenario, name, text) for name, text in out]


K8S_NAME = "cnfd1-worker-0.fci1.kni.lab.eng.bos.redhat.com"
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where present, as ansible-core uses it


def _k8s_node(text: str) -> Any:
    """As the audit role does: the file read as YAML (ansible's reader: a YAMLError is refused there, before
    this collection's code), the node picked by k8s_node, then the kubelet-hugepages findings."""
    # the file's bytes, as a reader gets them (a flipped byte that is no UTF-8 is the reader's YAMLError)
    raw = text.encode("utf-8", "surrogateescape")
    node = drift_audit.k8s_node([yaml.load(raw, Loader=YAML_LOADER)], K8S_NAME)  # noqa: S506 - a safe loader
    findings = drift_audit.audit_findings(audit_plan(), audit_facts(), host="node1", k8s_node=node)
    return [f for f in findings if f["check"] == "kubelet-hugepages"]


def _tuple_json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# -- the targets ------------------------------------------------------------------------------------------

STORAGE = [item for scenario in STORAGE_SCENARIOS for item in _storage_inputs(scenario)]


def _is_json(text: str) -> bool:
    try:
        json.loads(_nv_parse.strip_header(text))
    except ValueError:
        return False
    return True


TARGETS: list[Target] = [
    Target("lspci-vvv", "`lspci -vvv -D` of 2 recorded machines (ASUS ESC8000A-E12, Puget WRX90)",
           _ntp.parse_lspci_vvv, fx_glob("topology/*/lspci-vvv.txt"), 300, shape=dict),
    Target("nvidia-smi-topo-m", "`nvidia-smi topo -m` of 3 recorded machines (old and new NIC legend format)",
           _ntp.parse_topo_matrix, fx_glob("topology/*/nvidia-smi-topo-m.txt"), 150, shape=(dict, type(None))),
    Target("nvidia-smi-q-x", "`nvidia-smi -q -x` (recorded GTX 980 XML)", _ntp.parse_nvidia_smi_xml,
           fx_glob("topology/nvidia-smi-q-x-gtx980.xml"), 300, allowed=(ValueError,), shape=list),
    Target("mlnx-qos", "`mlnx_qos -i IF` (new, old and firmware-DCBX formats) through MlnxQosBackend.read",
           _mlnx_read, fx_glob("network/mlnx_qos/*.txt"), 150, shape=dict),
    *[Target(f"dcb-{obj}", f"`dcb -j {obj} show dev IF` through DcbBackend.read (the other objects as recorded)",
             _dcb_read(obj), [(f"network/dcb/{obj}-show.json", DCB_RECORDED[obj])], 90, json_per_input=90,
             shape=dict) for obj in DCB_OBJECTS],
    Target("dcb-text", "`dcb OBJ show dev IF` text output (pfc, ets, apptrust, buffer, Talos)", _dcb.parse_text,
           [x for x in fx_glob("network/dcb/*.txt") if "stderr" not in x[0]], 60, shape=dict),
    Target("ethtool-i", "`ethtool -i IF` (ConnectX-7, veth)", _nic_firmware.parse_ethtool_info,
           fx_glob("network/ethtool/*.txt"), 100, shape=dict),
    Target("devlink-info", "`devlink -j dev info` (3 recorded mlx5 states)", _nic_firmware.parse_devlink_info,
           fx_glob("network/devlink/*.json"), 60, json_per_input=100,
           allowed=(_nic_firmware.DevlinkOutputError, CapabilityError), shape=dict),
    Target("ip-link", "`ip -j -d link show` (recorded node) through the link_mtu view (kind, parent, MTU limits, "
           "depth, related devices)", _link_table, fx_glob("network/iplink/node-links.json")
           + fx_glob("network/iplink/veth-d.json"), 80, json_per_input=120, shape=dict),
    Target("ip-addr-route", "`ip -j addr show` and `ip -j route get` (the lockout guard's inputs)", _addresses,
           fx_glob("network/iplink/addr.json") + fx_glob("network/iplink/route-get-gw.json"), 80,
           json_per_input=100, shape=dict),
    Target("ethtool-S", "`ethtool -S`, RDMA hw_counters listings (mlx5, ice, bnx2x, be2net, veth)",
           _rdma_counters.parse_ethtool_stats, fx_glob("measure/rdma/*.txt"), 60, shape=dict),
    Target("proc-net", "/proc/net/snmp and /proc/net/netstat (lab recordings) and the netstat delta",
           _proc_net, list(PROC_NET.items()), 50, shape=dict),
    Target("iperf3-json", "`iperf3 -J` client and server documents (ok, refused, killed, unreachable)", _iperf3,
           fx_glob("measure/net/iperf3/*.json"), 30, json_per_input=50, shape=dict),
    Target("fio-json", "`fio --output-format=json` (4 recorded jobs)", _storage_probe_fio.parse_job,
           fx_glob("measure/storage/*.json"), 40, json_per_input=80,
           allowed=(_storage_probe_fio.ProbeError,), shape=dict),
    Target("tcp-info", "TCP_INFO bytes from getsockopt (lab recording, hex)", _tcp_info,
           fx_glob("measure/net/tcp_info/*.hex"), 100, shape=dict),
    *[Target(f"tuned-{name}", f"TuneD {path} (verbatim from TuneD) through the profile loader, the "
             "other files as shipped", _tuned_load(path), [(path, TUNED_FILES[path])], per, shape=(dict, type(None)))
      for name, path, per in (("main-conf", "/etc/tuned/tuned-main.conf", 80),
                              ("network-throughput", "/usr/lib/tuned/network-throughput/tuned.conf", 100),
                              ("throughput-performance", "/usr/lib/tuned/throughput-performance/tuned.conf", 100),
                              ("active-profile", "/etc/tuned/active_profile", 40))],
    *[Target(f"storage-{sc}-{name}", f"`{name}` of the recorded {sc} device through nvme_layout's "
             "build_device + classify", _storage(sc, name), [(f"storage/{sc}.{name}", text)],
             40 if name in ("lsblk", "wipefs", "wipefs-p1") else 30,
             json_per_input=30 if _is_json(text) else 0, shape=dict, check=_never_empty if sc in HOLDS_DATA else None)
      for sc, name, text in STORAGE],
    Target("mdadm-brief", "`mdadm --detail --brief`", _nv_parse.parse_mdadm_brief, [("sample", S.MDADM_BRIEF)],
           40, shape=(str, type(None))),
    Target("mountinfo", "/proc/self/mountinfo through nfd_labels, metrics_textfile and nvme_layout",
           lambda t: {"nfd": _nfd_labels.parse_mountinfo(t), "nvme": _nv_parse.parse_mountinfo(t)},
           [("sample", S.MOUNTINFO)], 120, shape=dict),
    Target("proc-mounts", "/proc/self/mounts", _hugepages.parse_mounts, [("sample", S.PROC_MOUNTS)], 100, shape=dict),
    Target("meminfo", "/proc/meminfo", _hugepages.parse_meminfo, [("sample", S.MEMINFO)], 100, shape=dict),
    Target("fstab", "/etc/fstab", _datapath_facts.parse_fstab, [("sample", S.FSTAB)], 100, shape=dict),
    Target("proc-cmdline", "/proc/cmdline (at most 4 KiB, the kernel's COMMAND_LINE_SIZE)",
           lambda t: {"shlex": _cmdline.split_cmdline(t), "topology": _ntp.parse_cmdline(t)},
           [("sample", S.CMDLINE)], 100, shape=dict, limit=4096),
    Target("grub-default", "/etc/default/grub", _cmdline.grub_assignments, [("sample", S.GRUB_DEFAULT)], 100,
           shape=list, limit=65536),
    Target("sysctl-d", "a sysctl.d file", _sysctl.parse_conf, [("sample", S.SYSCTL_CONF)], 100, shape=list),
    Target("nfd-features-d", "an NFD features.d file (datapath_facts and nfd-master's reading)",
           lambda t: {"facts": _datapath_facts.parse_features(t), "nfd": _nfd_rules.parse_features_file(t)},
           [("sample", S.FEATURES_D)], 100, shape=dict),
    Target("networkd-unit", "a systemd-networkd .link file", _netconf_systemd.parse_unit,
           [("sample", S.NETWORKD_LINK)], 100, shape=dict),
    Target("netplan-yaml", "netplan YAML (the interop cases' files and a full sample) through the strict reader",
           _netconf_yaml.parse, [("sample", S.NETPLAN)] + [
               # not the invalid case, and not our own drop-in (JSON, which the module never reads back)
               x for x in fx_glob("interop/net/netplan/*/root/*/netplan/*.yaml")
               if "/invalid/" not in x[0] and not x[0].endswith("90-aiinfra-datapath.yaml")],
           30, allowed=(_netconf_yaml.YamlSubsetError,), shape=(dict, list, str, type(None))),
    Target("ping", "iputils `ping` output (passed, local error)", lambda t: _path_check.parse_ping(1, t, ""),
           [("passed", S.PING_PASSED), ("local-error", S.PING_LOCAL_ERROR)], 60, shape=dict),
    Target("sha256-manifest", "a model's sha256sum manifest", lambda t: _mc_sources.parse_manifest(t, "manifest"),
           [("sample", S.MANIFEST)], 100, shape=list),
    Target("kubectl-node", "`kubectl get node -o json` (recorded OpenShift worker) through the audit's "
           "kubelet-hugepages check", _k8s_node,
           [("k8s/kubectl-get-node-cnfd1-worker-0.yaml",
             json.dumps(yaml.safe_load(fx("k8s/kubectl-get-node-cnfd1-worker-0.yaml"))))], 60, json_per_input=120,
           allowed=(AnsibleFilterError, yaml.YAMLError), shape=list),
    Target("sysfs-values", "single sysfs/procfs values: cpulist, PCI address, link speed and width, firmware "
           "version, size, page size, counter",
           lambda t: {"cpulist": _ntp.parse_cpulist(t), "bdf": _ntp.normalize_bdf(t), "speed": _ntp.parse_speed(t),
                      "width": _ntp.parse_width(t), "version": _version.compare_versions(t, "28.39.1002"),
                      "pagesize": _hugepages.parse_pagesize(t), "counter": _rdma_counters.parse_counter_value(t),
                      "split": _sysctl.split_value(t)},
           [(v, v) for v in S.CPULISTS + S.BDFS + S.SPEEDS + S.WIDTHS + S.VERSIONS + ["2048k", "1G", "12345"]],
           12, shape=dict),
    Target("size-parameter", "nvme_layout's size strings (select.size)", _nv_parse.parse_size,
           [(v, v) for v in S.SIZES], 25, shape=int),
]


def _inputs(target: Target) -> Iterator[tuple[str, str]]:
    texts = [text for _name, text in target.inputs]
    for index, (name, text) in enumerate(target.inputs):
        seed = sum(map(ord, target.id)) * 1000 + index
        others = [t for t in texts if t is not text] or [fx("network/ethtool/connectx7-i.txt")]
        for desc, new in variants(text, seed, target.per_input, others=others):
            yield f"{name}: {desc}", new
        if target.json_per_input:
            for desc, new in json_variants(text, seed + 1, target.json_per_input):
                yield f"{name}: JSON {desc}", new


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    f = frames[-1] if frames else None
    at = f" at {f.filename.rsplit('/', 2)[-1]}:{f.lineno}" if f else ""
    return f"{type(exc).__name__}: {str(exc)[:120]}{at}"


def fuzz(target: Target) -> tuple[Counter[str], list[str], list[str], list[str]]:
    """(outcomes, tracebacks, shape problems, rule problems) of every variant."""
    outcomes: Counter[str] = Counter()
    tracebacks: list[str] = []
    shapes: list[str] = []
    rules: list[str] = []
    refusals: list[str] = []
    for label, text in _inputs(target):
        if target.limit and len(text) > target.limit:
            text = text[:target.limit]
        try:
            result = target.fn(text)
        except target.allowed as exc:
            outcomes["refused"] += 1
            if not str(exc).strip():
                shapes.append(f"{label}: {type(exc).__name__} without a message")
            if len(refusals) < 2:
                refusals.append(f"{type(exc).__name__}: {str(exc)[:90]}")
            continue
        except Exception as exc:  # noqa: BLE001 - an escaping exception is the defect counted here
            outcomes["traceback"] += 1
            tracebacks.append(f"{label[:150]} -> {_where(exc)}")
            continue
        outcomes["parsed"] += 1
        if not isinstance(result, target.shape):
            shapes.append(f"{label[:150]}: returned {type(result).__name__}")
        else:
            try:
                json.dumps(result, default=_tuple_json)
            except (TypeError, ValueError) as exc:
                shapes.append(f"{label[:150]}: result does not JSON-encode: {exc}")
        if target.check:
            problem = target.check("", text, result)
            if problem:
                rules.append(f"{label[:150]}: {problem}")
    target.notes = refusals
    return outcomes, tracebacks, shapes, rules


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
def test_recorded_input_parses(target: Target) -> None:
    """The untouched recordings parse (so the fuzz starts from inputs the parser really reads)."""
    for name, text in target.inputs:
        result = target.fn(text[:target.limit] if target.limit else text)
        assert isinstance(result, target.shape), (name, result)


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
def test_hostile_tool_output(target: Target, reliability) -> None:
    allowed = " or ".join(e.__name__ for e in target.allowed)
    with reliability.case(f"parse-{target.id}", f"{target.what}: truncated, lines dropped/repeated/shuffled, "
                          "absurd numbers, hostile tokens, flipped bytes, spliced"
                          + (", JSON nodes retyped/deleted/nested" if target.json_per_input else ""),
                          area="tool output") as case:
        outcomes, tracebacks, shapes, rules = fuzz(target)
        tried = sum(outcomes.values())
        case.hostile(tried)
        case.faults(tried)
        case.traceback(len(tracebacks))
        case.did(f"{tried} variants of {len(target.inputs)} recorded input(s): parsed {outcomes['parsed']}, "
                 f"refused with {allowed} {outcomes['refused']}, tracebacks {outcomes['traceback']}"
                 + (f"; e.g. {target.notes[0]}" if target.notes else ""))
        for tb in tracebacks[:3]:
            case.finding("traceback: " + tb)
        for problem in (shapes + rules)[:3]:
            case.finding(problem)
        assert tried >= len(target.inputs) * target.per_input * 0.9, tried
        assert not tracebacks, tracebacks[:5]
        assert not shapes, shapes[:5]
        assert not rules, rules[:5]
        kinds = target.shape if isinstance(target.shape, tuple) else (target.shape,)
        shapes_text = "/".join(t.__name__ for t in kinds)
        case.checked(f"no exception other than {allowed} (with a message) escaped; every result is {shapes_text} "
                     "and JSON-encodes" + ("; a device holding data is never classified empty" if target.check else ""))


# -- node_topology end to end: a recorded machine's sysfs, its tools answering mutated output -------------

MACHINE = "asus-esc8000a-e12"
LSPCI, SMI = "/usr/bin/lspci", "/usr/bin/nvidia-smi"
TOPO_TOOLS = {
    "lspci -vvv -D": ((LSPCI, "-vvv", "-D"), fx(f"topology/{MACHINE}/lspci-vvv.txt"), 30),
    "nvidia-smi topo -m": ((SMI, "topo", "-m"), fx(f"topology/{MACHINE}/nvidia-smi-topo-m.txt"), 30),
    "nvidia-smi -q -x": ((SMI, "-q", "-x"), fx("topology/nvidia-smi-q-x-gtx980.xml"), 20),
}


@pytest.fixture(scope="module")
def recorded_machine(tmp_path_factory: pytest.TempPathFactory) -> SysRoot:
    root = tmp_path_factory.mktemp("machine")
    node = SysRoot(root)
    machine(node, MACHINE)
    return node


def test_node_topology_on_hostile_tool_output(recorded_machine: SysRoot, reliability) -> None:
    with reliability.case("node-topology-hostile-tools", f"node_topology (whole capability) on the recorded "
                          f"{MACHINE} sysfs, one of lspci -vvv / nvidia-smi topo -m / nvidia-smi -q -x answering a "
                          "mutated output, the others as recorded", area="tool output") as case:
        outcomes: Counter[str] = Counter()
        tracebacks: list[str] = []
        for tool, (_argv, recorded, count) in TOPO_TOOLS.items():
            for desc, text in variants(recorded, sum(map(ord, tool)), count):
                def answer(got: list[str], tool: str = tool, text: str = text) -> tuple[int, str, str] | None:
                    for name, (want, rec, _n) in TOPO_TOOLS.items():
                        if tuple(got) == want:
                            return 0, text if name == tool else rec, ""
                    return None
                runner = FakeRunner([answer], which={"lspci": LSPCI, "nvidia-smi": SMI})
                try:
                    result = run(_nt.NodeTopology, {"root": str(recorded_machine.root), "lspci": True,
                                                    "nvidia_smi": True}, Node(runner, str(recorded_machine.root)))
                except Exception as exc:  # noqa: BLE001
                    outcomes["traceback"] += 1
                    tracebacks.append(f"{tool}: {desc[:100]} -> {_where(exc)}")
                    continue
                outcomes["refused" if result.get("failed") else "read"] += 1
                json.dumps(result)
        tried = sum(outcomes.values())
        case.hostile(tried)
        case.faults(tried)
        case.traceback(len(tracebacks))
        case.did(f"{tried} runs: topology read {outcomes['read']}, failed cleanly {outcomes['refused']}, "
                 f"tracebacks {outcomes['traceback']}")
        for tb in tracebacks[:3]:
            case.finding("traceback: " + tb)
        assert not tracebacks, tracebacks[:5]
        case.checked("every run returned a result dict (facts or a failure with msg) that JSON-encodes; "
                     "no exception escaped the capability runner")


# -- node files with bytes that are not UTF-8, through whole modules ---------------------------------------

LATIN1 = "# r\xe9glage de M\xfcller\n".encode("latin-1")


def _tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


NON_UTF8_FILES = {
    "/etc/fstab": LATIN1 + S.FSTAB.encode(),
    "/etc/default/grub": LATIN1 + S.GRUB_DEFAULT.encode(),
    "/etc/sysctl.d/10-admin.conf": LATIN1 + b"net.core.somaxconn = 4096\nkernel.hostname = n\xf6de1\n",
    "/etc/kubernetes/node-feature-discovery/features.d/admin": LATIN1 + b"example.com/owner=M\xfcller\n",
    "/proc/cmdline": b"BOOT_IMAGE=/vmlinuz root=/dev/vda1 comment=\xe9t\xe9\n",
    "/proc/sys/kernel/hostname": b"n\xf6de1\n",
    "/proc/sys/vm/swappiness": b"60\n",
    "/proc/meminfo": S.MEMINFO.encode() + b"Caf\xe9: 1 kB\n",
    "/proc/self/mounts": S.PROC_MOUNTS.encode() + b"/dev/sdc1 /mnt/caf\xe9 ext4 rw 0 0\n",
    "/proc/self/mountinfo": S.MOUNTINFO.encode() + b"99 28 8:33 / /mnt/caf\xe9 rw - ext4 /dev/sdc1 rw\n",
    "/etc/tuned/active_profile": b"aiinfra-datapath\n",
    "/etc/tuned/aiinfra-datapath/tuned.conf": LATIN1 + b"[main]\nsummary=M\xfcller\n[sysctl]\nvm.swappiness=10\n",
}


def test_node_files_not_utf8_through_modules(
        run_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reliability) -> None:
    """Latin-1 bytes in files an admin edits (fstab, grub, sysctl.d, features.d, a TuneD profile) and in
    kernel values (hostname, a mount point): every module that reads them, in check mode and for real."""
    from ansible.module_utils import basic
    from ansible_collections.aiinfra.datapath.plugins.modules import (
        datapath_facts,
        hugepages,
        kernel_cmdline,
        nfd_labels,
        sysctl_profile,
        tuned_profile,
    )

    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, args, *a, **kw: (127, "", "blocked"))
    calls: dict[str, tuple[Any, dict[str, Any]]] = {
        "datapath_facts": (datapath_facts, {"sysctl_keys": ["vm.swappiness", "kernel.hostname"]}),
        "sysctl_profile": (sysctl_profile, {"keys": {"vm.swappiness": 10, "kernel.hostname": "node1"}}),
        "hugepages": (hugepages, {"pages": [{"size": "2M", "count": 0}]}),
        "kernel_cmdline": (kernel_cmdline, {"args": ["iommu=pt"]}),
        "nfd_labels": (nfd_labels, {"labels": {"aiinfra.io/x": "y"}}),
        "tuned_profile": (tuned_profile, {"sysctl": {"vm.swappiness": {"value": "10"}}, "activate": False}),
    }
    with reliability.case("node-files-not-utf8", "node files with Latin-1 bytes (fstab, grub, sysctl.d, NFD "
                          "features.d, TuneD profile comments; kernel.hostname, a mount point, /proc/cmdline) "
                          "read by datapath_facts, sysctl_profile, hugepages, kernel_cmdline, nfd_labels, "
                          "tuned_profile, check mode and real runs", area="node files") as case:
        outcomes: Counter[str] = Counter()
        tracebacks, changed_in_check, lost = [], [], []
        for name, (module, args) in calls.items():
            for check_mode in (True, False):
                root = tmp_path / f"{name}-{int(check_mode)}"
                _tree(root, NON_UTF8_FILES)
                before = _snapshot(root)
                try:
                    run_module(module.main, dict(args, root=str(root)), check_mode=check_mode)
                    outcomes["accepted"] += 1
                except AssertionError as exc:
                    if not str(exc).startswith("module failed:"):
                        raise
                    outcomes["refused"] += 1
                except Exception as exc:  # noqa: BLE001
                    outcomes["traceback"] += 1
                    tracebacks.append(f"{name} (check={check_mode}): {_where(exc)}")
                    continue
                after = _snapshot(root)
                if check_mode and {k: v for k, v in after.items() if not k.startswith("run/")} != \
                        {k: v for k, v in before.items() if not k.startswith("run/")}:
                    changed_in_check.append(name)
                for rel, data in before.items():
                    if rel == "etc/tuned/aiinfra-datapath/tuned.conf":
                        continue  # tuned_profile's own profile: the module writes it whole
                    if rel.startswith("etc/") and rel in after and LATIN1 in data and LATIN1 not in after[rel]:
                        lost.append(f"{name}: {rel} lost the admin's Latin-1 line")
        tried = sum(outcomes.values())
        case.hostile(tried)
        case.faults(tried)
        case.traceback(len(tracebacks))
        case.did(f"{tried} module runs: accepted {outcomes['accepted']}, refused {outcomes['refused']}, "
                 f"tracebacks {outcomes['traceback']}")
        for tb in tracebacks[:3]:
            case.finding("traceback: " + tb)
        assert not tracebacks, tracebacks
        assert not changed_in_check, changed_in_check
        assert not lost, lost
        case.checked("no traceback; check mode changed no file; a file the module rewrote kept the admin's "
                     "Latin-1 bytes unchanged")


def test_copy_of_targets_is_deterministic() -> None:
    """Two generations of one target's variants are identical (seeded), so a failure is reproducible."""
    target = next(t for t in TARGETS if t.id == "ethtool-i")
    first = [d for d, _t in _inputs(target)][:50]
    second = [d for d, _t in _inputs(copy.copy(target))][:50]
    assert first == second and len(set(first)) == len(first)
