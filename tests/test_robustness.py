"""Compaction never fails a run and never loses what it must keep: regressions of real failure modes."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, TextPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import CompactionEvent, Fork, Native, ResetToCheckpoint, RetryPolicy, Switch, Trigger
from pydantic_ai_compaction.processors.strategies.fork import Fork as ForkClass
from pydantic_ai_compaction.runtime import our_record, pairing_problems, segment
from pydantic_ai_compaction.testing import replay

from .support import ScriptedAgentModel, Unprintable, audit_agent, fork_json, recorded_history

TRIGGER = Trigger(tokens=3_000)


@pytest.mark.parametrize('strategy', [Native(trigger=TRIGGER), ResetToCheckpoint(trigger=TRIGGER)])
def test_the_opening_request_survives_compactions_across_runs(strategy: Any) -> None:
    script = ScriptedAgentModel(logs=3)
    agent = audit_agent(script, [strategy])
    history: list[ModelMessage] | None = None
    for turn in range(4):
        script.step = 0
        result = agent.run_sync(f'Audit round {turn}.', message_history=history)
        history = result.all_messages()
        # pydantic-ai merges the opening request with a boundary right after it at run start;
        # the opening must still be there, first, with its system prompt.
        first = history[0]
        assert isinstance(first, ModelRequest)
        assert any(isinstance(p, SystemPromptPart) for p in first.parts)
        assert segment(history).exchanges[0].kind == 'opening'
        assert pairing_problems(history) == []


def test_a_raising_observer_or_predicate_does_not_fail_the_run() -> None:
    def broken_observer(event: CompactionEvent) -> None:
        raise RuntimeError('observer bug')

    def broken_predicate(state: object) -> bool:
        raise ZeroDivisionError

    for capability in (
        Fork(trigger=TRIGGER, observer=broken_observer),
        Switch(when=broken_predicate, then=Fork(trigger=TRIGGER), otherwise=Native(trigger=TRIGGER)),
    ):
        script = ScriptedAgentModel(logs=5, compactor=lambda messages, kind: fork_json([]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            result = audit_agent(script, [capability]).run_sync('Audit.')
        assert result.output == 'report: done'
        assert any(issubclass(w.category, RuntimeWarning) for w in caught)


async def test_a_proposal_that_keeps_everything_over_the_trigger_falls_back() -> None:
    history = recorded_history()
    keep_all = fork_json(['g1', 'g2', 'g3', 'g4', 'g5'])

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(keep_all)])

    out = await replay(Fork(), history, model=FunctionModel(reply))
    record = next(r for m in out for p in m.parts if (r := our_record(p)) is not None)
    assert record['fallback_reason'] == 'kept_all'
    assert record['dropped'] == ['g1']


def test_fork_calls_are_prepared_like_agent_requests() -> None:
    prepared: list[int] = []

    class Preparing(FunctionModel):
        def prepare_messages(
            self, messages: list[ModelMessage], model_request_parameters: ModelRequestParameters | None = None
        ) -> list[ModelMessage]:
            prepared.append(len(messages))
            return super().prepare_messages(messages, model_request_parameters)

    script = ScriptedAgentModel(logs=5, compactor=lambda messages, kind: fork_json([]))
    agent = Agent(Preparing(script), capabilities=[Fork(trigger=TRIGGER)])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        from .support import log_text

        return log_text(index)

    agent.run_sync('Audit.')
    # Agent requests and fork requests alike went through prepare_messages.
    assert len(prepared) >= len(script.calls)


@pytest.mark.harness
def test_reraise_in_compact_lets_harness_fallback_try_the_next_strategy() -> None:
    from pydantic_ai_harness.compaction import FallbackCompaction, SlidingWindowCompaction

    def down(messages: list[ModelMessage], kind: str) -> str:
        raise ModelHTTPError(status_code=503, model_name='test', body='down')

    script = ScriptedAgentModel(logs=5, compactor=down)
    no_wait = RetryPolicy(attempts=1)
    chain = [Fork(reraise_in_compact=True, retry=no_wait), SlidingWindowCompaction(max_messages=1, keep_messages=2)]
    result = audit_agent(script, [FallbackCompaction(fallback_chain=chain, max_tokens=3_000)]).run_sync('Audit.')
    assert result.output == 'report: done'
    # The fork failed and raised, so the sliding window compacted: no boundary of ours was written.
    assert script.calls.count('fork') >= 1
    assert not any(our_record(p) for m in result.all_messages() for p in m.parts)


@pytest.mark.parametrize(
    ('reply', 'keep'),
    [
        ('Here you go {as asked}: ' + fork_json(['g2']) + ' done}', ('g2',)),
        ('```json\n' + fork_json(['g3']) + '\n```', ('g3',)),
    ],
)
def test_fork_json_found_among_prose_and_fences(reply: str, keep: tuple[str, ...]) -> None:
    proposal = ForkClass().parse(reply, segment(recorded_history()))
    assert proposal.malformed is None and proposal.kept == keep


def test_fork_free_keep_line_takes_whole_ids_only() -> None:
    proposal = ForkClass(variant='free').parse('KEEP: g3, debug12, img4\nsummary text', segment(recorded_history()))
    assert proposal.kept == ('g3',)


def _raise_unprintable(*args: object) -> Any:
    raise Unprintable


@pytest.mark.parametrize(
    ('capability', 'said'),
    [
        (Fork(trigger=TRIGGER, observer=_raise_unprintable), 'compaction observer raised <Unprintable: repr() failed>'),
        (
            Switch(when=_raise_unprintable, then=Fork(trigger=TRIGGER), otherwise=Native(trigger=TRIGGER)),
            'compaction was skipped for this request: <Unprintable: repr() failed>',
        ),
        (
            ResetToCheckpoint(trigger=TRIGGER, extract=_raise_unprintable),
            'ResetToCheckpoint.extract raised <Unprintable: repr() failed>',
        ),
    ],
    ids=['observer', 'predicate', 'extract'],
)
def test_an_error_that_cannot_be_written_is_reported_by_its_type_and_fails_no_run(capability: Any, said: str) -> None:
    script = ScriptedAgentModel(logs=5, compactor=lambda messages, kind: fork_json([]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        result = audit_agent(script, [capability]).run_sync('Audit.')
    assert result.output == 'report: done'
    assert any(said in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_a_compactor_error_that_cannot_be_written_still_gives_the_fallback_and_its_reason() -> None:
    script = ScriptedAgentModel(logs=5, compactor=_raise_unprintable)
    events: list[CompactionEvent] = []
    result = audit_agent(script, [Fork(trigger=TRIGGER, observer=events.append)]).run_sync('Audit.')
    assert result.output == 'report: done'
    assert script.calls.count('fork') == 4
    # Each failed proposal is read as the runtime's fallback reads any other (here it has nothing to drop).
    details = [event.detail for event in events if event.detail]
    assert (
        details
        == [
            'the proposal failed (compactor_error: Unprintable: <Unprintable: str() failed>) '
            'and the fallback removes no exchange'
        ]
        * 4
    )
