"""``datapath`` — validate, plan and describe a cluster spec from a pipeline.

Exit codes: 0 valid, 1 invalid, 2 unusable input (missing file, bad YAML, unknown host, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any, TextIO

from .api import dumps_plan, parse_spec, validate_inventory, validate_spec
from .errors import SpecError, SpecValidationError
from .loader import Inventory, LoadError, load_inventory, load_spec_file
from .plan import Planner
from .schema import schema_text

EXIT_OK, EXIT_INVALID, EXIT_UNUSABLE = 0, 1, 2


def _load(target: str) -> Inventory:
    if os.path.isdir(target):
        return load_inventory(target)
    if not os.path.exists(target):
        raise LoadError(f"{target}: no such file or directory")
    return Inventory(spec=load_spec_file(target), spec_source=target)


def _junit(errors: list[SpecError], inv: Inventory, target: str) -> str:
    suite = ET.Element("testsuite", name="datapath.validate")
    cases: dict[str, list[SpecError]] = {"spec": []}
    for host in inv.hosts:
        cases[f"host {host}"] = []
    for err in errors:
        cases.setdefault(f"host {err.host}" if err.host else "spec", []).append(err)
    failures = 0
    for name, errs in cases.items():
        case = ET.SubElement(suite, "testcase", classname="datapath", name=name, file=target)
        if errs:
            failures += 1
            fail = ET.SubElement(case, "failure", message=f"{len(errs)} error(s)", type="SpecError")
            fail.text = "\n".join(e.render() for e in errs)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    return ET.tostring(suite, encoding="unicode") + "\n"


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    inv = _load(args.target)
    if inv.hosts:
        errors = validate_inventory(inv.spec, inv.hosts)
    else:
        errors = validate_spec(inv.spec)
    if args.format == "json":
        out.write(json.dumps({"valid": not errors, "target": args.target, "hosts": len(inv.hosts),
                              "errors": [e.as_dict() for e in errors]}, indent=2, sort_keys=True) + "\n")
    elif args.format == "junit":
        out.write(_junit(errors, inv, args.target))
    else:
        for err in errors:
            out.write(err.render() + "\n")
        if errors:
            out.write(f"{len(errors)} error(s) in {args.target}\n")
        else:
            out.write(f"{args.target}: valid" + (f" ({len(inv.hosts)} hosts planned)" if inv.hosts else "") + "\n")
    return EXIT_INVALID if errors else EXIT_OK


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    inv = _load(args.target)
    groups: list[str] = [g for item in args.groups or [] for g in item.split(",") if g]
    facts: dict[str, Any] = {}
    if inv.hosts:
        if args.host not in inv.hosts:
            raise LoadError(f"host {args.host!r} is not in the inventory {args.target}")
        inv_groups, facts = inv.hosts[args.host]
        groups = groups or inv_groups
    for item in args.var or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise LoadError(f"--var {item!r}: expected KEY=VALUE")
        facts[key] = value
    try:
        plan = Planner(parse_spec(inv.spec)).plan(args.host, groups, facts)
    except SpecValidationError as exc:
        for err in exc.errors:
            sys.stderr.write(err.render() + "\n")
        return EXIT_INVALID
    out.write(dumps_plan(plan))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    out.write(schema_text())
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="datapath", description="Validate and plan an aiinfra.datapath cluster spec.")
    sub = parser.add_subparsers(dest="command", required=True)
    val = sub.add_parser("validate", help="validate a spec file or a YAML inventory directory")
    val.add_argument("target", help="vars file with a `datapath` key, or an inventory directory")
    val.add_argument("--format", choices=("text", "json", "junit"), default="text")
    val.set_defaults(func=cmd_validate)
    pln = sub.add_parser("plan", help="print the plan of one host as JSON")
    pln.add_argument("target")
    pln.add_argument("--host", required=True)
    pln.add_argument("--groups", nargs="*", help="group names (default: from the inventory)")
    pln.add_argument("--var", action="append", help="host variable KEY=VALUE, e.g. datapath_numa_nodes=2")
    pln.set_defaults(func=cmd_plan)
    sch = sub.add_parser("schema", help="print the JSON Schema of the spec file")
    sch.set_defaults(func=cmd_schema)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors are "unusable input"
        return EXIT_OK if exc.code == 0 else EXIT_UNUSABLE
    stream = out or sys.stdout
    try:
        return int(args.func(args, stream))
    except LoadError as exc:
        sys.stderr.write(f"datapath: {exc}\n")
        return EXIT_UNUSABLE
    except (RecursionError, MemoryError) as exc:
        sys.stderr.write(f"datapath: input is too large or too deep ({type(exc).__name__})\n")
        return EXIT_UNUSABLE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
