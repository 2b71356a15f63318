"""A reset that read a run's steps on its requests below the trigger compacts exactly as a reset that never saw the
history, whatever the user did to the history between requests (grown, replaced by copies, a message or the tail
removed, a message swapped for an equal copy, a result replaced by one with other content)."""

from __future__ import annotations

import os
from dataclasses import replace
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
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import ResetToCheckpoint, Trigger
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.engine import run_compaction
from pydantic_ai_compaction.runtime.segment import segment, segment_fresh
from pydantic_ai_compaction.runtime.validate import Outcome, Skipped

from .test_incremental import same

EXAMPLES = settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '20')), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

PROMPT = 'Audit every log.'

LINES = ['INFO ok id=7', 'ERROR payments failed code=500', 'CHANGE: use UTC', 'UPDATE rows=3', 'w w w']


def _context() -> CompactionContext:
    run = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), prompt=PROMPT)
    return CompactionContext(run=run, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())


def _copied(messages: list[ModelMessage]) -> list[ModelMessage]:
    return [replace(m, parts=[replace(p) for p in m.parts]) for m in messages]  # pyright: ignore[reportArgumentType]


@st.composite
def steps(draw: st.DrawFn) -> list[ModelMessage]:
    """One tool step (a response calling a tool, the request returning it), sometimes a user turn after it."""
    number = draw(st.integers(0, 10**6))
    tool = draw(st.sampled_from(['read_log', 'write_file']))
    lines = draw(st.lists(st.sampled_from(LINES), min_size=1, max_size=30))
    parts: list[Any] = [ToolCallPart(tool, {'n': number}, tool_call_id=f'c{number}')]
    if draw(st.booleans()):
        parts.insert(0, TextPart(draw(st.sampled_from(['Reading on.', 'The payments error matters here.']))))
    step: list[ModelMessage] = [
        ModelResponse(parts=parts),
        ModelRequest(parts=[ToolReturnPart(tool, '\n'.join(lines), tool_call_id=f'c{number}')]),
    ]
    if draw(st.integers(0, 6)) == 0:
        step.append(ModelResponse(parts=[TextPart('Read so far.')]))
        step.append(ModelRequest(parts=[UserPromptPart(draw(st.sampled_from(['And the payments?', 'CHANGE: UTC'])))]))
    return step


ACTIONS = st.sampled_from(['grow', 'grow', 'grow', 'replace', 'remove', 'edit', 'content'])


def _changed(history: list[ModelMessage], action: str, at: int) -> list[ModelMessage]:
    """*history* after the user's change between two requests."""
    if action == 'replace':  # `message_history` replaced by an equal history of other objects
        return _copied(history)
    if len(history) < 3:
        return history
    index = 1 + at % (len(history) - 1)
    if action == 'remove':  # a message (or the tail from it) removed
        return [*history[:index], *history[index + 1 :]] if at % 2 else history[:index]
    if action == 'edit':  # a message swapped for an equal copy
        changed = list(history)
        changed[index] = replace(history[index], parts=[replace(p) for p in history[index].parts])  # pyright: ignore[reportArgumentType]
        return changed
    if action == 'content':  # a result replaced by a copy with other content
        for position in [*range(index, len(history)), *range(index)]:
            message = history[position]
            if isinstance(message, ModelRequest) and message.parts and isinstance(message.parts[0], ToolReturnPart):
                result = replace(message.parts[0], content=f'ERROR edited by the user {at}')
                changed = list(history)
                changed[position] = replace(message, parts=[result, *message.parts[1:]])
                return changed
    return history


def _outcome(outcome: Outcome | Skipped) -> object:
    """What a compaction gives, comparable across equal histories of other objects."""
    if isinstance(outcome, Skipped):
        return outcome
    return outcome.messages, outcome.record.to_metadata()


@EXAMPLES
@given(
    first=st.lists(steps(), max_size=5),
    requests=st.lists(st.tuples(ACTIONS, st.lists(steps(), max_size=3), st.integers(0, 50)), min_size=1, max_size=8),
    max_chars=st.sampled_from([300, 600, 16_000]),
)
@pytest.mark.anyio
async def test_a_live_run_s_compaction_is_a_cold_compaction_of_the_same_history(
    first: list[list[ModelMessage]], requests: list[tuple[str, list[list[ModelMessage]], int]], max_chars: int
) -> None:
    """Requests below the trigger read the steps ahead; each compaction (checkpoint text, boundary record, kept
    messages) is a fresh reset's on a copy of the history never seen. A small `max_chars` leaves results unread."""
    opening = ModelRequest(parts=[SystemPromptPart('You audit logs.'), UserPromptPart(PROMPT)])
    history: list[ModelMessage] = [opening, *(m for step in first for m in step)]
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=40, max_chars=max_chars)
    for action, new, at in requests:
        history = [*_changed(history, action, at), *(m for step in new for m in step)]
        reset._read_arrived(history)  # pyright: ignore[reportPrivateUsage]  # its hook below the trigger
        if at % 4 == 0:  # a compaction at this request (its history is not saved here)
            fresh = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=40, max_chars=max_chars)
            cold = await run_compaction(fresh, _copied(history), _context())
            assert _outcome(await run_compaction(reset, history, _context())) == _outcome(cold)
    same(segment(history, prompt=PROMPT), segment_fresh(_copied(history), prompt=PROMPT))
    fresh = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=40, max_chars=max_chars)
    cold = await run_compaction(fresh, _copied(history), _context())
    assert _outcome(await run_compaction(reset, history, _context())) == _outcome(cold)
