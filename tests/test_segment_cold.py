"""Cold segmentation: a history never seen, read through its plain tool steps, segments as the reference does.

The reference is `tests/segment_reference.py`, the segmentation before the plain tool-loop reading and the
builder's shortcuts. Histories start with plain tool steps (the fast reading's ground) and then go anywhere: every
step may be an odd one (metadata stamps, retries, deferred returns, structured and `ToolReturn` content, list user
prompts, native tool calls, legacy retry prompts, compaction parts, empty requests, equal copies, lone surrogates).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime.pins import pin
from pydantic_ai_compaction.runtime.segment import ConversationView, segment, segment_fresh

from . import segment_reference as reference
from .reliability import histories

EXAMPLES = settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '40')), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

TEXTS = st.sampled_from(['ok', 'log 7 read', 'CHANGE: lower case', 'lone \ud800 surrogate', '', 'x' * 300])

ODD = [
    'stamped',
    'retried',
    'deferred',
    'structured',
    'tool-content',
    'user-list',
    'native',
    'legacy',
    'compaction-request',
    'compaction-response',
    'empty',
    'copy',
    'text-only',
    'turn',
    'pinned',
    'unanswered',
    'foreign-return',
    'instructions',
    'metadata',
]


@st.composite
def tool_loops(draw: Callable[[Any], Any]) -> list[ModelMessage]:
    """A plain opening (or an odd one), plain tool steps with odd ones among them, ending on a request."""
    opening = draw(
        st.sampled_from(
            [
                ModelRequest(parts=[SystemPromptPart('You audit logs.'), UserPromptPart('Audit every log.')]),
                ModelRequest(parts=[UserPromptPart('Audit every log.')], instructions='Be brief.'),
                ModelRequest(parts=[UserPromptPart(['Audit', TextContent('every log.')])]),
                ModelRequest(parts=[UserPromptPart('Audit.')], metadata={'pydantic_ai_compaction': {'exchange': 'g7'}}),
                ModelRequest(parts=[UserPromptPart('Audit.')], metadata={'pydantic_ai_compaction': {'exchange': ''}}),
                ModelRequest(parts=[UserPromptPart('Audit.')], metadata={'__pydantic_ai__': {'durable': True}}),
                ModelRequest(parts=[], instructions='You audit logs.'),
            ]
        )
    )
    messages: list[ModelMessage] = [opening]
    pending: list[str] = []  # calls left unanswered, for a deferred return
    for step in range(draw(st.integers(0, 14))):
        kind = 'plain' if draw(st.integers(0, 2)) else draw(st.sampled_from(ODD))
        call_id = f'c{step}'
        lead: list[Any] = []
        if draw(st.booleans()):
            lead.append(ThinkingPart(draw(TEXTS), signature='s' if draw(st.booleans()) else None))
        if draw(st.integers(0, 3)) == 0:
            lead.append(TextPart(draw(TEXTS)))
        calls = [ToolCallPart('read', {'index': step}, tool_call_id=call_id)]
        if draw(st.integers(0, 3)) == 0:
            calls.append(ToolCallPart('read', '{"index": 1}', tool_call_id=f'{call_id}b'))
        usage = RequestUsage(input_tokens=10, output_tokens=draw(st.sampled_from([0, 5, 5000])))
        response = ModelResponse(parts=[*lead, *calls], usage=usage)
        returns: list[Any] = [ToolReturnPart('read', draw(TEXTS), tool_call_id=c.tool_call_id) for c in calls]
        request = ModelRequest(parts=returns)
        if kind == 'stamped':
            stamp = draw(st.sampled_from([f'g{draw(st.integers(1, 40))}', '', 'not-an-id']))
            response = replace(response, metadata={'pydantic_ai_compaction': {'exchange': stamp}})
        elif kind == 'metadata':
            # Metadata that holds no exchange stamp (pydantic-ai's own namespace, a user's keys) changes nothing.
            response = replace(response, metadata={'__pydantic_ai__': {'context_input_tokens': 5}, 'user': 1})
            request = replace(request, metadata={'pydantic_ai_compaction': {'exchange': 'g2'}})
        elif kind == 'retried':
            request = ModelRequest(parts=[replace(returns[0], outcome='retried'), *returns[1:]])
        elif kind == 'deferred' and pending:
            request = ModelRequest(parts=[*returns, ToolReturnPart('read', 'late', tool_call_id=pending.pop())])
        elif kind == 'structured':
            request = ModelRequest(parts=[replace(returns[0], content={'rows': [1, 2], 'ok': True}), *returns[1:]])
        elif kind == 'tool-content':
            first = returns[0]
            request = ModelRequest(parts=[*returns, UserPromptPart('attachment', timestamp=first.timestamp)])
        elif kind == 'user-list':
            request = ModelRequest(parts=[*returns, UserPromptPart(['look', TextContent('again')])])
        elif kind == 'native':
            response = replace(response, parts=[*response.parts, NativeToolCallPart('web_search', {'q': 'x'})])
        elif kind == 'legacy':
            request = ModelRequest(parts=[*returns, RetryPromptPart('answer in JSON')])  # pyright: ignore[reportDeprecated]
        elif kind == 'compaction-request':
            record = {'strategy': 'summary', 'boundary_id': 'g90', 'next_id': 91, 'kept': [], 'dropped': ['g3']}
            request = ModelRequest(
                parts=[*returns, CompactionPart(content='summary', metadata={'pydantic_ai_compaction': record})]
            )
        elif kind == 'compaction-response':
            response = replace(response, parts=[CompactionPart(content='provider summary'), *response.parts])
        elif kind == 'empty':
            messages.append(ModelResponse(parts=[TextPart('done')]))
            messages.append(ModelRequest(parts=[]))
            continue
        elif kind == 'copy' and len(messages) > 2:
            index = draw(st.integers(1, len(messages) - 1))
            messages.append(copy.deepcopy(messages[index]))
            continue
        elif kind == 'text-only':
            response = ModelResponse(parts=[TextPart(draw(TEXTS))])
            request = ModelRequest(parts=[UserPromptPart('go on')])
        elif kind == 'turn':
            request = ModelRequest(parts=[*returns, UserPromptPart('now the next log')])
        elif kind == 'pinned':
            request = ModelRequest(parts=[*returns, pin('keep this')])
        elif kind == 'unanswered':
            pending.append(call_id)
            request = ModelRequest(parts=returns[1:] or [UserPromptPart('skip it')])
        elif kind == 'foreign-return':
            request = ModelRequest(parts=[ToolReturnPart('read', 'who?', tool_call_id='nobody'), *returns])
        elif kind == 'instructions':
            request = replace(request, instructions=f'Audit step {step}.')
        messages.append(response)
        messages.append(request)
    if not isinstance(messages[-1], ModelRequest):
        messages.append(ModelRequest(parts=[UserPromptPart('continue')]))
    return messages


def fresh(history: list[ModelMessage]) -> list[ModelMessage]:
    """The same history as new message and part objects: nothing any segmentation remembers applies to it."""
    return copy.deepcopy(history)


def exchange_fields(exchange: Exchange) -> tuple[Any, ...]:
    return (exchange.id, exchange.kind, exchange.refs, exchange.tokens, exchange.protected, exchange.unfinished)


def as_reference(view: ConversationView, expected: Any) -> None:
    """*view* holds what the reference's view holds (a dataclass of the reference module: compared field by field)."""
    assert view.messages == expected.messages
    assert [exchange_fields(e) for e in view.exchanges] == [exchange_fields(e) for e in expected.exchanges]
    assert all(
        type(exchange) is Exchange and vars(exchange).keys() == vars(expected.exchanges[0]).keys()
        for exchange in view.exchanges
    )
    assert view.next_id == expected.next_id
    assert view.text_chars == expected.text_chars
    assert view.instructions == expected.instructions
    assert (view.copies is None) == (expected.copies is None)
    if view.copies is not None:
        assert view.copies[0] is view.exchanges
        assert view.copies[1] == expected.copies[1]


def protect_odd(exchange: Exchange, messages: list[ModelMessage]) -> bool:
    return exchange.tokens % 3 == 0 or len(messages) > 2


@EXAMPLES
@given(st.one_of(tool_loops(), histories()), st.sampled_from([None, 'now the next log', 'attachment']), st.booleans())
def test_a_history_never_seen_segments_as_the_reference(
    history: list[ModelMessage], prompt: str | None, odd: bool
) -> None:
    protect = protect_odd if odd else None
    expected = reference.segment_fresh(fresh(history), protect, prompt=prompt)
    as_reference(segment(fresh(history), protect, prompt=prompt), expected)
    as_reference(segment_fresh(fresh(history), protect, prompt=prompt), expected)


@EXAMPLES
@given(tool_loops(), st.data())
def test_a_history_read_cold_then_grown_segments_as_the_reference(
    history: list[ModelMessage], data: st.DataObject
) -> None:
    # Read cold at some length (the plain steps' state remembered), then grown message by message, and read
    # again from another copy: every view is the reference's fresh one.
    copied = fresh(history)
    start = data.draw(st.integers(1, len(copied)))
    for end in range(start, len(copied) + 1):
        prefix = copied[:end]
        as_reference(segment(prefix), reference.segment_fresh(prefix))
    same_again = [copied[0], *fresh(history)[1:]]
    as_reference(segment(same_again), reference.segment_fresh(same_again))


def plain_loop(steps: int) -> list[ModelMessage]:
    messages: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart('You audit logs.'), UserPromptPart('Go.')])]
    for step in range(steps):
        messages.append(ModelResponse(parts=[ToolCallPart('read', {'index': step}, tool_call_id=f'c{step}')]))
        messages.append(ModelRequest(parts=[ToolReturnPart('read', f'ok {step}', tool_call_id=f'c{step}')]))
    return messages


def test_a_plain_tool_loop_is_read_without_the_general_builder(monkeypatch: Any) -> None:
    # Only what follows the last plain step's response goes through the builder: the steps before are read
    # by the plain reading (the figures are the reference's all the same).
    import importlib

    module = importlib.import_module('pydantic_ai_compaction.runtime.segment')
    starts: list[int] = []
    build = module._build_units  # pyright: ignore[reportPrivateUsage]

    def counting(*args: Any, **kwargs: Any) -> Any:
        starts.append(kwargs.get('start', 0))
        return build(*args, **kwargs)

    monkeypatch.setattr(module, '_build_units', counting)
    history = plain_loop(40)
    view = segment(history)
    assert starts == [len(history) - 2]  # the last step's response, with the request that answers it
    as_reference(view, reference.segment_fresh(fresh(history)))
    assert [e.id for e in view.exchanges] == [f'g{n}' for n in range(41)]


def test_a_stamp_after_the_plain_steps_segments_from_the_start_as_the_reference() -> None:
    # A stamp higher than every number handed out renumbers nothing before it, but the plain reading assumed no
    # stamp anywhere: the rest declines and the whole history is read again, giving the reference's ids.
    history = plain_loop(6)
    stamped = replace(history[-2], metadata={'pydantic_ai_compaction': {'exchange': 'g3'}})
    history[-2] = stamped
    history.append(ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id='late')]))
    history.append(ModelRequest(parts=[ToolReturnPart('read', 'x', tool_call_id='late')]))
    view = segment(fresh(history))
    as_reference(view, reference.segment_fresh(fresh(history)))
    assert 'g3' in [e.id for e in view.exchanges]


def test_merging_linked_units_matches_the_reference_sweep() -> None:
    # A request split between units (a return, then a user turn, then a deferred return) exercises the sweep's
    # comparison on the same message, part by part.
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Go.')]),
        ModelResponse(parts=[ToolCallPart('a', {}, tool_call_id='a'), ToolCallPart('b', {}, tool_call_id='b')]),
        ModelRequest(parts=[ToolReturnPart('a', 'x', tool_call_id='a'), UserPromptPart('and then?')]),
        ModelResponse(parts=[TextPart('waiting')]),
        ModelRequest(parts=[UserPromptPart('more'), ToolReturnPart('b', 'y', tool_call_id='b')]),
    ]
    for end in range(1, len(history) + 1):
        as_reference(segment(fresh(history[:end])), reference.segment_fresh(fresh(history[:end])))


def test_a_retried_return_among_plain_steps_joins_the_retry_as_the_reference() -> None:
    # The model's answer to a retried return belongs with the call it retries: no plain step ends there.
    history = plain_loop(8)
    retried = history[6]
    assert isinstance(retried, ModelRequest)
    history[6] = replace(retried, parts=[replace(retried.parts[0], outcome='retried')])
    view = segment(fresh(history))
    as_reference(view, reference.segment_fresh(fresh(history)))
    assert view.exchanges[3].refs == ((5, None), (6, None), (7, None), (8, None))
