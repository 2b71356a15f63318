"""A cold reset's one-loop reading, attacked where it could part from the step-by-step reading it shortcuts.

A reset reads the plain tool steps of a history never seen in one loop (`_entries_of`), segmentation measures a plain
tool loop as it reads it (`_tool_loop_state`), and instructions without markers skip tool output (`_gather`). Each
must give what the readings before gave, whatever the user configured or does while the history is read.
"""

from __future__ import annotations

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
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RequestUsage, RunUsage

from pydantic_ai_compaction import InstructionSources, ResetToCheckpoint, Trigger
from pydantic_ai_compaction.processors.strategies.reset import (
    _no_entries,  # pyright: ignore[reportPrivateUsage]
)
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.engine import run_compaction
from pydantic_ai_compaction.runtime.instructions import gather_instructions
from pydantic_ai_compaction.runtime.segment import ConversationView, messages_tokens, segment
from pydantic_ai_compaction.runtime.validate import Outcome, Skipped

from . import segment_reference as reference
from .test_segment_cold import as_reference, fresh

EXAMPLES = settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '25')), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

PROMPT = 'Audit every log.'


def _context() -> CompactionContext:
    run = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), prompt=PROMPT)
    return CompactionContext(run=run, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())


def _outcome(outcome: Outcome | Skipped) -> object:
    """What a compaction gives, comparable across two resets (the messages and the record)."""
    if isinstance(outcome, Skipped):
        return outcome
    return outcome.messages, outcome.record.to_metadata()


def _loop(contents: list[str], name: str = 'read_log') -> list[ModelMessage]:
    """An opening, a plain tool step per content, then a user turn."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(PROMPT)])]
    for step, content in enumerate(contents):
        history.append(ModelResponse(parts=[ToolCallPart(name, {'index': step}, tool_call_id=f'c{step}')]))
        history.append(ModelRequest(parts=[ToolReturnPart(name, content, tool_call_id=f'c{step}')]))
    history.append(ModelResponse(parts=[TextPart('Read them all.')]))
    history.append(ModelRequest(parts=[UserPromptPart('next')]))
    return history


def _step_by_step(reset: ResetToCheckpoint[None], view: ConversationView) -> list[tuple[Any, ...]]:
    """The entries of *view*'s exchanges as the reset read them before the one loop: each by `_exchange_entries`."""
    return [
        () if _no_entries(exchange) else reset._exchange_entries(view, exchange)  # pyright: ignore[reportPrivateUsage]
        for exchange in view.exchanges
    ]


def _shrinking_reset() -> ResetToCheckpoint[None]:
    """A reset whose extractor, at its first call, lowers the excerpt the results after are read with."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=40)

    def extract(call: ToolCallPart, text: str) -> list[str]:
        reset.excerpt_chars = 3  # a user's extractor tuning the reset as it reads
        return [f'{len(text)} chars read']

    reset.extract = extract
    return reset


def test_an_excerpt_changed_while_the_history_is_read_reads_the_later_steps_as_the_step_by_step_reading() -> None:
    """A short result after the extractor lowered `excerpt_chars` is extracted, as the step-by-step reading does.

    The one loop took the excerpt once, at its start: the steps read after the change were carried whole.
    """
    history = _loop(['w' * 100, 'ok 7', 'ok 8'])
    view = segment(fresh(history))
    expected = _step_by_step(_shrinking_reset(), view)
    assert expected[2] == (
        ('read', 'read_log({"index":1}) → success, 4 chars', 0, 'read_log'),
        ('found', 'read_log({"index":1}): 4 chars read', 23, 'read_log'),
    )
    assert _shrinking_reset()._entries_of(view, view.exchanges) == expected  # pyright: ignore[reportPrivateUsage]


@pytest.mark.anyio
async def test_an_excerpt_changed_while_the_history_is_read_gives_the_checkpoint_the_step_by_step_reading_gives() -> (
    None
):
    """The user-visible form of the above: the checkpoint lists the extractor's fact, not the whole result."""
    history = _loop(['w' * 3_000, *(f'row {n} ' + 'x' * 20 for n in range(20))])
    outcome = await run_compaction(_shrinking_reset(), history, _context())
    assert isinstance(outcome, Outcome)
    found = outcome.record.to_metadata()['extra']['checkpoint']['found']
    assert found[:3] == [
        'read_log({"index":0}): 3000 chars read',
        'read_log({"index":1}): 26 chars read',
        'read_log({"index":2}): 26 chars read',
    ]
