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
