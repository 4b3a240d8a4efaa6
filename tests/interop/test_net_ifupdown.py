"""link_mtu's ifupdown file read by ifupdown's own ``ifquery`` (ifupdown 0.8).

The node's /etc/network (its interfaces file sourcing interfaces.d, another file that already
defines eth9) is a temporary directory bound over /etc/network in a private mount namespace, so
``ifquery`` reads exactly what a node's ifup would: our stanza is read, with ``mtu 9000``, for
every form of the source line the backend accepts; ``auto`` brings it up at boot; eth9, defined
elsewhere, is left as it was (a note tells where to add the mtu).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf
from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot

from .net_common import RealRunner, in_mounts, tool

pytestmark = pytest.mark.interop

RAILS = "iface eth9 inet static\n    address 198.18.9.1/24\n"
TARGETS = [{"name": "ens1f0np0", "mtu": 9000, "kind": "physical"}, {"name": "eth9", "mtu": 9000, "kind": "physical"}]


def ifquery(root: Path, *args: str) -> tuple[int, str]:
    """``ifquery ARGS`` with /etc/network bound to ``root``/etc/network."""
    done = in_mounts('etc="$1"; shift; mount --bind "$etc" /etc/network; ifquery "$@" 2>&1 || echo "rc=$?"',
                     str(root / "etc/network"), *args)
    assert done.returncode == 0, done.stderr
    return (1 if "rc=" in done.stdout else 0), done.stdout


@pytest.mark.parametrize("line", ["source /etc/network/interfaces.d/*", "source interfaces.d/*",
                                  "source-directory /etc/network/interfaces.d", "source-directory interfaces.d/"])
def test_ifquery_reads_our_stanza_and_leaves_the_others(tmp_path: Path, line: str) -> None:
    tool("ifquery")
    etc = tmp_path / "etc/network"
    (etc / "interfaces.d").mkdir(parents=True)
    (etc / "interfaces").write_text("auto lo\niface lo inet loopback\n\n%s\n" % line)
    (etc / "interfaces.d/rails").write_text(RAILS)
    rc, eth9_before = ifquery(tmp_path, "eth9")
    assert rc == 0 and "address: 198.18.9.1" in eth9_before
    assert ifquery(tmp_path, "ens1f0np0")[0] == 1                    # unknown before
    actions, notes = _netconf.IfupdownBackend(HostRoot(str(tmp_path)), RealRunner()).plan(TARGETS)
    assert [a.text for a in actions] == ["write /etc/network/interfaces.d/aiinfra-ens1f0np0"]
    assert notes == ["eth9: defined in /etc/network/interfaces.d/rails; add 'mtu 9000' to that stanza "
                     "(not edited automatically)"]
    for action in actions:
        _netconf.apply_change(HostRoot(str(tmp_path)), RealRunner(), action)
    assert ifquery(tmp_path, "ens1f0np0") == (0, "mtu: 9000\n")
    assert "ens1f0np0" in ifquery(tmp_path, "--list", "--allow=auto")[1].split()
    assert ifquery(tmp_path, "eth9") == (0, eth9_before)
