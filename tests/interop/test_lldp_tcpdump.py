"""lldp_dcbx reads what tcpdump prints: the crafted DCBX frames of the lab's switch, written to a pcap and read
by the real tcpdump, once as the module captures (``-e -nn -xx``: the hex the module decodes) and once with
tcpdump's own LLDP printer (``-vv``), which must agree with the module's decoding (PFC enable bits, willing,
Application Priority)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils._lldp_dcbx import capture_argv, hex_frame, parse_lldp
from datapath_lab.lldp import lldp_frame, pcap

pytestmark = pytest.mark.interop
TCPDUMP = shutil.which("tcpdump") or ("/usr/sbin/tcpdump" if Path("/usr/sbin/tcpdump").exists() else None)


def tcpdump(path: Path, *flags: str) -> str:
    assert TCPDUMP, "tcpdump is installed by scripts/bootstrap.sh"
    return subprocess.run([TCPDUMP, "-r", str(path), *flags], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize(("pfc", "willing", "app"), [((4,), False, (3, 3, 4791)), ((3,), True, (5, 3, 4791)),
                                                     ((3, 4), False, (3, 5, 26))])
def test_the_module_decodes_what_tcpdump_decodes(tmp_path: Path, pfc: tuple[int, ...], willing: bool,
                                                 app: tuple[int, int, int]) -> None:
    path = tmp_path / "lldp.pcap"
    path.write_bytes(pcap([lldp_frame(pfc=pfc, pfc_willing=willing, apps=(app,))]))
    # the module's capture flags, but from the file: -e -nn -xx (and -c 1)
    argv = capture_argv("tcpdump", 5, "eth0")
    flags = [f for f in argv[argv.index("tcpdump") + 1:] if f not in ("-Q", "in", "-i", "eth0", "-s", "9216")]
    ours = parse_lldp(hex_frame(tcpdump(path, *flags)))
    printed = tcpdump(path, "-nn", "-e", "-vv")
    values = re.search(r"PFC Enable\s+Priority :[ 0-7]+\s+Value    :((?: +[01])+)", printed)
    assert values, printed
    bits = [int(v) for v in values.group(1).split()]
    assert ours["dcbx"]["pfc"]["enabled"] == [p for p, bit in enumerate(bits) if bit] == sorted(pfc)
    assert f"Willing: {int(willing)}, MBC: 0" in printed and ours["dcbx"]["pfc"]["willing"] is willing
    prio, selector, protocol = app
    assert f"Priority: {prio}, RES: 0, Sel: {selector}, Protocol ID: {protocol}" in printed
    entry = ours["dcbx"]["app_priority"][0]
    assert (entry["priority"], entry["selector"], entry["protocol"]) == (prio, selector, protocol)
    assert f"System Name TLV (5), length 6: {ours['system_name']}" in printed
    assert f"Subtype Interface Name (5): {ours['port_id']}" in printed
