"""Where each part of a spec came from (file and line), and what YAML did to it on the way.

Both inventory readers (the fast one in loader.py and ansible-core's) hand over plain data: the
lines are gone and a duplicate key has already lost its first value. This module reads the YAML
again, as nodes with their marks (libyaml's composer, the same parser), only where it is needed:

* :func:`collecting` gathers :class:`YamlNote` objects while an inventory or spec file is read:
  duplicate mapping keys (the fast reader notices them while it builds and hands such a file to
  :func:`scan`; ansible-core's reader warns "Found duplicate mapping key" on a value that carries
  its origin); each note has the file and line of both keys;
* :func:`spec_sources` finds the file that holds a ``datapath`` value and maps every path of it to
  its line (:class:`SourceMap`), and notes the YAML 1.1 boolean words (``on``, ``off``, ``yes``,
  ``no``) in it. Nothing is computed for a valid spec without warnings.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

try:
    import yaml
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    _Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
    yaml = None

Path = tuple[Any, ...]
BOOL_WORDS = frozenset({"yes", "no", "on", "off", "y", "n"})
"""Plain scalars YAML 1.1 (PyYAML, ansible-core) reads as booleans although they are not true/false."""
_INT_TAG = "tag:yaml.org,2002:int"
_BOOL_TAG = "tag:yaml.org,2002:bool"
MAX_SCAN_DEPTH = 64


@dataclass(frozen=True)
class YamlNote:
    """Something YAML did silently: ``kind`` duplicate-key (``detail``: the key; ``first_line``: where
    it was first given) or bool-word (``detail``: the word as written)."""

    kind: str
    file: str
    line: int
    path: Path = ()
    detail: str = ""
    first_line: int | None = None


_NOTES: ContextVar[list[YamlNote] | None] = ContextVar("aiinfra_datapath_yaml_notes", default=None)


@contextlib.contextmanager
def collecting() -> Iterator[list[YamlNote]]:
    """Collect the notes of every file read inside the block (duplicates are noted once per place)."""
    notes: list[YamlNote] = []
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


def active() -> bool:
    return _NOTES.get() is not None


def add(note: YamlNote) -> None:
    notes = _NOTES.get()
    if notes is not None and note not in notes:
        notes.append(note)


def _key(node: Any) -> Any:
    if isinstance(node, ScalarNode):
        if node.tag == _INT_TAG:
            try:
                return int(node.value.replace("_", ""), 0) if node.value[:2] in ("0x", "0o") else int(node.value)
            except ValueError:
                return node.value
        return node.value
    return f"<{type(node).__name__}>"


def _walk(node: Any, path: Path, lines: dict[Path, int], notes: list[YamlNote], name: str,
          seen: set[int], depth: int) -> None:
    if depth > MAX_SCAN_DEPTH or id(node) in seen:
        return
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, MappingNode):
        seen.add(id(node))
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = _key(key_node)
            if key == "<<":  # a merge key: its mapping's keys count as given here
                continue
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int)):
                if key in first:
                    notes.append(YamlNote("duplicate-key", name, line, path, str(key), first[key]))
                first.setdefault(key, line)
            lines[(*path, key)] = line
            _walk(value_node, (*path, key), lines, notes, name, seen, depth + 1)
            lines[(*path, key)] = line
        seen.discard(id(node))
    elif isinstance(node, SequenceNode):
        seen.add(id(node))
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, notes, name, seen, depth + 1)
        seen.discard(id(node))
    elif isinstance(node, ScalarNode) and node.tag == _BOOL_TAG and not node.style \
            and node.value.lower() in BOOL_WORDS:
        notes.append(YamlNote("bool-word", name, node.start_mark.line + 1, path, node.value))


def scan(text: str, name: str) -> tuple[dict[Path, int], list[YamlNote]]:
    """``({path: line}, notes)`` of the first document of ``text``; empty when it cannot be composed
    (the reader reports why)."""
    lines: dict[Path, int] = {}
    notes: list[YamlNote] = []
    if yaml is None:
        return lines, notes
    try:
        node = yaml.compose(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError, ValueError):
        return lines, notes
    if node is not None:
        _walk(node, (), lines, notes, name, set(), 0)
    return lines, notes


def note_duplicates(text: str, name: str) -> None:
    """Add the duplicate keys of ``text`` to the notes being collected."""
    if active():
        for item in scan(text, name)[1]:
            if item.kind == "duplicate-key":
                add(item)


def from_ansible_warning(msg: str, obj: Any) -> bool:
    """ansible-core's "Found duplicate mapping key 'k'." warning as a note (its ``obj`` is the second
    key, tagged with its origin); True when it was one."""
    if not active() or not re.match(r"Found duplicate mapping key (.+)\.$", msg or ""):
        return False
    try:
        from ansible._internal._datatag._tags import Origin
        origin = Origin.get_tag(obj)
    except Exception:  # another ansible-core: keep the warning as ansible-core printed it
        return False
    if origin is None or not origin.path:
        return False
    key, line = str(obj), origin.line_num or 0
    for item in _scan_file(origin.path)[1]:  # the same file again, for the path and the first line
        if item.kind == "duplicate-key" and item.detail == key and item.line == line:
            add(item)
            return True
    add(YamlNote("duplicate-key", origin.path, line, (), key))
    return True


def _scan_file(path: str) -> tuple[dict[Path, int], list[YamlNote]]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(16 * 1024 * 1024 + 1)
    except (OSError, UnicodeDecodeError):
        return {}, []
    return scan(text, path)


# --------------------------------------------------------------------------- paths of a spec
_PART = re.compile(r'\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]|\[([^\]]*)\]')


def parse_path(text: str, root: str = "datapath") -> Path | None:
    """``datapath.profiles[0].sysctl["vm.swappiness"]`` -> ``("profiles", 0, "sysctl", "vm.swappiness")``;
    None for a path outside the spec (``host``, ``datapath_backend``)."""
    if text != root and not text.startswith((root + ".", root + "[")):
        return None
    parts: list[Any] = []
    rest = text[len(root):]
    pos = 0
    while pos < len(rest):
        match = _PART.match(rest, pos)
        if not match:
            break
        name, index, quoted, other = match.groups()
        parts.append(name if name is not None else int(index) if index is not None
                     else quoted if quoted is not None else other)
        pos = match.end()
    return tuple(parts)


_MAYBE_BOOL = re.compile(r"(?i)(?:^|[\s:\[{,-])(?:yes|no|on|off|y|n)\s*(?:$|[,\]}#])", re.M)


@dataclass
class SourceMap:
    """The lines of one ``datapath`` value in the file that holds it (scanned when first asked)."""

    file: str
    text: str = ""
    _scanned: tuple[dict[Path, int], list[YamlNote]] | None = field(default=None, repr=False)

    def _scan(self) -> tuple[dict[Path, int], list[YamlNote]]:
        if self._scanned is None:
            lines, notes = scan(self.text, self.file)
            sub = {p[1:]: line for p, line in lines.items() if p and p[0] == "datapath"}
            kept = [YamlNote(n.kind, n.file, n.line, n.path[1:], n.detail, n.first_line) for n in notes
                    if n.kind == "bool-word" and n.path[:1] == ("datapath",)]
            self._scanned = (sub, kept)
        return self._scanned

    @property
    def lines(self) -> dict[Path, int]:
        """Spec path (below ``datapath``) -> line."""
        return self._scan()[0]

    @property
    def notes(self) -> list[YamlNote]:
        """The bool-word notes of the spec, with spec paths (none scanned when the text has no such word)."""
        return self._scan()[1] if _MAYBE_BOOL.search(self.text) else []

    def line_of(self, path: Path | None) -> int | None:
        """The line of ``path``, or of the nearest part above it that the file has."""
        if path is None:
            return None
        for end in range(len(path), -1, -1):
            found = self.lines.get(path[:end])
            if found is not None:
                return found
            if end and isinstance(path[end - 1], int):  # a digit-string key in YAML: {0: 4} vs {"0": 4}
                found = self.lines.get((*path[:end - 1], str(path[end - 1])))
                if found is not None:
                    return found
        return None

    def locate(self, path_text: str) -> tuple[str, int | None]:
        return self.file, self.line_of(parse_path(path_text))


_HAS_SPEC = re.compile(r"^datapath\s*:", re.M)


def candidate_files(target: str) -> list[str]:
    """The YAML files of an inventory (or the spec file itself) that may define ``datapath``, in
    ansible-core's order of precedence, lowest first: the inventory file(s), group_vars, host_vars."""
    if os.path.isfile(target):
        base = os.path.dirname(target) or "."
        out = [target]
    else:
        base = target
        out = [os.path.join(target, n) for n in sorted(os.listdir(target))
               if n.endswith((".yml", ".yaml")) and os.path.isfile(os.path.join(target, n))]
    for sub in ("group_vars", "host_vars"):
        root = os.path.join(base, sub)
        for walk_base, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            out.extend(os.path.join(walk_base, n) for n in sorted(files)
                       if n.endswith((".yml", ".yaml")) and not n.startswith("."))
    return out


def spec_sources(target: str, specs: list[Any], load: Any) -> list[SourceMap | None]:
    """For each value in ``specs`` (the `datapath` of a vars file or of an inventory's hosts) the map
    of the file that defines it: the last candidate file whose top-level ``datapath`` equals it
    (``load``: the loader's YAML reader). None where no file does (inline INI variables, Jinja)."""
    found: list[SourceMap | None] = [None] * len(specs)
    try:
        files = candidate_files(target)
    except OSError:
        return found
    texts: list[tuple[str, str]] = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(16 * 1024 * 1024 + 1)
        except (OSError, UnicodeDecodeError):
            continue
        if _HAS_SPEC.search(text):
            texts.append((path, text))
    if len(texts) == 1 and len(specs) == 1:  # the common case: one file defines the one spec (no second read)
        return [SourceMap(texts[0][0], texts[0][1])]
    for path, text in texts:
        try:
            data = load(text, path)
        except Exception:  # the reader already said what is wrong with it, or never read it
            continue
        if not isinstance(data, Mapping) or "datapath" not in data:
            continue
        value = data["datapath"]
        for index, spec in enumerate(specs):
            if spec is value or spec == value:
                found[index] = SourceMap(path, text)
    return found


__all__ = ["BOOL_WORDS", "SourceMap", "YamlNote", "collecting", "note_duplicates", "parse_path", "scan",
           "spec_sources"]
