"""What segmentation and selection share from one request to the next stays each conversation's own.

Segmentation's remembered states of one history share one growing list of messages and exchanges, and the
selection's shape check is told which leading messages of a projection it checked before. Two conversations
that start with the same message objects and then diverge must never see each other's messages, and every
answer must be the one computed from scratch.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import BoundedSelection
from pydantic_ai_compaction.processors.views.selection import current_request_text, project, select
from pydantic_ai_compaction.runtime.project import project_request
from pydantic_ai_compaction.runtime.segment import ConversationView, segment, segment_fresh

from .reliability import histories

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same(view: ConversationView, fresh: ConversationView) -> None:
    assert view == fresh
    assert view.by_id == fresh.by_id
    assert view.text_chars == fresh.text_chars
    assert view.instructions == fresh.instructions


@EXAMPLES
@given(histories(), histories(), st.integers(1, 30), st.lists(st.booleans(), max_size=60))
def test_conversations_branching_from_a_shared_prefix_never_see_each_other(
    history: list[ModelMessage], other: list[ModelMessage], split: int, order: list[bool]
) -> None:
    # Two conversations holding the same message objects up to `split`, then each its own messages.
    split = min(split, len(history))
    first = history
    second = [*history[:split], *other[1:]]
    ends = {True: 0, False: 0}
    lengths = {True: len(first), False: len(second)}
    conversations = {True: first, False: second}
    # Grown step by step in an interleaving hypothesis chooses, then the rest of each, then earlier points again.
    steps = [*order, *([True] * len(first)), *([False] * len(second))]
    for which in steps:
        if ends[which] >= lengths[which]:
            continue
        ends[which] += 1
        prefix = conversations[which][: ends[which]]
        same(segment(prefix), segment_fresh(prefix))
    for end in range(1, max(lengths.values()) + 1):
        for which in (True, False):
            prefix = conversations[which][:end]
            same(segment(prefix), segment_fresh(prefix))


@EXAMPLES
@given(histories(), histories(), st.integers(1, 30))
def test_an_earlier_point_of_a_conversation_extended_elsewhere_segments_as_fresh(
    history: list[ModelMessage], other: list[ModelMessage], split: int
) -> None:
    # The whole conversation first (its lists grow to its end), then a branch from an earlier point: the branch
    # extends a state that is no longer at the end of the shared lists.
    for end in range(1, len(history) + 1):
        segment(history[:end])
    split = min(split, len(history))
    branch = [*history[:split], *other[1:]]
    for end in range(1, len(branch) + 1):
        same(segment(branch[:end]), segment_fresh(branch[:end]))
    # And the original again, after the branch.
    same(segment(history), segment_fresh(history))


def _loop(opening: ModelRequest, steps: int, tag: str) -> list[ModelMessage]:
    from pydantic_ai.messages import ToolReturnPart

    messages: list[ModelMessage] = [opening]
    for step in range(steps):
        messages.append(ModelResponse(parts=[ToolCallPart('read', {'i': step}, tool_call_id=f'{tag}{step}')]))
        messages.append(ModelRequest(parts=[ToolReturnPart('read', f'{tag} {step}', tool_call_id=f'{tag}{step}')]))
    return messages


def test_a_finished_conversation_is_freed_though_a_branch_of_it_lives_on() -> None:
    opening = ModelRequest(parts=[UserPromptPart('read everything')])
    trunk = _loop(opening, 6, 'a')
    for end in range(1, len(trunk) + 1):
        segment(trunk[:end])
    # A branch from an early point, kept by the application, extended on its own.
    branch = [*trunk[:5], ModelResponse(parts=[TextPart('done')]), ModelRequest(parts=[UserPromptPart('more')])]
    for end in range(5, len(branch) + 1):
        same(segment(branch[:end]), segment_fresh(branch[:end]))
    later = [weakref.ref(message) for message in trunk[5:]]
    del trunk
    gc.collect()
    assert [ref() for ref in later] == [None] * len(later)
    same(segment(branch), segment_fresh(branch))


def _fresh(messages: Sequence[ModelMessage], selection: BoundedSelection[Any], prompt: object) -> list[ModelMessage]:
    view = segment_fresh(messages, prompt=prompt)
    chosen = select(
        view,
        current_request_text(messages),
        selection.budget,
        retrieve=selection.retrieve,
        share=selection.retrieval_share,
    )
    return project(view, chosen)


def _request(messages: list[ModelMessage]) -> ModelRequestContext:
    return ModelRequestContext(
        model=TestModel(), messages=messages, model_settings=None, model_request_parameters=ModelRequestParameters()
    )


@EXAMPLES
@given(
    histories(),
    histories(),
    st.lists(st.integers(0, 40), max_size=3),
    st.lists(st.booleans(), max_size=40),
    st.sampled_from([1, 60, 10_000]),
)
@pytest.mark.anyio
async def test_the_checked_projection_is_the_fresh_one_with_calls_in_between_and_broken_histories(
    history: list[ModelMessage], other: list[ModelMessage], drops: list[int], direct: list[bool], budget: int
) -> None:
    # The shape check is told what the last projection kept: a projection computed outside the hook (never
    # checked), a history with messages left out (a refused projection) or another history must not confuse it.
    selection = BoundedSelection[Any](budget=budget)
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), prompt=None)  # pyright: ignore[reportArgumentType]
    broken = [message for index, message in enumerate(history) if index not in drops]
    lists = [
        *(history[:end] for end in range(1, len(history) + 1)),
        *(broken[:end] for end in range(1, len(broken) + 1)),
        [*history[:1], *other[1:]],
        history,
    ]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        for index, messages in enumerate(lists):
            if index < len(direct) and direct[index]:
                assert selection.selection(messages) == _fresh(messages, selection, None)
                continue
            sent = (await selection.before_model_request(ctx, _request(list(messages)))).messages
            expected = project_request(messages, _fresh(messages, selection, None), 'BoundedSelection', reason='x')
            assert sent == expected
