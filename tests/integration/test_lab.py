"""The lab itself: isolation, reachability, real SSH, recovery and complete teardown."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from datapath_lab import Lab, LabConfig
from datapath_lab.core import LabError, proc_starttime
from labtools import VENV_BIN, LabHandle

pytestmark = pytest.mark.lab


def addr(lab: LabHandle, node: str, fabric: str) -> str:
    return str(lab.state["nodes"][node]["interfaces"][fabric]["address"])


def test_nodes_reach_each_other_on_each_fabric(lab: LabHandle) -> None:
    for fabric in ("mgmt", "rdma"):
        out = lab.sh("node1", f"ping -c1 -W2 {addr(lab, 'node2', fabric)}", check=False)
        assert out.returncode == 0, out.stdout + out.stderr


def test_fabrics_are_separate(lab: LabHandle) -> None:
    # Each fabric is its own switch: after traffic on the RDMA fabric, only the RDMA
    # bridge has learnt the peers' RDMA MACs; the management bridge never sees them.
    lab.sh("node1", f"ping -c1 -W2 {addr(lab, 'node2', 'rdma')}")
    rdma_mac = lab.state["nodes"]["node2"]["interfaces"]["rdma"]["mac"]
    mgmt_mac = lab.state["nodes"]["node2"]["interfaces"]["mgmt"]["mac"]
    rdma_fdb = lab.lab.run_in_switch("rdma", ["bridge", "fdb", "show", "br", "br0"]).stdout
    mgmt_fdb = lab.lab.run_in_switch("mgmt", ["bridge", "fdb", "show", "br", "br0"]).stdout
    assert rdma_mac in rdma_fdb
    assert rdma_mac not in mgmt_fdb
    assert mgmt_mac not in rdma_fdb
    # With strict ARP (as multi-rail RDMA nodes are configured), a peer's RDMA address is
    # unreachable through the management NIC.
    lab.sh("node2", "echo 1 > /proc/sys/net/ipv4/conf/all/arp_ignore")
    try:
        out = lab.sh("node1", f"ip neigh flush dev eno1; ping -c1 -W1 -I eno1 {addr(lab, 'node2', 'rdma')}",
                     check=False)
        assert out.returncode != 0
    finally:
        lab.sh("node2", "echo 0 > /proc/sys/net/ipv4/conf/all/arp_ignore")


def test_node_sees_only_its_own_nics_and_hostname(lab: LabHandle) -> None:
    out = lab.sh("node3", "hostname; ls /sys/class/net").stdout.split()
    assert out[0] == "node3"
    assert sorted(out[1:]) == ["eno1", "ens1f0np0", "lo"]


def test_jumbo_frames_pass_on_the_rdma_fabric(lab: LabHandle) -> None:
    out = lab.sh("node1", f"ping -c1 -W2 -M do -s 8972 {addr(lab, 'node4', 'rdma')}", check=False)
    assert out.returncode == 0, out.stdout


def test_etc_changes_stay_inside_the_node(lab: LabHandle) -> None:
    marker = "/etc/datapath-lab-isolation-test"
    try:
        lab.sh("node1", f"echo node1 > {marker}")
        assert lab.sh("node1", f"cat {marker}").stdout.strip() == "node1"
        assert lab.sh("node2", f"test -e {marker}", check=False).returncode != 0
        assert not os.path.exists(marker)
    finally:
        lab.sh("node1", f"rm -f {marker}", check=False)


def test_net_sysctl_is_per_node(lab: LabHandle) -> None:
    key = "/proc/sys/net/ipv4/tcp_ecn"
    with open(key) as fh:
        host_value = fh.read().strip()
    before2 = lab.sh("node2", f"cat {key}").stdout.strip()
    new = "1" if before2 != "1" else "2"
    lab.sh("node1", f"echo {new} > {key}")
    assert lab.sh("node1", f"cat {key}").stdout.strip() == new
    assert lab.sh("node2", f"cat {key}").stdout.strip() == before2
    with open(key) as fh:
        assert fh.read().strip() == host_value


def test_nvme_loop_device_is_visible_in_its_node(lab: LabHandle) -> None:
    dev = lab.state["nodes"]["node2"]["nvme"]
    out = lab.sh("node2", f"blockdev --getsize64 {dev}").stdout.strip()
    assert int(out) == lab.state["nodes"]["node2"]["nvme_bytes"]


def test_ansible_ping_over_real_ssh(lab: LabHandle) -> None:
    proc = subprocess.run(
        [os.path.join(VENV_BIN, "ansible"), "all", "-i", lab.inventory, "-m", "ansible.builtin.ping",
         "-o"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": os.path.join(os.path.dirname(VENV_BIN), "..", "ansible.cfg")}, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(lab.nodes)


def test_molecule_script_inventory_lists_the_lab_and_its_spec(lab: LabHandle) -> None:
    """molecule/shared/lab-inventory: what molecule's scenarios use as inventory (empty while down)."""
    script = os.path.join(os.path.dirname(os.path.dirname(VENV_BIN)), "molecule", "shared", "lab-inventory")
    up = subprocess.run([script, "--list"], capture_output=True, text=True, check=True,
                        env={**os.environ, "DATAPATH_LAB_NAME": lab.lab.name})
    inventory = json.loads(up.stdout)
    assert sorted(inventory["gpu_nodes"]["hosts"]) == sorted(lab.nodes)
    assert inventory["all"]["vars"]["datapath"]["version"] == 1
    assert "ProxyCommand" in inventory["_meta"]["hostvars"][lab.nodes[0]]["ansible_ssh_common_args"]
    down = subprocess.run([script, "--list"], capture_output=True, text=True, check=True,
                          env={**os.environ, "DATAPATH_LAB_NAME": "dpnone"})
    assert json.loads(down.stdout)["_meta"] == {"hostvars": {}}
    host = subprocess.run([script, "--host", lab.nodes[0]], capture_output=True, text=True, check=True,
                          env={**os.environ, "DATAPATH_LAB_NAME": lab.lab.name})
    assert json.loads(host.stdout) == {}


def test_host_network_untouched(lab: LabHandle) -> None:
    out = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=False).stdout)
    for link in out:
        for a in link.get("addr_info", []):
            assert not a["local"].startswith(("198.18.", "198.19.")), link["ifname"]
        assert not link["ifname"].startswith(("p-node", "ens1f0np0")), link["ifname"]


def test_set_port_mtu_breaks_only_that_nodes_jumbo_path(lab: LabHandle) -> None:
    lab.lab.set_port_mtu("node2", "rdma", 1500)
    try:
        big = "ping -c1 -W1 -M do -s 8972 "
        assert lab.sh("node1", big + addr(lab, "node2", "rdma"), check=False).returncode != 0
        assert lab.sh("node1", big + addr(lab, "node3", "rdma"), check=False).returncode == 0
        assert lab.sh("node1", "ping -c1 -W2 -M do -s 1472 " + addr(lab, "node2", "rdma"),
                      check=False).returncode == 0
    finally:
        lab.lab.set_port_mtu("node2", "rdma", 9000)
    assert lab.sh("node1", "ping -c1 -W2 -M do -s 8972 " + addr(lab, "node2", "rdma"),
                  check=False).returncode == 0


def _leftovers(name: str) -> list[str]:
    lab = Lab(name)
    found = lab.namespaces() + lab.loop_devices()
    mounts = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True, check=False).stdout
    found += [m for m in mounts.splitlines() if f"/datapath-lab/{name}" in m]
    if os.path.exists(lab.state_dir):
        found.append(lab.state_dir)
    return found


@pytest.fixture
def scratch_lab(tmp_path):  # type: ignore[no-untyped-def]
    lab = Lab("dpx")
    try:
        yield lab, str(tmp_path / "inv")
    finally:
        lab.down(log=lambda *_: None)
        assert _leftovers("dpx") == []


def test_down_leaves_nothing_and_is_idempotent(scratch_lab) -> None:  # type: ignore[no-untyped-def]
    lab, inv = scratch_lab
    state = lab.up(LabConfig(name="dpx", nodes=2, nvme_size="256M", inventory_dir=inv), log=lambda *_: None)
    assert len(lab.namespaces()) == 2 + 2  # two nodes, two switches
    assert len(lab.loop_devices()) == 2
    assert os.path.exists(os.path.join(state["inventory_dir"], "hosts.yml"))
    lab.down(log=lambda *_: None)
    assert _leftovers("dpx") == []
    assert not os.path.exists(os.path.join(inv, "hosts.yml"))
    assert lab.down(log=lambda *_: None) == []


def test_up_recovers_from_a_dead_node_and_reports_a_healthy_lab(scratch_lab) -> None:  # type: ignore[no-untyped-def]
    lab, inv = scratch_lab
    config = LabConfig(name="dpx", nodes=2, nvme_size="256M", inventory_dir=inv)
    state = lab.up(config, log=lambda *_: None)
    messages: list[str] = []
    lab.up(config, log=messages.append)
    assert "already up" in messages[-1]
    holder = int(state["nodes"]["node1"]["holder_pid"])
    os.kill(holder, 9)
    # SIGKILL is delivered asynchronously: on a busy machine the holder can still be running for a moment.
    deadline = time.monotonic() + 10
    while proc_starttime(holder) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any("holder process gone" in p for p in lab.health(lab.load_state() or {}))
    messages.clear()
    state = lab.up(config, log=messages.append)
    assert "replacing the existing lab" in messages[0]
    assert lab.health(state) == []
    assert lab.run_in("node1", ["hostname"]).stdout.strip() == "node1"


def test_nvme_direct_io_is_asked_recorded_and_part_of_the_shape(scratch_lab) -> None:  # type: ignore[no-untyped-def]
    """`nvme_direct_io`: the kernel does direct I/O to the image (its loop `dio` flag), the state
    says so, and a lab up without it is another shape: `up` with it rebuilds the lab."""
    lab, inv = scratch_lab
    plain = lab.up(LabConfig(name="dpx", nodes=1, nvme_size="256M", inventory_dir=inv), log=lambda *_: None)
    loop = plain["nodes"]["node1"]["nvme"]
    assert plain["nodes"]["node1"]["nvme_direct_io"] is False
    with open(f"/sys/block/{os.path.basename(loop)}/loop/dio") as fh:
        assert fh.read().strip() == "0"
    state = lab.up(LabConfig(name="dpx", nodes=1, nvme_size="256M", inventory_dir=inv, nvme_direct_io=True),
                   log=lambda *_: None)
    info = state["nodes"]["node1"]
    assert state["config"]["nvme_direct_io"] is True and info["nvme_direct_io"] is True
    with open(f"/sys/block/{os.path.basename(info['nvme'])}/loop/dio") as fh:
        assert fh.read().strip() == "1"
    # written in the node through the device, read on the host from the image file
    lab.run_in("node1", ["/bin/sh", "-c", f"printf dio-lab | dd of={info['nvme']} bs=512 conv=sync,fsync status=none"])
    with open(info["nvme_image"], "rb") as fh:
        assert fh.read(7) == b"dio-lab"
    status = subprocess.run([os.path.join(VENV_BIN, "datapath-lab"), "--name", "dpx", "status"],
                            capture_output=True, text=True, check=False)
    assert f"node1: nvme {info['nvme']} (direct I/O);" in status.stdout, status.stdout + status.stderr


def test_down_cleans_a_half_built_lab_without_state(scratch_lab) -> None:  # type: ignore[no-untyped-def]
    lab, inv = scratch_lab
    lab.up(LabConfig(name="dpx", nodes=1, nvme_size="256M", inventory_dir=inv), log=lambda *_: None)
    os.unlink(lab.state_file)  # as if `up` had crashed before writing its state
    lab.down(log=lambda *_: None)
    assert _leftovers("dpx") == []


def test_the_last_lab_down_restores_global_kernel_state_in_any_order(scratch_lab) -> None:  # type: ignore[no-untyped-def]
    """Two overlapping labs torn down in the order they came up (not reverse): the first one
    down leaves the raised value alone, the last lab down on this machine writes it back. When
    the session lab is up too, it is the last one; then this test puts the value back itself."""
    from datapath_lab import core

    lab, inv = scratch_lab
    other = Lab("dpy")
    key = "/proc/sys/vm/swappiness"
    with open(key) as fh:
        before = fh.read().strip()
    raised = str(int(before) + 1 if int(before) < 100 else 10)
    try:
        lab.up(LabConfig(name="dpx", nodes=1, nvme_size="256M", inventory_dir=inv), log=lambda *_: None)
        lab.run_in("node1", ["/bin/sh", "-c", f"echo {raised} > {key}"])
        with open(key) as fh:
            assert fh.read().strip() == raised  # global: the host sees it too
        other.up(LabConfig(name="dpy", nodes=1, nvme_size="256M", inventory_dir=inv + "-dpy"), log=lambda *_: None)
        assert {"dpx", "dpy"} <= set(core._read_registry()["labs"])
        lab.down(log=lambda *_: None)
        with open(key) as fh:
            assert fh.read().strip() == raised, "dpy is still up: nothing is restored yet"
        other.down(log=lambda *_: None)
        left = core._read_registry()["labs"]
        with open(key) as fh:
            now = fh.read().strip()
        if left:  # the session lab is up: it restores at its own down
            assert now == raised and "dpx" not in left and "dpy" not in left
        else:
            assert now == before
    finally:
        other.down(log=lambda *_: None)
        assert _leftovers("dpy") == []
        with open(key, "w") as fh:
            fh.write(before)


def test_up_refuses_bad_arguments() -> None:
    with pytest.raises(LabError, match="MTU"):
        LabConfig(name="dpx", fabrics=[("mgmt", 20000)]).validate()
    with pytest.raises(LabError, match="lab name"):
        LabConfig(name="bad;name").validate()
    with pytest.raises(LabError, match="size"):
        LabConfig(name="dpx", nvme_size="lots").validate()


def test_lab_spec_validates_and_plans_every_node(lab: LabHandle) -> None:
    inv = lab.state["inventory_dir"]
    proc = subprocess.run([os.path.join(VENV_BIN, "datapath"), "validate", inv], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(subprocess.run([os.path.join(VENV_BIN, "datapath"), "plan", inv, "--host", "node2"],
                                     capture_output=True, text=True, check=True).stdout)
    assert plan["nvme_layout"]["devices"] == [lab.state["nodes"]["node2"]["nvme"]]
    assert {i["name"]: i["mtu"] for i in plan["link_mtu"]["interfaces"]} == {"eno1": 1500, "ens1f0np0": 9000}
    assert plan["roce_qos"]["interfaces"][0]["roce_tos"] == 106


def test_source_server_serves_ranges_on_its_fabric_and_down_removes_it(scratch_lab, tmp_path) -> None:  # type: ignore[no-untyped-def]
    lab, inv = scratch_lab
    state = lab.up(LabConfig(name="dpx", nodes=1, nvme_size="256M", inventory_dir=inv, server=("src", "rdma")),
                   log=lambda *_: None)
    server = state["server"]
    assert (server["ns"], server["address"], server["mtu"]) == ("dpx-src", "198.18.1.250", 9000)
    assert "dpx-src" in lab.namespaces() and lab.health(state) == []
    link = json.loads(run_ns("dpx-src", ["ip", "-j", "addr", "show", "eth0"]))[0]
    assert link["mtu"] == 9000
    assert [a["local"] for a in link["addr_info"] if a["family"] == "inet"] == ["198.18.1.250"]
    # wired into the rdma switch like a node's port; the management fabric never sees it
    assert "p-src" in lab.run_in_switch("rdma", ["ip", "-o", "link", "show", "master", "br0"]).stdout
    assert "p-src" not in lab.run_in_switch("mgmt", ["ip", "-o", "link", "show"]).stdout
    served = tmp_path / "served"
    served.mkdir()
    (served / "hello.txt").write_text("hello, lab\n")
    with open(served / "sparse.bin", "wb") as fh:
        fh.truncate(64 << 20)
    serving = lab.serve(str(served), port=8081)
    assert serving["url"] == "http://198.18.1.250:8081"
    out = lab.run_in("node1", ["/bin/sh", "-c",
                               "curl -sf http://src:8081/hello.txt; "
                               "curl -sf -r 7- http://198.18.1.250:8081/hello.txt; "
                               "curl -s -o /dev/null -w '%{http_code} %{size_download}\\n' -r 1048576- "
                               "http://198.18.1.250:8081/sparse.bin; "
                               "curl -s -o /dev/null -w '%{http_code}\\n' -r 99999999- "
                               "http://198.18.1.250:8081/sparse.bin; "
                               "curl -s -o /dev/null -w '%{http_code}\\n' http://198.18.1.250:8081/%2e%2e/etc/passwd; "
                               "ping -c1 -W2 -M do -s 8972 198.18.1.250 >/dev/null && echo jumbo"]).stdout
    assert out.splitlines() == ["hello, lab", "lab", f"206 {(64 << 20) - 1048576}", "416", "404", "jumbo"]
    ranges = [(r["path"], r["range"], r["status"]) for r in lab.source_requests()]
    assert ("/sparse.bin", "bytes=1048576-", 206) in ranges
    pid = serving["pid"]
    lab.down(log=lambda *_: None)
    assert not os.path.exists(f"/proc/{pid}")
    assert _leftovers("dpx") == []


def test_down_stops_the_source_server_of_a_lab_without_state(scratch_lab, tmp_path) -> None:  # type: ignore[no-untyped-def]
    lab, inv = scratch_lab
    lab.up(LabConfig(name="dpx", nodes=1, nvme_size="256M", inventory_dir=inv, server=("src", "mgmt")),
           log=lambda *_: None)
    pid = lab.serve(str(tmp_path))["pid"]
    os.unlink(lab.state_file)  # as if `up` had crashed: the server is found by its namespace
    lab.down(log=lambda *_: None)
    assert not os.path.exists(f"/proc/{pid}")
    assert _leftovers("dpx") == []


def test_up_refuses_a_bad_server() -> None:
    with pytest.raises(LabError, match="server fabric"):
        LabConfig(name="dpx", server=("src", "nosuch")).validate()
    with pytest.raises(LabError, match="server name"):
        LabConfig(name="dpx", server=("node9", "rdma")).validate()


def run_ns(ns: str, argv: list[str]) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=True).stdout
