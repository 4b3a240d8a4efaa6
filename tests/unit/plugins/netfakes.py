"""Fakes for the network modules: recorded tool outputs behind the real code paths.

``FakeRunner`` stands in for ``_runner.Runner``: the module code calls ``run(argv)`` exactly
as on a node, and the fake answers from recorded fixture files or from a small stateful
device model (``FakeIp``, ``FakeDcb``, ``FakeMlnxQos``) so that a second run sees what the
first one set. ``nic()`` builds a fake sysfs/configfs tree for one NIC under a node root.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "network"


def fixture(rel: str) -> str:
    return (FIXTURES / rel).read_text()


class FakeRunner:
    """Answers argv lists; unexpected commands fail the test loudly."""

    def __init__(self, handlers: list[Callable[[list[str]], tuple[int, str, str] | None]] | None = None,
                 which: dict[str, str | None] | None = None) -> None:
        self.handlers = list(handlers or [])
        self.paths = dict(which or {})
        self.calls: list[list[str]] = []
        self.commands: list[list[str]] = []
        self.module = None

    def __call__(self, module: Any) -> FakeRunner:  # used as the Runner class
        self.module = module
        return self

    def which(self, name: str, required: bool = False) -> str | None:
        return self.paths.get(name)

    def run(self, argv: list[str], check: bool = True, data: Any = None, record: bool = False):
        from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError

        assert isinstance(argv, list), "argv must be a list"
        self.calls.append(list(argv))
        for handler in self.handlers:
            answer = handler(list(argv))
            if answer is not None:
                if record:
                    self.commands.append(list(argv))
                rc, out, err = answer
                if check and rc != 0:
                    raise CommandError(argv, rc, out, err)
                return rc, out, err
        raise AssertionError("unexpected command: %r" % (argv,))

    def changing_calls(self) -> list[list[str]]:
        return list(self.commands)


def static(argv: list[str], rc: int = 0, out: str = "", err: str = ""):
    def handler(got: list[str]):
        return (rc, out, err) if got == argv else None
    return handler


class FakeIp:
    """``ip -j -d link show`` / ``ip link set dev X mtu N`` over an in-memory link table."""

    def __init__(self, links: list[dict], addr: str = "[]", routes: dict[str, str] | None = None,
                 refuse: dict[str, str] | None = None) -> None:
        self.links = {entry["ifname"]: dict(entry) for entry in links}
        self.addr = addr
        self.routes = routes or {}
        self.refuse = refuse or {}
        self.sets: list[tuple[str, int]] = []

    def __call__(self, argv: list[str]):
        if argv[:1] != ["/usr/sbin/ip"]:
            return None
        rest = argv[1:]
        if rest == ["-j", "-d", "link", "show"]:
            return 0, json.dumps(list(self.links.values())), ""
        if rest == ["-j", "addr", "show"]:
            return 0, self.addr, ""
        if rest[:3] == ["-j", "route", "get"]:
            return 0, self.routes.get(rest[3], "[]"), ""
        if rest[:4] == ["link", "set", "dev", rest[3] if len(rest) > 3 else None] and rest[4] == "mtu":
            name, mtu = rest[3], int(rest[5])
            if name in self.refuse:
                return 2, "", self.refuse[name]
            self.links[name]["mtu"] = mtu
            self.sets.append((name, mtu))
            if (self.links[name].get("linkinfo") or {}).get("info_kind") == "bond":
                # the bonding driver's bond_change_mtu sets the MTU of every slave
                for link in self.links.values():
                    if link.get("master") == name:
                        link["mtu"] = mtu
            return 0, "", ""
        return None


class FakeDcb:
    """A DCB-capable device seen through ``dcb -j``; ``set``/``replace`` change it."""

    def __init__(self, dev: str, pfc: str | None = None, app: str | None = None, ets: str | None = None,
                 apptrust: str | None = None, dcbx: str = '{"host":true,"ieee":true}',
                 unsupported: str | None = None, apptrust_err: str | None = None) -> None:
        self.dev = dev
        self.state = {
            "pfc": json.loads(pfc or '{"pfc_cap":8,"prio_pfc":[false,false,false,false,false,false,false,false]}'),
            "app": json.loads(app or '{}'),
            "ets": json.loads(ets or '{"prio_tc":[0,0,0,0,0,0,0,0],"tc_tsa":["ets","ets","ets","ets",'
                              '"ets","ets","ets","ets"],"tc_bw":[100,0,0,0,0,0,0,0]}'),
            "apptrust": json.loads(apptrust or '{"order":["pcp"]}'),
            "dcbx": json.loads(dcbx),
        }
        self.unsupported = unsupported
        self.apptrust_err = apptrust_err
        self.sets: list[list[str]] = []

    def __call__(self, argv: list[str]):
        if argv[:1] != ["/usr/sbin/dcb"]:
            return None
        if argv[1] == "-j" and argv[3] == "show":
            obj, dev = argv[2], argv[5]
            if dev != self.dev:
                return 1, "", "Cannot find device \"%s\"" % dev
            if self.unsupported:
                return 1, "", self.unsupported
            if obj == "apptrust" and self.apptrust_err:
                return 1, "", self.apptrust_err
            return 0, json.dumps(self.state[obj]), ""
        obj, verb, dev = argv[1], argv[2], argv[4]
        assert dev == self.dev
        self.sets.append(argv)
        args = argv[5:]
        if obj == "pfc" and verb == "set":
            assert args[0] == "prio-pfc"
            for pair in args[1:]:
                prio, onoff = pair.split(":")
                self.state["pfc"]["prio_pfc"][int(prio)] = onoff == "on"
        elif obj == "app" and verb == "replace":
            assert args[0] == "dscp-prio"
            table = dict(self.state["app"].get("dscp_prio", []))
            for pair in args[1:]:
                dscp, prio = pair.split(":")
                table[int(dscp)] = int(prio)
            self.state["app"]["dscp_prio"] = [[d, table[d]] for d in sorted(table)]
        elif obj == "ets" and verb == "set":
            key = None
            for tok in args:
                if tok in ("prio-tc", "tc-tsa", "tc-bw"):
                    key = tok.replace("-", "_")
                    continue
                idx, value = tok.split(":")
                self.state["ets"][key][int(idx)] = value if key == "tc_tsa" else int(value)
        elif obj == "apptrust" and verb == "set":
            assert args[0] == "order"
            self.state["apptrust"]["order"] = args[1:]
        else:
            raise AssertionError("unexpected dcb command %r" % argv)
        return 0, "", ""


def render_mlnx_qos(state: dict) -> str:
    """mlnx_qos -i text (new format) of a state; constructed for round trips only."""
    lines = ["DCBX mode: %s" % state["dcbx"], "Priority trust state: %s" % state["trust"], "dscp2prio mapping:"]
    for prio in range(8):
        dscps = [d for d in range(63, -1, -1) if state["dscp2prio"][d] == prio]
        lines.append("        prio:%d dscp:%s" % (prio, "".join("%02d," % d for d in dscps)))
    lines += ["default priority:", "Cable len: 7", "PFC configuration:",
              "        priority    0   1   2   3   4   5   6   7",
              "        enabled     " + "   ".join(str(int(v)) for v in state["pfc"]) + "   "]
    for tc in range(8):
        bw = ", bw: %d%%" % state["bw"][tc] if state["tsa"][tc] == "ets" else ""
        lines.append("tc: %d ratelimit: unlimited, tsa: %s%s" % (tc, state["tsa"][tc], bw))
        for prio in range(8):
            if state["prio_tc"][prio] == tc:
                lines.append("         priority:  %d" % prio)
    return "\n".join(lines) + "\n"


class FakeMlnxQos:
    """``mlnx_qos -i DEV [options]``; refuses --trust with --dscp2prio like the real tool."""

    def __init__(self, dev: str, dcbx: str = "OS controlled") -> None:
        self.dev = dev
        self.state = {"dcbx": dcbx, "trust": "pcp", "dscp2prio": {d: d >> 3 for d in range(64)},
                      "pfc": [False] * 8, "prio_tc": [1, 0, 2, 3, 4, 5, 6, 7], "tsa": ["vendor"] * 8,
                      "bw": [0] * 8}
        self.sets: list[list[str]] = []

    def __call__(self, argv: list[str]):
        if argv[:1] != ["/usr/bin/mlnx_qos"]:
            return None
        assert argv[1:3] == ["-i", self.dev]
        opts = argv[3:]
        if "--trust" in opts and "--dscp2prio" in opts:
            return 1, "trust and dscp2prio commands cannot be used at the same time.\n", ""
        if opts:
            self.sets.append(argv)
        i = 0
        while i < len(opts):
            key, value = opts[i], opts[i + 1]
            if key == "--trust":
                self.state["trust"] = value
            elif key == "--pfc":
                self.state["pfc"] = [v == "1" for v in value.split(",")]
            elif key == "--dscp2prio":
                op, dscp, prio = value.split(",")
                assert op == "set"
                self.state["dscp2prio"][int(dscp)] = int(prio)
            elif key == "-p":
                self.state["prio_tc"] = [int(v) for v in value.split(",")]
            elif key == "-s":
                self.state["tsa"] = value.split(",")
            elif key == "-t":
                self.state["bw"] = [int(v) for v in value.split(",")]
            else:
                raise AssertionError("unexpected mlnx_qos option %s" % key)
            i += 2
        return 0, render_mlnx_qos(self.state), ""


def nic(node, name: str, pci: str | None = "0000:e6:00.0", driver: str = "mlx5_core",
        hca: str | None = "mlx5_0", ecn: bool = True, vendor_qos: bool = False, mac: str = "b8:3f:d2:00:00:01",
        mtu: int = 1500, fw_ver: str | None = None, board_id: str | None = None) -> None:
    """A netdev under /sys/class/net; with ``pci`` a device link and driver link like a real NIC."""
    base = "/sys/class/net/%s" % name
    node.put(base + "/address", mac + "\n")
    node.put(base + "/mtu", "%d\n" % mtu)
    if pci is None:
        return
    dev = node.path("/sys/devices/pci0000:e0/%s" % pci)
    dev.mkdir(parents=True, exist_ok=True)
    drv = node.path("/sys/bus/pci/drivers/%s" % driver)
    drv.mkdir(parents=True, exist_ok=True)
    if not (dev / "driver").exists():
        os.symlink(str(drv), str(dev / "driver"))
    os.symlink(str(dev), str(node.path(base + "/device")))
    if hca:
        node.put("/sys/devices/pci0000:e0/%s/infiniband/%s/ports/1/state" % (pci, hca), "4: ACTIVE\n")
        if fw_ver:
            node.put("/sys/devices/pci0000:e0/%s/infiniband/%s/fw_ver" % (pci, hca), fw_ver + "\n")
        if board_id:
            node.put("/sys/devices/pci0000:e0/%s/infiniband/%s/board_id" % (pci, hca), board_id + "\n")
    if ecn:
        for point in ("rp", "np"):
            for prio in range(8):
                node.put(base + "/ecn/roce_%s/enable/%d" % (point, prio), "1\n")
        node.put(base + "/ecn/roce_np/cnp_dscp", "0\n")
        node.put(base + "/ecn/roce_np/cnp_802p_prio", "0\n")
    if vendor_qos:
        node.put(base + "/qos/trust", "pcp\n")


def rdma_cm(node, hca: str = "mlx5_0", mode: str | None = "IB/RoCE v1", tos: str | None = "0",
            configfs: str = "/sys/kernel/config") -> None:
    node.path(configfs + "/rdma_cm").mkdir(parents=True, exist_ok=True)
    if mode is not None:
        node.put("%s/rdma_cm/%s/ports/1/default_roce_mode" % (configfs, hca), mode + "\n")
        node.put("%s/rdma_cm/%s/ports/1/default_roce_tos" % (configfs, hca), tos + "\n")


def use(monkeypatch, runner: FakeRunner) -> FakeRunner:
    """Run the capability modules (module_main) with ``runner`` instead of the real one."""
    from ansible_collections.aiinfra.datapath.plugins.module_utils import _capability

    monkeypatch.setattr(_capability, "Runner", runner)
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    return runner


class Node:
    """Minimal node tree (put/path) for module_utils tests; modules tests use the ``node`` fixture."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def put(self, path: str, content: str = "") -> Path:
        target = self.path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return target


def fresh_warnings(monkeypatch) -> Callable[[], tuple[str, ...]]:
    """Clear ansible's global warning list for one test; return a reader."""
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings as ansible_warnings

    # Importing controller code (filter plugins in other tests) flips ansible into controller
    # mode, where warn() goes to Display instead of the module result: force module mode.
    monkeypatch.setattr(_internal, "is_controller", False)
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    return ansible_warnings.get_warning_messages


# --- loopback probes (net_probe tests): ports, open files, child processes -------------
def free_port() -> int:
    """A TCP port on 127.0.0.1 whose UDP port + 1 is free as well (the latency echo)."""
    while True:
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        port = tcp.getsockname()[1]
        tcp.close()
        if port >= 65534:
            continue
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
        finally:
            udp.close()


def fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def children() -> list[str]:
    found: list[str] = []
    for task in Path("/proc/self/task").iterdir():
        try:
            found += (task / "children").read_text().split()
        except OSError:
            pass
    return found
