# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The measurement schedule: node pairs in rounds, each node in at most one test per round.

Modes (per fabric, over the hosts with a usable address on it, in the given host order):

* ``all-pairs``: the round-robin tournament (circle method): N-1 rounds of N/2 pairs for even N,
  N rounds of (N-1)/2 pairs (one node sits out each round) for odd N; every unordered pair once.
* ``ring``: each node sends to the next one (the last to the first): 2 rounds for even N, 3 for
  odd N (1 round for N = 2, the single pair).
* ``sample``: K perfect matchings with distinct peers: K rounds of the circle method over a
  shuffled order, deterministic for the same seed, fabric and hosts (K >= N-1 is all-pairs).

A pair is ``client -> server``: the client sends the load, the server receives it. Where both hosts
have several rails on the fabric (docs/measure.md, rails), the pair loads rail i of the client to rail
i of the server for every rail both have, all at once (one ``net_probe`` call per host with ``legs``,
rail i on port + 2i): the rounds do not grow with the rails. Fabrics are
measured one after the other. When ``max_pairs`` is set (half of Ansible's forks), a round with
more pairs is split into consecutive rounds so that every participant of a round gets a fork at
once (a server waits for its client; with fewer forks than participants they would not meet).
Standard library only.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

MODES = ("all-pairs", "ring", "sample")
Pair = tuple[str, str]  # (client, server)
# Seconds a round costs beyond its load: the Ansible task over SSH, the module's start, the
# server's listen and the client's connect. Measured on the 4-node lab (docs/measure.md).
ROUND_OVERHEAD_S = 3.0
DEFAULT_WAIT_S = 30.0
LATENCY_INTERVAL_S = 0.02


def sends(a: int, b: int, n: int) -> bool:
    """Whether the node at position ``a`` sends to the one at ``b`` (of ``n``): a regular tournament
    (``b - a`` mod the odd count in 1..half), the last node of an even count sending to every other
    node, so that every node sends in half of its pairs (one more or less)."""
    odd = n if n % 2 else n - 1
    if n % 2 == 0 and n - 1 in (a, b):
        other = b if a == n - 1 else a
        return (a == n - 1) == (other % 2 == 0)
    return 1 <= (b - a) % odd <= odd // 2


def circle_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """The round-robin tournament by the circle method: every unordered pair exactly once.

    Node 0 stays, the others rotate; with odd N a bye is added and its partner sits out. The
    direction of each pair is :func:`sends`, so every node sends in about half of its pairs."""
    items: list[int | None] = list(range(len(nodes)))
    n = len(nodes)
    if n < 2:
        return []
    if n % 2:
        items.append(None)
    size = len(items)
    rounds: list[list[Pair]] = []
    for _r in range(size - 1):
        pairs: list[Pair] = []
        for i in range(size // 2):
            a, b = items[i], items[size - 1 - i]
            if a is None or b is None:
                continue
            pairs.append((nodes[a], nodes[b]) if sends(a, b, n) else (nodes[b], nodes[a]))
        rounds.append(pairs)
        items = [items[0], items[-1], *items[1:-1]]
    return rounds


def ring_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Each node to the next (the last to the first): edge k is nodes[k] -> nodes[k+1]. Even N: the
    even edges, then the odd ones (2 rounds); odd N: the last edge in a third round."""
    n = len(nodes)
    if n < 2:
        return []
    if n == 2:
        return [[(nodes[0], nodes[1])]]
    edges = [(nodes[k], nodes[(k + 1) % n]) for k in range(n)]
    if n % 2 == 0:
        return [edges[0::2], edges[1::2]]
    return [edges[0:n - 1:2], edges[1:n - 1:2], [edges[n - 1]]]


def sample_rounds(nodes: Sequence[str], peers: int, seed: int | str, fabric: str = "") -> list[list[Pair]]:
    """``peers`` rounds of the circle method over an order shuffled by ``seed``: perfect matchings
    (one node sits out per round for odd N) whose peers never repeat. Deterministic."""
    if len(nodes) < 2:
        return []
    rng = random.Random(f"{seed}:{fabric}:{','.join(nodes)}")
    order = list(nodes)
    rng.shuffle(order)
    rounds = circle_rounds(order)
    if peers >= len(rounds):
        return rounds
    picked = sorted(rng.sample(range(len(rounds)), peers))
    return _orient([rounds[i] for i in picked])


def _orient(rounds: list[list[Pair]]) -> list[list[Pair]]:
    """Each pair sent by the node of the two that has sent less so far."""
    sent: dict[str, int] = {}
    out = []
    for pairs in rounds:
        row = []
        for a, b in pairs:
            client, server = (b, a) if sent.get(b, 0) < sent.get(a, 0) else (a, b)
            sent[client] = sent.get(client, 0) + 1
            row.append((client, server))
        out.append(row)
    return out


def rounds_for(mode: str, nodes: Sequence[str], peers: int = 3, seed: int | str = 0,
               fabric: str = "") -> list[list[Pair]]:
    if mode == "all-pairs":
        return circle_rounds(nodes)
    if mode == "ring":
        return ring_rounds(nodes)
    if mode == "sample":
        return sample_rounds(nodes, peers, seed, fabric)
    raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")


def round_count(mode: str, nodes: int, peers: int = 3) -> int:
    """Rounds per fabric for ``nodes`` hosts (without splitting by forks)."""
    if nodes < 2:
        return 0
    if mode == "all-pairs":
        return nodes - 1 if nodes % 2 == 0 else nodes
    if mode == "ring":
        return 1 if nodes == 2 else (2 if nodes % 2 == 0 else 3)
    if mode == "sample":
        return min(peers, round_count("all-pairs", nodes))
    raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")


def estimate_seconds(mode: str, nodes: int, peers: int, duration: float, fabrics: int = 1,
                     overhead: float = ROUND_OVERHEAD_S, max_pairs: int | None = None) -> float:
    """rounds x (duration + overhead), per fabric, with rounds split to ``max_pairs`` pairs."""
    rounds = round_count(mode, nodes, peers)
    if max_pairs:
        rounds *= -(-(nodes // 2) // max_pairs)
    return round(fabrics * rounds * (duration + overhead), 1)


def _split(pairs: list[Pair], max_pairs: int | None) -> list[list[Pair]]:
    if not max_pairs or len(pairs) <= max_pairs:
        return [pairs]
    return [pairs[i:i + max_pairs] for i in range(0, len(pairs), max_pairs)]


def _settings(parts: Mapping[str, Mapping[str, Any]], hosts: Sequence[str]) -> dict[str, Any]:
    for host in hosts:
        part = parts.get(host)
        if isinstance(part, Mapping) and part.get("mode"):
            return dict(part)
    return {}


def build_schedule(parts: Mapping[str, Mapping[str, Any]], hosts: Sequence[str], max_pairs: int | None = None,
                   wait: float = DEFAULT_WAIT_S, overhead: float = ROUND_OVERHEAD_S,
                   overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The schedule from each host's plan ``measure`` part (``parts[host]``).

    Returns ``{mode, sample_peers, seed, streams, duration, tool, port, fabrics: {name: {hosts,
    subnets, pairs, rounds}}, excluded: [{host, fabric, address, reason}], rounds: [{index, fabric,
    pairs: [...], hosts: {host: {fabric, pair, role, peer, args}}}], estimate_s}``; ``args`` are the
    net_probe arguments of that host in that round. ``overrides`` replaces settings of the plan
    (mode, sample_peers, seed, streams, duration, tool, port)."""
    order = list(dict.fromkeys(str(h) for h in hosts))
    settings = _settings(parts, order)
    settings.update({k: v for k, v in (overrides or {}).items() if v is not None})
    mode = str(settings.get("mode", "ring"))
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    peers = int(settings.get("sample_peers", 3))
    seed = settings.get("seed", 0)
    streams = int(settings.get("streams", 4))
    duration = float(settings.get("duration", 5.0))
    tool = str(settings.get("tool", "builtin"))
    port = int(settings.get("port", 5201))
    if max_pairs is not None and max_pairs < 1:
        raise ValueError("max_pairs must be at least 1 (half of the forks)")
    fabrics: dict[str, dict[str, Any]] = {}
    addresses: dict[tuple[str, str], str] = {}
    rails: dict[tuple[str, str], dict[int, tuple[str, str | None]]] = {}
    excluded: list[dict[str, Any]] = []
    for host in order:
        part = parts.get(host)
        if not isinstance(part, Mapping):
            continue
        for entry in part.get("fabrics") or []:
            name = str(entry["name"])
            fabric = fabrics.setdefault(name, {"hosts": [], "subnets": list(entry.get("subnets") or []),
                                               "mtu": entry.get("mtu")})
            address = entry.get("address")
            if not address:
                excluded.append({"host": host, "fabric": name, "address": None,
                                 "reason": f"no address on fabric {name} (set datapath_addresses.{name} "
                                           "in the host's variables)"})
            elif not entry.get("address_ok", True):
                excluded.append({"host": host, "fabric": name, "address": str(address),
                                 "reason": f"address {address} is outside the subnets of fabric {name} "
                                           f"({', '.join(fabric['subnets']) or 'none'}): refused, nothing sent"})
            else:
                fabric["hosts"].append(host)
                addresses[(host, name)] = str(address).split("/", maxsplit=1)[0]
                found = _host_rails(entry)
                rails[(host, name)] = found
                for rail in entry.get("rails") or []:
                    if rail.get("address") and not rail.get("address_ok", True) and rail.get("rail"):
                        excluded.append({"host": host, "fabric": name, "address": str(rail["address"]),
                                         "rail": rail["rail"],
                                         "reason": f"rail{rail['rail']} address {rail['address']} is outside the "
                                                   f"subnets of fabric {name}: that rail is not measured"})
    rounds: list[dict[str, Any]] = []
    for name, fabric in fabrics.items():
        members = fabric["hosts"]
        planned = rounds_for(mode, members, peers, seed, name)
        fabric["pairs"] = sum(len(r) for r in planned)
        first = len(rounds)
        for matching in planned:
            for chunk in _split(matching, max_pairs):
                rounds.append(_round(len(rounds) + 1, name, chunk, fabric["subnets"], addresses,
                                     {"port": port, "streams": streams, "duration": duration, "tool": tool,
                                      "wait": wait}, rails))
        fabric["rounds"] = len(rounds) - first
    return {"mode": mode, "sample_peers": peers, "seed": seed, "streams": streams, "duration": duration,
            "tool": tool, "port": port, "max_pairs": max_pairs, "hosts": order, "fabrics": fabrics,
            "excluded": excluded, "rounds": rounds,
            "estimate_s": round(len(rounds) * (duration + overhead), 1), "overhead_s": overhead}


def _host_rails(entry: Mapping[str, Any]) -> dict[int, tuple[str, str | None]]:
    """{rail: (address, interface)} of a host's fabric entry: its rails with a usable address (rail0 is the
    fabric's address and interface where the plan lists no rails)."""
    found: dict[int, tuple[str, str | None]] = {}
    for rail in entry.get("rails") or []:
        if rail.get("address") and rail.get("address_ok", True):
            found[int(rail["rail"])] = (str(rail["address"]).split("/", maxsplit=1)[0], rail.get("interface"))
    if 0 not in found and entry.get("address"):
        found[0] = (str(entry["address"]).split("/", maxsplit=1)[0], entry.get("interface"))
    return found


def pair_rails(client: Mapping[int, tuple[str, str | None]], server: Mapping[int, tuple[str, str | None]],
               port: int) -> list[dict[str, Any]]:
    """The rails a pair loads: every rail both hosts have, rail i on port + 2i (the latency probe on + 1)."""
    return [{"rail": rail, "client_address": client[rail][0], "server_address": server[rail][0],
             "client_interface": client[rail][1], "server_interface": server[rail][1], "port": port + 2 * rail}
            for rail in sorted(set(client) & set(server))]


def _round(index: int, fabric: str, pairs: list[Pair], subnets: list[str], addresses: Mapping[tuple[str, str], str],
           common: Mapping[str, Any],
           rails: Mapping[tuple[str, str], Mapping[int, tuple[str, str | None]]] | None = None) -> dict[str, Any]:
    rows = []
    roles: dict[str, dict[str, Any]] = {}
    for number, (client, server) in enumerate(pairs, start=1):
        pair_id = f"{fabric}:{client}->{server}"
        c_addr, s_addr = addresses[(client, fabric)], addresses[(server, fabric)]
        legs = pair_rails((rails or {}).get((client, fabric), {}), (rails or {}).get((server, fabric), {}),
                          int(common["port"]))
        row = {"id": pair_id, "client": client, "server": server, "client_address": c_addr,
               "server_address": s_addr, "port": common["port"]}
        base = {"port": common["port"], "streams": common["streams"], "duration": common["duration"],
                "tool": common["tool"], "wait": common["wait"], "latency_interval": LATENCY_INTERVAL_S,
                "allowed_networks": list(subnets),
                # the pair's per-run token: the server serves only this client with it (docs/security.md)
                "token": secrets.token_hex(16)}
        server_args: dict[str, Any] = {"role": "server", "address": s_addr, "peer": c_addr, **base}
        client_args: dict[str, Any] = {"role": "client", "address": s_addr, "source": c_addr, **base}
        if legs:
            row["rails"] = legs
            if len(legs) > 1 or legs[0]["rail"] != 0:
                first = legs[0]
                row.update(client_address=first["client_address"], server_address=first["server_address"],
                           port=first["port"])
                server_args.update(address=first["server_address"], port=first["port"], peer=first["client_address"],
                                   legs=[{"rail": r["rail"], "address": r["server_address"], "port": r["port"],
                                          "peer": r["client_address"], "interface": r["server_interface"]}
                                         for r in legs])
                client_args.update(address=first["server_address"], source=first["client_address"],
                                   port=first["port"],
                                   legs=[{"rail": r["rail"], "address": r["server_address"], "port": r["port"],
                                          "source": r["client_address"], "interface": r["client_interface"]}
                                         for r in legs])
        rows.append(row)
        roles[server] = {"fabric": fabric, "pair": pair_id, "number": number, "role": "server", "peer": client,
                         "args": server_args}
        roles[client] = {"fabric": fabric, "pair": pair_id, "number": number, "role": "client", "peer": server,
                         "args": client_args}
    return {"index": index, "fabric": fabric, "pairs": rows, "hosts": roles}
