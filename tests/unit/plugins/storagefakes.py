"""Fakes for nvme_layout: recorded tool outputs of loop devices behind the real code paths.

Tool outputs come from tests/fixtures/storage/, recorded from loop devices by
tests/fixtures/storage/record.sh (each file's header names the command). The md superblock
outputs below are written in the format of mdadm's ``export_examine_super1`` (super1.c),
because the kernel the fixtures were recorded on has no md driver.
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node
from ansible_collections.aiinfra.datapath.plugins.module_utils._nvme_layout.layout import NvmeLayout
from ansible_collections.aiinfra.datapath.plugins.module_utils._runner import CommandError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "storage"
DEV = "/dev/loopX"

EXAMINE_OURS = "MD_LEVEL=raid0\nMD_DEVICES=2\nMD_NAME=node1:md-cache\n" \
               "MD_UUID=3a1b2c3d:4e5f6071:8293a4b5:c6d7e8f9\nMD_UPDATE_TIME=1764690000\n" \
               "MD_DEV_UUID=00112233:44556677:8899aabb:ccddeeff\nMD_EVENTS=0\n"
EXAMINE_OTHER = EXAMINE_OURS.replace("node1:md-cache", "db01:pgdata").replace("raid0", "raid1")
RAID_MEMBER_BLKID = "DEVNAME=/dev/loopXp1\nUUID=3a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9\n" \
                    "LABEL=node1:md-cache\nTYPE=linux_raid_member\nUSAGE=raid\n" \
                    "PART_ENTRY_SCHEME=gpt\nPART_ENTRY_NAME=aiinfra-cache\nPART_ENTRY_NUMBER=1\n"
RAID_MEMBER_WIPEFS = '{"signatures": [{"device": "loopXp1", "offset": "0x1000", ' \
                     '"type": "linux_raid_member", "uuid": "3a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", ' \
                     '"label": "node1:md-cache"}]}'
RAID = dict(level=0, chunk_kib=512, name="md-cache")
FSTAB = ("# /etc/fstab\n"
         "UUID=1111 /  ext4  errors=remount-ro 0 1\n"
         "tmpfs\t/scratch\ttmpfs\tdefaults,size=1g\t0 0\n")


def fx(name: str) -> str:
    return (FIXTURES / name).read_text()


def raw_device(scenario: str, device: str = DEV, nodes: bool = True, **extra) -> dict:
    """The raw dict ``Inspector.inspect`` returns, built from one recorded scenario."""
    raw = dict(path=device, device=device, majmin="7:9", ro=False, backing_file="/var/tmp/n1.img",
               aliases=[], lsblk=fx("%s.lsblk.txt" % scenario), wipefs=fx("%s.wipefs.txt" % scenario),
               blkid=fx("%s.blkid.txt" % scenario), partition_nodes={}, part_blkid={}, part_wipefs={},
               part_examine={}, holders=[], mounts=[], swap=False)
    if "PTTYPE=gpt" in raw["blkid"]:
        raw["sgdisk"] = fx("%s.sgdisk.txt" % scenario)
    if (FIXTURES / ("%s.blkid-p1.txt" % scenario)).exists():
        raw["part_blkid"][1] = fx("%s.blkid-p1.txt" % scenario)
        raw["part_wipefs"][1] = fx("%s.wipefs-p1.txt" % scenario)
        if nodes:
            raw["partition_nodes"][1] = DEV + "p1"
    raw.update(extra)
    return raw


def raid_member(device: str, examine: str = EXAMINE_OURS) -> dict:
    return raw_device("ours-partition", device, part_blkid={1: RAID_MEMBER_BLKID},
                      part_wipefs={1: RAID_MEMBER_WIPEFS}, part_examine={1: examine},
                      partition_nodes={1: device + "p1"})


def spec(**over) -> dict:
    """Validated module parameters (what the argument spec gives the capability)."""
    base = dict(devices=[DEV], select=None, raid=None, partition=True, partition_label="aiinfra-cache",
                filesystem=dict(type="xfs", label="model-cache"),
                mount=dict(path="/mnt/model-cache", options=["noatime"]),
                directories=[], wipe_serials=[], reserve_bytes=0,
                fstab="/etc/fstab", mdadm_conf="/etc/mdadm/mdadm.conf", root="/")
    base.update(over)
    return base


class FakeRunner:
    """Answers read-only commands from ``outputs`` (a list = successive answers); state-changing
    commands (record=True) succeed and are kept in ``commands``; ``hooks`` run after one.
    Callable, so that it stands in for the ``Runner`` class too (netfakes.use)."""

    def __init__(self, outputs: dict | None = None, hooks: dict | None = None) -> None:
        self.outputs = outputs or {}
        self.hooks = hooks or {}
        self.commands: list[list[str]] = []
        self.calls: list[list[str]] = []
        self.stdin: list[tuple[list[str], str]] = []   # (argv, data) of the commands given input

    def __call__(self, module) -> FakeRunner:
        return self

    def which(self, name, required=False):
        return "/usr/sbin/" + name

    def run(self, argv, check=True, data=None, record=False):
        self.calls.append(list(argv))
        if record:
            self.commands.append(list(argv))
        if data is not None:
            self.stdin.append((list(argv), data))
        answer = self.outputs.get(tuple(argv), (0, "", "") if record else (2, "", ""))
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if argv[0] in self.hooks:
            self.hooks[argv[0]](argv)
        if check and answer[0] != 0:
            raise CommandError(argv, *answer)
        return answer


class FakeInspector:
    def __init__(self, holders: dict | None = None, partitions: dict | None = None) -> None:
        self._holders = holders or {}
        self._partitions = partitions or {}

    def holders(self, name):
        return self._holders.get(name, [])

    def partitions_of(self, name):
        return self._partitions.get(name, {})

    def vanished(self, device):
        return None

    def logical_sector_size(self, name):
        return 512


class RecordedInspector(FakeInspector):
    """The whole Inspector of a node whose devices are recorded scenarios (``raws``)."""

    def __init__(self, raws: list[dict], mounts: list[dict] | None = None, **kw) -> None:
        super().__init__(**kw)
        self.raws = dict((raw["path"], raw) for raw in raws)
        self.mounts = mounts or []

    def mountinfo(self):
        return list(self.mounts)

    def swaps(self):
        return set()

    def system_majmins(self, mounts):
        return set()

    def inspect(self, path, mounts, swaps):
        return dict(self.raws[path], mounts=[m for m in mounts if m["majmin"] == self.raws[path]["majmin"]])


def layout(tmp_path: Path, devices: list[dict], runner: FakeRunner | None = None, mounts=None,
           inspector=None, check_mode: bool = False, **over) -> tuple[NvmeLayout, object]:
    """The capability over recorded devices (node root ``tmp_path/root``, mount point
    ``tmp_path/mnt``) and the state ``read`` would give: (capability, state)."""
    params = spec(mount=dict(path=str(tmp_path / "mnt"), options=["noatime"]),
                  fstab="/etc/fstab", mdadm_conf="/etc/mdadm/mdadm.conf", **over)
    lay = NvmeLayout(params, Node(runner or FakeRunner(), str(tmp_path / "root"), check_mode=check_mode))
    lay.inspector = inspector or FakeInspector()
    return lay, lay.classify_devices(devices, mounts or [])


def kinds(actions) -> list[str]:
    return [a.kind for a in actions]


def action(actions, kind: str):
    """The one action of ``kind``."""
    found = [a for a in actions if a.kind == kind]
    assert len(found) == 1, (kind, actions)
    return found[0]
