"""`to_json` writes the standard library's text whichever path encodes a value."""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pydantic_ai_compaction.runtime import encoding
from pydantic_ai_compaction.runtime.encoding import to_json

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '60'))


def standard_library_json(value: Any) -> str:
    """The fresh computation: `to_json` as the standard library alone writes it."""
    try:
        text = json.dumps(
            encoding._plain(value),  # pyright: ignore[reportPrivateUsage]
            sort_keys=True,
            separators=(',', ':'),
            ensure_ascii=False,
            allow_nan=False,
            default=encoding._other,  # pyright: ignore[reportPrivateUsage]
        )
    except RecursionError:
        text = '"<a value nested too deeply to encode>"'
    return encoding._SURROGATE.sub(lambda match: f'\\u{ord(match.group()):04x}', text)  # pyright: ignore[reportPrivateUsage]


class Level(enum.IntEnum):
    LOW = 1


class Name(str):
    pass


text = st.one_of(
    st.text(),
    st.text(st.characters(min_codepoint=0, max_codepoint=0x7F)),
    st.sampled_from(['\ud800', 'a\udfffb', '\x00\x1f\x7f"\\/', '\u2028\u2029', 'é€𝄞']),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    text,
    st.builds(datetime.fromtimestamp, st.integers(min_value=0, max_value=2**31)),
    st.binary(max_size=8),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(text, children, max_size=4),
        st.dictionaries(st.one_of(text, st.integers(), st.booleans(), st.none()), children, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(values)
@example({'index': 3})
@example({'b': [1, True, None, 2**64 - 1, -(2**63)], 'a': {'é': 'x', 'z': '', 'A': 'y'}})
@example({'big': 2**64, 'small': -(2**63) - 1})
@example({'path': 'a\udc80b'})
@example({'f': 1e-05, 'g': [0.1, 1e16]})
@example({'level': Level.LOW, Name('k'): Name('v')})
@example({1: 'one', 'x': (1, 2)})
@example([[[[[]]]]])
def test_to_json_is_the_standard_library_text(value: Any) -> None:
    assert to_json(value) == standard_library_json(value)


def test_to_json_of_a_value_nested_past_either_encoder() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert to_json(deep) == '"<a value nested too deeply to encode>"'
    assert to_json([[[]]] * 3) == '[[[]],[[]],[[]]]'


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.one_of(text, st.characters(min_codepoint=0xD700, max_codepoint=0xE000)), max_size=6).map(''.join))
@example('a' * 1000 + '–' + '\udfff')
@example('\ud83d\ude00')
@example('–' * 10)
def test_has_surrogates_is_the_pattern_scan(value: str) -> None:
    from pydantic_ai_compaction.runtime.encoding import clean_text, has_surrogates

    scanned = encoding._SURROGATE.search(value) is not None  # pyright: ignore[reportPrivateUsage]
    assert has_surrogates(value) is scanned
    assert clean_text(value) == encoding._SURROGATE.sub('\ufffd', value)  # pyright: ignore[reportPrivateUsage]


LONG = 10**5000 + 12345
"""An integer past Python's default digit limit (4,300): it has no `str`, and pydantic-ai sends it."""


@settings(max_examples=EXAMPLES, deadline=None)
@given(values, st.sampled_from([LONG, -LONG, 7 * 10**4299, 2**14300]), st.sampled_from([4300, 640, 0]))
def test_an_integer_past_the_digit_limit_is_written_and_read_back_exactly(value: Any, long: int, limit: int) -> None:
    """The text is the standard library's with no digit limit set, whatever the limit; read back, the same values."""
    import sys

    from pydantic_ai_compaction.runtime.encoding import from_json

    wrapped = {
        'value': value,
        'long': long,
        'nested': [long, {'k': long}],
        long: 'as a key',
        '0': 'sorts before the digits',
        '+': 'and before a minus sign',
        'keys': {3 * long: 'a', -long: 'b', 2 * long: 'c'},
        'same keys, other order': {2 * long: 'c', -long: 'b', 3 * long: 'a'},
    }
    before = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(0)
        expected = standard_library_json(wrapped)
        sys.set_int_max_str_digits(limit)
        text = to_json(wrapped)
        assert text == expected
        read = from_json(text)
        assert read['long'] == long and read['nested'] == [long, {'k': long}]
        assert to_json(read['value']) == to_json(value)
    finally:
        sys.set_int_max_str_digits(before)


@dataclass
class _Holder:
    """A tool's return value as a dataclass, holding an integer past the digit limit."""

    count: int
    tags: frozenset[int]


@pytest.mark.parametrize('limit', [4300, 640])
def test_a_long_integer_in_a_dataclass_or_a_set_is_written_exactly(limit: int) -> None:
    """Sets and dataclasses were written by the encoder's `default`, which met the integer unwritten: the whole
    value became a fixed string. Now the text is the standard library's with no digit limit set."""
    import sys

    value = {'result': _Holder(count=LONG, tags=frozenset({3, -LONG, LONG})), 'seen': {LONG, 1, 'a'}}
    before = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(0)
        expected = standard_library_json(value)
        digits = str(LONG)
        sys.set_int_max_str_digits(limit)
        text = to_json(value)
        read = encoding.from_json(text)
    finally:
        sys.set_int_max_str_digits(before)
    assert text == expected
    assert text.count(digits) == 4  # the field, both members of `tags` (one negative) and the member of `seen`
    assert read['result'] == {'count': LONG, 'tags': [-LONG, LONG, 3]}  # sorted by their JSON text
    assert read['seen'] == ['a', 1, LONG]


def test_sets_nested_in_sets_are_written_in_one_order_whatever_the_hash_seed() -> None:
    """A set's members were ordered by `str` of what they hold, and `str` of a set follows the hash seed: the text
    (and so its hash) changed from one interpreter to the next."""
    import subprocess
    import sys

    # The module alone, loaded from its file (it imports no other module of the package): a fresh interpreter
    # per seed without the package's import time.
    script = (
        'import importlib.util, sys\n'
        f'spec = importlib.util.spec_from_file_location("encoding", {encoding.__file__!r})\n'
        'module = importlib.util.module_from_spec(spec); sys.modules["encoding"] = module\n'
        'spec.loader.exec_module(module); to_json = module.to_json\n'
        'from dataclasses import dataclass\n'
        'from datetime import datetime\n'
        '@dataclass(frozen=True)\n'
        'class D:\n'
        '    a: object\n'
        "value = {'sets': {frozenset({'alpha', 'beta'}), frozenset({'alpha', 'gamma'}),\n"
        "                  frozenset({'beta', 'delta'})},\n"
        "         'tuples': {('k', frozenset({'x', 'y'})), ('k', frozenset({'x', 'z'}))},\n"
        "         'tie': {D('x'), \"D(a='x')\"},\n"
        "         'bytes': {('x', b'a'), ('x', \"b'a'\")},\n"
        "         'dates': {('x', datetime(2020, 1, 1)), ('x', '2020-01-01 00:00:00')}}\n"
        'print(to_json(value))\n'
    )
    texts = {
        subprocess.run(
            [sys.executable, '-c', script],
            env={**os.environ, 'PYTHONHASHSEED': str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(8)
    }
    assert len(texts) == 1
    (text,) = texts
    assert json.loads(text)['sets'] == [['alpha', 'beta'], ['alpha', 'gamma'], ['beta', 'delta']]
    assert json.loads(text)['tie'] == ["D(a='x')", {'a': 'x'}]  # the same text: the type's name decides
    # The same key (`str` of bytes, of a datetime) and the same type: their own text decides.
    assert json.loads(text)['bytes'] == [['x', 'YQ=='], ['x', "b'a'"]]
    assert json.loads(text)['dates'] == [['x', '2020-01-01 00:00:00'], ['x', '2020-01-01T00:00:00']]


def test_sets_nested_deep_with_long_integers_are_walked_once_a_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each level's members were ordered by writing them whole, and that writing ordered the level below again:
    time doubled (or worse) with each level (depth 10: 23 s). Counted by the long integers converted to digits."""
    import pydantic_core

    calls = 0
    convert = pydantic_core.to_json

    def counting(value: Any) -> bytes:
        nonlocal calls
        calls += 1
        return convert(value)

    monkeypatch.setattr(pydantic_core, 'to_json', counting)
    value: Any = frozenset({LONG, 'leaf'})
    for depth in range(1, 12):
        value = frozenset({value, LONG + depth})
    text = to_json({value})
    # Digits sort before a list's bracket: each level is its integer, then the level below; `LONG` and 'leaf' last.
    assert text.count('[') == 13
    assert text.endswith('12345' + ']' * 13) and '["leaf",1000' in text
    assert calls <= 12 * 13  # 12 integers; a walk per level of what lies below it at most
