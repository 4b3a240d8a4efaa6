"""link_mtu's netplan persistence, read by netplan itself (netplan.io 0.106: `netplan get`,
`netplan generate --root-dir`).

For every case of tests/fixtures/interop/net/netplan (a node's netplan files and devices):

- the backend plans with netplan's own reading of the files (``netplan get`` over a private copy
  of /lib, /etc and /run/netplan) and gives what the case expects;
- ``netplan generate`` on the node as it was (without any file of ours) and on the node after the
  plan is applied gives the same files with the same content **except the MTU lines**: same
  addresses, routes, [Match] sections and names; the MTU lands on the definition that configures
  the NIC (its .network's [Link], its .netdev, its .link, its NetworkManager profile), and an
  interface persisted through a .link leaves netplan's output exactly as it was;
- the backend's own reader of netplan files (used when netplan's CLI is absent) plans the same.

Point 1 of the issue is the case ``set-name-by-mac``: the earlier ``ethernets.ens1f0np0: {mtu}``
made netplan write 10-netplan-ens1f0np0.network (MTU only), which networkd applies before
10-netplan-rail0.network (the addresses) — shown here with netplan's own output.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf
from ansible_collections.aiinfra.datapath.plugins.module_utils import _netconf_netplan as np

from .net_common import RealRunner, netcases, run, sections, tool

pytestmark = pytest.mark.interop

OUTPUTS = ("run/systemd/network", "run/NetworkManager", "run/udev/rules.d")


@pytest.fixture(scope="module")
def netplan() -> str:
    return tool("netplan")


def generate(netplan: str, root: Path) -> dict[str, str]:
    """``netplan generate --root-dir root``: {path below root: content} of what it writes."""
    for directory in ("lib/netplan", "etc/netplan", "run/netplan"):
        for path in (root / directory).glob("*.yaml"):
            path.chmod(0o600)
    for out in OUTPUTS:
        shutil.rmtree(root / out, ignore_errors=True)
    done = run([netplan, "generate", "--root-dir", str(root)])
    assert done.returncode == 0, done.stderr
    return dict((str(p.relative_to(root)), p.read_text()) for out in OUTPUTS for p in sorted((root / out).rglob("*"))
                if p.is_file())


def without_mtu(text: str) -> dict[str, list[tuple[str, str]]]:
    """A generated file's sections without MTUBytes= / mtu= (and sections left empty)."""
    found = {}
    for name, entries in sections(text).items():
        kept = [(k, v) for k, v in entries if k not in ("MTUBytes", "mtu")]
        if kept:
            found[name] = kept
    return found


def node_before(name: str, root: Path) -> None:
    """The node as it was before link_mtu: the case's files without any of ours."""
    netcases.build(name, root)
    (root / "etc/netplan/90-aiinfra-datapath.yaml").unlink(missing_ok=True)


def plan(name: str, root: Path, netplan_cli: bool = True):
    host, targets, others, case = netcases.build(name, root)
    runner = RealRunner(netplan=netplan_cli)
    actions, notes = _netconf.NetplanBackend(host, runner).plan(targets, others)
    return host, runner, actions, notes, case, targets


def mtu_lines(files: dict[str, str]) -> dict[str, list[str]]:
    return dict((rel, [line for line in text.splitlines() if line.startswith(("MTUBytes=", "mtu="))])
                for rel, text in files.items())


@pytest.mark.parametrize("name", netcases.names())
def test_case_planned_by_netplan_get_and_checked_by_netplan_generate(tmp_path: Path, netplan: str, name: str) -> None:
    host, runner, actions, notes, case, targets = plan(name, tmp_path / "after")
    netcases.expect(case, actions, notes)
    assert all(argv[:2] == [netplan, "get"] for argv in runner.commands) and runner.commands
    if case["expect"].get("cli_only"):
        # netplan refuses the node's own files; generate would fail at boot the same way
        assert actions == []
        node_before(name, tmp_path / "before")
        assert run([netplan, "generate", "--root-dir", str(tmp_path / "before")]).returncode != 0
        return
    node_before(name, tmp_path / "before")
    before = generate(netplan, tmp_path / "before")
    for action in actions:
        _netconf.apply_change(host, runner, action)
    after = generate(netplan, tmp_path / "after")
    dropin = tmp_path / "after" / np.OWN.lstrip("/")
    planned = np.definitions(json.loads(dropin.read_text())["network"]) if dropin.exists() else {}
    planned.pop(("version",), None)
    defs = np.definitions(np.NetplanView(host, RealRunner()).load())
    renamed = dict((t["name"], t.get("renamed")) for t in targets)

    # the same files but one: netplan's .link for a definition by name that had none; it matches
    # OriginalName=ID only, and the device has another kernel name (udev renamed it)
    for rel in sorted(set(after) - set(before)):
        ident = rel.rsplit("/10-netplan-", 1)[-1][:-len(".link")]
        assert rel == "run/systemd/network/10-netplan-%s.link" % ident, rel
        assert [k for k in planned if k[1] == ident] and not np.has_link(defs[("ethernets", ident)])
        assert sections(after[rel])["Match"] == [("OriginalName", ident)] and renamed.get(ident) is True
    assert set(before) <= set(after)
    # ... with the same content except the MTU lines
    for rel in before:
        assert without_mtu(before[rel]) == without_mtu(after[rel]), rel
    # every MTU line is the planned MTU of the definition the file is generated from
    mtus = dict((ident, value["mtu"]) for (section, ident), value in planned.items())
    for rel, lines in mtu_lines(after).items():
        if lines != mtu_lines(before).get(rel, []):
            ident = rel.split("netplan-", 1)[1].rsplit(".", 1)[0]
            assert lines == ["%s=%d" % ("mtu" if rel.endswith(".nmconnection") else "MTUBytes", mtus[ident])], rel
    # and every planned definition got it where its renderer reads it
    for (section, ident), value in planned.items():
        carriers = [rel for rel in after if "netplan-%s." % ident in rel and
                    ("MTUBytes=%d" % value["mtu"] in after[rel] or "mtu=%d" % value["mtu"] in after[rel])]
        assert carriers, (section, ident, sorted(after))
        network = "run/systemd/network/10-netplan-%s.network" % ident
        if network in after:
            assert ("MTUBytes", str(value["mtu"])) in sections(after[network]).get("Link", [])
    # interfaces persisted by a .link of ours: netplan's output is not touched by them
    if not planned:
        assert after == before
    for path in case["expect"]["links"].values():
        assert "MTUBytes=9000" in (tmp_path / "after" / path.lstrip("/")).read_text()


def test_issue_point_1_the_earlier_dropin_split_the_nic(tmp_path: Path, netplan: str) -> None:
    """netplan's own output for the earlier drop-in and for the one planned now."""
    root = tmp_path / "earlier"
    netcases.build("set-name-by-mac", root)
    earlier = generate(netplan, root)
    split = "run/systemd/network/10-netplan-ens1f0np0.network"
    # a second definition: networkd applies 10-netplan-ens1f0np0.network (lexically first) to the NIC
    assert sections(earlier[split]) == {"Match": [("Name", "ens1f0np0")], "Link": [("MTUBytes", "9000")],
                                        "Network": [("LinkLocalAddressing", "ipv6")]}
    assert sorted(earlier).index(split) < sorted(earlier).index("run/systemd/network/10-netplan-rail0.network")
    assert "MTUBytes" not in earlier["run/systemd/network/10-netplan-rail0.link"]
    host, runner, actions, notes, case, targets = plan("set-name-by-mac", tmp_path / "now")
    for action in actions:
        _netconf.apply_change(host, runner, action)
    now = generate(netplan, tmp_path / "now")
    assert split not in now
    rail0 = sections(now["run/systemd/network/10-netplan-rail0.network"])
    assert rail0["Match"] == [("PermanentMACAddress", "b8:3f:d2:00:00:01"), ("Name", "ens1f0np0")]
    assert rail0["Link"] == [("MTUBytes", "9000")] and ("Address", "198.19.0.11/24") in rail0["Network"]
    assert ("MTUBytes", "9000") in sections(now["run/systemd/network/10-netplan-rail0.link"])["Link"]
    assert ("Name", "ens1f0np0") in sections(now["run/systemd/network/10-netplan-rail0.link"])["Link"]


@pytest.mark.parametrize("name", [n for n in netcases.names() if not netcases.load(n)["expect"].get("cli_only")])
def test_file_reader_plans_what_netplan_get_plans(tmp_path: Path, netplan: str, name: str) -> None:
    with_cli = plan(name, tmp_path / "cli")
    with_files = plan(name, tmp_path / "files", netplan_cli=False)
    assert not with_files[1].commands
    assert [(a.text, a.after) for a in with_files[2]] == [(a.text, a.after) for a in with_cli[2]]
    assert with_files[3] == with_cli[3]


@pytest.mark.parametrize("name", ["set-name-by-mac", "bond-vlan"])
def test_recorded_netplan_get_is_what_netplan_prints(tmp_path: Path, netplan: str, name: str) -> None:
    """The unit tests answer `netplan get` with these recordings: netplan still prints them."""
    node_before(name, tmp_path)
    for path in tmp_path.rglob("*.yaml"):
        path.chmod(0o600)
    got = run([netplan, "get", "--root-dir", str(tmp_path), "all"], check=True).stdout
    assert got == (netcases.CASES / name / "netplan-get.yaml").read_text()
    entries = json.loads(json.dumps(netcases.load(name)["expect"]["netplan"]))
    (tmp_path / np.OWN.lstrip("/")).write_text(json.dumps({"network": dict(entries, version=2)}))
    (tmp_path / np.OWN.lstrip("/")).chmod(0o600)
    got = run([netplan, "get", "--root-dir", str(tmp_path), "all"], check=True).stdout
    assert got == (netcases.CASES / name / "netplan-get-planned.yaml").read_text()


LINK_RULES = [
    # (definition, does netplan already write a .link for it)
    ({"addresses": ["198.19.0.11/24"]}, False),
    ({"match": {"macaddress": "b8:3f:d2:00:00:01"}, "set-name": "rail0"}, True),
    ({"wakeonlan": True}, True),
    ({"wakeonlan": False}, False),
    ({"mtu": 1500}, True),
    ({"match": {"driver": ["mlx5_core", "ice"], "name": "ens*"}, "dhcp4": True}, False),
    ({"match": {"macaddress": "b8:3f:d2:00:00:01"}}, False),
]


@pytest.mark.parametrize("definition, has_link", LINK_RULES)
def test_netplan_link_rules(tmp_path: Path, netplan: str, definition: dict, has_link: bool) -> None:
    """What the backend assumes about netplan's .link files, asked of netplan: which definitions
    get one, and its [Match] once the definition has an mtu."""
    (tmp_path / "etc/netplan").mkdir(parents=True)
    conf = tmp_path / "etc/netplan/50-x.yaml"
    conf.write_text(json.dumps({"network": {"version": 2, "ethernets": {"ens9": definition}}}))
    link = "run/systemd/network/10-netplan-ens9.link"
    assert (link in generate(netplan, tmp_path)) is has_link is np.has_link(definition)
    conf.write_text(json.dumps({"network": {"version": 2, "ethernets": {"ens9": dict(definition, mtu=9000)}}}))
    generated = generate(netplan, tmp_path)
    assert ["%s=%s" % kv for kv in sections(generated[link])["Match"]] == np.link_match("ens9", definition)
