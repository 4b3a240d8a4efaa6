# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The measure report: every host's probe results -> one document -> measure.json, measure.md (with one
SVG heatmap per fabric, measure-FABRIC.svg), measure.xml (JUnit: one test case per host and probe).

:func:`build_report` takes the schedule (:mod:`.schedule`) and, per host, what the role registered:
``{reached, measure (the plan part), roce (the plan's roce_qos interfaces), net: [{round, probe,
error}], paths (path_check), storage (storage_probe), counters_before, counters_after}``. Output is
deterministic for the same input. Schema of measure.json: docs/schema/measure.schema.json.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from . import baseline as B
from . import checkpoint as C
from . import findings as F
from . import metadata as M
from . import rails as R
from . import saturation as S
from .heatmap_md import heatmap_markdown
from .results import counter_deltas, storage_rows
from .svg import heatmap

SCHEMA_VERSION = 1
PROBES = ("network", "storage", "counters")
SCHEDULE_KEYS = ("mode", "sample_peers", "seed", "streams", "duration", "tool", "port", "max_pairs", "estimate_s",
                 "overhead_s")
_RANK = {"error": 0, "warning": 1, "info": 2}
_KIND_RANK = {kind: i for i, kind in enumerate(F.KINDS)}


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def sort_key(f: Mapping[str, Any]) -> tuple[Any, ...]:
    return (_RANK.get(str(f.get("severity")), 3), _KIND_RANK.get(str(f.get("kind")), 99), str(f.get("host")),
            str(f.get("fabric") or f.get("device")), str(f.get("peer")), str(f.get("reason")))


def svg_name(fabric: str) -> str:
    return "measure-" + re.sub(r"[^A-Za-z0-9_-]", "_", fabric) + ".svg"


def _settings(hosts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    for name in sorted(hosts):
        part = _m(hosts[name].get("measure"))
        if part.get("gates"):
            return dict(part)
    return {}


def _records(hosts: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, int], Mapping[str, Any]]:
    out = {}
    for host, data in hosts.items():
        for record in data.get("net") or []:
            if isinstance(record, Mapping) and record.get("round") is not None:
                out[(host, int(record["round"]))] = record
    return out


def _iface_fabrics(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for entry in _m(data.get("measure")).get("fabrics") or []:
        if entry.get("interface"):
            out[str(entry["interface"])] = {"fabric": entry["name"], "pfc": []}
    for q in data.get("roce") or []:
        name = _m(q).get("interface")
        if name:
            entry = out.setdefault(str(name), {"fabric": q.get("fabric"), "pfc": []})
            entry["pfc"] = list(q.get("pfc_priorities") or [])
    return out


def build_report(schedule: Mapping[str, Any], hosts: Mapping[str, Mapping[str, Any]], generated_at: str | None = None,
                 options: Mapping[str, Any] | None = None,
                 baseline: Mapping[str, Any] | None = None) -> dict[str, Any]:
    settings = _settings(hosts)
    gates = _m(settings.get("gates"))
    ratio = float(gates.get("outlier_ratio") or 0)
    order = [str(h) for h in schedule.get("hosts") or sorted(hosts)]
    order += [h for h in sorted(hosts) if h not in order]
    records = _records(hosts)
    findings: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    fabrics: dict[str, Any] = {}
    for rnd in schedule.get("rounds") or []:
        for pair in rnd["pairs"]:
            # one row per rail the pair loaded, with where its bytes went (rails.py)
            client, server = records.get((pair["client"], rnd["index"])), records.get((pair["server"], rnd["index"]))
            pairs.extend(R.pair_rows(pair, rnd["fabric"], int(rnd["index"]), client, server,
                                     int(schedule.get("streams") or 1)))
    for item in schedule.get("excluded") or []:
        findings.append(F.finding("probe-error", item["host"], item["reason"],
                                  "give the host an address inside the fabric's subnets (datapath_addresses) or "
                                  "leave the fabric out of measure.fabrics", dict(item), fabric=item["fabric"]))
    paths = [dict(p, source=host) for host, data in sorted(hosts.items())
             for p in _m(data.get("paths")).get("paths") or []]
    # path_check's rail checks: the cross-rail route checks of a shared subnet, each host's NICs by MAC
    cross = [dict(p, source=host) for host, data in sorted(hosts.items())
             for p in _m(data.get("paths")).get("cross_rails") or []]
    nics = {host: dict(_m(_m(data.get("paths")).get("nics"))) for host, data in hosts.items()}
    rail_nics: dict[str, dict[tuple[str, int], str]] = {}  # fabric -> {(host, rail): interface}
    for host, data in hosts.items():
        for entry in _m(data.get("measure")).get("fabrics") or []:
            for r in entry.get("rails") or []:
                if r.get("interface"):
                    rail_nics.setdefault(str(entry["name"]), {})[(host, int(r.get("rail") or 0))] = str(r["interface"])
    for name, info in _m(schedule.get("fabrics")).items():
        mine = [p for p in pairs if p["fabric"] == name]
        gate = _m(_m(gates.get("fabrics")).get(name))
        stats = F.fabric_stats(mine)
        F.apply_gates(mine, gate, ratio, stats["reference_gbit_s"])
        found = F.probe_errors(name, mine)
        found += F.mtu_findings(name, paths)
        found += F.socket_buffer_findings(name, mine, gate.get("min_gbit_s") or stats["reference_gbit_s"])
        found += R.rail_findings(name, mine, [p for p in paths + cross if p.get("fabric") == name], nics,
                                 rail_nics.get(name, {}))
        explained = {f["host"] for f in found if f["kind"] in ("mtu", "socket-buffers", "probe-error", "slow-rail")}
        found += F.node_findings(name, mine, stats, explained)
        F.attribute(mine, [f["host"] for f in found if f["kind"] in F.BOTTLENECKS])
        found += F.gate_findings(name, mine)
        findings += found
        stats.update(hosts=list(info.get("hosts") or []), rounds=info.get("rounds"), mtu=info.get("mtu"),
                     gates=dict(gate), svg=svg_name(name))
        fabrics[name] = stats
    storage: list[dict[str, Any]] = []
    for host in order:
        data = _m(hosts.get(host))
        rows = storage_rows(host, data.get("storage"))
        if data.get("cache_unmounted"):
            mount = _m(_m(data.get("measure")).get("storage")).get("mount")
            findings.append(F.finding("probe-error", host, f"the cache {mount} of {host} is not mounted: its test "
                                      "file was not read (nor created below the mount point)",
                                      "mount the cache (site.yml, role nvme_layout) and measure again",
                                      {"mount": mount}, device=mount, probe="storage"))
        if data.get("storage_planned") and not rows and data.get("reached", True):
            findings.append(F.finding("probe-error", host, f"no storage result from {host}",
                                      "rerun; see the task output of storage_probe", {}, probe="storage"))
        storage += rows
    findings += F.storage_findings(storage, _m(gates.get("storage")), ratio)
    counters: dict[str, Any] = {}
    for host in order:
        data = _m(hosts.get(host))
        if not data.get("counters_before") and not data.get("counters_after"):
            continue
        ifaces = _iface_fabrics(data)
        deltas = counter_deltas(data.get("counters_before"), data.get("counters_after"))
        for ifname, row in deltas.items():
            info = ifaces.get(ifname, {})
            row["fabric"] = info.get("fabric")
            findings += F.qos_findings(host, ifname, row["fabric"], row, info.get("pfc") or [])
            row["deltas"] = {g: {k: v for k, v in sorted(d.items()) if v} for g, d in row["deltas"].items()}
        counters[host] = deltas
    for host in order:
        if not _m(hosts.get(host)).get("reached", True):
            findings.append(F.finding("probe-error", host, f"{host} was unreachable or failed before the probes ran",
                                      "fix the connection (ansible -m ping) and rerun", {}, probe="network"))
    sat = S.sweeps(schedule, hosts, order, _m(settings.get("saturation")).get("knee_share"))
    ckpt, found_ckpt = C.summary(C.rows(hosts, order), ratio)
    findings += found_ckpt
    meta, found_meta = M.summary(M.rows(hosts, order), ratio)
    findings += found_meta
    base = _m(baseline)
    base_part = None
    if base.get("mode") in ("record", "compare"):
        figures = {"fabrics": fabrics, "storage": storage, "saturation": sat, "generated_at": generated_at}
        info = {h: v for h, v in _m(base.get("info")).items() if h in order and _m(hosts.get(h)).get("reached", True)}
        if base["mode"] == "compare":
            tolerance = float(base.get("tolerance") or B.DEFAULT_TOLERANCE)
            findings += B.compare(figures, info, _m(base.get("existing")), tolerance)
            base_part = {"mode": "compare", "tolerance": float(base.get("tolerance") or B.DEFAULT_TOLERANCE),
                         "classes": sorted(B.classes(info)), "documents": {}}
        else:
            docs = B.record(figures, info, _m(base.get("existing")), int(base.get("runs") or B.DEFAULT_RUNS))
            base_part = {"mode": "record", "tolerance": None, "classes": sorted(docs), "documents": docs}
    findings.sort(key=sort_key)
    doc = _document(schedule, settings, gates, order, hosts, pairs, fabrics, storage, counters, paths, findings,
                    generated_at, options)
    doc["saturation"] = sat
    doc["checkpoint"] = ckpt
    doc["metadata"] = meta
    doc["baseline"] = base_part
    return doc


def _host_status(host: str, findings: Sequence[Mapping[str, Any]], data: Mapping[str, Any]) -> dict[str, Any]:
    mine = [f for f in findings if f["host"] == host and f["severity"] == "error"]
    probes = {p: ("fail" if any(f["probe"] == p for f in mine) else "pass") for p in PROBES}
    status = "unreachable" if not data.get("reached", True) else ("fail" if mine else "pass")
    return {"name": host, "status": status, **probes, "findings": len(mine)}


def _document(schedule: Mapping[str, Any], settings: Mapping[str, Any], gates: Mapping[str, Any], order: list[str],
              hosts: Mapping[str, Mapping[str, Any]], pairs: list[dict[str, Any]], fabrics: dict[str, Any],
              storage: list[dict[str, Any]], counters: dict[str, Any], paths: list[dict[str, Any]],
              findings: list[dict[str, Any]], generated_at: str | None,
              options: Mapping[str, Any] | None) -> dict[str, Any]:
    failing = [f for f in findings if f["severity"] == "error"]
    bottlenecks = [f"{f['kind']} {f['host']} {_where(f)}" for f in failing if f["kind"] in F.BOTTLENECKS]
    failures = [f"{f['kind']}: {f['host']}" + (f" ({_where(f)})" if f['fabric'] or f['device'] else "")
                + f": {f['reason']}" for f in failing]
    notes = [f"{h} {i}: counters unsupported ({r['reason']})" for h, rows in counters.items()
             for i, r in rows.items() if not r["supported"]]
    rounds = schedule.get("rounds") or []
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "aiinfra.datapath measure",
        "generated_at": generated_at,
        "options": dict(sorted(_m(options).items())),
        "failed": bool(failing),
        "summary": {
            "hosts": len(order), "fabrics": len(fabrics), "pairs": len(pairs),
            "passed": sum(1 for p in pairs if p["status"] == "pass"),
            "failed": sum(1 for p in pairs if p["status"] == "fail"),
            "errors": sum(1 for p in pairs if p["status"] == "error"),
            "storage_targets": len(storage), "storage_failed": sum(1 for s in storage if s["status"] != "pass"),
            "findings": {sev: sum(1 for f in findings if f["severity"] == sev) for sev in ("error", "warning", "info")},
            "failing_hosts": sorted({f["host"] for f in failing if f["host"]}),
            "bottlenecks": bottlenecks,
        },
        "gates": dict(gates),
        "schedule": {
            **{k: schedule.get(k) for k in SCHEDULE_KEYS},
            "rounds": [{"index": r["index"], "fabric": r["fabric"], "pairs": [p["id"] for p in r["pairs"]]}
                       for r in rounds],
            "fabrics": {n: {k: v for k, v in f.items() if k in ("hosts", "pairs", "rounds")}
                        for n, f in _m(schedule.get("fabrics")).items()},
            "excluded": list(schedule.get("excluded") or []),
        },
        "fabrics": fabrics,
        "pairs": pairs,
        "storage": storage,
        "counters": counters,
        "paths": [p for p in paths if not p.get("ok")],
        "findings": findings,
        "hosts": [_host_status(h, findings, _m(hosts.get(h))) for h in order],
        "failures": failures,
        "notes": notes,
        "measured_with": {k: settings.get(k) for k in ("mode", "streams", "duration", "tool")},
    }


# --------------------------------------------------------------------------- renderers
def _where(f: Mapping[str, Any]) -> str:
    """Where a finding is: its fabric (with the rail and interface of a rail finding) or device."""
    if f.get("rail") is not None and f.get("fabric"):
        return f"{f['fabric']} rail{f['rail']}" + (f" {f['interface']}" if f.get("interface") else "")
    return str(f.get("fabric") or f.get("device"))


def render_json(report: Mapping[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml(text: Any) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def _line(f: Mapping[str, Any]) -> str:
    where = _where(f) if (f.get("fabric") or f.get("device")) else "-"
    return f"[{f['severity']}/{f['kind']}] {f['host']} {where}: {f['reason']} Fix: {f['fix']}"


def render_junit(report: Mapping[str, Any]) -> str:
    """JUnit: a testsuite per host, a testcase per probe (network, storage, counters); a case fails
    with the host's error findings of that probe, is skipped when the probe did not apply."""
    root = ET.Element("testsuites", name="aiinfra.datapath measure")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    storage_hosts = {s["host"] for s in report["storage"]}
    for host in report["hosts"]:
        name = host["name"]
        suite = ET.SubElement(root, "testsuite", name=_xml(name))
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        for probe in PROBES:
            case = ET.SubElement(suite, "testcase", classname=_xml(f"measure.{name}"), name=probe)
            counts["tests"] += 1
            mine = [f for f in report["findings"] if f["host"] == name and f["probe"] == probe]
            failing = [f for f in mine if f["severity"] == "error"]
            skip = None
            if probe == "storage" and name not in storage_hosts and not failing:
                skip = "no storage probe on this host (no nvme_layout in its plan)"
            elif probe == "counters" and not failing:
                rows = report["counters"].get(name) or {}
                if not any(r["supported"] for r in rows.values()):
                    skip = "no RDMA/RoCE counters on this host's interfaces" + (
                        ": " + "; ".join(f"{i}: {r['reason']}" for i, r in rows.items()) if rows else "")
            if failing:
                counts["failures"] += 1
                node = ET.SubElement(case, "failure", type=_xml(failing[0]["kind"]),
                                     message=_xml("; ".join(f"{f['kind']}: {f['reason']}" for f in failing)[:2000]))
                node.text = _xml("\n".join(_line(f) for f in failing))
            elif skip:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=_xml(skip))
            others = [f for f in mine if f["severity"] != "error"]
            if others:
                ET.SubElement(case, "system-out").text = _xml("\n".join(_line(f) for f in others))
        suite.set("tests", str(counts["tests"]))
        suite.set("failures", str(counts["failures"]))
        suite.set("errors", "0")
        suite.set("skipped", str(counts["skipped"]))
        for key in totals:
            totals[key] += counts[key]
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", "0")
    root.set("skipped", str(totals["skipped"]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        value = round(value, 3)
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Mapping[str, Any], max_rows: int = 200) -> str:
    s = report["summary"]
    sched = report["schedule"]
    verdict = "FAILED" if report["failed"] else "passed"
    lines = [
        "# Data-path measurement", "",
        f"{verdict} - {s['hosts']} host(s), {s['pairs']} pair(s): {s['passed']} pass, {s['failed']} fail, "
        f"{s['errors']} error; {s['storage_targets']} storage target(s), {s['storage_failed']} failing"
        + (f"; generated {report['generated_at']}" if report.get("generated_at") else ""), "",
        f"Schedule: {sched['mode']}, {len(sched['rounds'])} round(s) of {sched['duration']} s, {sched['streams']} "
        f"stream(s) per pair, tool {sched['tool']}, port {sched['port']} (estimate {sched['estimate_s']} s).", "",
    ]
    if s["bottlenecks"]:
        lines += ["**Bottlenecks:** " + "; ".join(s["bottlenecks"]), ""]
    lines += ["## Findings", ""]
    if not report["findings"]:
        lines += ["No bottleneck: every pair and every storage target passes its gates.", ""]
    else:
        cols = ("severity", "kind", "host", "where", "peer", "reason", "evidence", "fix")
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for f in report["findings"][:max_rows]:
            row = dict(f, where=_where(f) if (f.get("fabric") or f.get("device")) else None)
            lines.append("| " + " | ".join(_cell(row.get(c)) for c in cols) + " |")
        lines.append("")
    for name, fab in report["fabrics"].items():
        lines += [f"## Fabric {name}", "",
                  f"{fab['pairs']} pair(s), {fab['errors']} error; reference {fab['reference_gbit_s']} Gbit/s "
                  f"(median of the nodes' best pairs), pairs from {fab['min_gbit_s']} to {fab['max_gbit_s']} Gbit/s.",
                  "", *heatmap_markdown(name, report["schedule"]["fabrics"].get(name, {}).get("hosts") or [],
                                        [p for p in report["pairs"] if p["fabric"] == name],
                                        fab["reference_gbit_s"]),
                  "", f"The same matrix as an image: [{name} pair matrix (SVG)]({fab['svg']}), beside this file.", "",
                  "| pair | round | Gbit/s | retransmit share | loss % | p50 ms | p99 ms | status | gates / error |",
                  "|---|---|---|---|---|---|---|---|---|"]
        rows = sorted((p for p in report["pairs"] if p["fabric"] == name),
                      key=lambda p: ({"error": 0, "fail": 1}.get(p["status"], 2), p["id"]))
        for p in rows[:max_rows]:
            detail = p["error"] or F.gate_text(p["failed_gates"])
            lines.append("| " + " | ".join(_cell(v) for v in (
                p["id"], p["round"], p["gbit_per_s"], p["retransmit_share"], p["loss_pct"], p["p50_ms"], p["p99_ms"],
                p["status"], detail or None)) + " |")
        lines.append("")
    if report["storage"]:
        lines += ["## Storage", "", "| host | target | path | read MiB/s | IOPS QD1 | p99 µs QD1 | IOPS QD32 | "
                  "p99 µs QD32 | status |", "|---|---|---|---|---|---|---|---|---|"]
        for r in report["storage"][:max_rows]:
            lines.append("| " + " | ".join(_cell(v) for v in (
                r["host"], r["name"], r["path"], r["seq_read_mib_s"], r["iops_qd1"], r["p99_us_qd1"], r["iops_qd32"],
                r["p99_us_qd32"], r["status"] if r["ok"] else f"error: {r['error']}")) + " |")
        lines.append("")
    if report["counters"]:
        lines += ["## Counters (deltas over the run)", "",
                  "| host | interface | fabric | supported | non-zero deltas |", "|---|---|---|---|---|"]
        for host, rows in report["counters"].items():
            for ifname, r in rows.items():
                deltas = {k: v for d in r["deltas"].values() for k, v in d.items()}
                lines.append("| " + " | ".join(_cell(v) for v in (
                    host, ifname, r.get("fabric"), "yes" if r["supported"] else f"no: {r['reason']}",
                    deltas or None)) + " |")
        lines.append("")
    lines += S.markdown(report.get("saturation"), max_rows)
    lines += C.markdown(report.get("checkpoint"))
    lines += M.markdown(report.get("metadata"))
    base = report.get("baseline")
    if base:
        lines += ["## Baseline", ""]
        if base["mode"] == "record":
            lines += [f"Recorded: class {cls}, {len(doc['runs'])} run(s) kept, {len(doc['figures'])} figure(s) "
                      "(median of the runs)." for cls, doc in base["documents"].items()]
        else:
            regressions = [f for f in report["findings"] if f["kind"] == "baseline-regression"]
            lines.append(f"Compared with the baselines of {len(base['classes'])} class(es), tolerance "
                         f"{base['tolerance'] * 100:g} %: {len(regressions)} regression(s).")
            for f in regressions[:max_rows]:
                lines.append(f"- {f['host']}: {f['reason']}")
        lines.append("")
    return "\n".join(lines) + "\n"


def reports(schedule: Mapping[str, Any], hosts: Mapping[str, Mapping[str, Any]], generated_at: str | None = None,
            options: Mapping[str, Any] | None = None, baseline: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{files: {name: text}, failed, failures, summary, hosts}``: measure.json, measure.md, measure.xml and
    one measure-FABRIC.svg per fabric."""
    report = build_report(schedule, hosts, generated_at, options, baseline)
    files = {"measure.json": render_json(report), "measure.md": render_markdown(report),
             "measure.xml": render_junit(report)}
    for name, fab in report["fabrics"].items():
        files[fab["svg"]] = heatmap(name, report["schedule"]["fabrics"].get(name, {}).get("hosts") or [],
                                    [p for p in report["pairs"] if p["fabric"] == name], fab["reference_gbit_s"])
    files.update(S.svgs(report.get("saturation")))
    recorded = _m(report.get("baseline")).get("documents") or {}
    return {"baseline_files": {f"{cls}.json": render_json(doc) for cls, doc in sorted(recorded.items())},
            "files": files, "failed": report["failed"], "failures": report["failures"],
            "summary": report["summary"], "hosts": report["hosts"]}
