"""A curator model that cannot run is the user's setup, said once as a `SetupWarning`, as `Tiered` says it."""

from __future__ import annotations

import warnings

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import CuratedSelection, Orientation
from pydantic_ai_compaction.runtime.degraded import SetupWarning


def _agent(capability: CuratedSelection[None]) -> Agent[None, str]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart('report: done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': len(messages)})])

    agent = Agent(FunctionModel(respond), capabilities=[capability])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'log {index}: service=api status=ok'

    return agent


def _two_turns(agent: Agent[None, str]) -> list[str]:
    first = agent.run_sync('Audit log 1.')
    second = agent.run_sync('Now audit log 2.', message_history=first.all_messages())
    return [first.output, second.output]


@pytest.mark.parametrize('view', [CuratedSelection, Orientation])
def test_a_curator_model_that_cannot_run_is_a_setup_warning(view: type[CuratedSelection[None]]) -> None:
    with pytest.warns(SetupWarning, match=rf'{view.__name__}: the curator cannot run \(UserError: Unknown model'):
        outputs = _two_turns(_agent(view(model='nosuchprovider:curator')))
    # The run goes on with the fallback selection.
    assert outputs == ['report: done', 'report: done']


def test_a_curator_that_fails_for_another_reason_is_not_a_setup_warning() -> None:
    def curator(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError('the curator service is down')

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        outputs = _two_turns(_agent(CuratedSelection(model=FunctionModel(curator))))
    assert outputs == ['report: done', 'report: done']
    assert [w for w in caught if issubclass(w.category, SetupWarning)] == []


@pytest.mark.parametrize(('status', 'setup'), [(401, True), (403, True), (404, True), (429, False), (500, False)])
def test_a_provider_refusing_the_key_or_the_model_is_a_setup_warning(status: int, setup: bool) -> None:
    """A refused key (401), a model the key may not use (403) or one the provider does not know (404) fails every
    call alike: said as a `SetupWarning`; a rate limit or a server error is a passing fault, not said."""
    from pydantic_ai.exceptions import ModelHTTPError

    def curator(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(status_code=status, model_name='curator', body={'error': 'no'})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        outputs = _two_turns(_agent(CuratedSelection(model=FunctionModel(curator))))
    assert outputs == ['report: done', 'report: done']
    said = [str(w.message) for w in caught if issubclass(w.category, SetupWarning)]
    assert bool(said) is setup
    assert all(f'status_code: {status}' in text for text in said)


@pytest.mark.parametrize('view', [CuratedSelection, Orientation])
def test_a_curator_reply_that_fails_a_check_is_reported_once_per_user_request(
    view: type[CuratedSelection[None]],
) -> None:
    """A curator that copies the prompt's example was refused (rightly) without a trace: no event, no warning, so a
    user whose curator never works could not find out. Each refused curation is now an `ignored` event."""
    import json

    from pydantic_ai_compaction import CompactionEvent
    from pydantic_ai_compaction.processors.views.curation import CURATOR_EXAMPLE

    calls: list[int] = []

    def literal(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[TextPart(json.dumps(CURATOR_EXAMPLE))])

    events: list[CompactionEvent] = []
    capability = view(model=FunctionModel(literal), observer=events.append)
    assert _two_turns(_agent(capability)) == ['report: done', 'report: done']
    refused = [e for e in events if e.kind == 'ignored']
    assert len(calls) == 2 and len(refused) == 2  # one curation per user request, each refused
    assert all(e.reason == 'fallback' and e.strategy == view.__name__ for e in refused)
    assert all(e.detail is not None and e.detail.startswith('unfilled') for e in refused)
    assert all('BoundedSelection' in (e.detail or '') for e in refused)


def test_a_refused_curation_s_event_shows_no_secret_and_is_bounded() -> None:
    import json

    from pydantic_ai_compaction import CompactionEvent

    secret = 'sk-liveA1b2C3d4E5f6G7h8J9k0L1m2'

    def leaking(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reply = {
            'focal': [secret, 'x' * 200_000],
            'orientation': {'relevant_state': 's', 'required': [], 'prohibited': []},
        }
        return ModelResponse(parts=[TextPart(json.dumps(reply))])

    events: list[CompactionEvent] = []
    assert _two_turns(_agent(CuratedSelection(model=FunctionModel(leaking), observer=events.append)))
    refused = [e for e in events if e.reason == 'fallback']
    assert len(refused) == 2
    for event in refused:
        assert event.detail is not None and secret not in event.detail and '[secret]' in event.detail
        assert len(event.detail) < 600
