# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SONiC: the switch's config_db.json (``/etc/sonic/config_db.json``, ``show runningconfiguration all``),
or the same tables as a redis dump (keys ``TABLE|key``).

Tables read (sonic-net/sonic-buildimage src/sonic-yang-models/doc/Configuration.md):

* ``PORT``: ports and their ``mtu``; ``DEVICE_NEIGHBOR``: the host and port on each port;
* ``PORT_QOS_MAP``: per port (or a comma list of ports) ``dscp_to_tc_map`` / ``dot1p_to_tc_map`` (the
  trust: DSCP, PCP or both), ``tc_to_queue_map`` and ``pfc_enable`` (the lossless TCs, e.g. ``"3,4"``);
  the ``global`` entry's ``dscp_to_tc_map`` applies to a port without its own;
* ``DSCP_TO_TC_MAP``, ``TC_TO_QUEUE_MAP``: the maps by name;
* ``QUEUE`` (``PORT|queues``: ``scheduler``) and ``SCHEDULER`` (``type`` STRICT/DWRR/WRR, ``weight``);
* ``BUFFER_QUEUE`` (``PORT|queues``: ``profile``): a queue whose profile is a lossless one
  (``egress_lossless_profile``) holds lossless traffic; ports with BUFFER_QUEUE entries have lossless
  buffers only on those queues.

In SONiC a PFC priority is the TC it protects (MAP_PFC_PRIORITY_TO_QUEUE and the lossless
TC_TO_PRIORITY_GROUP_MAP entries are the identity in the default templates), so the class here is the TC.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .model import Port, State, StateError, port, switch

OS = "sonic"


def _tables(doc: Any, source: str) -> dict[str, dict[str, Any]]:
    if not isinstance(doc, Mapping):
        raise StateError(f"{source}: a SONiC config_db.json is a JSON object of tables")
    tables: dict[str, dict[str, Any]] = {}
    for key, value in doc.items():
        if not isinstance(key, str):
            continue
        if "|" in key and key.split("|", 1)[0].isupper():  # redis dump: "PORT|Ethernet0": {...}
            table, _sep, entry = key.partition("|")
            if isinstance(value, Mapping):
                tables.setdefault(table, {})[entry] = value
        elif isinstance(value, Mapping):
            tables.setdefault(key, {}).update(value)
    if not any(name in tables for name in ("PORT_QOS_MAP", "DSCP_TO_TC_MAP", "PORT")):
        raise StateError(f"{source}: no PORT, PORT_QOS_MAP or DSCP_TO_TC_MAP table: not a SONiC config_db.json")
    return tables


def _ints(text: Any) -> list[int]:
    """``"3,4"`` / ``"3-4"`` / ``"0-2,5"`` -> [3, 4] ...; anything unreadable -> []."""
    out: list[int] = []
    for part in str(text or "").replace(" ", "").split(","):
        if not part:
            continue
        low, sep, high = part.partition("-")
        if low.isdigit() and (not sep or high.isdigit()):
            first, last = int(low), int(high) if sep else int(low)
            if 0 <= first <= last <= 63:
                out.extend(range(first, last + 1))
    return sorted(set(out))


def _map(tables: Mapping[str, Any], table: str, name: Any) -> dict[int, int] | None:
    entry = tables.get(table, {}).get(str(name)) if name else None
    if not isinstance(entry, Mapping):
        return None
    out = {}
    for key, value in entry.items():
        if str(key).strip().isdigit() and str(value).strip().isdigit():
            out[int(str(key).strip())] = int(str(value).strip())
    return out


def _ref(value: Any) -> str:
    """A table reference: ``AZURE`` or the older ``[DSCP_TO_TC_MAP|AZURE]`` form -> ``AZURE``."""
    text = str(value or "").strip()
    if text.startswith("[") and text.endswith("]") and "|" in text:
        return text[1:-1].split("|", 1)[1]
    return text


def _per_port(table: Mapping[str, Any]) -> dict[str, list[tuple[list[int], Mapping[str, Any], str]]]:
    """``QUEUE``/``BUFFER_QUEUE``-style keys ``Ethernet0,Ethernet4|3-4`` -> {port: [(indexes, entry, key)]}."""
    out: dict[str, list[tuple[list[int], Mapping[str, Any], str]]] = {}
    for key, entry in table.items():
        ports, sep, indexes = str(key).rpartition("|")
        if not sep or not isinstance(entry, Mapping):
            continue
        for name in ports.split(","):
            out.setdefault(name.strip(), []).append((_ints(indexes), entry, str(key)))
    return out


def parse(doc: Any, name: str, source: str) -> State:
    tables = _tables(doc, source)
    notes: list[str] = []
    qos: dict[str, Mapping[str, Any]] = {}
    for key, entry in tables.get("PORT_QOS_MAP", {}).items():
        if isinstance(entry, Mapping):
            for port_name in str(key).split(","):
                qos[port_name.strip()] = entry
    glob = qos.pop("global", {})
    queues = _per_port(tables.get("QUEUE", {}))
    buffers = _per_port(tables.get("BUFFER_QUEUE", {}))
    schedulers = tables.get("SCHEDULER", {})
    port_table = tables.get("PORT", {})
    neighbors = tables.get("DEVICE_NEIGHBOR", {})
    ports: dict[str, Port] = {}
    for port_name in sorted(set(qos) | set(port_table)):
        entry = qos.get(port_name)
        found = port_table.get(port_name)
        attrs: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        mtu_text = str(attrs.get("mtu", "")).strip()
        neighbor = neighbors.get(port_name) if isinstance(neighbors.get(port_name), Mapping) else None
        record: dict[str, Any] = {
            "mtu": int(mtu_text) if mtu_text.isdigit() else None,
            "neighbor": {"host": str(neighbor.get("name")), "port": neighbor.get("port")}
            if neighbor and neighbor.get("name") else None,
            "class_word": "TC",
            "bound": entry is not None,
        }
        if entry is None:
            # no QoS binding: the global DSCP map classifies (202205 and later), nothing is lossless
            dscp_name = _ref(glob.get("dscp_to_tc_map")) if isinstance(glob, Mapping) else ""
            table = _map(tables, "DSCP_TO_TC_MAP", dscp_name)
            record.update(trust="dscp" if table is not None else None,
                          dscp_map={"name": f"DSCP_TO_TC_MAP|{dscp_name} (PORT_QOS_MAP|global)", "table": table}
                          if table is not None else None,
                          pfc={"classes": [], "source": f"PORT_QOS_MAP has no entry for {port_name}"})
            ports[port_name] = port(**record)
            continue
        glob_map = glob.get("dscp_to_tc_map") if isinstance(glob, Mapping) else ""
        dscp_name = _ref(entry.get("dscp_to_tc_map") or glob_map)
        dot1p_name = _ref(entry.get("dot1p_to_tc_map"))
        table = _map(tables, "DSCP_TO_TC_MAP", dscp_name)
        if dscp_name and table is None:
            notes.append(f"PORT_QOS_MAP|{port_name} names DSCP_TO_TC_MAP|{dscp_name}, which is not in the state")
        trust = "both" if table is not None and dot1p_name else "dscp" if table is not None else \
            "pcp" if dot1p_name else None
        tc_queue = _map(tables, "TC_TO_QUEUE_MAP", _ref(entry.get("tc_to_queue_map")))
        scheduler: dict[int, dict[str, Any]] = {}
        for indexes, queue_entry, key in queues.get(port_name, []):
            sched_name = _ref(queue_entry.get("scheduler"))
            sched = schedulers.get(sched_name) if sched_name else None
            if not isinstance(sched, Mapping):
                continue
            kind = str(sched.get("type", "")).upper()
            weight = str(sched.get("weight", "")).strip()
            for queue in indexes:
                scheduler[queue] = {"mode": "strict" if kind == "STRICT" else "dwrr",
                                    "weight": int(weight) if weight.isdigit() and kind != "STRICT" else None,
                                    "source": f"QUEUE {key.rpartition('|')[2]}: SCHEDULER|{sched_name} "
                                              f"({kind or '?'}" + (f" weight {weight}" if weight and kind != "STRICT"
                                                                   else "") + ")"}
        lossless = None
        if buffers.get(port_name):
            queues_lossless = sorted({q for indexes, buf, _key in buffers[port_name]
                                      if "lossless" in _ref(buf.get("profile")).lower() for q in indexes})
            keys = "BUFFER_QUEUE " + ", ".join(f"{key.rpartition('|')[2]} {_ref(buf.get('profile'))}"
                                               for _i, buf, key in buffers[port_name])
            lossless = {"classes": queues_lossless, "source": keys, "of": "queue"}
        record.update(
            trust=trust,
            dscp_map={"name": f"DSCP_TO_TC_MAP|{dscp_name}", "table": table} if table is not None else None,
            tc_queue={"name": f"TC_TO_QUEUE_MAP|{_ref(entry.get('tc_to_queue_map'))}", "table": tc_queue}
            if tc_queue is not None else None,
            pfc={"classes": _ints(entry.get("pfc_enable")),
                 "source": f"PORT_QOS_MAP pfc_enable {entry.get('pfc_enable', '(none)')!s}"},
            lossless=lossless,
            scheduler=scheduler or None,
        )
        ports[port_name] = port(**record)
    return switch(name, OS, source, ports, notes)
