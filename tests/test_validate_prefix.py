"""The validator's per-view facts: the prefix two views share and the split of a layout, found without a pass
over every exchange, are exactly those a pass over every exchange finds."""

from __future__ import annotations

import importlib
import operator
import os
from dataclasses import replace
from itertools import chain, compress, count
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage

from pydantic_ai_compaction import InstructionSources
from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime import segment
from pydantic_ai_compaction.runtime.instructions import gather_instructions
from pydantic_ai_compaction.runtime.segment import ConversationView, segment_fresh

from .reliability import histories
from .test_incremental import tool_loop
from .test_instructions_gather import with_marked_results

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '15'))

# The module, not the function `validate` the package re-exports under the same name.
_validate: Any = importlib.import_module('pydantic_ai_compaction.runtime.validate')


def _prefix_by_every_position(old: tuple[Exchange, ...], new: tuple[Exchange, ...]) -> int:
    """The first position holding different objects, comparing every position (what `_Facts` did before)."""
    return next(compress(count(), map(operator.is_not, old, new)), min(len(old), len(new)))


def _views(history: list[ModelMessage], other: list[ModelMessage], keep: int, order: list[int]) -> list[Any]:
    """Views as a run and its branches read them: grown step by step, a branch, back and forth, and views
    segmented with a predicate (which carry no note of their copies)."""
    branch = [*history[: max(min(keep, len(history) - 1), 1)], *other[1:]]
    views = [segment(history[:end]) for end in range(1, len(history) + 1)]
    views.append(segment(branch))
    views.extend(segment(history[: max(1, len(history) - n)]) for n in order)
    views.append(segment(history, protect=lambda exchange, messages: False))
    views.append(segment([*history, *other[1:]]))
    return views


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(histories(), histories(), st.integers(0, 40), st.lists(st.integers(0, 3), max_size=6))
def test_the_prefix_found_from_segmentations_note_is_the_one_every_position_gives(
    history: list[ModelMessage], other: list[ModelMessage], keep: int, order: list[int]
) -> None:
    views = _views(history, other, keep, order)
    for index, view in enumerate(views):
        for earlier in views[max(0, index - 4) : index + 1]:
            for old, new in ((earlier, view), (view, earlier)):
                got = _validate._identical_prefix(
                    old.exchanges, _validate._marked_copies(old), new.exchanges, _validate._marked_copies(new)
                )
                assert got == _prefix_by_every_position(old.exchanges, new.exchanges)


@pytest.mark.bench
def test_a_grown_history_of_many_exchanges_shares_all_but_its_new_step() -> None:
    """The case the note is for: a long history grown by one step, and a branch off its middle."""
    from pydantic_ai_compaction_bench.perf import tiny_loop

    history = tiny_loop(2_000)
    first = segment([*history, *tiny_loop(1)[1:]])
    second = segment([*history, *tiny_loop(1)[1:]])
    branch = segment([*history[:1_001], *tiny_loop(3)[1:]])
    for old, new in ((first, second), (second, first), (first, branch), (branch, second)):
        copies = _validate._marked_copies(old), _validate._marked_copies(new)
        assert None not in copies  # the note applies: the prefix is found without a pass
        got = _validate._identical_prefix(old.exchanges, copies[0], new.exchanges, copies[1])
        assert got == _prefix_by_every_position(old.exchanges, new.exchanges)
    assert _validate._identical_prefix(first.exchanges, None, second.exchanges, None) == len(first.exchanges) - 1


def _split_by_every_id(view: ConversationView, keep: set[str]) -> tuple[tuple[str, ...], tuple[str, ...], int | None]:
    """`_split`'s kept and dropped ids and the last dropped position, from every id (the rule as it reads)."""
    ids = view.ids
    kept = tuple(i for i in ids if i in keep)
    dropped = tuple(i for i in ids if i not in keep)
    last = max((p for p, i in enumerate(ids) if i not in keep), default=None)
    return kept, dropped, last


def _split_before(view: ConversationView, keep: set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`_split`'s pieces as they were joined before (every dropped id copied through `chain`)."""
    ids = view.ids
    at = sorted(p for p, i in enumerate(ids) if i in keep)
    pieces: list[tuple[str, ...]] = []
    start = 0
    for position in at:
        pieces.append(ids[start:position])
        start = position + 1
    pieces.append(ids[start:])
    return tuple([ids[position] for position in at]), tuple(chain.from_iterable(pieces))


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(histories(), st.data())
def test_the_split_of_a_layout_is_the_one_every_id_gives(history: list[ModelMessage], data: st.DataObject) -> None:
    view = segment(history)
    ids = list(view.ids)
    head = data.draw(st.integers(0, len(ids)))
    tail = data.draw(st.integers(0, len(ids)))
    chosen = data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    # A reset's shape (a few first and last exchanges kept: one slice dropped), and any other.
    for keep in ({*ids[:head], *ids[len(ids) - tail :]}, set(chosen), set(ids[:1]), set[str]()):
        kept, dropped = _validate._split(view, keep)
        expected_kept, expected_dropped, expected_last = _split_by_every_id(view, keep)
        assert (kept, dropped) == (expected_kept, expected_dropped) == _split_before(view, keep)
        assert _validate.last_dropped(view, dropped) == expected_last
        assert _validate.last_dropped(view, tuple(dropped)[::-1]) == expected_last  # looked up, not remembered


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(
    histories(), histories(), st.integers(0, 40), st.lists(st.integers(0, 3), max_size=6), st.lists(st.integers(0, 50))
)
def test_instructions_gathered_on_views_that_share_a_start_are_those_gathered_afresh(
    history: list[ModelMessage], other: list[ModelMessage], keep: int, order: list[int], marked: list[int]
) -> None:
    """The start a gathering read is noted on its view, so the views after it that share it are not compared
    exchange by exchange: what they gather is what a gathering that never saw a view gathers."""
    history = with_marked_results(history, marked[:3])
    carried = InstructionSources(markers=('CHANGE:',), user_prompts=True)
    for view in _views(history, other, keep, order):
        fresh = InstructionSources(markers=('CHANGE:',), user_prompts=True)
        assert gather_instructions(view, carried) == gather_instructions(view, fresh)


def test_only_segmentation_notes_a_view_s_copies() -> None:
    """A view built or copied by hand carries no note a wrong one could mislead the shared prefix with."""
    view = segment(tool_loop(6))
    assert view.copies is not None and view.copies[0] is view.exchanges
    built = ConversationView(messages=view.messages, exchanges=view.exchanges, next_id=view.next_id)
    assert built.copies is None
    assert replace(view).copies is None
    with pytest.raises(TypeError, match='copies'):
        ConversationView(  # type: ignore[call-arg]
            messages=view.messages,
            exchanges=view.exchanges,
            next_id=view.next_id,
            copies=(view.exchanges, ()),  # pyright: ignore[reportCallIssue]
        )
    # Without notes the prefix is found position by position: the same answer.
    old = view.exchanges
    new = (*old[:3], *segment_fresh(tool_loop(6)).exchanges[3:])
    assert _validate._identical_prefix(old, None, new, None) == _prefix_by_every_position(old, new) == 3
