"""Recall against harness `ConversationSearch` on the delayed-recall corpus: hits and latency."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage
from pydantic_ai_harness.conversation_search import ConversationSearch
from pydantic_ai_harness.step_persistence import RunRecord

from pydantic_ai_compaction.processors.memory.recall import Recall
from pydantic_ai_compaction.runtime.stores import SQLiteArchiveStore
from pydantic_ai_compaction_bench.reference.recall import recall_query
from pydantic_ai_compaction_bench.tasks import recall


def corpus(scenario: recall.RecallScenario) -> list[ModelMessage]:
    """The session as the agent saw it: six reports, then the log files read between rounds."""
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(scenario.opening_prompt)])]
    for index, service in enumerate(scenario.services):
        call = ToolCallPart('run_diagnostics', {'service': service}, tool_call_id=f'd{index}')
        messages.append(ModelResponse(parts=[call]))
        messages.append(
            ModelRequest(parts=[ToolReturnPart('run_diagnostics', scenario.reports[service], tool_call_id=f'd{index}')])
        )
    for index, (path, text) in enumerate(scenario.files):
        call = ToolCallPart('read_file', {'path': path}, tool_call_id=f'f{index}')
        messages.append(ModelResponse(parts=[call]))
        messages.append(ModelRequest(parts=[ToolReturnPart('read_file', text, tool_call_id=f'f{index}')]))
    return messages


@dataclass
class _OneRun:
    """A `HistorySource` over one in-memory run, for harness's search."""

    messages: list[ModelMessage]

    async def list_runs(self) -> list[RunRecord]:
        return [RunRecord(run_id='run', conversation_id='conversation')]

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        return self.messages if run_id == 'run' else []


@dataclass(frozen=True)
class SearchResult:
    """Hits and latency of one search tool over every question."""

    tool: str
    questions: int
    hits: int
    p50_ms: float
    p95_ms: float


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def compare(seeds: Sequence[int], *, limit: int = 8) -> list[SearchResult]:
    """Ask every question of every seed with the player's plain-words query; a hit shows `key = value`."""
    ours_hits = theirs_hits = total = 0
    ours_ms: list[float] = []
    theirs_ms: list[float] = []
    for seed in seeds:
        scenario = recall.generate(seed)
        messages = corpus(scenario)
        store = SQLiteArchiveStore(':memory:')
        Recall(store=store).index('conversation', messages)
        search = ConversationSearch(_OneRun(messages), scope='conversation', max_matches=limit)
        # The toolset's search method is what the model's tool call runs; called directly here.
        toolset: Any = search.get_toolset()
        ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), conversation_id='conversation')
        for question in (q for round_ in scenario.rounds for q in round_):
            expected = f'{question.key} = {question.answer}'
            query = recall_query(question.service, question.key)
            total += 1
            started = time.perf_counter()
            hits = store.search('conversation', query, limit)
            ours_ms.append((time.perf_counter() - started) * 1000)
            ours_hits += any(expected in hit.text for hit in hits)
            started = time.perf_counter()
            answer = await toolset.search_conversation_history(ctx, query)
            theirs_ms.append((time.perf_counter() - started) * 1000)
            theirs_hits += expected in str(answer)
        store.close()
    return [
        SearchResult('recall (SQLite FTS5)', total, ours_hits, statistics.median(ours_ms), _percentile(ours_ms, 0.95)),
        SearchResult(
            'harness ConversationSearch (BM25)',
            total,
            theirs_hits,
            statistics.median(theirs_ms),
            _percentile(theirs_ms, 0.95),
        ),
    ]


def table(results: Sequence[SearchResult]) -> str:
    """Markdown."""
    lines = ['| search | questions | hits | p50 ms | p95 ms |', '|---|---|---|---|---|']
    lines += [f'| {r.tool} | {r.questions} | {r.hits} | {r.p50_ms:.2f} | {r.p95_ms:.2f} |' for r in results]
    return '\n'.join(lines)
