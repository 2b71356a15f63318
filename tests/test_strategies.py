"""Every strategy in a real `Agent` tool loop that crosses the trigger at least three times."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

from pydantic_ai_compaction import (
    CompactionEvent,
    Fork,
    InstructionSources,
    Native,
    NoCompaction,
    Reassert,
    ResetToCheckpoint,
    StatelessSummary,
    Trigger,
)
from pydantic_ai_compaction.runtime import our_record, pairing_problems, segment

from .support import ScriptedAgentModel, audit_agent, fork_json, last_prompt

TRIGGER = Trigger(tokens=3_000)


def fork_reply(messages: list[Any], kind: str) -> str:
    prompt = last_prompt(messages)
    if kind == 'fork' and 'variant=json' in prompt:
        return fork_json(['g0'])
    if kind == 'fork' and 'variant=free' in prompt:
        return 'KEEP: none\nsummary: logs read so far are clean.'
    return 'summary: logs read so far are clean.'


def make(name: str, events: list[CompactionEvent]) -> Any:
    observe = events.append
    return {
        'summary': lambda: StatelessSummary(trigger=TRIGGER, observer=observe),
        'summary-sent': lambda: StatelessSummary(trigger=TRIGGER, request='sent', observer=observe),
        'fork-json-sent': lambda: Fork(trigger=TRIGGER, variant='json', request='sent', observer=observe),
        'native': lambda: Native(trigger=TRIGGER, observer=observe),
        'fork-json': lambda: Fork(trigger=TRIGGER, variant='json', observer=observe),
        'fork-free': lambda: Fork(trigger=TRIGGER, variant='free', observer=observe),
        'fork-fixed': lambda: Fork(trigger=TRIGGER, variant='fixed', observer=observe),
        'reassert': lambda: Reassert(
            Native(trigger=TRIGGER, observer=observe), sources=InstructionSources(markers=('CHANGE:',))
        ),
        'reset': lambda: ResetToCheckpoint(trigger=TRIGGER, observer=observe),
    }[name]()


@pytest.mark.parametrize(
    'name',
    [
        'summary',
        'summary-sent',
        'native',
        'fork-json',
        'fork-json-sent',
        'fork-free',
        'fork-fixed',
        'reassert',
        'reset',
    ],
)
def test_strategy_compacts_repeatedly_and_keeps_the_invariants(name: str) -> None:
    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=10, compactor=fork_reply)
    agent = audit_agent(script, [make(name, events)])

    result = agent.run_sync('Audit logs 0-9 and report.')

    assert result.output == 'report: done'
    compactions = [event for event in events if event.kind == 'compacted']
    assert len(compactions) >= 3, f'{name} compacted {len(compactions)} times'
    seen_boundaries: set[str] = set()
    for event in compactions:
        history = list(event.history)
        record = event.record
        assert record is not None and record.fallback_reason is None, record
        view = segment(history)
        # g0 is the opening request, unchanged.
        assert view.exchanges[0].id == 'g0'
        assert history[0] is result.all_messages()[0] or history[0].parts == result.all_messages()[0].parts
        # Exactly one boundary carries this compaction's record, and its id is new.
        boundaries = [our_record(part) for message in history for part in message.parts if our_record(part)]
        assert [b['boundary_id'] for b in boundaries].count(record.boundary_id) == 1
        assert record.boundary_id not in seen_boundaries
        seen_boundaries.add(record.boundary_id)
        # The exchange in progress is kept: the last request answers the call just before it.
        last, previous = history[-1], history[-2]
        assert isinstance(last, ModelRequest) and isinstance(previous, ModelResponse)
        call_ids = {part.tool_call_id for part in previous.parts if isinstance(part, ToolCallPart)}
        assert call_ids and call_ids == {part.tool_call_id for part in last.parts if isinstance(part, ToolReturnPart)}
        assert pairing_problems(history) == []
        assert record.tokens_after < record.tokens_before
    # The persisted history is the compacted one.
    assert pairing_problems(result.all_messages()) == []
    assert sum(1 for m in result.all_messages() for p in m.parts if our_record(p)) >= 1


def test_compactor_usage_counts_in_the_run_usage() -> None:
    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=10, compactor=fork_reply)
    agent = audit_agent(script, [Fork(trigger=TRIGGER, observer=events.append)])
    result = agent.run_sync('Audit logs 0-9 and report.')
    forks = script.calls.count('fork')
    events = [event for event in events if event.kind == 'compacted']
    assert forks == len(events) >= 3
    assert result.usage.requests == script.calls.count('agent') + forks
    # Every fork reply reported 100 input / 20 output tokens.
    assert all(e.record and e.record.compactor_usage.input_tokens == 100 for e in events)
    assert all(e.record and e.record.compactor_usage.output_tokens == 20 for e in events)


def test_no_compaction_records_the_crossings_it_ignores() -> None:
    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=6)
    agent = audit_agent(script, [NoCompaction(trigger=TRIGGER, observer=events.append)])
    result = agent.run_sync('Audit.')
    assert len(result.all_messages()) == 1 + 2 * 6 + 1
    assert events and all(event.kind == 'ignored' and event.record is None for event in events)
    # Once past the trigger, every later request is a crossing.
    assert [event.trigger_tokens is not None and event.trigger_tokens > 3_000 for event in events] == [True] * len(
        events
    )
    assert not any(our_record(p) for m in result.all_messages() for p in m.parts)


def test_an_unknown_compactor_model_is_reported_not_only_recorded() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from pydantic_ai_compaction import Fork, Trigger

    step = {'n': 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step['n'] += 1
        if step['n'] <= 4:
            return ModelResponse(parts=[ToolCallPart('read', {'i': step['n']}, tool_call_id=f'c{step["n"]}')])
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(model), capabilities=[Fork(model='nosuch:model', trigger=Trigger(tokens=300))])

    @agent.tool_plain
    def read(i: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'line {i} ' * 200

    with pytest.warns(RuntimeWarning, match=r'fork: the compactor cannot run \(UserError: Unknown model'):
        result = agent.run_sync('go')
    assert result.output == 'done'  # the run itself never fails
