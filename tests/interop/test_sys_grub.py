"""kernel_cmdline's grub drop-in, read the way grub-mkconfig reads it.

grub-mkconfig (util/grub-mkconfig.in, GRUB 2.06/2.12 as Debian and Ubuntu ship it; /bin/sh, under
``set -e``) sources /etc/default/grub, then every /etc/default/grub.d/*.cfg in glob order, and
10_linux puts ``${GRUB_CMDLINE_LINUX} ${GRUB_CMDLINE_LINUX_DEFAULT}`` unquoted on the ``linux``
line. GRUB_LOOP below is that loop, verbatim but for the message, run with the system's
``/bin/sh`` over a temporary ``sysconfdir``. The drop-in is written by the kernel_cmdline
backend itself (apply on a temporary root; update-grub is recorded, not run).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _cmdline
from ansible_collections.aiinfra.datapath.plugins.module_utils._capability import Node, run

from .sys_common import run as run_tool
from .sys_common import tool

pytestmark = pytest.mark.interop

# util/grub-mkconfig.in (lines 160-169 in Ubuntu 24.04's /usr/sbin/grub-mkconfig)
GRUB_LOOP = r'''set -e
sysconfdir="$1"
if test -f ${sysconfdir}/default/grub ; then
  . ${sysconfdir}/default/grub
fi
for x in ${sysconfdir}/default/grub.d/*.cfg ; do
  if [ -e "${x}" ]; then
    . "${x}"
  fi
done
printf '%s\n' "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"
'''
DEFAULT_GRUB = (
    "# If you change this file, run 'update-grub' afterwards to update\n"
    "GRUB_DEFAULT=0\n"
    "GRUB_TIMEOUT=5\n"
    "GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\n"
    'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    'GRUB_CMDLINE_LINUX="root=UUID=0a1b2c3d ro"\n'
)
PLANNED = ["default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:4,1:4", "hugepagesz=2M", "hugepages=512",
           "iommu=pt", "intel_iommu=on", "isolcpus=managed_irq,domain,2-15", "nohz_full=2-15",
           "rcu_nocbs=2-15", "console=ttyS0,115200n8", "pci=realloc", "mlx5_core.log_num_mgm_entry_size=-1",
           "module.opt=a:b/c@d+e%f~g^h", "nosmt"]
# Each would change meaning on its way: in the drop-in (sh: quotes, $, `, \\), in 10_linux's unquoted
# expansion (blanks split, * ? [ glob) or in grub.cfg (grub script: ; | & < > { } #).
HOSTILE = ["a;reboot", "$(id)", "`id`", 'a"b', "a'b", "a b", "a\\b", "x=$HOME", "a\nb", "#x", "a|b", "a&b",
           "a>b", "a<b", "a*b", "a?b", "a{b}", "!x", "~root", "a\tb", ""]


class RecordingRunner:
    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def which(self, name: str, required: bool = False) -> str | None:
        return "/usr/sbin/" + name if name in ("update-grub", "grub-mkconfig") else None

    def run(self, argv, check=True, data=None, record=False):
        self.commands.append(list(argv))
        return 0, "", ""


def _node(root: Path, cmdline: str = "BOOT_IMAGE=/vmlinuz-6.1.0 root=UUID=0a1b2c3d ro quiet",
          admin: dict[str, str] | None = None) -> None:
    (root / "boot" / "grub").mkdir(parents=True, exist_ok=True)
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc" / "cmdline").write_text(cmdline + "\n")
    (root / "etc" / "default" / "grub.d").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "default" / "grub").write_text(DEFAULT_GRUB)
    for name, text in (admin or {}).items():
        (root / "etc" / "default" / "grub.d" / name).write_text(text)


def _apply(root: Path, args: list[str]) -> dict:
    params = {"args": args, "remove": [], "backend": "grub_d", "drop_in": _cmdline.DEFAULT_DROP_IN,
              "update_bootloader": True, "when_no_bootloader": "skip", "root": str(root)}
    return run(_cmdline.KernelCmdline, params, Node(RecordingRunner(), str(root)))


def _grub(root: Path) -> tuple[list[str], list[str]]:
    """GRUB_CMDLINE_LINUX and _DEFAULT after grub-mkconfig's loop, split as 10_linux's unquoted
    expansion splits them."""
    done = run_tool([tool("sh"), "-c", GRUB_LOOP, "grub-mkconfig", str(root / "etc")])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    linux, default = done.stdout.split("\n")[:2]
    return linux.split(), default.split()


@pytest.mark.parametrize("admin,before,after", [
    ({}, [], []),
    ({"10-admin.cfg": 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX console=tty0"\n'}, ["console=tty0"], []),
    ({"99-admin.cfg": 'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} mitigations=auto"\n'}, [], ["mitigations=auto"]),
    ({"10-admin.cfg": 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX console=tty0"\n',
      "50-cloudimg-settings.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0"\nGRUB_TIMEOUT=0\n',
      "99-admin.cfg": "GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX mitigations=auto\"\n"},
     ["console=tty0"], ["mitigations=auto"]),
])
def test_grub_mkconfig_sources_our_drop_in_in_its_place(tmp_path: Path, admin: dict[str, str], before: list[str],
                                                        after: list[str]) -> None:
    root = tmp_path / "root"
    _node(root, admin=admin)
    result = _apply(root, PLANNED)
    assert not result.get("failed"), result.get("msg")
    assert result["reboot_required"] is True
    drop_in = root / _cmdline.DEFAULT_DROP_IN.lstrip("/")
    for shell in ("sh", "bash"):
        checked = run_tool([tool(shell), "-n", str(drop_in)])
        assert (checked.returncode, checked.stdout + checked.stderr) == (0, ""), (shell, checked.stderr)

    linux, default = _grub(root)
    assert linux == ["root=UUID=0a1b2c3d", "ro"] + before + PLANNED + after
    assert default == (["console=tty1", "console=ttyS0"] if "50-cloudimg-settings.cfg" in admin else ["quiet"])

    # after the reboot the kernel has what grub put on the linux line: nothing left to do
    cmdline = " ".join(["BOOT_IMAGE=/vmlinuz-6.1.0"] + linux + default)
    _node(root, cmdline=cmdline, admin=admin)
    again = _apply(root, PLANNED)
    assert again["changed"] is False and again["missing"] == [] and again["reboot_required"] is False


def test_every_character_a_planned_argument_may_hold_reaches_grub_unchanged(tmp_path: Path) -> None:
    allowed = "AZaz09_.,:=+/@%-~^"
    args = ["a" + allowed, "-" + allowed, "x=" + allowed + "=" + allowed]
    root = tmp_path / "root"
    _node(root)
    assert not _apply(root, args).get("failed")
    assert _grub(root)[0][-3:] == args


@pytest.mark.parametrize("arg", HOSTILE)
def test_an_argument_that_could_leave_its_quotes_is_refused_before_writing(tmp_path: Path, arg: str) -> None:
    root = tmp_path / "root"
    _node(root)
    result = _apply(root, ["iommu=pt", arg])
    assert result.get("failed") is True and repr(arg) in result["msg"], result
    assert not (root / _cmdline.DEFAULT_DROP_IN.lstrip("/")).exists()
    assert os.listdir(root / "etc" / "default" / "grub.d") == []
