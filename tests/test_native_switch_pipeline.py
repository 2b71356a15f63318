"""Native (provider and emulated), Switch and Pipeline."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction import (
    CompactionEvent,
    Fork,
    InstructionSources,
    Native,
    Pipeline,
    Reassert,
    ResetToCheckpoint,
    StatelessSummary,
    Switch,
    Trigger,
)
from pydantic_ai_compaction.runtime import our_record, pairing_problems, segment

from .support import ScriptedAgentModel, audit_agent, fork_json

TRIGGER = Trigger(tokens=3_000)


class CompactingModel(FunctionModel):
    """A FunctionModel whose provider compacts conversations itself, like OpenAI Responses."""

    compacted: list[int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.compacted = []

    async def compact_messages(
        self, request_context: ModelRequestContext, *, instructions: str | None = None
    ) -> ModelResponse:
        self.compacted.append(len(request_context.messages))
        part = CompactionPart(
            content=None, id='cmp_1', provider_name='function', provider_details={'encrypted_content': 'xyz'}
        )
        return ModelResponse(
            parts=[part],
            usage=RequestUsage(input_tokens=500, output_tokens=40),
            model_name='compactor',
            provider_name='function',
        )


def test_native_uses_provider_compaction_when_the_model_has_it() -> None:
    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=8)
    model = CompactingModel(script)
    from pydantic_ai import Agent

    agent = Agent(model, capabilities=[Native(trigger=TRIGGER, observer=events.append)])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        from .support import log_text

        return log_text(index)

    result = agent.run_sync('Audit.')
    compactions = [e for e in events if e.kind == 'compacted']
    assert len(compactions) >= 3 and len(model.compacted) == len(compactions)
    assert 'native' not in script.calls  # no emulation request was made
    for event in compactions:
        assert event.record is not None and event.record.variant == 'provider'
        assert event.record.compactor_usage.input_tokens == 500
        history = list(event.history)
        provider_parts = [p for m in history for p in m.parts if isinstance(p, CompactionPart) and p.provider_name]
        # The provider's part is kept as sent, with our record added to its (model-invisible) metadata.
        assert all(p.provider_details == {'encrypted_content': 'xyz'} for p in provider_parts)
        assert our_record(provider_parts[-1])['boundary_id'] == event.record.boundary_id  # pyright: ignore[reportOptionalSubscript]
        assert pairing_problems(history) == []
    assert result.output == 'report: done'


def test_native_emulation_reports_its_variant() -> None:
    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=6)
    audit_agent(script, [Native(trigger=TRIGGER, observer=events.append)]).run_sync('Audit.')
    variants = {e.record.variant for e in events if e.record}
    assert variants == {'emulated'} and script.calls.count('native') == len([e for e in events if e.record])


def test_switch_picks_by_state() -> None:
    events: list[CompactionEvent] = []

    def reply(messages: list[ModelMessage], kind: str) -> str:
        return fork_json([]) if kind == 'fork' else 'summary of the logs'

    script = ScriptedAgentModel(logs=10, compactor=reply)
    switch = Switch(
        when=lambda state: state.compactions < 2,
        then=Reassert(Native(trigger=TRIGGER, observer=events.append), sources=InstructionSources(markers=())),
        otherwise=Fork(trigger=TRIGGER, observer=events.append),
    )
    result = audit_agent(script, [switch]).run_sync('Audit.')
    strategies = [e.record.strategy for e in events if e.record]
    assert strategies[:2] == ['reassert+native', 'reassert+native']
    assert set(strategies[2:]) == {'fork'} and len(strategies) >= 3
    assert pairing_problems(result.all_messages()) == []


def test_pipeline_runs_each_step_on_its_own_trigger() -> None:
    script = ScriptedAgentModel(logs=10, compactor=lambda messages, kind: 'summary of the logs')
    pipeline = Pipeline(
        [
            ResetToCheckpoint(trigger=Trigger(tokens=3_000), excerpt_chars=0),
            StatelessSummary(trigger=Trigger(tokens=3_000)),
        ]
    )
    result = audit_agent(script, [pipeline]).run_sync('Audit.')
    records = [r for m in result.all_messages() for p in m.parts if (r := our_record(p))]
    # After a reset only forced exchanges remain, so the summary step has nothing to do.
    assert {r['strategy'] for r in records} == {'reset'}
    assert 'summary' not in script.calls
    kinds = [e.kind for e in segment(result.all_messages()).exchanges]
    assert kinds[:2] == ['opening', 'boundary']


def test_a_wrapped_pipeline_runs_each_step_wrapped_on_its_own_trigger() -> None:
    # Wrapped, a pipeline triggered on its first step alone and proposed with the first usable step: the 1,500-token
    # summary never ran and requests grew to the 3,000-token reset's trigger.
    from pydantic_ai import Agent
    from pydantic_ai.messages import TextPart, ToolCallPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo

    from pydantic_ai_compaction import Verified
    from pydantic_ai_compaction.runtime.tokens import estimate_token_count

    def run(capability: Any) -> tuple[int, list[str]]:
        sizes: list[int] = []

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            prompt = ' '.join(str(p.content) for p in messages[-1].parts if isinstance(p, UserPromptPart))
            if '[pydantic-ai-compaction' in prompt:
                return ModelResponse(parts=[TextPart('Summary: logs read so far, all ok.')])
            sizes.append(estimate_token_count(messages))
            usage = RequestUsage(input_tokens=sizes[-1], output_tokens=10)
            if len(sizes) < 16:
                return ModelResponse(parts=[ToolCallPart('read_log', {'index': len(sizes)})], usage=usage)
            return ModelResponse(parts=[TextPart('done')], usage=usage)

        agent = Agent(FunctionModel(respond), capabilities=[capability])

        @agent.tool_plain
        def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
            return '\n'.join(f'{index}-{n} service=api status=ok' for n in range(40))

        result = agent.run_sync('Audit logs 1-15.')
        return max(sizes), [r['strategy'] for m in result.all_messages() for p in m.parts if (r := our_record(p))]

    def pipeline() -> Pipeline[None]:
        return Pipeline(
            [ResetToCheckpoint(trigger=Trigger(tokens=3_000)), StatelessSummary(trigger=Trigger(tokens=1_500))]
        )

    largest, alone = run(pipeline())
    assert alone and set(alone) == {'summary'}  # the second step, on its lower trigger
    assert run(Reassert(pipeline(), sources=InstructionSources(markers=()))) == (
        largest,
        [f'reassert+{name}' for name in alone],
    )
    assert run(Verified(pipeline())) == (largest, [f'verified({name})' for name in alone])
    nested = Verified(Reassert(pipeline(), sources=InstructionSources(markers=())))  # each step wrapped in both
    assert run(nested) == (largest, [f'verified(reassert+{name})' for name in alone])


def test_a_wrapper_of_the_users_own_around_a_pipeline_still_compacts() -> None:
    # Wrapping each step copies the wrapper; one of the user's with an `__init__` of its own cannot be copied, and
    # every request was skipped with a `TypeError` (`compact()` raised it). It wraps the pipeline as one instead.
    from pydantic_ai_compaction.runtime import WrappingCompaction

    class Audited(WrappingCompaction[None]):
        def __init__(self, inner: Any, log: list[str]) -> None:
            self.inner = inner
            self.log = log

        @property
        def strategy_name(self) -> str:
            return f'audited({self.inner.strategy_name})'

        async def propose(self, view: Any, ctx: Any) -> Any:
            proposal = await self.inner.propose(view, ctx)
            self.log.append(proposal.variant or 'default')
            return proposal

    log: list[str] = []
    audited = Audited(Pipeline([StatelessSummary(trigger=Trigger(tokens=3_000))]), log)
    script = ScriptedAgentModel(logs=8)
    result = audit_agent(script, [audited]).run_sync('Audit logs 0-7.')
    records = [r['strategy'] for m in result.all_messages() for p in m.parts if (r := our_record(p))]
    assert records and set(records) == {'audited(pipeline(summary))'} and len(log) == len(records)


def test_ours_around_a_pipeline_or_wrapper_of_the_users_wraps_it_as_one_and_keeps_its_state() -> None:
    # Distributing `Reassert` over a pipeline subclass of the user's (its own `__init__`) or through a wrapper of
    # the user's raised `TypeError` on every request: nothing compacted. A copyable wrapper of the user's lost the
    # state it keeps on itself to copies.
    from dataclasses import dataclass

    from pydantic_ai_compaction.runtime import WrappingCompaction

    class MyPipeline(Pipeline[None]):
        def __init__(self, *steps: Any) -> None:
            super().__init__(list(steps))

    @dataclass
    class Counted(WrappingCompaction[None]):
        inner: Any
        proposals: int = 0

        @property
        def strategy_name(self) -> str:
            return f'counted({self.inner.strategy_name})'

        async def propose(self, view: Any, ctx: Any) -> Any:
            self.proposals += 1
            return await self.inner.propose(view, ctx)

    def summary() -> StatelessSummary[None]:
        return StatelessSummary(trigger=Trigger(tokens=3_000))

    def records(capability: Any) -> list[str]:
        result = audit_agent(ScriptedAgentModel(logs=8), [capability]).run_sync('Audit logs 0-7.')
        return [r['strategy'] for m in result.all_messages() for p in m.parts if (r := our_record(p))]

    marked = InstructionSources(markers=())
    assert set(records(Reassert(MyPipeline(summary()), sources=marked))) == {'reassert+pipeline(summary)'}
    counted = Counted(Pipeline([summary()]))
    found = records(counted)
    assert found and set(found) == {'counted(pipeline(summary))'} and counted.proposals == len(found)
    assert set(records(Reassert(Counted(Pipeline([summary()])), sources=marked))) == {
        'reassert+counted(pipeline(summary))'
    }


def test_a_wrapped_pipeline_whose_step_is_replaced_between_runs_runs_the_new_step() -> None:
    # Each step wrapped is built once and kept (it runs before every request); a step replaced, even by an equal
    # one, or a wrapper's field set again, is built anew.
    events: list[CompactionEvent] = []
    pipeline = Pipeline([StatelessSummary(trigger=Trigger(tokens=3_000), observer=events.append)])
    wrapped = Reassert(pipeline, sources=InstructionSources(markers=()))
    audit_agent(ScriptedAgentModel(logs=8), [wrapped]).run_sync('Audit logs 0-7.')
    first = {e.record.strategy for e in events if e.record is not None}
    events.clear()
    pipeline.steps = [ResetToCheckpoint(trigger=Trigger(tokens=3_000), observer=events.append)]
    audit_agent(ScriptedAgentModel(logs=8), [wrapped]).run_sync('Audit logs 0-7.')
    assert first == {'reassert+summary'}
    assert {e.record.strategy for e in events if e.record is not None} == {'reassert+reset'}
    kept = StatelessSummary(trigger=Trigger(tokens=3_000), observer=events.append)
    pipeline.steps = [kept]
    events.clear()
    audit_agent(ScriptedAgentModel(logs=8), [wrapped]).run_sync('Audit logs 0-7.')
    assert {e.record.strategy for e in events if e.record is not None} == {'reassert+summary'}


async def test_a_provider_compaction_leaves_the_pin_and_the_turn_after_its_item(compaction_snapshot: Any) -> None:
    # Snapshot of the compacted history: the opening, then the provider's item, then the pin, an earlier summary's
    # place taken by the item, and the turn in progress (pydantic-ai sends nothing before the item but the system
    # prompt).
    from pydantic_ai.messages import ModelRequest, TextPart, UserPromptPart

    from pydantic_ai_compaction.runtime.pins import pin
    from pydantic_ai_compaction.testing import render, replay

    from .support import recorded_history

    history = recorded_history()
    history[3:3] = [
        ModelRequest(parts=[pin('PINNED: the audit covers March only.')]),
        ModelResponse(parts=[TextPart('Noted.')]),
    ]
    history.append(ModelRequest(parts=[UserPromptPart('Now report.')]))
    out = await replay(Native(), history, model=CompactingModel(ScriptedAgentModel()))
    assert out == compaction_snapshot
    text = render(out)
    assert text.index('(opaque provider data)') < text.index('PINNED') < text.index('Now report.')


async def test_a_provider_compaction_carries_every_change_so_far_in_order() -> None:
    # It replaces the earlier summaries, whose records held the changes restated so far, and drops the turns since:
    # carrying the records' alone, a later `Reassert` restated change A as the latest and lost B, which overrides it.
    from pydantic_ai.messages import ModelRequest, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart

    from pydantic_ai_compaction import InstructionSources, Reassert
    from pydantic_ai_compaction.testing import replay

    from .support import log_text

    def loop(messages: list[ModelMessage], start: int, prompt: str | None = None) -> None:
        if prompt:
            messages.append(ModelRequest(parts=[UserPromptPart(prompt)]))
        for index in range(start, start + 3):
            messages.append(ModelResponse(parts=[ToolCallPart('read_log', {'index': index}, tool_call_id=f'c{index}')]))
            messages.append(
                ModelRequest(parts=[ToolReturnPart('read_log', log_text(index, 40), tool_call_id=f'c{index}')])
            )
        messages.append(ModelResponse(parts=[TextPart('ok')]))

    prompts = InstructionSources(markers=())
    model = CompactingModel(ScriptedAgentModel())
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Audit logs.')])]
    loop(history, 0)
    loop(history, 3, 'A: report ids in lowercase.')
    history.append(ModelRequest(parts=[UserPromptPart('Go on.')]))
    history = [*await replay(Reassert(StatelessSummary(), sources=prompts), history, model=model)]
    history.append(ModelResponse(parts=[TextPart('ok')]))
    loop(history, 10, 'B: forget lowercase; report ids in UPPERCASE.')
    history.append(ModelRequest(parts=[UserPromptPart('Go on 2.')]))
    history = [*await replay(Native(), history, model=model)]
    history.append(ModelResponse(parts=[TextPart('ok')]))
    loop(history, 20, 'More.')
    history.append(ModelRequest(parts=[UserPromptPart('Go on 3.')]))
    history = [*await replay(Reassert(StatelessSummary(), sources=prompts), history, model=model)]
    restated = [r['restated'] for m in history for p in m.parts if (r := our_record(p)) and r.get('restated')][-1]
    assert restated == [
        'A: report ids in lowercase.',
        'Go on.',
        'B: forget lowercase; report ids in UPPERCASE.',
        'Go on 2.',
        'More.',
    ]
