"""Deterministic hostile variants of recorded tool output (the reliability parser fuzz).

``variants(text, seed, count)`` yields ``(description, mutated_text)`` pairs: the recorded
output truncated, with lines dropped, duplicated, shuffled or split, numbers replaced by
absurd ones (negative, 2**64, 5000 digits, ``nan``, Unicode digits), tokens replaced by
hostile strings (NUL, shell metacharacters, path traversal, ANSI escapes, BOM, RTL override),
delimiters removed, CRLF line ends, bytes flipped, or spliced with another tool's output.
``json_variants`` does the same one level up for JSON documents: a node replaced by a value of
another type or an absurd value, a key deleted, a list turned into an object, deep nesting.

Every variant comes from ``random.Random(seed)``: the same seed gives the same inputs on every
run, so a failure is reproducible from its description and seed alone. Variants are unique
within one call (a mutation that gives back a text already tried is drawn again).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

HOSTILE_NUMBERS = ["-1", "0", "-0", "4294967296", "18446744073709551616", "-9223372036854775809",
                   "9" * 5000, "99999999999999999999999999999999", "nan", "NaN", "inf", "-inf", "1e309",
                   "0x1F", "0xZZ", "1.5", "1,5", "1_000", "\u0663\u0664", "\u00b2", "\uff19", "", " ", "+7",
                   "007", "1e3", "08", "-", "."]
HOSTILE_TOKENS = ["", "\x00", "\x00\x00\x00", "null", "None", "true", "N/A", "(null)", "<access denied>",
                  "$(reboot)", "`id`", "; rm -rf /", "|cat", "&&", "../../../etc/shadow", "/", "*",
                  "\u00e4" * 60, "\u202e", "\ufeff", "\udcff", "A" * 10000, "%s%n%x", "{", "}", "[", "]", ":",
                  "=", ",", '"', "'", "\\", "<", ">", "&", "\t", "\r", "\x1b[4m", "\x1b[0m", "\u2028",
                  "\x7f", "#", "--", "-rf", " - ", "::", "0000:00:00.0", "GPU0", "NIC0", "x16", "16GT/s"]
HOSTILE_LINES = ["", "\x00" * 16, "A" * 20000, ":" * 50, "= = =", "{}", "[]", "<?xml version='1.0'?>",
                 "# comment", "[section", "]", "key", "key:", ":value", "key=", "=value", "\t\t\t",
                 "\u00e4\u00f6\u00fc: \u00df", "\x1b[4mGPU0\x1b[0m", "Legend:", "GPU0 GPU1 NIC0",
                 "GPU0\tX\tSYS\tSYS", "NIC0: mlx5_0", "00:00.0 Bridge", "\tCapabilities: <access denied>",
                 "prio:0 dscp:", "tc: 9 ratelimit: x, tsa: ets, bw: 999%", "priority:  99",
                 "enabled   1 1 1 1 1 1 1 1 1 1 1", "buffer    x y z", "ARRAY /dev/md0 UUID=",
                 "Disk /dev/x: 99999999999999999999999999999 sectors", "   1   x   y   z   0700  ",
                 "Tcp: A B C", "Tcp: 1 2", "Tcp: x y", "firmware-version: (", "firmware-version: 1.2.3 (",
                 "rx_bytes: -5", "rx_bytes: 99999999999999999999999999999999999999", "DEVNAME=",
                 "TYPE=ext4", "PTTYPE=gpt", "MemTotal: nan kB", "Hugepagesize: 0 kB", "include=../../../etc",
                 "[main]", "[sysctl]", "net.core.somaxconn = 1; reboot", "\\", "'''", '"""']
HOSTILE_JSON: list[Any] = [None, True, False, 0, -1, 2**64, -(2**63) - 1, 10**30, 1.5, 1e308, -1e308,
                           "", "x", "nan", "-1", "\x00", "../../etc/shadow", "$(reboot)", "A" * 5000,
                           [], {}, [None], [[]], [{}], {"": None}, {"x": [1, {"y": None}]}, [1, "a", None, [2]],
                           "\u202e", {"0": 0}]
_NUMBER = re.compile(r"\d+")
_TOKEN = re.compile(r"\S+")


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _pick_line(rng: random.Random, lines: list[str]) -> int:
    return rng.randrange(len(lines)) if lines else 0


def truncate(rng: random.Random, text: str) -> tuple[str, str]:
    cut = rng.randrange(len(text) + 1) if text else 0
    return "truncated at byte %d" % cut, text[:cut]


def truncate_line(rng: random.Random, text: str) -> tuple[str, str]:
    lines = _lines(text)
    i = _pick_line(rng, lines)
    line = lines[i]
    cut = rng.randrange(len(line) + 1) if line else 0
    return "line %d cut at column %d, rest dropped" % (i + 1, cut), "\n".join(lines[:i] + [line[:cut]])


def drop_lines(rng: random.Random, text: str) -> tuple[str, str]:
    lines = _lines(text)
    n = min(len(lines), rng.choice((1, 1, 2, 5, 20)))
    drop = set(rng.sample(range(len(lines)), n)) if lines else set()
    return "%d line(s) dropped" % n, "\n".join(line for i, line in enumerate(lines) if i not in drop)


def duplicate_line(rng: random.Random, text: str) -> tuple[str, str]:
    lines = _lines(text)
    i = _pick_line(rng, lines)
    times = rng.choice((2, 3, 50, 2000))
    if not lines:
        return "empty", ""
    return "line %d repeated %dx" % (i + 1, times), "\n".join(lines[:i] + [lines[i]] * times + lines[i + 1:])


def shuffle_lines(rng: random.Random, text: str) -> tuple[str, str]:
    lines = _lines(text)
    rng.shuffle(lines)
    return "lines shuffled", "\n".join(lines)


def swap_lines(rng: random.Random, text: str) -> tuple[str, str]:
    lines = _lines(text)
    if len(lines) < 2:
        return "unchanged", text
    i, j = rng.sample(range(len(lines)), 2)
    lines[i], lines[j] = lines[j], lines[i]
    return "lines %d and %d swapped" % (i + 1, j + 1), "\n".join(lines)


def replace_number(rng: random.Random, text: str) -> tuple[str, str]:
    found = list(_NUMBER.finditer(text))
    if not found:
        return insert_line(rng, text)
    m = rng.choice(found)
    new = rng.choice(HOSTILE_NUMBERS)
    return "number %r at byte %d -> %r" % (m.group(0), m.start(), new[:20]), text[:m.start()] + new + text[m.end():]


def replace_all_numbers(rng: random.Random, text: str) -> tuple[str, str]:
    new = rng.choice(HOSTILE_NUMBERS)
    return "every number -> %r" % new[:20], _NUMBER.sub(lambda m: new, text)


def replace_token(rng: random.Random, text: str) -> tuple[str, str]:
    found = list(_TOKEN.finditer(text))
    if not found:
        return insert_line(rng, text)
    m = rng.choice(found)
    new = rng.choice(HOSTILE_TOKENS)
    return "token %r at byte %d -> %r" % (m.group(0)[:20], m.start(), new[:20]), text[:m.start()] + new + text[m.end():]


def insert_char(rng: random.Random, text: str) -> tuple[str, str]:
    at = rng.randrange(len(text) + 1) if text else 0
    new = rng.choice(HOSTILE_TOKENS)
    return "%r inserted at byte %d" % (new[:20], at), text[:at] + new + text[at:]


def delete_delimiter(rng: random.Random, text: str) -> tuple[str, str]:
    lines = _lines(text)
    i = _pick_line(rng, lines)
    delim = rng.choice((":", ",", "=", " ", "\t", ".", "-", "(", ")", "/", '"', "{", "}", "[", "]"))
    if lines:
        lines[i] = lines[i].replace(delim, "")
    return "every %r removed from line %d" % (delim, i + 1), "\n".join(lines)


def delete_delimiter_everywhere(rng: random.Random, text: str) -> tuple[str, str]:
    delim = rng.choice((":", ",", "=", ".", "-", '"', "x", "#"))
    return "every %r removed" % delim, text.replace(delim, "")


def insert_line(rng: random.Random, text: str) -> tuple[str, str]:
    lines = _lines(text)
    at = rng.randrange(len(lines) + 1)
    new = rng.choice(HOSTILE_LINES)
    return "line %r inserted before line %d" % (new[:30], at + 1), "\n".join(lines[:at] + [new] + lines[at:])


def indent_change(rng: random.Random, text: str) -> tuple[str, str]:
    how = rng.choice(("strip", "tabs", "deep"))
    lines = _lines(text)
    if how == "strip":
        lines = [line.lstrip() for line in lines]
    elif how == "tabs":
        lines = [line.replace("  ", "\t") for line in lines]
    else:
        lines = ["        " + line for line in lines]
    return "indentation: %s" % how, "\n".join(lines)


def line_ends(rng: random.Random, text: str) -> tuple[str, str]:
    how = rng.choice(("\r\n", "\r", "\n\n", "\x0b", "\u2028"))
    return "line ends %r" % how, text.replace("\n", how)


def change_case(rng: random.Random, text: str) -> tuple[str, str]:
    lines = _lines(text)
    i = _pick_line(rng, lines)
    if lines:
        lines[i] = lines[i].swapcase()
    return "line %d case swapped" % (i + 1), "\n".join(lines)


def flip_bytes(rng: random.Random, text: str) -> tuple[str, str]:
    data = bytearray(text.encode("utf-8", "surrogateescape"))
    n = rng.choice((1, 3, 16))
    for _round in range(n):
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    return "%d byte(s) flipped" % n, data.decode("utf-8", "surrogateescape")


def repeat_whole(rng: random.Random, text: str) -> tuple[str, str]:
    n = rng.choice((2, 3, 10))
    return "whole output repeated %dx" % n, text * n


def swap_tokens(rng: random.Random, text: str) -> tuple[str, str]:
    lines = _lines(text)
    i = _pick_line(rng, lines)
    if not lines:
        return "empty", ""
    tokens = lines[i].split()
    rng.shuffle(tokens)
    lines[i] = " ".join(tokens)
    return "tokens of line %d shuffled" % (i + 1), "\n".join(lines)


MUTATORS: list[Callable[[random.Random, str], tuple[str, str]]] = [
    truncate, truncate_line, drop_lines, duplicate_line, shuffle_lines, swap_lines, replace_number,
    replace_number, replace_all_numbers, replace_token, replace_token, insert_char, delete_delimiter,
    delete_delimiter_everywhere, insert_line, insert_line, indent_change, line_ends, change_case, flip_bytes,
    repeat_whole, swap_tokens,
]
WHOLE = [("empty output", ""), ("one space", " "), ("only newlines", "\n" * 100), ("one NUL", "\x00"),
         ("binary garbage", bytes(range(256)).decode("latin-1")), ("a JSON null", "null"),
         ("a JSON list", "[1, 2, 3]"), ("a JSON string", '"x"'),
         ("an HTML error page", "<html><body>500</body></html>"),
         ("a shell error", "bash: line 1: tool: command not found"), ("256 KiB of one character", "A" * (1 << 18))]


def variants(text: str, seed: int, count: int, others: list[str] | None = None,
             include_whole: bool = True) -> Iterator[tuple[str, str]]:
    """``count`` unique hostile variants of ``text`` (deterministic for a given ``seed``)."""
    rng = random.Random(seed)
    seen = {text}
    made = 0
    if include_whole:
        for desc, whole in WHOLE:
            if made >= count:
                return
            if whole not in seen:
                seen.add(whole)
                made += 1
                yield desc, whole
    attempts = 0
    while made < count and attempts < count * 20:
        attempts += 1
        if others and rng.random() < 0.04:
            other = rng.choice(others)
            cut = rng.randrange(len(text) + 1)
            desc, new = "spliced with another tool's output at byte %d" % cut, text[:cut] + other[cut:]
        else:
            steps = rng.choice((1, 1, 1, 2, 3))
            new, parts = text, []
            for _step in range(steps):
                part, new = rng.choice(MUTATORS)(rng, new)
                parts.append(part)
            desc = "; ".join(parts)
        if new in seen:
            continue
        seen.add(new)
        made += 1
        yield desc, new


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, doc
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _nodes(value, path + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from _nodes(value, path + (index,))


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        new = dict(doc)
        new[head] = _replace(doc[head], rest, value)
        return new
    new_list = list(doc)
    new_list[head] = _replace(doc[head], rest, value)
    return new_list


def _delete(doc: Any, path: tuple[Any, ...]) -> Any:
    if len(path) == 1:
        if isinstance(doc, dict):
            return {k: v for k, v in doc.items() if k != path[0]}
        return [v for i, v in enumerate(doc) if i != path[0]]
    head = path[0]
    new = dict(doc) if isinstance(doc, dict) else list(doc)
    new[head] = _delete(doc[head], path[1:])
    return new


def _deep(levels: int) -> Any:
    value: Any = 1
    for _level in range(levels):
        value = {"x": [value]}
    return value


def json_variants(text: str, seed: int, count: int) -> Iterator[tuple[str, str]]:
    """``count`` unique variants of a JSON document (optionally after ``# `` header lines): a node
    replaced by a hostile value, deleted, retyped, nested deep; some also text-mutated."""
    lines = text.split("\n")
    header = []
    while lines and lines[0].startswith("# "):
        header.append(lines.pop(0))
    doc = json.loads("\n".join(lines))
    prefix = "".join(h + "\n" for h in header)
    rng = random.Random(seed)
    nodes = list(_nodes(doc))
    seen = {text}
    made = attempts = 0
    while made < count and attempts < count * 20:
        attempts += 1
        path, node = rng.choice(nodes)
        roll = rng.random()
        where = "/".join(str(p) for p in path) or "(document)"
        if roll < 0.55:
            value = rng.choice(HOSTILE_JSON)
            desc, new = "%s -> %s" % (where, json.dumps(value)[:30]), _replace(doc, path, value)
        elif roll < 0.7 and path:
            desc, new = "%s deleted" % where, _delete(doc, path)
        elif roll < 0.8 and isinstance(node, list):
            desc, new = "%s list -> object" % where, _replace(doc, path, {str(i): v for i, v in enumerate(node)})
        elif roll < 0.85 and isinstance(node, dict):
            desc, new = "%s object -> list of its values" % where, _replace(doc, path, list(node.values()))
        elif roll < 0.9:
            desc, new = "%s -> nested 200 levels" % where, _replace(doc, path, _deep(200))
        else:
            desc, new = "%s -> its value as a string" % where, _replace(doc, path, json.dumps(node)[:200])
        out = prefix + json.dumps(new, indent=rng.choice((None, 3)))
        if rng.random() < 0.15:
            part, out = rng.choice(MUTATORS)(rng, out)
            desc += "; " + part
        if out in seen:
            continue
        seen.add(out)
        made += 1
        yield desc, out
