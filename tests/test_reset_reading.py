"""A reset's quick reading of an exchange gives what the plain reading gives, byte for byte.

`rare_lines` reads a long line's first words only and splits most texts without `str.splitlines`, and an
exchange of one call and its return is read without sections or a label per entry. Each is checked here
against the code it replaced, kept below as the reference, on generated texts and exchanges: line breaks of
every kind `str.splitlines` knows, blanks of every kind, timestamps, `key=value`, upper-case words, long
lines, lone surrogates, empty and structured results, error outcomes, several calls with one id.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_compaction import ResetToCheckpoint, Trigger
from pydantic_ai_compaction.processors.strategies.reset import (
    SECTIONS,
    FactExtractor,
    _head,  # pyright: ignore[reportPrivateUsage]
    _label_of,  # pyright: ignore[reportPrivateUsage]
    rare_lines,
)
from pydantic_ai_compaction.runtime import encoding, segment
from pydantic_ai_compaction.runtime.encoding import args_text, clean_text, clean_value
from pydantic_ai_compaction.runtime.engine import _clean_record  # pyright: ignore[reportPrivateUsage]
from pydantic_ai_compaction.runtime.instructions import line_body
from pydantic_ai_compaction.runtime.transcript import clip, return_text

from .test_encoding import Level, Name
from .test_encoding import values as encoded_values

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '15'))

# --- the reference: the plain reading, as it was written before the quick one ------------------------------


def reference_rare_lines(call: ToolCallPart, text: str, *, limit: int = 20) -> list[str]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    shapes = [_reference_shape(line) for line in lines]
    counts = Counter(shapes)
    rare = max(2, len(lines) // 10)
    found = [line for line, shape in zip(lines, shapes, strict=True) if counts[shape] <= rare]
    if len(found) > limit:
        found = [*found[:limit], f'(+{len(found) - limit} more such lines)']
    return found


def _reference_shape(line: str) -> tuple[str, ...]:
    tokens: list[str] = []
    for token in line_body(line).split(maxsplit=8)[:8]:
        if '=' in token:
            tokens.append(token.split('=', 1)[0] + '=')
        elif token.isalpha() and token.isupper():
            tokens.append(token)
        else:
            tokens.append('0' if any(map(str.isdigit, token)) else 'w')
    return tuple(tokens)


def reference_entries(reset: ResetToCheckpoint[None], messages: list[ModelMessage]) -> tuple[Any, ...]:
    """`_exchange_entries` of a tool exchange of *messages*: the plain reading's entries but its facts."""
    return tuple(entry for entry in reference_reading(reset, messages) if entry[0] != 'found')


def reference_facts(reset: ResetToCheckpoint[None], messages: list[ModelMessage]) -> tuple[Any, ...]:
    """`_exchange_facts` of a tool exchange of *messages*: the plain reading's facts."""
    return tuple(entry for entry in reference_reading(reset, messages) if entry[0] == 'found')


def reference_reading(reset: ResetToCheckpoint[None], messages: list[ModelMessage]) -> tuple[Any, ...]:
    """The entries and facts of a tool exchange of *messages*, as the reset read every exchange whole."""
    sections: dict[str, list[tuple[str, int]]] = {name: [] for name in SECTIONS}
    extract: FactExtractor = reset.extract or (lambda call, text: rare_lines(call, text, limit=reset.facts_per_result))
    returns = {
        part.tool_call_id: part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }
    for message in messages:
        if not isinstance(message, ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, TextPart) and part.content.strip():
                sections['conversation'].append(('you: ' + _reference_clip(reset, part.content), 0))
            if not isinstance(part, ToolCallPart) or part.tool_call_id not in returns:
                continue
            result = returns[part.tool_call_id]
            call = f'{part.tool_name}({clean_text(args_text(part.args))})'
            content = clean_text(return_text(result))
            entry = f'{call} → {result.outcome}, {len(content):,} chars'
            sections['changed' if reset._writes.search(part.tool_name) else 'read'].append((entry, 0))  # pyright: ignore[reportPrivateUsage]
            if result.outcome != 'success':
                sections['found'].append((f'{call}: {clip(content, reset.excerpt_chars or 200)}', 0))
                continue
            if len(content) <= reset.excerpt_chars:
                facts = [' '.join(content.split())] if content.strip() else []
            else:
                facts = [clean_text(str(line)) for line in extract(part, content)]
            sections['found'].extend((f'{call}: {fact}', len(call) + 2) for fact in facts if fact.strip())
    return tuple((name, line, fact, _label_of(_head(line))) for name in SECTIONS for line, fact in sections[name])


def _reference_clip(reset: ResetToCheckpoint[None], text: str) -> str:
    text = clean_text(text.strip())
    if len(text) <= reset.answer_chars:
        return text
    return text[: reset.answer_chars] + f'… [{len(text) - reset.answer_chars:,} more chars]'


# --- generated texts ----------------------------------------------------------------------------------------

BREAKS = ['\n', '\r\n', '\r', '\x0b', '\x0c', '\x1c', '\x1d', '\x1e', '\x85', '\u2028', '\u2029']
BLANKS = [' ', '\t', '\x1f', '\xa0', '\u3000', '\u2003', '  ', ' \t ']
WORDS = [
    'ok',
    'INCIDENT',
    'UPDATE',
    'CHANGE:',
    'ERROR',
    'Error',
    'status=500',
    'key=value=x',
    '=lead',
    'payments',
    'x1',
    '42',
    '²',
    '٣',
    'Ⅻ',
    'ÉTÉ',
    'naïve',
    'a_b',
    '12:00',
    '[12:00:01]',
    '[2026-03-15 08:01:05]',
    '2026-03-15T08:01:05.123Z',
    '2026-03-15',
    '08:01:05',
    '\ud800',
    '\udfff',
    '(x)',
    'ǅ',
]


@st.composite
def lines(draw: st.DrawFn) -> str:
    """A line: words and blanks, sometimes very long (a long first word, many words, a long run of blanks)."""
    pieces: list[str] = [draw(st.sampled_from(['', *BLANKS]))]
    for _ in range(draw(st.integers(0, 14))):
        pieces.append(draw(st.sampled_from(WORDS) | st.text(max_size=6)))
        pieces.append(draw(st.sampled_from(BLANKS)))
    kind = draw(st.integers(0, 5))
    if kind == 1:
        pieces.insert(1, 'w' * draw(st.integers(200, 300)))  # a first word past the part read first
    elif kind == 2:
        pieces.insert(draw(st.integers(0, len(pieces))), ' ' * draw(st.integers(200, 300)))  # blanks across it
    elif kind == 3:
        pieces.append(' '.join(draw(st.sampled_from(WORDS)) for _ in range(draw(st.integers(40, 80)))))
    elif kind == 4:
        pieces.insert(1, '2026-03-15T08:01:05.' + '1' * draw(st.integers(230, 270)) + ' ')  # a long timestamp
    return ''.join(pieces)


@st.composite
def texts(draw: st.DrawFn) -> str:
    chosen = draw(st.lists(lines(), max_size=8))
    repeated = chosen * draw(st.integers(1, 4))  # repeated shapes: some lines rare, some not
    breaks = [draw(st.sampled_from(BREAKS)) if draw(st.booleans()) else '\n' for _ in repeated]
    return ''.join(chain.from_iterable(zip(repeated, breaks, strict=True))) + draw(st.sampled_from(['', *BREAKS]))


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(texts(), st.integers(-2, 25))
def test_rare_lines_finds_what_the_plain_reading_finds(text: str, limit: int) -> None:
    call = ToolCallPart('read_log', {})
    assert rare_lines(call, text, limit=limit) == reference_rare_lines(call, text, limit=limit)


def test_rare_lines_reads_the_first_words_of_a_long_line_as_the_whole_line_reads() -> None:
    """Hand-picked edges: a ninth word just past the part read first, a timestamp whose blanks run past it."""
    call = ToolCallPart('read_log', {})
    edges = [
        ' '.join(['w'] * 8) + ' ' * 250 + 'ERROR x',
        '[12:00:01]' + ' ' * 260 + 'a b c d e f g h i',
        '2026-03-15 ' + 'x' * 300,
        'INCIDENT ' * 40,
        'a b c d e f g ' + 'h' * 300 + ' i',
        '\t' + ' ' * 255 + '[2026-03-15 08:01:05] a b c d e f g h i',
    ]
    for edge in edges:
        text = '\n'.join([edge, 'log 1', 'log 2', 'log 3', edge.upper()])
        found = rare_lines(call, text)
        assert found == reference_rare_lines(call, text)
        assert edge.strip() in found  # its shape differs from the three `log N` lines'


# --- generated exchanges ------------------------------------------------------------------------------------

TOOLS = ['read_log', 'write_file', 'a(b', 'x:y', '  ', 'apply', 'grep\ud800', 'édit']
CONTENTS: list[Callable[[str], object]] = [
    lambda text: text,
    lambda text: {'lines': text, 'n': 3},
    lambda text: [text, 1, None],
    lambda text: None,
    lambda text: 42,
    lambda text: '',
]


@st.composite
def exchanges(draw: st.DrawFn) -> list[ModelMessage]:
    """A response (text, thinking, one or more calls) and a request returning one of its calls."""
    ids = ['c1', 'c2']
    parts: list[Any] = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.integers(0, 4))
        if kind == 0:
            parts.append(TextPart(draw(st.sampled_from(['', '  ', 'done \ud800', 'I will read it.', 'x' * 60]))))
        elif kind == 1:
            parts.append(ThinkingPart('thinking'))
        else:
            args = draw(
                st.sampled_from([{'index': 1}, {'path': 'a\ud800b'}, None, '', '{"b": 1, "a": 2}', 'not json', {}])
            )
            parts.append(ToolCallPart(draw(st.sampled_from(TOOLS)), args, tool_call_id=draw(st.sampled_from(ids))))
    content = draw(st.sampled_from(CONTENTS))(draw(texts()))
    outcome = draw(st.sampled_from(['success', 'success', 'failed', 'denied', 'retried', 'interrupted']))
    result = ToolReturnPart('read_log', content, tool_call_id=draw(st.sampled_from(ids)), outcome=outcome)
    return [
        ModelRequest(parts=[UserPromptPart('go')]),
        ModelResponse(parts=parts),
        ModelRequest(parts=[result]),
        ModelResponse(parts=[TextPart('end')]),
    ]


def _odd_extract(call: ToolCallPart, text: str) -> Sequence[Any]:
    return ['', '  ', 'a\ud800', text[:30], call.tool_name]


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(
    exchanges(),
    st.sampled_from([0, 5, 40, 400]),
    st.sampled_from([None, _odd_extract]),
    st.integers(1, 4),
    st.sampled_from([5, 2_000]),
)
def test_an_exchange_is_read_as_the_plain_reading_reads_it(
    history: list[ModelMessage], excerpt: int, extract: FactExtractor | None, facts: int, answer: int
) -> None:
    reset = ResetToCheckpoint[None](
        trigger=Trigger(tokens=1), excerpt_chars=excerpt, extract=extract, facts_per_result=facts, answer_chars=answer
    )
    view = segment(history)
    tools = [exchange for exchange in view.exchanges if exchange.kind == 'tools']
    for exchange in tools:
        try:
            expected = reference_reading(reset, list(view.messages_of(exchange)))
        except Exception as error:  # pydantic-ai cannot render a structured result holding a lone surrogate
            with pytest.raises(type(error)):
                reset._exchange_entries(view, exchange)  # pyright: ignore[reportPrivateUsage]
            with pytest.raises(type(error)):
                reset._exchange_facts(view, exchange)  # pyright: ignore[reportPrivateUsage]
            continue
        entries = tuple(entry for entry in expected if entry[0] != 'found')
        found = tuple(entry for entry in expected if entry[0] == 'found')
        for _ in range(2):  # read, then remembered
            assert reset._exchange_entries(view, exchange) == entries  # pyright: ignore[reportPrivateUsage]
            assert reset._exchange_facts(view, exchange) == found  # pyright: ignore[reportPrivateUsage]


def test_the_quick_reading_covers_the_common_exchange_and_leaves_the_others_to_the_plain_one() -> None:
    """One call and its return is read quickly; two calls sharing the id are read by `_tool_entries` alike."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1))
    one = ModelResponse(parts=[TextPart('reading'), ToolCallPart('write_file', {'p': 1}, tool_call_id='c')])
    two = ModelResponse(parts=[ToolCallPart('read', {'a': 1}, tool_call_id='c'), ToolCallPart('read', {}, 'c')])
    result = ToolReturnPart('write_file', 'saved 3 lines', tool_call_id='c')
    assert reset._call_entries(one, result) == (  # pyright: ignore[reportPrivateUsage]
        ('conversation', 'you: reading', 0, 'you'),
        ('changed', 'write_file({"p":1}) → success, 13 chars', 0, 'write_file'),
    )
    assert reset._call_facts(one, result) == (('found', 'write_file({"p":1}): saved 3 lines', 21, 'write_file'),)  # pyright: ignore[reportPrivateUsage]
    assert reset._call_entries(two, result) is None  # pyright: ignore[reportPrivateUsage]
    assert reset._call_facts(two, result) is None  # pyright: ignore[reportPrivateUsage]
    for response in (one, two):
        history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')]), response, ModelRequest([result])]
        view = segment([*history, ModelResponse(parts=[TextPart('end')])])
        (exchange,) = [e for e in view.exchanges if e.kind == 'tools']
        assert reset._exchange_entries(view, exchange) == reference_entries(reset, list(view.messages_of(exchange)))  # pyright: ignore[reportPrivateUsage]
        assert reset._exchange_facts(view, exchange) == reference_facts(reset, list(view.messages_of(exchange)))  # pyright: ignore[reportPrivateUsage]


# --- the boundary record's cleaning --------------------------------------------------------------------------

_SCALARS = st.one_of(
    st.text(alphabet=st.sampled_from(['a', 'g', '7', ' ', 'é', '\ud800', '\udfff', '\x00'])),
    st.integers(),
    st.none(),
    st.booleans(),
    st.binary(max_size=3),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(alphabet=st.sampled_from(['k', '\ud800', 'é']), max_size=3), inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=EXAMPLES * 10, deadline=None)
@given(st.dictionaries(st.sampled_from(['kept', 'dropped', 'extra', 'notes', 'strategy']), _VALUES))
def test_a_boundary_record_is_cleaned_as_clean_value_cleans_it(metadata: dict[str, Any]) -> None:
    cleaned = _clean_record(metadata)
    expected = reference_clean_value(metadata)
    assert cleaned == expected == clean_value(metadata)
    # The same types too (lists for tuples), and lone surrogates replaced wherever they were.
    assert repr(cleaned) == repr(expected) == repr(clean_value(metadata))


def reference_clean_value(value: Any) -> Any:
    """`clean_value` walked item by item, as first written (it now takes a list of ASCII strings at once)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {reference_clean_value(key): reference_clean_value(item) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list | tuple):
        return [reference_clean_value(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def test_a_structured_result_holding_a_lone_surrogate_is_read_without_falling_back() -> None:
    import asyncio

    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tools import RunContext
    from pydantic_ai.usage import RunUsage

    from pydantic_ai_compaction.runtime.context import CompactionContext
    from pydantic_ai_compaction.runtime.engine import run_compaction

    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')])]
    for step in range(60):
        content: object = {'rows': 'a\ud800b' * 300} if step == 1 else 'ok ' * 300
        history.append(ModelResponse(parts=[ToolCallPart('read', {'i': step}, tool_call_id=f'c{step}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('read', content, tool_call_id=f'c{step}')]))
    history.append(ModelResponse(parts=[TextPart('done')]))
    run = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    cctx = CompactionContext(run=run, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
    outcome = asyncio.run(
        run_compaction(ResetToCheckpoint[None](trigger=Trigger(tokens=1)), history, cctx, min_saving=0.0)
    )
    assert outcome.record.fallback_reason is None  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(['a', '7', ' ', 'é', '\ud800', '\udfff']), max_size=4), max_size=6))
def test_a_list_of_strings_is_cleaned_item_by_item(lines: list[str]) -> None:
    for value in (lines, tuple(lines)):
        cleaned = clean_value(value)
        assert type(cleaned) is list
        assert cleaned == [clean_text(line) for line in lines]
    assert clean_value(['ok', 'b\ud800']) == ['ok', 'b\ufffd']


def reference_orjson_writes_as_json(value: Any) -> bool:
    """`_orjson_writes_as_json` as it was written before flat dictionaries were told in C."""
    kind = type(value)  # pyright: ignore[reportUnknownVariableType]
    if kind in (str, int, bool, type(None)):
        return True
    if kind is dict:
        return all(type(key) is str and reference_orjson_writes_as_json(item) for key, item in value.items())  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if kind is list or kind is tuple:
        return all(reference_orjson_writes_as_json(item) for item in value)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return False


@settings(max_examples=EXAMPLES * 4, deadline=None)
@given(
    encoded_values
    | st.dictionaries(
        st.sampled_from(['a', 'b', Name('c')]), st.sampled_from([1, 'x', None, True, Level.LOW, 1.5, Name('n')])
    )
)
def test_a_call_s_arguments_take_the_path_they_took(value: Any) -> None:
    """The encoder chosen for a tool call's arguments is the one the item-by-item test chose."""
    assert encoding._orjson_writes_as_json(value) is reference_orjson_writes_as_json(value)  # pyright: ignore[reportPrivateUsage]


# --- words' kinds told once: `rare_lines` as it read every word of every line ----------------------------------


def _word_counted_rare_lines(call: ToolCallPart, text: str, *, limit: int = 20) -> list[str]:
    lines = [line for piece in _word_counted_lines_of(text) if (line := piece.strip())]
    if not lines:
        return []
    if len(lines) <= 2:
        # No shape can be shared by more than `rare` (at least 2) lines: every line is rare, no shape is read.
        return lines if len(lines) <= limit else [*lines[:limit], f'(+{len(lines) - limit} more such lines)']
    shapes = [_word_counted_shape(line) for line in lines]
    if len(shapes) > 16:
        counts: dict[tuple[str, ...], int] = Counter(shapes)
    else:
        # A few lines (a log's header and one long line): a plain count costs less than building a `Counter`.
        counts = {}
        for shape in shapes:
            counts[shape] = counts.get(shape, 0) + 1
    rare = max(2, len(lines) // 10)
    found = [line for line, shape in zip(lines, shapes, strict=True) if counts[shape] <= rare]
    if len(found) > limit:
        found = [*found[:limit], f'(+{len(found) - limit} more such lines)']
    return found


def _word_counted_lines_of(text: str) -> list[str]:
    for mark in ('\r', '\x0b', '\x0c', '\x1c', '\x1d', '\x1e', '\x85', '\u2028', '\u2029'):
        if mark in text:
            return text.splitlines()
    # `split` also compares every character; `find` scans for one in C at memory speed, which a result of a
    # line or two (a JSON value, a header and a long line) takes.
    first = text.find('\n')
    if first < 0:
        return [text]
    if text.find('\n', first + 1) < 0:
        return [text[:first], text[first + 1 :]]
    return text.split('\n')


def _word_counted_shape(line: str) -> tuple[str, ...]:
    if len(line) > 256 and not line[:1].isspace():
        # A long line's first words, without copying the rest of it (`split` copies what follows the eighth).
        # A timestamp is under 50 characters and, the line not starting blank, starts it: within the first
        # `_SHAPE_READ` it is matched as in the whole line, unless the blanks after it reach past them, and
        # then no ninth word is read there. A ninth word means the eighth is whole.
        words = line_body(line[:256]).split(maxsplit=8)
        if len(words) < 9:
            words = line_body(line).split(maxsplit=8)
    else:
        words = line_body(line).split(maxsplit=8)
    tokens: list[str] = []
    for token in words[:8]:
        if token.isalpha():  # letters only: no digit and no `=` among them
            tokens.append(token if token.isupper() else 'w')
        elif '=' in token:
            tokens.append(token.partition('=')[0] + '=')
        elif token.isascii():  # the ASCII characters `str.isdigit` accepts are 0 to 9: one search in C
            tokens.append('w' if re.search('[0-9]', token) is None else '0')
        else:
            tokens.append('0' if any(map(str.isdigit, token)) else 'w')
    return tuple(tokens)


LOG_WORDS = [*WORDS, 'INFO', 'id=7', 'user=ann', 'x' * 70, 'X' * 70, '7' * 70, '١٢', 'Ünïcode', 'ÀB', 'ß', 'ǈ']


@st.composite
def logs(draw: st.DrawFn) -> str:
    """Many lines, repeated, of words a log repeats (some long enough not to be kept), with any line break."""
    chosen = draw(st.lists(lines() | st.lists(st.sampled_from(LOG_WORDS), max_size=12).map(' '.join), max_size=12))
    repeated = chosen * draw(st.integers(1, 6)) + draw(
        st.lists(st.sampled_from(chosen), max_size=30) if chosen else st.just([])
    )
    breaks = [draw(st.sampled_from(BREAKS)) if draw(st.booleans()) else '\n' for _ in repeated]
    blank = draw(st.sampled_from(['', *BLANKS]))
    return blank.join(chain.from_iterable(zip(repeated, breaks, strict=True)))


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(logs(), st.integers(1, 25))
def test_rare_lines_with_kinds_told_once_finds_what_reading_every_word_finds(text: str, limit: int) -> None:
    call = ToolCallPart('read_log', {})
    assert rare_lines(call, text, limit=limit) == _word_counted_rare_lines(call, text, limit=limit)
    # Read again, every word's kind is now looked up: the same lines.
    assert rare_lines(call, text, limit=limit) == _word_counted_rare_lines(call, text, limit=limit)


def test_the_kinds_kept_are_bounded_and_a_full_store_tells_the_same_kinds() -> None:
    from pydantic_ai_compaction.processors.strategies import reset as reset_module

    kinds = reset_module._KINDS  # pyright: ignore[reportPrivateUsage]
    words = [f'w{n}' for n in range(reset_module._KINDS_KEPT + 10)]  # pyright: ignore[reportPrivateUsage]
    text = '\n'.join(f'{word} STATUS=ok {word.upper()}' for word in words)
    call = ToolCallPart('read_log', {})
    assert rare_lines(call, text, limit=5) == _word_counted_rare_lines(call, text, limit=5)
    assert len(kinds) <= reset_module._KINDS_KEPT  # pyright: ignore[reportPrivateUsage]
    long_word = 'q' * (reset_module._KIND_WORD_CHARS + 1)  # pyright: ignore[reportPrivateUsage]
    assert kinds[long_word] == 'w' and long_word not in kinds
    assert kinds['ÉTÉ'] == 'ÉTÉ' and kinds['a=b=c'] == 'a=' and kinds['x٣'] == '0' and kinds['Ab'] == 'w'
    for word in [*LOG_WORDS, '²', 'x²', 'Ⅻ', 'ⅻ', '𝟘', 'ab٣=', 'ǅX', '\ud800']:
        if word.split() == [word]:
            assert kinds[word] == _word_counted_shape(word)[0], word  # told, then looked up
            assert kinds[word] == _word_counted_shape(word)[0], word


def test_a_line_starting_with_neither_a_bracket_nor_a_digit_has_no_timestamp() -> None:
    """`_shapes` reads a timestamp only where one can start: `[` or what the pattern's `\\d` takes (`isdecimal`)."""
    import sys

    digit = re.compile(r'\d')
    assert [c for c in map(chr, range(sys.maxunicode + 1)) if (digit.match(c) is None) == c.isdecimal()] == []
    for head in ['a', 'É', '²', 'Ⅻ', '(', '-', '\ud800']:
        line = head + '2026-03-15 08:01:05 x'
        assert line_body(line) == line
    assert line_body('٣٣:٠٠ x') == 'x' and line_body('[x] y') == 'y'
