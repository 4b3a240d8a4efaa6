"""Peer fan-out of model versions (``model_cache.distribution: peers``, issue 42): the controller's wave plan.

Controller side, pure functions (no I/O). From the racks of the hosts that must hold a version (a rack is a
failure domain and a bandwidth domain: the ``rack`` host variable, else an inventory group ``rack_<name>``) it
plans the waves of a rollout:

* wave 0: one **seed per rack** fetches from the origin (the only bytes the origin sends: racks x S);
* wave k (k >= 1): every host that holds the version after wave k-1 serves **one** host that does not, rack-local
  first, so the number of holders doubles per wave until every rack is full; a holder that has no host left in
  its own rack serves a host of another rack (the racks still filling), so a large rack borrows from small ones.

Each fetching host gets its ``peers`` in the order to try them: its planned peer, then the other holders of its
rack, then the holders elsewhere (each list at most ``fallbacks`` long); the origin is always the last resort
(the module falls back to it when every peer failed, died or served bad bytes). Each serving host gets
``serve_to``: exactly the hosts that may ask it (the listener refuses everyone else). The order within a rack is
the hosts' sorted names, so the plan is the same on every run.

:func:`predict_seconds` is the time model of docs/models.md ("Peer fan-out").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

RACK_GROUP_PREFIX = "rack_"


class FanoutError(ValueError):
    """A host without a rack, or an input the plan cannot use; the message names the fix."""


def host_rack(host: str, hostvars: Mapping[str, Any], groups: Iterable[str]) -> str:
    """The rack of ``host``: its ``rack`` host variable, else its one inventory group ``rack_<name>``."""
    rack = hostvars.get("rack")
    if rack is not None and str(rack).strip():
        return str(rack).strip()
    racks = sorted(g[len(RACK_GROUP_PREFIX):] for g in groups if g.startswith(RACK_GROUP_PREFIX)
                   and len(g) > len(RACK_GROUP_PREFIX))
    if len(racks) == 1:
        return racks[0]
    if racks:
        raise FanoutError(f"{host} is in several rack groups ({', '.join(RACK_GROUP_PREFIX + r for r in racks)}): "
                          "set its rack host variable, or keep it in one rack_* group")
    raise FanoutError(f"{host} has no rack: set the host variable rack (e.g. rack: r12) or put it in an inventory "
                      "group rack_<name>; peer distribution plans one origin fetch per rack")


def plan_waves(racks: Mapping[str, str], fallbacks: int = 3) -> dict[str, Any]:
    """The wave plan of one version over ``racks`` ({host: rack}).

    Returns ``{"waves": [[host, ...], ...], "hosts": {host: {"wave", "rack", "peers", "serve_to"}}, "seeds": [...]}``;
    wave 0 are the seeds (``peers`` empty: the origin).
    """
    if fallbacks < 0:
        raise FanoutError("fallbacks must be 0 or more")
    by_rack: dict[str, list[str]] = {}
    for host in sorted(racks):
        by_rack.setdefault(str(racks[host]), []).append(host)
    waiting = {rack: list(hosts) for rack, hosts in sorted(by_rack.items())}
    hosts: dict[str, dict[str, Any]] = {}
    holders: dict[str, list[str]] = {rack: [] for rack in waiting}
    seeds = [members.pop(0) for _rack, members in sorted(waiting.items())]
    for seed in seeds:
        rack = racks[seed]
        hosts[seed] = {"wave": 0, "rack": rack, "peers": [], "serve_to": []}
        holders[rack].append(seed)
    waves = [list(seeds)]
    while any(waiting.values()):
        wave: list[tuple[str, str]] = []  # (new host, its planned peer)
        spare: list[str] = []
        for rack in sorted(waiting):
            serving = list(holders[rack])
            while serving and waiting[rack]:
                wave.append((waiting[rack].pop(0), serving.pop(0)))
            spare.extend(serving)
        # holders with no host left in their rack serve the racks with the most hosts still waiting
        for peer in spare:
            rack = max(sorted(waiting), key=lambda r: len(waiting[r]))
            if not waiting[rack]:
                break
            wave.append((waiting[rack].pop(0), peer))
        number = len(waves)
        for new, peer in wave:
            rack = racks[new]
            local = [h for h in holders[rack] if h != peer]
            remote = [h for r in sorted(holders) if r != rack for h in holders[r] if h != peer]
            order = [peer, *local, *remote][:1 + fallbacks]
            hosts[new] = {"wave": number, "rack": rack, "peers": order, "serve_to": []}
            for server in order:
                hosts[server]["serve_to"].append(new)
        for new, _peer in wave:
            holders[racks[new]].append(new)
        waves.append(sorted(new for new, _peer in wave))
    return {"waves": waves, "hosts": hosts, "seeds": seeds}


def predict_seconds(rack_sizes: Sequence[int], size: int, origin_rate: float, node_rate: float,
                    concurrency: int | None = None, peer_rate: float | None = None) -> dict[str, float]:
    """The time model of docs/models.md for a rollout of ``size`` bytes to racks of ``rack_sizes`` hosts.

    Origin phase: ``R`` seeds (one per rack), ``C`` at a time (``concurrency``; None: all), each at
    ``r = min(b, B / min(C, R))``: ``ceil(R / C) * S / r``. Peer phase: the holders double per wave, so the
    largest rack of ``n`` hosts fills in ``ceil(log2(n))`` waves of ``S / p`` each (``p``: the peer rate, by
    default the node rate ``b``). Returns the two phases, the total and the waves.
    """
    racks = [n for n in rack_sizes if n > 0]
    if not racks or size <= 0 or origin_rate <= 0 or node_rate <= 0:
        raise FanoutError("predict_seconds needs at least one host, a size and positive rates")
    limit = len(racks) if concurrency is None else max(1, min(concurrency, len(racks)))
    rate = min(node_rate, origin_rate / limit)
    origin_s = math.ceil(len(racks) / limit) * size / rate
    waves = waves_needed(racks)
    peer_s = waves * size / (peer_rate or node_rate)
    return {"origin_seconds": origin_s, "peer_seconds": peer_s, "seconds": origin_s + peer_s,
            "peer_waves": float(waves)}


def waves_needed(rack_sizes: Sequence[int]) -> int:
    """Peer waves after the seeds: the holders double per wave, rack-local first, and spare holders help the
    other racks; the count is that of :func:`plan_waves` (it is computed the same way, without names)."""
    fake = {f"{index}-{member:06d}": str(index) for index, n in enumerate(rack_sizes) for member in range(n)}
    return len(plan_waves(fake, fallbacks=0)["waves"]) - 1 if fake else 0


def file_bytes_by_source(sources: Sequence[Mapping[str, Any]], size: int) -> dict[str, int]:
    """Bytes of one published file per source, from its ``sources`` (``[{from, at}]`` in order: each took over
    at ``at`` and served up to the next one's ``at``, the last one to ``size``)."""
    out: dict[str, int] = {}
    for index, part in enumerate(sources):
        end = int(sources[index + 1]["at"]) if index + 1 < len(sources) else size
        out[str(part["from"])] = out.get(str(part["from"]), 0) + max(0, end - int(part["at"]))
    return out


def rollout_report(results: Mapping[str, Mapping[str, Any]], racks: Mapping[str, str], size: int,
                   origin_rate: float, node_rate: float, concurrency: int | None = None,
                   peer_rate: float | None = None, run_started: float | None = None,
                   run_finished: float | None = None) -> dict[str, Any]:
    """The report of a rollout (issue 42, docs/models.md): per node, where each file came from, bytes and seconds;
    for the cluster, bytes from the origin, wall time, time to the last node and the time the model predicts.

    ``results``: {host: {"started", "finished" (seconds on one clock), "models": model_cache's ``models``}};
    ``run_started`` / ``run_finished``: the rollout's own start and end on that clock (default: the first
    node's start, the last node's end). ``origin_bytes`` counts the bytes of the published copies."""
    nodes: dict[str, Any] = {}
    origin = 0
    excluded: dict[str, list[str]] = {}
    for host in sorted(results):
        result = results[host]
        files = []
        for model in result.get("models", []):
            sizes = {f["path"]: int(f.get("size") or 0) for f in model.get("files", [])}
            for path, parts in sorted((model.get("sources") or {}).items()):
                by = file_bytes_by_source(parts, sizes.get(path, 0))
                origin += by.get("origin", 0)
                files.append({"model": f"{model['name']}@{model['version']}", "path": path,
                              "from": [p["from"] for p in parts], "bytes": by})
            for peer in model.get("excluded_peers") or []:
                excluded.setdefault(str(peer), []).append(host)
        nodes[host] = {"rack": racks.get(host), "files": files,
                       "bytes": sum(int(m.get("bytes_moved") or 0) for m in result.get("models", [])),
                       "seconds": round(float(result["finished"]) - float(result["started"]), 3)}
    starts = [float(r["started"]) for r in results.values()]
    ends = [float(r["finished"]) for r in results.values()]
    per_rack: dict[str, int] = {}
    for host, rack in racks.items():
        per_rack[rack] = per_rack.get(rack, 0) + (1 if host in results else 0)
    predicted = predict_seconds(list(per_rack.values()), size, origin_rate, node_rate, concurrency, peer_rate)
    began = min(starts) if run_started is None else float(run_started)
    last = max(ends) - began if results else 0.0
    wall = last if run_finished is None else float(run_finished) - began
    return {"nodes": nodes,
            "cluster": {"origin_bytes": origin, "origin_bytes_limit": len([n for n in per_rack.values() if n]) * size,
                        "wall_seconds": round(wall, 3), "last_node_seconds": round(last, 3),
                        "predicted_seconds": round(predicted["seconds"], 3),
                        "wall_vs_predicted": round(wall / predicted["seconds"], 3) if predicted["seconds"] else None,
                        "excluded_peers": {peer: sorted(set(by)) for peer, by in sorted(excluded.items())}}}
