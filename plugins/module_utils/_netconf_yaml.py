# -*- coding: utf-8 -*-
# Copyright: (c) 2026, aiinfra.datapath contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A strict reader for the YAML subset that netplan files and ``netplan get`` use (stdlib only).

It reads block mappings and sequences (including sequences at the indentation of their key,
as netplan's emitter and PyYAML write them), one-line flow collections (``[a, b]``,
``{macaddress: "..."}``), plain, single- and double-quoted scalars and comments. Everything
else a YAML document may hold — anchors, aliases, tags, block scalars (``|``, ``>``),
multi-line scalars or flow collections, several documents, tabs in indentation, complex keys,
duplicate keys — is **refused** with :class:`YamlSubsetError` (line number and reason), never
guessed. Scalars stay strings (``None`` for null); the caller interprets them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

NULLS = ("", "~", "null", "Null", "NULL")
REFUSED_START = {"&": "anchors", "*": "aliases", "!": "tags", "|": "block scalars", ">": "block scalars",
                 "%": "directives", "@": "reserved indicators", "`": "reserved indicators", "?": "complex keys"}
ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
           "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85",
           "_": "\xa0", "L": "\u2028", "P": "\u2029"}
HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


class YamlSubsetError(ValueError):
    """A document outside the subset; ``str()`` names the line and the construct."""

    def __init__(self, line, reason):
        ValueError.__init__(self, "line %s: %s" % (line, reason))
        self.line = line
        self.reason = reason


def _strip_comment(text, number):
    """``text`` without its comment; refuses a quote left open at the end of the line."""
    quote = None
    i = 0
    while i < len(text):
        char = text[i]
        if quote == '"' and char == "\\":
            i += 2
            continue
        if quote == "'" and text[i:i + 2] == "''":
            i += 2
            continue
        if quote:
            if char == quote:
                quote = None
        elif char in "\"'" and (i == 0 or text[i - 1] in " \t[{,:-"):
            quote = char
        elif char == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
        i += 1
    if quote:
        raise YamlSubsetError(number, "a quoted scalar that goes on over several lines")
    return text.rstrip()


def _lines(text):
    out, started, ended = [], False, False
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.lstrip(" ")
        if stripped.startswith("\t") or (stripped and raw[:len(raw) - len(stripped)].count("\t")):
            raise YamlSubsetError(number, "a tab in the indentation")
        content = _strip_comment(stripped, number)
        if not content:
            continue
        if ended:
            raise YamlSubsetError(number, "more than one document")
        if content == "---" or content.startswith("--- "):
            if started or content != "---":
                raise YamlSubsetError(number, "more than one document or content after '---'")
            started = True
            continue
        if content == "...":
            ended = True
            continue
        started = True
        out.append([number, len(raw) - len(stripped), content])
    return out


def _refuse_start(value, number):
    if value and value[0] in REFUSED_START:
        raise YamlSubsetError(number, "%s are not supported" % REFUSED_START[value[0]])


def _double(text, i, number):
    """The double-quoted scalar starting at ``text[i]``; returns (value, index after it)."""
    out, i = [], i + 1
    while i < len(text):
        char = text[i]
        if char == '"':
            return "".join(out), i + 1
        if char == "\\":
            code = text[i + 1:i + 2]
            if code in ESCAPES:
                out.append(ESCAPES[code])
                i += 2
                continue
            if code in HEX_ESCAPES:
                digits = text[i + 2:i + 2 + HEX_ESCAPES[code]]
                if len(digits) != HEX_ESCAPES[code] or not re.match(r"^[0-9a-fA-F]+\Z", digits):
                    raise YamlSubsetError(number, "a bad \\%s escape" % code)
                out.append(chr(int(digits, 16)))
                i += 2 + len(digits)
                continue
            raise YamlSubsetError(number, "an unknown escape \\%s" % code)
        out.append(char)
        i += 1
    raise YamlSubsetError(number, "a double-quoted scalar that is not closed on its line")


def _single(text, i, number):
    out, i = [], i + 1
    while i < len(text):
        if text[i] == "'":
            if text[i + 1:i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out), i + 1
        out.append(text[i])
        i += 1
    raise YamlSubsetError(number, "a single-quoted scalar that is not closed on its line")


def _quoted(text, i, number):
    return _double(text, i, number) if text[i] == '"' else _single(text, i, number)


def _plain(value, number):
    value = value.strip()
    _refuse_start(value, number)
    if value.startswith(("[", "{", "]", "}")) or value.startswith("- ") or ": " in value or value.endswith(":"):
        raise YamlSubsetError(number, "cannot read the plain scalar %r" % value)
    return None if value in NULLS else value


def _scalar(text, number):
    """A whole value: quoted, flow or plain."""
    text = text.strip()
    if text.startswith(("[", "{")):
        value, end = _flow(text, 0, number)
        if text[end:].strip():
            raise YamlSubsetError(number, "text after a flow collection: %r" % text[end:].strip())
        return value
    if text[:1] in "\"'":
        value, end = _quoted(text, 0, number)
        if text[end:].strip():
            raise YamlSubsetError(number, "text after a quoted scalar: %r" % text[end:].strip())
        return value
    return _plain(text, number)


def _skip(text, i):
    while i < len(text) and text[i] == " ":
        i += 1
    return i


def _flow_plain(text, i, stops, number):
    start = i
    while i < len(text):
        if text[i] in stops:
            break
        if text[i] == ":" and (i + 1 == len(text) or text[i + 1] in " ,]}"):
            break
        i += 1
    value = text[start:i].strip()
    _refuse_start(value, number)
    return (None if value in NULLS else value), i


def _flow_value(text, i, number):
    i = _skip(text, i)
    if i >= len(text):
        raise YamlSubsetError(number, "a flow collection that goes on over several lines")
    if text[i] in "[{":
        return _flow(text, i, number)
    if text[i] in "\"'":
        return _quoted(text, i, number)
    return _flow_plain(text, i, ",]}", number)


def _flow(text, i, number):
    """The flow collection starting at ``text[i]`` (``[`` or ``{``) on one line."""
    closing = "]" if text[i] == "[" else "}"
    result = [] if closing == "]" else {}
    i = _skip(text, i + 1)
    while True:
        if i >= len(text):
            raise YamlSubsetError(number, "a flow collection that goes on over several lines")
        if text[i] == closing:
            return result, i + 1
        if closing == "]":
            value, i = _flow_value(text, i, number)
            result.append(value)
        else:
            if text[i] in "\"'":
                key, i = _quoted(text, i, number)
            else:
                key, i = _flow_plain(text, i, ",}", number)
            i = _skip(text, i)
            if text[i:i + 1] != ":":
                raise YamlSubsetError(number, "a flow mapping entry without ':'")
            if key in result:
                raise YamlSubsetError(number, "the key %r twice" % key)
            value, i = _flow_value(text, i + 1, number)
            result[key] = value
        i = _skip(text, i)
        if text[i:i + 1] == ",":
            i = _skip(text, i + 1)
        elif text[i:i + 1] != closing:
            raise YamlSubsetError(number, "expected ',' or %r in a flow collection" % closing)


def _split_key(content, number):
    """(key, rest) of a ``key: value`` line, or None when the line is not a mapping entry."""
    if content[:1] in "\"'":
        key, end = _quoted(content, 0, number)
        rest = content[end:].lstrip(" ")
        if rest == ":" or rest.startswith(": "):
            return key, rest[1:].strip()
        return None
    if content[:1] in "[{" or content.startswith("- ") or content == "-":
        return None
    if content == "?" or content.startswith("? "):
        raise YamlSubsetError(number, "complex keys are not supported")
    match = re.search(r":( |$)", content)
    if not match:
        return None
    key = content[:match.start()].rstrip()
    _refuse_start(key, number)
    return key, content[match.end():].strip()


def _is_item(content):
    return content == "-" or content.startswith("- ")


def _block(lines, i, indent):
    if _is_item(lines[i][2]):
        return _sequence(lines, i, indent)
    return _mapping(lines, i, indent)


def _nested(lines, i, indent, number):
    """The value of a key with nothing after its ':' (a block below it, or null)."""
    if i < len(lines) and lines[i][1] > indent:
        return _block(lines, i, lines[i][1])
    if i < len(lines) and lines[i][1] == indent and _is_item(lines[i][2]):
        return _sequence(lines, i, indent)
    return None, i


def _mapping(lines, i, indent):
    result = {}
    while i < len(lines) and lines[i][1] == indent and not _is_item(lines[i][2]):
        number, dummy, content = lines[i]
        split = _split_key(content, number)
        if split is None:
            raise YamlSubsetError(number, "expected 'key: value', got %r" % content)
        key, rest = split
        if key in result:
            raise YamlSubsetError(number, "the key %r twice in one mapping" % key)
        if rest:
            result[key] = _scalar(rest, number)
            i += 1
        else:
            result[key], i = _nested(lines, i + 1, indent, number)
    if i < len(lines) and lines[i][1] > indent:
        raise YamlSubsetError(lines[i][0], "unexpected indentation (a multi-line scalar or a misaligned line?)")
    return result, i


def _sequence(lines, i, indent):
    result = []
    while i < len(lines) and lines[i][1] == indent and _is_item(lines[i][2]):
        number, dummy, content = lines[i]
        rest = content[1:].lstrip(" ")
        if not rest:
            value, i = _nested(lines, i + 1, indent, number)
            result.append(value)
            continue
        if _is_item(rest) or _split_key(rest, number) is not None:
            # "- key: value" / "- - x": the rest starts a block at its own column
            lines[i] = [number, indent + len(content) - len(rest), rest]
            value, i = _block(lines, i, lines[i][1])
            result.append(value)
            continue
        result.append(_scalar(rest, number))
        i += 1
    if i < len(lines) and lines[i][1] > indent:
        raise YamlSubsetError(lines[i][0], "unexpected indentation (a multi-line scalar or a misaligned line?)")
    return result, i


def parse(text):
    """The document in ``text`` (dict, list, str or None); raises :class:`YamlSubsetError`."""
    lines = _lines(text or "")
    if not lines:
        return None
    if len(lines) == 1 and not _is_item(lines[0][2]) and _split_key(lines[0][2], lines[0][0]) is None:
        return _scalar(lines[0][2], lines[0][0])
    value, i = _block(lines, 0, lines[0][1])
    if i != len(lines):
        raise YamlSubsetError(lines[i][0], "unexpected indentation (less than the document's first line)")
    return value
