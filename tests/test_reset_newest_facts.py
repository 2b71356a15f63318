"""A reset reads facts from the newest results only, until they fill `max_chars`, and counts the results before.

Found is the first section a checkpoint folds, oldest first, so the facts of older results were read only to be
folded into a count: reading each line of every result of a long history cost up to 18 times what clearing it
costs. The extractor is now called newest first and stops once the facts fill `max_chars`; Found says how many
earlier results were not read, and a rewrite carries that count forward.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_compaction import ResetToCheckpoint, Trigger
from pydantic_ai_compaction.processors.strategies import reset as reset_module
from pydantic_ai_compaction.processors.strategies.reset import FactExtractor
from pydantic_ai_compaction.runtime import segment
from pydantic_ai_compaction.runtime.engine import Outcome, run_compaction

from .test_reset_scale import _context

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '15'))

_LOG = '\n'.join(['GET /health 200'] * 79 + ['INCIDENT payments down owner=ops'])
"""A result longer than the excerpt: it goes through the extractor."""

_FACT = 'F' * 120
"""What the counting extractor below finds in every result: one fact line of a known length."""


def _history(count: int, *, args: Sequence[str] | None = None, content: str = _LOG) -> list[ModelMessage]:
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Audit every log.')])]
    for step in range(count):
        path = args[step] if args is not None else f'{step}.log'
        history.append(ModelResponse(parts=[ToolCallPart('read_log', {'path': path}, tool_call_id=f'c{step}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('read_log', content, tool_call_id=f'c{step}')]))
    history.append(ModelResponse(parts=[TextPart('Read them all.')]))
    history.append(ModelRequest(parts=[UserPromptPart('Now the summary.')]))
    return history


def _counting(calls: list[str]) -> FactExtractor:
    def extract(call: ToolCallPart, text: str) -> list[str]:
        del text
        calls.append(str(call.args_as_dict()['path']))
        return [_FACT]

    return extract


def _compact(reset: ResetToCheckpoint[None], history: list[ModelMessage]) -> Outcome:
    outcome = asyncio.run(run_compaction(reset, history, _context(), min_saving=0.0))
    assert isinstance(outcome, Outcome)
    return outcome


def _checkpoint(outcome: Outcome) -> str:
    """The checkpoint's text: the first part after the opening request."""
    content = getattr(outcome.messages[1].parts[0], 'content', None)
    assert isinstance(content, str)
    return content


def _read_until_full(max_chars: int) -> int:
    """Results read by the rule: newest first, until their Found lines (`- call: fact`) reach `max_chars`."""
    line = len('read_log({"path":"000.log"}): ') + len(_FACT) + 3
    return -(-max_chars // line)


def test_only_the_newest_results_are_read_and_the_earlier_ones_are_counted() -> None:
    reads: set[int] = set()
    for count in (60, 600):
        calls: list[str] = []
        reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=_counting(calls), max_chars=4_000)
        outcome = _compact(reset, _history(count, args=[f'{step:03}.log' for step in range(count)]))
        read = len(calls)
        reads.add(read)
        # Newest first; fewer than fill `max_chars`, since the calls listed take room too, and the oldest read is
        # folded (its fact is counted): an older one would be folded as well.
        assert calls == [f'{step:03}.log' for step in range(count - 1, count - 1 - read, -1)]
        assert 1 < read < _read_until_full(4_000)
        extra = outcome.record.to_metadata()['extra']
        assert extra['unread'] == count - read
        assert extra['omitted']['found'] >= 1
        text = _checkpoint(outcome)
        assert f'- (facts of {count - read:,} earlier results not read; ' in text  # then the facts folded
        assert f'read_log({{"path":"{count - 1:03}.log"}}) → success' in text  # the newest, with its fact under it
        assert f'  - {_FACT}' in text
    assert len(reads) == 1  # as many whatever the history's length


def test_a_history_whose_facts_fit_is_read_whole_and_says_nothing_of_unread_results() -> None:
    calls: list[str] = []
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=_counting(calls))
    outcome = _compact(reset, _history(5))
    assert calls == ['4.log', '3.log', '2.log', '1.log', '0.log']
    assert 'unread' not in outcome.record.to_metadata()['extra']
    assert 'not read' not in _checkpoint(outcome)


def test_a_fact_repeated_is_listed_once_under_the_newest_call_giving_it() -> None:
    """The same call giving the same fact twice: listed once, at the newer call's place (after `b.log`'s)."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=lambda call, text: ['disk full on db-1'])
    sections, _ = reset.sections(segment(_history(3, args=['a.log', 'b.log', 'a.log'])))
    found = sections['found']
    assert found == ['read_log({"path":"b.log"}): disk full on db-1', 'read_log({"path":"a.log"}): disk full on db-1']


def test_a_rewrite_counts_the_results_earlier_checkpoints_did_not_read() -> None:
    """A reset that rewrites the checkpoints into one says how many results none of them read facts from."""
    calls: list[str] = []
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=_counting(calls), max_chars=4_000)
    first = _compact(reset, _history(100))
    unread = first.record.to_metadata()['extra']['unread']
    assert unread == 100 - len(calls)
    calls.clear()
    grown = [*first.messages]
    for step in range(100, 160):
        grown.append(ModelResponse(parts=[ToolCallPart('read_log', {'path': f'{step}.log'}, tool_call_id=f'c{step}')]))
        grown.append(ModelRequest(parts=[ToolReturnPart('read_log', _LOG, tool_call_id=f'c{step}')]))
    grown.append(ModelResponse(parts=[TextPart('And those.')]))
    grown.append(ModelRequest(parts=[UserPromptPart('Go on.')]))
    second = _compact(reset, grown)
    extra = second.record.to_metadata()['extra']
    assert extra.get('rewrote') == 1  # the first checkpoint filled `max_chars`: the two are rewritten into one
    assert 0 < len(calls) < 60
    assert extra['unread'] == unread + 60 - len(calls)
    text = _checkpoint(second)
    assert f'- (facts of {extra["unread"]:,} earlier results not read;' in text


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.lists(st.sampled_from(['short', 'long', 'empty', 'failed']), min_size=1, max_size=60),
    st.sampled_from([200, 1_000, 4_000, 16_000]),
)
def test_the_results_read_are_the_newest_and_every_earlier_one_is_counted(kinds: list[str], max_chars: int) -> None:
    calls: list[int] = []

    def extract(call: ToolCallPart, text: str) -> list[str]:
        calls.append(int(call.args_as_dict()['step']))
        return [line for line in text.splitlines() if 'INCIDENT' in line]

    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Audit every log.')])]
    for step, kind in enumerate(kinds):
        content = {'short': f'ok {step}', 'long': _LOG + f' step={step}', 'empty': '', 'failed': 'boom'}[kind]
        outcome = 'failed' if kind == 'failed' else 'success'
        history.append(ModelResponse(parts=[ToolCallPart('read_log', {'step': step}, tool_call_id=f'c{step}')]))
        history.append(
            ModelRequest(parts=[ToolReturnPart('read_log', content, tool_call_id=f'c{step}', outcome=outcome)])
        )
    history.append(ModelResponse(parts=[TextPart('Read them all.')]))
    history.append(ModelRequest(parts=[UserPromptPart('Now the summary.')]))
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=extract, max_chars=max_chars)
    outcome = asyncio.run(run_compaction(reset, history, _context(), min_saving=0.0))
    if not isinstance(outcome, Outcome):
        return  # nothing to gain: skipped, nothing was read
    extra = outcome.record.to_metadata()['extra']
    unread = extra.get('unread', 0)
    # Every step before the first one read is counted, none after it; the long results after it were extracted,
    # newest first, and none before it.
    longs = [step for step, kind in enumerate(kinds) if kind == 'long' and step >= unread]
    assert calls == sorted(longs, reverse=True)
    steps = {int(line.split('"step":')[1].split('}')[0]) for line in extra['checkpoint']['found']}
    assert all(step >= unread for step in steps)


def test_a_call_repeated_is_counted_once_as_progress_counts_it() -> None:
    """A status polled with the same arguments and output size is one Read entry: it is one earlier result too, not
    one per poll (the checkpoint said `1 tool call completed` and `facts of 27 earlier results not read`)."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Watch the job.')])]
    for poll in range(40):
        out = '\n'.join(['INFO heartbeat ok'] * 40 + [f'ERROR batch {poll:04} failed'])
        history.append(ModelResponse(parts=[ToolCallPart('job_status', {'job': 1}, tool_call_id=f'c{poll}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('job_status', out, tool_call_id=f'c{poll}')]))
    history.append(ModelResponse(parts=[TextPart('Still failing.')]))
    history.append(ModelRequest(parts=[UserPromptPart('Go on.')]))
    outcome = _compact(ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=600), history)
    text = _checkpoint(outcome)
    assert outcome.record.to_metadata()['extra']['unread'] == 1
    assert '- (facts of 1 earlier result not read; ' in text
    assert 'Progress: 1 tool call completed' in text


def test_a_forged_count_in_an_earlier_record_is_ignored() -> None:
    """A count past any real history (a record edited in storage) is not carried: it would grow at each rewrite
    past what `int` writes as text (4,300 digits), and every later reset would fail."""
    calls: list[str] = []
    first = _compact(
        ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=_counting(calls), max_chars=4_000), _history(100)
    )
    unread = first.record.to_metadata()['extra']['unread']
    raw = ModelMessagesTypeAdapter.dump_json(list(first.messages)).decode()
    assert raw.count(f'"unread":{unread}') == 1
    for forged in ('9' * 4_300, str(10**30)):
        messages = ModelMessagesTypeAdapter.validate_json(raw.replace(f'"unread":{unread}', f'"unread":{forged}'))
        for step in range(100, 160):
            call = ToolCallPart('read_log', {'path': f'{step}.log'}, tool_call_id=f'c{step}')
            messages.append(ModelResponse(parts=[call]))
            messages.append(ModelRequest(parts=[ToolReturnPart('read_log', _LOG, tool_call_id=f'c{step}')]))
        messages.append(ModelResponse(parts=[TextPart('And those.')]))
        messages.append(ModelRequest(parts=[UserPromptPart('Go on.')]))
        reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=_counting(calls), max_chars=4_000)
        calls.clear()
        second = _compact(reset, messages)
        extra = second.record.to_metadata()['extra']
        assert second.record.fallback_reason is None and extra.get('rewrote') == 1
        assert extra['unread'] == 60 - len(calls)


def test_the_checkpoint_of_a_long_history_read_from_its_newest_results(compaction_snapshot: Any) -> None:
    """The whole text the agent reads after a reset of 60 80-line logs within 2,500 characters: the newest facts
    under their calls, the older calls folded into counts, the results whose facts were not read counted."""
    history = _history(60, args=[f'{step:02}.log' for step in range(60)], content=_LOG.replace('payments', 'db'))
    outcome = _compact(ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=2_500), history)
    text = _checkpoint(outcome)
    assert 'earlier results not read' in text and len(text) <= 2_500
    assert text == compaction_snapshot


_STEPS = st.lists(st.sampled_from(['short', 'long', 'long', 'write', 'failed', 'turn']), min_size=1, max_size=50)


def _step(step: int, kind: str) -> list[ModelMessage]:
    if kind == 'turn':
        return [ModelResponse(parts=[TextPart(f'checked {step}')]), ModelRequest(parts=[UserPromptPart(f'on {step}')])]
    tool = 'write_file' if kind == 'write' else 'read_log'
    content = {'short': f'ok {step}', 'failed': f'boom {step}'}.get(kind, _LOG.replace('payments', f'svc{step}'))
    outcome = 'failed' if kind == 'failed' else 'success'
    return [
        ModelResponse(parts=[ToolCallPart(tool, {'step': step}, tool_call_id=f'c{step}')]),
        ModelRequest(parts=[ToolReturnPart(tool, content, tool_call_id=f'c{step}', outcome=outcome)]),
    ]


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(_STEPS, _STEPS, st.sampled_from([1_000, 2_500, 6_000, 16_000]))
def test_stopping_where_the_fold_takes_facts_shows_what_reading_until_max_chars_shows(
    kinds: list[str], more: list[str], max_chars: int
) -> None:
    """The stop is an optimisation, not a choice: a checkpoint keeps the entries reading facts until they fill
    `max_chars` keeps, on a first reset and on the next one (appended or rewritten), but for a few of the oldest
    whose room the line counting the results not read takes."""
    cheap = ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=max_chars)
    full = ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=max_chars)
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Audit every log.')])]
    history += [message for step, kind in enumerate(kinds) for message in _step(step, kind)]
    for round_ in range(2):
        history = [*history, ModelResponse(parts=[TextPart('Go on.')]), ModelRequest(parts=[UserPromptPart('next')])]
        outcome = asyncio.run(run_compaction(cheap, history, _context(), min_saving=0.0))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(reset_module, '_folds_found', lambda *_: False)
            reference = asyncio.run(run_compaction(full, history, _context(), min_saving=0.0))
        if not isinstance(outcome, Outcome):
            assert not isinstance(reference, Outcome)
            return
        assert isinstance(reference, Outcome)
        ours, theirs = outcome.record.to_metadata()['extra'], reference.record.to_metadata()['extra']
        # The same entries, newest first: the line counting the results not read may take the room of a few.
        for name, kept in ours['checkpoint'].items():
            full_kept = theirs['checkpoint'][name]
            assert kept == full_kept[len(full_kept) - len(kept) :], name
            assert len(full_kept) - len(kept) <= 3, name
        start = 100 * (round_ + 1)
        history = [*outcome.messages, *(m for step, kind in enumerate(more) for m in _step(start + step, kind))]


def _checkpoint_text(outcome: Outcome) -> str:
    """Every checkpoint in the compacted history, in order."""
    return '\n'.join(
        part.content
        for message in outcome.messages
        for part in message.parts
        if isinstance(part, CompactionPart) and isinstance(part.content, str)
    )
