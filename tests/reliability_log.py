"""Record the rows of the reliability matrix (docs/reliability.md) while the fault tests run.

A fault test imports the fixtures and wraps each fault case in ``reliability.case(...)``::

    from reliability_log import reliability, reliability_session  # noqa: F401

    def test_x(reliability):
        with reliability.case("sysctl-ro-procsys", "read-only /proc/sys") as case:
            ...                                   # inject the fault, run the real code
            case.did("failed: 'rejected by the kernel (Read-only file system)'")
            assert before == after
            case.checked("every key read back unchanged")

A case that leaves the ``with`` block normally is recorded as passed; an exception (a failed
assert included) records it as failed and propagates. Counters (hostile inputs tried,
tracebacks seen, bytes of user data lost) are per case. At the end of the session every
test module's rows go to ``tests/output/reliability/<module>.json``, which
``scripts/reliability_report.py`` renders.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# DATAPATH_RELIABILITY_OUTPUT: another directory (bench/bench_reliability.py counts its own run there)
OUTPUT = os.environ.get("DATAPATH_RELIABILITY_OUTPUT") or os.path.join(REPO, "tests", "output", "reliability")

_ROWS: dict[str, list[dict[str, Any]]] = {}


class Case:
    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row

    def did(self, text: str) -> None:
        """What the tool did (its message, exit, changed count...)."""
        self.row["tool_did"] = (self.row["tool_did"] + "; " if self.row["tool_did"] else "") + _short(text)

    def checked(self, text: str) -> None:
        """What was checked afterwards (each call adds one check)."""
        self.row["checked"].append(text)

    def hostile(self, count: int = 1, property_based: int = 0) -> None:
        self.row["hostile_inputs"] += count
        self.row["property_runs"] += property_based

    def traceback(self, count: int = 1, core: int = 0) -> None:
        """Tracebacks seen; ``core`` of them raised inside ansible-core rather than this collection."""
        self.row["tracebacks"] += count
        self.row["core_tracebacks"] += core

    def lost(self, nbytes: int) -> None:
        self.row["bytes_lost"] += nbytes

    def finding(self, text: str) -> None:
        """A defect or limitation the case documents (listed under Findings in the report)."""
        self.row["findings"].append(_short(text, 600))

    def elapsed(self) -> float:
        return time.monotonic() - self.row["_start"]

    def faults(self, count: int) -> None:
        """A case that injects the same fault many times (kill loops, fuzz rounds)."""
        self.row["faults"] = count


class Recorder:
    def __init__(self, module: str, test: str) -> None:
        self.module = module
        self.test = test

    @contextmanager
    def case(self, case_id: str, fault: str, area: str = "") -> Iterator[Case]:
        row: dict[str, Any] = {
            "id": case_id, "area": area or self.module.replace("test_reliability_", ""),
            "fault": fault, "tool_did": "", "checked": [], "findings": [], "passed": False, "error": "",
            "faults": 1, "hostile_inputs": 0, "property_runs": 0, "tracebacks": 0, "core_tracebacks": 0,
            "bytes_lost": 0,
            "test": f"{self.module}::{self.test}", "seconds": 0.0,
        }
        start = time.monotonic()
        row["_start"] = start
        _ROWS.setdefault(self.module, []).append(row)
        try:
            yield Case(row)
        except BaseException as exc:
            row["error"] = _short(f"{type(exc).__name__}: {exc}", 400)
            raise
        else:
            row["passed"] = True
        finally:
            row["seconds"] = round(time.monotonic() - start, 2)
            row.pop("_start", None)


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def flush() -> None:
    os.makedirs(OUTPUT, exist_ok=True)
    for module, rows in _ROWS.items():
        doc = {"module": module, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "kernel": platform.release(), "python": sys.version.split()[0],
               "argv": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv)),
               "rows": rows}
        tmp = os.path.join(OUTPUT, f".{module}.json.tmp")
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=2, sort_keys=True)
        os.replace(tmp, os.path.join(OUTPUT, f"{module}.json"))


@pytest.fixture(scope="session")
def reliability_session() -> Iterator[None]:
    yield
    flush()


@pytest.fixture
def reliability(request: pytest.FixtureRequest, reliability_session: None) -> Recorder:
    module = request.node.module.__name__.rsplit(".", 1)[-1]
    _ROWS.setdefault(module, [])
    return Recorder(module, request.node.name)
