"""Explicit proposals mean what they say; `decide` has the last word; Pipeline composes; Fork takes settings."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    CompactionContext,
    CompactionEvent,
    ConfiguredCompaction,
    ConversationView,
    Fork,
    InstructionSources,
    Layout,
    Pipeline,
    Proposal,
    Reassert,
    StatelessSummary,
    Summary,
    Switch,
    Trigger,
)
from pydantic_ai_compaction.runtime import segment, validate
from pydantic_ai_compaction.runtime.validate import Outcome, Skipped, decide
from pydantic_ai_compaction.testing import replay

from .support import ScriptedAgentModel, audit_agent, fork_json, recorded_history

TRIGGER = Trigger(tokens=1_500)


def droppable(view: ConversationView) -> list[str]:
    return [exchange.id for exchange in view.exchanges if not exchange.forced]


def test_keep_with_nothing_named_drops_every_droppable_exchange_without_falling_back() -> None:
    view = segment(recorded_history())
    layout = validate(Proposal.keep(), view)
    assert layout.fallback_reason is None
    assert layout.summary is None
    assert list(layout.dropped) == droppable(view)
    # The raw form of an empty reply is still malformed: a model that says nothing chose nothing.
    assert validate(Proposal(), view).fallback_reason == 'empty'


def test_keep_takes_ids_exchanges_and_iterables_of_either() -> None:
    view = segment(recorded_history())
    first, second, *_ = [e for e in view.exchanges if not e.forced]
    proposal = Proposal.keep(first, [second.id], summary='gone')
    assert proposal.kept == (first.id, second.id)
    assert proposal.summary == Summary('gone')
    assert validate(proposal, view).keep[1:3] == (first.id, second.id)


def test_drop_all_keeps_only_what_is_forced() -> None:
    view = segment(recorded_history())
    layout = validate(Proposal.drop_all(Summary('all of it')), view)
    assert set(layout.keep) == {e.id for e in view.exchanges if e.forced}
    assert layout.summary == Summary('all of it')
    assert validate(Proposal.drop_all(), view).fallback_reason is None


def test_an_explicit_keep_everything_is_respected_and_a_parsed_one_is_not() -> None:
    view = segment(recorded_history())

    def build(layout: Layout) -> Outcome:
        raise AssertionError('nothing may be built')

    decided = decide(Proposal.keep(view.ids, summary='s'), view, build)
    assert decided == Skipped('declined', 'the proposal keeps every exchange')

    class Built(Exception):
        pass

    def record(layout: Layout) -> Outcome:
        raise Built(layout.fallback_reason)

    with pytest.raises(Built, match='kept_all'):
        decide(Proposal(kept=view.ids, summary=Summary('s')), view, record)


async def test_a_declined_proposal_leaves_a_replayed_history_unchanged() -> None:
    @dataclass
    class KeepEverything(ConfiguredCompaction[None]):
        @property
        def strategy_name(self) -> str:
            return 'keep-everything'

        async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
            return Proposal.keep(view.exchanges)

    history = recorded_history()
    out = await replay(KeepEverything(), history, model=FunctionModel(lambda m, i: ModelResponse(parts=[])))
    assert out == history


def test_a_pipeline_is_a_branch_of_switch() -> None:
    events: list[CompactionEvent] = []
    pipeline = Pipeline([StatelessSummary(trigger=TRIGGER, observer=events.append)])
    script = ScriptedAgentModel(logs=4)
    switch = Switch(when=lambda state: True, then=pipeline, otherwise=Fork(trigger=TRIGGER))
    result = audit_agent(script, [switch]).run_sync('Audit logs 0-3.')
    assert result.output == 'report: done'
    assert 'summary' in script.calls and 'fork' not in script.calls
    assert {event.strategy for event in events if event.kind == 'compacted'} == {'summary'}
    assert switch.strategy_name == 'switch(pipeline(summary)|fork)'


def test_reassert_wraps_a_pipeline() -> None:
    pipeline = Pipeline([Fork(trigger=TRIGGER), StatelessSummary(trigger=TRIGGER)])
    wrapped = Reassert(pipeline, sources=InstructionSources(markers=()))
    script = ScriptedAgentModel(logs=4, compactor=lambda messages, kind: fork_json([]))
    result = audit_agent(script, [wrapped]).run_sync('Audit logs 0-3.')
    assert result.output == 'report: done'
    assert wrapped.runtime == pipeline.steps[0].runtime
    # The pipeline proposes through its first usable step, the fork.
    assert 'fork' in script.calls and 'summary' not in script.calls


async def test_fork_sends_its_model_settings_and_still_answers_in_text() -> None:
    seen: list[dict[str, object]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(dict(info.model_settings or {}))
        return ModelResponse(parts=[TextPart(fork_json([]))])

    fork = Fork(model_settings={'temperature': 0.25, 'tool_choice': 'auto'})
    out = await replay(fork, recorded_history(), model=FunctionModel(reply))
    assert seen and seen[0]['temperature'] == 0.25 and seen[0]['tool_choice'] == 'none'
    assert any(getattr(p, 'part_kind', '') == 'compaction' for m in out for p in m.parts)


async def test_notes_reach_the_boundary_through_the_engines_named_hook() -> None:
    from pydantic_ai import RunContext
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    from pydantic_ai_compaction.protocols.names import NOTE_TOOL
    from pydantic_ai_compaction.runtime.context import CompactionContext as Context
    from pydantic_ai_compaction.runtime.engine import run_compaction

    @dataclass
    class DropAll:
        strategy_name: str = 'drop-all'

        async def propose(self, view: ConversationView, ctx: Context) -> Proposal:
            return Proposal.drop_all('summary')

    model = TestModel()
    run = RunContext(deps=None, model=model, usage=RunUsage())
    history = recorded_history()
    noted = history[1]
    assert isinstance(noted, ModelResponse)
    history[1] = ModelResponse(parts=[*noted.parts, ToolCallPart(NOTE_TOOL, {'kind': 'fact', 'text': 'port 8080'})])
    outcomes: list[Outcome] = []
    for hook in ({}, {'notes': None}):
        ctx = Context(run=run, model=model, model_settings=None, parameters=ModelRequestParameters())
        outcome = await run_compaction(DropAll(), history, ctx, min_saving=0, **hook)  # pyright: ignore[reportArgumentType]
        assert isinstance(outcome, Outcome)
        outcomes.append(outcome)
    with_notes, without = outcomes
    assert with_notes.record.extra['notes'] == ['[fact] port 8080']
    assert 'port 8080' in str(with_notes.messages)
    assert 'notes' not in without.record.extra and 'port 8080' not in str(without.messages)
