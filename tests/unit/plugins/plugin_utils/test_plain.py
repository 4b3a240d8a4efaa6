"""plugin_utils.plain: plain() for the filters, plain_data() where templating would change nothing."""

from __future__ import annotations

import datetime

import pytest
from ansible.template import trust_as_template
from ansible_collections.aiinfra.datapath.plugins.plugin_utils.plain import NOT_PLAIN, plain, plain_data


@pytest.mark.parametrize("value, expected", [
    ({"a": [1, 2.5, True, None, "x"]}, {"a": [1, 2.5, True, None, "x"]}),
    (("a", "b"), ["a", "b"]),
    ({1: "int key kept"}, {1: "int key kept"}),
    ({"{{ key }}": 1}, NOT_PLAIN),       # a key is templated too
    (["{% if x %}"], NOT_PLAIN),
    ("{# comment #}", NOT_PLAIN),
    ({1, 2}, NOT_PLAIN),                 # not JSON-like: ansible's templating decides
    ([datetime.date(2026, 12, 7)], NOT_PLAIN),
])
def test_plain_data(value: object, expected: object) -> None:
    got = plain_data(value)
    if expected is NOT_PLAIN:
        assert got is NOT_PLAIN
    else:
        assert got == expected


def test_plain_data_makes_ansibles_tagged_values_plain() -> None:
    got = plain_data({trust_as_template("k"): [trust_as_template("v"), 3]})
    assert got == {"k": ["v", 3]}
    [key] = got
    assert {type(key), type(got["k"][0])} == {str}  # not ansible's tagged subclass of str


def test_plain_data_of_a_cycle_is_not_plain() -> None:
    loop: list = []
    loop.append(loop)
    assert plain_data(loop) is NOT_PLAIN


def test_plain_turns_what_is_not_json_into_strings() -> None:
    assert plain({1: datetime.date(2026, 12, 7)}) == {"1": "2026-12-07"}
