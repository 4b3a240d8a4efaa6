"""One selector for every playbook (issue 38, point 1): datapath_hosts, else every host the spec plans.

The rules on plain data (plugins/plugin_utils/host_selection.py), then the playbooks through real
ansible-playbook on a platform team's own INI inventory (groups ``train`` and ``infer`` under
``gpu``, no ``gpu_nodes``): a selection that matches no host fails before anything runs, naming
``datapath_hosts``, instead of a run that does nothing and exits 0 (the playbooks' old default
``gpu_nodes`` matched nothing here, and ansible-playbook said "skipping: no hosts matched", rc 0).
No host is contacted: the check runs once, on the controller, and the other runs only list hosts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.host_selection import (
    OLD_SELECTORS,
    select,
    spec_host,
    spec_patterns,
)

REPO = Path(__file__).resolve().parents[2]
GROUPS = {"all": ["t1", "t2", "i1", "x1"], "ungrouped": ["x1"], "train": ["t1", "t2"], "infer": ["i1"],
          "gpu": ["t1", "t2", "i1"]}


# --------------------------------------------------------------------------- the rules
@pytest.mark.parametrize(("spec", "patterns", "missing"), [
    ({"profiles": [{"name": "train"}]}, ["train"], []),                          # a profile's own group
    ({"profiles": [{"name": "p", "groups": ["infer", "train"]}]}, ["infer", "train"], []),
    ({"profiles": [{"name": "gpu_nodes"}]}, [], ["gpu_nodes"]),                  # the old default group
    ({"profiles": [{"name": "all"}]}, ["all"], []),
    ({"profiles": [{"name": "base", "groups": ["all"]}, {"name": "train"}]}, ["all"], []),
    ({"profiles": [{"name": "train", "hosts": ["t1", "i1", "nowhere"]}]}, ["train", "i1"], []),
    ({"profiles": [], "hosts": {"x1": {}}}, ["x1"], []),                          # a host override
    ({"models": [{"name": "m", "groups": ["infer"]}]}, ["infer"], []),
    ({"profiles": [{"name": "train"}, {"name": "p2", "groups": ["train"]}]}, ["train"], []),  # once
    ({}, [], []),
    ("not a spec", [], []),
    ({"profiles": "broken", "hosts": ["x"]}, [], []),                            # read defensively
])
def test_spec_patterns(spec: object, patterns: list[str], missing: list[str]) -> None:
    assert spec_patterns(spec, GROUPS) == (patterns, missing)


def _lookup(values: dict[str, object]):
    return values.get


def test_datapath_hosts_wins_over_the_spec_and_the_old_name() -> None:
    sel = select(_lookup({"datapath_hosts": "gpu:!i1", "audit_hosts": "infer",
                          "datapath": {"profiles": [{"name": "train"}]}}), GROUPS, "audit_hosts")
    assert (sel.patterns, sel.source, sel.deprecated) == (["gpu:!i1"], "datapath_hosts", None)


def test_an_old_selector_still_works_and_is_deprecated() -> None:
    sel = select(_lookup({"audit_hosts": ["infer"], "datapath": {"profiles": [{"name": "train"}]}}),
                 GROUPS, "audit_hosts")
    assert (sel.patterns, sel.source) == (["infer"], "audit_hosts")
    assert "audit_hosts is deprecated; set datapath_hosts" in (sel.deprecated or "")
    # another playbook's old name is not read
    assert select(_lookup({"audit_hosts": "infer"}), GROUPS, "verify_hosts").source == "spec"
    assert set(OLD_SELECTORS) >= {"audit_hosts", "verify_hosts", "measure_hosts", "model_cache_hosts",
                                  "k8s_manifests_hosts", "pcie_acs_hosts", "datapath_reboot_hosts"}
    with pytest.raises(ValueError, match="unknown old selector"):
        select(_lookup({}), GROUPS, "site_hosts")


def test_nothing_selected_names_the_variable_and_the_missing_groups() -> None:
    sel = select(_lookup({"datapath": {"profiles": [{"name": "gpu_nodes"}]}}), GROUPS)
    assert sel.patterns == [] and sel.missing == ["gpu_nodes"]
    message = sel.empty_message()
    assert "gpu_nodes" in message and "datapath_hosts" in message and "groups: [all]" in message
    undefined = select(_lookup({}), GROUPS).empty_message()
    assert undefined.startswith("the cluster spec `datapath` is not defined for this inventory")
    given = select(_lookup({"datapath_hosts": "nosuchgroup"}), GROUPS).empty_message()
    assert given.startswith("datapath_hosts (nosuchgroup) matches no host") and "-e datapath_hosts=" in given


def test_the_spec_is_read_from_a_host_that_has_it() -> None:
    holders = {"i1"}
    assert spec_host(GROUPS, holders.__contains__) == "i1"   # first host of a group (group_vars/infer)
    assert spec_host(GROUPS, lambda host: True) == "t1"      # group_vars/all: the inventory's first host
    assert spec_host(GROUPS, lambda host: False) is None


# --------------------------------------------------------------------------- the playbooks
INVENTORY = """\
[train]
t1
t2

[infer]
i1

[gpu:children]
train
infer
"""


def _inventory(tmp_path: Path, spec: str) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.ini").write_text(INVENTORY)
    (inv / "group_vars" / "all" / "datapath.yml").write_text(spec)
    return inv


def _playbook(tmp_path: Path, inv: Path, playbook: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_DEPRECATION_WARNINGS="true", ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inv / "hosts.ini"),
         "-e", "ansible_python_interpreter=" + sys.executable, str(REPO / "playbooks" / playbook), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


SPEC_OLD_DEFAULT = "datapath:\n  version: 1\n  profiles:\n    - name: gpu_nodes\n"
SPEC_TRAIN = "datapath:\n  version: 1\n  profiles:\n    - name: training\n      groups: [train]\n"


@pytest.mark.parametrize("playbook", ["site.yml", "audit.yml", "verify.yml", "measure.yml", "model_cache.yml",
                                      "k8s_manifests.yml", "pcie_acs.yml", "rolling_reboot.yml"])
def test_a_playbook_that_would_match_no_host_fails_naming_datapath_hosts(tmp_path: Path, playbook: str) -> None:
    proc = _playbook(tmp_path, _inventory(tmp_path, SPEC_OLD_DEFAULT), playbook)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "the cluster spec plans no host of this inventory" in out, out[-3000:]
    assert "gpu_nodes" in out and "datapath_hosts" in out
    assert "skipping: no hosts matched" not in out


def test_default_selection_is_what_the_spec_plans(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, SPEC_TRAIN)
    # run alone, the check prints what it selected and why
    alone = _playbook(tmp_path, inv, "hosts.yml")
    assert alone.returncode == 0, alone.stdout[-3000:]
    assert "2 host(s) from every host the spec plans (train;" in alone.stdout
    # --list-hosts templates a play's hosts before any play ran (no hostvars): said, not guessed
    listed = _playbook(tmp_path, inv, "site.yml", "--list-hosts")
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-2000:]
    assert "run `ansible-playbook -i INVENTORY aiinfra.datapath.hosts` to see them" in " ".join(
        (listed.stdout + listed.stderr).split())
    assert "hosts (0)" in listed.stdout.split("Data path of GPU nodes")[1]
    checked = _playbook(tmp_path, inv, "site.yml", "--syntax-check")   # no hosts needed, nothing said
    assert checked.returncode == 0 and "datapath_hosts" not in checked.stdout + checked.stderr
    given = _playbook(tmp_path, inv, "site.yml", "--list-hosts", "-e", "datapath_hosts=train")
    assert given.returncode == 0, given.stdout[-3000:] + given.stderr[-2000:]
    main_play = given.stdout.split("Data path of GPU nodes")[1]
    assert "pattern: ['train']" in main_play and "t1" in main_play and "i1" not in main_play


def test_datapath_hosts_and_limit(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, SPEC_TRAIN)
    listed = _playbook(tmp_path, inv, "audit.yml", "--list-hosts", "-e", "datapath_hosts=infer")
    assert listed.returncode == 0, listed.stdout[-3000:]
    assert "pattern: ['infer']" in listed.stdout.split("Audit")[-1]
    none = _playbook(tmp_path, inv, "hosts.yml", "-e", "datapath_hosts=nosuchgroup")
    assert none.returncode != 0 and "datapath_hosts (nosuchgroup) matches no host" in none.stdout
    # the spec plans t1 and t2; --limit i1 leaves none of them
    limited = _playbook(tmp_path, inv, "verify.yml", "--limit", "i1")
    assert limited.returncode != 0, limited.stdout[-3000:]
    assert "none of them in --limit i1" in limited.stdout
    ok = _playbook(tmp_path, inv, "hosts.yml", "--limit", "t2")
    assert ok.returncode == 0 and "1 host(s) of 2 (--limit)" in ok.stdout, ok.stdout[-3000:]


def test_the_old_selector_works_with_a_deprecation(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, SPEC_TRAIN)
    proc = _playbook(tmp_path, inv, "hosts.yml", "-e", "datapath_hosts_old=verify_hosts", "-e", "verify_hosts=infer")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 host(s) from verify_hosts (deprecated): infer" in proc.stdout
    assert "verify_hosts is deprecated; set datapath_hosts" in proc.stdout + proc.stderr


# --------------------------------------------------------------------------- profile `all`
def test_a_profile_named_all_applies_to_every_host() -> None:
    from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import api

    spec = {"version": 1, "builtin_profile": "none",
            "profiles": [{"name": "all", "sysctl": {"vm.swappiness": 10}},
                         {"name": "base", "groups": ["all"], "sysctl": {"vm.max_map_count": 262144}},
                         {"name": "train", "sysctl": {"vm.swappiness": 1}}]}
    # group_names never lists `all`; before, neither profile applied to any host
    lone = api.node_plan(spec, "x1", [])
    assert lone["sysctl_profile"]["keys"].keys() == {"vm.swappiness", "vm.max_map_count"}
    assert lone["sysctl_profile"]["keys"]["vm.swappiness"]["value"] == "10"
    trainer = api.node_plan(spec, "t1", ["train"])  # later profiles win, as for any group
    assert trainer["sysctl_profile"]["keys"]["vm.swappiness"]["value"] == "1"
    assert api.planner(spec).plan("t2", ["train"])["sysctl_profile"]["keys"]["vm.max_map_count"]["value"] == "262144"


def test_an_invalid_spec_that_plans_nothing_selects_every_host() -> None:
    # each host's run then reports the errors before anything changes, and records the failed converge
    sel = select(_lookup({"datapath": {"version": 999}}), GROUPS, spec_errors=lambda spec: 2)
    assert (sel.patterns, sel.source) == (["all"], "spec") and "2 error(s)" in sel.why
    valid = select(_lookup({"datapath": {"version": 1}}), GROUPS, spec_errors=lambda spec: 0)
    assert valid.patterns == [] and "plans no host" in valid.empty_message()
