"""nfd_labels against a temporary /proc, /sys and /etc tree (``root``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nfd_labels as backend
from ansible_collections.aiinfra.datapath.plugins.module_utils import _nfd_rules as rules
from ansible_collections.aiinfra.datapath.plugins.modules import nfd_labels
from capability_results import diff_entry

FEATURES = "/etc/kubernetes/node-feature-discovery/features.d/aiinfra-datapath"


def make_root(tmp_path: Path, pools: dict[int, int] | None = None, mounted: bool = True,
              mtus: dict[str, int] | None = None) -> Path:
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "mnt/model-cache").mkdir(parents=True)
    lines = ["22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw"]
    if mounted:
        lines.append("40 22 7:3 / /mnt/model-cache rw,noatime shared:20 - xfs /dev/loop3p1 rw,attr2")
    (root / "proc/self/mountinfo").write_text("\n".join(lines) + "\n")
    for kib, count in (pools if pools is not None else {2048: 0, 1048576: 0}).items():
        pool = root / f"sys/kernel/mm/hugepages/hugepages-{kib}kB"
        pool.mkdir(parents=True)
        (pool / "nr_hugepages").write_text(f"{count}\n")
    for name, mtu in (mtus or {}).items():
        nic = root / f"sys/class/net/{name}"
        nic.mkdir(parents=True)
        (nic / "mtu").write_text(f"{mtu}\n")
    return root


def args(root: Path, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"root": str(root), "labels": {"aiinfra.io/team": "inference"},
                            "cache_mount": "/mnt/model-cache"}
    base.update(extra)
    return base


def features(root: Path) -> str:
    return (root / FEATURES.lstrip("/")).read_text()


def test_size_class_rounds_to_decimal_units() -> None:
    assert backend.size_class(3840755982336) == "4T"
    assert backend.size_class(7680000000000) == "8T"
    assert backend.size_class(960197124096) == "960G"
    assert backend.size_class(1063256064) == "1G"
    assert backend.size_class(505413632) == "505M"


def test_page_size_names_follow_kubernetes() -> None:
    assert backend.page_size_name(2048) == "2Mi"
    assert backend.page_size_name(1048576) == "1Gi"
    assert backend.page_size_name(64) == "64Ki"


@pytest.mark.parametrize("key", ["aiinfra.io/ok", "ok", "a.b-c/x_y.z", "x" * 63])
def test_valid_label_keys(key: str) -> None:
    assert rules.label_key_error(key) is None


@pytest.mark.parametrize("key", ["", "/x", "Upper.io/x", "a/" + "x" * 64, "a/-x", "a/x-", "a/b/c", "a b/x"])
def test_invalid_label_keys(key: str) -> None:
    assert rules.label_key_error(key) is not None


def test_label_values() -> None:
    assert rules.label_value_error("k", "") is None
    assert rules.label_value_error("k", "4T") is None
    assert rules.label_value_error("k", "x" * 63) is None
    assert "63" in rules.label_value_error("k", "x" * 64)
    assert rules.label_value_error("k", "a b") is not None
    assert rules.label_value_error("k", "-a") is not None


def test_writes_exact_file_with_derived_labels(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path, pools={2048: 512, 1048576: 0}, mtus={"eno1": 1500, "ens1f0np0": 9000})
    result = run_module(nfd_labels.main, args(
        root,
        interfaces=[{"name": "eno1", "match": {"name": "eno1"}, "fabric": "mgmt", "mtu": 1500},
                    {"name": "ens1f0np0", "match": {"name": "ens1f0np0"}, "fabric": "rdma", "mtu": 9000}],
        qos=[{"interface": "ens1f0np0", "fabric": "rdma"}],
        roce_ready={"rdma": True}))
    assert result["changed"] is True
    st = os.statvfs(root / "mnt/model-cache")
    size = backend.size_class(st.f_blocks * st.f_frsize)
    assert features(root) == (
        backend.HEADER
        + "# hugepages: 1Gi=0 2Mi=512\n"
        "aiinfra.io/fabric-mgmt-mtu=1500\n"
        "aiinfra.io/fabric-rdma-mtu=9000\n"
        "aiinfra.io/fabric-rdma-roce-ready=true\n"
        "aiinfra.io/hugepages-2Mi=true\n"
        "aiinfra.io/nvme-cache=true\n"
        f"aiinfra.io/nvme-cache-size={size}\n"
        "aiinfra.io/roce-ready=true\n"
        "aiinfra.io/team=inference\n")
    assert result["cache"]["mounted"] is True and result["cache"]["source"] == "/dev/loop3p1"
    assert result["hugepages"] == {"2Mi": 512, "1Gi": 0}
    assert result["hugepages_changed"] is True
    assert oct((root / FEATURES.lstrip("/")).stat().st_mode & 0o777) == "0o644"
    # No temporary dot-file is left behind.
    assert os.listdir(root / os.path.dirname(FEATURES).lstrip("/")) == ["aiinfra-datapath"]

    again = run_module(nfd_labels.main, args(
        root,
        interfaces=[{"name": "eno1", "fabric": "mgmt", "mtu": 1500},
                    {"name": "ens1f0np0", "fabric": "rdma", "mtu": 9000}],
        qos=[{"fabric": "rdma"}], roce_ready={"rdma": True}))
    assert again["changed"] is False
    assert again["hugepages_changed"] is False


def test_live_mtu_wins_and_smallest_counts(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path, mtus={"ens1f0np0": 9000, "ens1f1np1": 4200})
    result = run_module(nfd_labels.main, args(
        root, interfaces=[{"name": "ens1f0np0", "fabric": "rail0", "mtu": 9000},
                          {"name": "ens1f1np1", "fabric": "rail0", "mtu": 9000},
                          {"name": None, "match": {"pci": "0000:1a:00.0"}, "fabric": "rail1", "mtu": 9000}]))
    assert result["labels"]["aiinfra.io/fabric-rail0-mtu"] == "4200"
    assert result["labels"]["aiinfra.io/fabric-rail1-mtu"] == "9000"


def test_unmounted_cache_is_labelled_false_and_overrides_plan(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path, mounted=False)
    result = run_module(nfd_labels.main, args(root, labels={"aiinfra.io/nvme-cache": True}))
    assert result["labels"] == {"aiinfra.io/nvme-cache": "false"}
    assert any("nvme-cache" in w for w in result["warnings"])


def test_no_cache_no_pools_only_plan_labels(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = run_module(nfd_labels.main, args(root, cache_mount=None, labels={"aiinfra.io/roce-rails": 2}))
    assert result["labels"] == {"aiinfra.io/roce-rails": "2"}
    assert result["hugepages_changed"] is False


def test_check_mode_and_diff_touch_nothing(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = run_module(nfd_labels.main, args(root), check_mode=True, diff=True)
    assert result["changed"] is True
    assert diff_entry(result, FEATURES)["before"] == ""
    assert "aiinfra.io/team=inference\n" in diff_entry(result, FEATURES)["after"]
    assert not (root / "etc").exists()


def test_rewrites_changed_file_atomically(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    target = root / FEATURES.lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_text("stale=1\n")
    inode = target.stat().st_ino
    result = run_module(nfd_labels.main, args(root), diff=True)
    assert result["changed"] is True
    assert diff_entry(result, FEATURES)["before"] == "stale=1\n"
    assert "stale" not in features(root)
    assert target.stat().st_ino != inode  # replaced by rename, not rewritten in place


def test_hugepages_changed_follows_the_pools(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path, pools={2048: 0})
    first = run_module(nfd_labels.main, args(root))
    assert first["changed"] is True and first["hugepages_changed"] is False
    (root / "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").write_text("64\n")
    second = run_module(nfd_labels.main, args(root))
    assert second["hugepages_changed"] is True
    assert second["labels"]["aiinfra.io/hugepages-2Mi"] == "true"
    (root / "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").write_text("128\n")
    third = run_module(nfd_labels.main, args(root))
    assert third["changed"] is True and third["hugepages_changed"] is True
    assert run_module(nfd_labels.main, args(root))["hugepages_changed"] is False


def test_invalid_labels_fail_before_writing(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = run_module(nfd_labels.main, args(root, labels={"aiinfra.io/model": "x" * 64,
                                                            "Bad Key": "1"}), expect_failure=True)
    assert "aiinfra.io/model" in result["msg"] and "63" in result["msg"]
    assert "Bad Key" in result["msg"]
    assert not (root / "etc").exists()


def test_invalid_fabric_name_is_named(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = run_module(nfd_labels.main, args(root, interfaces=[{"name": None, "fabric": "rail 0", "mtu": 9000}]),
                        expect_failure=True)
    assert "fabric-rail 0-mtu" in result["msg"]


def test_roce_ready_false_and_unknown_fabric(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = run_module(nfd_labels.main, args(
        root, interfaces=[{"name": None, "fabric": "rail0", "mtu": 9000},
                          {"name": None, "fabric": "rail1", "mtu": 9000}],
        qos=[{"fabric": "rail0"}, {"fabric": "rail1"}], roce_ready={"rail0": True, "rail1": False, "x": True}))
    assert result["labels"]["aiinfra.io/fabric-rail0-roce-ready"] == "true"
    assert result["labels"]["aiinfra.io/fabric-rail1-roce-ready"] == "false"
    assert result["labels"]["aiinfra.io/roce-ready"] == "false"
    assert any("'x'" in w for w in result["warnings"])


def test_state_absent_removes_file(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    run_module(nfd_labels.main, args(root))
    result = run_module(nfd_labels.main, args(root, state="absent"))
    assert result["changed"] is True
    assert not (root / FEATURES.lstrip("/")).exists()
    assert run_module(nfd_labels.main, args(root, state="absent"))["changed"] is False


def test_bad_prefix_and_relative_path(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    assert "prefix" in run_module(nfd_labels.main, args(root, prefix="Not_DNS"), expect_failure=True)["msg"]
    assert "absolute" in run_module(nfd_labels.main, args(root, path="rel/file"), expect_failure=True)["msg"]


# node-feature-discovery's label rules (plugins/module_utils/_nfd_rules.py, ported from NFD v0.18.3):
# key, value, extra_label_ns -> None (nfd-master publishes it) or a word of the reason.
NFD_KEYS = [
    ("aiinfra.io/nvme-cache", "true", (), None),
    ("aiinfra.io/empty", "", (), None),
    ("example.com/a_b.c-d", "x" * 63, (), None),
    ("feature.node.kubernetes.io/gpu", "true", (), None),
    ("vendor.feature.node.kubernetes.io/x", "1", (), None),
    ("profile.node.kubernetes.io/p", "1", (), None),
    ("a.b.profile.node.kubernetes.io/p", "1", (), None),
    ("k8s.io/x", "1", (), None),                         # NFD denies only kubernetes.io and *.kubernetes.io
    ("xkubernetes.io/x", "1", (), None),                 # a suffix without the dot is another domain
    ("kubernetes.io/role", "gpu", (), "ignores labels in kubernetes.io"),
    ("node-role.kubernetes.io/gpu", "", (), "ignores labels in node-role.kubernetes.io"),
    ("topology.kubernetes.io/zone", "a", (), "ignores labels in topology.kubernetes.io"),
    ("feature.node.kubernetes.io.evil.kubernetes.io/x", "1", (), "ignores labels in"),
    ("node.kubernetes.io/x", "1", (), "ignores labels in node.kubernetes.io"),
    ("kubernetes.io/role", "gpu", ("kubernetes.io",), None),
    ("node-role.kubernetes.io/gpu", "", ("node-role.kubernetes.io",), None),
    ("node-role.kubernetes.io/gpu", "", ("kubernetes.io",), "ignores labels in"),   # exact, no wildcard
    ("gpu", "true", (), "has no prefix"),
    ("gpu", "true", ("feature.node.kubernetes.io",), "has no prefix"),
    ("Upper.io/x", "1", (), "DNS subdomain"),
    ("a/b/c", "1", (), "more than one '/'"),
    ("/x", "1", (), "empty prefix"),
    ("a/" + "x" * 64, "1", (), "1-63 characters"),
    ("aiinfra.io/-x", "1", (), "1-63 characters"),
    ("aiinfra.io/x", "x" * 64, (), "at most 63"),
    ("aiinfra.io/x", "a b", (), "at most 63"),
    ("aiinfra.io/x", "@local.feature.x", (), "at most 63"),   # '@' would be a dynamic value to nfd-master
    ("aiinfra.io/x", "-a", (), "at most 63"),
    # NFD v0.18.3's own cases: pkg/apis/nfd/validate/validate_test.go TestLabel and
    # pkg/nfd-master/nfd-master-internal_test.go TestFilterLabels (extraLabelNs example.io)
    ("feature.node.kubernetes.io/label", "true", (), None),
    ("vendor.io/label", "true", (), None),
    ("invalid-key:", "true", (), "1-63 characters"),
    ("kubernetes.io/label", "true", (), "ignores labels in kubernetes.io"),
    ("denied-key", "true", (), "has no prefix"),
    ("feature.node.kubernetes.io/label", "invalid value", (), "at most 63"),
    ("example.io/test", "test-val", ("example.io",), None),
    ("test-label", "test-value", ("example.io",), "has no prefix"),
    ("kubernetes.io/test-label", "test-value", ("example.io",), "ignores labels in kubernetes.io"),
    ("sub.ns.kubernetes.io/test-label", "test-value", ("example.io",), "ignores labels in sub.ns.kubernetes.io"),
]


@pytest.mark.parametrize("key,value,extra,reason", NFD_KEYS)
def test_nfd_label_rules(key: str, value: str, extra: tuple[str, ...], reason: str | None) -> None:
    error = rules.nfd_label_error(key, value, extra)
    if reason is None:
        assert error is None, error
    else:
        assert error is not None and reason in error, error
        assert repr(key) in error or key in error, "the message names the label"


def test_nfd_refusals_say_the_fix() -> None:
    error = rules.nfd_label_error("kubernetes.io/role", "gpu")
    assert "aiinfra.io/role" in error and "extra_label_ns" in error and "extraLabelNs" in error
    error = rules.nfd_label_error("gpu", "true")
    assert "feature.node.kubernetes.io/gpu" in error and "aiinfra.io/gpu" in error


def test_features_file_is_read_as_nfd_reads_it() -> None:
    labels, problems = rules.parse_features_file(
        "# comment\n  aiinfra.io/a=1  \nbare.io/flag\n\n# +no-label\n# +bogus=1\naiinfra.io/b=x=y\n")
    assert labels == {"aiinfra.io/a": "1", "bare.io/flag": "true", "aiinfra.io/b": "x=y"}
    assert len(problems) == 2 and "directive" in problems[0] and "unknown NFD directive" in problems[1]
    assert "65536" in rules.parse_features_file("a.io/x=1\n" * 8000)[1][0]


def test_labels_nfd_master_drops_are_refused_before_writing(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = run_module(nfd_labels.main, args(root, labels={"kubernetes.io/role": "gpu",
                                                            "node-role.kubernetes.io/gpu": "", "gpu": True}),
                        expect_failure=True)
    msg = result["msg"]
    assert "nothing was written" in msg and len(result["problems"]) == 3
    assert "'kubernetes.io/role'" in msg and "'node-role.kubernetes.io/gpu'" in msg and "'gpu' has no prefix" in msg
    assert not (root / "etc").exists()


def test_extra_label_ns_allows_what_the_cluster_allows(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = run_module(nfd_labels.main, args(root, labels={"node-role.kubernetes.io/gpu": ""},
                                              extra_label_ns=["node-role.kubernetes.io"]))
    assert result["changed"] is True and "node-role.kubernetes.io/gpu=\n" in features(root)
    bad = run_module(nfd_labels.main, args(root, extra_label_ns=["*.kubernetes.io"]), expect_failure=True)
    assert "extra_label_ns: '*.kubernetes.io' is not a label namespace" in bad["msg"]


def test_a_prefix_nfd_master_denies_is_refused(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    result = run_module(nfd_labels.main, args(root, prefix="node.kubernetes.io"), expect_failure=True)
    assert "prefix 'node.kubernetes.io'" in result["msg"] and "ignores labels" in result["msg"]
    assert "prefix" in run_module(nfd_labels.main, args(root, prefix="a/b"), expect_failure=True)["msg"]
    ok = run_module(nfd_labels.main, args(root, prefix="node.kubernetes.io", extra_label_ns=["node.kubernetes.io"]))
    assert "node.kubernetes.io/nvme-cache" in ok["labels"]


# --- topology labels and the NCCL hints file (node_topology's read of the node) --------------------

NCCL = "/etc/aiinfra-datapath/nccl.env"


def recorded_gpu_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The recorded ASUS ESC8000A-E12 (4 GPUs, 4 ConnectX ports; tests/fixtures/topology) under a root."""
    from netfakes import FakeRunner, use
    from topofakes import SysRoot, fixture, machine

    root = make_root(tmp_path)
    machine(SysRoot(root), "asus-esc8000a-e12")
    lspci, smi = "/usr/bin/lspci", "/usr/bin/nvidia-smi"

    def answer(argv: list[str]) -> tuple[int, str, str] | None:
        if argv == [lspci, "-vvv", "-D"]:
            return 0, fixture("asus-esc8000a-e12", "lspci-vvv.txt"), ""
        if argv == [smi, "topo", "-m"]:
            return 0, fixture("asus-esc8000a-e12", "nvidia-smi-topo-m.txt"), ""
        return (6, "", "(not recorded)") if argv[:1] == [smi] else None
    use(monkeypatch, FakeRunner([answer], which={"lspci": lspci, "nvidia-smi": smi}))
    return root


def test_topology_labels_and_nccl_env_on_a_recorded_gpu_node(
        run_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = recorded_gpu_node(tmp_path, monkeypatch)
    opts = args(root, cache_mount=None, topology=True, nccl_env=NCCL)
    checked = run_module(nfd_labels.main, opts, check_mode=True)
    assert checked["changed"] is True and not (root / NCCL.lstrip("/")).exists()
    result = run_module(nfd_labels.main, opts)
    assert result["changed"] is True
    labels = result["labels"]
    assert {k: v for k, v in labels.items() if "gpu" in k} == {
        "aiinfra.io/gpu-count": "4", "aiinfra.io/gpu-nic-affinity": "node",
        "aiinfra.io/gpudirect-rdma": "false", "aiinfra.io/gpudirect-storage": "false"}
    assert "aiinfra.io/gpu-nic-affinity=node\n" in features(root)
    hints = (root / NCCL.lstrip("/")).read_text()
    assert hints == result["nccl_env"] == checked["nccl_env"]
    assert 'NCCL_IB_HCA="=mlx5_0,mlx5_1,mlx5_2,mlx5_3"\n' in hints and "AIINFRA_GPU0_HCA=mlx5_0,mlx5_1\n" in hints
    assert [a["target"] for a in result["actions"]] == [FEATURES, NCCL]
    again = run_module(nfd_labels.main, opts)
    assert again["changed"] is False and again["actions"] == []
    # another prefix; without nccl_env the file is left alone
    other = run_module(nfd_labels.main, args(root, cache_mount=None, topology=True, prefix="example.com"))
    assert other["labels"]["example.com/gpu-count"] == "4" and other["nccl_env"] is None
    assert (root / NCCL.lstrip("/")).read_text() == hints
    # state absent removes both files
    gone = run_module(nfd_labels.main, dict(opts, state="absent"))
    assert gone["changed"] is True and not (root / NCCL.lstrip("/")).exists()


def test_a_node_without_gpus_gets_no_topology_labels_and_no_hints(
        run_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from netfakes import FakeRunner, use

    use(monkeypatch, FakeRunner([], which={}))
    root = make_root(tmp_path, mtus={"eth0": 1500})
    stale = root / NCCL.lstrip("/")
    stale.parent.mkdir(parents=True)
    stale.write_text("NCCL_IB_HCA=\"=mlx5_0\"\n")
    result = run_module(nfd_labels.main, args(root, topology=True, nccl_env=NCCL))
    assert not [k for k in result["labels"] if "gpu" in k]
    assert result["nccl_env"] is None and not stale.exists()  # the hints of an earlier topology go


def test_nccl_env_needs_topology_and_an_absolute_path(run_module: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    failed = run_module(nfd_labels.main, args(root, nccl_env=NCCL), expect_failure=True)
    assert "nccl_env needs topology: true" in failed["msg"]
    failed = run_module(nfd_labels.main, args(root, topology=True, nccl_env="nccl.env"), expect_failure=True)
    assert "nccl_env must be absolute" in failed["msg"]
