"""Our strategies as harness `CompactionStrategy` tiers: `TieredCompaction`, `FallbackCompaction`, `compact_now`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, ModelResponsePart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext
from pydantic_ai_harness.compaction import (
    ClearToolResults,
    CompactionStrategy,
    FallbackCompaction,
    TieredCompaction,
    compact_now,
)

from pydantic_ai_compaction import (
    Archive,
    Fork,
    InMemoryArchiveStore,
    InstructionSources,
    Reassert,
    ResetToCheckpoint,
    StatelessSummary,
)
from pydantic_ai_compaction.runtime import our_record, pairing_problems

from .support import ScriptedAgentModel, audit_agent, fork_json, recorded_history


def records(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    return [r for m in messages for p in m.parts if (r := our_record(p)) is not None]


def test_strategies_satisfy_the_harness_protocol() -> None:
    strategy: CompactionStrategy[None] = Fork()
    assert callable(strategy.compact)


def test_fork_as_the_last_tier_of_tiered_compaction() -> None:
    script = ScriptedAgentModel(logs=8, compactor=lambda messages, kind: fork_json([]))
    tiered = TieredCompaction(tiers=[ClearToolResults(max_tokens=1, keep_pairs=1), Fork()], target_tokens=1_000)
    agent = audit_agent(script, [tiered])
    result = agent.run_sync('Audit.')
    history = result.all_messages()
    assert result.output == 'report: done'
    assert script.calls.count('fork') >= 2
    assert [r['strategy'] for r in records(history)] and all(r['strategy'] == 'fork' for r in records(history))
    assert pairing_problems(history) == []


def test_summary_tier_runs_only_when_clearing_is_not_enough() -> None:
    def run(target: int) -> tuple[int, list[ModelMessage]]:
        script = ScriptedAgentModel(logs=8, compactor=lambda messages, kind: 'summary: all clean')
        tiers = [ClearToolResults(max_tokens=1, keep_pairs=2), StatelessSummary()]
        result = audit_agent(script, [TieredCompaction(tiers=tiers, target_tokens=target)]).run_sync('Audit.')
        return script.calls.count('summary'), result.all_messages()

    # Two kept logs (~2,700 tokens) fit 6,000: clearing alone suffices and no summary is written.
    summaries, history = run(6_000)
    assert summaries == 0 and records(history) == []
    # They do not fit 2,000: the summary tier runs after clearing.
    summaries, history = run(2_000)
    assert summaries >= 1
    assert {r['strategy'] for r in records(history)} == {'summary'}
    assert pairing_problems(history) == []


@dataclass
class Broken:
    """A tier that always fails with a provider error."""

    async def compact(self, messages: list[ModelMessage], ctx: RunContext[Any]) -> list[ModelMessage]:
        raise ModelHTTPError(status_code=503, model_name='test', body='down')


def test_fallback_compaction_falls_back_to_our_strategy() -> None:
    script = ScriptedAgentModel(logs=6)
    agent = audit_agent(script, [FallbackCompaction(fallback_chain=[Broken(), ResetToCheckpoint()], max_tokens=3_000)])
    result = agent.run_sync('Audit.')
    assert result.output == 'report: done'
    assert {r['strategy'] for r in records(result.all_messages())} == {'reset'}


async def test_compact_now_drives_a_wrapped_strategy() -> None:
    model = ScriptedAgentModel(compactor=lambda messages, kind: 'summary of logs 0-5').model()
    out = await compact_now(
        Reassert(StatelessSummary(), sources=InstructionSources(markers=())), recorded_history(), model=model
    )
    (record,) = records(out)
    assert record['strategy'] == 'reassert+summary'
    assert record['restated'] == []  # user prompts only: tool output is not read
    assert out[-1] is recorded_history()[-1] or out[-1].parts == recorded_history()[-1].parts


def test_archive_refuses_a_result_harness_cleared_and_keeps_nothing_of_it() -> None:
    # Archived, the placeholder would have been "recovered" in place of the output, which is no longer anywhere.
    store = InMemoryArchiveStore()
    steps: list[list[ModelResponsePart]] = [
        *([ToolCallPart('read', {'index': index})] for index in range(3)),
        [ToolCallPart('context_apply', {'items': [{'result_id': 'r1', 'note': 'log 0 read'}]})],
        [TextPart('done')],
    ]
    queue = iter(steps)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=next(queue))

    agent = Agent(
        FunctionModel(respond),
        capabilities=[Archive(store=store, conversation='c'), ClearToolResults(max_tokens=200, keep_pairs=1)],
    )

    @agent.tool_plain
    def read(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'log {index}\n' + 'line of the log\n' * 40

    result = agent.run_sync('Read the logs.')
    (answer,) = [
        str(p.content)
        for m in result.all_messages()
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.tool_name == 'context_apply'
    ]
    assert 'r1: already cleared by another compaction (only a placeholder is left)' in answer
    assert store.get_archived('c', 'a1') is None
