"""Segmentation's reusable state: what it keeps alive and when it lets go (the known limit is a strict xfail)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
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
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import BoundedSelection

SHARED_OPENING = ModelRequest(parts=[UserPromptPart('You are the support desk. Greet the customer.')])
"""A first message an application keeps at module level and starts every conversation with."""

CANNED_REPLY = ModelResponse(parts=[TextPart('Sorry, I can only help with orders. Anything else?')])
"""A reply an application keeps at module level and appends when a guard refuses an off-topic question."""


def test_a_finished_run_ending_on_a_canned_reply_is_not_kept_alive() -> None:
    # The run's later steps share their state's lists with the state whose last message is the canned reply:
    # when they go, it goes with them.
    calls = {'n': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls['n'] += 1
        return ModelResponse(parts=[ToolCallPart('fetch', {})] if calls['n'] % 4 else [TextPart('done')])

    agent = Agent(FunctionModel(respond), capabilities=[BoundedSelection[Any](budget=10**9)])

    @agent.tool_plain
    def fetch() -> str:
        return 'a customer record ' * 10_000

    first = agent.run_sync(
        'look up my orders', message_history=[SHARED_OPENING, ModelResponse(parts=[TextPart('Hello!')])]
    )
    # An off-topic question answered by the application's guard, then the customer asks again.
    history = [*first.all_messages(), ModelRequest(parts=[UserPromptPart('tell me a joke')]), CANNED_REPLY]
    second = agent.run_sync('my orders again', message_history=history)
    records = [
        weakref.ref(m)
        for m in second.all_messages()
        if isinstance(m, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in m.parts)
    ]
    assert len(records) == 6
    del first, second, history
    gc.collect()
    assert [ref() for ref in records] == [None] * 6


@pytest.mark.xfail(
    strict=True,
    reason="segmentation's newest state is forgotten only when its last message before the cut is collected: "
    'when that is an object the application keeps (a canned reply) and the run answers at once, no later state '
    'takes it along, and the finished run stays alive under the shared first message until pushed out',
)
def test_a_run_answering_at_once_after_a_canned_reply_is_not_kept_alive() -> None:
    calls = {'n': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls['n'] += 1
        return ModelResponse(parts=[ToolCallPart('fetch', {})] if calls['n'] < 4 else [TextPart('done')])

    agent = Agent(FunctionModel(respond), capabilities=[BoundedSelection[Any](budget=10**9)])

    @agent.tool_plain
    def fetch() -> str:
        return 'a customer record ' * 10_000

    first = agent.run_sync(
        'look up my orders', message_history=[SHARED_OPENING, ModelResponse(parts=[TextPart('Hello!')])]
    )
    history = [*first.all_messages(), ModelRequest(parts=[UserPromptPart('tell me a joke')]), CANNED_REPLY]
    second = agent.run_sync('my orders again', message_history=history)  # answered without a tool call
    records = [
        weakref.ref(m)
        for m in second.all_messages()
        if isinstance(m, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in m.parts)
    ]
    assert len(records) == 3
    del first, second, history
    gc.collect()
    assert [ref() for ref in records] == [None] * 3
