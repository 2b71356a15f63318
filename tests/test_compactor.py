"""Model calls made for compaction: transient retries, context-overflow retry, usage accounting."""

from __future__ import annotations

import pytest
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, RunUsage

from pydantic_ai_compaction import Fork, RetryPolicy, StatelessSummary
from pydantic_ai_compaction.runtime import our_record
from pydantic_ai_compaction.runtime.degraded import SetupWarning
from pydantic_ai_compaction.testing import replay

from .support import fork_json, recorded_history

NO_WAIT = RetryPolicy(attempts=3, initial_wait=0, max_wait=0)


def record_of(messages: list[ModelMessage]) -> dict[str, object]:
    return next(r for m in messages for p in m.parts if (r := our_record(p)) is not None)


async def test_transient_errors_are_retried_and_usage_counts_once() -> None:
    attempts: list[int] = []

    def flaky(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        attempts.append(1)
        if len(attempts) == 1:
            raise ModelHTTPError(status_code=429, model_name='test', body='slow down')
        if len(attempts) == 2:
            raise TimeoutError('read timed out')
        return ModelResponse(
            parts=[TextPart(fork_json(['g5']))], usage=RequestUsage(input_tokens=900, output_tokens=50)
        )

    usage = RunUsage()
    out = await replay(Fork(retry=NO_WAIT), recorded_history(), model=FunctionModel(flaky), usage=usage)
    record = record_of(out)
    assert len(attempts) == 3
    assert record['fallback_reason'] is None
    assert record['compactor_usage'] == {
        'requests': 1,
        'failed_attempts': 2,
        'input_tokens': 900,
        'output_tokens': 50,
        'cache_read_tokens': 0,
        'cache_write_tokens': 0,
    }
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (1, 900, 50)


async def test_non_transient_errors_are_not_retried() -> None:
    attempts: list[int] = []

    def unauthorized(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        attempts.append(1)
        raise ModelHTTPError(status_code=401, model_name='test', body='bad key')

    # A refused key is the user's setup: said (a `SetupWarning`), and the compaction falls back.
    with pytest.warns(SetupWarning, match='the compactor cannot run.*401'):
        out = await replay(StatelessSummary(retry=NO_WAIT), recorded_history(), model=FunctionModel(unauthorized))
    assert len(attempts) == 1
    assert record_of(out)['fallback_reason'] == 'compactor_error'


async def test_context_overflow_retries_once_without_the_oldest_unprotected_exchanges() -> None:
    seen: list[int] = []

    def small_window(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        seen.append(returns)
        if returns > 4:
            raise ModelContextWindowExceededError('test', 'maximum context length exceeded')
        return ModelResponse(parts=[TextPart(fork_json(['g4']))])

    out = await replay(Fork(retry=NO_WAIT), recorded_history(), model=FunctionModel(small_window))
    record = record_of(out)
    assert seen == [6, 3]  # no transient retry of the overflow; one retry with a smaller view
    assert record['view_reduced'] == ['g1', 'g2', 'g3']  # about half the droppable tokens
    assert record['fallback_reason'] is None
    assert record['kept'] == ['g0', 'g4', 'g6']


async def test_overflow_that_persists_gives_the_fallback() -> None:
    def never_fits(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(status_code=400, model_name='test', body={'error': {'code': 'context_length_exceeded'}})

    out = await replay(Fork(retry=NO_WAIT), recorded_history(), model=FunctionModel(never_fits))
    record = record_of(out)
    assert record['fallback_reason'] == 'context_overflow'
    assert record['kept'] == ['g0', 'g2', 'g3', 'g4', 'g5', 'g6']


@pytest.mark.parametrize('limit', [3, 4, 5, 6, 7])
@pytest.mark.parametrize('strategy', ['fork', 'summary'])
def test_a_compaction_never_takes_the_run_past_its_request_limit(strategy: str, limit: int) -> None:
    # pydantic-ai checks the limits before the hooks: a compactor request made there and the agent's request after
    # it both went out when one more was allowed (`request_limit=3` sent four).
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.usage import UsageLimits

    from pydantic_ai_compaction import CompactionEvent, Trigger

    from .support import ScriptedAgentModel, audit_agent

    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=8, compactor=lambda messages, kind: fork_json([]) if kind == 'fork' else 'done')
    trigger, keep = Trigger(tokens=1_500), 1
    capability = (
        Fork(trigger=trigger, observer=events.append, fallback_keep_last=keep)
        if strategy == 'fork'
        else StatelessSummary(trigger=trigger, observer=events.append, fallback_keep_last=keep)
    )
    with pytest.raises(UsageLimitExceeded):
        audit_agent(script, [capability], lines=80).run_sync(
            'Audit logs 0-7.', usage_limits=UsageLimits(request_limit=limit)
        )
    assert len(script.calls) == limit, script.calls
    records = [e.record for e in events if e.record is not None]
    called = [r for r in records if r.fallback_reason != 'usage_limit']
    # Each compaction either called its model once (room was left for the agent's request) or fell back without one.
    assert len([call for call in script.calls if call != 'agent']) == len(called)
    assert [r.fallback_reason for r in records if r not in called] == ['usage_limit'] * (len(records) - len(called))


def test_a_compactor_retries_no_more_often_than_the_request_limit_leaves_room_for() -> None:
    # Each attempt reaches the provider: with room for one request besides the agent's, three were made.
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.usage import UsageLimits

    from pydantic_ai_compaction import CompactionEvent, Trigger

    from .support import ScriptedAgentModel, audit_agent

    def busy(messages: list[ModelMessage], kind: str) -> str:
        raise ModelHTTPError(status_code=503, model_name='test', body='overloaded')

    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=8, compactor=busy)
    retry = RetryPolicy(attempts=3, initial_wait=0.0, max_wait=0.0)
    capability = StatelessSummary(
        trigger=Trigger(tokens=1_500), retry=retry, observer=events.append, fallback_keep_last=1
    )
    with pytest.raises(UsageLimitExceeded):
        audit_agent(script, [capability], lines=80).run_sync(
            'Audit logs 0-7.', usage_limits=UsageLimits(request_limit=5)
        )
    # The first compaction (three requests made) has room for one attempt, the next ones for none.
    assert script.calls.count('summary') == 1, script.calls
    reasons = [e.record.fallback_reason for e in events if e.record is not None]
    assert reasons[0] == 'compactor_error' and set(reasons[1:]) <= {'usage_limit'}


def test_a_compaction_s_failed_attempts_count_against_the_room_for_its_next_request() -> None:
    # A retried summary's failed attempt reached the provider, and no usage counts it: the omissions pass after it got
    # the room again, and the run sent one request more than its limit.
    from pydantic_ai import RunContext
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import UsageLimits

    from pydantic_ai_compaction.runtime.compactor import check_usage_limits
    from pydantic_ai_compaction.runtime.context import CompactionContext

    run = RunContext[None](
        deps=None, model=TestModel(), usage=RunUsage(requests=3), usage_limits=UsageLimits(request_limit=6)
    )
    ctx = CompactionContext(run=run, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
    assert check_usage_limits(ctx) == 2  # six, less three made and the agent's own
    ctx.usage.failed_attempts = 1
    assert check_usage_limits(ctx) == 1
    ctx.usage.failed_attempts = 2
    with pytest.raises(UsageLimitExceeded):
        check_usage_limits(ctx)
