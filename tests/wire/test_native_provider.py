"""`Native` through real provider compaction over HTTP: OpenAI Responses `/responses/compact` and
Anthropic's `compaction` request, with responses shaped like pydantic-ai's recorded compaction exchanges."""

from __future__ import annotations

from typing import Any

import pytest

from pydantic_ai_compaction import CompactionEvent, Native, RetryPolicy
from pydantic_ai_compaction.runtime import pairing_problems

from .providers import Anthropic, Mock, OpenAIResponses, Payload, Provider
from .script import Script
from .test_matrix import TRIGGER, TURNS, Run, run_on, strings

FAST_RETRY = RetryPolicy(attempts=2, initial_wait=0.0, max_wait=0.0)


def is_compaction(path: str, payload: Payload) -> bool:
    return path.endswith('/responses/compact') or bool(payload.get('compaction'))


def native(events: list[CompactionEvent]) -> list[Any]:
    return [Native(trigger=TRIGGER, retry=FAST_RETRY, observer=events.append)]


def run_native(provider: Provider) -> Run:
    outcome = run_on(Mock(provider, Script()), native)
    assert outcome.outputs == ['report: done', 'report: done']
    assert outcome.mock.problems() == []
    return outcome


def compaction_items(payload: Payload) -> list[dict[str, Any]]:
    """Compaction items (Responses) or blocks (Anthropic) a request sends back."""
    items = [i for i in payload.get('input', []) if isinstance(i, dict) and i.get('type') == 'compaction']
    for message in payload.get('messages', []):
        content = message.get('content')
        if isinstance(content, list):
            items.extend(b for b in content if isinstance(b, dict) and b.get('type') == 'compaction')
    return items


@pytest.mark.parametrize('provider', [OpenAIResponses, Anthropic], ids=['openai-responses', 'anthropic'])
def test_provider_compaction_round_trips_unchanged(provider: type[Provider]) -> None:
    outcome = run_native(provider())
    exchanges = outcome.mock.exchanges
    compacting = [i for i, e in enumerate(exchanges) if is_compaction(e.path, e.payload)]
    compactions = outcome.compactions()
    assert len(compacting) == len(compactions) >= 2
    for index, event in zip(compacting, compactions, strict=True):
        assert event.record is not None
        assert (event.record.variant, event.record.fallback_reason) == ('provider', None)
        issued = exchanges[index].response
        item = issued['output'][-1] if 'output' in issued else issued['content'][0]
        # The very next request sends the item back exactly as the provider returned it.
        sent = compaction_items(exchanges[index + 1].payload)
        assert sent, exchanges[index + 1].payload
        expected = {k: item[k] for k in ('id', 'encrypted_content', 'content', 'signature') if k in item}
        assert {k: sent[-1].get(k) for k in expected} == expected
        # Usage as the recorded exchange reports it, counted once per compaction.
        usage = event.record.compactor_usage
        figures = (154, 177) if 'output' in issued else (136, 16)
        assert (usage.requests, usage.input_tokens, usage.output_tokens) == (1, *figures)
    # No emulation request was made: every compaction went through the provider.
    assert outcome.script.kinds['native'] == 0


@pytest.mark.parametrize('status', [400, 500])
@pytest.mark.parametrize('provider', [OpenAIResponses, Anthropic], ids=['openai-responses', 'anthropic'])
def test_provider_error_falls_back_with_a_reason(provider: type[Provider], status: int) -> None:
    def fail(path: str, payload: Payload) -> int | None:
        return status if is_compaction(path, payload) else None

    mock = Mock(provider(), Script(), fail=fail)
    outcome = run_on(mock, native)
    compactions = outcome.compactions()
    assert len(compactions) >= 2
    attempts = 2 if status == 500 else 1  # a 5xx is retried once (FAST_RETRY), a 4xx is not
    for event in compactions:
        record = event.record
        assert record is not None and record.fallback_reason == 'compactor_error'
        assert record.detail is not None and str(status) in record.detail
        assert record.compactor_usage.requests == 0 and record.compactor_usage.input_tokens == 0
        assert pairing_problems(list(event.history)) == []
    failed = [e for e in mock.exchanges if e.status != 200]
    # Crossings where even the fallback removes nothing make the call but write no boundary.
    assert len(failed) % attempts == 0 and len(failed) >= attempts * len(compactions)
    assert outcome.outputs == ['report: done', 'report: done']
    assert mock.problems() == []


@pytest.mark.parametrize('status', [400, 500])
def test_failed_provider_compactions_count_every_attempt(status: int) -> None:
    def fail(path: str, payload: Payload) -> int | None:
        return status if is_compaction(path, payload) else None

    outcome = run_on(Mock(OpenAIResponses(), Script(), fail=fail), native)
    attempts = 2 if status == 500 else 1
    assert [e.record.compactor_usage.failed_attempts for e in outcome.compactions() if e.record] == [attempts] * len(
        outcome.compactions()
    )


def test_a_transient_error_is_retried_and_counted() -> None:
    seen = {'compactions': 0}

    def fail(path: str, payload: Payload) -> int | None:
        if not is_compaction(path, payload):
            return None
        seen['compactions'] += 1
        return 503 if seen['compactions'] % 2 else None

    mock = Mock(OpenAIResponses(), Script(), fail=fail)
    outcome = run_on(mock, native)
    compactions = outcome.compactions()
    assert len(compactions) >= 2
    for event in compactions:
        assert event.record is not None and event.record.variant == 'provider'
        usage = event.record.compactor_usage
        assert (usage.failed_attempts, usage.requests, usage.input_tokens) == (1, 1, 154)


def test_anthropic_model_without_on_demand_compaction_is_emulated() -> None:
    outcome = run_native(Anthropic('claude-haiku-4-5'))
    compactions = outcome.compactions()
    assert len(compactions) >= 2
    assert {e.record.variant for e in compactions if e.record} == {'emulated'}
    assert all(e.record and e.record.fallback_reason is None for e in compactions)
    assert not any(e.payload.get('compaction') for e in outcome.mock.exchanges)
    assert outcome.script.kinds['native'] == len(compactions)


@pytest.mark.parametrize('provider', [OpenAIResponses, Anthropic], ids=['openai-responses', 'anthropic'])
def test_the_turn_worked_on_is_sent_after_every_provider_compaction(provider: type[Provider]) -> None:
    # pydantic-ai and the provider read from the compaction item on: kept before it, the user's turn was sent to the
    # model up to the turn's second compaction, and never after (the record still listed it as kept).
    outcome = run_native(provider())
    exchanges = outcome.mock.exchanges
    compacting = [i for i, e in enumerate(exchanges) if is_compaction(e.path, e.payload)]
    second_turn = [i for i in compacting if TURNS[1] in '\n'.join(strings(exchanges[i].payload))]
    assert len(second_turn) >= 2  # the turn was compacted more than once
    after = [
        '\n'.join(strings(e.payload))
        for e in exchanges[second_turn[0] + 1 :]
        if not is_compaction(e.path, e.payload)
        and Script.kind(outcome.mock.provider.last_user_text(e.payload)) == 'agent'
    ]
    assert after
    assert [TURNS[1] in text for text in after] == [True] * len(after)
    assert pairing_problems(outcome.history) == []


@pytest.mark.parametrize('provider', [OpenAIResponses, Anthropic], ids=['openai-responses', 'anthropic'])
def test_a_provider_compaction_follows_the_boundaries_kept_before_it(provider: type[Provider]) -> None:
    # Placed right after the opening, the provider's item came before the summaries kept from earlier compactions:
    # the newest record was no longer the last one, and the compactions were counted wrong (sequences 1, 2, 3, 3, 3).
    from pydantic_ai_compaction import StatelessSummary, Switch

    def strategies(events: list[CompactionEvent]) -> list[Any]:
        summary = StatelessSummary(trigger=TRIGGER, retry=FAST_RETRY, observer=events.append)
        native = Native(trigger=TRIGGER, retry=FAST_RETRY, observer=events.append)
        return [Switch(when=lambda state: state.compactions % 2 == 1, then=summary, otherwise=native)]

    outcome = run_on(Mock(provider(), Script()), strategies)
    events = outcome.compactions()
    assert len(events) >= 6
    assert [e.record.sequence for e in events if e.record is not None] == list(range(1, len(events) + 1))
    chosen = [e.record.strategy for e in events if e.record is not None]
    assert chosen == ['native', 'summary'] * (len(chosen) // 2) + ['native'] * (len(chosen) % 2)
    sequences = [int(record['sequence']) for record in outcome.records()]
    assert sequences == sorted(sequences)
    assert outcome.mock.problems() == []


@pytest.mark.parametrize('provider', [OpenAIResponses, Anthropic], ids=['openai-responses', 'anthropic'])
def test_verified_native_compactions_replace_each_other(provider: type[Provider]) -> None:
    # A record of `verified(native)` was not read as Native's own: every provider item stayed in the history.
    from pydantic_ai_compaction import Verified

    outcome = run_on(
        Mock(provider(), Script()),
        lambda events: [Verified(Native(trigger=TRIGGER, retry=FAST_RETRY, observer=events.append))],
    )
    assert len(outcome.compactions()) >= 2
    assert [record.get('strategy') for record in outcome.records()] == ['verified(native)']
    assert outcome.mock.problems() == []


def test_a_record_is_read_as_its_strategy_s_inside_any_wrapper() -> None:
    from pydantic_ai_compaction.runtime.validate import written_by

    for name in (
        'native',
        'reassert+native',
        'verified(native)',
        'verified(reassert+native)',
        'reassert+verified(native)',
    ):
        assert written_by(name, 'native'), name
    for name in ('fork', 'pipeline(native>fork)', 'verified(fork)', 'native2', None, 3):
        assert not written_by(name, 'native'), name


@pytest.mark.parametrize('provider', [OpenAIResponses, Anthropic], ids=['openai-responses', 'anthropic'])
def test_a_pin_is_sent_after_every_provider_compaction_beside_other_summaries(provider: type[Provider]) -> None:
    # Placed after a summary kept from another strategy, the provider's item came after the pin before it, and the
    # pin was never sent again. The item stands for every earlier boundary (the provider read them): they go.
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart

    from pydantic_ai_compaction import StatelessSummary, Switch
    from pydantic_ai_compaction.runtime.pins import pin

    from .test_matrix import log_text

    pinned = 'PINNED: the audit covers March only.'
    mock = Mock(provider(), Script())
    events: list[CompactionEvent] = []
    summary = StatelessSummary(trigger=TRIGGER, retry=FAST_RETRY, observer=events.append)
    native = Native(trigger=TRIGGER, retry=FAST_RETRY, observer=events.append)
    agent = Agent(
        mock.model(),
        capabilities=[Switch(when=lambda state: state.compactions % 2 == 1, then=summary, otherwise=native)],
        system_prompt='You audit logs.',
    )

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return log_text(index, 100)

    history = agent.run_sync(TURNS[0]).all_messages()
    history += [ModelRequest(parts=[pin(pinned)]), ModelResponse(parts=[TextPart('Noted.')])]
    for prompt in (TURNS[1], 'And the next eight.'):
        history = agent.run_sync(prompt, message_history=history).all_messages()
    requests = [e for e in mock.exchanges if not is_compaction(e.path, e.payload) and 'tools' in e.payload]
    sent = [pinned in '\n'.join(strings(e.payload)) for e in requests]
    first = sent.index(True)
    assert len(sent) - first > 5 and all(sent[first:]), sent
    sequences = [e.record.sequence for e in events if e.kind == 'compacted' and e.record is not None]
    assert sequences == list(range(1, len(sequences) + 1)) and len(sequences) >= 4
    assert mock.problems() == []


@pytest.mark.parametrize('provider', [OpenAIResponses, Anthropic], ids=['openai-responses', 'anthropic'])
def test_instruction_changes_outlive_the_boundaries_a_provider_compaction_replaces(provider: type[Provider]) -> None:
    # The summaries it replaced carried the changes restated so far in their records; gone with them, every later
    # `Reassert` compaction restated nothing.
    from pydantic_ai_compaction import InstructionSources, Reassert, StatelessSummary, Switch

    def strategies(events: list[CompactionEvent]) -> list[Any]:
        summary = StatelessSummary(trigger=TRIGGER, retry=FAST_RETRY, observer=events.append)
        reassert = Reassert(summary, sources=InstructionSources(markers=('CHANGE:',)))
        native = Native(trigger=TRIGGER, retry=FAST_RETRY, observer=events.append)
        return [Switch(when=lambda state: state.compactions % 2 == 0, then=reassert, otherwise=native)]

    outcome = run_on(Mock(provider(), Script()), strategies)
    records = [e.record for e in outcome.compactions() if e.record is not None]
    restating = [r.restated for r in records if r.strategy == 'reassert+summary']
    first = next(index for index, restated in enumerate(restating) if restated)
    assert len(restating) - first >= 3
    # Each restates the change; one made once the second turn went on past its prompt lists that prompt after it
    # (the restatement follows the prompt, and the change was said before it).
    change = 'CHANGE: report ids in lowercase'
    assert all(restated in ((change,), (change, TURNS[1])) for restated in restating[first:]), restating
    assert outcome.mock.problems() == []
