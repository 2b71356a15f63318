"""Each validator rule, through the public API (strategies driven by real model calls)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import CompactionEvent, Fork, RetryPolicy, Trigger
from pydantic_ai_compaction.runtime import our_record, pairing_problems, segment
from pydantic_ai_compaction.runtime.pins import pin
from pydantic_ai_compaction.testing import replay

from .support import ScriptedAgentModel, audit_agent, fork_json, recorded_history


def replying(text: str) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(text)])

    return FunctionModel(reply)


def record_of(messages: list[ModelMessage]) -> dict[str, Any]:
    records = [r for m in messages for p in m.parts if (r := our_record(p)) is not None]
    assert len(records) == 1
    return records[0]


def exchange_order(messages: list[ModelMessage]) -> list[str]:
    return [exchange.id for exchange in segment(messages).exchanges if exchange.kind != 'boundary']


async def test_unknown_ids_are_dropped_and_reported() -> None:
    history = recorded_history()
    out = await replay(Fork(), history, model=replying(fork_json(['g2', 'g42', 'bogus', 'g2'])))
    record = record_of(out)
    assert record['rejected'] == ['g42', 'bogus', 'g2']
    assert record['kept'] == ['g0', 'g2', 'g6']
    assert record['fallback_reason'] is None
    assert exchange_order(out) == ['g0', 'g2', 'g6']


async def test_protected_and_unfinished_are_kept_when_omitted() -> None:
    history = recorded_history()
    history.insert(5, ModelRequest(parts=[pin('Budget: at most 8 logs.')]))
    assert segment(history).by_id['g3'].protected == 'pinned'
    out = await replay(Fork(), history, model=replying(fork_json([])))
    record = record_of(out)
    assert record['kept'] == ['g0', 'g3', 'g7']  # opening, pinned, in progress
    assert record['dropped'] == ['g1', 'g2', 'g4', 'g5', 'g6']
    # The pinned part is the very same object (only the message's metadata gained the exchange id),
    # and the request in progress is the same message.
    assert any(message.parts[0] is history[5].parts[0] for message in out)
    assert out[-1] is history[-1]


async def test_reversed_ids_come_back_in_original_order() -> None:
    history = recorded_history()
    out = await replay(Fork(), history, model=replying(fork_json(['g5', 'g3', 'g1'])))
    assert record_of(out)['kept'] == ['g0', 'g1', 'g3', 'g5', 'g6']
    assert exchange_order(out) == ['g0', 'g1', 'g3', 'g5', 'g6']
    assert pairing_problems(out) == []


@pytest.mark.parametrize(
    ('reply', 'reason'),
    [
        ('{"keep": ["g1"], "summary": ', 'unparseable'),
        ('I think we should keep g1.', 'unparseable'),
        ('{"keep": "g1", "summary": {"rules": [], "facts": [], "progress": "", "next_step": ""}}', 'schema'),
        ('{"keep": ["g1"]}', 'schema'),
        ('', 'empty'),
        ('{"keep": [], "summary": {"rules": [], "facts": [], "progress": "", "next_step": ""}}', 'empty'),
    ],
)
async def test_malformed_replies_fall_back_to_the_last_four_exchanges(reply: str, reason: str) -> None:
    history = recorded_history()
    out = await replay(Fork(), history, model=replying(reply))
    record = record_of(out)
    assert record['fallback_reason'] == reason
    # Seed 004: the last four finished exchanges (g2..g5) besides the opening and the exchange in
    # progress (g6), which does not count among the four; a boundary says what went.
    assert record['kept'] == ['g0', 'g2', 'g3', 'g4', 'g5', 'g6']
    assert record['dropped'] == ['g1']
    boundary = next(p for m in out for p in m.parts if our_record(p))
    assert '(g1, about' in (boundary.content or '') and reason in (boundary.content or '')


@pytest.mark.parametrize(('steps', 'dropped'), [(3, []), (4, []), (5, []), (6, ['g1']), (7, ['g1', 'g2'])])
async def test_the_fallback_keeps_the_last_four_however_few_are_droppable(steps: int, dropped: list[str]) -> None:
    # Fewer droppable exchanges than four: all of them stay, so the fallback removes nothing and leaves no boundary
    # (three droppable exchanges once kept only the last one: a slice with a negative start).
    history = recorded_history(steps)
    out = await replay(Fork(), history, model=replying('not JSON'))
    records = [r for m in out for p in m.parts if (r := our_record(p)) is not None]
    if not dropped:
        assert records == [] and exchange_order(out) == exchange_order(history)
    else:
        assert records[0]['dropped'] == dropped and records[0]['fallback_reason'] == 'unparseable'
        assert exchange_order(out) == [e for e in exchange_order(history) if e not in dropped]


async def test_free_variant_without_keep_line_falls_back() -> None:
    out = await replay(Fork(variant='free'), recorded_history(), model=replying('Summary without a keep line.'))
    assert record_of(out)['fallback_reason'] == 'unparseable'


def test_a_compactor_that_keeps_raising_gives_the_fallback_and_the_run_finishes() -> None:
    def always_500(messages: list[ModelMessage], kind: str) -> str:
        raise ModelHTTPError(status_code=500, model_name='test', body='upstream broke')

    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=8, compactor=always_500)
    retry = RetryPolicy(attempts=3, initial_wait=0, max_wait=0)
    agent = audit_agent(script, [Fork(trigger=Trigger(tokens=3_000), retry=retry, observer=events.append)])
    result = agent.run_sync('Audit.')
    assert result.output == 'report: done'
    compactions = [e for e in events if e.kind == 'compacted']
    assert compactions
    for event in compactions:
        assert event.record is not None
        assert event.record.fallback_reason == 'compactor_error'
        assert 'ModelHTTPError' in (event.record.detail or '')
        assert event.record.compactor_usage.failed_attempts == 3
    # Three attempts per compaction call; calls whose fallback would remove nothing leave no boundary.
    forks = script.calls.count('fork')
    assert forks % 3 == 0 and forks >= 3 * len(compactions)
    assert pairing_problems(result.all_messages()) == []
