"""Our strategies as harness `CompactionStrategy` tiers: `TieredCompaction`, `FallbackCompaction`, `compact_now`."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

import pytest
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
    NoCompaction,
    Reassert,
    Recall,
    ResetToCheckpoint,
    StatelessSummary,
    Switch,
    Trigger,
)
from pydantic_ai_compaction.protocols.types import CompactionState
from pydantic_ai_compaction.runtime import our_record, pairing_problems
from pydantic_ai_compaction.runtime.capability import CompactionCapability
from pydantic_ai_compaction.runtime.checks import ConfigurationError

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


@pytest.mark.parametrize('with_archive', [True, False])
def test_recall_does_not_index_a_placeholder_harness_left_in_place_of_a_result(with_archive: bool) -> None:
    # With `Archive` (whose numbering makes recall read the whole history again) the placeholder was indexed as the
    # tool's output: a hit for every search matching its call, and eight for `cleared`.
    store = InMemoryArchiveStore()
    steps: list[list[ModelResponsePart]] = [
        *([ToolCallPart('read_log', {'service': 'payments', 'day': day})] for day in range(1, 5)),
        [ToolCallPart('recall', {'query': 'payments'})],
        [ToolCallPart('recall', {'query': 'cleared'})],
        [TextPart('done')],
    ]
    queue = iter(steps)
    answers: list[str] = []  # each recall's answer as the model read it (harness clears it later)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answers.extend(
            str(p.content) for p in messages[-1].parts if isinstance(p, ToolReturnPart) and p.tool_name == 'recall'
        )
        return ModelResponse(parts=next(queue))

    memory = [Archive(store=store, conversation='c')] if with_archive else []
    agent = Agent(
        FunctionModel(respond),
        capabilities=[*memory, Recall(store=store, conversation='c'), ClearToolResults(max_messages=4, keep_pairs=1)],
    )

    @agent.tool_plain
    def read_log(service: str, day: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'day {day}: error_rate = 0.{day}%'

    result = agent.run_sync('How did payments do?')
    cleared = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart) and p.metadata]
    assert any('cleared' in str(p.content) for p in cleared)  # harness did clear results before the searches
    found, missed = answers
    assert 'cleared' not in found
    assert [day for day in range(1, 5) if f'day {day}: error_rate = 0.{day}%' in found] == [1, 2, 3, 4]
    assert missed.endswith("No match for 'cleared' anywhere in this conversation.")


def _raising(state: CompactionState) -> bool:
    raise KeyError('tenant')


def test_a_switch_tier_whose_predicate_raises_skips_with_a_warning_and_the_run_finishes() -> None:
    script = ScriptedAgentModel(logs=8)
    switch = Switch(when=_raising, then=Fork(), otherwise=StatelessSummary())
    tiered = TieredCompaction(tiers=[ClearToolResults(max_tokens=1, keep_pairs=1), switch], target_tokens=500)
    with pytest.warns(RuntimeWarning, match=r"switch\(fork\|summary\) compaction was skipped: KeyError\('tenant'\)"):
        result = audit_agent(script, [tiered]).run_sync('Audit.')
    assert result.output == 'report: done'
    assert records(result.all_messages()) == [] and 'fork' not in script.calls and 'summary' not in script.calls


async def test_a_switch_driven_by_harness_decides_on_the_history_s_estimated_tokens() -> None:
    seen: list[int] = []

    def small(state: CompactionState) -> bool:
        seen.append(state.tokens)
        return state.tokens < 3_000

    history = recorded_history(steps=6, lines=200)
    model = ScriptedAgentModel(compactor=lambda messages, kind: 'summary of logs 0-5').model()
    hybrid = Switch(when=small, then=NoCompaction(), otherwise=StatelessSummary())
    out = await compact_now(hybrid, history, model=model)
    # The state holds what the trigger path measures (before: 0, so the small branch was taken on every history).
    assert seen == [Trigger(tokens=1).measure(history)] and seen[0] > 3_000
    assert [r['strategy'] for r in records(out)] == ['summary']


def test_a_field_set_after_construction_is_refused_when_harness_first_asks_to_compact() -> None:
    fork = Fork()
    fork.variant = 'bogus'  # pyright: ignore[reportAttributeAccessIssue]
    reassert = Reassert(Fork(), sources=InstructionSources(markers=()))
    reassert.inner = None  # pyright: ignore[reportAttributeAccessIssue]
    for strategy, error in (
        (fork, "Fork.variant must be one of 'json', 'free', 'fixed', got 'bogus'"),
        (reassert, 'Reassert.inner must be a compaction strategy, got None'),
    ):
        tiered = TieredCompaction(tiers=[strategy], target_tokens=500)
        # The error the agent's own run start gives, not a silent fallback at every compaction or an AttributeError.
        with pytest.raises(ConfigurationError, match=re.escape(error)):
            audit_agent(ScriptedAgentModel(logs=8), [tiered]).run_sync('Audit.')


def test_a_wrapper_subclass_with_its_own_init_compacts_around_a_switch() -> None:
    @dataclass
    class TeamReassert(Reassert[None]):
        def __init__(self, inner: CompactionCapability[None]) -> None:
            super().__init__(inner, sources=InstructionSources(markers=('CHANGE:',)))

    script = ScriptedAgentModel(logs=8, compactor=lambda messages, kind: fork_json([]) if kind == 'fork' else 'sum')
    switch = Switch(
        when=lambda state: state.compactions < 1,
        then=StatelessSummary(trigger=Trigger(tokens=3_000)),
        otherwise=Fork(trigger=Trigger(tokens=3_000)),
    )
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # before: skipped at every request with a TypeError about `id`
        result = audit_agent(script, [TeamReassert(switch)]).run_sync('Audit.')
    strategies = [r['strategy'] for r in records(result.all_messages())]
    assert strategies[:2] == ['reassert+summary', 'reassert+fork']
    assert pairing_problems(result.all_messages()) == []
