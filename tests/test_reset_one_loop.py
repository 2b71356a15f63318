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


def test_the_entries_read_in_one_loop_are_the_step_by_step_reading_s_and_call_no_extractor() -> None:
    """The one loop reads no result's facts: the extractor is not called, and the entries are the step-by-step
    reading's (the one loop once took the excerpt at its start, and an extractor lowering it changed the rest)."""
    history = _loop(['w' * 100, 'ok 7', 'ok 8'])
    view = segment(fresh(history))
    expected = _step_by_step(_shrinking_reset(), view)
    assert expected[2] == (('read', 'read_log({"index":1}) → success, 4 chars', 0, 'read_log'),)
    reset = _shrinking_reset()
    assert reset._entries_of(view, view.exchanges) == expected  # pyright: ignore[reportPrivateUsage]
    assert reset.excerpt_chars == 40  # the extractor was not called


@pytest.mark.anyio
async def test_an_excerpt_changed_while_the_history_is_read_gives_the_checkpoint_the_step_by_step_reading_gives() -> (
    None
):
    """Facts are read newest first, each result with the settings as they are when it is read: the results before
    the long one, read after the extractor lowered `excerpt_chars`, are extracted, not carried whole."""
    history = _loop([*(f'row {n} ' + 'x' * 20 for n in range(3)), 'w' * 3_000])
    outcome = await run_compaction(_shrinking_reset(), history, _context())
    assert isinstance(outcome, Outcome)
    found = outcome.record.to_metadata()['extra']['checkpoint']['found']
    assert found == [
        'read_log({"index":0}): 26 chars read',
        'read_log({"index":1}): 26 chars read',
        'read_log({"index":2}): 26 chars read',
        'read_log({"index":3}): 3000 chars read',
    ]


KEYS = st.sampled_from(
    ['a', 'A', 'b', 'B', 'é', 'E', 'ß', 'SS', '𝒳', '\uffff', 'ﬀ', '', 'k/', 'z\u2028', 'c\x01', 'a\ud800']
)
SCALARS = st.one_of(
    st.sampled_from([0, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, True, False, None]),
    st.text(
        alphabet=st.sampled_from(['a', ' ', '/', '"', '\\', '\u2028', '\x00', '\x7f', 'é', '𝒳', '\ud800']), max_size=6
    ),
)
NAMES = st.sampled_from(['read_log', 'write_file', 'Read_Log', 'edit', 'a(b', 'x:y', 'é', ' pad ', 'g' * 300])
CONTENTS = st.one_of(
    st.sampled_from(['', '  ', 'ok 7', 'é  ü\n', 'lone \ud800', 'x' * 39, 'x' * 40, 'x' * 41, 'z' * 999, 'z' * 1_000]),
    st.text(max_size=50),
)


@st.composite
def plain_loops(draw: st.DrawFn) -> list[ModelMessage]:
    """An opening, then steps of one call with flat arguments of odd keys and values and a short result."""
    history: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart('You audit.'), UserPromptPart(PROMPT)])]
    for step in range(draw(st.integers(1, 8))):
        call_id = f'c{step}'
        parts: list[Any] = []
        if draw(st.booleans()):
            parts.append(ThinkingPart('weighing it', signature=draw(st.sampled_from([None, 'sig']))))
        args = draw(st.dictionaries(KEYS, SCALARS, max_size=10))
        parts.append(ToolCallPart(draw(NAMES), args, tool_call_id=call_id))
        outcome = draw(st.sampled_from(['success', 'success', 'success', 'failed', 'denied']))
        history.append(ModelResponse(parts=parts, usage=RequestUsage(output_tokens=draw(st.sampled_from([0, 900])))))
        result = ToolReturnPart('read_log', draw(CONTENTS), tool_call_id=call_id, outcome=outcome)
        history.append(ModelRequest(parts=[result], instructions=draw(st.sampled_from([None, None, '', 'Be terse.']))))
    history.append(ModelResponse(parts=[TextPart('Read them all.')]))
    history.append(ModelRequest(parts=[UserPromptPart('next')]))
    return history


@EXAMPLES
@given(plain_loops(), st.sampled_from([0, 40, 1_000]), st.sampled_from(['write|edit', '^$', '(?i)LOG']))
def test_flat_arguments_of_any_keys_and_values_are_read_in_one_loop_as_step_by_step(
    history: list[ModelMessage], excerpt: int, writes: str
) -> None:
    """Keys differing in case or past the BMP, integers at 64 bits' edges, escapes, lone surrogates: read alike.

    Read twice: the first reading labels the tool names, so the second reads its plain steps in one loop.
    """
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=excerpt, write_tools=writes)
    view = segment(fresh(history), prompt=PROMPT)
    as_reference(view, reference.segment_fresh(fresh(history), prompt=PROMPT))
    for _ in range(2):
        assert reset._entries_of(view, view.exchanges) == _step_by_step(reset, view)  # pyright: ignore[reportPrivateUsage]


class _ReadsToolOutput(InstructionSources):
    """Sources that read lines as `InstructionSources` does, through an override: tool output is not skipped."""

    def marked_lines(self, part: object, text_of: Any) -> tuple[str, ...]:
        return super().marked_lines(part, text_of)


class _Subclassed(ToolReturnPart):
    """A tool return of another class (tool-search and capability-load returns subclass `ToolReturnPart`)."""


@st.composite
def turns(draw: st.DrawFn) -> list[ModelMessage]:
    """A conversation of user turns and tool steps, results of any class, tool content as user parts."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(PROMPT)])]
    for step in range(draw(st.integers(1, 6))):
        call_id = f'c{step}'
        history.append(ModelResponse(parts=[ToolCallPart('read_log', {'n': step}, tool_call_id=call_id)]))
        kind = draw(st.sampled_from([ToolReturnPart, _Subclassed]))
        content = draw(st.sampled_from(['CHANGE: use UTC', 'ok', {'rows': ['CHANGE: x']}]))
        parts: list[Any] = [kind('read_log', content, tool_call_id=call_id)]
        if draw(st.booleans()):
            parts.append(UserPromptPart(draw(st.sampled_from(['CHANGE: be brief', 'Use metric units.']))))
        history.append(ModelRequest(parts=parts))
        if draw(st.booleans()):
            history.append(ModelResponse(parts=[TextPart('Noted.')]))
            history.append(ModelRequest(parts=[UserPromptPart(draw(st.sampled_from(['Now the rest.', ' '])))]))
    history.append(ModelResponse(parts=[TextPart('Done.')]))
    history.append(ModelRequest(parts=[UserPromptPart('next')]))
    return history


@EXAMPLES
@given(turns(), st.booleans())
def test_sources_without_markers_gather_what_they_gathered_reading_tool_output(
    history: list[ModelMessage], user_prompts: bool
) -> None:
    """Skipping tool output without markers finds what reading it finds: the user's prompts, never tool output."""
    view = segment(history, prompt=PROMPT)
    plain = gather_instructions(view, InstructionSources(markers=(), user_prompts=user_prompts))
    assert plain == gather_instructions(view, _ReadsToolOutput(markers=(), user_prompts=user_prompts))
    assert not any('CHANGE: use UTC' in line or 'CHANGE: x' in line for line in plain)


def test_a_warm_memo_and_a_cold_one_measure_a_plain_loop_alike() -> None:
    """Messages a trigger measured before (remembered: large structured arguments) segment as fresh ones do."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(PROMPT)], instructions='Be brief.')]
    for step in range(5):
        call = ToolCallPart('read_log', {'blob': 'x' * 300, 'index': step}, tool_call_id=f'c{step}')
        history.append(ModelResponse(parts=[call], usage=RequestUsage(output_tokens=step * 40)))
        history.append(ModelRequest(parts=[ToolReturnPart('read_log', ['y' * 300], tool_call_id=f'c{step}')]))
    history.append(ModelRequest(parts=[UserPromptPart('next')]))
    expected = reference.segment_fresh(fresh(history), prompt=PROMPT)
    warm = fresh(history)
    messages_tokens(warm[3:])  # the last steps only: the loop reads remembered and new messages in turn
    view = segment(warm, prompt=PROMPT)
    as_reference(view, expected)
    assert view.instructions == 'Be brief.'
