"""Class 7 - the wipe guard names one NVMe namespace, never every namespace of a controller.

An NVMe controller's serial is shared by all its namespaces (/sys/class/nvme/nvmeX/serial; lsblk's
SERIAL of every nvmeXnY): naming it in ``wipe_serials`` to clear the scratch namespace nvme0n1 would
also allow wiping nvme0n2, which holds another tenant's data. Kernel names (/dev/nvme1n1) move
between boots. The node's sysfs is a real tree below a temporary root, written in the formats of the
kernel's attributes (drivers/nvme/host/sysfs.c: ``wwid`` "eui.%16phN", ``eui`` "%8ph", ``nguid``
"%pU", ``nsid`` "%d"; the controller's ``serial`` padded with blanks as the identify data holds it);
the device probes are the recorded outputs of tests/fixtures/storage (a loop device's lsblk, given
the NVMe name, serial and WWN it would show); the guard is the module's own classify -> plan.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.parse import LayoutError
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.probe import Inspector
from storagefakes import layout, raw_device

SERIAL = "S64RNE0R800002"
NAMESPACES = {  # name: (nsid, nguid, eui)
    "nvme0n1": ("1", "36344d30-5280-0002-0025-38b500000001", "00 25 38 b5 00 00 00 01"),
    "nvme0n2": ("2", "36344d30-5280-0002-0025-38b500000002", "00 25 38 b5 00 00 00 02"),
}


def sysfs(root: Path, namespaces: dict) -> Path:
    for name, (nsid, nguid, eui) in namespaces.items():
        block = root / "sys" / "class" / "block" / name
        (block / "device").mkdir(parents=True)
        (block / "device" / "serial").write_text(SERIAL + " " * 6 + "\n")
        (block / "nsid").write_text(nsid + "\n")
        (block / "nguid").write_text(nguid + "\n")
        (block / "eui").write_text(eui + "\n")
        (block / "wwid").write_text("eui." + nguid.replace("-", "") + "\n")
    return root


def nvme_raw(root: Path, name: str) -> dict:
    """One namespace as Inspector.inspect gives it: recorded probes, the sysfs identity read for real."""
    raw = raw_device("foreign-ext4", device="/dev/" + name)
    tree = json.loads(raw["lsblk"].split("\n", 2)[2])
    dev = tree["blockdevices"][0]
    dev.update(name=name, path="/dev/" + name, type="disk", serial=SERIAL, tran="nvme", model="SAMSUNG MZWLO3T8",
               wwn="eui." + NAMESPACES[name][1].replace("-", ""))
    raw["lsblk"] = json.dumps(tree)
    raw["nvme"] = Inspector(None, HostRoot(str(root))).nvme_identity(name)
    return raw


@pytest.fixture
def node(tmp_path: Path) -> Path:
    return sysfs(tmp_path / "node", NAMESPACES)


def plan(tmp_path: Path, raw: dict, wipe: list[str]):
    lay, state = layout(tmp_path, [copy.deepcopy(raw)], wipe_serials=wipe)
    return lay, lay.plan(state)


def test_a_controller_serial_does_not_allow_wiping_every_namespace(tmp_path: Path, node: Path) -> None:
    other_tenant = nvme_raw(node, "nvme0n2")
    with pytest.raises(LayoutError) as refused:
        plan(tmp_path, other_tenant, [SERIAL])   # meant for nvme0n1, shared by nvme0n2
    msg = refused.value.msg
    assert "nothing was changed" in msg and "2 namespaces" in msg and "%s:2" % SERIAL in msg, msg


@pytest.mark.parametrize("identity", ["%s:2" % SERIAL, "eui.36344d3052800002002538b500000002",
                                      "36344d30-5280-0002-0025-38b500000002", "0025 38b5 0000 0002"])
def test_the_namespaces_own_identity_allows_it(tmp_path: Path, node: Path, identity: str) -> None:
    _lay, actions = plan(tmp_path, nvme_raw(node, "nvme0n2"), [identity])
    assert [a.kind for a in actions][0] == "wipe"
    with pytest.raises(LayoutError):   # ... and names no other namespace
        plan(tmp_path, nvme_raw(node, "nvme0n1"), [identity])


def test_a_bare_serial_of_a_single_namespace_controller_is_deprecated_not_refused(tmp_path: Path) -> None:
    root = sysfs(tmp_path / "single", {"nvme0n1": NAMESPACES["nvme0n1"]})
    lay, actions = plan(tmp_path, nvme_raw(root, "nvme0n1"), [SERIAL])
    assert [a.kind for a in actions][0] == "wipe"
    assert any("deprecated" in w and "%s:1" % SERIAL in w for w in lay.node.warnings), lay.node.warnings


def test_kernel_names_are_refused_by_the_spec_and_the_module(tmp_path: Path, node: Path) -> None:
    from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node
    from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.layout import NvmeLayout
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils import cluster_spec
    from storagefakes import spec

    errors = cluster_spec.validate_spec({"version": 1, "profiles": [{"name": "gpu", "storage": {
        "devices": ["/dev/disk/by-id/nvme-eui.36344d3052800002002538b500000002"],
        "filesystem": {"type": "xfs", "label": "model-cache"}, "mount": {"path": "/mnt/model-cache"},
        "wipe_serials": ["/dev/nvme0n2"]}}]})
    assert [e.path for e in errors] == ["datapath.profiles[0].storage.wipe_serials[0]"], errors
    assert "kernel name" in errors[0].message and "<serial>:<nsid>" in errors[0].hint
    module = NvmeLayout(spec(wipe_serials=["/dev/nvme0n2"]), Node(None, str(node)))
    with pytest.raises(LayoutError, match="kernel name"):
        module.validate()
