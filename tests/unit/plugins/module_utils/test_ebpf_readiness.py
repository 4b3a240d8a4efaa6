"""ebpf_readiness on recorded kernels: Talos's kernel configurations before and after netkit (verbatim), the build
machine's mountinfo with and without bpffs and a veth's ``ip -j -d link`` (recorded); each .source says where from.

What is constructed is said where it is: default routes, policy-routing rules in a colliding table, and a
driver without BIG TCP (the recorded veth's tso_max_size lowered to 65536)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._ebpf_readiness import (
    BPFFS_OPTIONS,
    EbpfReadiness,
    labels,
    parse_kernel_config,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nfd_labels import NfdLabels
from netfakes import FakeRunner
from nicfakes import FIXTURES, fixture
from topofakes import SysRoot

IP = "/usr/sbin/ip"
MOUNT = "/usr/bin/mount"
RULES = '[{"priority":0,"src":"all","table":"local"},{"priority":32766,"src":"all","table":"main"},' \
        '{"priority":32767,"src":"all","table":"default"}]'  # recorded on the build machine (iproute2 6.1.0)


@pytest.fixture
def node(tmp_path: Path) -> SysRoot:
    root = tmp_path / "node"
    root.mkdir()
    return SysRoot(root)


def kernel(node: SysRoot, release: str, config: str | None, where: str = "boot") -> None:
    node.put("/proc/sys/kernel/osrelease", release + "\n")
    node.put("/proc/sys/net/core/bpf_jit_enable", "1\n")
    node.put("/proc/1/comm", "process_api\n")
    node.put("/etc/fstab", "# /etc/fstab: static file system information.\n")
    if config is None:
        return
    text = gzip.decompress((FIXTURES / config).read_bytes()).decode()
    if where == "boot":
        node.put("/boot/config-%s" % release, text)
    else:
        node.path("/proc").mkdir(parents=True, exist_ok=True)
        node.path("/proc/config.gz").write_bytes((FIXTURES / config).read_bytes())


def mounts(node: SysRoot, bpffs: bool) -> None:
    node.put("/proc/self/mountinfo", fixture("build-host-mountinfo-bpffs.txt" if bpffs else "build-host-mountinfo.txt"))


class FakeIp:
    def __init__(self, links: str | None = None, default: str = "[]", rules: str = RULES, routes: str = "[]") -> None:
        self.links = links if links is not None else fixture("veth-ip-j-d-link.json")
        self.answers = {("-j", "-d", "link", "show"): self.links, ("-4", "-j", "route", "show", "default"): default,
                        ("-6", "-j", "route", "show", "default"): "[]", ("-j", "rule", "show"): rules,
                        ("-6", "-j", "rule", "show"): "[]", ("-j", "route", "show", "table", "all"): routes,
                        ("-6", "-j", "route", "show", "table", "all"): "[]"}
        self.mounts: list[list[str]] = []

    def __call__(self, argv: list[str]):
        if argv[0] == MOUNT:
            self.mounts.append(argv)
            return 0, "", ""
        if argv[0] != IP:
            return None
        out = self.answers.get(tuple(argv[1:]))
        return None if out is None else (0, out, "")


def readiness(node: SysRoot, fake: FakeIp | None = None, check: bool = False, diff: bool = False, **extra) -> dict:
    args = {"root": str(node.root), **extra}
    checked = ArgumentSpecValidator(**EbpfReadiness.module_spec()).validate(args)
    assert not checked.error_messages, checked.error_messages
    runner = FakeRunner([fake or FakeIp()], which={"ip": IP, "mount": MOUNT})
    return run(EbpfReadiness, checked.validated_parameters, Node(runner, str(node.root), check, diff))


def errors(result: dict) -> list[dict]:
    return [f for f in result["findings"] if f["severity"] == "error"]


ALL = ["native-routing", "bpf-host-routing", "big-tcp", "netkit"]


def test_a_kernel_config_without_netkit_and_netkit_planned_is_an_error(node) -> None:
    kernel(node, "6.6.62-talos", "talos-6.6.62-config-amd64.gz")
    mounts(node, bpffs=True)
    result = readiness(node, features=["native-routing", "bpf-host-routing", "netkit"], device="a43")
    netkit = [f for f in errors(result) if f["feature"] == "netkit"]
    assert {f["check"] for f in netkit} == {"kernel", "kernel_config"}, result["findings"]
    assert "netkit needs CONFIG_NETKIT=y; /boot/config-6.6.62-talos does not have it" in \
        [f["message"] for f in netkit]
    assert "netkit needs kernel 6.8 or later; this node runs 6.6.62-talos" in [f["message"] for f in netkit]
    assert all(f["fix"] for f in result["findings"])
    assert result["features"] == {"native-routing": True, "bpf-host-routing": True, "netkit": False}
    assert result["ready"] is False and result["kernel_config"] == "/boot/config-6.6.62-talos"
    assert labels("aiinfra.io", "cilium", ["native-routing", "bpf-host-routing", "netkit"], result["findings"]) == {
        "aiinfra.io/ebpf-ready": "false", "aiinfra.io/ebpf-datapath": "cilium",
        "aiinfra.io/ebpf-native-routing": "true", "aiinfra.io/ebpf-bpf-host-routing": "true",
        "aiinfra.io/ebpf-netkit": "false"}


def test_talos_6_18_from_proc_config_gz_is_ready_for_every_feature(node) -> None:
    kernel(node, "6.18.25-talos", "talos-6.18.25-config-amd64.gz", where="proc")
    mounts(node, bpffs=True)
    node.put("/etc/fstab", "bpffs /sys/fs/bpf bpf rw,nosuid,nodev,noexec,relatime,mode=700 0 0\n")
    result = readiness(node, features=ALL, ip_families=["ipv4", "ipv6"], device="a43", fabric_mtu=1500)
    assert result["kernel_config"] == "/proc/config.gz"
    assert errors(result) == [] and result["ready"] is True, result["findings"]
    assert all(result["features"].values())
    assert result["bpffs"] == {"mounted": True, "persisted": True}
    # the veth takes 512 KiB packets; its gso_max_size is raised by Cilium itself (info, not a problem)
    assert [f["severity"] for f in result["findings"]] == ["info"]
    assert parse_kernel_config("CONFIG_NETKIT=y\n# CONFIG_X is not set\n") == {"NETKIT": "y", "X": "n"}


def test_a_kernel_without_an_option_of_ciliums_list_is_named(node) -> None:
    """Talos 6.18.45 turned the crypto user API off (siderolabs/pkgs b189a96); Cilium's requirements list it."""
    kernel(node, "6.18.45-talos", "talos-6.18.45-config-amd64.gz", where="proc")
    mounts(node, bpffs=True)
    result = readiness(node, features=["bpf-host-routing", "netkit"], device="a43")
    (missing,) = errors(result)
    assert missing["check"] == "kernel_config" and missing["feature"] is None
    assert missing["message"] == "the kernel lacks CONFIG_CRYPTO_USER_API_HASH (/proc/config.gz)"
    assert result["features"] == {"bpf-host-routing": False, "netkit": False}  # a base error: nothing is ready


def test_a_device_mtu_below_the_fabrics_is_named(node) -> None:
    kernel(node, "6.18.25-talos", "talos-6.18.25-config-amd64.gz")
    mounts(node, bpffs=True)
    default = '[{"dst":"default","gateway":"198.18.1.1","dev":"a43","flags":[]}]'  # constructed
    result = readiness(node, FakeIp(default=default), fabric="rdma", fabric_mtu=9000)
    (mtu,) = [f for f in result["findings"] if f["check"] == "mtu"]
    assert mtu["severity"] == "error"
    assert mtu["message"].startswith("device a43 has MTU 1500, below fabric rdma's MTU 9000: cilium takes the pods' "
                                     "MTU from it")
    assert result["device"] == {"device": "a43", "mtu": 1500, "fabric": "rdma", "fabric_mtu": 9000}
    # the device and its fabric's MTU from the plan's interfaces, when the spec names no fabric
    found = readiness(node, FakeIp(default=default), interfaces=[{"name": "a43", "fabric": "rdma", "mtu": 9000}])
    assert [f["check"] for f in errors(found)] == ["mtu"]


def test_routing_tables_the_datapath_uses_are_named_when_in_use(node) -> None:
    kernel(node, "6.18.25-talos", "talos-6.18.25-config-amd64.gz")
    mounts(node, bpffs=True)
    rules = json.loads(RULES) + [{"priority": 100, "src": "198.18.1.10", "table": "200"}]  # constructed
    routes = '[{"dst":"default","dev":"a43","table":"2004","flags":[]}]'  # constructed
    result = readiness(node, FakeIp(rules=json.dumps(rules), routes=routes), device="a43")
    tables = sorted(f["message"] for f in errors(result) if f["check"] == "route_tables")
    assert tables == ["routing table 200 is in use on the node (rule 100); cilium uses table 200 for its own routes",
                      "routing table 2004 is in use on the node (routes); cilium uses table 2004 for its own routes"]


def test_jit_off_bpffs_missing_and_not_persisted(node) -> None:
    kernel(node, "6.18.25-talos", "talos-6.18.25-config-amd64.gz")
    mounts(node, bpffs=False)
    node.put("/proc/sys/net/core/bpf_jit_enable", "0\n")
    result = readiness(node, device="a43")
    checks = {f["check"]: f["severity"] for f in result["findings"]}
    assert checks == {"bpf_jit": "error", "bpffs": "error", "bpffs_persist": "warning"}
    assert result["bpffs"] == {"mounted": False, "persisted": False}
    node.put("/proc/1/comm", "systemd\n")  # systemd as PID 1 mounts bpffs itself at every boot
    assert readiness(node, device="a43")["bpffs"]["persisted"] is True


def test_persist_bpffs_writes_the_fstab_line_and_mounts_once(node) -> None:
    kernel(node, "6.18.25-talos", "talos-6.18.25-config-amd64.gz")
    mounts(node, bpffs=False)
    fake = FakeIp()
    preview = readiness(node, fake, check=True, diff=True, device="a43", persist_bpffs=True)
    assert preview["changed"] is True and fake.mounts == []
    assert preview["diff"][0]["after"].endswith("bpffs /sys/fs/bpf bpf rw,nosuid,nodev,noexec,relatime,mode=700 0 0\n")
    done = readiness(node, fake, device="a43", persist_bpffs=True)
    assert done["changed"] is True and [a["kind"] for a in done["actions"]] == ["file", "command"]
    assert fake.mounts == [[MOUNT, "-t", "bpf", "-o", ",".join(BPFFS_OPTIONS), "bpffs",
                            str(node.root / "sys/fs/bpf")]]
    assert (node.root / "etc/fstab").read_text() == (
        "# /etc/fstab: static file system information.\n"
        "bpffs /sys/fs/bpf bpf rw,nosuid,nodev,noexec,relatime,mode=700 0 0\n")
    mounts(node, bpffs=True)  # what the mount did
    again = readiness(node, fake, device="a43", persist_bpffs=True)
    assert again["changed"] is False and len(fake.mounts) == 1 and again["ready"] is True


def test_big_tcp_needs_a_driver_that_takes_packets_above_64k(node) -> None:
    kernel(node, "6.18.25-talos", "talos-6.18.25-config-amd64.gz")
    mounts(node, bpffs=True)
    links = json.loads(fixture("veth-ip-j-d-link.json"))
    for link in links:
        link["tso_max_size"] = 65536  # constructed: a driver without BIG TCP
    features = ["native-routing", "bpf-host-routing", "big-tcp"]
    result = readiness(node, FakeIp(links=json.dumps(links)), features=features, device="a43")
    (big,) = errors(result)
    assert big["feature"] == "big-tcp" and "does not do BIG TCP" in big["message"]
    assert result["features"]["big-tcp"] is False and result["features"]["bpf-host-routing"] is True


@pytest.mark.parametrize("release, config, ready", [
    ("4.19.128-microsoft-standard", None, False),
    ("4.18.0-553.el8_10.x86_64", None, True),
])
def test_kernel_minimums_and_an_unreadable_config(node, release, config, ready) -> None:
    kernel(node, release, config)
    mounts(node, bpffs=True)
    result = readiness(node, device="a43")
    assert [f["check"] for f in result["findings"] if f["severity"] == "warning"] == ["kernel_config",
                                                                                      "bpffs_persist"]
    assert (not [f for f in errors(result) if f["check"] == "kernel"]) is ready


def test_nfd_labels_publish_the_same_checks(node) -> None:
    kernel(node, "6.6.62-talos", "talos-6.6.62-config-amd64.gz")
    mounts(node, bpffs=True)
    params = dict((k, v.get("default")) for k, v in NfdLabels.options().items())
    params.update(root=str(node.root), hugepages=False, path="/etc/kubernetes/node-feature-discovery/features.d/x",
                  ebpf={"datapath": "cilium", "features": ["bpf-host-routing", "netkit"], "device": "a43"})
    runner = FakeRunner([FakeIp()], which={"ip": IP})
    result = run(NfdLabels, params, Node(runner, str(node.root)))
    assert result["labels"]["aiinfra.io/ebpf-ready"] == "false"
    assert result["labels"]["aiinfra.io/ebpf-netkit"] == "false"
    assert result["labels"]["aiinfra.io/ebpf-bpf-host-routing"] == "true"
    text = (node.root / "etc/kubernetes/node-feature-discovery/features.d/x").read_text()
    assert "aiinfra.io/ebpf-netkit=false\n" in text
