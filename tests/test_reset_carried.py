"""The reset's carried reading, the validator's carried facts and layout application."""

from __future__ import annotations

import asyncio
import copy
import linecache
import operator
import os
import pickle
import sys
import threading
from types import FrameType
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_compaction import InstructionSources, ResetToCheckpoint, Trigger
from pydantic_ai_compaction.processors.strategies.reset import FactExtractor, rare_lines
from pydantic_ai_compaction.protocols.types import Proposal, Summary
from pydantic_ai_compaction.runtime import segment
from pydantic_ai_compaction.runtime.apply import apply_layout, apply_layout_fresh
from pydantic_ai_compaction.runtime.engine import Outcome, run_compaction
from pydantic_ai_compaction.runtime.instructions import gather_instructions
from pydantic_ai_compaction.runtime.notes import gather_notes, gather_notes_fresh
from pydantic_ai_compaction.runtime.validate import exchange_ids, exchange_positions, kept_positions, validate

from .reliability import histories as reliability_histories
from .test_reset_scale import _KINDS, _context, _copy, _fingerprint, _loop, _step

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '15'))


_LOG = '\n'.join(['INFO fine'] * 60 + ['INCIDENT {} port=80'])
"""A log long enough that a checkpoint of it saves room."""


def _call(step: int, index: int) -> list[ModelMessage]:
    """A `read_log` call of log *index* (the same entry whenever *index* repeats)."""
    return [
        ModelResponse(parts=[ToolCallPart('read_log', {'index': index}, tool_call_id=f'c{step}')]),
        ModelRequest(parts=[ToolReturnPart('read_log', _LOG.format(index), tool_call_id=f'c{step}')]),
    ]


def test_a_reset_reading_cut_back_for_one_branch_does_not_keep_another_branch_point_past_the_cut() -> None:
    """Branch A adds no entry past the shared start (its point is as large as the start's), branch B adds one,
    then A comes back with a new entry: the reading is cut back for A to the start's size, and B's point (fewer
    exchanges than A's) must be forgotten, or B coming back reads A's entry as its own."""
    cctx = _context()
    sources = InstructionSources(markers=('INCIDENT',))

    def reset() -> ResetToCheckpoint[None]:
        return ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=16_000, sources=sources)

    carried = reset()

    def both(history: list[ModelMessage]) -> None:
        got = asyncio.run(run_compaction(carried, history, cctx, min_saving=0.0))
        expected = asyncio.run(run_compaction(reset(), _copy(history), cctx, min_saving=0.0))
        assert _fingerprint(got) == _fingerprint(expected)

    start = _loop(['read', 'read', 'read'])  # steps 0..2: logs 0..2
    a = [*start, *(m for step in range(3, 9) for m in _call(step, 0))]  # log 0 again: nothing new
    a1 = [*a, *(m for step in range(9, 13) for m in _call(step, 0))]
    b = [*a, *_call(9, 100), *_call(10, 0)]  # log 100: new, fewer exchanges than `a1`
    both(start)
    both(a)
    both(a1)
    both(b)
    both([*a1, *_call(13, 200), *_call(14, 0)])  # log 200: new; cuts the reading back to `a`'s size
    both([*b, *_call(11, 0), *_call(12, 0)])  # goes on from `b`'s point: must not read log 200 as its own


_STEP = st.sampled_from(['same', 'same', 'new', 'turn'])


@settings(max_examples=EXAMPLES, deadline=None)
@example(  # the branch that read nothing new, cut back for another (the test above)
    ['new', 'new'],
    [
        (1, 0, ['same'] * 6),
        (2, 0, ['same'] * 4),
        (2, 0, ['new', 'same']),
        (3, 0, ['new', 'same']),
        (4, 0, ['same'] * 2),
    ],
)
@given(
    st.lists(_STEP, min_size=1, max_size=8),
    st.lists(
        st.tuples(st.integers(0, 7), st.sampled_from([0, 0, 0, 1, 3]), st.lists(_STEP, min_size=1, max_size=6)),
        max_size=8,
    ),
)
def test_a_reset_shared_by_histories_branching_anywhere_compacts_each_as_a_reset_reading_from_scratch(
    opening: list[str], moves: list[tuple[int, int, list[str]]]
) -> None:
    """Histories as regenerations and edits make them: each one a step cut from an earlier one (any of them), then
    new steps; logs repeated (nothing new) and new ones, so the reading's points hold as many entries or more."""
    cctx = _context()
    sources = InstructionSources(markers=('INCIDENT',))

    def reset() -> ResetToCheckpoint[None]:
        return ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=16_000, sources=sources)

    carried = reset()
    counter = iter(range(1_000, 10**6))

    def steps(kinds: list[str], first: int) -> list[ModelMessage]:
        out: list[ModelMessage] = []
        for step, kind in enumerate(kinds, start=first):
            if kind == 'turn':
                out.extend(_step(step, 'turn'))
            else:
                out.extend(_call(step, 0 if kind == 'same' else next(counter)))
        return out

    histories = [[*_loop(['read']), *steps(opening, 1)]]
    for pick, back, more in [(0, 0, []), *moves]:
        base = histories[pick % len(histories)]
        cut = base[: max(3, len(base) - 2 * back)]
        history = [*cut, *steps(more, len(cut))] if more else cut
        histories.append(history)
        got = asyncio.run(run_compaction(carried, history, cctx, min_saving=0.0))
        expected = asyncio.run(run_compaction(reset(), _copy(history), cctx, min_saving=0.0))
        assert _fingerprint(got) == _fingerprint(expected)


def test_runs_in_threads_sharing_one_reset_and_a_start_each_compact_as_a_reset_reading_from_scratch() -> None:
    """One agent serving two follow-ups of one history in threads: the reading the reset shares between them is
    changed in place, so one run reading while the other cuts it back must not take the other's entries."""
    cctx = _context()
    sources = InstructionSources(markers=('INCIDENT',))
    inside, release = threading.Event(), threading.Event()

    def extract(call: ToolCallPart, text: str) -> list[str]:
        if 'INCIDENT 777 ' in text and not release.is_set():
            inside.set()  # the first run is reading its own steps: the second one runs now
            release.wait(10)
        return rare_lines(call, text, limit=20)

    def reset(extractor: FactExtractor) -> ResetToCheckpoint[None]:
        return ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=16_000, sources=sources, extract=extractor)

    shared = reset(extract)
    start = [*_loop(['read']), *_call(1, 1), *_call(2, 2), *_call(3, 3)]
    first = [*start, *_call(4, 500), *_call(5, 777), *_call(6, 0), *_call(7, 0)]
    second = [*start, *_call(4, 600), *_call(5, 0), *_call(6, 0)]
    asyncio.run(run_compaction(shared, start, cctx, min_saving=0.0))
    got: dict[int, object] = {}

    def run(index: int, history: list[ModelMessage]) -> None:
        got[index] = asyncio.run(run_compaction(shared, history, cctx, min_saving=0.0))

    threads = [threading.Thread(target=run, args=(0, first)), threading.Thread(target=run, args=(1, second))]
    threads[0].start()
    assert inside.wait(10)
    threads[1].start()
    threads[1].join(0.5)  # done by now unless it waits for the first run's reading
    release.set()
    for thread in threads:
        thread.join(10)
    plain = reset(lambda call, text: rare_lines(call, text, limit=20))
    for index, history in enumerate((first, second)):
        expected = asyncio.run(run_compaction(plain, _copy(history), cctx, min_saving=0.0))
        assert _fingerprint(got[index]) == _fingerprint(expected)


def test_a_view_laid_out_in_one_thread_keeps_its_positions_while_another_thread_reads_a_view_sharing_its_start() -> (
    None
):
    """Two runs in threads laying out views of one conversation (a shared start, then each its own steps): the
    facts of the view read next take the positions of the one before over and change them in place, so the run
    preempted while reading them must not lose its kept exchanges (here the step in progress)."""

    def step(index: int, tag: str) -> list[ModelMessage]:
        call = ToolCallPart('read', {'i': index}, tool_call_id=f'{tag}{index}')
        return [
            ModelResponse(parts=[call]),
            ModelRequest(parts=[ToolReturnPart('read', f'ok {index}', tool_call_id=f'{tag}{index}')]),
        ]

    start = [ModelRequest(parts=[UserPromptPart('go')]), *(m for i in range(40) for m in step(i, 'h'))]
    segment(start)
    view = segment([*start, *(m for i in range(20) for m in step(i, 'a'))])
    other = segment([*start, *(m for i in range(10) for m in step(i, 'b'))])
    assert all(map(operator.is_, other.exchanges[:40], view.exchanges[:40]))  # the same objects: carried
    paused, resume = threading.Event(), threading.Event()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        """Preempts the run right where it reads the kept positions for layout application."""
        if frame.f_code is not kept_positions.__code__ or frame.f_back is None:
            return None
        if frame.f_back.f_code is not apply_layout.__code__:
            return None

        def line(frame: FrameType, event: str, arg: object) -> Any:
            here = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            if event == 'line' and 'sorted(' in here and not paused.is_set():
                paused.set()
                resume.wait(10)
            return line

        return line

    layout = validate(Proposal.keep(view.ids[1], summary=Summary('s')), view)
    got: list[list[ModelMessage]] = []

    def run() -> None:
        sys.settrace(tracer)
        try:
            got.append(apply_layout(view, layout, {'n': 1}))
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=run)
    thread.start()
    assert paused.wait(10)
    exchange_ids(other), exchange_positions(other)  # the other run reads its view meanwhile
    resume.set()
    thread.join(10)
    expected = apply_layout_fresh(view, layout, {'n': 1})
    assert [m.parts for m in got[0]][-2:] == [m.parts for m in expected][-2:]
    assert len(got[0]) == len(expected)


@settings(max_examples=EXAMPLES, deadline=None)
@given(reliability_histories(), reliability_histories(), st.integers(1, 6), st.sampled_from([200, 2_000, 16_000]))
def test_a_reset_shared_by_generated_histories_grown_branched_and_cut_compacts_as_a_reset_reading_from_scratch(
    history: list[ModelMessage], other: list[ModelMessage], back: int, max_chars: int
) -> None:
    """Parallel and retried calls, signed thinking, `ToolReturn` content, huge ints, lone surrogates, pins and
    earlier boundaries: grown message by message, then a branch from its middle, then cut back, then grown again."""
    cctx = _context()
    sources = InstructionSources(markers=('INCIDENT',))

    def reset() -> ResetToCheckpoint[None]:
        return ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=max_chars, sources=sources)

    carried = reset()
    middle = max(1, len(history) // 2)
    runs = [history[:end] for end in range(1, len(history) + 1)]
    runs += [[*history[:middle], *other[1:]], history[: max(1, len(history) - back)], history]
    for run in runs:
        got = asyncio.run(run_compaction(carried, run, cctx, min_saving=0.0))
        expected = asyncio.run(run_compaction(reset(), _copy(run), cctx, min_saving=0.0))
        assert _fingerprint(got) == _fingerprint(expected)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_KINDS, reliability_histories(), st.lists(st.tuples(st.booleans(), st.integers(0, 60)), max_size=12))
def test_instructions_and_notes_read_for_conversations_taken_in_turns_are_those_read_afresh(
    kinds: list[str], generated: list[ModelMessage], turns: list[tuple[bool, int]]
) -> None:
    """Two conversations sharing one `InstructionSources` (and the runtime's notes reading), their views taken
    in turns at any length, longer or shorter than the one before: each gives what a reading from scratch does."""
    sources = InstructionSources(markers=('INCIDENT',))
    conversations = (_loop(kinds), generated)
    for which, end in [(False, len(conversations[0])), *turns, (True, len(conversations[1]))]:
        history = conversations[which]
        history = history[: max(1, min(end, len(history)))]
        view = segment(history)
        fresh = segment(_copy(history))
        assert gather_instructions(view, sources) == gather_instructions(
            fresh, InstructionSources(markers=('INCIDENT',))
        )
        assert gather_notes(view) == gather_notes_fresh(fresh)


def test_a_reset_that_has_read_histories_is_deep_copied_and_its_copy_compacts_alike() -> None:
    """A reset is a plain dataclass: deep-copied with the readings it carries (a fresh unused one is pickled too),
    and the copy compacts as the original does."""
    cctx = _context()
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), sources=InstructionSources(markers=('INCIDENT',)))
    history = [*_loop(['read']), *(m for step in range(1, 9) for m in _call(step, step))]
    asyncio.run(run_compaction(reset, history[:11], cctx, min_saving=0.0))
    assert pickle.loads(pickle.dumps(ResetToCheckpoint[None](max_chars=9_000))).max_chars == 9_000
    for copied in (copy.deepcopy(reset),):
        got = asyncio.run(run_compaction(copied, _copy(history), cctx, min_saving=0.0))
        assert _fingerprint(got) == _fingerprint(asyncio.run(run_compaction(reset, history, cctx, min_saving=0.0)))
        assert isinstance(got, Outcome)
