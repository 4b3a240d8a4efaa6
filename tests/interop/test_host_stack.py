"""The files nic_affinity and ebpf_readiness write, read by the programs that read them on a node.

- the link-up unit ``aiinfra-datapath-nic-affinity.service``, its script and its enable link, written by the
  module itself into a root that holds the distribution's unit files: ``systemd-analyze verify --root`` prints
  nothing and ``systemctl --root is-enabled`` says ``enabled``;
- the queue settings in ``.link`` files: ``udevadm test-builtin net_setup_link`` (what udev runs when a device
  appears, at boot too) on a veth with 4+4 queues in a network namespace of our own applies the NIC's own
  ``10-aiinfra-IF.link`` with our drop-in, or an admin's ``.link`` with our drop-in beside link_mtu's, and
  leaves the device at the planned ``RxChannels=``/``TxChannels=``;
- irqbalance's environment file, sourced by ``sh`` (as the init scripts and ``EnvironmentFile=`` read it: one
  ``IRQBALANCE_ARGS``), and the policy script run by ``sh`` as irqbalance runs it (device path, IRQ number);
- the bpffs fstab line: ``findmnt --verify`` and ``mount -a --fstab`` in a private mount namespace.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, apply_file, run
from ansible_collections.aiinfra.datapath.plugins.module_utils._ebpf_readiness import BPFFS, BPFFS_OPTIONS
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._fstab import fstab_entry
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity import NicAffinity
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity_host import (
    POLICY_SCRIPT,
    UNIT_NAME,
    irqbalance_config,
    policy_script,
)
from ansible_collections.aiinfra.datapath.plugins.module_utils._nic_affinity_persist import link_lines, plan_links

from .net_common import ip, netns, netns_facts, system_links, tool, udev_link
from .sys_common import in_private_mounts
from .sys_common import run as run_tool

pytestmark = pytest.mark.interop

SYSTEM_UNITS = "/usr/lib/systemd/system"
ENV = dict(os.environ, SYSTEMD_LOG_LEVEL="notice", SYSTEMD_PAGER="", LC_ALL="C.UTF-8")


# --------------------------------------------------------------------------- the link-up unit
def test_the_link_up_unit_passes_systemd_analyze_verify_and_is_enabled(tmp_path: Path) -> None:
    from nicfakes import crow, runner
    from topofakes import SysRoot

    analyze, systemctl = tool("systemd-analyze"), tool("systemctl")
    if not os.path.isfile(os.path.join(SYSTEM_UNITS, "network-pre.target")):
        pytest.skip(f"{SYSTEM_UNITS} has no systemd unit files")
    root = tmp_path / "root"
    (root / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    (root / "lib").symlink_to("usr/lib")
    node = SysRoot(root)
    tree = crow(node)
    os.chmod(root / "usr/bin/python3", 0o755)  # the interpreter ExecStart names (crow() writes a stand-in)
    names = sorted(tree["nics"])
    params = {"interfaces": [{"name": n, "match": None, "fabric": "rdma"} for n in names], "root": str(root)}
    params.update((k, v.get("default")) for k, v in NicAffinity.options().items() if k != "interfaces")
    result = run(NicAffinity, params, Node(runner(names), str(root)))
    assert not result.get("failed"), result
    done = run_tool([analyze, "verify", f"--root={root}", "--man=no", UNIT_NAME], env=ENV)
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), done.stdout + done.stderr
    enabled = run_tool([systemctl, f"--root={root}", "is-enabled", UNIT_NAME], env=ENV)
    assert enabled.stdout.strip() == "enabled", enabled.stdout + enabled.stderr
    # the reader is not asleep: a unit whose interpreter is gone is named
    (root / "usr/bin/python3").unlink()
    broken = run_tool([analyze, "verify", f"--root={root}", "--man=no", UNIT_NAME], env=ENV)
    assert broken.returncode != 0 and "/usr/bin/python3" in broken.stdout + broken.stderr


# --------------------------------------------------------------------------- .link files and udev
@pytest.fixture(scope="module")
def queues_ns():
    tool("udevadm")
    tool("ethtool")
    with netns("queues") as ns:
        ip(ns, "link", "add", "v0", "numtxqueues", "4", "numrxqueues", "4", "type", "veth", "peer", "name", "v1",
           "numtxqueues", "4", "numrxqueues", "4")
        ip(ns, "link", "set", "v1", "up")
        yield ns


def _channels(ns: str) -> tuple[str, str]:
    from .net_common import in_ns

    text = in_ns(ns, "ethtool -l v0").stdout.split("Current hardware settings:", 1)[1]
    values = dict(line.split(":", 1) for line in text.strip().splitlines() if ":" in line)
    return values["RX"].strip(), values["TX"].strip()


def _write(root: Path, actions) -> None:
    host = HostRoot(str(root))
    for action in actions:
        apply_file(host, action)


def _reset(ns: str) -> None:
    from .net_common import in_ns

    assert in_ns(ns, "ethtool -L v0 rx 4 tx 4 && ip link set v0 mtu 1500").returncode == 0


def test_udev_applies_the_nics_own_link_with_the_queue_drop_in(queues_ns: str, tmp_path: Path) -> None:
    _reset(queues_ns)
    root = tmp_path / "root"
    (root / "etc/systemd/network").mkdir(parents=True)
    system_links(root)
    table = netns_facts(queues_ns, tmp_path / "sysfs")
    target = dict(table["v0"], lines=link_lines({"rx": 2, "tx": 2}, None))
    actions, notes, planned = plan_links(HostRoot(str(root)), [target], [table["v1"]])
    assert notes == [] and sorted(planned) == ["/etc/systemd/network/10-aiinfra-v0.link",
                                               "/etc/systemd/network/10-aiinfra-v0.link.d/91-aiinfra-queues.conf"]
    _write(root, actions)
    props, _link, log = udev_link(queues_ns, "v0", root / "etc/systemd/network")
    assert props.get("ID_NET_LINK_FILE") == "/etc/systemd/network/10-aiinfra-v0.link", log
    assert _channels(queues_ns) == ("2", "2"), log
    # the second plan writes nothing: the files are what it would write
    assert plan_links(HostRoot(str(root)), [target], [table["v1"]])[0] == []


def test_an_admins_link_gets_the_drop_in_beside_link_mtus(queues_ns: str, tmp_path: Path) -> None:
    _reset(queues_ns)
    root = tmp_path / "root"
    etc = root / "etc/systemd/network"
    etc.mkdir(parents=True)
    system_links(root)
    (etc / "50-admin.link").write_text("[Match]\nOriginalName=v0\n\n[Link]\nNamePolicy=keep\n")
    (etc / "50-admin.link.d").mkdir()
    (etc / "50-admin.link.d/90-aiinfra-mtu.conf").write_text(
        "# Managed by aiinfra.datapath.link_mtu; changes here are overwritten.\n[Link]\nMTUBytes=9000\n")
    table = netns_facts(queues_ns, tmp_path / "sysfs")
    target = dict(table["v0"], lines=link_lines({"rx": 3, "tx": 1}, None))
    actions, _notes, planned = plan_links(HostRoot(str(root)), [target], [table["v1"]])
    assert sorted(planned) == ["/etc/systemd/network/50-admin.link.d/91-aiinfra-queues.conf"]
    _write(root, actions)
    props, link, log = udev_link(queues_ns, "v0", etc)
    assert props.get("ID_NET_LINK_FILE") == "/etc/systemd/network/50-admin.link", log
    assert _channels(queues_ns) == ("3", "1") and link["mtu"] == 9000, log  # both drop-ins applied


# --------------------------------------------------------------------------- irqbalance
def test_irqbalances_environment_and_policy_script_as_sh_reads_them(tmp_path: Path) -> None:
    from nicfakes import fixture

    sh = tool("sh")
    env_file = tmp_path / "irqbalance"
    text, problem = irqbalance_config(fixture("irqbalance.env"), True)
    assert problem is None
    env_file.write_text(text)
    sourced = run_tool([sh, "-c", '. "$1"; printf %s "$IRQBALANCE_ARGS"', "sh", str(env_file)])
    assert sourced.returncode == 0 and sourced.stdout == "--policyscript=%s" % POLICY_SCRIPT
    script = tmp_path / "policy"
    script.write_text(policy_script(["0000:01:00.0", "0000:01:00.1"]))
    for path, expected in (("/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.1", "ban=true\n"),
                           ("/sys/devices/pci0000:00/0000:00:1f.2", "")):
        done = run_tool([sh, str(script), path, "99"])
        assert (done.returncode, done.stdout) == (0, expected), done.stderr


# --------------------------------------------------------------------------- bpffs in fstab
def test_the_bpffs_line_is_valid_and_mounts_bpffs(tmp_path: Path) -> None:
    findmnt = tool("findmnt")
    fstab = tmp_path / "fstab"
    fstab.write_text("# fstab\n" + fstab_entry("bpffs", BPFFS, "bpf", BPFFS_OPTIONS) + "\n")
    verify = run_tool([findmnt, "--verify", "--verbose", "--tab-file", str(fstab)])
    text = verify.stdout + verify.stderr
    assert verify.returncode == 0 and "Success, no errors or warnings detected" in text, text
    assert "[E]" not in text and "[W]" not in text and "VFS options: rw,nosuid,nodev,noexec,relatime" in text
    done = in_private_mounts('mount -a --fstab "$1" && findmnt -J -o TARGET,FSTYPE,OPTIONS /sys/fs/bpf', str(fstab))
    assert done.returncode == 0, done.stderr
    (found,) = json.loads(done.stdout)["filesystems"]
    assert found["fstype"] == "bpf" and "mode=700" in found["options"]
