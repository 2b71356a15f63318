"""The fork's exchange listing reads a structured tool result's size once, and prints what rendering it prints.

`reference_listing` below is the listing as it was written before sizes were remembered: every line built from
the parts, each result's size `len(return_text(part))`, rendered again on every call. The listing must give
the same text for any history, on its first call and on every later one (when the sizes are remembered).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime import segment
from pydantic_ai_compaction.runtime.encoding import args_text
from pydantic_ai_compaction.runtime.pins import is_pinned
from pydantic_ai_compaction.runtime.segment import ConversationView
from pydantic_ai_compaction.runtime.transcript import clip, describe, listing, result_chars, return_text, user_text

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '40'))


def reference_describe(view: ConversationView, exchange: Exchange, *, limit: int = 100) -> str:
    """The description as first written: every result rendered again for its size."""
    kind = exchange.kind
    if kind == 'restatement':
        return 'restated instructions'
    messages = view.messages
    if kind == 'boundary':
        summaries: list[str] = []
        for index, selected in exchange.refs:
            parts = messages[index].parts
            for part in parts if selected is None else [parts[p] for p in selected]:
                if isinstance(part, CompactionPart):
                    summaries.append(part.content or '(opaque provider compaction)')
        return 'earlier compaction: ' + clip(' '.join(summaries), limit)
    calls: list[ToolCallPart] = []
    sizes: dict[str, int] = {}
    prompts: list[str] = []
    texts: list[str] = []
    pinned = False
    for index, selected in exchange.refs:
        message = messages[index]
        parts: Sequence[ModelRequestPart | ModelResponsePart] = (
            message.parts if selected is None else [message.parts[p] for p in selected]
        )
        if isinstance(message, ModelRequest):
            for part in parts:
                if isinstance(part, ToolReturnPart):
                    sizes[part.tool_call_id] = len(return_text(part))
                elif isinstance(part, UserPromptPart):
                    prompts.append(user_text(part))
                    pinned = pinned or is_pinned(part)
        else:
            for part in parts:
                if isinstance(part, ToolCallPart):
                    calls.append(part)
                elif isinstance(part, TextPart):
                    texts.append(part.content)
    if calls:
        rendered = ', '.join(
            f'{call.tool_name}({clip(args_text(call.args), 60)}) → {sizes.get(call.tool_call_id, 0):,} chars'
            for call in calls
        )
        return clip(rendered, limit)
    if kind in ('opening', 'turn') and prompts:
        return ('pinned: ' if pinned else 'user: ') + clip(' '.join(prompts), limit)
    return 'assistant: ' + clip(' '.join(texts), limit)


def reference_listing(view: ConversationView, exchanges: Iterable[Exchange] | None = None) -> str:
    lines: list[str] = []
    for exchange in exchanges if exchanges is not None else view.exchanges:
        flags = f'{exchange.kind}, ~{exchange.tokens:,} tokens'
        if exchange.protected:
            flags += f', protected: {exchange.protected}'
        if exchange.unfinished:
            flags += ', in progress'
        lines.append(f'{exchange.id} [{flags}] {reference_describe(view, exchange)}')
    return '\n'.join(lines)


class Row(pydantic.BaseModel):
    """A tool returning a model: rendered by pydantic (aliases, nested models)."""

    model_config = pydantic.ConfigDict(populate_by_name=True)

    name: str = pydantic.Field(alias='Name')
    values: list[int]
    note: str | None = None


@dataclasses.dataclass
class Point:
    x: float
    label: str


text = st.text(st.characters(codec='utf-8'), max_size=30)
any_text = st.one_of(text, st.text(max_size=12))  # the second one holds lone surrogates too
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**64, max_value=2**300) | st.integers(max_value=-(2**64), min_value=-(2**300)),
    st.floats(allow_nan=True, allow_infinity=True),
    any_text,
)
json_like = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(any_text, inner, max_size=4),
        st.dictionaries(st.integers(-3, 3), inner, max_size=2),
    ),
    max_leaves=12,
)
contents = st.one_of(
    any_text,
    json_like,
    st.builds(Row, Name=text, values=st.lists(st.integers(), max_size=3), note=st.none() | text),
    st.builds(Point, x=st.floats(), label=text),
    st.lists(json_like, max_size=0),
)
names = st.one_of(
    st.sampled_from(['read', 'read log', ' read', 'read ', 'read\tlog', 'read\u00a0log', 'x' * 90, '']),
    st.text(max_size=12),
)
"""Tool names: a name with whitespace (or long enough to be cut) is put on one line with the rest."""
outcomes = st.sampled_from(['success', 'success', 'failed', 'retried', 'denied'])


@st.composite
def histories(draw: st.DrawFn) -> list[ModelMessage]:
    messages: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart('You work.'), UserPromptPart('Start.')])]
    for step in range(draw(st.integers(1, 5))):
        count = draw(st.integers(1, 2))
        ids = [f'c{step}_{n}' for n in range(count)]
        calls = [
            ToolCallPart(draw(names), draw(st.dictionaries(text, json_like, max_size=3)), tool_call_id=call_id)
            for call_id in ids
        ]
        messages.append(ModelResponse(parts=[*calls]))
        returns = [
            ToolReturnPart(call.tool_name, draw(contents), tool_call_id=call.tool_call_id, outcome=draw(outcomes))
            for call in calls
        ]
        messages.append(ModelRequest(parts=[*returns]))
        if draw(st.booleans()):
            messages.append(ModelResponse(parts=[TextPart(draw(text))]))
            messages.append(ModelRequest(parts=[UserPromptPart(draw(text) or 'next')]))
    return messages


def outcome(function: Any, *args: Any) -> tuple[str, str]:
    """What *function* gives: its text, or the type of what it raised (a result pydantic cannot render)."""
    try:
        return 'text', function(*args)
    except Exception as error:
        return 'error', type(error).__name__


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories())
@example(
    history=[
        ModelRequest(parts=[UserPromptPart('Start.')]),
        ModelResponse(parts=[ToolCallPart('read', {'path': 'a'}, tool_call_id='c1')]),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    'read',
                    {'naïve': ['é', 10**40, 1e16, None, True], 'n': {'deep': {'x': '\u2028"\\\t'}}},
                    tool_call_id='c1',
                )
            ]
        ),
    ]
)
def test_the_listing_is_the_reference_listing_every_time(history: list[ModelMessage]) -> None:
    view = segment(history)
    expected = outcome(reference_listing, view)
    assert outcome(listing, view) == expected  # sizes rendered and remembered
    assert outcome(listing, view) == expected  # sizes remembered
    assert outcome(listing, segment([*history])) == expected  # another view of the same parts
    if expected[0] == 'text':
        for exchange in view.exchanges:  # other lengths, as the curator's bundle list asks for
            for limit in (-1, 0, 1, 20, 80):
                assert describe(view, exchange, limit=limit) == reference_describe(view, exchange, limit=limit)


@pytest.mark.parametrize(
    'content',
    [
        {'rows': [{'id': n, 'name': f'row {n}', 'ok': n % 2 == 0} for n in range(50)]},
        [1, 2.5, 'x', None],
        Row(Name='a', values=[1, 2]),
        [],
        {'deep': {'big': 2**100, 'text': 'línea\n"dos"'}},
    ],
)
def test_a_structured_result_is_rendered_once_for_every_listing(content: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    part = ToolReturnPart('query', content, tool_call_id='c1')
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Start.')]),
        ModelResponse(parts=[ToolCallPart('query', {'q': 'all'}, tool_call_id='c1')]),
        ModelRequest(parts=[part]),
        ModelResponse(parts=[TextPart('done')]),
    ]
    size = len(part.model_response_str())
    rendered: list[int] = []
    real = ToolReturnPart.model_response_str

    def counting(self: ToolReturnPart, *, wrap_if_error: bool = True) -> str:
        rendered.append(1)
        return real(self, wrap_if_error=wrap_if_error)

    monkeypatch.setattr(ToolReturnPart, 'model_response_str', counting)
    first = listing(segment(history))
    again = listing(segment([*history]))
    assert f'query({{"q":"all"}}) → {size:,} chars' in first
    assert again == first == reference_listing(segment(history))
    assert result_chars(part) == size
    # Rendered once by the first listing and once by the reference; the second listing and `result_chars`
    # read the remembered size.
    assert len(rendered) == 2


def test_remembered_sizes_never_keep_a_part_alive_nor_answer_for_another_part() -> None:
    import gc
    import weakref

    from pydantic_ai_compaction.runtime.transcript import _Sizes  # pyright: ignore[reportPrivateUsage]

    sizes = _Sizes()
    kept = ToolReturnPart('query', {'rows': [1, 2]}, tool_call_id='kept')
    sizes.put(kept, 13)
    gone = ToolReturnPart('query', {'rows': [1]}, tool_call_id='gone')
    watch = weakref.ref(gone)
    sizes.put(gone, 11)
    del gone
    gc.collect()
    assert watch() is None  # the table held no strong reference
    # A part made now may well sit where the collected one was: it is not answered with that one's size.
    fresh = [ToolReturnPart('query', {'rows': [n]}, tool_call_id='gone') for n in range(50)]
    assert all(sizes.get(part) is None for part in fresh)
    for n in range(3_000):  # parts that die at once: swept each time the table has doubled
        sizes.put(ToolReturnPart('query', {'n': n}, tool_call_id=f'c{n}'), n)
    assert len(sizes) < 1_100
    assert sizes.get(kept) == 13
