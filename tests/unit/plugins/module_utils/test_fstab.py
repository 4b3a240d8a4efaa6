"""module_utils/_fstab.py: escaped fstab fields and the one line of ours among the admin's."""

from __future__ import annotations

from ansible_collections.aiinfra.datapath.plugins.module_utils import _fstab


def test_fields_with_blanks_are_octal_escaped_and_read_back() -> None:
    line = _fstab.fstab_entry("UUID=1", "/mnt/model cache", "xfs", ["noatime", "nofail"], 0, 2)
    assert line == "UUID=1 /mnt/model\\040cache xfs noatime,nofail 0 2"
    assert _fstab.fstab_fields(line) == ["UUID=1", "/mnt/model cache", "xfs", "noatime,nofail", "0", "2"]
    assert _fstab.unescape(_fstab.escape("a\tb\\c\nd")) == "a\tb\\c\nd"
    assert _fstab.fstab_fields("  # /mnt/x") is None and _fstab.fstab_fields("\n") is None


def test_replace_owned_keeps_every_other_line_byte_identical() -> None:
    text = "a 1\n# ours 0\nours 1\r\nb 2\nours 2\nc 3"

    def owned(raw: str) -> bool:
        return raw.startswith("ours")

    assert _fstab.replace_owned(text, "ours NEW", owned) == "a 1\n# ours 0\nours NEW\nb 2\nc 3"
    assert _fstab.replace_owned("a 1", "ours NEW", owned) == "a 1\nours NEW\n"
    assert _fstab.replace_owned(None, "ours NEW", owned) == "ours NEW\n"


def test_every_blank_and_backslash_is_escaped_so_a_line_has_six_fields() -> None:
    """util-linux mangle(): space, tab, newline and backslash; nothing else (tests/interop reads
    these lines back with findmnt and mounts them with libmount)."""
    for path in ("/mnt/a b", "/mnt/a\tb", "/mnt/a\nb", "/mnt/a\\b", "/mnt/a\\040b", "/mnt/ a\t\\\n"):
        line = _fstab.fstab_entry("hugetlbfs", path, "hugetlbfs", ["pagesize=2M"])
        assert len(line.split()) == 6 and "\n" not in line and "\t" not in line
        assert _fstab.fstab_fields(line)[1] == path
    assert _fstab.escape("/mnt/a\\040b") == "/mnt/a\\134040b", "a literal backslash is not taken for an escape"
    assert _fstab.escape("/mnt/#x,y=z") == "/mnt/#x,y=z"


def test_a_crlf_admin_line_stays_byte_identical(tmp_path) -> None:
    from ansible_collections.aiinfra.datapath.plugins.module_utils._fs import HostRoot

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/fstab").write_bytes(b"UUID=a / ext4 defaults 0 1\r\n")
    text = HostRoot(str(tmp_path)).read_raw("/etc/fstab")
    assert text == "UUID=a / ext4 defaults 0 1\r\n"
    assert _fstab.replace_owned(text, "ours", lambda raw: False).startswith("UUID=a / ext4 defaults 0 1\r\n")
