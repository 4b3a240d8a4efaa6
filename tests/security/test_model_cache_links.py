"""Class 1 - the model cache never follows a link, never trusts a tree others can write, and finds
swapped bytes.

The attacker is a tenant that can write below the cache (a pod given the models directory
read-write, a user owning a directory on the way) and wants the module, which runs as root, to
write a file of their choosing elsewhere (/etc/cron.d ...), or to keep serving bytes they swapped.
Each attack is set up with real files and links in a temporary tree and run through the module's
``main()``; the "victim" files stand for the node's own files outside the cache.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from ansible_collections.aiinfra.datapath.plugins.modules import model_cache

MiB = 1 << 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Setup:
    def __init__(self, tmp: Path, run_module) -> None:
        self.tmp = tmp
        self.mount = tmp / "mnt"
        self.mount.mkdir(mode=0o755)
        self.root = self.mount / "models"
        self.victim = tmp / "etc"            # the node's own files, outside the cache
        self.victim.mkdir()
        (self.victim / "shadow").write_text("root:$6$do-not-touch:19000:0:99999:7:::\n")
        self.data = os.urandom(MiB + 5)
        src = tmp / "src"
        src.mkdir()
        (src / "w.bin").write_bytes(self.data)
        self.models = [dict(name="m", version="1", source=str(src),
                            files=[dict(path="w.bin", sha256=sha(self.data), size=len(self.data))])]
        self.run_module = run_module

    def run(self, expect_failure=False, **extra) -> dict:
        args = dict(cache_dir=str(self.root), models=self.models, lock_file=str(self.tmp / "lock"))
        args.update(extra)
        return self.run_module(model_cache.main, args, expect_failure=expect_failure)

    def victim_state(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted(self.victim.iterdir())}


@pytest.fixture
def cache(tmp_path: Path, run_module) -> Setup:
    return Setup(tmp_path, run_module)


def test_a_staging_link_does_not_send_root_writes_elsewhere(cache: Setup) -> None:
    cache.root.mkdir(mode=0o755)
    (cache.root / ".staging").symlink_to(cache.victim)   # the tenant's link where .staging belongs
    before = cache.victim_state()
    result = cache.run(expect_failure=True)
    assert "symbolic link" in result["msg"] and ".staging" in result["msg"], result["msg"]
    assert cache.victim_state() == before and not (cache.victim / "m").exists()


def test_a_planted_part_link_is_removed_never_written_through(cache: Setup) -> None:
    part_dir = cache.root / ".staging" / "m" / "1"
    part_dir.mkdir(parents=True)
    os.chmod(cache.root / ".staging", 0o700)
    (part_dir / "w.bin.part").symlink_to(cache.victim / "shadow")   # "resume" into /etc/shadow
    before = cache.victim_state()
    result = cache.run()
    assert result["models"][0]["status"] == "published"
    assert cache.victim_state() == before, "a root write went through the .part link"
    assert (cache.root / "m" / "1" / "w.bin").read_bytes() == cache.data
    assert any("not a regular file" in w for w in result.get("warnings", [])), result.get("warnings")


def test_a_model_directory_link_does_not_carry_the_pointer_or_the_files_away(cache: Setup) -> None:
    cache.root.mkdir(mode=0o755)
    (cache.root / "m").symlink_to(cache.victim)   # <cache>/m -> /etc: "current" and "1/" would land in /etc
    before = cache.victim_state()
    result = cache.run(expect_failure=True)
    assert "symbolic link" in result["msg"], result["msg"]
    assert cache.victim_state() == before


def test_a_published_file_swapped_for_a_link_is_replaced_not_followed(cache: Setup) -> None:
    cache.run()
    published = cache.root / "m" / "1" / "w.bin"
    published.unlink()
    published.symlink_to(cache.victim / "shadow")
    before = cache.victim_state()
    result = cache.run(verify_existing="sha256")
    assert result["changed"] is True and result["models"][0]["status"] == "published"
    assert not published.is_symlink() and published.read_bytes() == cache.data
    assert cache.victim_state() == before


@pytest.mark.parametrize("where", ["cache", "below", "above"])
def test_a_tree_others_can_write_is_refused(cache: Setup, where: str) -> None:
    cache.run()
    target = {"cache": cache.root, "below": cache.root / "m", "above": cache.mount}[where]
    os.chmod(target, 0o777)
    try:
        result = cache.run(expect_failure=True, verify_existing="sha256")
    finally:
        os.chmod(target, 0o755)
    assert "writable by group or others" in result["msg"] and str(target) in result["msg"], result["msg"]


def test_a_staging_directory_is_private(cache: Setup) -> None:
    files = cache.models[0]["files"]
    files.append(dict(path="big.bin", sha256="0" * 64, size=3))   # fails: its partial stays staged
    (cache.tmp / "src" / "big.bin").write_bytes(b"abc")
    cache.run(expect_failure=True)
    assert oct((cache.root / ".staging").stat().st_mode & 0o777) == "0o700"


def test_bytes_swapped_for_others_of_the_same_size_are_found_by_the_cheap_check(cache: Setup) -> None:
    cache.run()
    published = cache.root / "m" / "1" / "w.bin"
    st = published.stat()
    evil = bytearray(cache.data)
    evil[4096:4100] = b"EVIL"
    with open(published, "r+b") as handle:     # same inode, same size ...
        handle.write(evil)
    os.utime(published, ns=(st.st_atime_ns, st.st_mtime_ns))   # ... and the old mtime (ctime cannot be set back)
    result = cache.run()                     # verify_existing: size, the default
    assert result["changed"] is True, "swapped bytes were reported present"
    assert [a["kind"] for a in result["actions"]] == ["replace", "fetch"]
    assert published.read_bytes() == cache.data


def test_pods_never_get_the_models_directory_read_write() -> None:
    from ansible.errors import AnsibleFilterError
    from ansible_collections.aiinfra.datapath.plugins.filter.k8s import local_volume_manifests
    from ansible_collections.aiinfra.datapath.plugins.filter.kserve import kserve_manifests

    plan = {"nvme_layout": {"mount": {"path": "/mnt/model-cache"}, "filesystem": {"type": "xfs"}},
            "nfd_labels": {"local_volume_class": "local-nvme"},
            "model_cache": {"cache_dir": "/mnt/model-cache/models", "models": []}}
    hostvars = {"gpu-01": {"datapath_plan": plan, "k8s_manifests_pv_capacity": "100Gi"}}
    [pv] = [e["object"] for e in local_volume_manifests(["gpu-01"], hostvars, ["pv"])]
    path = pv["spec"]["local"]["path"]
    assert path == "/mnt/model-cache/volume" and not "/mnt/model-cache/models".startswith(path)
    for bad in ("models", "models/llama", "."):
        with pytest.raises(AnsibleFilterError):
            local_volume_manifests(["gpu-01"], hostvars, ["pv"], pv_subdir=bad)
    with pytest.raises(AnsibleFilterError, match="static provisioner"):
        local_volume_manifests(["gpu-01"], hostvars, ["storageclass", "configmap"])
    with pytest.raises(AnsibleFilterError, match="model cache directory"):
        kserve_manifests(["gpu-01"], hostvars, subdir="models")
