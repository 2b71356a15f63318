"""`make bench`: import cost, per-request overhead against harness at up to 1M tokens, recall latency, memory
at 10M tokens, savings and cost under a prompt cache.

Every figure is measured in the same process, next to its anchor (harness `estimate_context_tokens` and
`ClearToolResults.compact` on the same history), and printed as a ratio, so the figures compare across
machines even though the milliseconds do not.
"""

from __future__ import annotations

import asyncio
import gc
import random
import signal
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

from pydantic_ai.capabilities import AbstractCapability
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
from pydantic_ai_harness.compaction import ClearToolResults, estimate_context_tokens, estimate_token_count

from pydantic_ai_compaction import (
    Archive,
    ClearThenSummarize,
    ForgetReasoning,
    InstructionSources,
    Proposal,
    ResetToCheckpoint,
    Summary,
    Trigger,
)
from pydantic_ai_compaction.processors.memory.recall import Recall
from pydantic_ai_compaction.processors.views.selection import current_request_text, project, select
from pydantic_ai_compaction.runtime import apply_layout, segment, validate
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.engine import run_compaction
from pydantic_ai_compaction.runtime.instructions import gather_instructions
from pydantic_ai_compaction.runtime.project import rewrite_log_at
from pydantic_ai_compaction.runtime.stores import SQLiteArchiveStore
from pydantic_ai_compaction.runtime.validate import Skipped
from pydantic_ai_compaction_bench.recall_compare import _OneRun  # pyright: ignore[reportPrivateUsage]

Target = tuple[str, float, float, float]
"""A target row: the path, its milliseconds, its anchor's, and the ratio the verdict reads (of the medians, or the
median of paired ratios where the two were timed side by side)."""


def _row(name: str, ms: float, anchor_ms: float) -> Target:
    """A row whose ratio is that of its two figures."""
    return name, ms, anchor_ms, ms / max(anchor_ms, 1e-6)


SIZES = {'10k': (5, 8_000), '100k': (50, 8_000), '1M': (500, 8_000), '5000 msgs': (2_500, 400)}
"""Name → (tool steps, bytes per result). 1M ≈ 500 steps with 8 KB results."""


def synthetic_history(steps: int, result_bytes: int, *, seed: int = 7) -> list[ModelMessage]:
    """A tool loop with thinking, provider usage on every response, and one marked change."""
    rng = random.Random(seed)
    alphabet = 'abcdefghijklmnopqrstuvwxyz     0123456789=_'
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[SystemPromptPart('You audit logs.'), UserPromptPart('Audit every log and report incidents.')]
        )
    ]
    for step in range(steps):
        messages.append(
            ModelResponse(
                parts=[
                    ThinkingPart('checking the next log ' * 8),
                    ToolCallPart('read_log', {'index': step}, tool_call_id=f'c{step}'),
                ],
                usage=RequestUsage(input_tokens=20 + step * (result_bytes // 4 + 40), output_tokens=60),
                model_name='synthetic',
            )
        )
        body = ''.join(rng.choice(alphabet) for _ in range(result_bytes))
        if step == steps // 2:
            body = 'CHANGE: report ids in lowercase\n' + body
        messages.append(
            ModelRequest(parts=[ToolReturnPart('read_log', f'log {step}\n{body}', tool_call_id=f'c{step}')])
        )
    return messages


def _ms(function: Callable[[], object], repeat: int) -> float:
    times: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def _ams(function: Callable[[], Awaitable[object]], repeat: int) -> float:
    times: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        await function()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def _cpu_ms(function: Callable[[], Awaitable[object]], clock: Callable[[], int] = time.thread_time_ns) -> float:
    """Thread CPU milliseconds of one call of *function*, the collector paused (a collection of earlier garbage
    is not the call's time); with *clock* `time.process_time_ns`, every thread's (work handed to a worker thread)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        started = clock()
        await function()
        return (clock() - started) / 1e6
    finally:
        if enabled:
            gc.enable()


async def _paired(
    subject: Callable[[], Awaitable[float]], anchor: Callable[[], Awaitable[float]], rounds: int
) -> tuple[float, float, float]:
    """*subject* and *anchor* alternated for *rounds* pairs (each call returns its own milliseconds, its set-up
    untimed), which goes first swapped every round: their medians and the median of the pairs' ratios.

    A path of a few milliseconds timed in a quiet minute and its anchor in a busy one said nothing: timed side by
    side, a load that comes and goes weighs on both alike.
    """
    mine: list[float] = []
    theirs: list[float] = []
    for round_ in range(rounds):
        if round_ % 2:
            mine.append(await subject())
            theirs.append(await anchor())
        else:
            theirs.append(await anchor())
            mine.append(await subject())
    ratios = [m / max(t, 1e-6) for m, t in zip(mine, theirs, strict=True)]
    return statistics.median(mine), statistics.median(theirs), statistics.median(ratios)


@dataclass(frozen=True)
class Row:
    """One path at one size."""

    path: str
    size: str
    ms: float
    vs_clear: float
    vs_estimate: float


async def overhead(repeat: int = 5) -> list[Row]:
    """Every deterministic path at every size, with harness's two anchors measured alongside."""
    rows: list[Row] = []
    for size, (steps, result_bytes) in SIZES.items():
        rows.extend(await _measure(size, synthetic_history(steps, result_bytes), repeat))
    return rows


async def _measure(size: str, history: list[ModelMessage], repeat: int) -> list[Row]:
    """Every path on one history (a function of its own, so each measured closure binds this size's values)."""
    rows: list[Row] = []
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    estimate_ms = _ms(lambda: estimate_context_tokens(history), repeat)
    clear = ClearToolResults(max_tokens=1)
    clear_ms = await _ams(lambda: clear.compact(history, ctx), repeat)
    view = segment(history)
    layout = validate(Proposal(kept=view.ids[-3:], summary=Summary('s')), view)
    request = current_request_text(history)
    # The steady state of a run: earlier results numbered and steps decided; one new step arrives.
    archive = Archive()
    later = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), run_step=5)
    numbered = _written(history[:-2], archive.number_new(ctx, history[:-2]))
    forget = ForgetReasoning(policy='drop')
    decided = _written(history[:-2], forget.decisions(history[:-2]))
    steady_archive = [*numbered, *history[-2:]]
    steady_forget = [*decided, *history[-2:]]
    reset = ResetToCheckpoint(trigger=Trigger(tokens=1))
    below = ResetToCheckpoint(trigger=Trigger(tokens=10**9))
    cctx = CompactionContext(run=ctx, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
    paths: dict[str, Callable[[], object]] = {
        'trigger (measure)': lambda: Trigger(tokens=1).measure(history),
        'segmentation (same history again)': lambda: segment(history),
        'validator': lambda: validate(Proposal(kept=view.ids[::-2], summary=Summary('s')), view),
        'layout application': lambda: apply_layout(view, layout, {'strategy': 'bench'}),
        'reassert (gather changes)': lambda: gather_instructions(view, InstructionSources(markers=('CHANGE:',))),
        'archive (number new results)': lambda: archive.number_new(later, steady_archive),
        'forget-reasoning (decide)': lambda: forget.decisions(steady_forget),
        'bounded selection': lambda: project(view, select(view, request, 10_000)),
    }
    measured: dict[str, float] = {}
    measured['below trigger (whole hook)'] = await _ams(
        lambda: below.maybe_compact(
            history, ctx, model=TestModel(), model_settings=None, parameters=ModelRequestParameters()
        ),
        repeat,
    )
    for name, function in paths.items():
        measured[name] = _ms(function, repeat)
    measured['reset (whole compaction)'] = await _ams(lambda: run_compaction(reset, history, cctx), max(1, repeat // 2))
    rows.append(Row('harness estimate_context_tokens', size, estimate_ms, estimate_ms / clear_ms, 1.0))
    rows.append(Row('harness ClearToolResults.compact', size, clear_ms, 1.0, clear_ms / estimate_ms))
    rows.extend(Row(name, size, ms, ms / clear_ms, ms / estimate_ms) for name, ms in measured.items())
    return rows


async def recall_latency(queries: int = 50) -> dict[str, tuple[float, float]]:
    """p50/p95 of a recall query over the 1M-token log: ours (SQLite FTS5) against harness ConversationSearch."""
    from pydantic_ai_harness.conversation_search import ConversationSearch

    steps, result_bytes = SIZES['1M']
    history = synthetic_history(steps, result_bytes)
    store = SQLiteArchiveStore(':memory:')
    Recall(store=store).index('bench', history)
    words = ['log 17', 'lowercase change', 'read_log 250', 'ids report', 'abc', 'log 499']
    ours = [_ms(lambda w=w: store.search('bench', w, 8), 1) for w in (words * (queries // len(words) + 1))[:queries]]
    search: Any = ConversationSearch(_OneRun(history), scope='conversation', max_matches=8).get_toolset()
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), conversation_id='conversation')
    theirs = [await _ams(lambda w=w: search.search_conversation_history(ctx, w), 1) for w in words[:10]]
    store.close()

    def p(values: Sequence[float]) -> tuple[float, float]:
        ordered = sorted(values)
        return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]

    return {'recall (SQLite FTS5)': p(ours), 'harness ConversationSearch (BM25)': p(theirs)}


async def peak_memory() -> dict[str, float]:
    """Peak Python allocations (MB) of a whole compaction over the 1M-token history, and its size."""
    steps, result_bytes = SIZES['1M']
    history = synthetic_history(steps, result_bytes)
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    cctx = CompactionContext(run=ctx, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
    tracemalloc.start()
    await run_compaction(ResetToCheckpoint(), history, cctx)
    _, ours = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tracemalloc.start()
    await ClearToolResults(max_tokens=1).compact(history, ctx)
    _, theirs = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        'history (estimated tokens)': float(estimate_token_count(history)),
        'reset compaction peak MB': ours / 2**20,
        'harness ClearToolResults peak MB': theirs / 2**20,
    }


def overhead_table(rows: Sequence[Row]) -> str:
    """Markdown: every path at every size, with ratios to both anchors."""
    sizes = list(SIZES)
    paths = list(dict.fromkeys(row.path for row in rows))
    by = {(row.path, row.size): row for row in rows}
    header = ['path', *(f'{s} ms' for s in sizes), '1M / ClearToolResults', '1M / estimate', '1M / 10k']
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for path in paths:
        big, small = by[(path, '1M')], by[(path, '10k')]
        cells = [path, *(f'{by[(path, s)].ms:.2f}' for s in sizes)]
        cells += [f'{big.vs_clear:.2f}×', f'{big.vs_estimate:.1f}×', f'{big.ms / max(small.ms, 1e-6):.0f}×']
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


SCALE_SIZES = {'10k': 5, '100k': 50, '1M': 500, '5M': 2_500}
"""Name → tool steps of 8 KB results (about 2,050 estimated tokens a step)."""

TINY_STEPS = 25_000
"""Steps of the 50k-message history (a call and a two-word result each)."""

GROWTH_LIMIT = 2.0
"""A per-request path "does not grow with the history" when 5M costs at most this many times 100k (50× the history)."""


def tool_loop(steps: int, result_bytes: int = 8_000, *, seed: int = 7, line_chars: int = 0) -> list[ModelMessage]:
    """`synthetic_history`'s shape, built in milliseconds: results are slices of one random pool.

    The 5M-token history would take a minute to draw character by character. Each result is a `log N` line
    and one long line, unless *line_chars* is set: then the body is broken into lines of that many characters,
    as a log's are (a reader of lines, the reset's, pays per line).
    """
    rng = random.Random(seed)
    alphabet = 'abcdefghijklmnopqrstuvwxyz     0123456789=_'
    pool = ''.join(rng.choices(alphabet, k=result_bytes * 4))
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[SystemPromptPart('You audit logs.'), UserPromptPart('Audit every log and report incidents.')]
        )
    ]
    for step in range(steps):
        messages.extend(_step(step, result_bytes, pool, marked=step == steps // 2, line_chars=line_chars))
    return messages


def _step(step: int, result_bytes: int, pool: str, *, marked: bool = False, line_chars: int = 0) -> list[ModelMessage]:
    offset = (step * 7_919) % (len(pool) - result_bytes)
    body = pool[offset : offset + result_bytes]
    if line_chars:
        body = '\n'.join(body[at : at + line_chars] for at in range(0, len(body), line_chars))
    if marked:
        body = 'CHANGE: report ids in lowercase\n' + body
    return [
        ModelResponse(
            parts=[
                ThinkingPart('checking the next log ' * 8),
                ToolCallPart('read_log', {'index': step}, tool_call_id=f'c{step}'),
            ],
            usage=RequestUsage(input_tokens=20 + step * (result_bytes // 4 + 40), output_tokens=60),
            model_name='synthetic',
        ),
        ModelRequest(parts=[ToolReturnPart('read_log', f'log {step}\n{body}', tool_call_id=f'c{step}')]),
    ]


def tiny_loop(steps: int) -> list[ModelMessage]:
    """A tool loop of many tiny messages: a call and a two-word result per step."""
    messages: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('You audit logs.'), UserPromptPart('Audit every log.')])
    ]
    for step in range(steps):
        messages.append(ModelResponse(parts=[ToolCallPart('read_log', {'index': step}, tool_call_id=f'c{step}')]))
        messages.append(ModelRequest(parts=[ToolReturnPart('read_log', f'ok {step}', tool_call_id=f'c{step}')]))
    return messages


def fresh_copy(history: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The same history as new message and part objects (text shared): nothing remembered applies to it."""
    from dataclasses import replace

    return [replace(message, parts=[replace(part) for part in message.parts]) for message in history]  # pyright: ignore[reportArgumentType]


def _written(messages: list[ModelMessage], changes: dict[int, ModelMessage]) -> list[ModelMessage]:
    """A copy of *messages* with *changes* (position → new message) written in."""
    out = list(messages)
    for index, message in changes.items():
        out[index] = message
    return out


def _request_context(messages: list[ModelMessage]) -> Any:
    from pydantic_ai.models import ModelRequestContext

    return ModelRequestContext(
        model=TestModel(), messages=messages, model_settings=None, model_request_parameters=ModelRequestParameters()
    )


PER_REQUEST_RUNS = 7
"""Runs per path and size in the per-request table: each is a fresh capability on a fresh list of the same history
objects, one untimed request, then `PER_REQUEST_STEPS` timed requests, each adding one new step (new objects) to
what the previous one left. The untimed request may find what earlier runs remembered of those objects; the timed
ones read only their new step (fresh copies of the history give the same ratios, at three times the run time)."""

PER_REQUEST_STEPS = 7
"""Timed requests per run: a history grows by this many steps in a run, so each size stays about what it is named
(10k tokens is 5 steps)."""


@dataclass(frozen=True)
class PerRequest:
    """One path at one size: medians over every timed request of every run."""

    cpu_ms: float
    """Median CPU time of the thread that ran the request (what the code costs; another process's work on a
    shared machine is not counted)."""

    wall_ms: float
    """Median wall-clock time of the same requests (what a caller waits, the machine's load included)."""


async def per_request_scaling(
    repeat: int = PER_REQUEST_STEPS, runs: int = PER_REQUEST_RUNS
) -> dict[str, dict[str, PerRequest]]:
    """Each per-request path at each size, in a run's steady state (one new step since the previous request).

    Timed in thread CPU time (`time.thread_time_ns`) with the wall clock beside it, and the sizes interleaved
    request by request, so a slower moment of the machine falls on every size alike, not on the size that
    happened to be measured then. Paths are measured one after another (interleaving them would make their
    histories evict each other's remembered segmentations, which a run never does).
    """
    pool = ''.join(random.Random(11).choices('abcdefghijklmnopqrstuvwxyz     0123456789=_', k=32_000))
    histories = {size: tool_loop(steps) for size, steps in SCALE_SIZES.items()}
    cpu: dict[tuple[str, str], list[float]] = {}
    wall: dict[tuple[str, str], list[float]] = {}
    for name in _PER_REQUEST_PATHS:
        for _ in range(runs):
            gc.collect()  # between runs, untimed: the collector stays paused while timing (see `targets`)
            running: dict[str, tuple[_Path, list[ModelMessage], Callable[[], None]]] = {}
            for size, history in histories.items():
                path, close = _per_request_path(name)
                current = list(history)
                carried = await path(current)
                running[size] = (path, carried if carried is not None else current, close)
            for offset in range(repeat):
                for size, steps in SCALE_SIZES.items():
                    path, current, close = running[size]
                    current = [*current, *_step(steps + 1 + offset, 8_000, pool)]
                    started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
                    carried = await path(current)
                    cpu_ns, wall_ns = time.thread_time_ns() - started_cpu, time.perf_counter_ns() - started
                    cpu.setdefault((size, name), []).append(cpu_ns / 1e6)
                    wall.setdefault((size, name), []).append(wall_ns / 1e6)
                    running[size] = (path, carried if carried is not None else current, close)
            for _, _, close in running.values():
                close()
    return {
        size: {
            name: PerRequest(statistics.median(cpu[size, name]), statistics.median(wall[size, name]))
            for name in _PER_REQUEST_PATHS
        }
        for size in SCALE_SIZES
    }


_Path = Callable[[list[ModelMessage]], Awaitable[list[ModelMessage] | None]]

_PER_REQUEST_PATHS = (
    'trigger (measure)',
    'bounded selection (whole hook)',
    'forget-reasoning (decide)',
    'forget-reasoning (whole hook)',
    'archive (number new results)',
    'recall (index new parts)',
    'reset (read new steps ahead)',
    'clear then summarize (whole hook)',
)


def _per_request_path(name: str) -> tuple[_Path, Callable[[], None]]:
    """A fresh capability's per-request path *name* (what one request of a run costs) and what closes it."""
    from pydantic_ai_compaction import BoundedSelection

    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), run_step=5, prompt='Audit every log.')

    def nothing() -> None:
        return None

    if name == 'trigger (measure)':
        trigger = Trigger(tokens=10**9)

        async def measure(messages: list[ModelMessage]) -> None:
            trigger.measure(messages)

        return measure, nothing
    if name == 'bounded selection (whole hook)':
        selection = BoundedSelection[None]()

        async def select_path(messages: list[ModelMessage]) -> None:
            await selection.before_model_request(ctx, _request_context(messages))

        return select_path, nothing
    if name == 'forget-reasoning (decide)':
        forget = ForgetReasoning[None](policy='drop')

        async def forget_path(messages: list[ModelMessage]) -> list[ModelMessage]:
            # The decision and its steps written into the history, as the hook writes them into `ctx.messages`.
            for index, message in forget.decisions(messages).items():
                messages[index] = message
            return messages

        return forget_path, nothing
    if name == 'forget-reasoning (whole hook)':
        hooked = ForgetReasoning[None](policy='drop')

        async def forget_hook(messages: list[ModelMessage]) -> list[ModelMessage]:
            # What an agent pays: the decision, the runtime's check of the rewritten log and the request's copy.
            run = replace(ctx, messages=messages)
            await hooked.before_model_request(run, _request_context(messages))
            return run.messages

        return forget_hook, nothing
    if name == 'archive (number new results)':
        archive = Archive[None]()

        async def archive_path(messages: list[ModelMessage]) -> list[ModelMessage]:
            # Numbering and the runtime's check of the numbered requests, written into the history as the hook does.
            numbered = archive.number_new(ctx, messages)
            rewrite_log_at(messages, numbered, 'Archive', reason='numbered')
            return messages

        return archive_path, nothing
    if name == 'reset (read new steps ahead)':
        reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))

        async def reset_path(messages: list[ModelMessage]) -> None:
            reset._read_arrived(messages)  # pyright: ignore[reportPrivateUsage]  # its hook below the trigger

        return reset_path, nothing
    if name == 'clear then summarize (whole hook)':
        views: list[AbstractCapability[None]] = []

        async def tiered_path(messages: list[ModelMessage]) -> None:
            if not views:
                views.append(await _tiered_view(messages).for_run(ctx))
            await views[0].before_model_request(replace(ctx, messages=messages), _request_context(messages))

        return tiered_path, nothing
    store = SQLiteArchiveStore(':memory:')
    recall = Recall[None](store=store)

    async def recall_path(messages: list[ModelMessage]) -> None:
        recall.index('bench', messages)

    return recall_path, store.close


def _tiered_view(history: Sequence[ModelMessage]) -> ClearThenSummarize[None]:
    """The clearing tier over a window *history* fills past its clearing threshold (1.5× its estimate): a run's first
    request clears it, and the next ones send that projection and the steps after it, as between two clearings.

    At 10k tokens a step is a seventh of the window, so clearing comes again every few requests there; the larger
    histories send the projection of their first request to the end of the run.
    """
    return ClearThenSummarize[None](context_window=estimate_token_count(list(history)) * 3 // 2, summarize=False)


def scaling_table(measured: dict[str, dict[str, PerRequest]]) -> str:
    """Markdown: each per-request path at 10k / 100k / 1M / 5M tokens and the 5M / 100k ratio, in thread CPU time
    (met / not met) with the wall-clock figures of the same requests beside it."""
    sizes = list(SCALE_SIZES)
    header = [
        'path',
        *(f'{size} CPU ms' for size in sizes),
        '5M / 100k CPU',
        f'target ≤ {GROWTH_LIMIT:.0f}×',
        *(f'{size} wall ms' for size in sizes),
        '5M / 100k wall',
    ]
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for path in _PER_REQUEST_PATHS:
        ratio = measured['5M'][path].cpu_ms / max(measured['100k'][path].cpu_ms, 1e-6)
        wall = measured['5M'][path].wall_ms / max(measured['100k'][path].wall_ms, 1e-6)
        cells = [path, *(f'{measured[size][path].cpu_ms:.3f}' for size in sizes), f'{ratio:.1f}×']
        cells.append('met' if ratio <= GROWTH_LIMIT else 'not met')
        cells.extend([*(f'{measured[size][path].wall_ms:.3f}' for size in sizes), f'{wall:.1f}×'])
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


async def compaction_paths(repeat: int = 5, pairs: int = 7) -> list[Target]:
    """Every deterministic compaction path at 1M tokens, cold and with one new step, against ClearToolResults.

    The cold rows and the reset's, a few milliseconds each and the closest to their line, are timed in thread CPU
    time in *pairs* alternated with their anchor (`_paired`); the others are medians of *repeat* beside one anchor.
    """
    from pydantic_ai_compaction.runtime import segment

    steps = SCALE_SIZES['1M']
    history = tool_loop(steps)
    pool = ''.join(random.Random(11).choices('abcdefghijklmnopqrstuvwxyz     0123456789=_', k=32_000))
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    cctx = CompactionContext(run=ctx, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
    clear = ClearToolResults(max_tokens=1)
    clear_ms = await _ams(lambda: clear.compact(history, ctx), repeat)
    grown = [[*history, *_step(steps + 1 + r, 8_000, pool)] for r in range(repeat)]
    sources = InstructionSources(markers=('CHANGE:',))

    def one_step(function: Callable[[list[ModelMessage]], object]) -> float:
        function(history)
        times: list[float] = []
        for messages in grown:
            started = time.perf_counter()
            function(messages)
            times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times)

    view = segment(history)
    layout = validate(Proposal(kept=view.ids[-3:], summary=Summary('s')), view)
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1))
    rows: list[Target] = [
        _row('segmentation (one new step since the last)', one_step(lambda m: segment(m)), clear_ms),
        _row(
            'validator',
            _ms(lambda: validate(Proposal(kept=view.ids[::-2], summary=Summary('s')), view), repeat),
            clear_ms,
        ),
        _row('layout application', _ms(lambda: apply_layout(view, layout, {'strategy': 'bench'}), repeat), clear_ms),
        _row('reassert gather (one new step)', one_step(lambda m: gather_instructions(segment(m), sources)), clear_ms),
    ]

    def clearing(messages: list[ModelMessage]) -> Callable[[], Awaitable[float]]:
        async def anchor() -> float:
            return await _cpu_ms(lambda: clear.compact(messages, ctx))

        return anchor

    def compacting(messages: Callable[[], list[ModelMessage]]) -> Callable[[], Awaitable[float]]:
        async def subject() -> float:
            given = messages()  # a fresh copy, made before the clock starts
            return await _cpu_ms(lambda: run_compaction(reset, given, cctx))

        return subject

    def clearing_view(messages: Callable[[], list[ModelMessage]]) -> Callable[[], Awaitable[float]]:
        async def subject() -> float:
            given = messages()  # a fresh copy and its view, made before the clock starts
            view = await _tiered_view(given).for_run(ctx)
            run = replace(ctx, messages=given)
            reply = ModelResponse(parts=[TextPart('ok')])

            async def both_hooks() -> None:
                # Both hooks: the projection is made before the request and recorded with its response.
                sent = await view.before_model_request(run, _request_context(given))
                await view.after_model_request(run, request_context=sent, response=reply)

            # Process time, as its anchor: with a store the view clears in a worker thread, which thread time misses.
            return await _cpu_ms(both_hooks, time.process_time_ns)

        return subject

    async def clearing_all_threads() -> float:
        return await _cpu_ms(lambda: clear.compact(history, ctx), time.process_time_ns)

    def reading(function: Callable[[list[ModelMessage]], object]) -> Callable[[], Awaitable[float]]:
        async def subject() -> float:
            given = fresh_copy(history)  # made before the clock starts

            async def call() -> None:
                function(given)

            return await _cpu_ms(call)

        return subject

    rows[:0] = [
        ('segmentation (cold: a history never seen)', *await _paired(reading(segment), clearing(history), pairs))
    ]
    rows.insert(
        4,
        (
            'reassert gather (cold)',
            *await _paired(reading(lambda m: gather_instructions(segment(m), sources)), clearing(history), pairs),
        ),
    )
    rows.append(
        (
            'reset, whole compaction (cold)',
            *await _paired(compacting(lambda: fresh_copy(history)), clearing(history), pairs),
        )
    )
    rows.append(
        (
            'clear then summarize, first request (clears; cold, both hooks)',
            *await _paired(clearing_view(lambda: fresh_copy(history)), clearing_all_threads, pairs),
        )
    )
    # The results above are two lines each (`log N` and 8 KB on one line); a log of 80 lines of 100 characters
    # costs a reader of lines far more. Its own `ClearToolResults` anchor, on the same history.
    lined = tool_loop(steps, line_chars=100)
    rows.append(
        (
            'reset, whole compaction (cold; results of 80 lines)',
            *await _paired(compacting(lambda: fresh_copy(lined)), clearing(lined), pairs),
        )
    )
    await run_compaction(reset, history, cctx)
    more = iter([[*history, *_step(steps + 1 + r, 8_000, pool)] for r in range(pairs)])
    rows.append(
        (
            'reset, whole compaction (one new step)',
            *await _paired(compacting(lambda: next(more)), clearing(history), pairs),
        )
    )

    async def live() -> float:
        return await _live_reset_ms(steps)

    rows.append(
        (
            'reset, first compaction of a live run (hook time)',
            *await _paired(live, clearing(history), max(3, pairs // 2)),
        )
    )
    return rows


async def _live_reset_ms(steps: int) -> float:
    """Hook time (thread CPU) of the reset's first compaction in a real `agent.run` that reads *steps* 8 KB logs,
    one a request.

    The trigger is crossed by the request that brings the last log (the history is then `tool_loop(steps)`'s size),
    so every earlier request ran the reset's hook below the trigger, as a run's requests do.
    """
    from pydantic_ai import Agent
    from pydantic_ai.messages import TextPart, ThinkingPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import UsageLimits

    history = tool_loop(steps)
    pool = ''.join(random.Random(7).choices('abcdefghijklmnopqrstuvwxyz     0123456789=_', k=32_000))
    asked = [0]

    async def model(messages: list[ModelMessage], info: Any) -> ModelResponse:
        del messages, info
        step = asked[0]
        asked[0] += 1
        if step >= steps:
            return ModelResponse(parts=[TextPart('done')], usage=RequestUsage(input_tokens=1, output_tokens=1))
        return ModelResponse(
            parts=[
                ThinkingPart('checking the next log ' * 8),
                ToolCallPart('read_log', {'index': step}, tool_call_id=f'c{step}'),
            ],
            usage=RequestUsage(input_tokens=20 + step * 2_040, output_tokens=60),
        )

    def read_log(index: int) -> str:
        offset = (index * 7_919) % (len(pool) - 8_000)
        return f'log {index}\n{pool[offset : offset + 8_000]}'

    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=Trigger(tokens=1).measure(history[:-2]) + 1))
    spent: list[tuple[float, bool]] = []
    original = ResetToCheckpoint.before_model_request

    async def timed(self: Any, ctx: Any, request_context: Any) -> Any:
        before = len(ctx.messages)
        started = time.thread_time_ns()  # the run is one thread: the hook's own work, not the machine's load
        try:
            return await original(self, ctx, request_context)
        finally:
            spent.append(((time.thread_time_ns() - started) / 1e6, len(ctx.messages) < before))

    agent = Agent(FunctionModel(model), tools=[read_log], capabilities=[cast(Any, reset)])
    setattr(ResetToCheckpoint, 'before_model_request', timed)  # noqa: B010
    gc.collect()
    gc.disable()  # as `model_calling` times hooks: a collection of the run's garbage is not the hook's time
    try:
        await agent.run('Audit every log and report incidents.', usage_limits=UsageLimits(request_limit=steps + 5))
    finally:
        gc.enable()
        setattr(ResetToCheckpoint, 'before_model_request', original)  # noqa: B010
    compacted = [ms for ms, shrank in spent if shrank]
    if not compacted:
        raise RuntimeError('the live run never compacted')
    return compacted[0]


async def instant_reply(messages: list[ModelMessage], info: Any) -> ModelResponse:
    """An instant model: a short summary for a compactor call, `done` for the agent.

    The reply reports its usage, as a provider's does. Without it, `FunctionModel` estimates the usage
    itself by splitting every text of the request into words, client-side work no provider model does,
    which on a 1M-token request costs more than the whole compaction and would be charged to the hook.
    It is a coroutine, as a provider client's request is: `FunctionModel` runs a plain function in a worker
    thread, and the two thread switches per call (a few milliseconds each on a loaded machine, paid once by
    the anchor and once by every path) would be timed as hook time.
    """
    from pydantic_ai.messages import TextPart

    del messages, info
    return ModelResponse(
        parts=[TextPart('Summary: logs 0 to 499 read; no incident yet.')],
        usage=RequestUsage(input_tokens=1, output_tokens=12),
    )


async def model_calling(repeat: int = 9) -> list[Target]:
    """Hook time of each model-calling compaction inside a real `agent.run` (instant model) on the 1M history.

    The capability's `before_model_request` is timed where the agent calls it (the compactor's model call,
    its transcript and the request preparation included); the anchor is harness `SummarizingCompaction`
    timed the same way in the same process. Medians of *repeat* rounds: on a shared machine one hook's time
    varies by more than the gaps between paths, and nine rounds cost a few seconds.
    """
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai_harness.compaction import SummarizingCompaction

    from pydantic_ai_compaction import Fork, Reassert, StatelessSummary

    history = tool_loop(SCALE_SIZES['1M'])
    model = FunctionModel(instant_reply)
    low = Trigger(tokens=1_000)
    candidates: dict[str, Callable[[], Any]] = {
        'harness SummarizingCompaction': lambda: SummarizingCompaction(model=model, max_tokens=1_000, keep_messages=4),
        'summary': lambda: StatelessSummary[None](trigger=low),
        'fork-free': lambda: Fork[None](trigger=low, variant='free'),
        'fork-json (reply is not JSON: its fallback)': lambda: Fork[None](trigger=low, variant='json'),
        "summary, request='sent'": lambda: StatelessSummary[None](trigger=low, request='sent'),
        "fork-free, request='sent'": lambda: Fork[None](trigger=low, variant='free', request='sent'),
        'reassert+summary': lambda: Reassert[None](
            StatelessSummary[None](trigger=low), sources=InstructionSources(markers=('CHANGE:',))
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in candidates}
    # Round robin, the collector paused: the anchor and every path see the same machine load, whatever it does
    # during the run (a path timed in a quiet minute and the anchor in a busy one would say nothing).
    for _ in range(repeat):
        for name, make in candidates.items():
            capability = make()
            copy = fresh_copy(history)
            gc.collect()
            gc.disable()
            try:
                times[name].append(await _hook_time(capability, Agent(model, capabilities=[capability]), copy))
            finally:
                gc.enable()
    hooks = {name: statistics.median(spent) for name, spent in times.items()}
    anchor = hooks.pop('harness SummarizingCompaction')
    return [
        _row('harness SummarizingCompaction', anchor, anchor),
        *(_row(name, ms, anchor) for name, ms in hooks.items()),
    ]


async def _hook_time(capability: Any, agent: Any, history: list[ModelMessage]) -> float:
    """Milliseconds spent in *capability*'s `before_model_request` during one `agent.run`."""
    cls: type[Any] = type(cast(object, capability))
    had_own = 'before_model_request' in cls.__dict__
    original: Callable[..., Awaitable[Any]] = getattr(cls, 'before_model_request')  # noqa: B009
    spent: list[float] = []

    async def timed(self: Any, ctx: Any, request_context: Any) -> Any:
        started = time.perf_counter()
        try:
            return await original(self, ctx, request_context)
        finally:
            spent.append((time.perf_counter() - started) * 1000)

    setattr(cls, 'before_model_request', timed)  # noqa: B010
    try:
        await agent.run('Go on.', message_history=history)
    finally:
        if had_own:
            setattr(cls, 'before_model_request', original)  # noqa: B010
        else:
            delattr(cls, 'before_model_request')
    return sum(spent)


async def fifty_thousand(cold_runs: int = 3, step_runs: int = 5) -> list[Target]:
    """One compaction of a 50k-message history against one of the 1M-token (1k-message) history, in thread CPU
    time: medians of *cold_runs* on fresh copies and of *step_runs* with one new step.

    Each size is timed in a block of its own, not alternated with the other: right after a 50k-message compaction
    the 1M one-step compaction took 1.8× its time alone (3.3 ms against 1.8 ms, the processor's caches holding
    the other history), which would be charged to the anchor alone.
    """
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    cctx = CompactionContext(run=ctx, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
    pool = ''.join(random.Random(11).choices('abcdefghijklmnopqrstuvwxyz     0123456789=_', k=32_000))
    measured: dict[tuple[str, str], float] = {}
    for size, history in (('1M / 1k messages', tool_loop(SCALE_SIZES['1M'])), ('50k messages', tiny_loop(TINY_STEPS))):
        reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1))
        outcomes: list[Any] = []
        times: list[float] = []
        for _ in range(cold_runs):
            copy = fresh_copy(history)
            times.append(await _cpu_ms(partial(_kept, outcomes, run_compaction, reset, copy, cctx)))
        measured[(size, 'cold')] = statistics.median(times)
        if size == '50k messages':
            # A reset that falls back or skips at 50k messages (its checkpoint outgrowing the history) is a bug.
            skipped = [outcome for outcome in outcomes if isinstance(outcome, Skipped)]
            print(f'50k-message reset: {f"skipped ({skipped[0].reason})" if skipped else "compacted"}\n')
        await run_compaction(reset, history, cctx)
        steps = len(history) // 2
        times = []
        for r in range(step_runs):
            grown = [*history, *(_step(steps + 1 + r, 8_000, pool) if size.startswith('1M') else tiny_loop(1)[1:])]
            times.append(await _cpu_ms(partial(run_compaction, reset, grown, cctx)))
        measured[(size, 'one new step')] = statistics.median(times)
    return [
        _row(f'reset, 50k messages ({state})', measured[('50k messages', state)], measured[('1M / 1k messages', state)])
        for state in ('cold', 'one new step')
    ]


async def _kept(outcomes: list[Any], function: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Await *function* on *args*, its outcome appended to *outcomes*."""
    outcomes.append(await function(*args))


def target_lines(rows: Sequence[Target], anchor: str, limit: float) -> str:
    """Markdown: each path's ms, its anchor's ms, the ratio and met / not met against *limit*."""
    lines = [
        f'| path | ms | {anchor} ms | ratio | target ≤ {limit:g}× |',
        '|---|---|---|---|---|',
    ]
    for name, ms, anchor_ms, ratio in rows:
        lines.append(
            f'| {name} | {ms:.2f} | {anchor_ms:.2f} | {ratio:.2f}× | {"met" if ratio <= limit else "not met"} |'
        )
    return '\n'.join(lines)


async def targets() -> None:
    """Print the issue-16 target tables (items 1 and 2).

    The collector is paused while timing (as `timeit` does): a full collection over a 5M-token history lands
    on whichever request happens to allocate last and would be charged to it.
    """
    import gc

    gc.collect()
    gc.disable()
    try:
        await _targets()
    finally:
        gc.enable()


async def _targets() -> None:
    print('## Per-request paths: one new step at 10k / 100k / 1M / 5M tokens (median thread CPU ms, wall beside)\n')
    print(scaling_table(await per_request_scaling()))
    print('\n## Deterministic compaction paths at 1M tokens against harness ClearToolResults (same history)\n')
    print(target_lines(await compaction_paths(), 'ClearToolResults', 1.0))
    print('\n## Model-calling compactions: hook time inside agent.run (instant model, 1M tokens)\n')
    print(target_lines(await model_calling(), 'SummarizingCompaction', 1.0))
    print('\n## 50k tiny messages: one compaction against one of the 1M-token, 1k-message history\n')
    print(target_lines(await fifty_thousand(), '1M / 1k messages', 10.0))
    print()


def main() -> int:
    """Print every table; the exit status (130 after Ctrl-C, which stops the run at once with one line).

    Not one `asyncio.run` for all of it: its handler turns the first Ctrl-C into a cancellation the main task sees at
    its next suspension only, and the timed loops await hooks that never suspend, so the first Ctrl-C went unnoticed
    until the run's end and the second one printed a traceback. With a handler of its own installed, the runner
    leaves SIGINT alone, and the interrupt is raised where the code is.
    """
    from pydantic_ai_compaction_bench import savings, scale

    signal.signal(signal.SIGINT, _interrupt)
    try:
        asyncio.run(_tables())
        scale.main()  # blocking, with threads and event loops of its own
        asyncio.run(savings.main())
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


INTERRUPTED = 'make bench: interrupted'
"""The one line printed on stderr after Ctrl-C."""

EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT, as shells report it)."""


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


async def _tables() -> None:
    """The tables measured in this process's event loop."""
    from pydantic_ai_compaction_bench import startup

    startup.main()
    print()
    await targets()
    rows = await overhead()
    print('## Per-request overhead (median ms; ratios against harness on the same history)\n')
    print(overhead_table(rows))
    print('\n## Recall query latency over the 1M-token log\n')
    print('| search | p50 ms | p95 ms |\n|---|---|---|')
    for name, (p50, p95) in (await recall_latency()).items():
        print(f'| {name} | {p50:.2f} | {p95:.2f} |')
    print('\n## Peak memory, one compaction of the 1M-token history\n')
    for name, value in (await peak_memory()).items():
        print(f'- {name}: {value:,.1f}')
    print()


if __name__ == '__main__':
    raise SystemExit(main())
