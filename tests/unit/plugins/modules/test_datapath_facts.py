"""datapath_facts: one read-only call over a fake node tree; tools only for device-backed NICs."""

from __future__ import annotations

import json

from ansible_collections.aiinfra.datapath.plugins.modules import datapath_facts
from netfakes import FakeDcb, FakeRunner, fixture, nic, static, use

ETHTOOL = "/usr/sbin/ethtool"
DEVLINK = "/usr/sbin/devlink"
DCB = "/usr/sbin/dcb"
HP = "/sys/kernel/mm/hugepages/hugepages-%dkB/%s"
NODE_HP = "/sys/devices/system/node/node%d/hugepages/hugepages-%dkB/%s"
FEATURES = "/etc/kubernetes/node-feature-discovery/features.d"
MEMINFO = "MemTotal:       263921456 kB\nMemFree:        1000 kB\nHugepagesize:       2048 kB\n"


def lab_node(node) -> None:
    """A node like a lab node: veth NICs, 2 NUMA nodes, a 2M pool, THP, a mounted cache."""
    node.put("/proc/meminfo", MEMINFO)
    node.put("/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=UUID=1 ro quiet iommu=pt\n")
    node.put("/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t16777216\n", mode=0o644)
    node.put("/proc/sys/net/core/rmem_max", "212992\n", mode=0o444)
    node.put("/proc/sys/vm/swappiness", "60\n", mode=0o644)
    for kb, total, free in ((2048, 64, 60), (1048576, 0, 0)):
        for name, value in (("nr_hugepages", total), ("free_hugepages", free), ("resv_hugepages", 1),
                            ("surplus_hugepages", 0)):
            node.put(HP % (kb, name), "%d\n" % value)
        for numa in (0, 1):
            node.put(NODE_HP % (numa, kb, "nr_hugepages"), "%d\n" % (total // 2))
            node.put(NODE_HP % (numa, kb, "free_hugepages"), "%d\n" % (free // 2))
    node.put("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    node.put("/sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never\n")
    for name, mtu, state in (("eno1", 1500, "up"), ("ens1f0np0", 9000, "up"), ("lo", 65536, "unknown")):
        nic(node, name, pci=None, mtu=mtu)
        node.put("/sys/class/net/%s/operstate" % name, state + "\n")
    node.put("/sys/class/net/ens1f0np0/speed", "10000\n")
    node.put("/proc/self/mounts",
             "/dev/loop7p1 /mnt/model-cache xfs rw,noatime,nodiratime,attr2 0 0\n"
             "/dev/vda / ext4 rw,relatime 0 0\n")
    node.put("/etc/fstab", "# comment\nUUID=abc /mnt/model-cache xfs noatime,nodiratime,nofail 0 2\n")
    # what the next boot applies (systemd-sysctl's order: the last assignment wins; /etc/sysctl.conf last)
    node.put("/usr/lib/sysctl.d/50-default.conf", "vm.swappiness = 30\nnet.core.rmem_max = 1\n")
    node.put("/etc/sysctl.d/90-aiinfra-datapath.conf", "net.ipv4.tcp_rmem = 4096\t131072  16777216\n"
             "-net.core.rmem_max = 16777216\n")
    node.put("/etc/sysctl.conf", "vm.swappiness=10\n")
    node.put("/dev/loop7", "")
    node.put("/sys/class/block/loop7/size", "2097152\n")
    node.put(FEATURES + "/aiinfra-datapath", "# Written by aiinfra.datapath\naiinfra.io/lab=true\n"
             "aiinfra.io/nvme-cache=true\n")
    node.put(FEATURES + "/.aiinfra-datapath.tmp", "aiinfra.io/half=written\n")
    node.put(FEATURES + "/other", "vendor.io/flag\n")


def facts_of(result):
    assert result["changed"] is False
    return result["ansible_facts"]["datapath_facts"]


def no_tools(monkeypatch):
    return use(monkeypatch, FakeRunner([], which={}))


def test_every_section_from_a_lab_like_node(run_module, node, monkeypatch):
    lab_node(node)
    runner = no_tools(monkeypatch)
    before = node.snapshot()
    facts = facts_of(run_module(datapath_facts.main, {
        "root": str(node.root),
        "sysctl_keys": ["net.ipv4.tcp_rmem", "net/core/rmem_max", "vm.swappiness", "net.no.such_key"],
        "storage_devices": ["/dev/loop7", "/dev/disk/by-id/gone"], "mount_paths": ["/mnt/model-cache/", "/srv"]}))
    assert runner.calls == []  # veth only: no tool runs
    assert node.snapshot() == before
    assert facts["version"] == 1
    ours = "/etc/sysctl.d/90-aiinfra-datapath.conf"
    assert facts["sysctl"] == {
        "net.ipv4.tcp_rmem": {"value": "4096 131072 16777216", "state": "ok", "boot": "4096 131072 16777216",
                              "boot_file": ours},
        "net.core.rmem_max": {"value": "212992", "state": "read_only", "boot": "16777216", "boot_file": ours},
        "vm.swappiness": {"value": "60", "state": "ok", "boot": "10", "boot_file": "/etc/sysctl.conf"},
        "net.no.such_key": {"value": None, "state": "missing", "boot": None, "boot_file": None},
    }
    pools = facts["hugepages"]["pools"]
    assert facts["hugepages"]["default_size"] == "2M"
    assert pools["2M"] == {"size_kb": 2048, "total": 64, "free": 60, "resv": 1, "surplus": 0,
                           "per_node": {"0": {"total": 32, "free": 30}, "1": {"total": 32, "free": 30}}}
    assert pools["1G"]["total"] == 0
    assert facts["thp"] == {"enabled": "madvise", "defrag": "madvise"}
    assert facts["cmdline"] == ["BOOT_IMAGE=/vmlinuz", "root=UUID=1", "ro", "quiet", "iommu=pt"]
    assert facts["memory_bytes"] == 263921456 * 1024
    assert facts["numa_nodes"] == 2
    assert sorted(facts["interfaces"]) == ["eno1", "ens1f0np0"]  # never lo
    rdma = facts["interfaces"]["ens1f0np0"]
    assert rdma == {"mtu": 9000, "operstate": "up", "mac": "b8:3f:d2:00:00:01", "driver": None, "bus_info": None,
                    "physical": False, "speed_mbps": 10000, "firmware": None}
    assert facts["interfaces"]["eno1"]["speed_mbps"] is None
    assert facts["qos"]["ens1f0np0"]["supported"] is False
    assert "virtual interface" in facts["qos"]["ens1f0np0"]["reason"]
    storage = facts["storage"]
    assert storage["devices"]["/dev/loop7"] == {"exists": True, "resolved": "/dev/loop7", "size_bytes": 2**30,
                                                "model": None, "serial": None}
    assert storage["devices"]["/dev/disk/by-id/gone"]["exists"] is False
    assert storage["mounts"]["/mnt/model-cache"] == {"mounted": True, "source": "/dev/loop7p1", "fstype": "xfs",
                                                     "options": ["rw", "noatime", "nodiratime", "attr2"]}
    assert storage["mounts"]["/srv"]["mounted"] is False
    assert storage["fstab"]["/mnt/model-cache"]["options"] == ["noatime", "nodiratime", "nofail"]
    assert storage["fstab"]["/srv"] == {"present": False, "source": None, "fstype": None, "options": []}
    assert facts["nfd"]["labels"] == {"aiinfra.io/lab": "true", "aiinfra.io/nvme-cache": "true",
                                      "vendor.io/flag": "true"}
    assert sorted(facts["nfd"]["files"]) == ["aiinfra-datapath", "other"]  # dot-files skipped, as NFD does
    assert facts["unavailable"] == {}


def test_missing_subsystems_are_null_with_a_reason_never_a_failure(run_module, node, monkeypatch):
    no_tools(monkeypatch)
    facts = facts_of(run_module(datapath_facts.main, {"root": str(node.root), "sysctl_keys": ["vm.swappiness"],
                                                      "mount_paths": ["/mnt/model-cache"]}))
    assert facts["hugepages"] is None and "hugepages" in facts["unavailable"]
    assert facts["thp"] is None and "thp" in facts["unavailable"]
    assert facts["cmdline"] is None and facts["interfaces"] is None and facts["qos"] is None
    assert facts["memory_bytes"] is None and facts["numa_nodes"] is None
    assert facts["sysctl"] == {"vm.swappiness": {"value": None, "state": "missing", "boot": None, "boot_file": None}}
    assert facts["storage"]["mounts"]["/mnt/model-cache"]["mounted"] is False
    assert facts["nfd"] == {"directory": FEATURES, "files": {}, "labels": {}}


def test_gather_subset_and_interface_filter(run_module, node, monkeypatch):
    lab_node(node)
    no_tools(monkeypatch)
    facts = facts_of(run_module(datapath_facts.main, {"root": str(node.root), "gather": ["memory", "interfaces"],
                                                      "interfaces": ["ens1f0np0", "ib9"]}))
    assert facts["gathered"] == ["memory", "interfaces"]
    assert facts["memory_bytes"] == 263921456 * 1024 and facts["numa_nodes"] == 2
    assert list(facts["interfaces"]) == ["ens1f0np0"]
    assert facts["interfaces"]["ens1f0np0"]["firmware"] is None  # firmware not gathered
    assert "interfaces not found on the node: ib9" in facts["notes"]
    for section in ("sysctl", "hugepages", "thp", "cmdline", "qos", "storage", "nfd"):
        assert facts[section] is None


def test_check_mode_is_the_same_read(run_module, node, monkeypatch):
    lab_node(node)
    no_tools(monkeypatch)
    args = {"root": str(node.root), "sysctl_keys": ["vm.swappiness"]}
    normal = facts_of(run_module(datapath_facts.main, args))
    checked = facts_of(run_module(datapath_facts.main, args, check_mode=True))
    assert normal == checked


def test_physical_nic_firmware_and_dcb_from_recorded_output(run_module, node, monkeypatch):
    nic(node, "ens1f0np0", mtu=9000)
    node.put("/sys/class/net/ens1f0np0/speed", "400000\n")
    node.put("/sys/class/net/ens1f0np0/ecn/roce_rp/enable/3", "0\n")
    dcb = FakeDcb("ens1f0np0", pfc=fixture("dcb/pfc-show.json"), app=fixture("dcb/app-show.json"),
                  ets=fixture("dcb/ets-show.json"), apptrust=fixture("dcb/apptrust-show.json"))
    runner = use(monkeypatch, FakeRunner([
        static([ETHTOOL, "-i", "ens1f0np0"], out=fixture("ethtool/connectx7-i.txt")),
        static([DEVLINK, "-j", "dev", "info"], out=fixture("devlink/mlx5-dev-info.json")),
        dcb], which={"ethtool": ETHTOOL, "devlink": DEVLINK, "dcb": DCB}))
    facts = facts_of(run_module(datapath_facts.main, {"root": str(node.root)}))
    iface = facts["interfaces"]["ens1f0np0"]
    assert iface["physical"] is True and iface["driver"] == "mlx5_core" and iface["bus_info"] == "0000:e6:00.0"
    assert iface["speed_mbps"] == 400000
    assert iface["firmware"]["version"] == "28.39.3560" and iface["firmware"]["psid"] == "MT_0000000838"
    assert iface["firmware"]["sources"] == ["ethtool", "devlink"]
    qos = facts["qos"]["ens1f0np0"]
    assert qos["supported"] is True and qos["backend"] == "dcb"
    assert qos["trust"] == "dscp"
    assert qos["pfc_priorities"] == [3]
    assert qos["dscp2prio"] == {"26": 3, "48": 6}
    assert qos["ets"]["prio_tc"] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert qos["ecn"] == {"rp": [0, 1, 2, 4, 5, 6, 7], "np": list(range(8))}
    assert dcb.sets == []  # read-only: only "show" commands
    assert all(call[1:2] == ["-j"] or call[1:2] == ["-i"] for call in runner.calls)
    json.dumps(facts)


def test_dcb_unsupported_device_is_reported(run_module, node, monkeypatch):
    nic(node, "eth0", ecn=False, hca=None)
    dcb = FakeDcb("eth0", unsupported=fixture("dcb/veth-unsupported.stderr.txt"))
    use(monkeypatch, FakeRunner([dcb], which={"dcb": DCB}))
    facts = facts_of(run_module(datapath_facts.main, {"root": str(node.root), "gather": ["qos"]}))
    assert facts["qos"]["eth0"]["supported"] is False
    assert "not supported" in facts["qos"]["eth0"]["reason"]


def test_no_dcb_tool(run_module, node, monkeypatch):
    nic(node, "eth0", ecn=False, hca=None)
    no_tools(monkeypatch)
    facts = facts_of(run_module(datapath_facts.main, {"root": str(node.root), "gather": ["qos"]}))
    assert facts["qos"]["eth0"] == {"supported": False, "reason": "iproute2 dcb is not installed"}


def test_bad_gather_choice_fails(run_module, node, monkeypatch):
    no_tools(monkeypatch)
    result = run_module(datapath_facts.main, {"root": str(node.root), "gather": ["bogus"]}, expect_failure=True)
    assert "gather" in result["msg"]


def test_topology_section_is_node_topologys_read(run_module, node, monkeypatch):
    from ansible_collections.aiinfra.datapath.plugins.modules import node_topology
    from topofakes import fixture as topo_fixture
    from topofakes import machine

    machine(node, "asus-esc8000a-e12")
    lspci, smi = "/usr/bin/lspci", "/usr/bin/nvidia-smi"

    def answer(argv):
        if argv == [lspci, "-vvv", "-D"]:
            return 0, topo_fixture("asus-esc8000a-e12", "lspci-vvv.txt"), ""
        if argv == [smi, "topo", "-m"]:
            return 0, topo_fixture("asus-esc8000a-e12", "nvidia-smi-topo-m.txt"), ""
        return (6, "", "(not recorded)") if argv[:1] == [smi] else None
    use(monkeypatch, FakeRunner([answer], which={"lspci": lspci, "nvidia-smi": smi}))
    facts = facts_of(run_module(datapath_facts.main, {"root": str(node.root), "gather": ["topology"]}))
    alone = run_module(node_topology.main, {"root": str(node.root)})
    assert facts["gathered"] == ["topology"]
    assert facts["topology"] == alone["topology"]
    assert [gpu["nearest_nics"] for gpu in facts["topology"]["gpus"]][0] == ["mlx5_0", "mlx5_1"]
    assert facts["notes"] == ["topology: %s" % note for note in alone["notes"]]


def test_topology_of_a_node_without_gpus(run_module, node, monkeypatch):
    lab_node(node)
    no_tools(monkeypatch)
    facts = facts_of(run_module(datapath_facts.main, {"root": str(node.root)}))
    assert facts["topology"]["gpus"] == [] and facts["unavailable"] == {}
    assert any(note.startswith("topology: no GPU on this node") for note in facts["notes"])


def test_last_run_of_a_pulled_node(run_module, node, monkeypatch):
    """playbooks/local.yml's last-run.json, as the audit shows it; absent on a pushed node; a broken
    file is reported as unreadable, never a failure."""
    no_tools(monkeypatch)
    path = "/var/lib/aiinfra-datapath/last-run.json"

    def last_run():
        return facts_of(run_module(datapath_facts.main, {"root": str(node.root), "gather": ["last_run"]}))["last_run"]

    assert last_run() == {"present": False, "file": path}
    record = {"version": 1, "node": "node1", "result": "failed", "error": "spec: version must be 1",
              "finished": "2026-12-03T18:00:00Z", "revision": "3f1c2e0a", "check_mode": False,
              "changed": [], "failed": ["validate"], "reboot_required": False, "reboot_reasons": [],
              "unsupported": []}
    node.put(path, json.dumps(record))
    assert last_run() == {"present": True, "file": path, "node": "node1", "result": "failed",
                          "error": "spec: version must be 1", "finished": "2026-12-03T18:00:00Z",
                          "revision": "3f1c2e0a", "check_mode": False, "reboot_required": False,
                          "changed": [], "failed": ["validate"]}
    node.put(path, "{half")
    broken = last_run()
    assert broken["present"] is True and broken["result"] == "unreadable" and path in broken["error"]
    node.put(path, "[]")
    assert last_run()["error"] == path + ": not a JSON object"
