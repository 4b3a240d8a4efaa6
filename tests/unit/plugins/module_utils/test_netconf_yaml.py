"""The strict reader of netplan's YAML subset (_netconf_yaml): what it reads, what it refuses.

PyYAML (test side only) is the reference for every document the reader accepts: both must give
the same data (the reader keeps scalars as strings, so YAML 1.1 booleans and numbers are
compared as PyYAML's str()).
"""

from __future__ import annotations

import netcases
import pytest
import yaml
from ansible_collections.aiinfra.datapath.plugins.module_utils._netconf_yaml import YamlSubsetError, parse


def plain(value):
    """PyYAML's data with scalars as the strings the reader keeps (booleans as YAML 1.1 words)."""
    if isinstance(value, dict):
        return dict((str(k), plain(v)) for k, v in value.items())
    if isinstance(value, list):
        return [plain(v) for v in value]
    if value is None:
        return None
    return str(value)


def words(value):
    """The reader's data with YAML 1.1 boolean words folded the way PyYAML reads them."""
    if isinstance(value, dict):
        return dict((k, words(v)) for k, v in value.items())
    if isinstance(value, list):
        return [words(v) for v in value]
    booleans = {"yes": "True", "no": "False", "true": "True", "false": "False", "on": "True", "off": "False"}
    return booleans.get(value.lower(), value) if isinstance(value, str) else value


NETPLAN = '''# written by hand
network:
  version: 2   # a comment after a value
  renderer: networkd
  ethernets:
    rail0:
      match: {macaddress: "b8:3f:d2:00:00:01", driver: [mlx5_core, "ice"]}
      set-name: ens1f0np0
      addresses: [198.19.0.11/24, "2001:db8::11/64"]
      dhcp4: no
      nameservers:
        addresses: [198.18.0.53]
        search: [lab.example]
      routes:
        - to: default
          via: 198.19.0.1
        -   to: 198.19.8.0/24
            via: 198.19.0.2
            metric: 100
      "quoted key": 'it''s # not a comment'
      escapes: "tab\\tquote\\" \\u00e9"
    eno1: {}
    eno2:
    weird:id: []
  wifis:
    wl0:
      access-points:
        "my net": {password: "p#ss"}
'''


def test_reads_what_pyyaml_reads():
    assert words(parse(NETPLAN)) == plain(yaml.safe_load(NETPLAN))


@pytest.mark.parametrize("name", netcases.names())
def test_reads_every_case_and_netplans_own_output(name):
    """The cases' files and the recorded `netplan get` output (netplan's emitter: indentless
    sequences, double-quoted scalars, plain keys with ':' inside)."""
    texts = [p.read_text() for p in (netcases.CASES / name).rglob("*.yaml")]
    for text in texts:
        if text.lstrip().startswith("{"):
            continue                            # JSON over several lines: our own drop-in, read with json
        assert words(parse(text)) == plain(yaml.safe_load(text))


def test_sequence_at_the_indentation_of_its_key_and_nested_items():
    assert parse("a:\n- x\n- - y\n  - z\n- k: v\n  l: w\nb: 1\n") == {
        "a": ["x", ["y", "z"], {"k": "v", "l": "w"}], "b": "1"}
    assert parse("---\n- 1\n...\n") == ["1"]
    assert parse("") is None and parse("# only a comment\n") is None
    assert parse("key:\n") == {"key": None} and parse("k: ~\n") == {"k": None}


@pytest.mark.parametrize("text, line, reason", [
    ("a: &anchor 1\n", 1, "anchors are not supported"),
    ("a: *alias\n", 1, "aliases are not supported"),
    ("a: !!str 1\n", 1, "tags are not supported"),
    ("a: |\n  text\n", 1, "block scalars are not supported"),
    ("a: >\n  text\n", 1, "block scalars are not supported"),
    ("a: plain\n  continued\n", 2, "unexpected indentation (a multi-line scalar or a misaligned line?)"),
    ("a: [1,\n  2]\n", 1, "a flow collection that goes on over several lines"),
    ("a: 'open\n  quote'\n", 1, "a quoted scalar that goes on over several lines"),
    ("a: 1\na: 2\n", 2, "the key 'a' twice in one mapping"),
    ("a: {b: 1, b: 2}\n", 1, "the key 'b' twice"),
    ("---\na: 1\n---\nb: 2\n", 3, "more than one document or content after '---'"),
    ("a:\n\t- 1\n", 2, "a tab in the indentation"),
    ("? complex\n: key\n", 1, "complex keys are not supported"),
    ("a: \"bad \\q escape\"\n", 1, "an unknown escape \\q"),
    ("a:\n    b: 1\n  c: 2\n", 3, "unexpected indentation (a multi-line scalar or a misaligned line?)"),
    ("  a: 1\nb: 2\n", 2, "unexpected indentation (less than the document's first line)"),
    ("a: b: c\n", 1, "cannot read the plain scalar 'b: c'"),
])
def test_refuses_what_it_cannot_read(text, line, reason):
    with pytest.raises(YamlSubsetError) as err:
        parse(text)
    assert (err.value.line, err.value.reason) == (line, reason)
    assert str(err.value) == "line %d: %s" % (line, reason)
