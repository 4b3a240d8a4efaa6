"""``datapath`` — validate, plan and describe a cluster spec from a pipeline.

Exit codes: 0 valid, 1 invalid, 2 unusable input (missing file, bad YAML, an inventory ansible-core
cannot read, unknown host, ...). Warnings of a valid spec (warnings.py) are printed, listed under
``warnings`` (JSON) or in the spec case's ``system-out`` (JUnit); they do not change the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from .api import dumps_plan, parse_spec, validate_inventory, validate_spec, validate_warnings
from .errors import SpecError, SpecValidationError
from .loader import READERS, Inventory, LoadError, load_target
from .plan import Planner
from .schema import schema_text
from .warnings import SpecWarning

EXIT_OK, EXIT_INVALID, EXIT_UNUSABLE = 0, 1, 2
# Characters XML 1.0 cannot carry (a host name or a value in a message could hold one).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` with the characters XML 1.0 cannot carry written as ``\\xNN``."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _load(args: argparse.Namespace) -> Inventory:
    return load_target(args.target, getattr(args, "inventory_reader", "auto"))


def _validate(inv: Inventory) -> list[SpecError]:
    """Spec errors and every host's node errors; each distinct `datapath` of the inventory once."""
    if not inv.hosts:
        return validate_spec(inv.spec)
    errors: list[SpecError] = []
    for spec, hosts in inv.specs():
        if not hosts:
            continue
        if spec is None:
            errors.extend(SpecError("datapath", "the host has no `datapath` variable",
                                    "define datapath in group_vars/all (or for one of the host's groups)", host)
                          for host in hosts)
            continue
        # every host: the inventory's own mapping (validate_inventory sorts it), not a copy of 100,000 entries
        found = validate_inventory(spec, inv.hosts if len(hosts) == len(inv.hosts) else
                                   {host: inv.hosts[host] for host in hosts})
        if spec is not inv.spec:  # a `datapath` that only these hosts have (a group or host override)
            names = ", ".join(hosts[:3]) + (", ..." if len(hosts) > 3 else "")
            note = f" (the `datapath` of {len(hosts)} host(s): {names})"
            found = [e if e.host else dataclasses.replace(e, message=e.message + note, host=hosts[0]) for e in found]
        errors.extend(found)
    return errors


def _warnings(inv: Inventory) -> list[SpecWarning]:
    """The warnings of each distinct valid `datapath` of the inventory, each once."""
    if not inv.hosts:
        return validate_warnings(inv.spec)
    found: set[SpecWarning] = set()
    for spec, hosts in inv.specs():
        if hosts and spec is not None:
            found.update(validate_warnings(spec))
    return sorted(found)


def _junit(errors: list[SpecError], inv: Inventory | None, target: str, unusable: str | None = None,
           warnings: Sequence[SpecWarning] = ()) -> str:
    """One test case for the spec and one per host; a failing case lists that part's errors.

    Unusable input (exit 2) is one test case with an ``<error>``, so a pipeline that publishes the
    report shows why. Validated by tests/interop/schemas/junit.xsd (tests/interop/test_spec_junit.py).
    """
    suite = ET.Element("testsuite", name="datapath.validate")
    cases: dict[str, list[SpecError]] = {"spec": []}
    for host in (inv.hosts if inv else ()):
        cases[f"host {host}"] = []
    for err in errors:
        cases.setdefault(f"host {err.host}" if err.host else "spec", []).append(err)
    failures = 0
    if unusable is not None:
        case = ET.SubElement(suite, "testcase", classname="datapath", name="input", file=xml_text(target))
        error = ET.SubElement(case, "error", message=xml_text(unusable.splitlines()[0][:300]), type="LoadError")
        error.text = xml_text(unusable)
        cases = {}
    for name, errs in cases.items():
        case = ET.SubElement(suite, "testcase", classname="datapath", name=xml_text(name), file=xml_text(target))
        if errs:
            failures += 1
            fail = ET.SubElement(case, "failure", message=f"{len(errs)} error(s)", type="SpecError")
            fail.text = xml_text("\n".join(e.render() for e in errs))
        if name == "spec" and warnings:  # warnings never fail a case: they are the case's output
            ET.SubElement(case, "system-out").text = xml_text("\n".join(w.render() for w in warnings))
    suite.set("tests", str(len(cases) + (unusable is not None)))
    suite.set("failures", str(failures))
    suite.set("errors", str(int(unusable is not None)))
    suite.set("skipped", "0")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    try:
        inv = _load(args)
    except LoadError as exc:
        if args.format == "junit":
            out.write(_junit([], None, args.target, unusable=str(exc)))
        elif args.format == "json":
            out.write(json.dumps({"valid": False, "usable": False, "target": args.target, "error": str(exc),
                                  "errors": []}, indent=2, sort_keys=True) + "\n")
        raise
    for warning in inv.warnings:
        sys.stderr.write(f"datapath: ansible-core: {warning}\n")
    errors = _validate(inv)
    warnings = [] if errors else _warnings(inv)  # warnings of a valid spec; an invalid one gets its errors
    if args.format == "json":
        out.write(json.dumps({"valid": not errors, "usable": True, "target": args.target, "hosts": len(inv.hosts),
                              "reader": inv.reader, "errors": [e.as_dict() for e in errors],
                              "warnings": [w.as_dict() for w in warnings]},
                             indent=2, sort_keys=True) + "\n")
    elif args.format == "junit":
        out.write(_junit(errors, inv, args.target, warnings=warnings))
    else:
        for err in errors:
            out.write(err.render() + "\n")
        for item in warnings:
            out.write(item.render() + "\n")
        if errors:
            out.write(f"{len(errors)} error(s) in {args.target}\n")
        else:
            out.write(f"{args.target}: valid" + (f" ({len(inv.hosts)} hosts planned)" if inv.hosts else "")
                      + (f", {len(warnings)} warning(s)" if warnings else "") + "\n")
    return EXIT_INVALID if errors else EXIT_OK


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
    val.add_argument("--format", choices=("text", "json", "junit"), default="text")
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
    except LoadError as exc:
        sys.stderr.write(f"datapath: {exc}\n")
        return EXIT_UNUSABLE
    except (RecursionError, MemoryError) as exc:
        sys.stderr.write(f"datapath: input is too large or too deep ({type(exc).__name__})\n")
        return EXIT_UNUSABLE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
