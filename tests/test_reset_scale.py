"""What a compaction of a long history reads once and carries forward gives what reading everything gives.

The validator's passes read only the kept exchanges, the runtime gathers the agent's notes from the new
messages only, and a reset counts the entries it folds from labels carried with its reading: each is checked
here against the plain computation, written as the rule reads.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    CompactionPart,
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

from pydantic_ai_compaction import InstructionSources, ResetToCheckpoint, Trigger
from pydantic_ai_compaction.processors.strategies.reset import (
    SECTIONS,
    _head,
    _label_of,
    fold_with_digests,
    label_counts,
)
from pydantic_ai_compaction.protocols.types import Exchange, Layout, Proposal, Summary
from pydantic_ai_compaction.runtime import our_record, segment
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.engine import Outcome, run_compaction
from pydantic_ai_compaction.runtime.notes import gather_notes, gather_notes_fresh
from pydantic_ai_compaction.runtime.segment import ConversationView, segment_fresh
from pydantic_ai_compaction.runtime.shape import is_compaction_response
from pydantic_ai_compaction.runtime.validate import fallback_layout, settle, validate

from .reliability import histories
from .test_reset_checkpoints import _ENTRY

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '15'))


def _context() -> CompactionContext:
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    return CompactionContext(run=ctx, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())


# --- the validator, as its rules read --------------------------------------------------------------------


def _roles(view: ConversationView, exchange: Exchange) -> tuple[bool, bool]:
    first = view.messages[exchange.refs[0][0]]
    last = view.messages[exchange.refs[-1][0]]
    return isinstance(first, ModelResponse), isinstance(last, ModelResponse) and not is_compaction_response(last)


def _first_response_after_response(view: ConversationView, keep: set[str], restate: bool) -> int | None:
    """Every exchange in order, as `apply_layout` lays the history out: a kept one starting with a response
    right after one ending with a response (the boundary and a restatement are requests between them)."""
    exchanges = view.exchanges
    dropped = [p for p, e in enumerate(exchanges) if e.id not in keep]
    unfinished = next((p for p, e in enumerate(exchanges) if e.unfinished), len(exchanges))
    boundary_at = min(max(dropped) + 1 if dropped else unfinished, unfinished)
    after_response = False
    for position, exchange in enumerate(exchanges):
        if position == boundary_at or (restate and position == unfinished):
            after_response = False
        if exchange.id not in keep:
            continue
        starts, ends = _roles(view, exchange)
        if starts and after_response:
            return position
        after_response = ends
    return None


def _reference_settle(view: ConversationView, keep: set[str], restate: bool) -> set[str]:
    keep = set(keep)
    for _ in range(2 * len(view.exchanges) + 1):
        position = _first_response_after_response(view, keep, restate)
        if position is None:
            return keep
        earlier = max((p for p in range(position) if view.exchanges[p].id in keep), default=-1)
        gap = view.exchanges[earlier + 1 : position]
        questions = [e for e in gap if _roles(view, e) == (False, False)]
        exchange = view.exchanges[position]
        if questions:
            keep.add(questions[-1].id)
        elif not exchange.forced:
            keep.discard(exchange.id)
        else:
            keep.update(e.id for e in gap)
    return keep


def _in_order(view: ConversationView, keep: set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return (
        tuple(e.id for e in view.exchanges if e.id in keep),
        tuple(e.id for e in view.exchanges if e.id not in keep),
    )


@settings(max_examples=EXAMPLES * 4, deadline=None)
@given(histories(), st.data(), st.booleans(), st.integers(0, 6))
def test_the_validator_reading_only_kept_exchanges_lays_out_what_reading_every_exchange_does(
    history: list[ModelMessage], data: st.DataObject, restate: bool, keep_last: int
) -> None:
    view = segment(history)
    ids = list(view.ids)
    chosen: list[str] = data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    forced = {e.id for e in view.exchanges if e.forced}
    # settle, on any set of exchanges
    assert settle(view, set(chosen), restate=restate) == _reference_settle(view, set(chosen), restate)
    # validate: forced kept, unknown ids rejected, every rule applied in order
    proposal = Proposal.keep(*chosen, 'g999', summary=Summary('s'))
    layout = validate(proposal, view)
    keep = _reference_settle(view, set(chosen) | forced, False)
    assert (layout.keep, layout.dropped) == _in_order(view, keep)
    assert layout.rejected == ('g999',)
    # the fallback: the last `keep_last` exchanges that are not forced, and everything forced
    droppable = [e for e in view.exchanges if not e.forced]
    tail = {e.id for e in droppable[max(len(droppable) - keep_last, 0) :]} if keep_last > 0 else set[str]()
    keep = _reference_settle(view, tail | forced, restate)
    fallback: Layout = fallback_layout(view, 'grew', fallback_keep_last=keep_last, restate=('x',) if restate else ())
    assert (fallback.keep, fallback.dropped) == _in_order(view, keep)
    dropped = [e for e in view.exchanges if e.id not in keep]
    assert isinstance(fallback.summary, Summary)
    assert fallback.summary.text.count(f'{len(dropped)} earlier exchange') == (1 if dropped else 0)


# --- notes gathered from the new messages only ----------------------------------------------------------


def _with_notes(history: list[ModelMessage], notes: list[tuple[int, str, str]]) -> list[ModelMessage]:
    """*history* with note calls (and their returns) inserted after the requests at the drawn places."""
    out: list[ModelMessage] = []
    places = {at % max(len(history), 1): (kind, text) for at, kind, text in notes}
    for index, message in enumerate(history):
        out.append(message)
        if index in places and isinstance(message, ModelRequest):
            kind, text = places[index]
            call = ToolCallPart('note', {'kind': kind, 'text': text}, tool_call_id=f'n{index}')
            out.append(ModelResponse(parts=[call]))
            out.append(ModelRequest(parts=[ToolReturnPart('note', 'noted', tool_call_id=f'n{index}')]))
    return out


_NOTES = st.lists(
    st.tuples(st.integers(0, 40), st.sampled_from(['decision', 'fact']), st.sampled_from(['a', 'b', 'port 80', ' '])),
    max_size=6,
)


def _same_notes(history: list[ModelMessage]) -> None:
    expected = gather_notes_fresh(segment_fresh(history))
    assert gather_notes(segment(history)) == expected
    assert all(note.startswith('[') for note in expected)


@settings(max_examples=EXAMPLES, deadline=None)
@given(histories(), _NOTES, histories(), _NOTES, st.integers(0, 30))
def test_notes_gathered_from_the_new_messages_equal_a_gathering_of_every_message(
    first: list[ModelMessage],
    first_notes: list[tuple[int, str, str]],
    second: list[ModelMessage],
    second_notes: list[tuple[int, str, str]],
    keep: int,
) -> None:
    history = _with_notes(first, first_notes)
    for end in range(1, len(history) + 1):  # grown message by message
        _same_notes(history[:end])
    other = _with_notes(second, second_notes)
    _same_notes([*history[: max(min(keep, len(history) - 1), 1)], *other[1:]])  # replaced after a shared start
    # After a compaction the notes ride in its record; the history grows again after it.
    outcome = asyncio.run(run_compaction(ResetToCheckpoint[None](trigger=Trigger(tokens=1)), history, _context()))
    if isinstance(outcome, Outcome):
        compacted = [*outcome.messages, *other[1:]]
        for end in range(len(outcome.messages), len(compacted) + 1):
            _same_notes(compacted[:end])


# --- a reset's folded counts from carried labels ---------------------------------------------------------


@settings(max_examples=EXAMPLES * 4, deadline=None)
@given(
    sections=st.fixed_dictionaries({name: st.lists(_ENTRY, max_size=60) for name in SECTIONS}),
    share=st.floats(0, 1.1),
)
def test_folding_from_carried_labels_gives_what_counting_the_folded_entries_gives(
    sections: dict[str, list[str]], share: float
) -> None:
    omitted = dict.fromkeys(SECTIONS, 1)
    labels = {name: label_counts(lines) for name, lines in sections.items()}
    for name, lines in sections.items():
        assert labels[name] == Counter(_label_of(_head(line)) for line in lines)
    # Budgets from folding everything to folding nothing (900 characters are set aside for the fixed lines).
    budget = 900 + int(share * sum(len(line) + 3 for lines in sections.values() for line in lines))
    folded = fold_with_digests(sections, omitted, budget, labels=labels)
    assert folded == fold_with_digests(sections, omitted, budget)


def _step(step: int, kind: str) -> list[ModelMessage]:
    if kind == 'turn':
        return [
            ModelResponse(parts=[TextPart(f'checked {step} logs so far')]),
            ModelRequest(parts=[UserPromptPart(f'continue with log {step}')]),
        ]
    tool = 'write_file' if kind == 'write' else 'read_log'
    result = f'ok {step}' if kind != 'long' else '\n'.join(['INFO fine'] * 60 + [f'INCIDENT {step} port=80'])
    return [
        ModelResponse(parts=[ToolCallPart(tool, {'index': step}, tool_call_id=f'c{step}')]),
        ModelRequest(parts=[ToolReturnPart(tool, result, tool_call_id=f'c{step}')]),
    ]


def _loop(kinds: list[str]) -> list[ModelMessage]:
    opening = ModelRequest(parts=[SystemPromptPart('You audit logs.'), UserPromptPart('Audit every log.')])
    return [opening, *(message for step, kind in enumerate(kinds) for message in _step(step, kind))]


def _fingerprint(outcome: object) -> Any:
    """What a compaction wrote: the history's text and the boundary records (timestamps aside)."""
    if not isinstance(outcome, Outcome):
        return outcome
    texts = [(type(p).__name__, getattr(p, 'content', None)) for m in outcome.messages for p in m.parts]
    records = [r for m in outcome.messages for p in m.parts if (r := our_record(p)) is not None]
    return texts, records


def _copy(history: list[ModelMessage]) -> list[ModelMessage]:
    """The same history as new objects: nothing remembered for the original applies to it."""
    from dataclasses import replace

    return [replace(message, parts=[replace(part) for part in message.parts]) for message in history]  # pyright: ignore[reportArgumentType]


_KINDS = st.lists(st.sampled_from(['read', 'read', 'read', 'long', 'write', 'turn']), min_size=2, max_size=40)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_KINDS, _KINDS, st.sampled_from([200, 600, 2_000]), st.integers(1, 4))
def test_a_reset_carried_forward_while_folding_compacts_as_a_reset_reading_from_scratch(
    kinds: list[str], more: list[str], max_chars: int, stride: int
) -> None:
    cctx = _context()
    sources = InstructionSources(markers=('INCIDENT',))
    carried = ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=max_chars, sources=sources)

    def fresh() -> ResetToCheckpoint[None]:
        return ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=max_chars, sources=sources)

    def both(history: list[ModelMessage]) -> Outcome | object:
        got = asyncio.run(run_compaction(carried, history, cctx, min_saving=0.0))
        assert _fingerprint(got) == _fingerprint(
            asyncio.run(run_compaction(fresh(), _copy(history), cctx, min_saving=0.0))
        )
        return got

    history = _loop(kinds)
    for end in range(3, len(history) + 1, 2 * stride):  # the same history, grown a few steps at a time
        both(history[:end])
    outcome = both(history)
    # After the reset, the run goes on and resets again: appended checkpoints, or a rewrite, the same either way.
    if isinstance(outcome, Outcome):
        grown = [*outcome.messages, *(m for step, kind in enumerate(more, start=len(kinds)) for m in _step(step, kind))]
        for end in range(len(outcome.messages) + 2, len(grown) + 1, 2 * stride):
            both(grown[:end])


def test_a_reset_of_many_tiny_steps_folds_them_into_counts_within_what_it_replaces() -> None:
    history = _loop(['read'] * 3_000)
    outcome = asyncio.run(run_compaction(ResetToCheckpoint[None](trigger=Trigger(tokens=1)), history, _context()))
    assert isinstance(outcome, Outcome) and outcome.record.fallback_reason is None
    (checkpoint,) = [p.content for m in outcome.messages for p in m.parts if isinstance(p, CompactionPart)]
    assert len(checkpoint) <= 8_000  # a rewrite: half of max_chars
    omitted = outcome.record.extra['omitted']
    listed = outcome.record.extra['checkpoint']
    # Every completed call (all but the one in progress) is either listed or counted under its tool.
    assert omitted['read'] + len(listed['read']) == 2_999
    assert outcome.record.extra['digests']['read'] == {'read_log': omitted['read']}
    assert f'- ({omitted["read"]:,} earlier entries folded to fit: read_log ×{omitted["read"]:,};' in checkpoint


# --- what is read from the start a view shares with the view before ---------------------------------------


def _message_print(message: ModelMessage) -> Any:
    """A message as sent (timestamps aside): its kind, each part's kind, text and call id, and its metadata."""
    return (
        type(message).__name__,
        [(type(p).__name__, getattr(p, 'content', None), getattr(p, 'tool_call_id', None)) for p in message.parts],
        message.metadata,
    )


def _layouts(view: ConversationView, data: st.DataObject) -> list[Layout]:
    """Layouts as the validator gives them (a proposal, the fallback) and as a caller may build them."""
    ids = list(view.ids)
    chosen: list[str] = data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    restate = data.draw(st.sampled_from([(), ('keep ids lowercase',)]))
    proposal = Proposal.keep(*chosen, summary=Summary('s'), restate=restate)
    kept = set(data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([])))
    built = Layout(
        keep=tuple(i for i in ids if i in kept),
        dropped=tuple(reversed([i for i in ids if i not in kept])),  # in any order
        rejected=(),
        summary=Summary('t'),
        restate=restate,
        fallback_reason=None,
    )
    return [
        validate(proposal, view),
        fallback_layout(view, 'grew', fallback_keep_last=data.draw(st.integers(0, 5))),
        built,
    ]


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(histories(), st.data())
def test_layout_application_from_the_kept_positions_lays_out_what_visiting_every_exchange_does(
    history: list[ModelMessage], data: st.DataObject
) -> None:
    from pydantic_ai_compaction.runtime.apply import apply_layout, apply_layout_fresh

    # Grown message by message, as a run's views follow one another (what a view shares is carried).
    for end in range(1, len(history) + 1):
        view = segment(history[:end])
        for layout in _layouts(view, data):
            got = apply_layout(view, layout, {'n': end}, note='n')
            expected = apply_layout_fresh(view, layout, {'n': end}, note='n')
            assert list(map(_message_print, got)) == list(map(_message_print, expected))


def _facts_as_read(view: ConversationView) -> Any:
    from pydantic_ai_compaction.runtime.validate import (
        boundary_exchanges,
        exchange_ids,
        exchange_positions,
        first_unfinished,
        forced_exchanges,
        view_records,
        view_tokens,
    )

    return (
        exchange_ids(view),
        view_tokens(view),
        forced_exchanges(view),
        boundary_exchanges(view),
        view_records(view),
        dict(exchange_positions(view)),
        first_unfinished(view),
    )


def _facts_fresh(view: ConversationView) -> Any:
    exchanges = view.exchanges
    return (
        tuple(e.id for e in exchanges),
        sum(e.tokens for e in exchanges),
        tuple(e for e in exchanges if e.forced),
        tuple(e for e in exchanges if e.kind == 'boundary'),
        view.records(),
        {e.id: p for p, e in enumerate(exchanges)},
        next((p for p, e in enumerate(exchanges) if e.unfinished), len(exchanges)),
    )


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(histories(), histories(), st.lists(st.integers(0, 2), max_size=12), st.integers(0, 40))
def test_facts_carried_from_the_view_before_are_those_read_from_every_exchange(
    history: list[ModelMessage], other: list[ModelMessage], order: list[int], keep: int
) -> None:
    from pydantic_ai_compaction.runtime.segment import same_prefix
    from pydantic_ai_compaction.runtime.validate import view_starts_with

    branch = [*history[: max(min(keep, len(history) - 1), 1)], *other[1:]]
    views: list[ConversationView] = []
    for end in range(1, len(history) + 1):
        views.append(segment(history[:end]))
    views.append(segment(branch))
    views.extend(segment(history[: max(1, len(history) - n)]) for n in order)  # back and forth
    for index, view in enumerate(views):
        # Asked in a different order each time: a fact read lazily is carried only when the view before read it.
        if index % 2:
            assert _facts_as_read(view)[::-1] == _facts_fresh(view)[::-1]
        else:
            assert _facts_as_read(view) == _facts_fresh(view)
        for earlier in views[max(0, index - 3) : index + 1]:
            before = tuple(earlier.exchanges[: len(earlier.exchanges) - 1])
            for ignored in (lambda e: e.forced, lambda e: False):
                expected = same_prefix(before, view.exchanges, ignored)
                assert view_starts_with(view, before, ignored) == expected
                assert view_starts_with(view, before, ignored) == expected  # remembered


@settings(max_examples=EXAMPLES, deadline=None)
@given(_KINDS, st.lists(_KINDS, min_size=1, max_size=3), st.sampled_from([200, 2_000, 16_000]), st.integers(0, 30))
def test_a_reset_reading_cut_back_for_another_branch_compacts_as_a_reset_reading_from_scratch(
    kinds: list[str], branches: list[list[str]], max_chars: int, back: int
) -> None:
    """Histories that share a start and then part (as one history and the next steps tried from it), and a
    shorter one after them: the reading is cut back to where they part, and gives what reading afresh gives."""
    cctx = _context()
    sources = InstructionSources(markers=('INCIDENT',))
    carried = ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=max_chars, sources=sources)

    def both(history: list[ModelMessage]) -> None:
        got = asyncio.run(run_compaction(carried, history, cctx, min_saving=0.0))
        fresh = ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=max_chars, sources=sources)
        assert _fingerprint(got) == _fingerprint(
            asyncio.run(run_compaction(fresh, _copy(history), cctx, min_saving=0.0))
        )

    history = _loop(kinds)
    both(history)
    for more in branches:
        both([*history, *(m for step, kind in enumerate(more, start=len(kinds)) for m in _step(step, kind))])
    both(history[: max(3, len(history) - 2 * back)])
    both(history)
