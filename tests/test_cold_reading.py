"""A history never seen, read in one pass: what the step-by-step readings give, value for value.

A reset reads the steps of one call and a short result in one loop (`_entries_of`), and segmentation measures a
plain tool loop's messages as it reads them. Each is checked against the reading it shortcuts, on tool loops of
odd steps: arguments as a dict, a JSON string, none, nested, with integers beyond 64 bits, floats, lone surrogates
or `str` subclasses; results short and long, structured, empty, failed, holding lone surrogates; write tools, tool
names that are enum members, several calls, texts said, extra parts; messages measured (and remembered) before.
"""

from __future__ import annotations

import enum
import importlib
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction import ResetToCheckpoint, Trigger
from pydantic_ai_compaction.processors.strategies.reset import (
    _kind,  # pyright: ignore[reportPrivateUsage]
    _Kinds,  # pyright: ignore[reportPrivateUsage]
    _no_entries,  # pyright: ignore[reportPrivateUsage]
)
from pydantic_ai_compaction.runtime import segment
from pydantic_ai_compaction.runtime.segment import messages_tokens

from . import segment_reference as reference
from .test_encoding import Name
from .test_reset_reading import reference_entries
from .test_segment_cold import as_reference, fresh

segment_module = importlib.import_module('pydantic_ai_compaction.runtime.segment')

EXAMPLES = settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '25')), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class Tool(enum.StrEnum):
    READ = 'read_log'


ARGS: list[Any] = [
    {'index': 3},
    {'index': 2**70},
    {'index': -(2**63)},
    {'path': 'a\ud800b'},
    {'path': 'ü', 'n': None, 'ok': True},
    {Name('k'): 1},
    {'v': Name('x')},
    {'x': 1.5},
    {'rows': [1, 2]},
    {1: 'a'},
    {},
    None,
    '',
    '{"b": 1, "a": 2}',
    'not json',
    {'blob': 'x' * 300},
]
NAMES: list[Any] = ['read_log', 'write_file', 'edit', 'a(b', 'x:y', 'grep\ud800', Tool.READ, 'édit']
CONTENTS: list[Any] = ['ok 7', '', '  ', 'a  b\tc', 'lone \ud800', 'x' * 60, 'y' * 500, {'rows': [1]}, None, 42]


@st.composite
def steps(draw: st.DrawFn) -> list[ModelMessage]:
    """An opening, then tool steps: most of one call and its short result, any of them odd."""
    messages: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('You audit logs.'), UserPromptPart('Audit every log.')])
    ]
    for step in range(draw(st.integers(0, 10))):
        call_id = f'c{step}'
        parts: list[Any] = []
        if draw(st.integers(0, 3)) == 0:
            parts.append(ThinkingPart(draw(st.sampled_from(['thinking', '']))))
        if draw(st.integers(0, 5)) == 0:
            parts.append(TextPart(draw(st.sampled_from(['I will read it.', '', 'done \ud800']))))
        parts.append(ToolCallPart(draw(st.sampled_from(NAMES)), draw(st.sampled_from(ARGS)), tool_call_id=call_id))
        if draw(st.integers(0, 6)) == 0:
            other = draw(st.sampled_from([call_id, f'{call_id}b']))
            parts.append(ToolCallPart('read_log', {'index': 0}, tool_call_id=other))
        usage = RequestUsage(input_tokens=10, output_tokens=draw(st.sampled_from([0, 5, 5_000])))
        outcome = draw(st.sampled_from(['success', 'success', 'success', 'failed', 'denied']))
        result = ToolReturnPart('read_log', draw(st.sampled_from(CONTENTS)), tool_call_id=call_id, outcome=outcome)
        request_parts: list[Any] = [result]
        if draw(st.integers(0, 6)) == 0:
            request_parts.append(UserPromptPart('and then?'))
        messages.append(ModelResponse(parts=parts, usage=usage))
        messages.append(ModelRequest(parts=request_parts))
    messages.append(ModelResponse(parts=[TextPart('end')]))
    messages.append(ModelRequest(parts=[UserPromptPart('next')]))
    return messages


@EXAMPLES
@given(steps(), st.sampled_from([0, 5, 40, 400]), st.sampled_from(['', 'write|edit']), st.booleans())
def test_steps_read_in_one_loop_give_each_exchange_s_plain_reading(
    history: list[ModelMessage], excerpt: int, writes: str, labelled: bool
) -> None:
    """`_entries_of` gives, exchange by exchange, what the plain reading (and `_exchange_entries`) gives."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=excerpt, write_tools=writes or '^$')
    view = segment(fresh(history))
    if labelled:
        # The tool names labelled before (a step of each read the long way), then every step read in one loop.
        reset._entries_of(view, view.exchanges)  # pyright: ignore[reportPrivateUsage]
    read = reset._entries_of(view, view.exchanges)  # pyright: ignore[reportPrivateUsage]
    assert len(read) == len(view.exchanges)
    for exchange, entries in zip(view.exchanges, read, strict=True):
        if _no_entries(exchange):
            assert entries == ()
            continue
        if exchange.kind == 'tools':
            assert entries == reference_entries(reset, list(view.messages_of(exchange)))
        assert entries == reset._exchange_entries(view, exchange)  # pyright: ignore[reportPrivateUsage]


def test_a_step_read_in_one_loop_is_a_plain_step_s_entries() -> None:
    """The quick reading's own shapes: a read, a write, an empty result, a size written with and without grouping."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=2_000)
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Go.')])]
    for step, (name, content) in enumerate(
        [('read_log', 'ok  7'), ('write_file', 'saved'), ('read_log', ''), ('read_log', 'z' * 1_234)] * 2
    ):
        history.append(ModelResponse(parts=[ToolCallPart(name, {'index': step}, tool_call_id=f'c{step}')]))
        history.append(ModelRequest(parts=[ToolReturnPart(name, content, tool_call_id=f'c{step}')]))
    history.append(ModelRequest(parts=[UserPromptPart('next')]))
    view = segment(history)
    read = reset._entries_of(view, view.exchanges)  # pyright: ignore[reportPrivateUsage]
    assert read[5] == (('read', 'read_log({"index":4}) → success, 5 chars', 0, 'read_log'),)
    assert read[6] == (('changed', 'write_file({"index":5}) → success, 5 chars', 0, 'write_file'),)
    assert read[7] == (('read', 'read_log({"index":6}) → success, 0 chars', 0, 'read_log'),)
    assert read[8] == (('read', 'read_log({"index":7}) → success, 1,234 chars', 0, 'read_log'),)
    # The facts are read apart, and only for the results a checkpoint can show.
    assert reset._exchange_facts(view, view.exchanges[5]) == (('found', 'read_log({"index":4}): ok 7', 23, 'read_log'),)  # pyright: ignore[reportPrivateUsage]
    assert reset._exchange_facts(view, view.exchanges[7]) == ()  # pyright: ignore[reportPrivateUsage]
    for exchange, entries in zip(view.exchanges, read, strict=True):
        if not _no_entries(exchange):
            assert entries == reference_entries(reset, list(view.messages_of(exchange)))


@EXAMPLES
@given(steps(), st.lists(st.integers(0, 40), max_size=6))
def test_a_plain_loop_measured_as_it_is_read_segments_as_the_reference(
    history: list[ModelMessage], measured: list[int]
) -> None:
    """Messages measured and remembered before (large arguments and results are) are read from the memo alike."""
    copied = fresh(history)
    messages_tokens([copied[index] for index in measured if index < len(copied)])
    as_reference(segment(copied), reference.segment_fresh(fresh(history)))


def test_large_arguments_and_results_are_remembered_as_measured() -> None:
    """A plain loop whose calls and results are structured and large: measured once, then read from the memo."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Go.')])]
    for step in range(6):
        call = ToolCallPart('read_log', {'blob': 'x' * 300, 'index': step}, tool_call_id=f'c{step}')
        history.append(ModelResponse(parts=[call], usage=RequestUsage(output_tokens=7)))
        history.append(ModelRequest(parts=[ToolReturnPart('read_log', {'rows': ['y' * 300]}, tool_call_id=f'c{step}')]))
    history.append(ModelRequest(parts=[UserPromptPart('next')]))
    expected = reference.segment_fresh(fresh(history))
    as_reference(segment(history), expected)
    as_reference(segment(fresh(history)), expected)
    assert messages_tokens(history) == messages_tokens(fresh(history))


def test_a_plain_loop_measured_before_is_not_converted_to_text_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Structured arguments and results the memo knows are not written out again: only the others are."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Go.')])]
    for step in range(8):
        call = ToolCallPart('read_log', {'blob': 'x' * 300, 'index': step}, tool_call_id=f'c{step}')
        history.append(ModelResponse(parts=[call]))
        history.append(ModelRequest(parts=[ToolReturnPart('read_log', {'rows': ['y' * 300]}, tool_call_id=f'c{step}')]))
    history.append(ModelRequest(parts=[UserPromptPart('next')]))
    messages_tokens(history[:9])  # the opening and the first four steps: measured and remembered (large)
    converted: list[object] = []
    value_text, tool_return_text = segment_module.value_text, segment_module.tool_return_text
    monkeypatch.setattr(segment_module, 'value_text', lambda value: converted.append(value) or value_text(value))
    monkeypatch.setattr(
        segment_module, 'tool_return_text', lambda part: converted.append(part) or tool_return_text(part)
    )
    as_reference(segment(history), reference.segment_fresh(fresh(history)))
    # The four steps after them are converted (a call's arguments and a result each); the last step is read
    # again from the cut, by the general reader.
    assert len(converted) == 2 * 4


def test_instructions_among_the_plain_steps_are_the_view_s_as_the_reference_finds_them() -> None:
    """The newest instructions before the cut, on the opening or on a step's request, are read with the steps."""
    for at in (0, 2, 4, 6):
        history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Go.')])]
        for step in range(4):
            history.append(ModelResponse(parts=[ToolCallPart('read_log', {'index': step}, tool_call_id=f'c{step}')]))
            history.append(ModelRequest(parts=[ToolReturnPart('read_log', 'ok', tool_call_id=f'c{step}')]))
        history[at] = ModelRequest(parts=list(history[at].parts), instructions=f'Be brief ({at}).')
        history.append(ModelResponse(parts=[TextPart('done')]))
        history.append(ModelRequest(parts=[UserPromptPart('next')]))
        view = segment(fresh(history))
        as_reference(view, reference.segment_fresh(fresh(history)))
        assert view.instructions == f'Be brief ({at}).'


WORD_PIECES = st.sampled_from(['A', 'z', 'É', 'ß', 'ǅ', '=', '7', '٣', '²', 'Ⅻ', '_', '-', ':', '\ud800', '[', '.'])


@EXAMPLES
@given(st.lists(st.text(max_size=8) | st.lists(WORD_PIECES, min_size=1, max_size=6).map(''.join), max_size=20))
def test_a_word_s_kind_told_by_the_store_is_the_word_s_kind(words: list[str]) -> None:
    """The store tells a word missing from it as `_kind` does, and the same again once it holds the word."""
    kinds = _Kinds()
    assert [kinds[word] for word in words] == [_kind(word) for word in words]
    assert [kinds[word] for word in words] == [_kind(word) for word in words]
