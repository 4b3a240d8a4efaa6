"""nic_affinity on recorded trees: mlx5 /proc/interrupts of real nodes (tests/unit/plugins/nicfakes.py names what is
recorded and what is constructed), kubelet and TuneD files as published, the re-apply script run standalone."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nic_affinity_apply as apply_mod
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity import NicAffinity, script_source
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity_host import (
    APPLY_SCRIPT,
    IRQBALANCE_MARK,
    POLICY_SCRIPT,
    UNIT_FILE,
    UNIT_LINK,
    irqbalance_config,
    kubelet_cpus,
    parse_kubelet_config,
    tuned_isolated,
)
from nicfakes import FakeEthtool, asus, azure_vm, crow, fixture, runner
from topofakes import SysRoot

STATE = "/etc/aiinfra-datapath/nic_affinity.json"


@pytest.fixture
def node(tmp_path: Path) -> SysRoot:
    root = tmp_path / "node"
    root.mkdir()
    return SysRoot(root)


def params(node: SysRoot, names: list[str], **extra) -> dict:
    args = {"interfaces": [{"name": n, "fabric": "rdma"} for n in names], "root": str(node.root), **extra}
    checked = ArgumentSpecValidator(**NicAffinity.module_spec()).validate(args)
    assert not checked.error_messages, checked.error_messages
    return checked.validated_parameters


def affinity(node: SysRoot, names: list[str], fake=None, check: bool = False, diff: bool = False, **extra) -> dict:
    return run(NicAffinity, params(node, names, **extra), Node(fake or runner(names), str(node.root), check, diff))


def completion_irqs(node: SysRoot, name: str, pci: str) -> list[dict]:
    completion, _other = apply_mod.interface_irqs(str(node.root), name, pci)
    return completion


# --------------------------------------------------------------------------- parsers on the recordings
def test_proc_interrupts_names_of_both_recorded_namings() -> None:
    crow_text = "           CPU0\n" + fixture("crow-proc-interrupts-grep-mlx.txt")
    names = apply_mod.parse_interrupts(crow_text)
    assert names[98] == ["mlx5_async0@pci:0000:01:00.0"] and names[119] == ["mlx5_comp11@pci:0000:01:00.0"]
    azure = apply_mod.parse_interrupts(fixture("lkml-azure-mlx5-proc-interrupts.txt"))
    assert azure[24] == ["mlx5_pages_eq@pci:8b76:00:02.0"] and azure[47] == ["mlx5_comp7@pci:83a4:00:02.0"]
    assert azure[0] == ["timer"] and azure[3] == []  # a line without a name (recorded so)
    assert "NMI" not in azure and len([i for i in azure if 24 <= i <= 47]) == 22
    names = ("mlx5_comp11@pci:0000:01:00.0", "mlx5_async0@pci:0000:01:00.0", "mlx5_cmd_eq@pci:8b76:00:02.0",
             "ens801f0-TxRx-3", "eth0-Tx-Rx-7")
    assert [apply_mod.queue_index(n) for n in names] == [11, None, None, 3, 7]


def test_cpu_lists_and_masks() -> None:
    assert apply_mod.parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert apply_mod.parse_cpulist("0-7:2/4") == [0, 1, 4, 5]  # the kernel's used/group form
    assert apply_mod.format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert apply_mod.mask_cpus("00000000,00000011") == [0, 4] and apply_mod.mask_cpus("0") == []
    assert apply_mod.cpus_mask([33, 1]) == "00000002,00000002"
    with pytest.raises(ValueError):
        apply_mod.parse_cpulist("3-1")


def test_kubelet_config_yaml_and_json_as_published(tmp_path: Path) -> None:
    yaml_settings = parse_kubelet_config(fixture("kubelet-k3s-10420.yaml"))
    assert yaml_settings["reservedSystemCPUs"] == "0,12" and yaml_settings["cpuManagerPolicy"] == "static"
    assert "full-pcpus-only" not in yaml_settings  # nested keys are not top-level settings
    json_settings = parse_kubelet_config(fixture("kubelet-eks-kube-reserved.json"))
    assert json_settings["kind"] == "KubeletConfiguration" and "reservedSystemCPUs" not in json_settings
    (tmp_path / "var/lib/kubelet").mkdir(parents=True)
    (tmp_path / "var/lib/kubelet/config.yaml").write_text(fixture("kubelet-k3s-10420.yaml"))
    found = kubelet_cpus(HostRoot(str(tmp_path)), "/var/lib/kubelet/config.yaml")
    assert found["reserved"] == [0, 12] and found["policy"] == "static" and found["error"] is None
    (tmp_path / "var/lib/kubelet/config.yaml").write_text(fixture("kubelet-eks-kube-reserved.json"))
    found = kubelet_cpus(HostRoot(str(tmp_path)), "/var/lib/kubelet/config.yaml")
    assert found["reserved"] == [] and found["policy"] == "none" and found["note"] is None


def test_tuned_isolated_cores_from_the_cpu_partitioning_variables(node: SysRoot) -> None:
    asus(node)
    found = tuned_isolated(HostRoot(str(node.root)))
    assert found["isolated"] == list(range(24, 32)) + list(range(56, 64))
    assert found["source"] == "/etc/tuned/cpu-partitioning-variables.conf" and found["profiles"] == ["cpu-partitioning"]


# --------------------------------------------------------------------------- acceptance: recorded trees
@pytest.mark.parametrize("build, reserved, isolated", [
    (crow, {0, 12}, set()),
    (asus, {0, 12}, set(range(24, 32)) | set(range(56, 64))),
])
def test_every_completion_irq_lands_on_a_nic_local_cpu_outside_kubelets_reserved_set(
        node, build, reserved, isolated) -> None:
    tree = build(node)
    names = sorted(tree["nics"])
    first = affinity(node, names)
    assert first["changed"] is True and not first.get("failed"), first
    total = placed = 0
    per_cpu: dict[int, int] = {}
    for name in names:
        for item in completion_irqs(node, name, tree["nics"][name]):
            total += 1
            smp, effective = apply_mod.irq_affinity(str(node.root), item["irq"])
            assert smp == effective and len(effective) == 1, (item, smp, effective)
            cpu = effective[0]
            if cpu in tree["local"][name] and cpu not in reserved and cpu not in isolated:
                placed += 1
            per_cpu[cpu] = per_cpu.get(cpu, 0) + 1
    assert total > 0 and placed == total, (placed, total)  # 100 %
    assert first["placed"] == total and first["misplaced"] == []
    # spread: no CPU of the pool carries two IRQs before every CPU of it carries one
    assert max(per_cpu.values()) - min(per_cpu.values()) <= 1 or len(per_cpu) >= 11
    second = affinity(node, names)
    assert second["changed"] is False and second["actions"] == [], [a["text"] for a in second["actions"]]


def test_two_rails_on_one_numa_node_interleave_instead_of_stacking(node) -> None:
    tree = asus(node)
    affinity(node, sorted(tree["nics"]))
    node0 = sorted(n for n in tree["nics"] if tree["local"][n][0] == 0)
    first = [apply_mod.irq_affinity(str(node.root), i["irq"])[1][0]
             for i in completion_irqs(node, node0[0], tree["nics"][node0[0]])]
    second = [apply_mod.irq_affinity(str(node.root), i["irq"])[1][0]
              for i in completion_irqs(node, node0[1], tree["nics"][node0[1]])]
    pool = [c for c in range(32) if c not in (0, 12) and not 24 <= c <= 31]  # 22 CPUs
    assert first == pool[:16] and second == (pool[16:] + pool)[:16]


def test_the_azure_vf_interrupt_controller_keeps_them_on_cpu0_and_that_is_named(node) -> None:
    tree = azure_vm(node)
    names = sorted(tree["nics"])
    result = affinity(node, names)
    # queue 0 of each VF is planned on CPU 0, where the controller keeps it; the other 14 are not where planned
    assert result["placed"] == 2 and len(result["misplaced"]) == 14
    assert "IRQ 29 (mlx5_comp1@pci:8b76:00:02.0 of enP35702p0s2f0np0) runs on CPU 0, planned 1" in result["misplaced"]
    assert any("effective_affinity_list" in w for w in result["warnings"])
    # the requested CPUs are written (what the kernel allows), the control EQs are left alone
    assert apply_mod.irq_affinity(str(node.root), 28)[0] == [0] and apply_mod.irq_affinity(str(node.root), 29)[0] == [1]
    assert apply_mod.irq_affinity(str(node.root), 25)[0] == list(range(8))
    failed = affinity(node, names, on_misplaced="fail")
    assert failed["failed"] is True and "14 completion IRQ(s)" in failed["msg"]


def test_check_mode_writes_nothing_and_the_diff_shows_each_irq(node) -> None:
    tree = crow(node)
    names = sorted(tree["nics"])
    before = (node.root / "proc/irq/99/smp_affinity_list").read_text()
    result = affinity(node, names, check=True, diff=True)
    assert result["changed"] is True
    assert (node.root / "proc/irq/99/smp_affinity_list").read_text() == before
    assert not (node.root / STATE.lstrip("/")).exists() and not (node.root / UNIT_FILE.lstrip("/")).exists()
    sections = {d["after_header"]: d for d in result["diff"]}
    irqs = sections["IRQ affinity"]
    assert "IRQ 99 = 1\n" in irqs["after"] and "IRQ 99 = 0-11\n" in irqs["before"]
    assert STATE in sections and UNIT_FILE in sections and APPLY_SCRIPT in sections


def test_the_saved_plan_unit_and_script_are_installed_and_enabled(node) -> None:
    tree = crow(node)
    names = sorted(tree["nics"])
    result = affinity(node, names)
    saved = json.loads((node.root / STATE.lstrip("/")).read_text())
    assert saved["interfaces"]["enp1s0f0np0"]["pci"] == "0000:01:00.0"
    assert saved["interfaces"]["enp1s0f0np0"]["irq_cpus"][:3] == [1, 2, 3]
    unit = (node.root / UNIT_FILE.lstrip("/")).read_text()
    assert "ExecStart=/usr/bin/python3 %s --watch %s" % (APPLY_SCRIPT, STATE) in unit
    assert os.readlink(str(node.root / UNIT_LINK.lstrip("/"))) == UNIT_FILE
    assert (node.root / APPLY_SCRIPT.lstrip("/")).read_text() == script_source()
    assert os.stat(node.root / APPLY_SCRIPT.lstrip("/")).st_mode & 0o777 == 0o755
    assert "systemd is not running here: aiinfra-datapath-nic-affinity.service starts at the next boot" \
        in result["notes"]


def test_the_installed_script_alone_puts_the_irqs_back_after_the_kernel_reset_them(node) -> None:
    """The file the unit runs, run as the unit runs it (a process of its own, no collection on its path)."""
    tree = crow(node)
    names = sorted(tree["nics"])
    affinity(node, names)
    wanted = {i["irq"]: apply_mod.irq_affinity(str(node.root), i["irq"])[0]
              for name in names for i in completion_irqs(node, name, tree["nics"][name])}
    for irq in wanted:  # what a driver reload or a link up leaves: the default mask
        (node.root / ("proc/irq/%d/smp_affinity_list" % irq)).write_text("0-11\n")
    script = node.root / APPLY_SCRIPT.lstrip("/")
    done = subprocess.run([sys.executable, "-I", str(script), "--root", str(node.root), "--once", STATE],
                          capture_output=True, text=True, check=False, env={"PATH": "/nonexistent"})
    assert done.returncode == 0, done.stderr
    assert {irq: apply_mod.irq_affinity(str(node.root), irq)[0] for irq in wanted} == wanted
    assert "enp1s0f0np0: irq 99 mlx5_comp0@pci:0000:01:00.0: 0-11 -> 1" in done.stderr


def test_channels_and_rings_are_set_first_and_refused_above_the_device_maximum(node) -> None:
    tree = crow(node)
    names = sorted(tree["nics"])
    ethtool = FakeEthtool(names, combined=12, max_combined=63, rings=1024, max_rings=8192)
    fake = runner(names, ethtool)
    result = affinity(node, names, fake=fake, channels={"combined": 8}, rings={"rx": 8192, "tx": 8192})
    assert not result.get("failed"), result
    assert ethtool.sets[0] == ["/usr/sbin/ethtool", "-L", "enp1s0f0np0", "combined", "8"]
    assert ["/usr/sbin/ethtool", "-G", "enp1s0f1np1", "rx", "8192", "tx", "8192"] in ethtool.sets
    assert ethtool.state["enp1s0f0np0"]["channels"]["current"]["combined"] == 8
    again = affinity(node, names, fake=fake, channels={"combined": 8}, rings={"rx": 8192, "tx": 8192})
    assert again["changed"] is False and len(ethtool.sets) == 4
    refused = affinity(node, names, fake=fake, channels={"combined": 64})
    assert refused["failed"] is True and "combined 64 is above the device's maximum 63" in refused["msg"]
    refused = affinity(node, names, fake=fake, channels={"rx": 2})
    assert "the device has no rx channels setting" in refused["msg"]


def test_no_cpu_left_is_an_error_naming_what_took_them(node) -> None:
    tree = crow(node)
    result = affinity(node, sorted(tree["nics"]), exclude_cpus="1-11")
    assert result["failed"] is True
    assert "no CPU is left for its IRQs: its local CPUs 0-11 (local_cpulist) minus reserved by kubelet 0,12" \
        in result["msg"] and "excluded 1-11" in result["msg"]


def test_irqbalance_is_told_to_leave_the_nics_alone_by_device(node) -> None:
    tree = crow(node)
    names = sorted(tree["nics"])
    node.put("/etc/default/irqbalance", fixture("irqbalance.env"))
    fake = runner(names)
    fake.paths["irqbalance"] = "/usr/sbin/irqbalance"
    result = affinity(node, names, fake=fake)
    assert result["irqbalance"]["banned"] is True
    assert result["irqbalance"]["devices"] == ["0000:01:00.0", "0000:01:00.1"]
    text = (node.root / "etc/default/irqbalance").read_text()
    assert text.startswith(fixture("irqbalance.env"))  # every line of the shipped file kept
    assert text.endswith(IRQBALANCE_MARK + '\nIRQBALANCE_ARGS="--policyscript=%s"\n' % POLICY_SCRIPT)
    policy = (node.root / POLICY_SCRIPT.lstrip("/")).read_text()
    assert "0000:01:00.0|0000:01:00.1) echo ban=true ;;" in policy
    assert affinity(node, names, fake=fake)["changed"] is False
    off = affinity(node, names, fake=fake, irqbalance="ignore")
    assert off["changed"] is True and (node.root / "etc/default/irqbalance").read_text() == fixture("irqbalance.env")
    assert not (node.root / POLICY_SCRIPT.lstrip("/")).exists()


def test_an_admins_irqbalance_args_line_is_not_taken_over() -> None:
    text = fixture("irqbalance.env") + 'IRQBALANCE_ARGS="--journal"\n'
    new, problem = irqbalance_config(text, True)
    assert new == text and "line 27" in problem and "--policyscript=" in problem
    mine, problem = irqbalance_config(fixture("irqbalance.env"), True)
    assert problem is None and irqbalance_config(mine, True) == (mine, None)
    assert irqbalance_config(mine, False) == (fixture("irqbalance.env"), None)


def test_virtual_nic_queues_rps_and_xps(node) -> None:
    """A veth-like NIC (no device, no IRQs): RPS over all online CPUs, XPS one CPU per transmit queue."""
    node.put("/sys/devices/system/cpu/online", "0-3\n")
    node.put("/usr/bin/python3", "")
    for kind in ("rx", "tx"):
        for index in range(2):
            node.put("/sys/devices/virtual/net/ens1f0np0/queues/%s-%d/%s" % (
                kind, index, "rps_cpus" if kind == "rx" else "xps_cpus"), "0\n")
    os.makedirs(node.root / "sys/class/net", exist_ok=True)
    os.symlink("../../devices/virtual/net/ens1f0np0", str(node.root / "sys/class/net/ens1f0np0"))
    result = affinity(node, ["ens1f0np0"], rps=True, xps=True, kubelet_config="/nonexistent")
    assert not result.get("failed"), result
    base = node.root / "sys/devices/virtual/net/ens1f0np0/queues"
    assert [(base / ("rx-%d/rps_cpus" % i)).read_text() for i in range(2)] == ["0000000f\n"] * 2
    assert [(base / ("tx-%d/xps_cpus" % i)).read_text() for i in range(2)] == ["00000001\n", "00000002\n"]
    assert result["interfaces"][0]["local_source"] == "online (no NUMA node)"
    assert affinity(node, ["ens1f0np0"], rps=True, xps=True, kubelet_config="/nonexistent")["changed"] is False


def test_state_absent_removes_what_it_installed(node) -> None:
    tree = crow(node)
    names = sorted(tree["nics"])
    affinity(node, names)
    gone = affinity(node, [], state="absent")
    assert gone["changed"] is True
    for path in (STATE, UNIT_FILE, APPLY_SCRIPT):
        assert not (node.root / path.lstrip("/")).exists()
    assert not os.path.lexists(str(node.root / UNIT_LINK.lstrip("/")))


# --------------------------------------------------------------------------- the unit's event parser
def _newlink(index: int, flags: int, name: str, kind: int = apply_mod.RTM_NEWLINK) -> bytes:
    ifname = name.encode() + b"\0"
    attr = struct.pack("=HH", 4 + len(ifname), apply_mod.IFLA_IFNAME) + ifname
    attr += b"\0" * ((4 - len(attr) % 4) % 4)
    body = struct.pack("=BxHiII", 0, 1, index, flags, 0xFFFFFFFF) + attr
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def test_netlink_link_messages_are_read_as_the_kernel_sends_them() -> None:
    data = _newlink(7, 0x1003, "ens1f0np0") + _newlink(8, 0x1002, "ens2f0np0") + \
        _newlink(7, 0, "ens1f0np0", apply_mod.RTM_DELLINK)
    assert apply_mod.link_events(data) == [(apply_mod.RTM_NEWLINK, 7, 0x1003, "ens1f0np0"),
                                           (apply_mod.RTM_NEWLINK, 8, 0x1002, "ens2f0np0"),
                                           (apply_mod.RTM_DELLINK, 7, 0, "ens1f0np0")]
    assert apply_mod.link_events(b"\x10\x00") == []
