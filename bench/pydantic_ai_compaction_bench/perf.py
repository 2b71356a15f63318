"""`make bench`: import cost, per-request overhead against harness at up to 1M tokens, recall latency, memory
at 10M tokens, savings and cost under a prompt cache.

Every figure is measured in the same process, next to its anchor (harness `estimate_context_tokens` and
`ClearToolResults.compact` on the same history), and printed as a ratio, so the figures compare across
machines even though the milliseconds do not.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
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
from pydantic_ai_compaction.runtime.stores import SQLiteArchiveStore
from pydantic_ai_compaction_bench.recall_compare import _OneRun  # pyright: ignore[reportPrivateUsage]

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
    numbered = archive._number_new(ctx, history[:-2]) or history[:-2]  # pyright: ignore[reportPrivateUsage]
    forget = ForgetReasoning(policy='drop')
    decided = forget.decide(history[:-2]) or history[:-2]
    steady_archive = [*numbered, *history[-2:]]
    steady_forget = [*decided, *history[-2:]]
    reset = ResetToCheckpoint(trigger=Trigger(tokens=1))
    below = ResetToCheckpoint(trigger=Trigger(tokens=10**9))
    cctx = CompactionContext(run=ctx, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
    paths: dict[str, Callable[[], object]] = {
        'trigger (measure)': lambda: Trigger(tokens=1).measure(history),
        'segmentation': lambda: segment(history),
        'validator': lambda: validate(Proposal(kept=view.ids[::-2], summary=Summary('s')), view),
        'layout application': lambda: apply_layout(view, layout, {'strategy': 'bench'}),
        'reassert (gather changes)': lambda: gather_instructions(view, InstructionSources(markers=('CHANGE:',))),
        'archive (number new results)': lambda: archive._number_new(later, steady_archive),  # pyright: ignore[reportPrivateUsage]
        'forget-reasoning (decide)': lambda: forget.decide(steady_forget),
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


async def main() -> None:
    """Print every table."""
    from pydantic_ai_compaction_bench import savings, scale, startup

    startup.main()
    print()
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
    # Blocking (threads and their own event loops): run outside this one.
    await asyncio.to_thread(scale.main)
    await savings.main()


if __name__ == '__main__':
    asyncio.run(main())
