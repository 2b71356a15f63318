"""A reset reads each tool step's entries as the step arrives, and its checkpoint is the one a fresh reset writes.

In a run, `ResetToCheckpoint.before_model_request` reads the newest steps of each request (those not read yet), so
the run's first compaction finds them read. The history changes between requests as a run's does, and as a run
never does (truncated, copied, a step replaced by an edited copy, another history): every checkpoint proposed
along the way must be the one a reset that never saw the history proposes.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import ResetToCheckpoint, Trigger
from pydantic_ai_compaction.protocols.types import Proposal
from pydantic_ai_compaction.runtime import segment
from pydantic_ai_compaction.runtime.context import CompactionContext

EXAMPLES = settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '20')), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

LINES = ['INFO ok id=7', 'INFO ok id=8', 'ERROR payments failed code=500', 'CHANGE: use UTC', 'UPDATE rows=3', 'w w w']


def _context() -> CompactionContext:
    run = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), prompt='Audit.')
    return CompactionContext(run=run, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())


@st.composite
def steps(draw: st.DrawFn) -> list[ModelMessage]:
    """One tool step: a response (maybe with words, maybe a write, maybe two calls) and the request returning it."""
    number = draw(st.integers(0, 10**6))
    tool = draw(st.sampled_from(['read_log', 'write_file', 'grep']))
    lines = draw(st.lists(st.sampled_from(LINES), min_size=1, max_size=40))
    content: Any = '\n'.join(lines) if draw(st.booleans()) else {'rows': lines}
    parts: list[Any] = [ToolCallPart(tool, {'n': number}, tool_call_id=f'c{number}')]
    if draw(st.booleans()):
        parts.insert(0, TextPart(draw(st.sampled_from(['Reading on.', 'The payments error matters here.']))))
    returns: list[Any] = [
        ToolReturnPart(tool, content, tool_call_id=f'c{number}', outcome=draw(st.sampled_from(['success', 'failed'])))
    ]
    if draw(st.integers(0, 5)) == 0:  # two calls answered together: not a step read ahead
        parts.append(ToolCallPart('grep', {'n': -number}, tool_call_id=f'd{number}'))
        returns.append(ToolReturnPart('grep', 'x' * 500, tool_call_id=f'd{number}'))
    if draw(st.integers(0, 7)) == 0:  # the return answers no call of the response
        returns[0] = replace(returns[0], tool_call_id='elsewhere')
    return [ModelResponse(parts=parts), ModelRequest(parts=returns)]


ACTIONS = st.sampled_from(['grow', 'grow', 'grow', 'truncate', 'copy', 'edit', 'turn'])


def _copied(messages: list[ModelMessage]) -> list[ModelMessage]:
    return [replace(m, parts=[replace(p) for p in m.parts]) for m in messages]  # pyright: ignore[reportArgumentType]


async def _proposal(reset: ResetToCheckpoint[None], messages: list[ModelMessage]) -> Proposal:
    return await reset.propose(segment(messages), _context())


@EXAMPLES
@given(
    first=st.lists(steps(), max_size=6),
    requests=st.lists(st.tuples(ACTIONS, st.lists(steps(), max_size=3), st.integers(0, 30)), min_size=1, max_size=8),
    excerpt=st.sampled_from([0, 40, 400]),
)
@pytest.mark.anyio
async def test_steps_read_as_they_arrive_give_the_checkpoint_a_fresh_reset_gives(
    first: list[list[ModelMessage]], requests: list[tuple[str, list[list[ModelMessage]], int]], excerpt: int
) -> None:
    opening = ModelRequest(parts=[UserPromptPart('Audit every log.')])
    history: list[ModelMessage] = [opening, *(m for step in first for m in step)]
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=excerpt)
    for action, new, at in requests:
        if action == 'truncate':
            history = history[: max(1, min(at, len(history)))]
        elif action == 'copy':
            history = _copied(history)
        elif action == 'edit' and len(history) > 2:
            index = 1 + at % (len(history) - 1)
            message = history[index]
            history[index] = replace(message, parts=[replace(p) for p in message.parts])  # pyright: ignore[reportArgumentType]
        elif action == 'turn':
            history = [*history, ModelRequest(parts=[UserPromptPart('And the payments?')])]
        history = [*history, *(m for step in new for m in step)]
        reset._read_arrived(history)  # pyright: ignore[reportPrivateUsage]
        if at % 3 == 0 and len(history) > 1:  # a compaction at this request (its history is not saved here)
            fresh = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=excerpt)
            assert await _proposal(reset, history) == await _proposal(fresh, history)
    fresh = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=excerpt)
    assert await _proposal(reset, history) == await _proposal(fresh, history)


@pytest.mark.anyio
async def test_a_run_reads_each_step_as_it_arrives_and_its_checkpoint_is_a_fresh_resets() -> None:
    """In a real `agent.run` below the trigger, every long result is read by the request that brings it."""
    count = 12

    def read_log(index: int) -> str:
        return '\n'.join([f'log {index}', *(f'INFO ok id={index * 100 + n}' for n in range(30)), 'ERROR disk full'])

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if done < count:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': done}, tool_call_id=f'c{done}')])
        return ModelResponse(parts=[TextPart('All read.')])

    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agent = Agent(FunctionModel(model), tools=[read_log], capabilities=[reset])
    result = await agent.run('Audit every log.')
    history = result.all_messages()
    assert len(reset._facts) == count  # pyright: ignore[reportPrivateUsage]
    ours = await _proposal(reset, history)
    fresh = await _proposal(ResetToCheckpoint[None](trigger=Trigger(tokens=1)), history)
    assert ours == fresh
    assert 'ERROR disk full' in ours.summary.text  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


def test_a_user_extract_is_not_called_before_a_compaction() -> None:
    calls: list[str] = []

    def extract(call: ToolCallPart, text: str) -> list[str]:
        calls.append(call.tool_call_id)
        return [text[:10]]

    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9), extract=extract)
    big = 'x' * 1_000
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Go.')]),
        ModelResponse(parts=[ToolCallPart('read_log', {}, tool_call_id='c1')]),
        ModelRequest(parts=[ToolReturnPart('read_log', big, tool_call_id='c1')]),
    ]
    reset._read_arrived(history)  # pyright: ignore[reportPrivateUsage]
    default = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    default._read_arrived(history)  # pyright: ignore[reportPrivateUsage]
    assert (calls, len(reset._facts), len(default._facts)) == ([], 0, 1)  # pyright: ignore[reportPrivateUsage]
