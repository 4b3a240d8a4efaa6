"""`datapath-lab` command line (also `python -m datapath_lab`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import impair, nvconfig
from .core import DEFAULT_FABRICS, SERVER_PORT, Lab, LabConfig, LabError, node_rails


def _fabric(text: str) -> tuple[str, int]:
    name, sep, mtu = text.partition(":")
    if not sep or not mtu.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: use NAME:MTU, e.g. rdma:9000")
    return name, int(mtu)


def _server(text: str) -> tuple[str, str]:
    name, sep, fabric = text.rpartition(":")
    if not fabric:
        raise argparse.ArgumentTypeError(f"{text!r}: use [NAME:]FABRIC, e.g. src:rdma")
    return (name if sep else "src"), fabric


def _typed(parse: Any) -> Any:
    """An argparse type from one of impair's parsers (its message becomes the usage error)."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except impair.ImpairError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = parse.__name__.replace("parse_", "")
    return convert


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="datapath-lab",
        description="Simulated GPU nodes from network namespaces, overlay roots and loop devices.",
    )
    parser.add_argument("--name", default="dp", help="lab name, prefix of its namespaces (default: dp)")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="build the lab (or recover / report an existing one)")
    up.add_argument("--nodes", type=int, default=4)
    up.add_argument("--fabric", type=_fabric, action="append", dest="fabrics", metavar="NAME:MTU",
                    help="a fabric, repeatable; the first is the management fabric "
                         "(default: mgmt:1500 rdma:9000)")
    up.add_argument("--nvme-size", default="2G", help="size of each node's sparse NVMe image (default 2G)")
    up.add_argument("--nvme-direct-io", action="store_true",
                    help="each NVMe does direct I/O to its image (no second copy in the host's page cache)")
    up.add_argument("--inventory-dir", help="where to write the inventory (default: inventories/lab)")
    up.add_argument("--server", type=_server, metavar="[NAME:]FABRIC",
                    help="add a source-server namespace NAME (default src) on FABRIC at .250 of its subnet")
    up.add_argument("--rails", type=int, default=1,
                    help="NICs per node on every fabric but the management one (rails; default 1), named like "
                         "real ports (ens1f0np0, ens2f0np0, ...), each with its own switch port")
    up.add_argument("--addressing", choices=("shared-subnet", "per-rail-subnet"), default="shared-subnet",
                    help="rails in the fabric's one subnet on one bridge (default), or each rail in a subnet "
                         "(198.18.I+8R.0/24) on a bridge of its own")
    up.add_argument("--queues", type=int, default=1,
                    help="transmit and receive queues of each node NIC (veth numtxqueues/numrxqueues, default 1)")
    up.add_argument("--network", choices=("none", "networkd", "netplan"), default="none",
                    help="the nodes' network backend: none (the lab sets addresses and MTUs, default), "
                         "networkd (systemd-networkd runs in each node with its .network files), netplan "
                         "(/etc/netplan in each node, rendered by netplan generate for networkd)")
    rb = sub.add_parser("reboot", help="simulate a reboot of nodes: reset what the kernel holds, replay their boot",
                        description="Reboot lab nodes one after another: their processes end, mounts made since "
                                    "they were built go, NICs come back at the kernel's default MTU, network "
                                    "sysctls at a new namespace's defaults, a new boot id; then inside the node "
                                    "systemd-tmpfiles, systemd-sysctl, the network backend, mount -a and the "
                                    "units installed on it run. Inside a node, `shutdown -r` or `reboot` asks "
                                    "for the same (docs/lab.md).")
    rb.add_argument("nodes", nargs="*", metavar="NODE", help="nodes to reboot (default: every node)")
    rb.add_argument("--json", action="store_true", help="print each boot's report as JSON")
    sub.add_parser("agent", help="(internal) the lab's reboot agent; `up` starts it, `down` stops it")
    nic = sub.add_parser(
        "nic-firmware", help="give a node a (fake) ConnectX-7 whose NV configuration mlxconfig sets",
        description="Install the lab's mlxconfig/mlxfwreset and one dual-port ConnectX-7 (PCI functions "
                    "0000:3b:00.0 and .1) in the node's overlay, never on the host: set writes Next Boot, the "
                    "lab's reboot copies Next Boot to Current - or, with --broken, does not. The inventory "
                    "names the device directory (nic_config_pci_dir) and the lab's spec gains a nic_config "
                    "entry (docs/lab.md).")
    nic.add_argument("node")
    mode = nic.add_mutually_exclusive_group()
    mode.add_argument("--broken", action="store_true", help="the firmware does not apply Next Boot at a reboot")
    mode.add_argument("--healthy", action="store_true", help="the firmware applies Next Boot at a reboot (default)")
    mode.add_argument("--remove", action="store_true", help="take the NIC and the tools off the node again")
    nic.add_argument("--json", action="store_true", help="print the device's parameters as JSON")

    sub.add_parser("down", help="remove every namespace, process, mount and loop device of the lab")
    st = sub.add_parser("status", help="show the lab; exit 0 healthy, 1 degraded, 3 not up")
    st.add_argument("--json", action="store_true")
    inv = sub.add_parser("inventory", help="(re)write the Ansible inventory, or print it (--list)")
    inv.add_argument("--inventory-dir")
    inv.add_argument("--list", action="store_true",
                     help="print Ansible's script-inventory JSON (spec included; empty while the lab is down)")
    inv.add_argument("--host", help="script-inventory protocol: the host's variables (all are in _meta)")
    sh = sub.add_parser("shell", help="a root shell inside a node")
    sh.add_argument("node")
    ex = sub.add_parser("exec", help="run a command inside a node: exec NODE -- CMD...")
    ex.add_argument("node")
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    srv = sub.add_parser("serve", help="serve a directory over HTTP (Range support) from the source server")
    srv.add_argument("directory", nargs="?")
    srv.add_argument("--port", type=int, default=SERVER_PORT, help=f"TCP port (default {SERVER_PORT})")
    srv.add_argument("--stop", action="store_true", help="stop the running HTTP server instead")
    mtu = sub.add_parser("set-port-mtu", help="set a switch port's MTU (simulate a misconfigured switch)")
    mtu.add_argument("node")
    mtu.add_argument("fabric")
    mtu.add_argument("mtu", type=int)
    mtu.add_argument("--rail", type=int, default=0, help="the node's rail on FABRIC (default 0)")
    imp = sub.add_parser(
        "impair", help="a bottleneck on purpose: a node's switch port (FABRIC) or its NVMe (nvme)",
        description="Impair a node's port of FABRIC inside the switch namespace (--rate: tc tbf, plus an "
                    "ifb for traffic from the node; --delay/--loss: a userspace relay, as this kernel has no "
                    "netem), or throttle its NVMe ('nvme': cgroup v1 blkio). Again on the same port replaces "
                    "the impairment; --clear removes it; `down` removes all.")
    imp.add_argument("node")
    imp.add_argument("target", metavar="FABRIC|nvme", help="a fabric name, or 'nvme' for the node's NVMe")
    imp.add_argument("--rate", type=_typed(impair.parse_rate),
                     help="shape to this rate, e.g. 200mbit, 1gbit (SI, bits per second, like tc)")
    imp.add_argument("--loss", type=_typed(impair.parse_loss),
                     help="drop each frame with this probability, e.g. 1%% (per direction; through the relay)")
    imp.add_argument("--delay", type=_typed(impair.parse_delay),
                     help="hold each frame this long, one way, e.g. 5ms (per direction: the RTT grows by "
                          "twice this with --direction both; through the relay)")
    imp.add_argument("--direction", choices=impair.DIRECTIONS, default="both",
                     help="traffic to the node, from it, or both (default)")
    imp.add_argument("--read-bps", type=_typed(impair.parse_byte_rate),
                     help="nvme: read bytes per second, binary units (20M = 20 MiB/s)")
    imp.add_argument("--read-iops", type=_typed(impair.parse_iops), help="nvme: read operations per second")
    imp.add_argument("--write-bps", type=_typed(impair.parse_byte_rate),
                     help="nvme: write bytes per second (direct I/O only: page-cache writeback is not throttled)")
    imp.add_argument("--write-iops", type=_typed(impair.parse_iops), help="nvme: write operations per second")
    imp.add_argument("--rail", type=int, default=0, help="the node's rail on FABRIC whose port is impaired (default 0)")
    imp.add_argument("--clear", action="store_true", help="remove the impairment of this port or NVMe")
    return parser


def _impair(lab: Lab, args: argparse.Namespace) -> int:
    net = {"rate": args.rate, "loss": args.loss, "delay": args.delay}
    disk = {"read_bps": args.read_bps, "read_iops": args.read_iops,
            "write_bps": args.write_bps, "write_iops": args.write_iops}
    try:
        impair.check_request(args.target, args.clear, net, disk)
    except impair.ImpairError as exc:
        raise LabError(str(exc)) from None
    if args.rail and args.target == impair.NVME:
        raise LabError("--rail names a port of a fabric, not the NVMe")
    rail = f" rail {args.rail}" if args.rail else ""
    if args.clear:
        had = impair.clear(lab, args.node, args.target, args.rail)
        print(f"{lab.name}: {args.node} {args.target}{rail} "
              + ("cleared" if had else "had no impairment (checked clean)"))
        return 0
    if args.target == impair.NVME:
        record = impair.impair_nvme(lab, args.node, **disk)
    else:
        record = impair.impair_fabric(lab, args.node, args.target, direction=args.direction, rail=args.rail, **net)
    print(f"{lab.name}: impaired {impair.describe(record)}")
    return 0


def _reboot(lab: Lab, args: argparse.Namespace) -> int:
    nodes = args.nodes or list(lab.require_state()["nodes"])
    reports = []
    for node in nodes:
        report = lab.reboot(node)
        reports.append(report)
        if args.json:
            continue
        print(f"{lab.name}: rebooted {node} in {report['seconds']} s (boot id {report['boot_id']})")
        for item in report["steps"][:-1]:
            if item["step"] != "boot_id":
                print(f"  {item['step']}: {item['text']}")
        for unit in report["units"]:
            print(f"  unit {unit['unit']}: {unit['result']}" + (f" ({unit['why']})" if unit.get("why") else ""))
        kept = report["globals"]
        same = sum(1 for v in kept.values() if v["same"])
        print(f"  global sysctls (shared with the host, not reset): {same} of {len(kept)} the boot would set "
              "hold their live values")
        for line in report["sysctl_log"]:
            print(f"  systemd-sysctl: {line}")
        for problem in report["problems"]:
            print(f"  PROBLEM: {problem}")
    if args.json:
        print(json.dumps(reports, indent=2, sort_keys=True))
    return 0


def _nic_firmware(lab: Lab, args: argparse.Namespace) -> int:
    if args.remove:
        done = nvconfig.remove(lab, args.node)
        print(f"{lab.name}: {args.node} " + ("has no lab NIC any more" if done else "had no lab NIC"))
        return 0
    shown = nvconfig.enable(lab, args.node, "broken" if args.broken else "healthy")
    if args.json:
        print(json.dumps(shown, indent=2, sort_keys=True))
        return 0
    for device in shown["devices"]:
        print(f"{lab.name}: {args.node} {device['slot']} ({', '.join(device['functions'])}) {device['part_number']} "
              f"PSID {device['psid']}, firmware {device['firmware']}; PCI functions listed in {shown['pci_dir']}")
        for name, values in device["params"].items():
            mark = "*" if values["current"] != values["next"] else " "
            print(f"  {mark} {name:32} default {values['default']!s:12} current {values['current']!s:12} "
                  f"next boot {values['next']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    lab = Lab(args.name)
    try:
        if args.command == "up":
            config = LabConfig(name=args.name, nodes=args.nodes, fabrics=args.fabrics or list(DEFAULT_FABRICS),
                               nvme_size=args.nvme_size, inventory_dir=args.inventory_dir, server=args.server,
                               network=args.network, nvme_direct_io=args.nvme_direct_io, rails=args.rails,
                               addressing=args.addressing, queues=args.queues)
            state = lab.up(config)
            print(f"inventory: {state['inventory_dir']}/hosts.yml")
            return 0
        if args.command == "down":
            lab.down()
            return 0
        if args.command == "status":
            status = lab.status()
            if args.json:
                print(json.dumps(status, indent=2, sort_keys=True))
            elif not status["up"]:
                left = status["leftovers"]
                print(f"lab {lab.name}: not up" + (f" (leftovers: {', '.join(left)})" if left else ""))
            else:
                print(f"lab {lab.name}: up since {status['created']} ({status['up_seconds']} s to build)")
                for fabric in status["fabrics"]:
                    subnets = ", ".join(fabric.get("subnets") or [fabric["subnet"]])
                    nics = ", ".join(fabric.get("ifnames") or [fabric["ifname"]])
                    rails = (f"; {fabric['rails']} rails, {fabric['addressing']}" if fabric.get("rails", 1) > 1
                             else "")
                    print(f"  fabric {fabric['name']}: {subnets} MTU {fabric['mtu']} ({nics}{rails})")
                agent = status.get("agent_pid")
                print(f"  network backend in the nodes: {status.get('network', 'none')}; reboot agent: "
                      + (f"pid {agent}" if agent else "not running (`up` starts it)"))
                for node, info in status["nodes"].items():
                    addrs = ", ".join(f"{n['ifname']} {n['address']}" for f in status["fabrics"]
                                      for n in node_rails(info, f["name"]))
                    boots = f"; boot {info['boots']} ({info['boot_id']})" if info.get("boot_id") else ""
                    dio = " (direct I/O)" if info.get("nvme_direct_io") else ""
                    print(f"  {node}: nvme {info['nvme']}{dio}; {addrs}{boots}")
                server = status.get("server")
                if server:
                    serving = server.get("serving")
                    what = (f"serving {serving['directory']} at {serving['url']} (pid {serving['pid']})"
                            if serving else "not serving")
                    print(f"  server {server['name']}: {server['fabric']} {server['ifname']} "
                          f"{server['address']}; {what}")
                for record in status.get("impairments", []):
                    print(f"  impaired {impair.describe(record)}")
                for problem in status["problems"]:
                    print(f"  PROBLEM: {problem}")
            if not status["up"]:
                return 3
            return 1 if status["problems"] else 0
        if args.command == "inventory":
            if args.host is not None:
                print("{}")
            elif args.list:
                print(json.dumps(lab.script_inventory(), indent=1, sort_keys=True))
            else:
                print(lab.write_inventory(lab.require_state(), args.inventory_dir) + "/hosts.yml")
            return 0
        if args.command == "shell":
            return lab.shell(args.node)
        if args.command == "exec":
            cmd = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not cmd:
                raise LabError("exec NODE -- COMMAND...: no command given")
            return lab.exec(args.node, cmd)
        if args.command == "serve":
            if args.stop:
                print(f"{lab.name}: source server " + ("stopped" if lab.stop_serve() else "was not running"))
                return 0
            if not args.directory:
                raise LabError("serve DIRECTORY [--port N] (or serve --stop)")
            serving = lab.serve(args.directory, args.port)
            print(f"{lab.name}: serving {serving['directory']} at {serving['url']} (pid {serving['pid']})")
            return 0
        if args.command == "impair":
            return _impair(lab, args)
        if args.command == "reboot":
            return _reboot(lab, args)
        if args.command == "agent":
            return lab.agent()
        if args.command == "nic-firmware":
            return _nic_firmware(lab, args)
        if args.command == "set-port-mtu":
            lab.set_port_mtu(args.node, args.fabric, args.mtu, args.rail)
            rail = f" rail {args.rail}" if args.rail else ""
            print(f"{lab.name}: switch port of {args.node} on {args.fabric}{rail} now MTU {args.mtu}")
            return 0
    except LabError as exc:
        print(f"datapath-lab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2
