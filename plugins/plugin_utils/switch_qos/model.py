# Copyright: aiinfra.datapath contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The switch state every parser returns, the same for each OS: plain data, JSON-ready.

A switch (:func:`switch`) has ``ports``, each a :func:`port` with what the recorded configuration says
about it (``None``: the state does not record it, so it is not compared):

* ``trust``: ``dscp``, ``pcp``, ``both`` or ``port`` (what classifies a frame);
* ``dscp_map``: ``{"name": where it comes from, "table": {dscp: class}}``;
* ``class_word``: what a class is on this OS (SONiC: ``TC``; NVUE and Onyx: ``switch priority``); PFC
  and the lossless buffers are per class, and a class's pause frames carry its number as priority;
* ``class_tc``: ``{"name", "table": {class: TC}}`` (NVUE's SP->TC table); ``None``: the class is the TC;
* ``tc_queue``: ``{"name", "table": {TC: queue}}`` (SONiC TC_TO_QUEUE_MAP); ``None``: the TC is the queue;
* ``pfc``: ``{"classes": [...], "source": ...}``, the classes with PFC on;
* ``lossless``: ``{"classes": [...], "source": ...}``, the classes with lossless buffers, where the state
  records buffers per class (SONiC BUFFER_QUEUE); ``None``: PFC alone decides;
* ``scheduler``: ``{queue: {"mode": "strict"|"dwrr", "weight": int|None, "source": ...}}``;
* ``mtu``: the port's MTU; ``neighbor``: ``{"host", "port"}`` the switch sees on it (LLDP, DEVICE_NEIGHBOR);
* ``pfc_oper``: False when the switch reports PFC operationally off on the port (Onyx ``PFC oper``);
* ``bound``: False for a port the state lists without a QoS binding of its own (SONiC: in PORT, not in
  PORT_QOS_MAP); such ports are compared only when ``switch.ports`` names them.
"""

from __future__ import annotations

from typing import Any

State = dict[str, Any]
Port = dict[str, Any]
FIELDS = ("trust", "dscp_map", "class_word", "class_tc", "tc_queue", "pfc", "lossless", "scheduler", "mtu",
          "neighbor", "pfc_oper", "bound")


def port(**values: Any) -> Port:
    """A port record with every field (``None`` where the state says nothing)."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise TypeError("unknown port fields: %s" % ", ".join(sorted(unknown)))
    return {name: values.get(name) for name in FIELDS}


def switch(name: str, os_name: str, source: str, ports: dict[str, Port], notes: list[str] | None = None) -> State:
    ordered = dict(sorted(ports.items(), key=lambda kv: port_sort_key(kv[0])))
    return {"name": name, "os": os_name, "source": source, "ports": ordered,
            "notes": list(notes or [])}


def port_sort_key(name: str) -> tuple[Any, ...]:
    """Ethernet2 before Ethernet10, swp1s1 after swp1, Eth1/2 before Eth1/10."""
    import re

    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"([0-9]+)", name) if p)


class StateError(ValueError):
    """A switch state that cannot be read: the message names the file and what is wrong in it."""
