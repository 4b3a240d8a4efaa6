"""``datapath`` — validate, plan and describe a cluster spec from a pipeline.

Exit codes: 0 valid, 1 invalid (or, with ``--strict``, warnings), 2 unusable input (missing file, bad
YAML, an inventory ansible-core cannot read, unknown host, ...); stderr says why when it is not 0.
Reports: text, JSON, JUnit, SARIF 2.1.0 (docs/pipelines.md).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ._pydantic import MissingPydantic
from .api import check_inventory, dumps_plan, parse_spec, validate_spec
from .errors import SpecError, SpecValidationError
from .loader import MAX_BYTES, READERS, Inventory, LoadError, load_target, load_yaml_text
from .plan import Planner
from .sarif import sarif
from .schema import schema_text
from .sources import SourceMap, YamlNote, collecting, spec_sources
from .spec_warnings import SpecWarning, WarningContext, run_warnings

EXIT_OK, EXIT_INVALID, EXIT_UNUSABLE = 0, 1, 2
FORMATS = ("text", "json", "junit", "sarif")
# Characters XML 1.0 cannot carry (a host name or a value in a message could hold one).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` with the characters XML 1.0 cannot carry written as ``\\xNN``."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _load(args: argparse.Namespace) -> Inventory:
    return load_target(args.target, getattr(args, "inventory_reader", "auto"))


@dataclass
class Report:
    """The outcome of ``datapath validate``: what every format writes."""

    target: str
    inv: Inventory | None = None
    errors: list[SpecError] = field(default_factory=list)
    warnings: list[SpecWarning] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Hosts whose node checks did not run, with the reason."""
    strict: bool = False
    unusable: str | None = None

    @property
    def code(self) -> int:
        if self.unusable is not None:
            return EXIT_UNUSABLE
        return EXIT_INVALID if self.errors or (self.strict and self.warnings) else EXIT_OK

    def why(self) -> str:
        """Why the exit code is what it is, in one line (stderr)."""
        if self.unusable is not None:
            return f"exit 2: the input cannot be used: {self.unusable.splitlines()[0]}"
        parts = []
        if self.errors:
            parts.append(f"{len(self.errors)} error(s)")
        if self.strict and self.warnings:
            parts.append(f"{len(self.warnings)} warning(s) with --strict")
        notes = []
        hosts = len({e.host for e in self.errors if e.host})
        if hosts:
            notes.append(f"{hosts} host(s) with node errors")
        if self.skipped:
            notes.append(f"{len(self.skipped)} host(s) not checked until the spec's errors are fixed")
        return f"exit {self.code}: " + " and ".join(parts) + f" in {self.target}" + \
            (f" ({'; '.join(notes)})" if notes else "")


def _located(err: SpecError, source: SourceMap | None) -> SpecError:
    if source is None or err.file is not None or not err.path.startswith("datapath"):
        return err
    file, line = source.locate(err.path)
    return dataclasses.replace(err, file=file, line=line)


def _validate(inv: Inventory, target: str, notes: list[YamlNote], strict: bool = False) -> Report:
    """Spec errors, every host's node errors and the warnings; each distinct `datapath` of the inventory
    once, each error and warning with the file and line it came from where that is known."""
    report = Report(target, inv, strict=strict)
    parts = inv.specs() if inv.hosts else [(inv.spec, [])]
    parts = [(spec, hosts) for spec, hosts in parts if hosts or not inv.hosts]
    if inv.hosts:
        sources = spec_sources(target, [spec for spec, _hosts in parts], load_yaml_text)
    else:
        sources = [SourceMap(target, _text(target))]
    for index, ((spec, hosts), source) in enumerate(zip(parts, sources, strict=True)):
        if spec is None and inv.hosts:
            report.errors.extend(SpecError("datapath", "the host has no `datapath` variable",
                                           "define datapath in group_vars/all (or for one of the host's groups)", host)
                                 for host in hosts)
            continue
        if not inv.hosts:
            found, skipped, members = validate_spec(spec), {}, None
        else:
            # every host: the inventory's own mapping (check_inventory sorts it), not a copy of 100,000 entries
            members = inv.hosts if len(hosts) == len(inv.hosts) else {host: inv.hosts[host] for host in hosts}
            result = check_inventory(spec, members)
            found, skipped = result.errors, result.skipped
        if spec is not inv.spec:  # a `datapath` that only these hosts have (a group or host override)
            names = ", ".join(hosts[:3]) + (", ..." if len(hosts) > 3 else "")
            note = f" (the `datapath` of {len(hosts)} host(s): {names})"
            found = [e if e.host else dataclasses.replace(e, message=e.message + note, host=hosts[0]) for e in found]
        report.errors.extend(_located(e, source) for e in found)
        report.skipped.update(skipped)
        context = WarningContext(spec, members, notes if index == 0 else (), source)
        report.warnings.extend(run_warnings(context))
    report.warnings = sorted(set(report.warnings), key=lambda w: (w.file or "", w.line or 0, w.path, w.message))
    return report


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(MAX_BYTES + 1)
    except (OSError, UnicodeDecodeError):
        return ""


def _first(errors: list[SpecError]) -> str:
    return errors[0].render().splitlines()[0][:500] if errors else ""


def _detail(err: SpecError | SpecWarning) -> str:
    where = err.location() if isinstance(err, SpecError) else \
        (f"{err.file}:{err.line}" if err.file and err.line else err.file or "")
    return (f"{where}: " if where else "") + err.render()


def _junit(errors: list[SpecError], inv: Inventory | None, target: str, unusable: str | None = None,
           warnings: list[SpecWarning] | None = None, skipped: dict[str, str] | None = None) -> str:
    """One test case for the spec and one per host: a failing case's message is its first error and its
    text every error with the file and line it came from; a host whose checks could not run (a part of
    the spec it needs is broken) is ``<skipped>`` with the reason, not passed; warnings are the
    ``<system-out>`` of their case (the spec's when they name no host).

    Unusable input (exit 2) is one test case with an ``<error>``, so a pipeline that publishes the
    report shows why. Validated by tests/interop/schemas/junit.xsd (tests/interop/test_spec_junit.py).
    """
    suite = ET.Element("testsuite", name="datapath.validate")
    cases: dict[str, list[SpecError]] = {"spec": []}
    notes: dict[str, list[SpecWarning]] = {}
    for host in (inv.hosts if inv else ()):
        cases[f"host {host}"] = []
    for err in errors:
        cases.setdefault(f"host {err.host}" if err.host else "spec", []).append(err)
    for warning in warnings or ():
        notes.setdefault(f"host {warning.host}" if warning.host and f"host {warning.host}" in cases else "spec",
                         []).append(warning)
    failures = skips = 0
    if unusable is not None:
        case = ET.SubElement(suite, "testcase", classname="datapath", name="input", file=xml_text(target))
        error = ET.SubElement(case, "error", message=xml_text(unusable.splitlines()[0][:300]), type="LoadError")
        error.text = xml_text(unusable)
        cases = {}
    for name, errs in cases.items():
        first = next((e.file for e in errs if e.file), None)
        case = ET.SubElement(suite, "testcase", classname="datapath", name=xml_text(name),
                             file=xml_text(first or target))
        why = (skipped or {}).get(name[5:]) if name.startswith("host ") else None
        if errs:
            failures += 1
            fail = ET.SubElement(case, "failure", message=xml_text(_first(errs)),
                                 type="SpecError" if len(errs) == 1 else f"SpecError ({len(errs)} errors)")
            fail.text = xml_text("\n".join(_detail(e) for e in errs))
        elif why is not None:
            skips += 1
            ET.SubElement(case, "skipped", message=xml_text(why)).text = xml_text(why)
        if notes.get(name):
            out = ET.SubElement(case, "system-out")
            out.text = xml_text("\n".join(_detail(w) for w in notes[name]))
    suite.set("tests", str(len(cases) + (unusable is not None)))
    suite.set("failures", str(failures))
    suite.set("errors", str(int(unusable is not None)))
    suite.set("skipped", str(skips))
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def _json(report: Report) -> str:
    if report.unusable is not None:
        data: dict[str, Any] = {"valid": False, "usable": False, "target": report.target, "error": report.unusable,
                                "errors": [], "warnings": []}
    else:
        inv = report.inv
        data = {"valid": not report.errors, "usable": True, "target": report.target,
                "hosts": len(inv.hosts) if inv else 0, "reader": inv.reader if inv else "file",
                "errors": [e.as_dict() for e in report.errors], "warnings": [w.as_dict() for w in report.warnings],
                "skipped": [{"host": h, "reason": r} for h, r in sorted(report.skipped.items())],
                "strict": report.strict, "exit_code": report.code}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _text_report(report: Report) -> str:
    lines = []
    for err in report.errors:
        lines.append(err.render() + (f" [{err.location()}]" if err.file else ""))
    lines.extend(w.render() for w in report.warnings)
    for host, why in sorted(report.skipped.items()):
        lines.append(f"host {host}: {why}")
    inv = report.inv
    tail = f", {len(report.warnings)} warning(s)" if report.warnings else ""
    if report.errors:
        lines.append(f"{len(report.errors)} error(s){tail} in {report.target}")
    else:
        lines.append(f"{report.target}: valid" + (f" ({len(inv.hosts)} hosts planned)" if inv and inv.hosts else "")
                     + (tail + (" (--strict: they fail the run)" if report.strict else "") if tail else ""))
    return "\n".join(lines) + "\n"


def _render(report: Report, fmt: str) -> str:
    if fmt == "json":
        return _json(report)
    if fmt == "junit":
        return _junit(report.errors, report.inv, report.target, report.unusable, report.warnings, report.skipped)
    if fmt == "sarif":
        return sarif(report)
    return _text_report(report) if report.unusable is None else ""


def _write(path: str, text: str) -> None:
    """Write ``path`` atomically (a reader never sees half a report)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".datapath-", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise LoadError(f"--output {path}: cannot be written: {exc.strerror or exc}") from None


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    with collecting() as notes:
        try:
            inv = _load(args)
        except LoadError as exc:
            report = Report(args.target, unusable=str(exc), strict=args.strict)
            if args.format != "text":
                text = _render(report, args.format)
                if args.output:
                    _write(args.output, text)
                else:
                    out.write(text)
            raise
    for warning in inv.warnings:
        sys.stderr.write(f"datapath: ansible-core: {warning}\n")
    report = _validate(inv, args.target, notes, args.strict)
    if args.output:
        _write(args.output, _render(report, args.format))
        out.write(_text_report(report))
    else:
        out.write(_render(report, args.format))
    if report.code != EXIT_OK:
        sys.stderr.write(f"datapath: {report.why()}\n")
    return report.code


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    inv = _load(args)
    groups: list[str] = [g for item in args.groups or [] for g in item.split(",") if g]
    facts: dict[str, Any] = {}
    spec = inv.spec
    if inv.hosts:
        if args.host not in inv.hosts:
            raise LoadError(f"host {args.host!r} is not in the inventory {args.target}")
        inv_groups, facts = inv.hosts[args.host]
        facts = dict(facts)
        groups = groups or inv_groups
        spec = inv.spec_of(args.host)
        if spec is None:
            raise LoadError(f"host {args.host!r} has no `datapath` variable in the inventory {args.target}")
    for item in args.var or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise LoadError(f"--var {item!r}: expected KEY=VALUE")
        facts[key] = value
    try:
        plan = Planner(parse_spec(spec)).plan(args.host, groups, facts)
    except SpecValidationError as exc:
        for err in exc.errors:
            sys.stderr.write(err.render() + "\n")
        return EXIT_INVALID
    out.write(dumps_plan(plan))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    out.write(schema_text())
    return EXIT_OK


_READER_HELP = ("how to read an inventory: auto (default: a fast YAML reader for a directory with one YAML "
                "inventory file and YAML group_vars/host_vars, ansible-core's inventory parser for anything else), "
                "ansible (always ansible-core's), yaml (only the fast reader)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="datapath", description="Validate and plan an aiinfra.datapath cluster spec.")
    sub = parser.add_subparsers(dest="command", required=True)
    val = sub.add_parser("validate", help="validate a spec file or an inventory (INI or YAML, file or directory)")
    val.add_argument("target", help="vars file with a `datapath` key, or an inventory file or directory")
    val.add_argument("--format", choices=FORMATS, default="text",
                     help="text (default), json, junit (a JUnit XML report) or sarif (SARIF 2.1.0, for code scanning)")
    val.add_argument("--output", metavar="FILE",
                     help="write the report to FILE (atomically) and the text report to stdout")
    val.add_argument("--strict", action="store_true", help="warnings fail the run too (exit 1)")
    val.add_argument("--inventory-reader", choices=READERS, default="auto", help=_READER_HELP)
    val.set_defaults(func=cmd_validate)
    pln = sub.add_parser("plan", help="print the plan of one host as JSON")
    pln.add_argument("target")
    pln.add_argument("--host", required=True)
    pln.add_argument("--groups", nargs="*", help="group names (default: from the inventory)")
    pln.add_argument("--var", action="append", help="host variable KEY=VALUE, e.g. datapath_numa_nodes=2")
    pln.add_argument("--inventory-reader", choices=READERS, default="auto", help=_READER_HELP)
    pln.set_defaults(func=cmd_plan)
    sch = sub.add_parser("schema", help="print the JSON Schema of the spec file")
    sch.set_defaults(func=cmd_schema)
    return parser


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """The inventory, specs and plans are trees, yet the cyclic garbage collector walks every object
    again each time enough have been allocated: with 100,000 hosts that was half of the time. The
    command makes no cycles worth collecting; the collector is back on afterwards (in-process callers)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors are "unusable input"
        return EXIT_OK if exc.code == 0 else EXIT_UNUSABLE
    stream = out or sys.stdout
    try:
        with _without_cyclic_gc():
            return int(args.func(args, stream))
    except MissingPydantic as exc:
        sys.stderr.write(f"datapath: {exc}\n")
        return EXIT_UNUSABLE
    except LoadError as exc:
        sys.stderr.write(f"datapath: {exc}\n")
        return EXIT_UNUSABLE
    except (RecursionError, MemoryError) as exc:
        sys.stderr.write(f"datapath: input is too large or too deep ({type(exc).__name__})\n")
        return EXIT_UNUSABLE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
