"""Hostile spec values through the `datapath` CLI (validate) and validate_spec.

Every hostile value must be rejected at validation (exit 1 with an error naming the field,
or exit 2 for unusable YAML), with no process started while validating: ``subprocess`` and
``os.system`` are replaced by tripwires for the whole test. Hypothesis-based runs come from
the existing property tests (tests/unit/plugins/plugin_utils/cluster_spec/test_properties.py) plus a
run of our own over the hostile-string alphabet.
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import validate_spec
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.cli import main as datapath_cli
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec.loader import LoadError, load_spec_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest_plugins = ["reliability_log"]

from hostile_text import json_variants, variants  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BASE: dict[str, Any] = {
    "version": 1,
    "fabrics": [
        {"name": "mgmt", "purpose": "management", "kind": "ethernet", "mtu": 1500, "subnets": ["192.0.2.0/24"]},
        {"name": "rail0", "purpose": "rdma", "kind": "roce", "mtu": 9000, "subnets": ["10.100.0.0/20"],
         "roce": {"dscp": 26, "priority": 3, "pfc_priorities": [3], "ecn": True,
                  "cnp": {"dscp": 48, "priority": 6}}},
    ],
    "profiles": [
        {"name": "gpu",
         "sysctl": {"vm.zone_reclaim_mode": 1},
         "hugepages": {"pages": [{"size": "1G", "count": 8, "numa_split": "even"}],
                       "mounts": [{"size": "1G", "path": "/dev/hugepages-1G"}]},
         "interfaces": [{"name": "eno1", "fabric": "mgmt"},
                        {"match": {"pci": "0000:e6:00.0"}, "fabric": "rail0"}],
         "storage": {"devices": ["/dev/disk/by-id/nvme-A", "/dev/disk/by-id/nvme-B"],
                     "raid": {"level": 0}, "mount": {"path": "/mnt/model-cache"},
                     "directories": [{"path": "models", "mode": "0755"}], "reserve": "10GiB"},
         "k8s": {"labels": {"aiinfra.io/nvme-cache": "true"}, "local_volume_class": "local-nvme"}},
    ],
}

NAMES = ["eth0 eth1", "eth0;reboot", "$(reboot)", "`id`", "../../etc", "eth0/../x", "eth0\nx", "",
         "a" * 64, "eth0|cat", "eth0&&id", "eth0${IFS}x", "*", "ä"]
PATHS = ["/", "/etc", "/etc/ssh", "/mnt/../etc", "/mnt/model-cache/../../root", "relative/cache", "/proc/x",
         "/sys/x", "/boot", "/usr", "/var/lib/../../etc", "/mnt/x;reboot", "/mnt/$(id)", "/mnt/a b", "/dev/sda"]
DEVICES = ["/dev/../etc/passwd", "/dev/nvme0n1;reboot", "/dev/$(id)", "nvme0n1", "/etc/passwd", "/dev/a b",
           "/dev/disk/by-id/../../../etc/shadow"]
NUMBERS: list[tuple[tuple[Any, ...], Any]] = [
    (("fabrics", 0, "mtu"), v) for v in (-1, 0, 67, 10**9, 2**64, 1.5, "9000; reboot", None, True)
] + [
    (("profiles", 0, "hugepages", "pages", 0, "count"), v) for v in (-1, 10**15, 2**70, 1.5, "8;id")
] + [
    (("fabrics", 1, "roce", "dscp"), v) for v in (-1, 64, 10**6)
] + [
    (("profiles", 0, "storage", "reserve"), v) for v in ("-5GiB", "999999999PiB", "1e400", "x")
] + [
    (("profiles", 0, "sysctl"), {k: 1}) for k in ("../../etc/passwd", "vm/../../x", "a b", "x;reboot", "$(id)")
] + [
    (("profiles", 0, "k8s", "labels"), {k: "v"}) for k in ("a b", "$(id)", "../x", "x" * 400)
]


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    new = copy.deepcopy(doc)
    cur: Any = new
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value
    return new


def _cases() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name in NAMES:
        out.append((f"interface name {name!r}", _set(BASE, ("profiles", 0, "interfaces", 0, "name"), name)))
        out.append((f"fabric name {name!r}", _set(BASE, ("fabrics", 0, "name"), name)))
    for path in PATHS:
        out.append((f"mount point {path!r}", _set(BASE, ("profiles", 0, "storage", "mount", "path"), path)))
        out.append((f"hugetlbfs mount {path!r}", _set(BASE, ("profiles", 0, "hugepages", "mounts", 0, "path"), path)))
    for rel in ("../../etc", "/etc", "a/../../b", "x;id"):
        out.append((f"cache directory {rel!r}", _set(BASE, ("profiles", 0, "storage", "directories", 0, "path"), rel)))
    for dev in DEVICES:
        out.append((f"device {dev!r}", _set(BASE, ("profiles", 0, "storage", "devices", 0), dev)))
    for path, value in NUMBERS:
        out.append(("%s = %r" % (".".join(map(str, path)), value), _set(BASE, path, value)))
    return out


class Tripwire:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []

        def trip(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(repr(args)[:200])
            raise AssertionError("a process was started during validation: %r" % (args,))

        monkeypatch.setattr(subprocess, "Popen", trip)
        monkeypatch.setattr(os, "system", trip)
        monkeypatch.setattr(os, "execv", trip)
        monkeypatch.setattr(os, "execvp", trip)


def _cli(tmp_path: Path, doc: Any, name: str = "spec.yml") -> tuple[int, dict[str, Any] | None, str]:
    path = tmp_path / name
    text = doc if isinstance(doc, str) else json.dumps({"datapath": doc})  # JSON is YAML
    path.write_text(text)
    out = io.StringIO()
    rc = datapath_cli(["validate", str(path), "--format", "json"], out=out)
    try:
        return rc, json.loads(out.getvalue()), out.getvalue()
    except ValueError:
        return rc, None, out.getvalue()


def test_base_spec_is_valid(tmp_path: Path) -> None:
    rc, data, _stderr = _cli(tmp_path, BASE)
    assert rc == 0 and data is not None and data["valid"], data


def test_hostile_values_rejected_at_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], reliability) -> None:
    wire = Tripwire(monkeypatch)
    cases = _cases()
    accepted, unclear = [], []
    with reliability.case("hostile-spec-values", f"{len(cases)} hostile values (interface/fabric names with "
                          "spaces, ;, $(), ../; mount points outside allowed roots; device paths; absurd numbers; "
                          "hostile sysctl keys and labels) through `datapath validate`", area="spec") as case:
        case.hostile(len(cases))
        case.faults(len(cases))
        examples = []
        for label, doc in cases:
            rc, data, raw = _cli(tmp_path, doc)
            if rc == 0:
                accepted.append(label)
                continue
            errors = (data or {}).get("errors") or []
            if rc != 1 or not errors or not all(e.get("path", "").startswith("datapath") and e.get("message")
                                                for e in errors):
                unclear.append(f"{label}: rc={rc} {raw[:200]}")
            elif len(examples) < 3:
                examples.append(f"{label} -> {errors[0]['path']}: {errors[0]['message']}"[:200])
        case.did(f"rejected {len(cases) - len(accepted)}/{len(cases)} with exit 1 and a field path; "
                 f"accepted {len(accepted)}; e.g. " + " | ".join(examples))
        for label in accepted:
            case.finding(f"spec accepted hostile value {label}")
        assert not wire.calls
        assert not unclear, unclear
        assert not accepted, accepted
        case.checked("exit 1, every error has a `datapath...` path and a message; no process started "
                     "while validating (subprocess/os.system tripwires)")


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\ndatapath: {{version: 1, fabrics: *a{levels - 1}}}\n"


YAML_CASES = {
    "alias bomb (billion laughs, 9 levels x 9)": _bomb(),
    "alias bomb, wide (2000 aliases)":
        "x: &x [1]\ndatapath: {version: 1, fabrics: [" + ",".join(["*x"] * 2000) + "]}\n",
    "nested 500 levels deep": "datapath: " + "[" * 500 + "]" * 500 + "\n",
    "nested 5000 levels deep (flow mappings)": "datapath: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
    "17 MiB document": "datapath:\n  version: 1\n  x: \"" + "A" * (17 * 1024 * 1024) + "\"\n",
    "5000 fabrics (large but shallow)": json.dumps({"datapath": {"version": 1, "fabrics": [
        {"name": f"f{i}", "purpose": "rdma", "kind": "roce", "mtu": 9000} for i in range(5000)]}}),
    "recursive alias (self-reference)": "datapath: &d {version: 1, fabrics: [*d]}\n",
    "binary garbage": "\x00\x01\x02datapath: [\n",
    "python object tag": "datapath: !!python/object/apply:os.system ['id']\n",
}


def test_hostile_yaml_documents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reliability) -> None:
    for label, text in YAML_CASES.items():
        with reliability.case("yaml-" + label.split(" (", maxsplit=1)[0].replace(" ", "-").replace(",", ""),
                              f"spec file: {label}", area="spec") as case:
            case.hostile(1)
            wire = Tripwire(monkeypatch)
            err = io.StringIO()
            monkeypatch.setattr(sys, "stderr", err)
            rc, data, raw = _cli(tmp_path, text)
            monkeypatch.undo()
            message = (err.getvalue().strip() or raw.strip()).replace(str(tmp_path) + "/", "")[:220]
            case.did(f"exit {rc}: {message}")
            elapsed = case.elapsed()
            if len(text) > 100_000 and elapsed > 1:
                cap_s = 16 * 1024 * 1024 / (len(text) / elapsed)
                case.did(f"{len(text) / 1024:.0f} KiB validated in {elapsed:.1f} s")
                if cap_s > 60:
                    case.finding(f"spec loading reads {len(text) / 1024 / elapsed:.0f} KiB/s (pure-Python YAML), so a "
                                 f"document just under the 16 MiB cap would take about {cap_s:.0f} s to be refused: "
                                 "lower MAX_BYTES in plugins/plugin_utils/cluster_spec/loader.py (e.g. 2 MiB) or count "
                                 "nodes while parsing")
            assert rc in (1, 2), (rc, message)
            assert message and "Traceback" not in message and "Traceback" not in raw
            assert not wire.calls
            case.checked("refused (exit 1/2) with a one-line message; no traceback; no process started")


def test_real_cli_process_on_alias_bomb(tmp_path: Path, reliability) -> None:
    """The installed console script, as a user runs it, with a memory limit."""
    path = tmp_path / "bomb.yml"
    path.write_text(_bomb(12))
    with reliability.case("cli-alias-bomb-process", "`datapath validate` process on a 12-level alias bomb "
                          "(9^12 nodes if expanded), under a 1 GiB address-space limit", area="spec") as case:
        case.hostile(1)
        proc = subprocess.run(["/bin/sh", "-c", f"ulimit -v 1048576; exec {REPO}/.venv/bin/datapath validate {path}"],
                              capture_output=True, text=True, timeout=60, check=False)
        case.did(f"exit {proc.returncode}: {proc.stderr.strip()[:200]}")
        assert proc.returncode == 2, proc.stderr[-500:]
        assert "Traceback" not in proc.stderr
        case.checked("exit 2 within the memory limit, one-line message, no traceback")


HOSTILE_ALPHABET = st.text(alphabet=st.sampled_from(list(" ;$()`|&../\\\n\t*?~'\"<>-_aZ09ä\x00")),
                           min_size=0, max_size=24)
PROPERTY_RUNS = {"n": 0, "accepted": []}


def test_property_hostile_strings(reliability) -> None:
    @settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
              database=None)
    @given(HOSTILE_ALPHABET, st.sampled_from([
        ("profiles", 0, "interfaces", 0, "name"), ("profiles", 0, "storage", "mount", "path"),
        ("profiles", 0, "storage", "devices", 0), ("fabrics", 0, "name"),
        ("profiles", 0, "hugepages", "mounts", 0, "path")]))
    def run(value: str, path: tuple[Any, ...]) -> None:
        PROPERTY_RUNS["n"] += 1
        errors = validate_spec(_set(BASE, path, value))
        if not errors:
            PROPERTY_RUNS["accepted"].append((path[-2] if path[-1] == 0 else path[-1], value))

    with reliability.case("property-hostile-strings", "hypothesis: random strings of space ; $ ( ) backtick | & "
                          ". / backslash newline * quotes in interface/fabric names, mount points, device paths",
                          area="spec") as case:
        run()
        n = PROPERTY_RUNS["n"]
        acc = PROPERTY_RUNS["accepted"]
        case.hostile(n, property_based=n)
        case.faults(n)
        # a value is acceptable only if it is a plain name/path: no shell metacharacters, no whitespace, no ..
        bad = [(f, v) for f, v in acc if any(c in v for c in " ;$()`|&\\\n\t*?~'\"<>\x00") or ".." in v]
        accepted = sorted({value for _field, value in acc})[:6]
        case.did(f"{n} runs: rejected {n - len(acc)}, accepted {len(acc)}: {accepted}")
        for field, value in bad[:5]:
            case.finding(f"spec accepted {field}={value!r}")
        assert not bad, bad[:10]
        case.checked("every accepted value is free of shell metacharacters, whitespace and `..`")


def test_existing_property_suite_counts(reliability) -> None:
    """Run the existing spec property tests and count their hypothesis cases."""
    with reliability.case("property-spec-suite", "existing hypothesis suite: random documents, mutated specs, "
                          "valid specs planned twice (tests/unit/plugins/plugin_utils/cluster_spec/test_properties.py)",
                          area="spec") as case:
        proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "pytest"), "-q", "-s", "-p", "no:randomly",
                               "tests/unit/plugins/plugin_utils/cluster_spec/test_properties.py"],
                              capture_output=True, text=True, cwd=REPO, timeout=600, check=False)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("hypothesis cases:")), "")
        total = int(line.rsplit("total=", 1)[1]) if "total=" in line else 0
        case.hostile(total, property_based=total)
        case.faults(total)
        case.did(f"pytest exit {proc.returncode}; {line or proc.stdout[-200:]}")
        assert proc.returncode == 0, proc.stdout[-2000:]
        assert total > 0
        case.checked("every generated document gave SpecError(s) with a path or a deterministic plan; "
                     "no other exception")


def _judge_errors(errors: Any) -> str | None:
    """None when ``errors`` is what validate_spec promises (a list of errors, each with a path and a message)."""
    if not isinstance(errors, list):
        return f"validate_spec returned {type(errors).__name__}"
    for error in errors:
        if not (getattr(error, "path", None) and getattr(error, "message", None)):
            return f"an error without a path or message: {error!r}"[:200]
    return None


def _validate_counted(doc: Any, desc: str, where: str, outcomes: dict[str, int], problems: list[str]) -> None:
    """validate_spec on one mutated document: counted as rejected, valid or traceback; a traceback or an
    error without a path or message is a problem."""
    try:
        errors = validate_spec(doc)
    except Exception as exc:  # noqa: BLE001 - an escaping exception is the defect counted here
        outcomes["traceback"] += 1
        problems.append(f"{desc[:120]}: {where}{type(exc).__name__}: {exc}"[:300])
        return
    problem = _judge_errors(errors)
    if problem:
        problems.append(f"{desc[:120]}: {problem}")
    outcomes["rejected" if errors else "valid"] += 1


def _record_counts(case: Any, outcomes: dict[str, int], problems: list[str]) -> int:
    """The counts of a mutation run into its reliability row (the first problems as findings); the total."""
    tried = sum(outcomes.values())
    case.hostile(tried)
    case.faults(tried)
    case.traceback(outcomes["traceback"])
    for problem in problems[:3]:
        case.finding(problem)
    return tried


def test_seeded_spec_mutations(monkeypatch: pytest.MonkeyPatch, reliability) -> None:
    """The base spec as a JSON document, one node at a time retyped (null, bool, 2**64, 1e308, '', '$(reboot)',
    '../../etc/shadow', 5000 characters, [], {}, nested 200 deep), deleted, a list turned into an object or its
    values, a value replaced by its own JSON text; 600 variants from a fixed seed, through validate_spec."""
    wire = Tripwire(monkeypatch)
    with reliability.case("seeded-spec-mutations", "600 seeded mutations of a valid spec document (a node "
                          "retyped, made absurd or hostile, deleted, nested 200 deep) through validate_spec",
                          area="spec") as case:
        outcomes: dict[str, int] = {"rejected": 0, "valid": 0, "traceback": 0}
        problems: list[str] = []
        for desc, text in json_variants(json.dumps(BASE), 20261202, 600):
            try:
                doc = json.loads(text)
            except ValueError:
                doc = text  # a text mutation broke the JSON: the document is that string
            _validate_counted(doc, desc, "", outcomes, problems)
        tried = _record_counts(case, outcomes, problems)
        case.did(f"{tried} documents: rejected with errors {outcomes['rejected']}, valid {outcomes['valid']} "
                 f"(a mutation the spec allows, e.g. an optional key deleted), tracebacks {outcomes['traceback']}")
        assert tried == 600
        assert not problems, problems[:5]
        assert not wire.calls
        case.checked("validate_spec returned a list for every document; every error has a path and a message; "
                     "no exception escaped; no process started")


def test_seeded_spec_file_mutations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reliability) -> None:
    """The base spec as the YAML vars file a user writes, its bytes mutated (truncated, lines dropped or
    repeated, numbers made absurd, hostile tokens, invalid UTF-8, CRLF, binary garbage), read by the loader
    as the CLI reads it, then validated."""
    wire = Tripwire(monkeypatch)
    text = yaml.safe_dump({"datapath": BASE}, sort_keys=False)
    path = tmp_path / "datapath.yml"
    with reliability.case("seeded-spec-file-mutations", "400 seeded byte-level mutations of a valid spec vars file "
                          "(truncated, lines dropped/repeated/shuffled, absurd numbers, hostile tokens, invalid UTF-8, "
                          "CRLF, binary) through load_spec_file + validate_spec", area="spec") as case:
        outcomes: dict[str, int] = {"load refused": 0, "rejected": 0, "valid": 0, "traceback": 0}
        problems: list[str] = []
        example = ""
        for desc, variant in variants(text, 20261203, 400):
            path.write_bytes(variant.encode("utf-8", "surrogateescape"))
            try:
                doc = load_spec_file(str(path))
            except LoadError as exc:
                outcomes["load refused"] += 1
                if not str(exc).strip():
                    problems.append(f"{desc[:120]}: LoadError without a message")
                example = example or str(exc).replace(str(tmp_path) + "/", "")[:120]
                continue
            except Exception as exc:  # noqa: BLE001
                outcomes["traceback"] += 1
                problems.append(f"{desc[:120]}: load: {type(exc).__name__}: {exc}"[:300])
                continue
            _validate_counted(doc, desc, "validate: ", outcomes, problems)
        tried = _record_counts(case, outcomes, problems)
        case.did(f"{tried} files: refused by the loader {outcomes['load refused']} (e.g. {example}), rejected by "
                 f"validation {outcomes['rejected']}, valid {outcomes['valid']}, tracebacks {outcomes['traceback']}")
        assert tried == 400
        assert not problems, problems[:5]
        assert not wire.calls
        case.checked("every file was refused with a LoadError message or validated into a list of errors with "
                     "paths; no exception escaped; no process started")
