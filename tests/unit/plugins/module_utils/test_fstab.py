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
