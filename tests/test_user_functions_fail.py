"""A user's function that fails inside a compaction is reported, named, and the run goes on with the fallback.

`ResetToCheckpoint(checkpoint=...)` returning `None` (a renderer that forgot its `return`) failed when the runtime
wrote the boundary; one that raised, or an `extract` that raised, left the run compacting by the fallback alone
with nothing said unless an observer was set. A summary whose text is not a `str`, from any strategy, now makes
the runtime fall back.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import CompactionEvent, ResetToCheckpoint, Trigger
from pydantic_ai_compaction.protocols.types import Proposal, Summary
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.engine import Outcome, run_compaction
from pydantic_ai_compaction.runtime.segment import ConversationView

from .test_reset_scale import _context, _loop


def _fallback(outcome: object) -> tuple[str | None, str | None]:
    assert isinstance(outcome, Outcome)
    return outcome.record.fallback_reason, outcome.record.detail


@pytest.mark.parametrize('value', [None, 42, b'checkpoint'])
def test_a_checkpoint_renderer_returning_no_text_is_named_and_the_runtime_falls_back(value: object) -> None:
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), checkpoint=lambda ctx, view: value)  # pyright: ignore[reportArgumentType, reportUnknownLambdaType]
    with pytest.warns(RuntimeWarning, match=rf'ResetToCheckpoint\.checkpoint returned {value!r}, not a str'):
        outcome = asyncio.run(run_compaction(reset, _loop(['long'] * 10), _context()))
    reason, detail = _fallback(outcome)
    assert reason == 'compactor_error'
    assert detail == (
        f'TypeError: ResetToCheckpoint.checkpoint returned {value!r}, not a str: '
        'this compaction falls back to keeping the newest exchanges'
    )


def test_a_checkpoint_renderer_that_raises_is_warned_in_a_real_run() -> None:
    def checkpoint(ctx: Any, view: ConversationView) -> str:
        raise RuntimeError('my renderer broke')

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if done < 6:
            return ModelResponse(parts=[ToolCallPart('read_log', {'i': done}, tool_call_id=f'c{done}')])
        return ModelResponse(parts=[TextPart('done')])

    def read_log(i: int) -> str:
        return f'log {i}\n' + ' '.join(f'GET /health 200 id={i}-{n}' for n in range(150))

    events: list[CompactionEvent] = []
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1_500), checkpoint=checkpoint, observer=events.append)
    agent = Agent(FunctionModel(model), tools=[read_log], capabilities=[reset])
    raised = r"ResetToCheckpoint\.checkpoint raised RuntimeError\('my renderer broke'\)"
    with pytest.warns(RuntimeWarning, match=raised):
        result = agent.run_sync('Read every log.')
    assert result.output == 'done'
    fell_back = [event for event in events if event.record is not None and event.record.fallback_reason]
    assert fell_back
    assert fell_back[0].record is not None
    assert fell_back[0].record.detail == 'RuntimeError: my renderer broke'


def test_an_extractor_that_raises_is_warned_and_the_runtime_falls_back() -> None:
    def extract(call: ToolCallPart, text: str) -> list[str]:
        raise KeyError('owner')

    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=extract)
    with pytest.warns(RuntimeWarning, match=r"ResetToCheckpoint\.extract raised KeyError\('owner'\)"):
        outcome = asyncio.run(run_compaction(reset, _loop(['long'] * 10), _context()))
    assert _fallback(outcome) == ('compactor_error', "KeyError: 'owner'")


def test_an_extractor_whose_lines_raise_as_they_are_read_is_warned_and_the_runtime_falls_back() -> None:
    def extract(call: ToolCallPart, text: str) -> Iterator[str]:
        yield 'owner=ops'
        raise KeyError('region')

    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=extract)
    said = r"ResetToCheckpoint\.extract raised KeyError\('region'\) while its lines were read"
    with pytest.warns(RuntimeWarning, match=said):
        outcome = asyncio.run(run_compaction(reset, _loop(['long'] * 10), _context()))
    assert _fallback(outcome) == ('compactor_error', "KeyError: 'region'")


def test_an_extractor_returning_one_text_gives_its_lines_not_its_characters() -> None:
    def extract(call: ToolCallPart, text: str) -> str:
        return 'INCIDENT payments down\nowner=ops'

    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=extract)  # pyright: ignore[reportArgumentType]
    outcome = asyncio.run(run_compaction(reset, _loop(['long'] * 10), _context()))
    assert isinstance(outcome, Outcome)
    found = outcome.record.to_metadata()['extra']['checkpoint']['found']
    # The last step is the one in progress, kept verbatim.
    calls = [f'read_log({{"index":{step}}})' for step in range(9)]
    assert found == [line for call in calls for line in (f'{call}: INCIDENT payments down', f'{call}: owner=ops')]


@dataclass
class _NoText:
    """A user's strategy whose summary text is not a `str`."""

    text: Any

    @property
    def strategy_name(self) -> str:
        return 'mine'

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        return Proposal.drop_all(Summary(self.text))


@pytest.mark.parametrize('text', [None, ['a list'], 3.5])
def test_any_strategy_s_summary_that_is_not_text_makes_the_runtime_fall_back(text: object) -> None:
    outcome = asyncio.run(run_compaction(_NoText(text), _loop(['long'] * 10), _context()))
    assert _fallback(outcome) == ('schema', f'Summary.text must be a str, not {type(text).__name__}: {text!r}')


@pytest.mark.parametrize('value', [None, 42, b'INCIDENT\nowner'])
def test_an_extractor_returning_no_lines_is_named_with_its_value(value: object) -> None:
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=lambda call, text: value)  # pyright: ignore[reportArgumentType, reportUnknownLambdaType]
    with pytest.warns(RuntimeWarning, match=rf'ResetToCheckpoint\.extract returned {re.escape(repr(value))}, not a'):
        outcome = asyncio.run(run_compaction(reset, _loop(['long'] * 10), _context()))
    assert _fallback(outcome)[0] == 'compactor_error'


@pytest.mark.parametrize('line', [None, 7, b'owner=ops'])
def test_an_extractor_line_that_is_not_text_is_named_and_never_listed_as_a_fact(line: object) -> None:
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=lambda call, text: ['owner=ops', line])  # pyright: ignore[reportArgumentType, reportUnknownLambdaType]
    said = rf'ResetToCheckpoint\.extract returned a line {re.escape(repr(line))}, not a str'
    with pytest.warns(RuntimeWarning, match=said):
        outcome = asyncio.run(run_compaction(reset, _loop(['long'] * 10), _context()))
    assert _fallback(outcome)[0] == 'compactor_error'
