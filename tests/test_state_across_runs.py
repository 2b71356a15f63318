"""State shared between runs, conversations and threads (readings, facts, segmentation)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from dataclasses import replace
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    BoundedSelection,
    Fork,
    InstructionSources,
    Notes,
    ResetToCheckpoint,
    StatelessSummary,
    Trigger,
)
from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER
from pydantic_ai_compaction.processors.strategies.reset import FactExtractor, rare_lines
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER
from pydantic_ai_compaction.runtime.engine import Outcome, run_compaction
from pydantic_ai_compaction.runtime.segment import segment

from .test_reset_carried import _LOG, _call
from .test_reset_scale import _context, _copy, _fingerprint, _loop

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '15'))

_SOURCES = InstructionSources(markers=('INCIDENT',))


def _reset(extractor: FactExtractor | None = None) -> ResetToCheckpoint[None]:
    return ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=16_000, sources=_SOURCES, extract=extractor)


def _plain(call: ToolCallPart, text: str) -> list[str]:
    return rare_lines(call, text, limit=20)


def test_an_extractor_waiting_for_another_reset_in_another_thread_is_not_blocked_by_its_own_reading() -> None:
    """`extract` is the user's: it runs without the lock the reset readings share (a small model reading a result
    through another agent, in another thread, waited for ever)."""
    cctx = _context()
    other_history = [*_loop(['read']), *_call(1, 1), *_call(2, 2), *_call(3, 3)]
    finished = threading.Event()

    def helper() -> None:
        # Another agent with its own reset instance: nothing is shared with the run calling the extractor.
        asyncio.run(run_compaction(_reset(), _copy(other_history), cctx, min_saving=0.0))
        finished.set()

    def extract(call: ToolCallPart, text: str) -> list[str]:
        if 'INCIDENT 777 ' in text:
            worker = threading.Thread(target=helper, daemon=True)
            worker.start()
            worker.join(3)  # an extractor would wait for ever; bounded here so the test ends
        return _plain(call, text)

    history = [*_loop(['read']), *_call(1, 1), *_call(2, 777), *_call(3, 3)]
    asyncio.run(run_compaction(_reset(extract), history, cctx, min_saving=0.0))
    assert finished.is_set()
    fresh = asyncio.run(run_compaction(_reset(_plain), _copy(history), cctx, min_saving=0.0))
    assert _fingerprint(asyncio.run(run_compaction(_reset(extract), history, cctx, min_saving=0.0))) == _fingerprint(
        fresh
    )


class _Boom(Exception):
    pass


def test_an_extractor_raising_mid_reading_leaves_the_shared_reading_as_a_fresh_one_reads() -> None:
    """A user `extract` that raises part way through a branch: later histories (the run retried, another branch,
    the start again) compact as a fresh reset compacts them."""
    cctx = _context()

    def extract(call: ToolCallPart, text: str) -> list[str]:
        if 'INCIDENT 999 ' in text:
            raise _Boom
        return _plain(call, text)

    shared = _reset(extract)
    start = [*_loop(['read']), *_call(1, 1), *_call(2, 2), *_call(3, 3)]
    failing = [*start, *_call(4, 4), *_call(5, 5), *_call(6, 999), *_call(7, 7), *_call(8, 8)]
    histories = [
        start,
        failing[:-4],  # up to before the failing result: read and kept
        failing,
        [*failing[:-6], *_call(6, 6), *_call(7, 7), *_call(8, 8)],  # retried without it
        [*start, *_call(4, 40), *_call(5, 50)],  # another branch
        failing[:-6],
        start,
    ]
    fell_back = 0
    for history in histories:
        got = asyncio.run(run_compaction(shared, history, cctx, min_saving=0.0))
        if history is failing:  # the engine falls back when the strategy raises
            assert isinstance(got, Outcome) and got.record.fallback_reason == 'compactor_error'
            fell_back += 1
            continue
        expected = asyncio.run(run_compaction(_reset(_plain), _copy(history), cctx, min_saving=0.0))
        assert _fingerprint(got) == _fingerprint(expected)
    assert fell_back == 1


_OPENING = ModelRequest(parts=[UserPromptPart('Audit every log.')])
"""One opening request object that every conversation's history starts with."""


def _conversation(tag: int) -> list[ModelMessage]:
    """A stored history starting with `_OPENING`, then its own logs (some shared in text with the others)."""
    return [_OPENING, *(m for step in range(1, 4 + tag % 4) for m in _call(step, (tag * step) % 5))]


async def _agent_run(capability: object, tag: int) -> list[Any]:
    sent: list[Any] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(0)  # the other runs go on meanwhile
        sent.append([(type(p).__name__, getattr(p, 'content', None)) for m in messages for p in m.parts])
        steps = len(sent)
        if steps >= 8 + tag % 3:
            return ModelResponse(parts=[TextPart('report: none found')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': steps + tag}, tool_call_id=f'r{steps}')])

    agent = Agent(FunctionModel(model), capabilities=[capability])  # pyright: ignore[reportArgumentType]

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return _LOG.format(index % 7)

    await agent.run(f'Go on ({tag}).', message_history=_conversation(tag))
    return sent


def test_agent_runs_gathered_on_one_reset_send_what_each_run_alone_sends() -> None:
    """Ten runs of one reset capability at once, each history starting with the same opening object and then its
    own: every request the model receives is the one the run receives alone, with a reset of its own."""

    async def gathered() -> list[list[Any]]:
        shared = _reset()
        return list(await asyncio.gather(*(_agent_run(shared, tag) for tag in range(10))))

    together = asyncio.run(gathered())
    alone = [asyncio.run(_agent_run(_reset(), tag)) for tag in range(10)]
    assert together == alone
    assert any('CompactionPart' in {kind for kind, _ in request} for requests in alone for request in requests)


def test_agent_runs_in_threads_on_one_reset_send_what_each_run_alone_sends() -> None:
    """The same, each run in a thread of its own (one agent serving several conversations with `run_sync`)."""
    shared = _reset()
    together: dict[int, list[Any]] = {}

    def run(tag: int) -> None:
        together[tag] = asyncio.run(_agent_run(shared, tag))

    threads = [threading.Thread(target=run, args=(tag,)) for tag in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert together == {tag: asyncio.run(_agent_run(_reset(), tag)) for tag in range(6)}


_FACTORIES = {
    'reset': _reset,
    'summary': lambda: StatelessSummary[None](trigger=Trigger(tokens=600)),
    'fork': lambda: Fork[None](trigger=Trigger(tokens=600), variant='free'),
}


async def _cancellable_run(
    capability: object, tag: int, *, hang_at: int | None = None, hung: asyncio.Event | None = None
) -> list[Any]:
    """`_agent_run` with a compactor answering too; *hang_at*: the model call (agent or compactor) that never ends,
    *hung* set once it is reached."""
    sent: list[Any] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(0)
        if hang_at is not None and len(sent) == hang_at:
            if hung is not None:
                hung.set()
            await asyncio.sleep(30)
        sent.append([(type(p).__name__, getattr(p, 'content', None)) for m in messages for p in m.parts])
        prompt = '\n'.join(str(p.content) for p in messages[-1].parts if isinstance(p, UserPromptPart))
        if SUMMARY_MARKER in prompt or FORK_MARKER in prompt:
            return ModelResponse(parts=[TextPart('KEEP: none\nLogs read so far are clean.')])
        steps = len(sent) - 1  # the compactor's calls count as steps too: the same in every process
        if steps >= 9:
            return ModelResponse(parts=[TextPart('report: none found')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': steps + tag}, tool_call_id=f'r{steps}')])

    agent = Agent(FunctionModel(model), capabilities=[capability])  # pyright: ignore[reportArgumentType]

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return _LOG.format(index % 7)

    await agent.run(f'Go on ({tag}).', message_history=_conversation(tag))
    return sent


@pytest.mark.parametrize('name', list(_FACTORIES))
def test_runs_after_one_cancelled_mid_request_send_what_they_send_in_a_fresh_process(name: str) -> None:
    """A run timed out (`asyncio.wait_for`) while a model call is pending, at each call in turn: the runs after
    it on the same capability send what they send with a capability of their own."""
    alone = {tag: asyncio.run(_cancellable_run(_FACTORIES[name](), tag)) for tag in (1, 2, 3)}
    calls = len(alone[1])
    # Each capability compacts in these runs (the reset's checkpoint, or a compactor call).
    assert any('CompactionPart' in {kind for kind, _ in request} for request in alone[1])

    async def after_a_timeout(shared: object, hang_at: int) -> dict[int, list[Any]]:
        # The timeout starts once the run waits on the call that hangs: started with the run, it ended runs on a
        # slow machine before they reached their later calls, which then went untested.
        hung = asyncio.Event()
        run = asyncio.ensure_future(_cancellable_run(shared, 1, hang_at=hang_at, hung=hung))
        reached = asyncio.ensure_future(hung.wait())
        await asyncio.wait({run, reached}, return_when=asyncio.FIRST_COMPLETED)
        reached.cancel()
        assert hung.is_set(), f'the run ended before its model call {hang_at}'
        with contextlib.suppress(TimeoutError):  # it hangs on that call: the timeout ends it, always
            await asyncio.wait_for(run, 0.05)
        return {tag: await _cancellable_run(shared, tag) for tag in (2, 1, 3)}

    for hang_at in range(calls):
        assert asyncio.run(after_a_timeout(_FACTORIES[name](), hang_at)) == alone


def test_threads_taking_branches_of_one_history_in_turns_on_one_reset_compact_as_fresh_resets() -> None:
    """Threads sharing one reset, each compacting branches of one history (grown, retried, cut back) in its own
    order: the entries of each are read outside the reading's lock, and every outcome is a fresh reset's."""
    cctx = _context()
    start = [*_loop(['read']), *_call(1, 1), *_call(2, 2), *_call(3, 3)]
    branches = [
        [*start, *(m for step in range(4, 4 + length) for m in _call(step, (branch * step) % 9))]
        for branch in range(4)
        for length in (1, 3, 6)
    ]
    expected = [
        _fingerprint(asyncio.run(run_compaction(_reset(_plain), _copy(history), cctx, min_saving=0.0)))
        for history in branches
    ]
    shared = _reset(_plain)
    rounds = max(2, EXAMPLES // 5)
    mismatches: list[int] = []
    done: list[int] = []

    def run(seed: int) -> None:
        order = [(seed * 7 + step * 5) % len(branches) for step in range(rounds * len(branches))]
        for index in order:
            got = asyncio.run(run_compaction(shared, branches[index], cctx, min_saving=0.0))
            if _fingerprint(got) != expected[index]:
                mismatches.append(index)
            done.append(index)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the threads take turns often, inside the reading too
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert len(done) == 4 * rounds * len(branches)
    assert mismatches == []


async def _mixed_run(capabilities: list[object], tag: int, cut: int) -> list[Any]:
    """A run writing notes and reading logs, from `_conversation(tag)` shortened by *cut* steps."""
    sent: list[Any] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(0)
        sent.append([(type(p).__name__, getattr(p, 'content', None)) for m in messages for p in m.parts])
        steps = len(sent) - 1
        if steps >= 8:
            return ModelResponse(parts=[TextPart('report: none found')])
        if steps % 3 == 1:
            args = {'kind': 'progress', 'text': f'log {steps + tag} clean'}
            return ModelResponse(parts=[ToolCallPart('note', args, tool_call_id=f'n{steps}')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': steps + tag}, tool_call_id=f'r{steps}')])

    agent = Agent(FunctionModel(model), capabilities=capabilities)  # pyright: ignore[reportArgumentType]

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return _LOG.format(index % 7)

    history = _conversation(tag)
    await agent.run(f'Go on ({tag}).', message_history=history[: max(1, len(history) - 2 * cut)])
    return sent


def _mixed() -> list[object]:
    return [Notes(), _reset(), BoundedSelection(budget=400)]


def test_gathered_runs_sharing_notes_a_reset_and_a_selection_send_what_each_run_alone_sends() -> None:
    """Runs at once on one set of capabilities, from histories sharing their opening object, some shortened:
    each sends what it sends alone with capabilities of its own."""
    runs = [(tag, cut) for tag in range(6) for cut in (0, 1)]

    async def gathered() -> list[list[Any]]:
        shared = _mixed()
        return list(await asyncio.gather(*(_mixed_run(shared, tag, cut) for tag, cut in runs)))

    together = asyncio.run(gathered())
    alone = [asyncio.run(_mixed_run(_mixed(), tag, cut)) for tag, cut in runs]
    assert together == alone
    kinds = {kind for requests in alone for request in requests for kind, _ in request}
    assert {'CompactionPart', 'ToolReturnPart'} <= kinds
    # The checkpoints carry the notes the runs wrote (read by the notes' carried reading).
    assert any(
        kind == 'CompactionPart' and '[progress] log' in str(content)
        for request in alone[0]
        for kind, content in request
    )


def test_runs_in_threads_sharing_notes_a_reset_and_a_selection_send_what_each_run_alone_sends() -> None:
    """The same, each run in a thread of its own, taking turns often."""
    runs = [(tag, cut) for tag in range(4) for cut in (0, 1)]
    shared = _mixed()
    together: dict[int, list[Any]] = {}

    def run(index: int) -> None:
        together[index] = asyncio.run(_mixed_run(shared, *runs[index]))

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(runs))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert together == {index: asyncio.run(_mixed_run(_mixed(), tag, cut)) for index, (tag, cut) in enumerate(runs)}


def test_a_reset_whose_extractor_is_changed_after_a_run_compacts_as_a_reset_made_with_it() -> None:
    """The entries read for a history depend on `extract`, `excerpt_chars`, `facts_per_result` and `answer_chars`:
    a reset whose fields are set again between runs (a dataclass field a user may assign) must not compact the
    next history with the entries the earlier settings gave."""
    cctx = _context()
    history = [*_loop(['read', 'turn']), *_call(1, 1), *_call(2, 2), *_call(3, 3), *_call(4, 4)]

    def shout(call: ToolCallPart, text: str) -> list[str]:
        return [line.upper() for line in _plain(call, text)]

    reset = _reset()
    asyncio.run(run_compaction(reset, history, cctx, min_saving=0.0))
    changes = (('extract', shout), ('facts_per_result', 1), ('answer_chars', 5), ('excerpt_chars', 0))
    for field_name, value in (*changes, ('write_tools', r'read_log')):
        setattr(reset, field_name, value)
        fresh = replace(_reset(reset.extract), write_tools=reset.write_tools)
        fresh.facts_per_result, fresh.answer_chars = reset.facts_per_result, reset.answer_chars
        fresh.excerpt_chars = reset.excerpt_chars
        got = asyncio.run(run_compaction(reset, [*history, *_call(5, 5)], cctx, min_saving=0.0))
        expected = asyncio.run(run_compaction(fresh, _copy([*history, *_call(5, 5)]), cctx, min_saving=0.0))
        assert _fingerprint(got) == _fingerprint(expected), field_name


def test_an_extractor_reading_another_history_through_the_same_reset_leaves_both_as_fresh_resets_read_them() -> None:
    """`extract` calling back into the reset it serves (its `sections` of another branch) while the reset reads:
    the branch it reads and the history being read each give what a fresh reset gives."""
    cctx = _context()
    start = [*_loop(['read']), *_call(1, 1), *_call(2, 2), *_call(3, 3)]
    first = [*start, *_call(4, 4), *_call(5, 777), *_call(6, 6), *_call(7, 7)]
    other = [*start, *_call(4, 40), *_call(5, 50), *_call(6, 60)]
    inner: list[object] = []

    def extract(call: ToolCallPart, text: str) -> list[str]:
        if 'INCIDENT 777 ' in text and not inner:
            inner.append(shared.sections(segment(other)))
        return _plain(call, text)

    shared = _reset(extract)
    asyncio.run(run_compaction(shared, start, cctx, min_saving=0.0))
    got = asyncio.run(run_compaction(shared, first, cctx, min_saving=0.0))
    assert _fingerprint(got) == _fingerprint(
        asyncio.run(run_compaction(_reset(_plain), _copy(first), cctx, min_saving=0.0))
    )
    assert inner == [_reset(_plain).sections(segment(_copy(other)))]
    again = asyncio.run(run_compaction(shared, other, cctx, min_saving=0.0))
    assert _fingerprint(again) == _fingerprint(
        asyncio.run(run_compaction(_reset(_plain), _copy(other), cctx, min_saving=0.0))
    )
